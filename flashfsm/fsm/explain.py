"""Post-mortem views of a job log: the timeline, and why the verdict fired.

Both are replays: each event is folded with `evolve` and the state before and after is
compared, so the timeline shows exactly what the live watch knew at each step — the
machine state it moved to and the timers each observation armed or cleared.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

from flashfsm.events.models import (
    Concluded,
    Event,
    FailureDetailObserved,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
)
from flashfsm.fsm.job import JobState, evolve

#: Timer fields shown in a timeline, and their names there.
TIMERS: tuple[tuple[str, str], ...] = (
    ("queued_since", "queue"),
    ("throttled_since", "throttled"),
    ("unhealthy_since", "unhealthy"),
)


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One event of a log, as the post-mortem shows it."""

    seq: int
    at: float
    offset: float  # seconds since the log's first event
    kind: str
    summary: str
    state_before: str
    state_after: str
    armed: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()
    progress: bool = False

    @property
    def moved(self) -> bool:
        """True when this event changed the machine state."""
        return self.state_before != self.state_after


def summarize(event: Event) -> str:
    """A one-line description of an event."""
    match event:
        case JobSubmitted():
            where = f" on {event.gpu_class}" if event.gpu_class else ""
            endpoint = event.endpoint_name or event.endpoint_id
            return f"job {event.job_id[:12]} on {endpoint}{where}, attempt {event.attempt}"
        case WatchStarted():
            what = "reattached" if event.reattach else "watch started"
            return f"{what} by {event.watcher} every {event.interval_s:g}s"
        case StatusObserved():
            extra = ""
            if event.metrics is not None:
                extra = f" metrics {sorted(event.metrics)[:5]}"
            elif event.output_error or event.error:
                extra = f": {(event.output_error or event.error or '').splitlines()[0][:80]}"
            return f"status {event.status}{extra}"
        case StatusFetchFailed():
            code = f" HTTP {event.http_status}" if event.http_status is not None else ""
            return f"status fetch failed: {event.error_class}{code}"
        case HealthObserved():
            w = event.workers
            counts = {k: v for k, v in w.model_dump().items() if v}
            return f"health: workers {counts or 'none'}"
        case HealthProbeFailed():
            return f"health probe failed: {event.error_class}"
        case HeartbeatObserved():
            if not event.found:
                return "heartbeat: none found" + (" (forced)" if event.forced else "")
            flag = " retriable" if event.retriable else ""
            forced = " (forced)" if event.forced else ""
            step = "" if event.step is None else f" step {event.step}"
            return f"heartbeat {event.stage}{step}{flag}{forced}"
        case FailureDetailObserved():
            return "failure artifacts " + ("read" if event.text else "absent")
        case Concluded():
            return f"verdict {event.state} by {event.rule}"
    return event.kind


def timeline(events: Iterable[Event]) -> list[TimelineRow]:
    """Every event with the state change and the timers it caused."""
    state = JobState()
    rows: list[TimelineRow] = []
    start: float | None = None
    for event in events:
        before = copy.copy(state)
        evolve(state, event)
        start = event.at if start is None else start
        armed = tuple(
            name
            for attr, name in TIMERS
            if getattr(before, attr) is None and getattr(state, attr) is not None
        )
        cleared = tuple(
            name
            for attr, name in TIMERS
            if getattr(before, attr) is not None and getattr(state, attr) is None
        )
        rows.append(
            TimelineRow(
                seq=event.seq,
                at=event.at,
                offset=event.at - start,
                kind=event.kind,
                summary=summarize(event),
                state_before=before.state,
                state_after=state.state,
                armed=armed,
                cleared=cleared,
                progress=state.progress_seq == event.seq,
            )
        )
    return rows
