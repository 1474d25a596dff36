"""The `flashfsm` command: the demo and the post-mortem tools.

Every command that reads a log takes `--store URL` (default: `$FLASHFSM_STORE`, else the
user's SQLite file) and prints with rich; `--json` prints machine-readable output instead.
SOURCE is a stream of the store or a `.jsonl` file, of any kind the library writes (a job's,
a run's or a sweeper's: `flashfsm.views.stream_kind`); a run's stream stands for the job
stream of its last attempt where a command reads one job (`explain`, `why-not`, `whatif`).
Exit codes: 0 for success (and for a successful verdict), 1 for a usage or input error,
and one code per failure kind so a script can route on it (`EXIT_CODES`): the commands
that report a verdict (`replay`, `explain`, `watch`) exit with its code. Credentials (the
RunPod key for `sweep`) come only from the environment.

The commands live by group: `logs` (replay, explain, why-not, whatif, timeline, watch),
`store` (ls, export, import, sweep) and `tools` (demo, simulator, diagram); what they
share is in `common`. This module builds the one `app` from them.
"""

from __future__ import annotations

import typer

from flashfsm.cli import logs, store, tools
from flashfsm.cli.common import (
    EXIT_CODES,
    EXIT_DISAGREES,
    EXIT_NO_VERDICT,
    EXIT_SWEEP_ERRORS,
    EXIT_USAGE,
    Source,
    console,
    job_source,
    load_events,
    open_source,
    print_timeline,
    print_verdict,
)
from flashfsm.cli.logs import parse_settings

app = typer.Typer(
    name="flashfsm",
    help="An event-sourced state machine for GPU training jobs on RunPod serverless.",
    no_args_is_help=True,
    add_completion=False,
)

#: Every command, by name, in the order `--help` lists them.
COMMANDS = (
    ("replay", logs.replay_command),
    ("diagram", tools.diagram_command),
    ("simulator", tools.simulator_command),
    ("demo", tools.demo_command),
    ("explain", logs.explain_command),
    ("why-not", logs.why_not_command),
    ("whatif", logs.whatif_command),
    ("timeline", logs.timeline_command),
    ("watch", logs.watch_command),
    ("ls", store.ls_command),
    ("export", store.export_command),
    ("import", store.import_command),
    ("sweep", store.sweep_command),
)
for _name, _command in COMMANDS:
    app.command(_name)(_command)


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = [
    "COMMANDS",
    "EXIT_CODES",
    "EXIT_DISAGREES",
    "EXIT_NO_VERDICT",
    "EXIT_SWEEP_ERRORS",
    "EXIT_USAGE",
    "Source",
    "app",
    "console",
    "job_source",
    "load_events",
    "main",
    "open_source",
    "parse_settings",
    "print_timeline",
    "print_verdict",
]
