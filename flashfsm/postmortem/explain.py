"""Post-mortem views of a job log: the timeline, why the verdict fired, why another rule did
not, what another policy would have done, and the live view of a watch.

Theory of operation. Every view is a replay: each event is folded with `evolve` and the
state before and after is compared, so the timeline shows exactly what the live watch knew
at each step — the machine state it moved to and the timers each observation armed or
cleared. The *decision point* of a log is the state after its last observation (before the
recorded `Concluded`, when there is one), with the regular heartbeat read dropped as the
shell drops a read that found nothing new (`skip_read`). Nothing here knows a rule by
name: `explain` and `why_not` ask each rule's own declaration (`rules.RULES`) what it sees
there, the timeline and the live view read the timers the rules declare, and `what_if`
re-runs the recorded observations under another `GracePolicy`, asking `decide` before
each observation — as `job.verify` does — whether the new policy would already have
concluded. `what_if_corpus` runs that same replay over many logs and totals what changed:
verdicts moved from one to another, time to verdict gained and lost, and the money the
changed verdicts save or throw away, priced by the ledger exactly as `cost` prices the
recorded attempt (`flashfsm.postmortem.ledger.attempt_bill`, the run's reactions to the verdict
moved with it). Nothing here reads a clock: the live view takes `now`.

Why it is long: `explain`, `why-not`, `whatif` (one log and a corpus) and the live view all
replay a log through the same points and measures; they share that machinery.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flashfsm.events.models import (
    Concluded,
    Event,
    HeartbeatObserved,
    JobSubmitted,
    WatchStarted,
    WorkerLogObserved,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.commands import Command, Conclude, ReadWorkerLog, Verdict
from flashfsm.fsm.findings import (
    Finding,
    Measure,
    Point,
    WorkerLog,
    WorkerSeen,
    first_line,
    secs,
    summarize,
    worker_evidence,
)
from flashfsm.fsm.job import decide_before, evolve, skip_read
from flashfsm.fsm.rules import PROGRESS_TIMER, RULE_NAMES, RULES_BY_NAME, TIMER_RULES, TIMERS
from flashfsm.fsm.state import DEFAULT_POLICY, SEQ, SINCE, JobState
from flashfsm.fsm.table import FAILURE_KIND
from flashfsm.postmortem.ledger import (
    AttemptContext,
    AttemptLedger,
    Cause,
    Outcome,
    attempt_bill,
    job_context,
    log_kind,
    newest,
    queued_jobs,
    store_reaps,
)

#: The timers a timeline shows arming and clearing: those a rule declares a clear for.
TIMELINE_TIMERS: tuple[str, ...] = tuple(spec.name for spec in TIMERS if spec.clears)


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


def timeline(events: Iterable[Event]) -> list[TimelineRow]:
    """Every event with the state change and the timers it caused."""
    state = JobState()
    rows: list[TimelineRow] = []
    start: float | None = None
    for event in events:
        before = state.copy()
        evolve(state, event)
        start = event.at if start is None else start
        armed = tuple(
            name for name in TIMELINE_TIMERS if name not in before.timers and name in state.timers
        )
        cleared = tuple(
            name for name in TIMELINE_TIMERS if name in before.timers and name not in state.timers
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
                progress=_progress_seq(state) == event.seq,
            )
        )
    return rows


def _progress_seq(s: JobState) -> int | None:
    timer = PROGRESS_TIMER.of(s)
    return None if timer is None else timer[SEQ]


# --- the decision point ------------------------------------------------------------------


def decision_point(events: Sequence[Event]) -> Point:
    """A log at its decision point (see `flashfsm.fsm.findings.Point`)."""
    cut = next((i for i, e in enumerate(events) if isinstance(e, Concluded)), len(events))
    verdict = events[cut] if cut < len(events) else None
    assert verdict is None or isinstance(verdict, Concluded)
    state = JobState()
    steps: list[tuple[Event, JobState, JobState]] = []
    judged: list[JobState] = []
    for i, event in enumerate(events[:cut]):
        before = state.copy()
        evolve(state, event)
        after = state.copy()
        steps.append((event, before, after))
        nxt = events[i + 1] if i + 1 < cut else None
        judged.append(_as_judged(after, nxt))
    decision = _as_judged(state.copy(), None)
    start = events[0].at if events else 0.0
    last_at = events[cut - 1].at if cut else start
    at = verdict.at if verdict is not None else last_at
    return Point(steps, decision, at, start, verdict, judged)


def _as_judged(after: JobState, nxt: Event | None) -> JobState:
    """The state the rules judged after an event: a regular heartbeat read asked for there
    that the log does not record next found nothing new, so the shell dropped it
    (`skip_read`) and the rules judged without it."""
    if "heartbeat" not in after.pending or (isinstance(nxt, HeartbeatObserved) and not nxt.forced):
        return after
    return skip_read(after.copy())


def rule_why(rule: str) -> str:
    """The one-line why of a rule, as its declaration gives it."""
    known = RULES_BY_NAME.get(rule)
    return "a rule today's rules do not know" if known is None else known.why


def rule_step(rule: str) -> str | None:
    """Where a rule sits among the reference's steps (or the divergence it is)."""
    known = RULES_BY_NAME.get(rule)
    return None if known is None else known.step


def _check_rule(rule: str) -> None:
    if rule not in RULES_BY_NAME:
        raise ValueError(f"unknown rule {rule!r}; the rules are: {', '.join(RULE_NAMES)}")


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
    out: list[TimerView] = []
    for spec in TIMERS:
        timer, limit = spec.of(s), spec.limit(s)
        if timer is not None and limit is not None:
            name, value = limit
            rule = TIMER_RULES[spec.name].name
            out.append(TimerView(rule, name, timer[SINCE], now - timer[SINCE], value))
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
    step: str | None  # where the rule sits among the reference's steps
    why: str | None  # the rule's one-line why
    at: float  # the verdict's time (the last event's, with no verdict)
    offset: float
    evidence: tuple[EvidenceItem, ...] = ()
    measures: tuple[Measure, ...] = ()
    facts: tuple[str, ...] = ()
    timers: tuple[TimerView, ...] = ()  # running at the end, when there is no verdict
    worker: WorkerSeen | None = None  # the worker that took the job (the last pickup's)
    worker_log: WorkerLog | None = None  # its last log lines, read before the verdict

    @property
    def numbers(self) -> tuple[str, ...]:
        """The measures as phrases: "IN_QUEUE 310 s > queue grace 300 s"."""
        return tuple(m.text for m in self.measures)

    @property
    def because(self) -> str:
        """Numbers and facts as one line."""
        return "; ".join([*self.numbers, *self.facts])


def reads_heartbeat(state: JobState) -> bool:
    """Whether the job is watched with a heartbeat reader: its latest watch says; a job
    handed to a fleet and not watched yet, whether its hand-off says where the heartbeat is
    (`JobSubmitted.hub`). A job without one cannot learn a failure is retriable."""
    if state.watch is not None:
        return state.watch.has_heartbeat_reader
    return state.submitted is not None and state.submitted.hub is not None


def explain(events: Iterable[Event]) -> Explanation:
    """Why the log's verdict fired (or where an open log stands)."""
    events = list(events)
    p = decision_point(events)
    stream = events[0].stream if events else None
    verdict = p.verdict
    worker, worker_log = worker_evidence(events)
    if verdict is None:
        s = p.state
        fact = f"no verdict yet: {s.state} at {p.t(p.at)}"
        if s.submitted is not None and not reads_heartbeat(s):
            fact += " (no heartbeat reader)"
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
            worker=worker,
            worker_log=worker_log,
        )
    by_seq = {e.seq: e for e in events}
    evidence = tuple(
        EvidenceItem(seq, e.at, e.at - p.start, e.kind, summarize(e))
        for seq in verdict.evidence
        if (e := by_seq.get(seq)) is not None
    )
    known = RULES_BY_NAME.get(verdict.rule)
    if known is not None:
        finding = known.explain(p)
    else:  # a rule of an older version of the rules: its recorded detail is all there is
        finding = Finding(True, facts=(first_line(verdict.detail),))
    return Explanation(
        stream,
        verdict.state,
        verdict,
        verdict.rule,
        rule_step(verdict.rule),
        rule_why(verdict.rule),
        verdict.at,
        verdict.at - p.start,
        evidence,
        finding.measures,
        finding.facts,
        worker=worker,
        worker_log=worker_log,
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
    p = decision_point(list(events))
    finding = RULES_BY_NAME[rule].explain(p)
    verdict = p.verdict
    when = p.t(p.at)
    fired = verdict is not None and verdict.rule == rule
    if fired:
        text = f"{rule} did fire, at {when}: {finding.text}"
    elif finding.held and verdict is not None:
        # (among the rules with a timer the limit that passed first wins, D8)
        earlier = RULE_NAMES.index(verdict.rule) < RULE_NAMES.index(rule)
        why = "comes first in the rule order" if earlier else "had its limit pass first (D8)"
        text = f"{rule} holds too at {when} ({finding.text}), but {verdict.rule} {why}"
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
    """Why `rule` (any of `RULE_NAMES`) did not fire, quoting its numbers."""
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


#: A verdict a replay finds: the verdict, when, the observation it concludes on, the recorded
#: event it takes the place of.
_Found = tuple[Verdict, float, int, int]


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
    state, prev, found = _replay(log, policy, recorded)

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
    outcome, text = _compared(found, recorded, start, changes, rec)
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


def _replay(
    log: list[Event], policy: GracePolicy, recorded: Concluded | None
) -> tuple[JobState, Event | None, _Found | None]:
    """Replay `log` (under `policy`) asking before each observation, and once after the
    last, whether the watch concludes: the state at the end, the last observation folded,
    and the verdict found (None: the observations end first)."""
    state = JobState(policy=policy)
    prev: Event | None = None
    found: _Found | None = None
    for event in log:
        if state.watch is not None and not isinstance(event, (WatchStarted, JobSubmitted)):
            command = _concluding(state, event, event.at)
            if isinstance(command, Conclude):
                assert prev is not None
                v = command.verdict
                # a rule judged before a fetch concludes at the fetch it stops; the others
                # on the observation they rest on
                known = RULES_BY_NAME.get(v.rule)
                at = event.at if known is not None and known.before_fetch else prev.at
                found = (v, at, prev.seq, event.seq)
                break
        evolve(state, event)
        prev = event
    if found is None and prev is not None and state.watch is not None:
        # After the last observation the watch decided once more: at once, or — for a rule
        # judged before a fetch (the client deadline) — when that next fetch was due, which
        # is when the recorded verdict was made.
        at = prev.at if recorded is None else max(prev.at, recorded.at)
        command = _concluding(state, None, at)
        if isinstance(command, Conclude):
            known = RULES_BY_NAME.get(command.verdict.rule)
            at = at if known is not None and known.before_fetch else prev.at
            found = (command.verdict, at, prev.seq, prev.seq + 1)
    return state, prev, found


def _compared(
    found: _Found, recorded: Concluded | None, start: float, changes: str, rec: str
) -> tuple[str, str]:
    """The outcome of a replay that concludes (`WHATIF_OUTCOMES`), against the recorded
    verdict, and the sentence that says so."""
    verdict, at, after_seq, instead_of = found
    said = f"{verdict.state.value} ({verdict.failure or 'success'}) by {verdict.rule}"
    when = f"t+{secs(at - start)} s, after seq {after_seq}"
    if recorded is None:
        outcome = "earlier"
        text = f"with {changes}, the job would conclude {said} at {when}; the log has no verdict"
    elif instead_of < recorded.seq and at < recorded.at:  # (a sooner seq at the same time
        outcome = "earlier"  # is not sooner: its verdict is weighed like any other)
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
    detail = first_line(verdict.detail, 160)
    if detail and outcome != "same":
        text += f": {detail}"
    return outcome, text


def _concluding(state: JobState, nxt: Event | None, at: float) -> Command:
    """`decide_before`, with a verdict that waits for the worker's own log taken as made:
    a watch with a worker reader reads that log before it records a failing verdict, and
    the log is evidence, never a reason (the verdict is the same with or without it). When
    the next recorded event is that read, the watch made it: the verdict comes after it."""
    command = decide_before(state, nxt, at)
    if isinstance(command, ReadWorkerLog) and not isinstance(nxt, WorkerLogObserved):
        probe = state.copy()
        probe.worker_log = WorkerLogObserved(
            stream=state.stream or "", seq=0, id="what-if", at=at, read_error="not read"
        )
        return decide_before(probe, nxt, at)
    return command


# --- what-if over a corpus ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobLog:
    """One recorded job log of a corpus, and the hourly price of its worker (None: unknown).

    `context` is what its run (and the sweeper) recorded of it (`AttemptContext`; None: a
    bare job log, priced at `price_per_hour`); `as_of` is what an open bill is billed up to
    (None: the log's newest event). `corpus` builds these from a store's logs as `cost`
    reads them, so a job's recorded money is what `cost` says of its attempt.
    """

    stream: str
    events: Sequence[Event]
    price_per_hour: float | None = None
    context: AttemptContext | None = None
    as_of: float | None = None

    def attempt_context(self) -> AttemptContext:
        """The context the ledger prices this log in."""
        if self.context is not None:
            return self.context
        return job_context(self.events, self.price_per_hour)


@dataclass(frozen=True, slots=True)
class JobChange:
    """One job another policy judges differently (or at another time)."""

    stream: str
    outcome: str  # "earlier", "different" or "observations_end" (`WHATIF_OUTCOMES`)
    before: str  # the recorded verdict, as `verdict_label` says it
    after: str  # the new policy's ("undecided": the observations end first)
    ok_before: bool
    ok_after: bool | None  # None: undecided
    delta_s: float | None  # new time to verdict minus recorded (negative: sooner); None: undecided
    money_before: float | None  # billed money of the recorded attempt (None: no price)
    money_after: float | None  # of the attempt judged at the new verdict (undecided: at least)
    waste_before: float | None
    waste_after: float | None  # None: no price, or undecided (the verdict is not known)
    billed_before_s: float = 0.0
    billed_after_s: float = 0.0
    # The recorded attempt's billed cold start (its worker's start to the job's pickup, the
    # image pull with it): what a new attempt pays again for a success the policy loses.
    cold_start_s: float = 0.0
    cold_start_money: float | None = None

    @property
    def saved(self) -> float | None:
        """Billed money the new verdict does not spend, signed: negative when it spends more
        (None: no price). A job the new policy leaves undecided spends at least what the
        recorded verdict did, so it saves at most 0."""
        if self.money_before is None or self.money_after is None:
            return None
        return _signed(self.money_before - self.money_after)

    @property
    def success_lost(self) -> bool:
        """Whether a recorded success is a failure under the new policy."""
        return self.ok_before and self.ok_after is False

    @property
    def wasted(self) -> float | None:
        """Billed money the new verdict throws away more than the recorded one, signed:
        negative when it throws away less (None: no price, or undecided)."""
        if self.waste_before is None or self.waste_after is None:
            return None
        return _signed(self.waste_after - self.waste_before)


def _signed(money: float) -> float:
    """A difference of two sums of money, rid of the float noise of adding the same
    seconds in another order (a billionth of a dollar), so equal bills differ by 0."""
    return round(money, 9) + 0.0


@dataclass(frozen=True, slots=True)
class VerdictShift:
    """Every changed job that moved from one verdict to another: how many, and a few."""

    before: str
    after: str
    count: int
    examples: tuple[str, ...]
    delta_s: float  # summed over the jobs that decided (negative: sooner)
    saved: float | None
    wasted: float | None


#: The numbers a corpus what-if reports, which `--fail-if` can gate on.
CORPUS_METRICS: dict[str, str] = {
    "jobs": "recorded jobs replayed (with a verdict)",
    "changed": "jobs judged differently or at another time",
    "success_lost": "recorded successes the new policy turns into failures",
    "failure_to_success": "recorded failures the new policy lets succeed",
    "verdict_changed": "jobs whose verdict (state and rule) changes",
    "earlier": "jobs concluded sooner",
    "undecided": "jobs whose observations end before the new policy decides",
    "gained_s": "time to verdict gained, summed (seconds)",
    "lost_s": "time to verdict lost, summed over the jobs that decide (seconds)",
    "saved": "billed money the changed verdicts do not spend (negative: they spend more)",
    "wasted": "billed money the changed verdicts throw away besides (negative: less)",
    "cold_start_again_s": "billed cold start of the lost successes, which a new attempt pays "
    "again (seconds)",
    "cold_start_again": "its money",
}


@dataclass(frozen=True, slots=True)
class CorpusWhatIf:
    """Many recorded jobs replayed under another policy, and what changed."""

    overrides: dict[str, Any]
    jobs: int  # logs with a recorded verdict, replayed
    open: int  # logs with no verdict yet, skipped
    changes: tuple[JobChange, ...]
    shifts: tuple[VerdictShift, ...]  # the changes by (before, after), the most first

    @property
    def priced(self) -> bool:
        """Whether every changed job had a price (else money totals cover only those that did)."""
        return all(c.money_before is not None for c in self.changes)

    def metrics(self) -> dict[str, float]:
        """Every `CORPUS_METRICS` number."""
        ch = self.changes
        decided = [c for c in ch if c.delta_s is not None]
        return {
            "jobs": float(self.jobs),
            "changed": float(len(ch)),
            "success_lost": float(sum(c.success_lost for c in ch)),
            "failure_to_success": float(sum(not c.ok_before and bool(c.ok_after) for c in ch)),
            "verdict_changed": float(sum(c.before != c.after for c in ch)),
            "earlier": float(sum(c.outcome == "earlier" for c in ch)),
            "undecided": float(sum(c.delta_s is None for c in ch)),
            "gained_s": sum((-c.delta_s for c in decided if c.delta_s < 0), 0.0),  # type: ignore[operator]
            "lost_s": sum((c.delta_s for c in decided if c.delta_s > 0), 0.0),  # type: ignore[misc,operator]
            "saved": sum((c.saved or 0.0 for c in ch), 0.0),
            "wasted": sum((c.wasted or 0.0 for c in ch), 0.0),
            "cold_start_again_s": sum((c.cold_start_s for c in ch if c.success_lost), 0.0),
            "cold_start_again": sum((c.cold_start_money or 0.0 for c in ch if c.success_lost), 0.0),
        }


def verdict_label(state: str, ok: bool, rule: str | None) -> str:
    """A verdict in a few words: "SUCCEEDED", "STALLED (stall)"."""
    return state if ok or not rule else f"{state} ({rule})"


def recorded_bill(log: JobLog) -> AttemptLedger:
    """The recorded attempt's ledger: what `cost` says of it."""
    as_of = log.as_of if log.as_of is not None else newest(log.events)
    return attempt_bill(log.events, log.attempt_context(), as_of=as_of)


def counterfactual_bill(log: JobLog, w: WhatIf) -> AttemptLedger | None:
    """The attempt's ledger had the new policy's verdict been recorded (None: it reaches
    none). The same ledger as `cost`'s: the platform did what the log records (a job nobody
    cancels runs on past an earlier verdict); the run answers the new verdict as it
    answered the recorded one (its cancel and teardown move with the verdict)."""
    recorded = w.recorded
    if w.verdict is None or w.at is None or recorded is None:
        return None
    v = w.verdict
    outcome = Outcome(w.at, v.state.value, v.ok, FAILURE_KIND[v.state], v.rule)
    context = log.attempt_context().shifted(recorded.at, w.at - recorded.at)
    as_of = log.as_of if log.as_of is not None else newest(log.events)
    events = [e for e in log.events if not isinstance(e, Concluded)]
    return attempt_bill(events, context, outcome=outcome, as_of=as_of)


def job_change(log: JobLog, w: WhatIf) -> JobChange | None:
    """What a what-if changed for one recorded job (None: nothing, or no recorded verdict).

    Both bills are the ledger's (`recorded_bill`, `counterfactual_bill`). A job the new
    policy leaves undecided when the observations end would still be watched then: its
    verdict, and the run's answer to it, come no sooner than the recorded ones, so it spends
    at least what was recorded — its money is counted as that (saving 0) and its waste as
    unknown.
    """
    recorded = w.recorded
    if recorded is None or w.outcome == "same":
        return None
    before_ledger = recorded_bill(log)
    before = verdict_label(recorded.state, recorded.ok, recorded.rule)
    after_ledger = counterfactual_bill(log, w)
    if after_ledger is None or w.verdict is None or w.at is None:
        after, ok_after, delta = "undecided", None, None
        money_after, waste_after = before_ledger.money(), None
        billed_after = before_ledger.billed_s
    else:
        v = w.verdict
        after, ok_after = verdict_label(v.state.value, v.ok, v.rule), v.ok
        delta = w.at - recorded.at
        money_after, waste_after = after_ledger.money(), after_ledger.waste_money
        billed_after = after_ledger.billed_s
    return JobChange(
        stream=log.stream,
        outcome=w.outcome,
        before=before,
        after=after,
        ok_before=recorded.ok,
        ok_after=ok_after,
        delta_s=delta,
        money_before=before_ledger.money(),
        money_after=money_after,
        waste_before=before_ledger.waste_money,
        waste_after=waste_after,
        billed_before_s=before_ledger.billed_s,
        billed_after_s=billed_after,
        cold_start_s=before_ledger.billed_seconds(Cause.COLD_START),
        cold_start_money=before_ledger.money(Cause.COLD_START),
    )


def corpus(
    logs: Mapping[str, Sequence[Event]],
    price_per_hour: float | None = None,
    *,
    as_of: float | None = None,
) -> list[JobLog]:
    """Every job log of a store's `logs` (stream name to events) as a corpus entry, with
    what its run recorded of it (its price, the run's cancel and teardown, the deploy's
    idle timeout) or, for a job no run queued, priced at `price_per_hour`; the sweeper
    streams' reaps and `as_of` (None: the store's newest event) as `cost` applies them."""
    if as_of is None:
        as_of = newest(*logs.values())
    queued = queued_jobs(logs)
    reaps = store_reaps(logs)
    out = []
    for name, events in logs.items():
        if log_kind(events) != "job":
            continue
        context = queued.get(name) or job_context(events, price_per_hour, reaps)
        out.append(JobLog(name, events, context.price_per_hour, context, as_of))
    return out


#: How many example streams a verdict shift names.
SHIFT_EXAMPLES = 3


def what_if_corpus(logs: Iterable[JobLog], **overrides: Any) -> CorpusWhatIf:
    """`what_if` over every log of a corpus, with the recorded policy of each and
    `overrides` applied; the changes totalled by verdict shift. Logs with no verdict are
    skipped (counted in `open`)."""
    jobs = open_ = 0
    changes: list[JobChange] = []
    for log in logs:
        if not any(isinstance(e, Concluded) for e in log.events):
            open_ += 1
            continue
        jobs += 1
        change = job_change(log, what_if(log.events, **overrides))
        if change is not None:
            changes.append(change)
    by: dict[tuple[str, str], list[JobChange]] = {}
    for c in changes:
        by.setdefault((c.before, c.after), []).append(c)
    shifts = [
        VerdictShift(
            before,
            after,
            len(items),
            tuple(c.stream for c in items[:SHIFT_EXAMPLES]),
            sum((c.delta_s for c in items if c.delta_s is not None), 0.0),
            _total(c.saved for c in items),
            _total(c.wasted for c in items),
        )
        for (before, after), items in by.items()
    ]
    shifts.sort(key=lambda s: (-s.count, s.before, s.after))
    return CorpusWhatIf(dict(overrides), jobs, open_, tuple(changes), tuple(shifts))


def _total(values: Iterable[float | None]) -> float | None:
    values = list(values)
    return None if all(v is None for v in values) else sum((v or 0.0 for v in values), 0.0)


#: The comparisons a gate may use.
GATE_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}


@dataclass(frozen=True, slots=True)
class Gate:
    """A threshold on a corpus what-if: `metric op limit` crossed fails the gate."""

    metric: str
    op: str
    limit: float

    @property
    def text(self) -> str:
        """The gate as written: "success_lost>0"."""
        return f"{self.metric}{self.op}{self.limit:g}"

    def crossed(self, result: CorpusWhatIf) -> bool:
        """Whether the result crosses this threshold."""
        return GATE_OPS[self.op](result.metrics()[self.metric], self.limit)


def parse_gate(text: str) -> Gate:
    """A gate from `METRIC>N` (also >=, <, <=, ==); a `ValueError` names what is wrong."""
    for op in GATE_OPS:  # two-character operators are tried first
        name, sep, value = text.partition(op)
        if sep:
            name, value = name.strip(), value.strip()
            if name not in CORPUS_METRICS:
                raise ValueError(
                    f"unknown metric {name!r}; the metrics are: {', '.join(CORPUS_METRICS)}"
                )
            try:
                limit = float(value)
            except ValueError:
                raise ValueError(f"{text!r}: {value!r} is not a number") from None
            if limit != limit:
                raise ValueError(f"{text!r}: the limit must be a number, not NaN")
            return Gate(name, op, limit)
    raise ValueError(f"{text!r}: write METRIC>N (or >=, <, <=, ==), e.g. success_lost>0")
