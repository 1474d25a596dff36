"""The job rules: each verdict rule is one declaration and one measure, from which everything
else derives.

Theory of operation. Two kinds of rule live here.

*Bookkeeping rules* (steps 2, 3, 8, 9 and the divergences D2, D3, D5) say how one
observation moves the poll along: the back-off after a status error, when a probe or a
heartbeat read is due, what counts as progress, what a blind gap does. They are small
named functions the fold (`flashfsm.fsm.job.evolve`) calls.

*Verdict rules* each end a watch. A verdict rule is one `Rule` in `RULES`, and that
declaration holds all of it:

- `name`, `step` (where it sits among the reference's steps, or the divergence it is),
  the one-line `why`, and what `fires` it and the `verdict` it reaches (the docs' table);
- `timer`: the timer it runs, as the *signals* that arm, restart and clear it (D1 is the
  line "cleared when the job leaves IN_QUEUE" of the throttled and unhealthy timers). The
  fold emits a signal for each thing it observes; it applies every timer's declaration
  and knows no timer by name;
- `waits_for`: the reads of a poll it judges after (`Read`): a good status answer (a
  failed fetch is not judged by a rule that waits for one) and any reads the poll still
  has pending. While one is missing the rule does not judge; the judge (`judging`), not
  the rule, consults this. `forces`: the reads a late poll makes for it off their pace
  (D8, below);
- `measure(state, now, t=None)`: the rule itself, its only implementation. It compares
  the numbers with the limits and returns a `Finding`: when the rule fires, its verdict
  (the terminal state, the detail, the evidence seqs) and the `Measure`s behind it. Asked
  as a check (`t` None) it returns a finding only when the rule fires, and nothing else
  is built, so the checks stay cheap after every observation; asked to explain (`t`
  writes a time, `Point.t`) it returns what the rule sees fired or not, with its facts in
  words. `Rule.check` is the measure gated by `waits_for`: `judge` tries the checks in
  `RULES` order, so the order decides which rule wins when two could fire in the same
  poll. A rule marked `before_fetch` (the client deadline) is checked with `now` just
  before a status fetch; every other rule judges by the time of the observations it
  rests on, so re-running the rules over a recorded log gives the same answer;
- `render(point, seen)`: the words of `explain`, `why-not` and `whatif` at a log's
  decision point (`flashfsm.fsm.findings.Point`), written from `seen` (`Seen`): what the
  measure found there and at each earlier point of the log. A renderer picks and words
  findings (the longest wait, the last probe); it never compares a number with a limit,
  so changing what a rule measures changes its verdict and its explanation together.

`judge`, `decide`'s client deadline, the explanations (`flashfsm.postmortem.explain`), the live
view's timers and the docs' rule table (`flashfsm.postmortem.docs`) are all read off `RULES`.
Adding a rule is one declaration here plus its tests.

Why it is long: one declaration and one measure per rule (the verdict rules and the
bookkeeping rules): reading them together, in the order they are tried, is the point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum
from typing import Protocol

from flashfsm.events.models import (
    END_STAGE,
    Event,
    HealthObserved,
    HeartbeatObserved,
    StatusFetchFailed,
    StatusObserved,
    WorkerObserved,
)
from flashfsm.events.policy import DEFAULT_POLICY
from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.findings import Finding, Measure, Point, TimeText, first_line, summarize
from flashfsm.fsm.state import SEQ, SINCE, JobState, Timer
from flashfsm.fsm.table import JobPhase

#: Job statuses that end the job on RunPod's side.
TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
#: The platform ended the job: infra-shaped, retried, no worker heartbeat consulted.
PLATFORM_TERMINATIONS = frozenset({"CANCELLED", "TIMED_OUT"})
QUEUED_STATUS = "IN_QUEUE"
#: A listed worker's states (`WorkerObserved.status`) that mean capacity was found for the
#: job: a worker is starting or up. `throttled` waits for a host; `unhealthy` crash-loops.
STARTED_STATES = frozenset({"initializing", "running", "idle", "ready"})
UNHEALTHY_STATE = "unhealthy"
#: Heartbeat stages sent during cold start, before the training loop runs.
SETUP_STAGE_ORDER = ("boot", "sft_start", "rl_start", "sft_model_load", "rl_train_start")
SETUP_STAGES = frozenset(SETUP_STAGE_ORDER)
#: Float slack when pacing heartbeat reads: poll times are sums of recorded floats, and a
#: poll due exactly `heartbeat_every_s` after the last read must not miss it by an ulp.
HEARTBEAT_PACE_SLACK_S = 1e-3
#: How far ahead of the moment it was read a heartbeat's `ts` may be and still be this
#: attempt's own: a worker's clock may run a little ahead of the supervisor's, not more.
HEARTBEAT_FUTURE_TOLERANCE_S = 60.0
#: HTTP statuses on the status route that mean RunPod refused the key (D6).
AUTH_STATUSES = frozenset({401, 403})
#: The HTTP status on the status route that means the job is gone (D4).
LOST_STATUSES = frozenset({404})


# --- bookkeeping rules (called by the fold) -------------------------------------------------


def status_error_backoff(interval_s: float, streak: int, cap_s: float) -> float:
    """Step 2: after the n-th consecutive status error wait min(cap, interval × n)."""
    return min(cap_s, interval_s * streak)


def status_counts_as_progress(previous: str | None, status: str) -> bool:
    """Step 3: a status different from the previous one is progress (the job moved)."""
    return status != previous


def probe_is_due(last_probe_at: float | None, at: float, every_s: float) -> bool:
    """Step 8: probe `/health` while queued, at most once per `every_s`."""
    return last_probe_at is None or at - last_probe_at > every_s


def heartbeat_read_is_due(last_asked_at: float | None, at: float, every_s: float | None) -> bool:
    """Step 9, D5: a poll asks for a regular heartbeat read at most once per `every_s`.

    The pace is kept by the core from the log (`last_asked_at` is the time of the last poll
    that asked, None at the start of a watch, moved forward by a blind gap), not by the
    reader process, so a reattached watcher asks on the polls an uninterrupted one would
    (moved by the gap; the first poll after the gap reads too).
    `every_s` None asks on every poll (policies recorded before the knob existed).
    """
    if every_s is None or last_asked_at is None:
        return True
    return at - last_asked_at >= every_s - HEARTBEAT_PACE_SLACK_S


def worker_condition(health: HealthObserved) -> tuple[bool, bool]:
    """Step 8: (stuck unhealthy, stuck throttled) from one probe.

    A worker is stuck only when nothing is usable (running, ready, idle) and nothing is
    recovering (initializing): a crash loop or a full host next to a healthy worker is noise.
    """
    w = health.workers
    blocked = not (w.running or w.ready or w.idle) and not w.initializing
    return blocked and w.unhealthy > 0, blocked and w.throttled > 0


def is_leftover_heartbeat(hb: HeartbeatObserved, submitted_at: float | None) -> bool:
    """D3: a heartbeat stamped before this job's submission belongs to an earlier attempt.

    Retries share the heartbeat path, so the file may still hold the last attempt's beat:
    it is neither progress nor a `retriable` flag for this job.
    """
    return submitted_at is not None and hb.ts is not None and hb.ts < submitted_at


def untrusted_heartbeat_ts(hb: HeartbeatObserved, asked_at: float | None = None) -> str | None:
    """D3: why a heartbeat's `ts` cannot date it to this attempt, or None when it can.

    A heartbeat with no `ts` (missing, or not a finite number: the parser drops NaN,
    infinities and non-numbers, and the event refuses them) or one stamped more than
    `HEARTBEAT_FUTURE_TOLERANCE_S` after it was read cannot be told from a leftover of an
    earlier attempt, so its `retriable` flag does not count: a failure stays the job's own
    unless a fresh heartbeat says otherwise. `asked_at` is when the read was first asked
    for (a forced read: when the failure was seen), so a read tried again after a transient
    error judges the same `ts` as the first try would have (default: when it was read).
    """
    ts = hb.ts
    if ts is None:
        return "has no usable `ts`"
    ahead = ts - (hb.at if asked_at is None else asked_at)
    if ahead > HEARTBEAT_FUTURE_TOLERANCE_S:
        return (
            f"is stamped {ahead:.0f}s after it was read "
            f"(tolerance {HEARTBEAT_FUTURE_TOLERANCE_S:.0f}s)"
        )
    return None


def is_training_stage(stage: str | None) -> bool:
    """Step 9: any stage outside the cold-start set means the training loop runs."""
    return stage not in SETUP_STAGES


def forced_read_retry_at(
    failed_at: float, failures: int, tries: int, backoff_s: float
) -> float | None:
    """Steps 4 and 6: a forced heartbeat read that failed on a transient error is read again.

    A Hub 5xx, 429, timeout or reset says nothing about the heartbeat, so it must not decide
    whether a failure is retried: after the n-th failed forced read the next one is due
    `backoff × n` later, until `tries` reads have failed (None: the tries are spent, and the
    verdict rests on no heartbeat). The time comes from the failed read's event, so a replay
    schedules the retry where the live watch did.
    """
    if failures >= tries:
        return None
    return failed_at + backoff_s * failures


def blind_gap(previous_at: float | None, watch_at: float) -> float:
    """D2: the time nobody watched, between the last event and a reattach; charged to no timer."""
    if previous_at is None:
        return 0.0
    return max(0.0, watch_at - previous_at)


def watched_late(submitted_at: float | None, watch_at: float, interval_s: float) -> bool:
    """D9: a first watch that starts more than a poll interval after the submission came
    late: nobody saw what the job did before it (a handle watched long after it was
    submitted), as after a blind gap."""
    return submitted_at is not None and watch_at - submitted_at > interval_s


def stall_limit(s: JobState) -> tuple[float, str]:
    """Step 10: the setup grace while a heartbeat reader can tell setup from training and no
    training heartbeat was seen yet; the stall window otherwise."""
    if s.has_heartbeat_reader and not s.training_seen:
        return s.policy.setup_grace_s, "setup (pre-training)"
    return s.policy.stall_after_s, "training"


# --- timers ---------------------------------------------------------------------------------


class Signal(Enum):
    """What the fold observed, as far as the rules' timers care."""

    SUBMITTED = "a submission time was recorded"
    WATCH_STARTED = "the first watch of the job started"
    QUEUED = "an IN_QUEUE status"
    LEFT_QUEUE = "a status saying a worker has the job"
    STATUS_CHANGED = "a status different from the previous one"
    NEW_HEARTBEAT = "a heartbeat of this attempt with a new (stage, step, ts)"
    PROBE_UNHEALTHY = "a probe finding only unhealthy workers"
    PROBE_NOT_UNHEALTHY = "a probe not finding only unhealthy workers"
    PROBE_THROTTLED = "a probe finding only throttled workers"
    PROBE_NOT_THROTTLED = "a probe not finding only throttled workers"
    WORKER_NONE = "a worker record read while IN_QUEUE listing no worker"
    WORKER_CRASHING = "a worker record read while IN_QUEUE listing an unhealthy worker"
    WORKER_STARTING = "a worker record read while IN_QUEUE listing a starting or up worker"


#: What a timer's reading is: its name in the live view and its limit, or None when the
#: timer does not count for the state as it is (a stall timer once the job has ended).
TimerLimit = Callable[[JobState], tuple[str, float] | None]


@dataclass(frozen=True, slots=True)
class TimerSpec:
    """A rule's timer: its name (its key in `JobState.timers`) and the signals that move it.

    `arms` start it when it is not running, `restarts` start it anew either way, `clears`
    stop it. A blind gap shifts it forward (D2) unless `shifts_on_gap` is False.
    """

    name: str
    limit: TimerLimit
    arms: tuple[Signal, ...] = ()
    restarts: tuple[Signal, ...] = ()
    clears: tuple[Signal, ...] = ()
    shifts_on_gap: bool = True

    def __post_init__(self) -> None:
        for role in ("arms", "restarts", "clears"):
            for signal in getattr(self, role):
                if not isinstance(signal, Signal):
                    raise TypeError(
                        f"timer {self.name} {role} {signal!r}: not a Signal (a bare name would "
                        f"never be emitted; the signals: {', '.join(s.name for s in Signal)})"
                    )

    def of(self, s: JobState) -> Timer | None:
        """This timer in `s`, when it runs."""
        return s.timers.get(self.name)


def _queue_limit(s: JobState) -> tuple[str, float] | None:
    if _worker_listed(s) is not None:  # capacity was found: the queue grace no longer counts
        return None
    return "queue grace", s.policy.queue_grace_s


def _worker_listed(s: JobState) -> tuple[str, Timer] | None:
    """The queue timer a worker record armed in this queue spell (crash-looping first, then
    starting), when the policy tells queue verdicts apart by the records (D10)."""
    timers = s.timers
    # (asked after every queued observation: two look-ups, no loop, the policy read last)
    if _CRASHING in timers:
        name = _CRASHING
    elif _STARTING in timers:
        name = _STARTING
    else:
        return None
    return (name, timers[name]) if s.policy.queue_by_workers else None


def _throttled_limit(s: JobState) -> tuple[str, float]:
    return "throttled grace", s.policy.throttled_grace_s


def _unhealthy_limit(s: JobState) -> tuple[str, float]:
    return "unhealthy grace", s.policy.unhealthy_grace_s


def _start_limit(s: JobState) -> tuple[str, float]:
    return "start grace", s.policy.start_grace_s


def stall_limit_name(s: JobState) -> tuple[float, str, str]:
    """The stall limit, the phase it belongs to and the limit's name."""
    limit, phase = stall_limit(s)
    if phase == "training":
        return limit, phase, "stall window"
    return limit, "setup, no training heartbeat yet", "setup grace"


def _progress_limit(s: JobState) -> tuple[str, float] | None:
    st = s.status
    if st is not None and st.status in TERMINAL_STATUSES:
        return None
    limit, _, name = stall_limit_name(s)
    return name, limit


def _deadline_limit(s: JobState) -> tuple[str, float] | None:
    deadline = s.policy.deadline_s
    return None if deadline is None else ("client deadline", deadline)


QUEUE_TIMER = TimerSpec("queue", _queue_limit, arms=(Signal.QUEUED,), clears=(Signal.LEFT_QUEUE,))
THROTTLED_TIMER = TimerSpec(
    "throttled",
    _throttled_limit,
    arms=(Signal.PROBE_THROTTLED,),
    clears=(Signal.PROBE_NOT_THROTTLED, Signal.LEFT_QUEUE),  # LEFT_QUEUE: D1
)
UNHEALTHY_TIMER = TimerSpec(
    "unhealthy",
    _unhealthy_limit,
    arms=(Signal.PROBE_UNHEALTHY,),
    clears=(Signal.PROBE_NOT_UNHEALTHY, Signal.LEFT_QUEUE),  # LEFT_QUEUE: D1
)
#: The queue timers the worker records keep (only a watch with a worker reader has them):
#: a worker listed starting or up (capacity was found), and one listed crash-looping.
STARTING_TIMER = TimerSpec(
    "starting",
    _start_limit,
    arms=(Signal.WORKER_STARTING,),
    clears=(Signal.WORKER_NONE, Signal.LEFT_QUEUE),
)
CRASHING_TIMER = TimerSpec(
    "crashing",
    _unhealthy_limit,
    arms=(Signal.WORKER_CRASHING,),
    clears=(Signal.WORKER_NONE, Signal.LEFT_QUEUE),
)
PROGRESS_TIMER = TimerSpec(
    "progress",
    _progress_limit,
    restarts=(Signal.WATCH_STARTED, Signal.STATUS_CHANGED, Signal.NEW_HEARTBEAT),
)
DEADLINE_TIMER = TimerSpec(
    "deadline",
    _deadline_limit,
    arms=(Signal.WATCH_STARTED,),
    restarts=(Signal.SUBMITTED,),
    shifts_on_gap=False,  # D2: the client deadline is wall-clock from submission
)
#: The names of the timers the hottest measures read (their declarations' names).
_QUEUE, _PROGRESS = QUEUE_TIMER.name, PROGRESS_TIMER.name
_STARTING, _CRASHING = STARTING_TIMER.name, CRASHING_TIMER.name


# --- the reads a rule waits for -------------------------------------------------------------


class Read(StrEnum):
    """What a poll reads: its status answer, then the reads it makes due.

    Every member but `STATUS` is a name `JobState.pending` holds while that read is due
    (the fold writes them; each is declared once in `flashfsm.fsm.reads`).
    `STATUS` is the poll's status answer itself: a rule that waits for it judges only a
    poll whose fetch was answered, never one whose fetch failed.
    """

    STATUS = "status"
    PROBE = "probe"
    HEARTBEAT = "heartbeat"
    FORCED_HEARTBEAT = "forced_heartbeat"
    FAILURE_DETAIL = "failure_detail"
    WORKER = "worker"


#: Every read of a poll: what a rule judged once the poll is complete waits for.
EVERY_READ: frozenset[Read] = frozenset(Read)
#: The reads a late poll can be made to do although their pace did not ask: a health probe
#: while IN_QUEUE (the heartbeat keeps its pace, D5).
OFF_PACE_READS: frozenset[Read] = frozenset({Read.PROBE})


def reads(names: Iterable[Read | str], owner: str) -> frozenset[Read]:
    """`names` as reads; a name that is no `Read` raises `ValueError` naming `owner`."""
    out = set()
    for name in names:
        try:
            out.add(Read(name))
        except ValueError:
            known = ", ".join(r.value for r in Read)
            raise ValueError(f"{owner}: {name!r} is not a read (the reads: {known})") from None
    return frozenset(out)


# --- the declaration ----------------------------------------------------------------------


class Measuring(Protocol):
    """A rule's measure: see the module notes."""

    def __call__(self, s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
        """The rule's finding at `s` and `now` (`t` None: only when it fires)."""
        ...


#: A rule's words at a log's decision point, written from what its measure saw there.
Render = Callable[[Point, "Seen"], Finding]


def show_now(p: Point, seen: Seen) -> Finding:
    """The default words of a rule: what its measure sees at the decision point."""
    if seen.now is not None:
        return seen.now
    return Finding(False, facts=(f"{seen.rule.name} has nothing to measure at {p.t(p.at)}",))


@dataclass(frozen=True, slots=True)
class Rule:
    """One verdict rule, whole: see the module notes.

    `waits_for` and `forces` may be given as any iterable of `Read` names; a name that is
    no read raises at the declaration (`ValueError`), and so does a forced read the rule
    does not wait for or that cannot be made off its pace.
    """

    name: str
    step: str
    why: str
    fires: str
    verdict: str
    measure: Measuring
    render: Render = show_now
    timer: TimerSpec | None = None
    before_fetch: bool = False
    waits_for: frozenset[Read] = field(default_factory=frozenset)
    forces: frozenset[Read] = field(default_factory=frozenset)
    #: The rule judges a failed status fetch only (a refusal, a 404): a status answer
    #: clears the failed fetch, so after one its measure finds nothing and `decide` does
    #: not ask it (one call less per poll).
    on_failed_fetch: bool = False
    #: The last statuses the rule can fire at: its measure finds nothing at any other, nor
    #: before the first status answer (empty: any status, or none). `decide` asks it only
    #: at those (six calls less per observation of a running job).
    statuses: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        waits = reads(self.waits_for, f"rule {self.name} waits_for")
        forces = reads(self.forces, f"rule {self.name} forces")
        if not forces <= (waits & OFF_PACE_READS):
            raise ValueError(
                f"rule {self.name} forces {sorted(forces - (waits & OFF_PACE_READS))}: a rule "
                "forces only reads it waits for and that can be made off their pace "
                f"({', '.join(sorted(OFF_PACE_READS))})"
            )
        if self.before_fetch and waits:
            raise ValueError(f"rule {self.name} is judged before a fetch: it can wait for no read")
        object.__setattr__(self, "waits_for", waits)
        object.__setattr__(self, "forces", forces)

    def waiting(self, s: JobState) -> bool:
        """Whether the rule waits at `s` for a read it judges after (so it does not judge)."""
        waits = self.waits_for
        if Read.STATUS in waits and s.cycle != "status":
            return True
        return bool(s.pending) and not waits.isdisjoint(s.pending)

    def check(self, s: JobState, now: float) -> Finding | None:
        """The rule's finding when it fires at `s` and `now` (its measure, once it judges)."""
        return None if self.waiting(s) else self.measure(s, now)

    def see(self, s: JobState, now: float, t: TimeText) -> Finding | None:
        """What the rule sees at `s` and `now`, fired or not (None: nothing to see); while
        it waits for a read, nothing it sees holds."""
        finding = self.measure(s, now, t)
        if finding is None or not finding.held or not self.waiting(s):
            return finding
        measures = tuple(replace(m, fired=False) for m in finding.measures)
        return replace(finding, held=False, measures=measures)

    def explain(self, p: Point) -> Finding:
        """What the rule sees at the log's decision point, fired or not, in words."""
        return self.render(p, Seen(self, p))


class Seen:
    """What one rule's measure found in a log: at its decision point (`now`), and at the
    point after each earlier event (`history`; `judged`: where the rule judged)."""

    __slots__ = ("_history", "_now", "point", "rule")

    def __init__(self, rule: Rule, point: Point) -> None:
        self.rule, self.point = rule, point
        self._now: tuple[Finding | None] | None = None
        self._history: list[tuple[Event, Finding, bool]] | None = None

    @property
    def now(self) -> Finding | None:
        """What the rule sees at the decision point (None: nothing)."""
        if self._now is None:
            p = self.point
            self._now = (self.rule.see(p.state, p.at, p.t),)
        return self._now[0]

    @property
    def held(self) -> bool:
        """Whether the rule fires at the decision point."""
        now = self.now
        return now is not None and now.held

    def _points(self) -> list[tuple[Event, Finding, bool]]:
        if self._history is None:
            rule, p = self.rule, self.point
            found: list[tuple[Event, Finding, bool]] = []
            for (event, _, _), s in zip(p.steps, p.judged, strict=True):
                finding = rule.see(s, event.at, p.t)
                if finding is not None:
                    found.append((event, finding, not rule.waiting(s)))
            self._history = found
        return self._history

    @property
    def history(self) -> list[tuple[Event, Finding]]:
        """What the rule saw after each event that it saw anything at, in order."""
        return [(event, finding) for event, finding, _ in self._points()]

    @property
    def judged(self) -> list[tuple[Event, Finding]]:
        """The same at the points where the rule judged (it waited for no read)."""
        return [(event, finding) for event, finding, judged in self._points() if judged]

    @staticmethod
    def longest(
        readings: list[tuple[Event, Finding]], key: Callable[[Measure], float] | None = None
    ) -> tuple[Event, Finding] | None:
        """The reading whose measure is the largest (by `key`, else its value): the first
        of equals, so the event is where it was first reached."""
        best: tuple[Event, Finding] | None = None
        top = 0.0
        for event, finding in readings:
            if not finding.measures:
                continue
            m = finding.measures[0]
            value = m.value if key is None else key(m)
            if best is None or value > top:
                best, top = (event, finding), value
        return best


# --- the verdict rules ------------------------------------------------------------------------


def _elapsed(s: JobState, spec: TimerSpec, at: float) -> tuple[float, str, float, Timer] | None:
    """How long `spec`'s timer has run at `at`, its limit's name and value, and the timer
    (None: it is not running, or does not count for `s`)."""
    timer, limit = spec.of(s), spec.limit(s)
    if timer is None or limit is None:
        return None
    return at - timer[SINCE], limit[0], limit[1], timer


def _judged(
    m: Measure,
    *,
    evidence: tuple[int, ...],
    state: JobPhase,
    detail: str,
    facts: tuple[str, ...] = (),
) -> Finding:
    """A threshold rule's finding from its one measure: when `m` fired, the verdict
    (`state`, `detail`) resting on `evidence`; else `m` and `facts` alone."""
    if not m.fired:
        return Finding(False, (m,), facts)
    return Finding(True, (m,), facts, evidence=evidence, state=state, detail=detail)


def _waits_for_fetch(s: JobState, t: TimeText | None, rule: str) -> tuple[str, ...]:
    """Explaining (`t` set) a rule that judges a status, at a poll whose fetch failed."""
    if t is not None and s.cycle == "error":
        return (f"the last status fetch failed: {rule} waits for a good one",)
    return ()


# --- 1: the client deadline -----------------------------------------------------------------


def _measure_client_deadline(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 1: the time since submission (or the first watch) against `deadline_s`."""
    reading = _elapsed(s, DEADLINE_TIMER, now)
    if reading is None:
        if t is None:
            return None
        if s.policy.deadline_s is None:
            return Finding(False, facts=("no client deadline was set (deadline_s unset)",))
        return Finding(False, facts=("nothing to count a deadline from: no submission, no watch",))
    elapsed, name, deadline, anchor = reading
    fired = elapsed > deadline
    if not fired and t is None:
        return None
    return _judged(
        Measure("time since submission", elapsed, name, deadline, fired),
        evidence=(anchor[SEQ],),
        state=JobPhase.STALLED,
        detail=f"client-side deadline exceeded: {elapsed:.0f}s since submission "
        f"(deadline {deadline:.0f}s)",
    )


CLIENT_DEADLINE = Rule(
    name="client_deadline",
    step="1",
    why="a client deadline, counted from submission in wall-clock time (D2).",
    fires="`deadline_s` set and exceeded, counted from submission (checked before a fetch)",
    verdict="STALLED / `stalled`",
    measure=_measure_client_deadline,
    timer=DEADLINE_TIMER,
    before_fetch=True,
)


# --- D4 and D6: the status route refuses ----------------------------------------------------


def _refusal(
    s: JobState,
    t: TimeText | None,
    codes: frozenset[int],
    state: JobPhase,
    detail: Callable[[StatusFetchFailed], str],
) -> Finding | None:
    """D4 and D6's check: this poll's status fetch answered one of `codes`; firing, the
    verdict is `state` with `detail` of the failed fetch (None: it did not)."""
    err = s.fetch_error
    if err is None or err.http_status not in codes:
        return None
    facts: tuple[str, ...] = ()
    if t is not None:
        answered = f"answered HTTP {err.http_status}"
        facts = (f"the status fetch at {t(err.at)} (seq {err.seq}) {answered}",)
    return Finding(True, facts=facts, evidence=(err.seq,), state=state, detail=detail(err))


def _lost_detail(err: StatusFetchFailed) -> str:
    return (
        "job no longer exists on RunPod (HTTP 404 on status: "
        f"{err.message or err.error_class}); its TTL or result retention passed"
    )


# D9: RunPod forgets a job (a result is kept 30 minutes, a job no longer than its TTL). A
# 404 that comes after a blind gap — no good status since nobody watched — may be a job
# that finished meanwhile, so the evidence that outlives it on the platform decides first:
# the worker's heartbeat, read again now (`JobState.blind` makes the fold ask for it).
FINISHED, UNFINISHED, UNKNOWN = "finished", "unfinished", "unknown"


def end_reading(s: JobState) -> tuple[str, HeartbeatObserved | None]:
    """D9: what the worker's own record says of a job RunPod forgot while nobody watched:
    `FINISHED` with its end record (a heartbeat of this attempt at stage `done`, read now
    or recorded before), `UNFINISHED` with the heartbeat of this attempt read now at another
    stage (the worker writes `done` as it ends, so its last word is that it had not), or
    `UNKNOWN` (no heartbeat reader, nothing found, a leftover of an earlier attempt, or
    every read failed)."""
    seen = [s.forced_heartbeat, s.last_heartbeat]
    for n, hb in enumerate(seen):
        if hb is None or not hb.found or hb.read_error is not None:
            continue
        if is_leftover_heartbeat(hb, s.submitted_at) or untrusted_heartbeat_ts(hb) is not None:
            continue
        if hb.stage == END_STAGE:
            return FINISHED, hb
        if n == 0:  # read after the gap: the worker's last word (the one before says nothing)
            return UNFINISHED, hb
    return UNKNOWN, None


def _gone(s: JobState) -> StatusFetchFailed | None:
    """D4: this poll's status fetch answered 404 (the failed fetch), else None."""
    if s.cycle != "error":  # (the common case, tried first: most points are no error)
        return None
    err = s.fetch_error
    return err if err is not None and err.http_status in LOST_STATUSES else None


def _late_evidence(
    s: JobState, err: StatusFetchFailed, hb: HeartbeatObserved | None
) -> tuple[int, ...]:
    """The seqs a D9 verdict rests on: the 404, the heartbeat and the failure artifacts."""
    seqs = {err.seq, *s.forced_read_errors}
    if hb is not None:
        seqs.add(hb.seq)
    if s.failure_seq is not None:
        seqs.add(s.failure_seq)
    return tuple(sorted(seqs))


def _artifacts(s: JobState) -> str:
    """Where the worker wrote its artifacts, when the log knows (a hand-off's `hub`)."""
    hub = None if s.submitted is None else s.submitted.hub
    if hub is None:
        return "where the worker writes its heartbeat"
    return f"hf://datasets/{hub.hf_repo}/{hub.phase}/{hub.run_id}/seed{hub.seed}/"


def _late_404(s: JobState, kind: str) -> tuple[StatusFetchFailed, HeartbeatObserved | None] | None:
    """D9: this poll's 404 and the heartbeat it rests on, when the 404 came after a blind
    gap and the worker's evidence reads `kind` (`end_reading`), else None."""
    err = _gone(s)
    if err is None or not s.blind:
        return None
    reading, hb = end_reading(s)
    return (err, hb) if reading == kind else None


def _late_finding(
    s: JobState,
    err: StatusFetchFailed,
    hb: HeartbeatObserved | None,
    t: TimeText | None,
    *,
    state: JobPhase,
    detail: str,
    saw: str,
) -> Finding:
    """A D9 verdict: `state` with `detail`, resting on the 404 and the worker's evidence
    (`saw` says what that evidence was, in words)."""
    facts: tuple[str, ...] = ()
    if t is not None:
        facts = (
            f"the status fetch at {t(err.at)} (seq {err.seq}) answered HTTP 404 after a blind gap",
            saw,
        )
    metrics = hb.metrics if hb is not None and state is JobPhase.SUCCEEDED else None
    return Finding(
        True,
        facts=facts,
        evidence=_late_evidence(s, err, hb),
        state=state,
        detail=detail,
        metrics=metrics,
    )


def _measure_job_lost(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """D4: this poll's status fetch answered 404 — while watched, or after a blind gap with
    a heartbeat of this attempt saying it had not finished (D9)."""
    if not s.blind:
        return _refusal(s, t, LOST_STATUSES, JobPhase.LOST, _lost_detail)
    late = _late_404(s, UNFINISHED)
    if late is None:
        return None
    err, hb = late
    assert hb is not None
    saw = f"the worker's last heartbeat (seq {hb.seq}, stage {hb.stage}) is not its end record"
    detail = _with_artifacts(f"{_lost_detail(err)}; {saw}: it had not finished", s)
    return _late_finding(s, err, hb, t, state=JobPhase.LOST, detail=detail, saw=saw)


def _measure_result_expired(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """D9: a 404 after a blind gap, and the worker's end record says training finished."""
    late = _late_404(s, FINISHED)
    if late is None:
        return None
    err, hb = late
    assert hb is not None
    step = "" if hb.step is None else f", step {hb.step}"
    saw = f"the worker's end record (seq {hb.seq}, stage {hb.stage}{step}) says it finished"
    detail = (
        "result expired on RunPod (HTTP 404 after an unwatched gap: a result is kept 30 "
        f"minutes); {saw}: not trained again; artifacts: {_artifacts(s)}"
    )
    return _late_finding(s, err, hb, t, state=JobPhase.SUCCEEDED, detail=detail, saw=saw)


def _measure_lost_unverified(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """D9: a 404 after a blind gap, and nothing says whether the job finished."""
    late = _late_404(s, UNKNOWN)
    if late is None:
        return None
    err, _ = late
    saw = (
        "no heartbeat reader"
        if not s.has_heartbeat_reader
        else "no heartbeat of this attempt could be read"
    )
    detail = _with_artifacts(
        f"{_lost_detail(err)}, while nobody watched, and nothing says whether it finished "
        f"({saw}): not retried unless the run says so, as a retry may train it twice",
        s,
    )
    return _late_finding(s, err, None, t, state=JobPhase.LOST_UNVERIFIED, detail=detail, saw=saw)


def _unauthorized_detail(err: StatusFetchFailed) -> str:
    return (
        f"RunPod refused the API key (HTTP {err.http_status} on status: "
        f"{err.message or err.error_class}); revoked or without access to this endpoint, "
        "so no retry can help"
    )


def _measure_unauthorized(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """D6: this poll's status fetch answered 401 or 403."""
    if s.cycle != "error":  # (the common case, tried first)
        return None
    return _refusal(s, t, AUTH_STATUSES, JobPhase.UNAUTHORIZED, _unauthorized_detail)


def _refused_at(seen: Seen) -> list[int]:
    """The seqs of the failed fetches at which the rule fired in the log, in order."""
    return list(dict.fromkeys(f.evidence[0] for _, f in seen.history if f.held))


def _render_refusal(answers: str, answer: str, answered: str) -> Render:
    """The words of a refusal rule: the fetch that fired it, else that none answered
    `answers` (or that the last one did not)."""

    def render(p: Point, seen: Seen) -> Finding:
        if seen.held:
            return show_now(p, seen)
        refused = _refused_at(seen)
        if not refused:
            return Finding(False, facts=(f"no status fetch answered HTTP {answers}",))
        return Finding(
            False,
            facts=(f"the last status fetch was not {answer} ({answered} at seqs {refused})",),
        )

    return render


#: What a rule judging a 404 waits for: after a blind gap, the worker's evidence (D9).
_EVIDENCE_READS = {Read.FORCED_HEARTBEAT, Read.FAILURE_DETAIL}

RESULT_EXPIRED = Rule(
    name="result_expired",
    step="D9",
    why="RunPod forgot a job while nobody watched, and the worker's end record says it "
    "finished: a success, never trained again.",
    fires="the status route answers HTTP 404 after a blind gap, and the worker's heartbeat "
    "(read again) is its end record: stage `done`",
    verdict="SUCCEEDED (the end record's metrics)",
    measure=_measure_result_expired,
    waits_for=_EVIDENCE_READS,
    on_failed_fetch=True,
)

LOST_UNVERIFIED = Rule(
    name="lost_unverified",
    step="D9",
    why="RunPod forgot a job while nobody watched, and nothing says whether it finished: "
    "not retried by default (a retry may train it twice).",
    fires="the status route answers HTTP 404 after a blind gap, and no heartbeat of this "
    "attempt can be read (no reader, none found, every read failed)",
    verdict="LOST_UNVERIFIED / `lost_unverified` (retried only when the run says so)",
    measure=_measure_lost_unverified,
    waits_for=_EVIDENCE_READS,
    on_failed_fetch=True,
)

JOB_LOST = Rule(
    name="job_lost",
    step="D4",
    why="the status route answers 404: the job is gone (TTL or result retention passed).",
    fires="the status route answers HTTP 404 (after a blind gap: and the worker's heartbeat, "
    "read again, is not its end record, D9)",
    verdict="LOST / `lost`",
    measure=_measure_job_lost,
    render=_render_refusal("404", "a 404", "404s"),
    waits_for=_EVIDENCE_READS,
    on_failed_fetch=True,
)


UNAUTHORIZED = Rule(
    name="unauthorized",
    step="D6",
    why="the status route refuses the key (401/403): revoked or wrong, so never retried.",
    fires="the status route answers HTTP 401 or 403, the first time",
    verdict="UNAUTHORIZED / `unauthorized` (not retried)",
    measure=_measure_unauthorized,
    render=_render_refusal("401 or 403", "a 401 or 403", "refusals"),
    on_failed_fetch=True,
)


# --- 2: too many status errors ---------------------------------------------------------------


def _measure_poll_errors(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 2: the run of consecutive status errors against `max_poll_errors`."""
    err = s.fetch_error
    if s.cycle != "error" or err is None:
        return None
    streak, limit = len(s.error_seqs), s.policy.max_poll_errors
    fired = streak >= limit
    if not fired and t is None:
        return None
    m = Measure("consecutive status errors", streak, "max_poll_errors", limit, fired, unit="")
    if not fired:
        return Finding(False, (m,), evidence=s.error_seqs)
    code = f" HTTP {err.http_status}" if err.http_status is not None else ""
    return Finding(
        True,
        (m,),
        evidence=s.error_seqs,
        state=JobPhase.POLL_ERROR,
        detail=f"{streak} consecutive status errors (limit {limit}); "
        f"last: {err.error_class}{code} {err.message}".rstrip(),
    )


def _render_poll_errors(p: Point, seen: Seen) -> Finding:
    if seen.held:
        return show_now(p, seen)
    longest = seen.longest(seen.history)
    if longest is None:
        return Finding(False, facts=("every status fetch succeeded",))
    _, found = longest
    note = f"longest run, ending at seq {found.evidence[-1]}"
    return Finding(False, (replace(found.measures[0], fired=False, note=note),))


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, …, 21st."""
    last = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{last}"


POLL_ERRORS = Rule(
    name="poll_errors",
    step="2",
    why="too many consecutive status errors end the watch (infra-shaped, retried).",
    # (the defaults as the policy holds them, never restated)
    fires=f"the {_ordinal(DEFAULT_POLICY.max_poll_errors)} consecutive status-fetch error; "
    f"each error waits min({DEFAULT_POLICY.max_backoff_s:g}, interval × n) instead of the "
    "interval",
    verdict="POLL_ERROR / `poll_error`",
    measure=_measure_poll_errors,
    render=_render_poll_errors,
    waits_for=_EVIDENCE_READS,  # (pending only after a 404 that follows a blind gap, D9)
)


# --- 4-6: the job ended on RunPod's side -------------------------------------------------------


def retriable_reading(s: JobState, t: TimeText | None = None) -> tuple[bool, str]:
    """Steps 4 and 6: whether the forced heartbeat read says `retriable` — and is this
    attempt's, D3: read, found, stamped with a trustworthy `ts` not before the submission —
    and, when `t` writes times, why in words ("" without `t`)."""
    hb = s.forced_heartbeat
    if hb is None:
        if t is None:
            return False, ""
        if s.watch is not None and not s.watch.has_heartbeat_reader:
            return False, "no heartbeat reader to flag it retriable"
        return False, "no forced heartbeat read yet"
    failed = len(s.forced_read_errors)
    if hb.read_error is not None:
        if t is None:
            return False, ""
        tries = f"{failed} forced read{'s' if failed != 1 else ''}"
        if "forced_heartbeat" in s.pending and s.forced_retry_at is not None:
            return False, (
                f"the heartbeat could not be read yet: {tries} failed, the last at "
                f"{t(hb.at)} ({hb.read_error}); the next is due at {t(s.forced_retry_at)}"
            )
        return False, (
            f"the heartbeat could not be read: {tries} failed "
            f"(limit forced_read_tries {s.policy.forced_read_tries}), the last at "
            f"{t(hb.at)} ({hb.read_error}): not known to be retriable"
        )
    after = ""
    if t is not None and failed:
        after = f", after {failed} failed forced read{'s' if failed != 1 else ''}"
    if not hb.found:
        found_at = "" if t is None else f" at {t(hb.at)}"
        return False, f"the forced heartbeat read{found_at} found nothing{after}: not retriable"
    if is_leftover_heartbeat(hb, s.submitted_at):
        return False, (
            f"the forced heartbeat predates the submission, a leftover (D3){after}: not retriable"
        )
    if hb.retriable:
        # (judged as of the failure's status, however many tries the read took)
        untrusted = untrusted_heartbeat_ts(hb, None if s.status is None else s.status.at)
        if untrusted is not None:
            return False, (
                f"the worker's heartbeat (seq {hb.seq}) flagged it retriable but {untrusted}, "
                f"so it cannot be dated to this attempt (D3){after}: not retriable"
            )
        return True, f"the worker's heartbeat (seq {hb.seq}) flagged it retriable{after}"
    return False, f"the worker's heartbeat (seq {hb.seq}) did not flag it retriable{after}"


def worker_flagged_retriable(s: JobState) -> bool:
    """Steps 4 and 6: the forced heartbeat read says `retriable` (and is this attempt's, D3:
    stamped with a trustworthy `ts`, not before the submission)."""
    return retriable_reading(s)[0]


def heartbeat_unreadable(s: JobState) -> bool:
    """Steps 4 and 6: every forced heartbeat read failed on a transient error."""
    hb = s.forced_heartbeat
    return hb is not None and hb.read_error is not None


def _failed_or_preempted(s: JobState, detail: str, t: TimeText | None) -> Finding:
    """Steps 4 and 6: PREEMPTED when the worker flagged the failure retriable, else FAILED."""
    assert s.status is not None
    evidence = {s.status.seq, *s.forced_read_errors}
    if s.forced_heartbeat is not None:
        evidence.add(s.forced_heartbeat.seq)
    if s.failure_seq is not None:
        evidence.add(s.failure_seq)
    retriable, why = retriable_reading(s, t)
    state = JobPhase.PREEMPTED if retriable else JobPhase.FAILED
    if retriable:
        detail = f"{detail}\n(worker flagged the failure retriable)"
    elif heartbeat_unreadable(s):
        hb = s.forced_heartbeat
        assert hb is not None
        tries = len(s.forced_read_errors)
        detail = (
            f"{detail}\n(the worker's heartbeat could not be read: {tries} forced "
            f"read{'s' if tries != 1 else ''} failed, the last with {hb.read_error}; "
            "not known to be retriable)"
        )
    facts = () if t is None else (why,)
    return Finding(True, facts=facts, evidence=tuple(sorted(evidence)), state=state, detail=detail)


def _status_detail(s: JobState) -> str:
    st = s.status
    assert st is not None
    detail = st.error or ""
    if st.stdout_tail:
        detail += "\n--- worker stdout tail ---\n" + st.stdout_tail
    elif not detail and st.output_text:
        detail = st.output_text
    return detail


def _with_artifacts(detail: str, s: JobState) -> str:
    if not s.failure_text:
        return detail
    return f"{detail}\n{s.failure_text}" if detail else s.failure_text


def _where(st: StatusObserved, t: TimeText) -> str:
    return f"status {st.status} at {t(st.at)} (seq {st.seq})"


def _render_status(never: str) -> Render:
    """The words of a rule that judges one status: what it saw of the last such status
    (at the decision point, else the last point it saw one), or `never` and the last
    status when the job never reported it."""

    def render(p: Point, seen: Seen) -> Finding:
        found = seen.now
        if found is None and seen.history:
            found = seen.history[-1][1]
        if found is None:
            return Finding(False, facts=(f"{never} ({p.last_status_text()})",))
        return Finding(seen.held, facts=found.facts)

    return render


def _measure_completed(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 4: the last status is COMPLETED with an output that decodes to metrics."""
    st = s.status
    if st is None or st.status != "COMPLETED":
        return None
    if st.metrics is None:
        if t is None:
            return None
        error = first_line(st.output_error) or "no usable output"
        return Finding(False, facts=(f"{_where(st, t)}, but its output is not metrics: {error}",))
    facts = () if t is None else (f"{_where(st, t)} with metrics {sorted(st.metrics)[:6]}",)
    return Finding(
        True,
        facts=facts,
        evidence=(st.seq,),
        state=JobPhase.SUCCEEDED,
        detail="job COMPLETED",
        metrics=st.metrics,
    )


COMPLETED = Rule(
    name="completed",
    step="4",
    why="COMPLETED with an output that decodes to metrics is a success.",
    fires="COMPLETED and the output decodes to a metrics dict",
    verdict="SUCCEEDED",
    measure=_measure_completed,
    statuses=frozenset({"COMPLETED"}),
    render=_render_status("the job never reported COMPLETED"),
    waits_for={Read.STATUS},
)


def _measure_completed_with_error(
    s: JobState, now: float, t: TimeText | None = None
) -> Finding | None:
    """Step 4: the last status is COMPLETED without metrics; the forced read decides."""
    st = s.status
    if st is None or st.status != "COMPLETED":
        return None
    if st.metrics is not None:
        if t is None:
            return None
        return Finding(False, facts=(f"{_where(st, t)} with metrics: a success, not an error",))
    detail = _with_artifacts(st.output_error or "job COMPLETED without a usable output", s)
    found = _failed_or_preempted(s, detail, t)
    if t is None:
        return found
    error = first_line(st.output_error) or "no usable output"
    return replace(found, facts=(f"{_where(st, t)} with an error output: {error}", *found.facts))


#: What a rule judging a failure waits for: the forced reads (and their retries) go first.
_FORCED_READS = {Read.STATUS, Read.FORCED_HEARTBEAT, Read.FAILURE_DETAIL}

COMPLETED_WITH_ERROR = Rule(
    name="completed_with_error",
    step="4",
    why="COMPLETED whose output is an error: the worker's `retriable` flag decides.",
    fires="COMPLETED and the output decodes as an error (or is missing): forced heartbeat "
    "read (tried again on a transient error, below), `retriable: true` → retried",
    verdict="PREEMPTED / `job_preempted`, else FAILED / `job_failed`",
    measure=_measure_completed_with_error,
    statuses=frozenset({"COMPLETED"}),
    render=_render_status("the job never reported COMPLETED"),
    waits_for=_FORCED_READS,
)


def _measure_platform_termination(
    s: JobState, now: float, t: TimeText | None = None
) -> Finding | None:
    """Step 5: the last status is CANCELLED or TIMED_OUT."""
    st = s.status
    if st is None or st.status not in PLATFORM_TERMINATIONS:
        return None
    return Finding(
        True,
        facts=() if t is None else (_where(st, t),),
        evidence=(st.seq,),
        state=JobPhase.PREEMPTED,
        detail=f"[{st.status}] {_status_detail(s)}".rstrip(),
    )


def _measure_expired_in_queue(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 5, with worker records: TIMED_OUT before any worker took the job, while the
    records read in the queue listed no worker starting or crash-looping: the platform's
    capacity answer, not a preemption."""
    st = s.status
    if st is None or st.status != "TIMED_OUT" or s.picked_up or not s.policy.queue_by_workers:
        return None
    record = s.queue_record
    if record is None or _worker_listed(s) is not None:
        return None
    queued = s.timers.get(_QUEUE)
    since = () if queued is None else (queued[SEQ],)
    waited = "" if queued is None else f" after {st.at - queued[SINCE]:.0f}s IN_QUEUE"
    return Finding(
        True,
        facts=() if t is None else (_where(st, t), f"the worker record at seq {record}"),
        evidence=(*since, record, st.seq),
        state=JobPhase.NO_CAPACITY,
        detail=f"never scheduled: TIMED_OUT{waited} before any worker took it, no worker "
        f"listed starting (seq {record}), no capacity for this GPU class; retry on the "
        "next-best GPU",
    )


EXPIRED_IN_QUEUE = Rule(
    name="expired_in_queue",
    step="5",
    why="TIMED_OUT before any worker took the job, with worker records listing none: no "
    "capacity for this GPU class, not a preemption.",
    fires="TIMED_OUT, never picked up, and the last worker record read while IN_QUEUE "
    "(a watch with a worker reader) lists no worker starting or crash-looping",
    verdict="NO_CAPACITY / `no_capacity`",
    measure=_measure_expired_in_queue,
    statuses=frozenset({"TIMED_OUT"}),
    render=_render_status("the job never TIMED_OUT in the queue with worker records read"),
    waits_for={Read.STATUS},
)

PLATFORM_TERMINATION = Rule(
    name="platform_termination",
    step="5",
    why="CANCELLED or TIMED_OUT: the platform ended the job, so it is retried.",
    fires="CANCELLED or TIMED_OUT; no heartbeat read",
    verdict="PREEMPTED / `job_preempted`",
    measure=_measure_platform_termination,
    statuses=PLATFORM_TERMINATIONS,
    render=_render_status("the job was never CANCELLED or TIMED_OUT"),
    waits_for={Read.STATUS},
)


def _measure_worker_failed(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 6: the last status is FAILED; the forced read decides."""
    st = s.status
    if st is None or st.status != "FAILED":
        return None
    found = _failed_or_preempted(s, _with_artifacts(f"[FAILED] {_status_detail(s)}".rstrip(), s), t)
    if t is None:
        return found
    error = first_line(st.error)
    where = _where(st, t) + (f": {error}" if error else "")
    return replace(found, facts=(where, *found.facts))


WORKER_FAILED = Rule(
    name="worker_failed",
    step="6",
    why="FAILED: the worker's `retriable` flag tells infra from the job's own failure.",
    fires="FAILED: forced heartbeat read; detail `[FAILED] <error>`, the stdout tail, the "
    "failure artifacts",
    verdict="PREEMPTED or FAILED as in 4",
    measure=_measure_worker_failed,
    statuses=frozenset({"FAILED"}),
    render=_render_status("the job never reported FAILED"),
    waits_for=_FORCED_READS,
)


# --- 7: never scheduled -----------------------------------------------------------------------


def _measure_queue_grace(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 7: an IN_QUEUE status against the queue grace, from the first of its run."""
    st = s.status
    if st is None or st.status != QUEUED_STATUS:
        return None
    queued = s.timers.get(_QUEUE)
    if queued is None:
        return None
    limit = _queue_limit(s)
    if limit is None:  # a worker was listed for the job: `slow_start` or `crash_loop` judges
        if t is None:
            return None
        name, (_, seq) = _worker_listed(s)  # type: ignore[misc]
        rule, kind = (
            ("crash_loop", "crash-looping") if name == _CRASHING else ("slow_start", "starting")
        )
        return Finding(
            False,
            facts=(
                f"a worker record (seq {seq}) listed a worker {kind} for the job: capacity "
                f"was found, so the queue grace stopped measuring and `{rule}` judges",
            ),
        )
    name, grace = limit
    waited = st.at - queued[SINCE]
    fired = waited > grace
    if not fired and t is None:
        return None
    record = s.queue_record if s.policy.queue_by_workers else None
    listed = "" if record is None else f"no worker listed starting (seq {record}), "
    return _judged(
        Measure("IN_QUEUE", waited, name, grace, fired),
        facts=_waits_for_fetch(s, t, "the queue grace"),
        evidence=(queued[SEQ], st.seq) if record is None else (queued[SEQ], record, st.seq),
        state=JobPhase.NO_CAPACITY,
        detail=f"never scheduled: IN_QUEUE for {waited:.0f}s (queue grace {grace:.0f}s), "
        f"{listed}no capacity for this GPU class; retry on the next-best GPU",
    )


def _measure_queued_worker(
    s: JobState,
    t: TimeText | None,
    spec: TimerSpec,
    quantity: str,
    state: JobPhase,
    detail: Callable[[Measure], str],
    record: WorkerObserved | None = None,
) -> Finding | None:
    """Step 8 with worker records: an IN_QUEUE status (or this poll's `record`) against the
    grace of the queue timer `spec` a worker record armed (that record, this poll's and the
    status are the evidence)."""
    st = s.status
    if st is None or st.status != QUEUED_STATUS or not s.policy.queue_by_workers:
        return None
    reading = _elapsed(s, spec, st.at if record is None else record.at)
    if reading is None:
        return None
    waited, limit_name, grace, since = reading
    fired = waited > grace
    if not fired and t is None:
        return None
    m = Measure(quantity, waited, limit_name, grace, fired)
    seqs = sorted({since[SEQ], st.seq, *(() if record is None else (record.seq,))})
    return _judged(m, evidence=tuple(seqs), state=state, detail=detail(m))


def _crash_loop_detail(m: Measure) -> str:
    return (
        f"worker crash-looping: the platform listed it unhealthy {m.value:.0f}s ago while "
        f"IN_QUEUE (unhealthy grace {m.limit:.0f}s), not a capacity gap; retry on a fresh "
        "endpoint"
    )


def _measure_crash_loop(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 8: this poll's worker record, while the records list a worker unhealthy, past the
    unhealthy grace from the first such record (the health probe may show it restarting,
    initializing). Judged at the records' pace, as `unhealthy_worker` is at the probe's:
    where a probe shows the crash loop too, both reach it at the same poll and the probe's
    rule, first in order, decides as it always has."""
    if _CRASHING not in s.timers:  # (the common case: no such record)
        return None
    record, st = s.worker, s.status
    if record is None or st is None or record.seq < st.seq:  # (no record in this poll)
        return None
    return _measure_queued_worker(
        s,
        t,
        CRASHING_TIMER,
        "worker listed unhealthy for",
        JobPhase.STALLED,
        _crash_loop_detail,
        record,
    )


def _slow_start_detail(m: Measure) -> str:
    return (
        f"slow start: a worker for the job has been starting for {m.value:.0f}s while IN_QUEUE "
        f"(start grace {m.limit:.0f}s): capacity was found, the start (an image pull, a model "
        "load) is slow; retry, not counted against this GPU class"
    )


def _measure_slow_start(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 8: a worker the records list starting (or up) while the job waits: the queue
    grace no longer measures capacity; the start grace applies from that record."""
    if _STARTING not in s.timers:
        return None
    return _measure_queued_worker(
        s, t, STARTING_TIMER, "worker starting for", JobPhase.SLOW_START, _slow_start_detail
    )


def _render_queued_worker(word: str) -> Render:
    """The words of a worker-record queue rule: its reading while its timer runs, else the
    records it never saw."""

    def render(p: Point, seen: Seen) -> Finding:
        if seen.now is not None:
            return seen.now
        longest = seen.longest(seen.history)
        if longest is not None:
            m = replace(longest[1].measures[0], fired=False, note="longest spell")
            return Finding(False, (m,))
        records = [e.seq for e, _, _ in p.steps if isinstance(e, WorkerObserved)]
        if records:
            fact = f"no worker record read while IN_QUEUE listed a worker {word} (seqs {records})"
        else:
            fact = "no worker record was read while IN_QUEUE (no worker reader)"
        return Finding(False, facts=(fact,))

    return render


CRASH_LOOP = Rule(
    name="crash_loop",
    step="8",
    why="a worker the platform's records list unhealthy while the job stays IN_QUEUE: a "
    "crash loop that looks like a queue, not a capacity gap; retry on a fresh endpoint.",
    fires="a worker record read while IN_QUEUE more than the unhealthy grace after the "
    "first record of this queue spell that listed the worker unhealthy",
    verdict="STALLED / `stalled` (fresh endpoint)",
    measure=_measure_crash_loop,
    render=_render_queued_worker("unhealthy"),
    timer=CRASHING_TIMER,
    waits_for={Read.STATUS, Read.WORKER},
)
SLOW_START = Rule(
    name="slow_start",
    step="8",
    why="capacity was found (a worker listed starting for the job) but the start outlasts the "
    "start grace: retried, and the walk does not count it against the GPU class.",
    fires="an IN_QUEUE observation more than the start grace after the first worker record "
    "of this queue spell that listed a worker initializing (or up)",
    verdict="SLOW_START / `slow_start`",
    measure=_measure_slow_start,
    render=_render_queued_worker("starting"),
    timer=STARTING_TIMER,
    waits_for={Read.STATUS},
)


def _render_queue_grace(p: Point, seen: Seen) -> Finding:
    longest = seen.longest(seen.history)
    if longest is None:
        return Finding(False, facts=("the job was never IN_QUEUE",))
    if seen.now is not None:
        return seen.now
    facts: tuple[str, ...] = ()
    left = p.cleared(QUEUE_TIMER.name)
    if left is not None:
        status = f", status {left.status}" if isinstance(left, StatusObserved) else ""
        facts = (f"the job left IN_QUEUE at {p.t(left.at)} (seq {left.seq}{status})",)
    m = replace(longest[1].measures[0], fired=False, note="longest wait")
    return Finding(False, (m,), facts)


QUEUE_GRACE = Rule(
    name="queue_grace",
    step="7",
    why="IN_QUEUE for longer than the queue grace: no capacity for this GPU class.",
    fires="an IN_QUEUE observation more than the queue grace after the first of an unbroken "
    "run of them",
    verdict="NO_CAPACITY / `no_capacity`",
    measure=_measure_queue_grace,
    statuses=frozenset({QUEUED_STATUS}),
    render=_render_queue_grace,
    timer=QUEUE_TIMER,
    # (a watch that reads the queue's worker records reads one first: whether a worker is
    # listed decides whether the queue grace counts at all, D10)
    waits_for={Read.STATUS, Read.WORKER},
)


# --- 8: a stuck worker ------------------------------------------------------------------------


def _stuck_worker(
    s: JobState, spec: TimerSpec, quantity: str, t: TimeText | None
) -> tuple[Measure, Timer, HealthObserved] | None:
    """The stuck-worker reading at this poll's probe (None: no probe, no such worker, or —
    as a check — not past its grace)."""
    h = s.health
    if h is None:
        return None
    reading = _elapsed(s, spec, h.at)
    if reading is None:
        return None
    elapsed, name, grace, since = reading
    fired = elapsed > grace
    if not fired and t is None:
        return None
    note = "" if fired or t is None else f"at the last probe, {t(h.at)}"
    return Measure(quantity, elapsed, name, grace, fired, note=note), since, h


def _stuck(
    s: JobState,
    t: TimeText | None,
    spec: TimerSpec,
    quantity: str,
    state: JobPhase,
    detail: Callable[[Measure], str],
) -> Finding | None:
    """Step 8's check for one kind of stuck worker: this poll's probe against `spec`'s
    grace; firing, the verdict is `state` with `detail`."""
    reading = _stuck_worker(s, spec, quantity, t)
    if reading is None:
        return None
    m, since, h = reading
    return _judged(m, evidence=(since[SEQ], h.seq), state=state, detail=detail(m))


def _unhealthy_detail(m: Measure) -> str:
    return (
        f"worker unhealthy for {m.value:.0f}s while IN_QUEUE (unhealthy grace "
        f"{m.limit:.0f}s; likely a crash loop or a failed image pull); retry on a fresh endpoint"
    )


def _measure_unhealthy_worker(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 8: this poll's probe, unhealthy workers only, against the unhealthy grace."""
    if s.health is None:  # (the common case, tried first: no probe at this point)
        return None
    return _stuck(
        s, t, UNHEALTHY_TIMER, "worker unhealthy for", JobPhase.STALLED, _unhealthy_detail
    )


def _throttled_detail(m: Measure) -> str:
    return (
        f"never scheduled: worker THROTTLED for {m.value:.0f}s while IN_QUEUE "
        f"(throttled grace {m.limit:.0f}s), no capacity for this GPU class; "
        "retry on the next-best GPU"
    )


def _measure_throttled_worker(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 8: this poll's probe, throttled workers only, against the throttled grace."""
    if s.health is None:  # (the common case, tried first)
        return None
    return _stuck(
        s, t, THROTTLED_TIMER, "worker THROTTLED for", JobPhase.NO_CAPACITY, _throttled_detail
    )


def _render_stuck_worker(word: str, article: str) -> Render:
    """The words of a stuck-worker rule: the reading at the last probe that found the
    worker stuck while its timer runs, else the longest spell and when it cleared, else
    what the probes found."""

    def render(p: Point, seen: Seen) -> Finding:
        stuck = seen.history
        if not stuck:
            probes = [e for e, _, _ in p.steps if isinstance(e, HealthObserved)]
            noisy = [e.seq for e in probes if getattr(e.workers, word) > 0]
            if noisy:
                fact = f"saw {word} workers only beside usable or recovering ones (seqs {noisy})"
            elif probes:
                fact = f"never saw {article} {word} worker in {len(probes)} health probe(s)"
            else:
                fact = f"never saw {article} {word} worker (no health probe was answered)"
            return Finding(False, facts=(fact,))
        spec = seen.rule.timer
        assert spec is not None
        if spec.of(p.state) is not None:  # the timer runs: the last probe's reading
            found = seen.now if seen.now is not None else stuck[-1][1]
            return Finding(seen.held, found.measures)
        facts: tuple[str, ...] = ()
        cleared = p.cleared(spec.name)
        if cleared is not None:
            facts = (
                f"the {word} timer cleared at {p.t(cleared.at)} "
                f"(seq {cleared.seq}: {summarize(cleared)})",
            )
        longest = seen.longest(stuck)
        assert longest is not None
        m = replace(longest[1].measures[0], fired=False, note="longest spell")
        return Finding(False, (m,), facts)

    return render


#: What a rule judging a probe waits for, and makes a late poll do (D8).
_PROBE = {Read.STATUS, Read.PROBE}

UNHEALTHY_WORKER = Rule(
    name="unhealthy_worker",
    step="8",
    why="a worker crash-looping past the unhealthy grace: retry on a fresh endpoint.",
    fires="a probe shows unhealthy workers with nothing usable (running, ready, idle) or "
    "initializing, more than the unhealthy grace after the first such probe",
    verdict="STALLED / `stalled` (fresh endpoint)",
    measure=_measure_unhealthy_worker,
    render=_render_stuck_worker("unhealthy", "an"),
    timer=UNHEALTHY_TIMER,
    waits_for=_PROBE,
    forces={Read.PROBE},
)
THROTTLED_WORKER = Rule(
    name="throttled_worker",
    step="8",
    why="a worker THROTTLED past the throttled grace: no capacity for this GPU class.",
    fires="the same for throttled workers and the throttled grace",
    verdict="NO_CAPACITY / `no_capacity`",
    measure=_measure_throttled_worker,
    render=_render_stuck_worker("throttled", "a"),
    timer=THROTTLED_TIMER,
    waits_for=_PROBE,
    forces={Read.PROBE},
)


# --- 10: no progress --------------------------------------------------------------------------


def _measure_stall(s: JobState, now: float, t: TimeText | None = None) -> Finding | None:
    """Step 10: the time without progress against the limit of the phase (`stall_limit`)."""
    st, progress, last_at = s.status, s.timers.get(_PROGRESS), s.last_at
    if progress is None or last_at is None:
        if t is None:
            return None
        return Finding(False, facts=("no watch started: nothing measured progress",))
    if st is None or st.status in TERMINAL_STATUSES:
        return None
    limit, phase = stall_limit(s)
    idle = last_at - progress[SINCE]
    fired = idle > limit
    if not fired and t is None:
        return None
    _, note, name = stall_limit_name(s)
    return _judged(
        Measure("no progress for", idle, name, limit, fired, note=note),
        facts=_waits_for_fetch(s, t, "the stall rule"),
        evidence=(progress[SEQ], st.seq),
        state=JobPhase.STALLED,
        detail=f"no worker progress for {idle:.0f}s during {phase} "
        f"(job status {st.status}, limit {limit:.0f}s)",
    )


def _render_stall(p: Point, seen: Seen) -> Finding:
    if seen.now is not None:  # a running status (or nothing to measure progress from)
        return seen.now
    # The job ended (or never answered): the longest stretch at any point the rule judged.
    st = p.state.status
    facts: tuple[str, ...] = ()
    if st is not None:
        facts = (f"the job reached {st.status} at {p.t(st.at)}, where the stall rule stops",)
    longest = seen.longest(seen.judged, key=lambda m: m.value / m.limit)
    if longest is None:
        return Finding(False, facts=(*facts, "the job never had a running status to judge"))
    m = longest[1].measures[0]
    return Finding(False, (replace(m, fired=False, note=f"{m.note}, longest stretch"),), facts)


STALL = Rule(
    name="stall",
    step="10",
    why="no progress for longer than the limit of the phase (setup or training).",
    fires="no progress for longer than the limit: the setup grace while a heartbeat reader "
    "exists and no training heartbeat was seen, else the stall window",
    verdict="STALLED / `stalled`",
    measure=_measure_stall,
    render=_render_stall,
    timer=PROGRESS_TIMER,
    waits_for=EVERY_READ,  # step 10: a poll's last judgement, once all its reads are in
)


# --- the table ------------------------------------------------------------------------------

#: Every verdict rule, in the order they are tried: the order decides which rule wins.
RULES: tuple[Rule, ...] = (
    CLIENT_DEADLINE,
    RESULT_EXPIRED,
    LOST_UNVERIFIED,
    JOB_LOST,
    UNAUTHORIZED,
    POLL_ERRORS,
    COMPLETED,
    COMPLETED_WITH_ERROR,
    EXPIRED_IN_QUEUE,
    PLATFORM_TERMINATION,
    WORKER_FAILED,
    QUEUE_GRACE,
    UNHEALTHY_WORKER,
    THROTTLED_WORKER,
    CRASH_LOOP,  # (after the probe's rules: a probe that shows it wins a tie, as today)
    SLOW_START,
    STALL,
)
RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES}
RULE_NAMES: tuple[str, ...] = tuple(RULES_BY_NAME)
#: The rules judged after each observation, and those judged with `now` before a fetch.
AFTER_OBSERVATION: tuple[Rule, ...] = tuple(r for r in RULES if not r.before_fetch)
BEFORE_FETCH: tuple[Rule, ...] = tuple(r for r in RULES if r.before_fetch)
#: Every rule's timer, in the order the live view lists timers that are equally due.
TIMERS: tuple[TimerSpec, ...] = (
    QUEUE_TIMER,
    THROTTLED_TIMER,
    UNHEALTHY_TIMER,
    CRASHING_TIMER,
    STARTING_TIMER,
    PROGRESS_TIMER,
    DEADLINE_TIMER,
)
#: The rule each timer belongs to.
TIMER_RULES: dict[str, Rule] = {r.timer.name: r for r in RULES if r.timer is not None}
#: The steps of the reference that keep the poll going without ending it (the docs' table).
BOOKKEEPING: tuple[tuple[str, str], ...] = (
    (
        "3",
        "a status different from the previous one is progress (so is the start of the first watch)",
    ),
    (
        "9",
        "a regular heartbeat read is asked for on the first poll of a watch, then on the first "
        "poll `heartbeat_every_s` after the last poll that asked (and on the first poll after a "
        "blind gap, the pace moved by the gap); a new "
        "heartbeat `(stage, step, ts)` is progress; a stage outside "
        + ", ".join(f"`{stage}`" for stage in SETUP_STAGE_ORDER)
        + " moves SETUP → TRAINING for good",
    ),
)


# --- which rules judge a point of a poll ------------------------------------------------------

#: The rules judged after an observation, with their place in `RULES` order.
_ORDERED: tuple[tuple[int, Rule], ...] = tuple(enumerate(AFTER_OBSERVATION))
#: Which of them judge a point of a poll, and their measures, by (status answered, reads
#: pending, last status): a rule waits while a read it declares is missing (`Rule.waiting`),
#: and is not asked at a status it cannot fire at (`Rule.statuses`). A poll has few such
#: shapes, and most points have no read pending: those are looked up first.
_Judging = tuple[tuple[tuple[int, Rule], ...], tuple[Measuring, ...]]
#: The statuses some rule is asked only at; any other (or none yet) is one key, `_OTHER`.
_KEYED = frozenset().union(*(rule.statuses for _, rule in _ORDERED))
_OTHER = ""
#: Every rule whatever the status (what `judging` lists): no status is spelt so.
_ANY = "*"
_JUDGING: dict[tuple[bool, tuple[str, ...], str | None], _Judging] = {}


def _judging_at(answered: bool, pending: tuple[str, ...], status: str | None) -> _Judging:
    key = (answered, pending, status if status == _ANY or status in _KEYED else _OTHER)
    found = _JUDGING.get(key)
    if found is None:
        probe = JobState(cycle="status" if answered else None, pending=pending)
        rules = tuple(
            item
            for item in _ORDERED
            if not item[1].waiting(probe)
            and not (answered and item[1].on_failed_fetch)
            and (key[2] == _ANY or not item[1].statuses or key[2] in item[1].statuses)
        )
        found = _JUDGING[key] = (rules, tuple(r.measure for _, r in rules))
    return found


#: The measures asked at a point with no read pending, by (status answered) -> last status
#: (the keyed ones, a running job's and none yet; any other is looked up in `_JUDGING`).
_FIRST: tuple[dict[str | None, tuple[Measuring, ...]], dict[str | None, tuple[Measuring, ...]]] = (
    {k: _judging_at(False, (), k)[1] for k in (*_KEYED, "IN_PROGRESS", None)},
    {k: _judging_at(True, (), k)[1] for k in (*_KEYED, "IN_PROGRESS", None)},
)


def judging(s: JobState) -> tuple[tuple[int, Rule], ...]:
    """The rules judged after an observation that judge `s` now (none of the reads they wait
    for is missing), with their place in `RULES` order."""
    return _judging_at(s.cycle == "status", s.pending, _ANY)[0]


def judging_measures(s: JobState) -> tuple[Measuring, ...]:
    """The measures of `judging(s)`'s rules that can fire at `s`'s last status, in order:
    what `decide` asks after each observation (each returns a finding only when its rule
    fires; a rule not asked at this status would have found nothing)."""
    answered = s.cycle == "status"
    st = s.status
    status = None if st is None else st.status
    if not s.pending:
        found = _FIRST[answered].get(status)
        if found is not None:
            return found
    return _judging_at(answered, s.pending, status)[1]


def judge(
    s: JobState, rules: tuple[Rule, ...] = AFTER_OBSERVATION, now: float = 0.0
) -> Verdict | None:
    """The verdict of the first rule of `rules` that fires, or None.

    The rules judged after an observation ignore `now`; pass `BEFORE_FETCH` and the time to
    judge the client deadline.
    """
    for rule in rules:
        finding = rule.check(s, now)
        if finding is not None:
            return verdict_of(rule, finding)
    return None


def verdict_of(rule: Rule, finding: Finding) -> Verdict:
    """The verdict a rule's firing finding reaches."""
    assert finding.state is not None, f"rule {rule.name} fired without a state"
    return Verdict(finding.state, rule.name, finding.detail, finding.evidence, finding.metrics)


# --- which rule decides a poll: the limit that passed first -----------------------------------


def limit_passed_at(rule: Rule, s: JobState) -> float | None:
    """When `rule`'s limit passed (or will): its timer's start plus its limit; None for a
    rule without a running timer that counts (it judges an observation, not a time)."""
    spec = rule.timer
    if spec is None:
        return None
    timer, limit = s.timers.get(spec.name), spec.limit(s)
    if timer is None or limit is None:
        return None
    return timer[SINCE] + limit[1]


#: The rules a late poll may make reads for: those that wait for a read besides the status.
_WAITING_FOR_READS: tuple[Rule, ...] = tuple(
    rule for rule in AFTER_OBSERVATION if rule.waits_for - {Read.STATUS}
)


def judge_poll(s: JobState) -> Verdict | Read | str | None:
    """The verdict of this point of a poll, the read to make before judging it, or None.

    Late is not different (D8). Rules judged on an observation (the job's status, an
    error) fire as before, in `RULES` order. When timer rules fire, the one whose limit
    passed first decides, whatever the order of the reads that showed it: a poll that
    comes late — a paused process, a loaded host, a drifted probe pace — can find more
    than one limit passed, and it must conclude what an on-time watch would have. So
    before concluding, while another timer rule whose limit passed earlier still waits
    for a read (`Rule.waits_for`), the poll first makes its pending reads, then the reads
    that rule `forces` which the poll has not made (a health probe while IN_QUEUE); then,
    with that evidence, the earliest limit wins (ties go to `RULES` order), and the detail
    says which other limits it came before.

    The client deadline is not part of this: it is checked before a fetch with the time
    now, because it is a promise to the caller (stop watching after so long) rather than
    a judgement of the job, and it stops the watch however the job is doing.
    """
    fired: list[tuple[float, int, Rule, Finding]] | None = None
    for order, rule in judging(s):
        finding = rule.measure(s, 0.0)
        if finding is None:
            continue
        at = limit_passed_at(rule, s)
        if at is None:  # an observation's rule: it decides at once, as it always has
            return verdict_of(rule, finding)
        if fired is None:
            fired = []
        fired.append((at, order, rule, finding))
    if fired is None:
        return None
    fired.sort(key=lambda item: (item[0], item[1]))
    first = fired[0][0]
    for rule in _WAITING_FOR_READS:
        at = limit_passed_at(rule, s)
        if at is None or at >= first or any(rule is item[2] for item in fired):
            continue
        # An earlier limit whose rule has not judged this poll's evidence yet.
        if s.pending:
            return s.pending[0]
        forced = rule.forces
        if forced and not s.probed and s.status is not None and s.status.status == QUEUED_STATUS:
            return next(iter(forced))
    at, _, rule, finding = fired[0]
    if len(fired) > 1:
        later = ", ".join(
            f"{(rule_limit_name(other, s) or other.name)} {other_at - at:.0f}s later"
            for other_at, _, other, _ in fired[1:]
        )
        finding = replace(finding, detail=f"{finding.detail} (its limit passed first: {later})")
    return verdict_of(rule, finding)


def rule_limit_name(rule: Rule, s: JobState) -> str | None:
    """The name of `rule`'s limit as the views print it ("queue grace"), if it has one."""
    if rule.timer is None:
        return None
    limit = rule.timer.limit(s)
    return None if limit is None else limit[0]
