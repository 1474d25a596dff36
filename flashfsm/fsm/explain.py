"""Post-mortem views of a job log: the timeline, why the verdict fired, why another rule did
not, what another policy would have done, and the live view of a watch.

Theory of operation. Every view is a replay: each event is folded with `evolve` and the
state before and after is compared, so the timeline shows exactly what the live watch knew
at each step — the machine state it moved to and the timers each observation armed or
cleared. The *decision point* of a log is the state after its last observation (before the
recorded `Concluded`, when there is one), with the regular heartbeat read dropped as the
shell drops a read that found nothing new (`skip_read`). `explain` and `why_not` measure
each rule there, one function per rule (`RULE_FINDINGS`), quoting the numbers the rule
compares. `what_if` re-runs the recorded observations under another `GracePolicy`, asking
`decide` before each observation — as `job.verify` does — whether the new policy would
already have concluded. Nothing here reads a clock: the live view takes `now`.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
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
from flashfsm.fsm import rules
from flashfsm.fsm.commands import Conclude, ReadHeartbeat, Verdict
from flashfsm.fsm.job import DEFAULT_POLICY, JobState, decide, evolve, skip_read
from flashfsm.fsm.policy import GracePolicy

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
            if event.read_error is not None:
                forced = " (forced)" if event.forced else ""
                return f"heartbeat read failed{forced}: {_first_line(event.read_error, 80)}"
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


# --- numbers and findings -----------------------------------------------------------------


def secs(value: float) -> str:
    """Seconds as the views print them: whole seconds from 10 s up, one decimal below."""
    if abs(value) >= 10 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}"


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
    """What one rule sees at the decision point: the numbers it compares, and the facts."""

    held: bool  # the rule's condition holds there
    measures: tuple[Measure, ...] = ()
    facts: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The finding as one line."""
        return "; ".join([m.text for m in self.measures] + list(self.facts))


@dataclass(slots=True)
class _Point:
    """A log at its decision point: each observation with the state before and after it."""

    steps: list[tuple[Event, JobState, JobState]]
    state: JobState  # at the decision point
    at: float  # the verdict's time, else the last event's
    start: float  # the log's first event, t+0
    verdict: Concluded | None

    def t(self, at: float) -> str:
        return f"t+{secs(at - self.start)} s"


def _decision_point(events: Sequence[Event]) -> _Point:
    cut = next((i for i, e in enumerate(events) if isinstance(e, Concluded)), len(events))
    verdict = events[cut] if cut < len(events) else None
    assert verdict is None or isinstance(verdict, Concluded)
    state = JobState()
    steps: list[tuple[Event, JobState, JobState]] = []
    for event in events[:cut]:
        before = copy.copy(state)
        evolve(state, event)
        steps.append((event, before, copy.copy(state)))
    decision = copy.copy(state)
    if "heartbeat" in decision.pending:
        skip_read(decision)  # the shell drops a read that found nothing new, then decides
    start = events[0].at if events else 0.0
    last_at = events[cut - 1].at if cut else start
    at = verdict.at if verdict is not None else last_at
    return _Point(steps, decision, at, start, verdict)


def _statuses(p: _Point) -> list[StatusObserved]:
    return [e for e, _, _ in p.steps if isinstance(e, StatusObserved)]


def _last_status(p: _Point) -> str:
    statuses = _statuses(p)
    if not statuses:
        return "no status was ever observed"
    last = statuses[-1]
    return f"last status {last.status} at {p.t(last.at)}"


def _first_line(text: str | None, limit: int = 100) -> str:
    return (text or "").strip().splitlines()[0][:limit] if (text or "").strip() else ""


def _retriable_facts(p: _Point) -> tuple[str, ...]:
    s = p.state
    hb = s.forced_heartbeat
    if hb is None:
        if s.watch is not None and not s.watch.has_heartbeat_reader:
            return ("no heartbeat reader to flag it retriable",)
        return ("no forced heartbeat read yet",)
    failed = len(s.forced_read_errors)
    if hb.read_error is not None:
        reads = f"{failed} forced read{'s' if failed != 1 else ''}"
        if "forced_heartbeat" in s.pending and s.forced_retry_at is not None:
            return (
                f"the heartbeat could not be read yet: {reads} failed, the last at "
                f"{p.t(hb.at)} ({hb.read_error}); the next is due at {p.t(s.forced_retry_at)}",
            )
        return (
            f"the heartbeat could not be read: {reads} failed "
            f"(limit forced_read_tries {s.policy.forced_read_tries}), the last at "
            f"{p.t(hb.at)} ({hb.read_error}): not known to be retriable",
        )
    after = f", after {failed} failed forced read{'s' if failed != 1 else ''}" if failed else ""
    if not hb.found:
        return (f"the forced heartbeat read at {p.t(hb.at)} found nothing{after}: not retriable",)
    if rules.is_leftover_heartbeat(hb, s.submitted_at):
        return (
            f"the forced heartbeat predates the submission, a leftover (D3){after}: not retriable",
        )
    if hb.retriable:
        return (f"the worker's heartbeat (seq {hb.seq}) flagged it retriable{after}",)
    return (f"the worker's heartbeat (seq {hb.seq}) did not flag it retriable{after}",)


def _find_client_deadline(p: _Point) -> Finding:
    s = p.state
    limit, anchor = s.policy.deadline_s, s.deadline_anchor
    if limit is None:
        return Finding(False, facts=("no client deadline was set (deadline_s unset)",))
    if anchor is None:
        return Finding(False, facts=("nothing to count a deadline from: no submission, no watch",))
    elapsed = p.at - anchor
    held = elapsed > limit
    return Finding(
        held, (Measure("time since submission", elapsed, "client deadline", limit, held),)
    )


def _find_job_lost(p: _Point) -> Finding:
    s = p.state
    if rules.rule_job_lost(s) is not None:
        err = s.fetch_error
        assert err is not None
        return Finding(
            True, facts=(f"the status fetch at {p.t(err.at)} (seq {err.seq}) answered HTTP 404",)
        )
    lost = [
        e.seq for e, _, _ in p.steps if isinstance(e, StatusFetchFailed) and e.http_status == 404
    ]
    if not lost:
        return Finding(False, facts=("no status fetch answered HTTP 404",))
    return Finding(False, facts=(f"the last status fetch was not a 404 (404s at seqs {lost})",))


def _find_poll_errors(p: _Point) -> Finding:
    s = p.state
    limit = s.policy.max_poll_errors
    streak = longest = 0
    end_seq: int | None = None
    for e, _, _ in p.steps:
        if isinstance(e, StatusFetchFailed):
            streak += 1
            if streak > longest:
                longest, end_seq = streak, e.seq
        elif isinstance(e, StatusObserved):
            streak = 0
    if rules.rule_poll_errors(s) is not None:
        m = Measure("consecutive status errors", streak, "max_poll_errors", limit, True, unit="")
        return Finding(True, (m,))
    if longest == 0:
        return Finding(False, facts=("every status fetch succeeded",))
    note = f"longest run, ending at seq {end_seq}"
    m = Measure("consecutive status errors", longest, "max_poll_errors", limit, False, "", note)
    return Finding(False, (m,))


def _completed(p: _Point) -> StatusObserved | None:
    done = [e for e in _statuses(p) if e.status == "COMPLETED"]
    return done[-1] if done else None


def _find_completed(p: _Point) -> Finding:
    e = _completed(p)
    if e is None:
        return Finding(False, facts=(f"the job never reported COMPLETED ({_last_status(p)})",))
    where = f"status COMPLETED at {p.t(e.at)} (seq {e.seq})"
    if e.metrics is None:
        error = _first_line(e.output_error) or "no usable output"
        return Finding(False, facts=(f"{where}, but its output is not metrics: {error}",))
    held = rules.rule_completed(p.state) is not None
    return Finding(held, facts=(f"{where} with metrics {sorted(e.metrics)[:6]}",))


def _find_completed_with_error(p: _Point) -> Finding:
    e = _completed(p)
    if e is None:
        return Finding(False, facts=(f"the job never reported COMPLETED ({_last_status(p)})",))
    where = f"status COMPLETED at {p.t(e.at)} (seq {e.seq})"
    if e.metrics is not None:
        return Finding(False, facts=(f"{where} with metrics: a success, not an error",))
    held = rules.rule_completed_with_error(p.state) is not None
    error = _first_line(e.output_error) or "no usable output"
    return Finding(held, facts=(f"{where} with an error output: {error}", *_retriable_facts(p)))


def _find_platform_termination(p: _Point) -> Finding:
    ends = [e for e in _statuses(p) if e.status in rules.PLATFORM_TERMINATIONS]
    if not ends:
        return Finding(
            False, facts=(f"the job was never CANCELLED or TIMED_OUT ({_last_status(p)})",)
        )
    e = ends[-1]
    held = rules.rule_platform_termination(p.state) is not None
    return Finding(held, facts=(f"status {e.status} at {p.t(e.at)} (seq {e.seq})",))


def _find_worker_failed(p: _Point) -> Finding:
    fails = [e for e in _statuses(p) if e.status == "FAILED"]
    if not fails:
        return Finding(False, facts=(f"the job never reported FAILED ({_last_status(p)})",))
    e = fails[-1]
    held = rules.rule_worker_failed(p.state) is not None
    error = _first_line(e.error)
    where = f"status FAILED at {p.t(e.at)} (seq {e.seq})" + (f": {error}" if error else "")
    return Finding(held, facts=(where, *_retriable_facts(p)))


def _find_queue_grace(p: _Point) -> Finding:
    s = p.state
    grace = s.policy.queue_grace_s
    waits = [
        (e, e.at - after.queued_since)
        for e, _, after in p.steps
        if isinstance(e, StatusObserved)
        and e.status == rules.QUEUED_STATUS
        and after.queued_since is not None
    ]
    if not waits:
        return Finding(False, facts=("the job was never IN_QUEUE",))
    held = rules.rule_queue_grace(s) is not None
    st = s.status
    if st is not None and st.status == rules.QUEUED_STATUS and s.queued_since is not None:
        m = Measure("IN_QUEUE", st.at - s.queued_since, "queue grace", grace, held)
        facts = ("the last status fetch failed: the queue grace waits for a good one",)
        return Finding(held, (m,), facts if s.cycle == "error" else ())
    longest = max(wait for _, wait in waits)
    left = [
        e
        for e, before, after in p.steps
        if before.queued_since is not None and after.queued_since is None
    ]
    facts: tuple[str, ...] = ()
    if left:
        e = left[-1]
        status = f", status {e.status}" if isinstance(e, StatusObserved) else ""
        facts = (f"the job left IN_QUEUE at {p.t(e.at)} (seq {e.seq}{status})",)
    m = Measure("IN_QUEUE", longest, "queue grace", grace, False, note="longest wait")
    return Finding(False, (m,), facts)


def _find_worker_stuck(p: _Point, throttled: bool) -> Finding:
    s = p.state
    word = "throttled" if throttled else "unhealthy"
    anchor_attr = f"{word}_since"
    limit = s.policy.throttled_grace_s if throttled else s.policy.unhealthy_grace_s
    check = rules.rule_throttled_worker if throttled else rules.rule_unhealthy_worker
    quantity = "worker THROTTLED for" if throttled else "worker unhealthy for"
    article = "a" if throttled else "an"
    probes = [(e, after) for e, _, after in p.steps if isinstance(e, HealthObserved)]
    stuck = [
        (e, e.at - getattr(after, anchor_attr))
        for e, after in probes
        if rules.worker_condition(e)[throttled] and getattr(after, anchor_attr) is not None
    ]
    if not stuck:
        noisy = [e.seq for e, _ in probes if getattr(e.workers, word) > 0]
        if noisy:
            fact = f"saw {word} workers only beside usable or recovering ones (seqs {noisy})"
        elif probes:
            fact = f"never saw {article} {word} worker in {len(probes)} health probe(s)"
        else:
            fact = f"never saw {article} {word} worker (no health probe was answered)"
        return Finding(False, facts=(fact,))
    held = check(s) is not None
    anchor = getattr(s, anchor_attr)
    name = f"{word} grace"
    if anchor is not None:
        last = stuck[-1][0]
        note = "" if held else f"at the last probe, {p.t(last.at)}"
        return Finding(held, (Measure(quantity, last.at - anchor, name, limit, held, note=note),))
    longest = max(value for _, value in stuck)
    cleared = [
        e
        for e, before, after in p.steps
        if getattr(before, anchor_attr) is not None and getattr(after, anchor_attr) is None
    ]
    facts: tuple[str, ...] = ()
    if cleared:
        e = cleared[-1]
        facts = (f"the {word} timer cleared at {p.t(e.at)} (seq {e.seq}: {summarize(e)})",)
    m = Measure(quantity, longest, name, limit, False, note="longest spell")
    return Finding(False, (m,), facts)


def _find_unhealthy_worker(p: _Point) -> Finding:
    return _find_worker_stuck(p, throttled=False)


def _find_throttled_worker(p: _Point) -> Finding:
    return _find_worker_stuck(p, throttled=True)


def _stall_limit_name(s: JobState) -> tuple[float, str, str]:
    limit, phase = rules.stall_limit(s)
    if phase == "training":
        return limit, phase, "stall window"
    return limit, "setup, no training heartbeat yet", "setup grace"


def _find_stall(p: _Point) -> Finding:
    s = p.state
    if s.progress_at is None or s.last_at is None:
        return Finding(False, facts=("no watch started: nothing measured progress",))
    held = rules.rule_stall(s) is not None
    st = s.status
    if st is not None and st.status not in rules.TERMINAL_STATUSES:
        limit, phase, name = _stall_limit_name(s)
        m = Measure("no progress for", s.last_at - s.progress_at, name, limit, held, note=phase)
        facts = ("the last status fetch failed: the stall rule waits for a good one",)
        return Finding(held, (m,), facts if s.cycle == "error" else ())
    # The job ended (or never answered): the longest stretch at any point the rule judged.
    best: tuple[float, float, str, str] | None = None
    for i, (_, _, after) in enumerate(p.steps):
        status = after.status
        if after.cycle != "status" or status is None or status.status in rules.TERMINAL_STATUSES:
            continue
        if after.progress_at is None or after.last_at is None:
            continue
        if set(after.pending) - {"heartbeat"}:
            continue
        nxt = p.steps[i + 1][0] if i + 1 < len(p.steps) else None
        if "heartbeat" in after.pending and isinstance(nxt, HeartbeatObserved) and not nxt.forced:
            continue  # judged after that read
        idle = after.last_at - after.progress_at
        limit, phase, name = _stall_limit_name(after)
        if best is None or idle / limit > best[0] / best[1]:
            best = (idle, limit, phase, name)
    facts: tuple[str, ...] = ()
    if st is not None:
        facts = (f"the job reached {st.status} at {p.t(st.at)}, where the stall rule stops",)
    if best is None:
        return Finding(False, facts=(*facts, "the job never had a running status to judge"))
    idle, limit, phase, name = best
    m = Measure("no progress for", idle, name, limit, False, note=f"{phase}, longest stretch")
    return Finding(False, (m,), facts)


#: One finding per rule name: what the rule sees at a log's decision point.
RULE_FINDINGS: dict[str, Callable[[_Point], Finding]] = {
    "client_deadline": _find_client_deadline,
    "job_lost": _find_job_lost,
    "poll_errors": _find_poll_errors,
    "completed": _find_completed,
    "completed_with_error": _find_completed_with_error,
    "platform_termination": _find_platform_termination,
    "worker_failed": _find_worker_failed,
    "queue_grace": _find_queue_grace,
    "unhealthy_worker": _find_unhealthy_worker,
    "throttled_worker": _find_throttled_worker,
    "stall": _find_stall,
}
RULE_FUNCTIONS: dict[str, Callable[..., Verdict | None]] = {
    "client_deadline": rules.rule_client_deadline,
    **{r.name: r.check for r in rules.VERDICT_RULES},
}
RULE_STEPS: dict[str, str] = {
    "client_deadline": "1",
    **{r.name: r.step for r in rules.VERDICT_RULES},
}


def rule_why(rule: str) -> str:
    """The one-line why of a rule: its function's docstring, without the step prefix."""
    check = RULE_FUNCTIONS.get(rule)
    if check is None:
        return "a rule today's rules do not know"
    first = (inspect.getdoc(check) or "").strip().splitlines()[0]
    return re.sub(r"^(Step \d+|D\d+): ", "", first)


def _check_rule(rule: str) -> None:
    if rule not in RULE_FINDINGS:
        raise ValueError(f"unknown rule {rule!r}; the rules are: {', '.join(rules.RULE_NAMES)}")


# --- timers and the live view ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimerView:
    """A rule's running timer: since when, how long it has run, and its limit (seconds)."""

    rule: str
    name: str
    since: float
    elapsed: float
    limit: float

    @property
    def left(self) -> float:
        """Seconds until the rule may fire (negative: due at the next observation)."""
        return self.limit - self.elapsed

    @property
    def text(self) -> str:
        """The timer as one phrase."""
        left = f"{secs(self.left)} s left" if self.left >= 0 else "due at the next observation"
        return f"{self.name} {secs(self.limit)} s: {secs(self.elapsed)} s elapsed, {left}"


def running_timers(s: JobState, now: float) -> list[TimerView]:
    """The timers that can end a live job, soonest first, as of `now`."""
    if s.verdict is not None:
        return []
    p = s.policy
    out: list[TimerView] = []
    for rule, name, since, limit in (
        ("queue_grace", "queue grace", s.queued_since, p.queue_grace_s),
        ("throttled_worker", "throttled grace", s.throttled_since, p.throttled_grace_s),
        ("unhealthy_worker", "unhealthy grace", s.unhealthy_since, p.unhealthy_grace_s),
    ):
        if since is not None:
            out.append(TimerView(rule, name, since, now - since, limit))
    st = s.status
    if s.progress_at is not None and not (st is not None and st.status in rules.TERMINAL_STATUSES):
        limit, _, name = _stall_limit_name(s)
        out.append(TimerView("stall", name, s.progress_at, now - s.progress_at, limit))
    anchor = s.deadline_anchor
    if p.deadline_s is not None and anchor is not None:
        out.append(
            TimerView("client_deadline", "client deadline", anchor, now - anchor, p.deadline_s)
        )
    return sorted(out, key=lambda t: t.left)


@dataclass(frozen=True, slots=True)
class WatchView:
    """A job log as a live watcher sees it at `now`."""

    stream: str | None
    state: str
    since: float  # when the job entered its state
    now: float
    last_at: float | None
    status: str | None  # the last job status observed
    events: int
    poll_errors: int  # consecutive status errors so far
    verdict: Concluded | None
    timers: tuple[TimerView, ...] = ()

    @property
    def in_state_s(self) -> float:
        """Seconds in the current state (up to the verdict once there is one)."""
        end = self.verdict.at if self.verdict is not None else self.now
        return end - self.since

    @property
    def next_timer(self) -> TimerView | None:
        """The timer that will fire first, if nothing changes."""
        return self.timers[0] if self.timers else None


def watch_view(events: Iterable[Event], now: float) -> WatchView:
    """The live view of a job log at `now`: state, time in state, and its running timers."""
    s = JobState()
    since: float | None = None
    count = 0
    for event in events:
        count += 1
        before = s.state
        evolve(s, event)
        if since is None or s.state != before:
            since = event.at
    return WatchView(
        stream=s.stream,
        state=s.state,
        since=now if since is None else since,
        now=now,
        last_at=s.last_at,
        status=s.last_status,
        events=count,
        poll_errors=len(s.error_seqs) if s.cycle == "error" else 0,
        verdict=s.verdict,
        timers=tuple(running_timers(s, now)),
    )


# --- explain and why-not ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """An event a verdict rests on."""

    seq: int
    at: float
    offset: float
    kind: str
    summary: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a log's verdict fired: the rule, its why, its evidence and its numbers."""

    stream: str | None
    state: str
    verdict: Concluded | None
    rule: str | None
    step: str | None  # where the rule sits in DESIGN §6
    why: str | None  # the rule's one-line why
    at: float  # the verdict's time (the last event's, with no verdict)
    offset: float
    evidence: tuple[EvidenceItem, ...] = ()
    measures: tuple[Measure, ...] = ()
    facts: tuple[str, ...] = ()
    timers: tuple[TimerView, ...] = ()  # running at the end, when there is no verdict

    @property
    def numbers(self) -> tuple[str, ...]:
        """The measures as phrases: "IN_QUEUE 310 s > queue grace 300 s"."""
        return tuple(m.text for m in self.measures)

    @property
    def because(self) -> str:
        """Numbers and facts as one line."""
        return "; ".join([*self.numbers, *self.facts])


def explain(events: Iterable[Event]) -> Explanation:
    """Why the log's verdict fired (or where an open log stands)."""
    events = list(events)
    p = _decision_point(events)
    stream = events[0].stream if events else None
    verdict = p.verdict
    if verdict is None:
        s = p.state
        fact = f"no verdict yet: {s.state} at {p.t(p.at)}"
        return Explanation(
            stream,
            s.state,
            None,
            None,
            None,
            None,
            p.at,
            p.at - p.start,
            facts=(fact,),
            timers=tuple(running_timers(s, p.at)),
        )
    by_seq = {e.seq: e for e in events}
    evidence = tuple(
        EvidenceItem(seq, e.at, e.at - p.start, e.kind, summarize(e))
        for seq in verdict.evidence
        if (e := by_seq.get(seq)) is not None
    )
    find = RULE_FINDINGS.get(verdict.rule)
    finding = find(p) if find is not None else Finding(True, facts=(_first_line(verdict.detail),))
    return Explanation(
        stream,
        verdict.state,
        verdict,
        verdict.rule,
        RULE_STEPS.get(verdict.rule),
        rule_why(verdict.rule),
        verdict.at,
        verdict.at - p.start,
        evidence,
        finding.measures,
        finding.facts,
    )


@dataclass(frozen=True, slots=True)
class WhyNot:
    """Why one rule did not end the job (or that it did)."""

    rule: str
    fired: bool  # this rule reached the recorded verdict
    held: bool  # its condition holds at the decision point
    verdict_rule: str | None
    at: float
    offset: float
    measures: tuple[Measure, ...]
    facts: tuple[str, ...]
    text: str


def why_not_report(events: Iterable[Event], rule: str) -> WhyNot:
    """Why `rule` did not fire at the verdict (or by the end of a log without one)."""
    _check_rule(rule)
    p = _decision_point(list(events))
    finding = RULE_FINDINGS[rule](p)
    verdict = p.verdict
    when = p.t(p.at)
    fired = verdict is not None and verdict.rule == rule
    if fired:
        text = f"{rule} did fire, at {when}: {finding.text}"
    elif finding.held and verdict is not None:
        text = (
            f"{rule} holds too at {when} ({finding.text}), "
            f"but {verdict.rule} comes first in the rule order"
        )
    elif finding.held:
        text = f"{rule} holds at the end of the log ({when}): {finding.text}; it fires next"
    else:
        where = (
            f"at the verdict ({when})" if verdict is not None else f"by the end of the log ({when})"
        )
        text = f"{rule} did not fire {where}: {finding.text}"
    return WhyNot(
        rule,
        fired,
        finding.held,
        None if verdict is None else verdict.rule,
        p.at,
        p.at - p.start,
        finding.measures,
        finding.facts,
        text,
    )


def why_not(events: Iterable[Event], rule: str) -> str:
    """Why `rule` (any of `rules.RULE_NAMES`) did not fire, quoting its numbers."""
    return why_not_report(events, rule).text


# --- what-if ----------------------------------------------------------------------------------

#: What a counterfactual replay can find.
WHATIF_OUTCOMES = ("earlier", "different", "same", "observations_end")


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The recorded observations replayed under another policy."""

    overrides: dict[str, Any]
    recorded_policy: GracePolicy
    policy: GracePolicy
    outcome: str  # one of WHATIF_OUTCOMES
    recorded: Concluded | None
    verdict: Verdict | None  # the new policy's verdict, when it reaches one
    at: float | None  # when the new policy concludes
    offset: float | None
    after_seq: int | None  # the last recorded observation it concludes on
    instead_of_seq: int | None  # the recorded event its verdict takes the place of
    end_at: float  # the last recorded observation's time
    end_offset: float
    timers: tuple[TimerView, ...] = ()  # running at the end, when it does not decide
    text: str = ""


def policy_with(base: GracePolicy, **overrides: Any) -> GracePolicy:
    """`base` with some fields replaced and validated; an unknown name is a `ValueError`."""
    known = list(GracePolicy.model_fields)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(
            f"unknown policy field(s) {', '.join(unknown)}; GracePolicy has: {', '.join(known)}"
        )
    return GracePolicy.model_validate({**base.model_dump(), **overrides})


def _decide_next(s: JobState, nxt: Event | None, now: float) -> Any:
    """`decide` at `now`, dropping regular heartbeat reads the log did not record."""
    probe = copy.copy(s)
    while True:
        command = decide(probe, now)
        if (
            isinstance(command, ReadHeartbeat)
            and not command.force
            and not (isinstance(nxt, HeartbeatObserved) and not nxt.forced)
        ):
            skip_read(probe)
            continue
        return command


def what_if(events: Iterable[Event], **overrides: Any) -> WhatIf:
    """Replay the recorded observations under the recorded policy with `overrides` applied.

    The recorded `Concluded` is dropped; before each observation `decide` is asked whether
    the new policy would already have concluded. Reports the first point where it concludes
    differently or earlier, that it reaches the same verdict, or that the recorded
    observations end before it would decide.
    """
    events = list(events)
    cut = next((i for i, e in enumerate(events) if isinstance(e, Concluded)), len(events))
    recorded = events[cut] if cut < len(events) else None
    assert recorded is None or isinstance(recorded, Concluded)
    observed = events[:cut]
    submitted = next((e for e in observed if isinstance(e, JobSubmitted)), None)
    base = submitted.policy if submitted is not None else DEFAULT_POLICY
    policy = policy_with(base, **overrides)
    log = [
        e.model_copy(update={"policy": policy}) if isinstance(e, JobSubmitted) else e
        for e in observed
    ]
    start = events[0].at if events else 0.0
    end_at = observed[-1].at if observed else start
    state = JobState(policy=policy)
    prev: Event | None = None
    found: tuple[Verdict, float, int, int] | None = None
    for event in log:
        if state.watch is not None and not isinstance(event, (WatchStarted, JobSubmitted)):
            command = _decide_next(state, event, event.at)
            if isinstance(command, Conclude):
                assert prev is not None
                v = command.verdict
                at = event.at if v.rule == "client_deadline" else prev.at
                found = (v, at, prev.seq, event.seq)
                break
        evolve(state, event)
        prev = event
    if found is None and prev is not None and state.watch is not None:
        command = _decide_next(state, None, prev.at)
        if isinstance(command, Conclude):
            found = (command.verdict, prev.at, prev.seq, prev.seq + 1)

    changes = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "the recorded policy"
    rec = ""
    if recorded is not None:
        rec = f"{recorded.state} by {recorded.rule} at t+{secs(recorded.at - start)} s"
    common = {
        "overrides": dict(overrides),
        "recorded_policy": base,
        "policy": policy,
        "recorded": recorded,
        "end_at": end_at,
        "end_offset": end_at - start,
    }
    if found is None:
        timers = tuple(running_timers(state, end_at))
        text = (
            f"with {changes}, the recorded observations end at t+{secs(end_at - start)} s "
            f"(seq {prev.seq if prev else '-'}) before the new policy would decide"
        )
        if timers:
            text += f"; the next timer: {timers[0].text}"
        if recorded is not None:
            text += f" (the log records {rec})"
        return WhatIf(
            outcome="observations_end",
            verdict=None,
            at=None,
            offset=None,
            after_seq=None,
            instead_of_seq=None,
            timers=timers,
            text=text,
            **common,
        )
    verdict, at, after_seq, instead_of = found
    said = f"{verdict.state.value} ({verdict.failure or 'success'}) by {verdict.rule}"
    when = f"t+{secs(at - start)} s, after seq {after_seq}"
    if recorded is None:
        outcome = "earlier"
        text = f"with {changes}, the job would conclude {said} at {when}; the log has no verdict"
    elif instead_of < recorded.seq:
        outcome = "earlier"
        text = (
            f"with {changes}, the job would conclude {said} at {when}, "
            f"{secs(recorded.at - at)} s before the recorded {rec}"
        )
    elif verdict.rule == recorded.rule and verdict.state.value == recorded.state:
        outcome = "same"
        text = f"with {changes}, the job reaches the same verdict, {said}, at {when}"
    else:
        outcome = "different"
        text = f"with {changes}, the job would conclude {said} at {when} instead of {rec}"
    detail = _first_line(verdict.detail, 160)
    if detail and outcome != "same":
        text += f": {detail}"
    return WhatIf(
        outcome=outcome,
        verdict=verdict,
        at=at,
        offset=at - start,
        after_seq=after_seq,
        instead_of_seq=instead_of,
        text=text,
        **common,
    )
