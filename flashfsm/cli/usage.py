"""The command's usage: its exit codes and how its help reads (what `flashfsm --help` needs).

Kept apart from `flashfsm.cli.common` so that printing the help, or the version, loads no
command's code: the exit codes (`EXIT_CODE_TABLE`, rendered at the end of `flashfsm --help`
by `exit_codes_text`), `PlainCommand` (the plain help every command's reads) and
`version_text`.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from typer.core import TyperArgument, TyperCommand

from flashfsm.events.failures import FailureKind

# --- exit codes ---------------------------------------------------------------------------


class ExitCode(NamedTuple):
    """One exit code of the `flashfsm` command: its number, its name and what it means."""

    code: int
    name: str
    meaning: str


EXIT_USAGE = 1  # an input error: a missing or unreadable store, file or stream; a bad value
EXIT_PARSER = 2  # the command line's own usage error (the parser's)
EXIT_DISAGREES = 3  # `replay --verify` found a disagreement
EXIT_SWEEP_ERRORS = 4  # `sweep` ran, but a listing, a health read or a delete failed
EXIT_NO_VERDICT = 5  # the log holds no verdict yet
EXIT_GATE = 6  # `whatif --all`: a `--fail-if` threshold was crossed
EXIT_DAMAGED = 7  # a store-wide command skipped damaged streams (each flagged: `read_all_streams`)
EXIT_FENCED = 8  # `supervise`: a newer incarnation of the replica's name took over

#: Exit code of a command that reports a verdict, by failure kind (None: success).
EXIT_CODES: dict[str | None, int] = {
    None: 0,
    FailureKind.JOB_FAILED: 10,
    FailureKind.JOB_PREEMPTED: 11,
    FailureKind.NO_CAPACITY: 12,
    FailureKind.STALLED: 13,
    FailureKind.POLL_ERROR: 14,
    FailureKind.LOST: 15,
    FailureKind.CANCELLED: 16,
    FailureKind.NO_CANDIDATES: 17,
    FailureKind.UNAUTHORIZED: 18,
    FailureKind.LOST_UNVERIFIED: 19,
    FailureKind.SLOW_START: 20,
}

_FAILURE_MEANINGS: dict[str, str] = {
    FailureKind.JOB_FAILED: "the job's own code failed (not retried)",
    FailureKind.JOB_PREEMPTED: "the platform or the worker's infrastructure ended it",
    FailureKind.NO_CAPACITY: "never scheduled: no capacity for the GPU class",
    FailureKind.STALLED: "no progress, a crash-looping worker, or the deadline",
    FailureKind.POLL_ERROR: "status reads kept failing, or a deploy or submit failed",
    FailureKind.LOST: "the job no longer exists on RunPod",
    FailureKind.CANCELLED: "the run was cancelled",
    FailureKind.NO_CANDIDATES: "the run had no GPU candidate to try",
    FailureKind.UNAUTHORIZED: "RunPod refused the API key (401/403; not retried)",
    FailureKind.LOST_UNVERIFIED: "RunPod forgot the job unwatched; nothing says it finished",
    FailureKind.SLOW_START: "capacity found, but the start outlasted the start grace",
}

#: Every exit code the command uses, in order: its help ends with this table (rendered by
#: `exit_codes_text`), and the docs copy it.
EXIT_CODE_TABLE: tuple[ExitCode, ...] = (
    ExitCode(0, "ok", "success (replay, explain, watch: a successful verdict)"),
    ExitCode(EXIT_USAGE, "input", "a missing or unreadable store, file or stream; bad value"),
    ExitCode(EXIT_PARSER, "usage", "a command line the parser rejects"),
    ExitCode(EXIT_DISAGREES, "disagrees", "replay --verify: today's rules decide otherwise"),
    ExitCode(EXIT_SWEEP_ERRORS, "sweep_errors", "sweep ran, but a list, read or delete failed"),
    ExitCode(EXIT_NO_VERDICT, "no_verdict", "no verdict yet: the log is still open"),
    ExitCode(EXIT_GATE, "gate", "whatif --all: a --fail-if threshold was crossed"),
    ExitCode(EXIT_DAMAGED, "damaged", "a store-wide command skipped damaged streams (flagged)"),
    ExitCode(EXIT_FENCED, "fenced", "supervise: a newer incarnation of its --owner took over"),
    *(
        ExitCode(code, str(kind), _FAILURE_MEANINGS[kind])
        for kind, code in EXIT_CODES.items()
        if kind is not None
    ),
)


def exit_codes_text() -> str:
    """The exit-code table as the help prints it: one line per code."""
    width = max(len(e.name) for e in EXIT_CODE_TABLE)
    return "\n".join(f"{e.code:>2}  {e.name:<{width}}  {e.meaning}" for e in EXIT_CODE_TABLE)


# --- help ---------------------------------------------------------------------------------


def _argument_name(param: TyperArgument) -> str:
    name = (param.metavar or param.name or "").upper()
    return f"{name}..." if param.nargs != 1 else name


class PlainCommand(TyperCommand):
    """A command whose help reads plainly: arguments by their upper-case names (`SOURCE`,
    `[STREAMS]...`), options by their metavar (else their upper-case name), flags alone —
    no `<bool>`, no `<str>`, no `{source}`."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """`[OPTIONS]`, then each argument (an optional one in brackets)."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The Arguments and Options sections, each argument by its name alone."""
        args: list[tuple[str, str]] = []
        opts: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if isinstance(param, TyperArgument):
                args.append((_argument_name(param), record[1]))
            elif param.metavar is None and param.name:  # `--port <int>` reads `--port PORT`
                name = re.sub(r" <[^>]*>(\.\.\.)?", f" {param.name.upper()}", record[0])
                opts.append((name, record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def version_text() -> str:
    """`flashfsm <version>`, from the installed distribution's metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"flashfsm {version('flashfsm')}"
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "flashfsm (version unknown: not installed)"
