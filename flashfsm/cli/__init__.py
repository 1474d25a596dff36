"""The `flashfsm` command: the demo and the post-mortem tools.

Every command that reads a log takes `--store URL` (default: `$FLASHFSM_STORE`, else the
user's SQLite file) and prints with rich; `--json` prints machine-readable output instead.
SOURCE is a stream of the store or a `.jsonl` file, of any kind the library writes (a job's,
a run's or a sweeper's: `flashfsm.views.stream_kind`); a run's stream stands for the job
stream of its last attempt where a command reads one job (`explain`, `why-not`, `whatif`).
A command that reads creates and changes nothing: a missing store, file or stream is a
one-line error. Exit codes (`EXIT_CODE_TABLE`, printed at the end of `flashfsm --help`):
0 for success (and for a successful verdict), 1 for an input error, and one code per
failure kind so a script can route on it (`EXIT_CODES`): the commands that report a
verdict (`replay`, `explain`, `watch`) exit with its code. Credentials (the RunPod key for
`sweep`) come only from the environment.

The commands live by group: `logs` (replay, explain, why-not, whatif, timeline, watch), `cost`,
`workers` (logs: a job's worker log lines), `store` (ls, export, import, sweep), `fleet`
(supervise, runs), `ui` (the web view), `simulator` and `tools` (demo, diagram, examples);
what they share is in `common`, what the help needs in `usage`. This module builds the one
`app` from them, and loads a command's group (and what it imports) only when that command
runs: `flashfsm --help` lists every command from `COMMANDS` (its first sentence of help),
and loads none.
"""

from __future__ import annotations

import importlib
import signal
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command

from flashfsm import sigint
from flashfsm.cli.usage import (
    EXIT_CODE_TABLE,
    EXIT_CODES,
    EXIT_DISAGREES,
    EXIT_GATE,
    EXIT_NO_VERDICT,
    EXIT_PARSER,
    EXIT_SWEEP_ERRORS,
    EXIT_USAGE,
    ExitCode,
    PlainCommand,
    exit_codes_text,
    version_text,
)

if TYPE_CHECKING:
    from flashfsm.cli.common import job_source, load_events, open_source
    from flashfsm.cli.logs import parse_settings
    from flashfsm.display.logs import print_timeline, print_verdict
    from flashfsm.display.sources import Source
    from flashfsm.display.text import console

#: The app's help: what it is, then every exit code (`\b` keeps the table's lines as they are).
APP_HELP = (
    "An event-sourced state machine for GPU training jobs on RunPod serverless.\n\n"
    "SOURCE is a stream of the store (--store URL) or a .jsonl file. Commands that read "
    "create and change nothing.\n\n"
    "\b\nExit codes:\n" + exit_codes_text()
)


class Command(NamedTuple):
    """Where a command lives (`flashfsm.cli.<module>.<function>`), and the first sentence of
    its help: what `flashfsm --help` lists without loading it (tests hold it to the
    function's docstring)."""

    module: str
    function: str
    summary: str


#: Every command, by name, in the order `--help` lists them.
COMMANDS: tuple[tuple[str, Command], ...] = (
    (
        "replay",
        Command(
            "logs",
            "replay_command",
            "Replay a log: a job's timeline, timers and verdict; a run's attempts, result and "
            "last job; a sweeper's idle timers (exit code by failure kind).",
        ),
    ),
    (
        "diagram",
        Command(
            "tools",
            "diagram_command",
            "The job state machine, drawn from the transition table the machine is built from.",
        ),
    ),
    (
        "simulator",
        Command(
            "simulator",
            "simulator_command",
            "Serve the RunPod + Hugging Face simulator for an orchestrator's tests, in another "
            "process, until Ctrl-C.",
        ),
    ),
    (
        "demo",
        Command(
            "tools",
            "demo_command",
            "Run a small fleet through `supervise_run` against the bundled simulator into the "
            "demo's own store, then show each run's attempts and each attempt's post-mortem, "
            "draw the runs, and name the commands that explore them.",
        ),
    ),
    (
        "examples",
        Command(
            "tools",
            "examples_command",
            "Print the directory of the example logs the package ships, or copy them into DEST.",
        ),
    ),
    (
        "explain",
        Command(
            "logs",
            "explain_command",
            "Why the verdict fired: the rule, its why, its evidence and the numbers behind it "
            "(a run: its last job's; a sweeper: what it reaped and what it is timing).",
        ),
    ),
    (
        "why-not",
        Command(
            "logs",
            "why_not_command",
            "Why RULE did not fire at the verdict (or by the end of the log), with its numbers.",
        ),
    ),
    (
        "whatif",
        Command(
            "logs",
            "whatif_command",
            "Replay the recorded observations under another policy; report the first "
            "difference (with --all: over every recorded job, the verdicts changed, time and "
            "money).",
        ),
    ),
    (
        "cost",
        Command(
            "cost",
            "cost_command",
            "What runs and jobs cost and why: billed seconds and money by cause (cold start, "
            "training, stall, preemption, failure, idle) per attempt, per run and in total.",
        ),
    ),
    (
        "timeline",
        Command(
            "logs",
            "timeline_command",
            "Draw a run (attempts as lanes), a job log, or a sweeper's idle timers (endpoints "
            "as lanes) as a self-contained SVG or HTML file.",
        ),
    ),
    (
        "logs",
        Command(
            "workers",
            "logs_command",
            "The worker log lines a job's stream recorded before its verdict, with the worker "
            "that took the job (a run: each attempt's job).",
        ),
    ),
    (
        "watch",
        Command(
            "logs",
            "watch_command",
            "A live view of a job or run (state, time in state, time left on the next timer), "
            "or of a sweeper (its idle timers running).",
        ),
    ),
    (
        "ls",
        Command(
            "store",
            "ls_command",
            "The store's streams: job, run or sweeper, with their state, verdict and time span.",
        ),
    ),
    (
        "export",
        Command(
            "store",
            "export_command",
            "Copy streams to another store (keeping names, seqs and ids); resumable.",
        ),
    ),
    (
        "import",
        Command(
            "store",
            "import_command",
            "Copy streams from another store (or one .jsonl file) into this one; resumable.",
        ),
    ),
    (
        "sweep",
        Command(
            "store",
            "sweep_command",
            "Delete flash endpoints that stayed idle (RUNPOD_API_KEY from the environment).",
        ),
    ),
    (
        "supervise",
        Command(
            "fleet",
            "supervise_command",
            "Run one fleet replica: watch the store's open jobs and runs (SIGTERM drains).",
        ),
    ),
    (
        "runs",
        Command(
            "fleet",
            "runs_command",
            "Hand a job or a run to the fleet: record it and return (`runs add FILE.json`).",
        ),
    ),
    (
        "ui",
        Command(
            "ui",
            "ui_command",
            "Serve a web view of the store: runs and jobs, a run's picture and explanations, "
            "costs, the fleet, updated live; read-only unless --allow-cancel.",
        ),
    ),
)
_TABLE = dict(COMMANDS)


def command_function(entry: Command) -> Any:
    """A command's function, its module imported (and with it what the command needs)."""
    return getattr(importlib.import_module(f"flashfsm.cli.{entry.module}"), entry.function)


def build_command(name: str, entry: Command) -> Any:
    """The command `name` as the app runs it (a click command of typer's, plain help)."""
    one = typer.Typer(add_completion=False, rich_markup_mode=None)
    one.command(name, cls=PlainCommand)(command_function(entry))
    return get_command(one)


class CommandTable(MutableMapping[str, Any]):
    """The app's commands by name: every one of `COMMANDS` is there, built on first use."""

    def __init__(self, built: Mapping[str, Any]) -> None:
        self.built = dict(built)

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            if name not in _TABLE:
                raise KeyError(name)
            self.built[name] = build_command(name, _TABLE[name])
        return self.built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError(f"the command {name!r} cannot be removed")

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*_TABLE, *self.built]))

    def __len__(self) -> int:
        return len(_TABLE.keys() | self.built.keys())


class LazyGroup(TyperGroup):
    """The app's group of commands: each loaded when it runs (or its own help is asked
    for); the app's help lists them all from `COMMANDS` and loads none."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = CommandTable(self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command's name, in `COMMANDS`' order (none loaded)."""
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The help's Commands section, each command's summary cut to the width as click
        cuts a command's help (none loaded)."""
        limit = formatter.width - 6 - max(len(name) for name, _ in COMMANDS)
        rows = [
            (name, TyperCommand(name, help=entry.summary).get_short_help_str(limit))
            for name, entry in COMMANDS
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="flashfsm",
    help=APP_HELP,
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help is plain text: never markup (a `[postgres]` stays)
    pretty_exceptions_show_locals=False,  # a local may hold a key
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def _app(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print flashfsm's version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    from flashfsm.cli.common import install_notices

    install_notices(ctx)


def main() -> None:
    """Console-script entry point. Ctrl-C exits 130, never with a traceback: a command
    winds down what it started (a run in progress is cancelled) and typer exits 130; a
    Ctrl-C outside a command's code is caught here, and before and after `main` by
    `flashfsm.sigint`."""
    guarded = sigint.guarded()
    if guarded:  # the command's code handles Ctrl-C itself: hand it back to Python
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        app()
    except KeyboardInterrupt:
        raise SystemExit(sigint.EXIT_INTERRUPTED) from None
    finally:
        if guarded:  # the interpreter's shutdown: a Ctrl-C exits 130 at once again
            signal.signal(signal.SIGINT, sigint.exit_interrupted)


#: What the package offers from its command groups, loaded on first use (PEP 562).
_LAZY = {
    **dict.fromkeys(("job_source", "load_events", "open_source"), "flashfsm.cli.common"),
    **dict.fromkeys(("print_timeline", "print_verdict"), "flashfsm.display.logs"),
    "Source": "flashfsm.display.sources",
    "console": "flashfsm.display.text",
    "parse_settings": "flashfsm.cli.logs",
}


def __getattr__(name: str) -> Any:
    """A name of a command group, loaded on first use and kept here after."""
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, those not loaded yet included."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "APP_HELP",
    "COMMANDS",
    "EXIT_CODES",
    "EXIT_CODE_TABLE",
    "EXIT_DISAGREES",
    "EXIT_GATE",
    "EXIT_NO_VERDICT",
    "EXIT_PARSER",
    "EXIT_SWEEP_ERRORS",
    "EXIT_USAGE",
    "ExitCode",
    "Source",
    "app",
    "console",
    "exit_codes_text",
    "job_source",
    "load_events",
    "main",
    "open_source",
    "parse_settings",
    "print_timeline",
    "print_verdict",
]
