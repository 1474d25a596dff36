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
(supervise, runs), `ui` (the web view) and `tools` (demo, simulator, diagram); what they
share is in `common`. This module builds the one `app` from them.
"""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from flashfsm import sigint
from flashfsm.cli import cost, fleet, logs, store, tools, ui, workers
from flashfsm.cli.common import (
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
    Source,
    console,
    exit_codes_text,
    install_notices,
    job_source,
    load_events,
    open_source,
    print_timeline,
    print_verdict,
    version_text,
)
from flashfsm.cli.logs import parse_settings

#: The app's help: what it is, then every exit code (`\b` keeps the table's lines as they are).
APP_HELP = (
    "An event-sourced state machine for GPU training jobs on RunPod serverless.\n\n"
    "SOURCE is a stream of the store (--store URL) or a .jsonl file. Commands that read "
    "create and change nothing.\n\n"
    "\b\nExit codes:\n" + exit_codes_text()
)

app = typer.Typer(
    name="flashfsm",
    help=APP_HELP,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help is plain text: never markup (a `[postgres]` stays)
    pretty_exceptions_show_locals=False,  # a local may hold a key
)


def _print_version(value: bool) -> None:
    if value:
        console.print(version_text())
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
    install_notices(ctx)


#: Every command, by name, in the order `--help` lists them.
COMMANDS = (
    ("replay", logs.replay_command),
    ("diagram", tools.diagram_command),
    ("simulator", tools.simulator_command),
    ("demo", tools.demo_command),
    ("explain", logs.explain_command),
    ("why-not", logs.why_not_command),
    ("whatif", logs.whatif_command),
    ("cost", cost.cost_command),
    ("timeline", logs.timeline_command),
    ("logs", workers.logs_command),
    ("watch", logs.watch_command),
    ("ls", store.ls_command),
    ("export", store.export_command),
    ("import", store.import_command),
    ("sweep", store.sweep_command),
    ("supervise", fleet.supervise_command),
    ("runs", fleet.runs_command),
    ("ui", ui.ui_command),
)
for _name, _command in COMMANDS:
    app.command(_name, cls=PlainCommand)(_command)


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
