"""A log as the front ends show it: a job's timeline, verdict and live view, a run and its
attempts, a sweeper's idle timers; each as printed lines (`print_…`, `…_text`) and as the
JSON `--json` prints (`…_json`).

The JSON shapes are public formats: each key is spelled out, so renaming a field of a fold
never renames a key scripts read.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from flashfsm.display.text import console, say
from flashfsm.events.models import Concluded, Event, RunConcluded
from flashfsm.fsm.findings import first_line
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.postmortem import explain as ex
from flashfsm.postmortem.explain import TimelineRow, timeline
from flashfsm.render import duration_text
from flashfsm.views import (
    IdlePeriod,
    RunView,
    SweeperRow,
    SweeperView,
    attempt_outcome,
    run_label,
)

# --- JSON ---------------------------------------------------------------------------------


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


# --- printing -----------------------------------------------------------------------------


def _notable(row: TimelineRow) -> bool:
    return (
        row.moved
        or bool(row.armed or row.cleared)
        or row.kind
        in (
            "JobSubmitted",
            "WatchStarted",
            "Concluded",
            "StatusFetchFailed",
            "WorkerObserved",
            "WorkerLogObserved",
        )
        or (row.kind == "HeartbeatObserved" and row.progress)
        or (row.kind == "StatusObserved" and row.progress)
    )


def print_timeline(stream: str, events: list[Event], *, full: bool = False) -> None:
    """The post-mortem view of one job log: its timeline and its verdict."""
    rows = timeline(events)
    shown = rows if full else [r for r in rows if _notable(r)]
    say(f"{stream}: {len(rows)} events")
    table = Table(expand=False)
    table.add_column("t+s", justify="right", no_wrap=True)
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("event", overflow="fold")
    table.add_column("state")
    table.add_column("timers")
    for row in shown:
        state = f"{row.state_before} → {row.state_after}" if row.moved else row.state_after
        timers = " ".join([f"+{t}" for t in row.armed] + [f"-{t}" for t in row.cleared])
        table.add_row(f"{row.offset:.0f}", str(row.seq), row.summary, state, timers)
    console.print(table)
    if len(shown) < len(rows):
        say(f"  ({len(rows) - len(shown)} routine observations not shown; --full shows all)")
    print_verdict(replay(events).verdict)


def print_verdict(verdict: Concluded | None) -> None:
    """One verdict, its rule and its evidence."""
    if verdict is None:
        say("  ", ("no verdict yet", "yellow"))
        return
    colour = "green" if verdict.ok else "red"
    kind = "success" if verdict.ok else verdict.failure
    say("  ", (verdict.state, f"bold {colour}"), f" ({kind}) by rule ", (verdict.rule, "bold"))
    say(f"  evidence: seqs {list(verdict.evidence)}")
    first = verdict.detail.splitlines()[0] if verdict.detail else ""
    say(f"  detail: {first}")


def print_view(view: ex.WatchView, *, prefix: str = "") -> None:
    """A job's live view: its state, time in state, last status and next timer (its times
    are the view's: see `flashfsm.views.view_now`)."""
    name = view.stream or "?"
    if view.verdict is not None:
        v = view.verdict
        colour = "green" if v.ok else "red"
        say(f"{prefix}{name}: ", (v.state, f"bold {colour}"), f" by {v.rule}")
        return
    quiet = "" if view.last_at is None else f", last event {ex.secs(view.now - view.last_at)} s ago"
    say(
        f"{prefix}{name}: ",
        (view.state, "bold"),
        f" for {duration_text(view.in_state_s)} (status {view.status or '-'}{quiet})",
    )
    nxt = view.next_timer
    if nxt is not None:
        say(f"{prefix}  next timer: {nxt.text}")
    if view.poll_errors:
        say(f"{prefix}  {view.poll_errors} consecutive status errors")


def print_run_header(stream: str, run: RunState) -> None:
    """One line: the run, its state and how many attempts it made."""
    result = run.result
    colour = "bold"
    if result is not None:
        colour = "green" if result.ok else "red"
    say(f"run {stream}: ", (run_label(run), colour), f", {len(run.attempts)} attempt(s)")


def attempt_line(a: Attempt, run: RunState) -> str:
    """An attempt in one line: "attempt 1 on L40S (last GPU): stalled (unhealthy_worker)"."""
    last = " (last GPU)" if a.started.on_last_gpu else ""
    outcome = attempt_outcome(a, run)
    where = "" if a.started.provider == "runpod" else f"{a.started.provider}/"
    return f"attempt {a.started.attempt} on {where}{a.started.gpu_class}{last}: {outcome}"


def print_run(stream: str, run: RunState) -> None:
    """A run: its state, each attempt's outcome and job stream, and its result."""
    print_run_header(stream, run)
    for a in run.attempts:
        say(f"  {attempt_line(a, run)}")
        if a.job_stream:
            say(f"    job stream: {a.job_stream}")
        if a.ended is not None and not a.ended.ok and a.ended.detail:
            say(f"    detail: {first_line(a.ended.detail, 160)}")
    if run.cancel_requested:
        say(f"  cancel requested {run.cancel_reason}".rstrip())
    if run.result is None:
        say("  ", ("no result yet", "yellow"))
    elif run.result.detail:
        say(f"  result: {first_line(run.result.detail, 160)}")


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
