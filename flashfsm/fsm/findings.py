"""What a rule sees: the numbers it compares (`Measure`), what it concludes (`Finding`), and
the log it looks at when explaining (`Point`).

A rule's check (`flashfsm.fsm.rules`) returns a `Finding` when it fires: the terminal state,
the detail recorded in the verdict, the evidence seqs and the measures behind it. A rule's
explanation returns a `Finding` for any log, whether the rule fired or not, judged at the
log's *decision point*: the state after its last observation (before the recorded
`Concluded`, when there is one). `Point` carries that state and every step that led to it,
so an explanation can quote history ("the longest wait", "the job left IN_QUEUE at …").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
from flashfsm.fsm.state import JobState
from flashfsm.fsm.table import JobPhase


def secs(value: float) -> str:
    """Seconds as the views print them: whole seconds from 10 s up, one decimal below."""
    if abs(value) >= 10 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}"


def first_line(text: str | None, limit: int = 100) -> str:
    """The first non-blank line of `text`, cut to `limit` characters."""
    stripped = (text or "").strip()
    return stripped.splitlines()[0][:limit] if stripped else ""


def summarize(event: Event) -> str:
    """A one-line description of a job event."""
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
            counts = {k: v for k, v in event.workers.model_dump().items() if v}
            return f"health: workers {counts or 'none'}"
        case HealthProbeFailed():
            return f"health probe failed: {event.error_class}"
        case HeartbeatObserved():
            forced = " (forced)" if event.forced else ""
            if event.read_error is not None:
                return f"heartbeat read failed{forced}: {first_line(event.read_error, 80)}"
            if not event.found:
                return f"heartbeat: none found{forced}"
            flag = " retriable" if event.retriable else ""
            step = "" if event.step is None else f" step {event.step}"
            return f"heartbeat {event.stage}{step}{flag}{forced}"
        case FailureDetailObserved():
            return "failure artifacts " + ("read" if event.text else "absent")
        case Concluded():
            return f"verdict {event.state} by {event.rule}"
    return event.kind


@dataclass(frozen=True, slots=True)
class Measure:
    """One number a rule compares with its limit: "IN_QUEUE 310 s > queue grace 300 s"."""

    quantity: str
    value: float
    limit_name: str
    limit: float
    fired: bool  # the comparison is the one that makes the rule fire
    unit: str = "s"
    note: str = ""

    @property
    def op(self) -> str:
        """The comparison as printed."""
        if self.fired:
            return ">" if self.value > self.limit else "≥"
        return "<" if self.value < self.limit else "≤"

    @property
    def text(self) -> str:
        """The measure as one phrase."""
        unit = f" {self.unit}" if self.unit else ""
        value = secs(self.value) if self.unit else f"{self.value:g}"
        limit = secs(self.limit) if self.unit else f"{self.limit:g}"
        out = f"{self.quantity} {value}{unit} {self.op} {self.limit_name} {limit}{unit}"
        return f"{out} ({self.note})" if self.note else out


@dataclass(frozen=True, slots=True)
class Finding:
    """What one rule sees: whether it holds, its numbers and facts, and — when a check
    fires — the verdict it reaches (state, detail, evidence seqs, metrics)."""

    held: bool
    measures: tuple[Measure, ...] = ()
    facts: tuple[str, ...] = ()
    evidence: tuple[int, ...] = ()
    state: JobPhase | None = None
    detail: str = ""
    metrics: dict[str, Any] | None = field(default=None)

    @property
    def text(self) -> str:
        """The numbers and facts as one line."""
        return "; ".join([m.text for m in self.measures] + list(self.facts))


Step = tuple[Event, JobState, JobState]  # an event, the state before it and after it


@dataclass(slots=True)
class Point:
    """A log at its decision point: each observation with the state before and after it."""

    steps: list[Step]
    state: JobState  # at the decision point
    at: float  # the verdict's time, else the last event's
    start: float  # the log's first event, t+0
    verdict: Concluded | None

    def t(self, at: float) -> str:
        """A time as an offset from the log's start: "t+310 s"."""
        return f"t+{secs(at - self.start)} s"

    def statuses(self) -> list[StatusObserved]:
        """Every good status answer, in order."""
        return [e for e, _, _ in self.steps if isinstance(e, StatusObserved)]

    def last_status_text(self) -> str:
        """The last status and when, or that none was observed."""
        statuses = self.statuses()
        if not statuses:
            return "no status was ever observed"
        last = statuses[-1]
        return f"last status {last.status} at {self.t(last.at)}"

    def last_status_of(self, *names: str) -> StatusObserved | None:
        """The last status answer that was one of `names`."""
        found = [e for e in self.statuses() if e.status in names]
        return found[-1] if found else None

    def cleared(self, timer: str) -> Event | None:
        """The last event that cleared the timer named `timer` (None: it never cleared)."""
        found = [
            e
            for e, before, after in self.steps
            if timer in before.timers and timer not in after.timers
        ]
        return found[-1] if found else None

    def longest(
        self, reading: Callable[[Event, JobState], float | None]
    ) -> tuple[float, Event] | None:
        """The largest `reading(event, state after it)` over the log, and where it was."""
        best: tuple[float, Event] | None = None
        for event, _, after in self.steps:
            value = reading(event, after)
            if value is not None and (best is None or value > best[0]):
                best = (value, event)
        return best
