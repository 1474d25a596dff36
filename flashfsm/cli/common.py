"""What every command shares: the store option, sources, exit codes, JSON and printing helpers.

A SOURCE is a stream of the store or a `.jsonl` file (its directory holds the streams next
to it, such as a run's job streams). What kind of stream it is (job, run or sweeper) is
`flashfsm.views.stream_kind`'s answer, never a check of its own here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from flashfsm.adapters.jsonl import read_jsonl_file, stream_file_name
from flashfsm.adapters.stores import default_store_url, open_store
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import Concluded, Event, RunConcluded
from flashfsm.fsm import explain as ex
from flashfsm.fsm.explain import TimelineRow, timeline
from flashfsm.fsm.findings import first_line
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import Attempt, RunState, replay_run
from flashfsm.render import duration_text
from flashfsm.views import (
    IdlePeriod,
    RunView,
    SweeperRow,
    SweeperView,
    attempt_outcome,
    last_job_stream,
    run_label,
    stream_kind,
)

#: Everything printed is literal: logs carry outside text (worker output, error bodies), and
#: rich markup in it would be interpreted — a `[i]` could rejoin the pieces of a masked
#: secret, a `[/]` raise. The few styled words are `styled` parts.
console = Console(highlight=False, soft_wrap=True, markup=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain text and (text, style) parts, never read as markup."""
    return Text.assemble(*parts)


#: Exit code of a command that reports a verdict, by failure kind.
EXIT_CODES: dict[str | None, int] = {
    None: 0,
    FailureKind.JOB_FAILED: 10,
    FailureKind.JOB_PREEMPTED: 11,
    FailureKind.NO_CAPACITY: 12,
    FailureKind.STALLED: 13,
    FailureKind.POLL_ERROR: 14,
    FailureKind.LOST: 15,
}
EXIT_USAGE = 1
EXIT_NO_VERDICT = 5  # the log holds no verdict yet (2 is the parser's usage error)
EXIT_DISAGREES = 3  # `replay --verify` found a disagreement
EXIT_SWEEP_ERRORS = 4  # `sweep` ran, but a listing, a health read or a delete failed

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", help="Store URL (default: $FLASHFSM_STORE, else the user's SQLite file)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
SourceArgument = Annotated[str, typer.Argument(help="A stream of the store, or a .jsonl file.")]


def fail(message: str) -> typer.Exit:
    """Print `message` as an error; the exit (code 1) for the caller to raise."""
    console.print(styled(("error:", "red"), f" {message}"), soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


class UsageErrors:
    """Errors reading or replaying a log (or a bad value) become exit 1 naming the problem."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, (FlashFsmError, ValueError)):
            raise fail(message(exc)) from None
        return False


def message(exc: BaseException) -> str:
    """An exception as one line (a validation error: each field and what is wrong with it)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "value"
            parts.append(f"{where}: {err.get('msg')}")
        return "; ".join(parts)
    return str(exc)


# --- sources ------------------------------------------------------------------------------


@dataclass
class Source:
    """A log and a way to read the streams next to it (a run's job streams)."""

    name: str
    events: list[Event]
    load: Callable[[str], list[Event]]
    where: str  # the store URL or the file's directory


def store_url(store: str | None) -> str:
    """The store a command works on: `--store`, else the default."""
    return store or default_store_url()


def open_store_or_fail(url: str) -> Any:
    """The store at `url`, or exit 1 naming what is wrong with the URL."""
    try:
        return open_store(url)
    except (ValueError, ImportError) as exc:
        raise fail(str(exc)) from None


def read_stream(url: str, stream: str) -> list[Event]:
    """One stream of the store at `url` (exit 1 when the store or the stream is unreadable)."""
    opened = open_store_or_fail(url)
    try:
        with UsageErrors():
            return opened.read(stream)
    finally:
        opened.close()


def read_events_file(path: Path) -> list[Event]:
    """The events of one `.jsonl` file (exit 1, one line, when it is unreadable or empty)."""
    try:
        events = read_jsonl_file(path)
    except FlashFsmError as exc:
        raise fail(str(exc)) from None
    if not events:
        raise fail(f"{path} holds no events")
    return events


def open_source(source: str, store: str | None) -> Source:
    """SOURCE as a `Source`: a `.jsonl` file (its directory holds its siblings) or a stream."""
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():

        def load_file(stream: str) -> list[Event]:
            sibling = path.parent / stream_file_name(stream)
            if not sibling.is_file():
                return []
            with UsageErrors():
                return read_jsonl_file(sibling)

        return Source(path.name, read_events_file(path), load_file, str(path.parent))
    url = store_url(store)
    events = read_stream(url, source)
    if not events:
        raise fail(f"stream {source!r} is empty or missing in {url}")
    return Source(source, events, lambda stream: read_stream(url, stream), url)


def load_events(source: str, store: str | None) -> tuple[str, list[Event]]:
    """The events SOURCE names: a JSONL file, or a stream of the store."""
    src = open_source(source, store)
    return src.name, src.events


def job_source(src: Source, *, quiet: bool = False) -> tuple[str, list[Event]]:
    """The job log a command reads: SOURCE itself, or a run's last attempt's job stream.

    A sweeper's stream has none: exit 1 saying so.
    """
    kind = stream_kind(src.events)
    if kind == "sweeper":
        raise fail(f"{src.name} is a sweeper stream: job rules do not apply")
    if kind == "job":
        return src.name, src.events
    with UsageErrors():
        run = replay_run(src.events)
    stream = last_job_stream(run)
    if stream is None:
        raise fail(f"run {src.name!r} has no job stream yet (no JobQueued event)")
    events = src.load(stream)
    if not events:
        raise fail(f"run {src.name!r}: job stream {stream!r} is empty or missing")
    if not quiet:
        console.print(f"run {src.name}: its last attempt's job stream is {stream}")
    return stream, events


# --- exit codes ---------------------------------------------------------------------------


def exit_for(verdict: Concluded | None) -> int:
    """A job verdict's exit code (no verdict yet: 5)."""
    if verdict is None:
        return EXIT_NO_VERDICT
    return EXIT_CODES.get(verdict.failure, EXIT_USAGE)


def run_exit(result: RunConcluded | None) -> int:
    """A run result's exit code (no result yet: 5)."""
    if result is None:
        return EXIT_NO_VERDICT
    return 0 if result.ok else EXIT_CODES.get(result.failure, EXIT_USAGE)


# --- JSON ---------------------------------------------------------------------------------


def emit_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def row_json(row: TimelineRow) -> dict[str, Any]:
    """One timeline row of a job log."""
    return {
        "seq": row.seq,
        "at": row.at,
        "offset_s": row.offset,
        "kind": row.kind,
        "summary": row.summary,
        "state": row.state_after,
        "moved_from": row.state_before if row.moved else None,
        "armed": list(row.armed),
        "cleared": list(row.cleared),
        "progress": row.progress,
    }


def verdict_json(verdict: Concluded | None) -> dict[str, Any] | None:
    """A job's verdict, field by field."""
    if verdict is None:
        return None
    return {
        "state": verdict.state,
        "ok": verdict.ok,
        "failure": verdict.failure,
        "rule": verdict.rule,
        "detail": verdict.detail,
        "evidence": list(verdict.evidence),
        "metrics": verdict.metrics,
        "at": verdict.at,
    }


def measure_json(m: ex.Measure) -> dict[str, Any]:
    """One number a rule compared with its limit."""
    return {
        "quantity": m.quantity,
        "value": m.value,
        "op": m.op,
        "limit_name": m.limit_name,
        "limit": m.limit,
        "unit": m.unit,
        "fired": m.fired,
        "note": m.note,
        "text": m.text,
    }


def timer_json(t: ex.TimerView) -> dict[str, Any]:
    """One running timer of a job."""
    return {
        "rule": t.rule,
        "name": t.name,
        "since": t.since,
        "elapsed_s": t.elapsed,
        "limit_s": t.limit,
        "left_s": t.left,
        "text": t.text,
    }


def view_json(view: ex.WatchView) -> dict[str, Any]:
    """A job's live view."""
    nxt = view.next_timer
    return {
        "stream": view.stream,
        "state": view.state,
        "since": view.since,
        "in_state_s": view.in_state_s,
        "now": view.now,
        "last_at": view.last_at,
        "quiet_s": None if view.last_at is None else view.now - view.last_at,
        "status": view.status,
        "events": view.events,
        "poll_errors": view.poll_errors,
        "verdict": verdict_json(view.verdict),
        "next_timer": None if nxt is None else timer_json(nxt),
        "timers": [timer_json(t) for t in view.timers],
    }


def result_json(result: RunConcluded | None) -> dict[str, Any] | None:
    """A run's result."""
    if result is None:
        return None
    return {
        "ok": result.ok,
        "failure": result.failure,
        "attempts": result.attempts,
        "detail": result.detail,
        "at": result.at,
    }


def attempt_json(a: Attempt, run: RunState) -> dict[str, Any]:
    """One attempt of a run, as the run fold has it."""
    s, e = a.started, a.ended
    return {
        "attempt": s.attempt,
        "gpu_class": s.gpu_class,
        "provider": s.provider,
        "on_last_gpu": s.on_last_gpu,
        "bonus": s.bonus,
        "cache_dropped": s.cache_dropped,
        "started_at": s.at,
        "endpoint_id": a.endpoint_id,
        "job_id": a.job_id,
        "job_stream": a.job_stream,
        "submitted_at": a.submitted_at,
        "deploy_error": a.deploy_error,
        "submit_error": a.submit_error,
        "outcome": attempt_outcome(a, run),
        "ended": None
        if e is None
        else {"ok": e.ok, "failure": e.failure, "rule": e.rule, "detail": e.detail, "at": e.at},
    }


def run_view_json(rv: RunView) -> dict[str, Any]:
    """A run's live view: its state, attempts, result and its current job's view."""
    r = rv.run.result
    return {
        "stream": rv.stream,
        "kind": "run",
        "state": rv.label,
        "attempts": rv.attempts,
        "job_stream": rv.job_stream,
        "result": None
        if r is None
        else {"ok": r.ok, "failure": r.failure, "attempts": r.attempts, "at": r.at},
        "job": None if rv.job is None else view_json(rv.job),
    }


def sweeper_state(view: SweeperView) -> str:
    """A sweeper's stream in a word or two, as `ls` lists it."""
    return f"{len(view.reaped)} reaped"


def period_json(p: IdlePeriod, view: SweeperView) -> dict[str, Any]:
    """One idle run of an endpoint; a running one measured at the view's `now`."""
    return {
        "endpoint_id": p.endpoint_id,
        "endpoint_name": p.endpoint_name,
        "since": p.since,
        "since_offset_s": p.since - view.start,
        "end": p.end,
        "outcome": p.outcome,
        "reason": p.reason,
        "idle_s": p.idle_s(view.now),
    }


def sweeper_row_json(row: SweeperRow) -> dict[str, Any]:
    """One event of a sweeper's stream."""
    return {
        "seq": row.seq,
        "at": row.at,
        "offset_s": row.offset,
        "kind": row.kind,
        "summary": sweeper_row_text(row),
        "endpoint_id": row.endpoint_id,
        "endpoint_name": row.endpoint_name,
        "since": row.since,
        "idle_s": row.idle_s,
        "reason": row.reason,
        "timers": row.running,
    }


# --- printing -----------------------------------------------------------------------------


def _notable(row: TimelineRow) -> bool:
    return (
        row.moved
        or bool(row.armed or row.cleared)
        or row.kind in ("JobSubmitted", "WatchStarted", "Concluded", "StatusFetchFailed")
        or (row.kind == "HeartbeatObserved" and row.progress)
        or (row.kind == "StatusObserved" and row.progress)
    )


def print_timeline(stream: str, events: list[Event], *, full: bool = False) -> None:
    """The post-mortem view of one job log: its timeline and its verdict."""
    rows = timeline(events)
    shown = rows if full else [r for r in rows if _notable(r)]
    table = Table(title=f"{stream}: {len(rows)} events", title_justify="left", expand=False)
    table.add_column("t+s", justify="right")
    table.add_column("seq", justify="right")
    table.add_column("event")
    table.add_column("state")
    table.add_column("timers")
    for row in shown:
        state = f"{row.state_before} → {row.state_after}" if row.moved else row.state_after
        timers = " ".join([f"+{t}" for t in row.armed] + [f"-{t}" for t in row.cleared])
        table.add_row(f"{row.offset:.0f}", str(row.seq), row.summary, state, timers)
    console.print(table)
    if len(shown) < len(rows):
        console.print(
            f"  ({len(rows) - len(shown)} routine observations not shown; --full shows all)"
        )
    print_verdict(replay(events).verdict)


def print_verdict(verdict: Concluded | None) -> None:
    """One verdict, its rule and its evidence."""
    if verdict is None:
        console.print(styled("  ", ("no verdict yet", "yellow")))
        return
    colour = "green" if verdict.ok else "red"
    kind = "success" if verdict.ok else verdict.failure
    console.print(
        styled(
            "  ",
            (verdict.state, f"bold {colour}"),
            f" ({kind}) by rule ",
            (verdict.rule, "bold"),
        )
    )
    console.print(f"  evidence: seqs {list(verdict.evidence)}")
    first = verdict.detail.splitlines()[0] if verdict.detail else ""
    console.print(f"  detail: {first}")


def print_view(view: ex.WatchView, *, prefix: str = "") -> None:
    """A job's live view: its state, time in state, last status and next timer."""
    name = view.stream or "?"
    if view.verdict is not None:
        v = view.verdict
        colour = "green" if v.ok else "red"
        console.print(
            styled(f"{prefix}{name}: ", (v.state, f"bold {colour}"), f" by {v.rule}"),
            soft_wrap=True,
        )
        return
    quiet = "" if view.last_at is None else f", last event {ex.secs(view.now - view.last_at)} s ago"
    console.print(
        styled(
            f"{prefix}{name}: ",
            (view.state, "bold"),
            f" for {duration_text(view.in_state_s)} (status {view.status or '-'}{quiet})",
        ),
        soft_wrap=True,
    )
    nxt = view.next_timer
    if nxt is not None:
        console.print(f"{prefix}  next timer: {nxt.text}", soft_wrap=True)
    if view.poll_errors:
        console.print(f"{prefix}  {view.poll_errors} consecutive status errors")


def print_run_header(stream: str, run: RunState) -> None:
    """One line: the run, its state and how many attempts it made."""
    result = run.result
    colour = "bold"
    if result is not None:
        colour = "green" if result.ok else "red"
    console.print(
        styled(f"run {stream}: ", (run_label(run), colour), f", {len(run.attempts)} attempt(s)"),
        soft_wrap=True,
    )


def attempt_line(a: Attempt, run: RunState) -> str:
    """An attempt in one line: "attempt 1 on L40S (last GPU): stalled (unhealthy_worker)"."""
    last = " (last GPU)" if a.started.on_last_gpu else ""
    outcome = attempt_outcome(a, run)
    return f"attempt {a.started.attempt} on {a.started.gpu_class}{last}: {outcome}"


def print_run(stream: str, run: RunState) -> None:
    """A run: its state, each attempt's outcome and job stream, and its result."""
    print_run_header(stream, run)
    for a in run.attempts:
        console.print(f"  {attempt_line(a, run)}", soft_wrap=True)
        if a.job_stream:
            console.print(f"    job stream: {a.job_stream}", soft_wrap=True)
        if a.ended is not None and not a.ended.ok and a.ended.detail:
            console.print(f"    detail: {first_line(a.ended.detail, 160)}", soft_wrap=True)
    if run.cancel_requested:
        console.print(f"  cancel requested {run.cancel_reason}".rstrip(), soft_wrap=True)
    if run.result is None:
        console.print(styled("  ", ("no result yet", "yellow")))
    elif run.result.detail:
        console.print(f"  result: {first_line(run.result.detail, 160)}", soft_wrap=True)


def print_run_view(rv: RunView) -> None:
    """A run's live view: its state and its current job's view."""
    print_run_header(rv.stream, rv.run)
    if rv.job is not None:
        print_view(rv.job, prefix="  ")


def endpoint_text(endpoint_id: str, name: str) -> str:
    """An endpoint as printed: its name and id, or its id."""
    return f"{name} ({endpoint_id})" if name else endpoint_id


def sweeper_row_text(row: SweeperRow) -> str:
    """One event of a sweeper's stream as a phrase."""
    who = endpoint_text(row.endpoint_id, row.endpoint_name)
    if row.kind == "IdleSeen":
        return f"idle timer started: {who}"
    if row.kind == "IdleCleared":
        return f"idle timer cleared: {who}: {row.reason or 'no reason recorded'}"
    return f"reaped {who}"


def period_text(p: IdlePeriod, view: SweeperView) -> str:
    """One idle run as a phrase: the endpoint, since when, how long, how it ended."""
    who = endpoint_text(p.endpoint_id, p.endpoint_name)
    since = f"t+{ex.secs(p.since - view.start)} s"
    idle = duration_text(p.idle_s(view.now))
    if p.outcome == "reaped":
        assert p.end is not None
        return f"reaped {who} at t+{ex.secs(p.end - view.start)} s after {idle} idle"
    if p.outcome == "cleared":
        assert p.end is not None
        when = f"t+{ex.secs(p.end - view.start)} s"
        return f"cleared {who} at {when} ({p.reason or 'no reason recorded'}) after {idle} idle"
    return f"idle timer running: {who} since {since}, {idle} idle"
