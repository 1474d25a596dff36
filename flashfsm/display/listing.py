"""A stream in one row, as `flashfsm ls` lists it and the web view's runs list shows it:
its kind, its state and its verdict or result, and the time its events span (`stream_row`);
the state as the row's cell says it (`state_text`). `flashfsm.store_facts` counts the
streams by the same states.
"""

from __future__ import annotations

from typing import Any

from flashfsm.display.logs import sweeper_state
from flashfsm.display.text import escaped
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Event
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import replay_run
from flashfsm.fsm.state import JobState
from flashfsm.postmortem.explain import reads_heartbeat
from flashfsm.views import run_label, stream_kind, sweeper_view


def stream_row(
    stream: str, events: list[Event], *, job_state: JobState | None = None
) -> dict[str, Any]:
    """One stream as `ls` lists it: its kind, its state and its verdict or result, and the
    time its events span on its own clock (`span_s`, first to last: a listing never reads
    the wall clock, so a simulator's log or one from years ago lists as it ran). A job's
    `job_state`, when the caller has folded `events` already (a live view folding only what
    is new), stands for their replay."""
    kind = stream_kind(events)
    row: dict[str, Any] = {
        "stream": stream,
        "kind": kind,
        "events": len(events),
        "first_at": events[0].at if events else None,
        "last_at": events[-1].at if events else None,
        "span_s": None,
        "state": None,
        "ok": None,
        "failure": None,
        "rule": None,
    }
    if not events:
        return row
    row["span_s"] = max(0.0, max(e.at for e in events) - events[0].at)
    try:
        if kind == "run":
            run = replay_run(events)
            row.update(attempts=len(run.attempts), state=run_label(run, failure=False))
            if run.result is not None:
                row.update(ok=run.result.ok, failure=run.result.failure)
            elif run.cancel_requested:
                row["cancel_pending"] = True
        elif kind == "sweeper":
            view = sweeper_view(events)
            row.update(state=sweeper_state(view), timers=len(view.timers))
        else:
            state = job_state if job_state is not None else replay(events)
            row.update(state=state.state, heartbeat_reader=reads_heartbeat(state))
            if state.verdict is not None:
                v = state.verdict
                row.update(ok=v.ok, failure=v.failure, rule=v.rule)
    except FlashFsmError as exc:
        row.update(state="UNREADABLE", error=str(exc))
    return row


#: The most characters of a stream's failed-to-start reason `ls` shows in its table (its
#: `--json` gives the reason as the store keeps it).
SHOWN_REASON_CAP = 120


def reason_text(reason: str) -> str:
    """A failed-to-start reason as `ls` shows it: on one line, escaped, capped."""
    text = escaped(reason)
    return text if len(text) <= SHOWN_REASON_CAP else text[: SHOWN_REASON_CAP - 1] + "…"


def state_text(row: dict[str, Any]) -> str:
    """`ls`'s state cell of a row: a mark or a wait the fleet notes first, then the state
    (and "(no heartbeat reader)" for an open job watched without one). A run whose cancel
    was asked and has not ended says so first: the cancel is pending until a replica winds
    the run down (and says it waits for one, while none can)."""
    if row.get("failed_to_start") is not None:
        return f"failed to start: {reason_text(row['failed_to_start'])}"
    if row.get("cancel_pending"):
        waiting = row.get("waiting")
        return "cancel pending" + (f" (waiting: {waiting})" if waiting is not None else "")
    if row.get("waiting") is not None:
        return f"waiting: {row['waiting']}"
    if row.get("heartbeat_reader") is False and row["ok"] is None:
        return f"{row['state']} (no heartbeat reader)"
    return row["state"] or ""
