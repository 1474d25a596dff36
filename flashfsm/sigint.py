"""Ctrl-C in the `flashfsm` command: exit 130 without a traceback, whenever it comes.

While a command runs, a Ctrl-C is a `KeyboardInterrupt` that the command's own code
handles (a run in progress is cancelled first, `flashfsm.runs.supervise_run`) and the CLI
turns into exit 130 (`flashfsm.cli.main`). Before that code is loaded — the command's own
modules take a while to import — and once the command is over, while the interpreter shuts
down, only Python's traceback would catch it. So when the process is the `flashfsm`
console script, the package imports this module first and `guard()` makes a SIGINT exit
130 at once (nothing has been opened yet, nothing is left to do); `main` hands Ctrl-C back
to Python for the command, and takes it back after.

Python itself cannot take a Ctrl-C before it runs the program's first line (a SIGINT while
the interpreter starts is its own fatal error); from the first line of the package on,
every moment is covered, but the last of the interpreter's shutdown (a Ctrl-C then comes
too late to change anything: the command exits with its own code).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from types import FrameType

#: The exit code of a command stopped by Ctrl-C (128 + SIGINT, what a shell reports).
EXIT_INTERRUPTED = 130
#: The console script's names (`[project.scripts]`).
COMMAND_NAMES = frozenset({"flashfsm", "flashfsm.exe"})


def exit_interrupted(signum: int, frame: FrameType | None) -> None:
    """A SIGINT handler: flush what was printed, then exit 130 at once."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing to show
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


def is_command() -> bool:
    """Whether this process is the `flashfsm` console script."""
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in COMMAND_NAMES


def guard() -> bool:
    """In the `flashfsm` command's main thread, with Python's own SIGINT handler in place:
    a SIGINT exits 130 at once from now on. Whether it did (elsewhere it changes nothing)."""
    if not is_command() or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    signal.signal(signal.SIGINT, exit_interrupted)
    # Registered first, so run last: past it Python puts its own SIGINT disposition back
    # (a Ctrl-C would kill the process), so a Ctrl-C is ignored for the last moments of
    # the shutdown, once every thread is joined and every other exit handler has run.
    atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
    return True


def guarded() -> bool:
    """Whether `guard()` is in force."""
    return signal.getsignal(signal.SIGINT) is exit_interrupted


guard()
