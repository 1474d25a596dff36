"""What a rule sees: the numbers it compares (`Measure`), what it concludes (`Finding`), and
the log it looks at when explaining (`Point`).

A rule's measure (`flashfsm.fsm.rules`) returns a `Finding`: when the rule fires, the
terminal state, the detail recorded in the verdict, the evidence seqs and the measures
behind it; when it is asked to explain, what the rule sees fired or not. A rule's
explanation is written from those findings at the log's *decision point*: the state after
its last observation (before the recorded `Concluded`, when there is one). `Point` carries
that state and every step that led to it, with the state the rules judged after each
(`judged`), so an explanation can quote what the rule found earlier ("the longest wait")
and the history ("the job left IN_QUEUE at …").

Beside the rules, the worker's own records (`worker_evidence`): the worker that took the
job (`WorkerSeen`) and its last log lines read before the verdict (`WorkerLog`), which
`explain`, `logs` and the timeline show next to the verdict; `summarize` gives every job
event, these included, its one line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.fsm.reads import summary_of
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
        case WorkerObserved():
            return worker_summary(event)
        case WorkerLogObserved():
            return worker_log_summary(event)
        case Concluded():
            return f"verdict {event.state} by {event.rule}"
    return summary_of(event) or event.kind  # (a declared read's line, if it declared one)


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
#: How an explanation writes a time (`Point.t`: "t+310 s").
TimeText = Callable[[float], str]


@dataclass(slots=True)
class Point:
    """A log at its decision point: each observation with the state before and after it.

    `judged[i]` is the state the rules judged after `steps[i]`: its state after, less a
    regular heartbeat read the watch asked for there but did not record (it found nothing
    new, so the shell dropped it and judged without it).
    """

    steps: list[Step]
    state: JobState  # at the decision point
    at: float  # the verdict's time, else the last event's
    start: float  # the log's first event, t+0
    verdict: Concluded | None
    judged: list[JobState] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.judged:
            self.judged = [after for _, _, after in self.steps]

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


# --- the worker's own records ------------------------------------------------------------
#
# A watch with a worker reader records who took the job (`WorkerObserved`, at each pickup)
# and, before a failed, preempted or stalled verdict, the worker's last log lines
# (`WorkerLogObserved`; a crash loop, where no worker took the job, reads the endpoint's
# unhealthy worker). They are evidence beside the verdict, never a reason for it: the views
# below say what was recorded, and the CLI and the picture show it (its text escaped there).

#: How many of the worker's last log lines `explain` prints (its `--json` has every one).
EXPLAIN_LOG_LINES = 20
#: How many characters of one log line `explain` prints (the rest is counted, not shown).
EXPLAIN_LINE_CHARS = 240


def _whose(worker_id: str | None, status: str | None = None) -> str:
    who = f"worker {worker_id}" if worker_id else "worker"
    return f"{who} ({status})" if status else who


#: The listed states in which a worker record means the worker has the job (a pickup's).
_HAS_THE_JOB = (None, "running")


def worker_summary(e: WorkerObserved) -> str:
    """A `WorkerObserved` in one line: "worker w-1 took the job: L40S in EU-RO-1, up 35 s",
    or, read while the job waits, "worker w-1 listed initializing: …"."""
    who = _whose(e.worker_id)
    if not e.found:
        if e.read_error:
            return f"{who}: record read failed: {first_line(e.read_error, 80)}"
        return f"{who}: not in the endpoint's worker list" if e.worker_id else f"{who}: none listed"
    where = " in ".join(x for x in (e.gpu_type, e.datacenter) if x)
    doing = "took the job" if e.status in _HAS_THE_JOB else f"listed {e.status}"
    parts = [f"{who} {doing}" + (f": {where}" if where else "")]
    if e.started_at is not None:
        up = e.at - e.started_at
        parts.append(f"up {secs(up)} s" if up >= 0 else f"starts {secs(-up)} s after this read")
    if e.idle_timeout_s is not None:
        parts.append(f"idle timeout {secs(e.idle_timeout_s)} s")
    return ", ".join(parts)


def worker_log_summary(e: WorkerLogObserved) -> str:
    """A `WorkerLogObserved` in one line: how many lines of whose log, and the last one."""
    who = f"{_whose(e.worker_id, e.worker_status)} log"
    if e.read_error:
        return f"{who} read failed: {first_line(e.read_error, 80)}"
    cut = " (cut at the read's bound)" if e.truncated else ""
    out = f"{who}: {len(e.lines)} line(s){cut}"
    last = next((line for line in reversed(e.lines) if line.strip()), None)
    return out if last is None else f"{out}; last: {first_line(last, 60)}"


def _relative(delta: float, what: str) -> str:
    """`delta` seconds as "15 s before submission" / "12 s after submission"."""
    return f"{secs(abs(delta))} s {'before' if delta < 0 else 'after'} {what}"


def _t(offset: float) -> str:
    return f"t{'-' if offset < 0 else '+'}{secs(abs(offset))} s"


@dataclass(frozen=True, slots=True)
class WorkerSeen:
    """The worker that took the job, as the platform listed it at the last pickup.

    Times: `started_at` is epoch seconds (None: not listed); `started_offset` is it from
    the log's start (t+0), `since_submission` from the job's submission (negative: the
    worker was up before the job was submitted — a warm worker), None when unknown.
    """

    seq: int
    at: float
    offset: float  # when the record was read, from the log's start
    worker_id: str | None
    found: bool
    gpu_type: str | None
    datacenter: str | None
    started_at: float | None
    started_offset: float | None
    since_submission: float | None
    idle_timeout_s: float | None
    read_error: str | None
    pickups: int = 1  # worker records in the log (a requeued job is picked up again)
    # Read while the job was IN_QUEUE (no worker took it): the endpoint's worker, `status`
    # as the platform listed it (a crash loop's unhealthy worker, a slow start's).
    queued: bool = False
    status: str | None = None

    def text(self, when: str | None = None) -> str:
        """The worker as one phrase; `when` is `started_at` as the caller writes a clock
        time (this module reads none)."""
        who = self.worker_id or "no worker id"
        read = f"recorded at {_t(self.offset)} (seq {self.seq})"
        if not self.found:
            if self.read_error:
                return f"{who}: the worker-record read failed ({read}): {self.read_error}"
            if self.queued and self.worker_id is None:
                return f"the endpoint listed no worker while the job was IN_QUEUE ({read})"
            return f"{who}: not in the endpoint's worker list ({read})"
        out = who + "".join(
            f" {word} {value}"
            for word, value in (("on", self.gpu_type), ("in", self.datacenter))
            if value
        )
        if self.started_offset is not None:
            rel = _t(self.started_offset)
            if self.since_submission is not None:
                rel = f"{_relative(self.since_submission, 'submission')}, {rel}"
            out += f", started {when} ({rel})" if when else f", started {rel}"
        if self.queued:
            listed = f"listed {self.status}" if self.status else "listed"
            out += f"; {listed} while the job was IN_QUEUE, {_t(self.offset)} (seq {self.seq})"
        else:
            out += f"; took the job by {_t(self.offset)} (seq {self.seq})"
        if self.idle_timeout_s is not None:
            out += f"; endpoint idle timeout {secs(self.idle_timeout_s)} s"
        if self.read_error:
            out += f"; a read failed: {self.read_error}"
        if self.pickups > 1:
            out += f" (the last of {self.pickups} pickups)"
        return out


@dataclass(frozen=True, slots=True)
class WorkerLog:
    """The worker's last log lines, as recorded before the verdict (the latest read).

    `job_worker` says whose log it is: the job's own worker (the one a pickup recorded),
    or — when no worker took the job, as in a crash loop — the endpoint's worker the read
    chose (`worker_status` says which: an unhealthy one first). `truncated` says the read
    stopped at its bound (older lines were not read); every recorded line is in `lines`.
    """

    seq: int
    at: float
    offset: float
    worker_id: str | None
    worker_status: str | None
    lines: tuple[str, ...]
    truncated: bool
    read_error: str | None
    job_worker: bool

    def tail(self, limit: int | None) -> tuple[str, ...]:
        """The last `limit` recorded lines (None: all)."""
        if limit is None or limit >= len(self.lines):
            return self.lines
        return self.lines[len(self.lines) - limit :] if limit > 0 else ()

    def hidden(self, limit: int | None) -> int:
        """How many recorded lines `tail(limit)` leaves out."""
        return len(self.lines) - len(self.tail(limit))

    @property
    def whose(self) -> str:
        """Whose log it is, as a phrase."""
        who = self.worker_id or "no worker"
        if self.job_worker:
            status = f" ({self.worker_status})" if self.worker_status else ""
            return f"{who}{status}, the job's worker"
        if self.worker_id is None:
            return who
        kind = f"{self.worker_status} " if self.worker_status else ""
        return f"{who}, the endpoint's {kind}worker (no worker took the job)"

    def heading(self, limit: int | None = EXPLAIN_LOG_LINES) -> str:
        """What was read, when, and how much of it is shown with `limit` lines."""
        out = f"{self.whose}, read at {_t(self.offset)} (seq {self.seq})"
        if self.read_error:
            return f"{out}: the read failed: {self.read_error}"
        n = len(self.lines)
        if not n:
            out += ": no lines"
        elif self.hidden(limit):
            out += f": the last {len(self.tail(limit))} of {n} lines recorded"
        else:
            out += f": {n} line{'s' if n != 1 else ''}"
        if self.truncated:
            out += "; the read stopped at its bound (older lines were not read)"
        return out


def worker_evidence(events: Iterable[Event]) -> tuple[WorkerSeen | None, WorkerLog | None]:
    """The last pickup's worker record (else the last one read while the job waited in the
    queue, a listed worker first) and the last worker-log read of a job log (None: none)."""
    start: float | None = None
    submitted: float | None = None
    seen: WorkerObserved | None = None
    waiting: WorkerObserved | None = None  # the last record read while IN_QUEUE
    log: WorkerLogObserved | None = None
    pickups, status = 0, None
    for e in events:
        start = e.at if start is None else start
        if isinstance(e, StatusObserved):
            status = e.status
        elif isinstance(e, JobSubmitted) and submitted is None:
            submitted = e.submitted_at
        elif isinstance(e, WorkerObserved):
            if status != "IN_QUEUE":
                seen, pickups = e, pickups + 1
            elif e.found or waiting is None or not waiting.found:
                waiting = e
        elif isinstance(e, WorkerLogObserved):
            log = e
    if start is None:
        return None, None
    queued = seen is None and waiting is not None
    if queued:
        seen = waiting
    worker = None
    if seen is not None:
        began = seen.started_at
        worker = WorkerSeen(
            seq=seen.seq,
            at=seen.at,
            offset=seen.at - start,
            worker_id=seen.worker_id,
            found=seen.found,
            gpu_type=seen.gpu_type,
            datacenter=seen.datacenter,
            started_at=began,
            started_offset=None if began is None else began - start,
            since_submission=None if began is None or submitted is None else began - submitted,
            idle_timeout_s=seen.idle_timeout_s,
            read_error=seen.read_error,
            pickups=max(pickups, 1),
            queued=queued,
            status=seen.status,
        )
    worker_log = None
    if log is not None:
        worker_log = WorkerLog(
            seq=log.seq,
            at=log.at,
            offset=log.at - start,
            worker_id=log.worker_id,
            worker_status=log.worker_status,
            lines=tuple(log.lines),
            truncated=log.truncated,
            read_error=log.read_error,
            job_worker=seen is not None
            and not queued
            and log.worker_id is not None
            and seen.worker_id == log.worker_id,
        )
    return worker, worker_log


def cut_line(line: str, limit: int = EXPLAIN_LINE_CHARS) -> str:
    """One log line cut to `limit` characters, saying how many were left out."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]} … (+{len(line) - limit} characters)"
