"""The job rules: each verdict rule is one declaration, from which everything else derives.

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
- `check(state, now)`: a `Finding` when the rule fires — the terminal state, the detail,
  the evidence seqs and the numbers behind them — else None. Checks are cheap and run
  after every observation, in `RULES` order, so the order decides which rule wins when two
  could fire in the same poll. A rule marked `before_fetch` (the client deadline) is
  checked with `now` just before a status fetch; every other rule judges by the time of
  the observations it rests on, so re-running the rules over a recorded log gives the
  same answer;
- `explain(point)`: what the rule sees at a log's decision point, whether it fired or not
  (`flashfsm.fsm.findings.Point`): what `explain`, `why-not` and `whatif` print.

`judge`, `decide`'s client deadline, the explanations (`flashfsm.fsm.explain`), the live
view's timers and the docs' rule table (`flashfsm.fsm.docs`) are all read off `RULES`.
Adding a rule is one declaration here plus its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from flashfsm.events.models import (
    Event,
    HealthObserved,
    HeartbeatObserved,
    StatusFetchFailed,
    StatusObserved,
)
from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.findings import Finding, Measure, Point, first_line, summarize
from flashfsm.fsm.state import SEQ, SINCE, JobState, Timer
from flashfsm.fsm.table import JobPhase

#: Job statuses that end the job on RunPod's side.
TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
#: The platform ended the job: infra-shaped, retried, no worker heartbeat consulted.
PLATFORM_TERMINATIONS = frozenset({"CANCELLED", "TIMED_OUT"})
QUEUED_STATUS = "IN_QUEUE"
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


def untrusted_heartbeat_ts(hb: HeartbeatObserved) -> str | None:
    """D3: why a heartbeat's `ts` cannot date it to this attempt, or None when it can.

    A heartbeat with no `ts` (missing, or not a finite number: the parser drops NaN,
    infinities and non-numbers, and the event refuses them) or one stamped more than
    `HEARTBEAT_FUTURE_TOLERANCE_S` after it was read cannot be told from a leftover of an
    earlier attempt, so its `retriable` flag does not count: a failure stays the job's own
    unless a fresh heartbeat says otherwise.
    """
    ts = hb.ts
    if ts is None:
        return "has no usable `ts`"
    ahead = ts - hb.at
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

    def of(self, s: JobState) -> Timer | None:
        """This timer in `s`, when it runs."""
        return s.timers.get(self.name)


def _queue_limit(s: JobState) -> tuple[str, float]:
    return "queue grace", s.policy.queue_grace_s


def _throttled_limit(s: JobState) -> tuple[str, float]:
    return "throttled grace", s.policy.throttled_grace_s


def _unhealthy_limit(s: JobState) -> tuple[str, float]:
    return "unhealthy grace", s.policy.unhealthy_grace_s


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


# --- the declaration ----------------------------------------------------------------------

Check = Callable[[JobState, float], Finding | None]
Explain = Callable[[Point], Finding]


@dataclass(frozen=True, slots=True)
class Rule:
    """One verdict rule, whole: see the module notes."""

    name: str
    step: str
    why: str
    fires: str
    verdict: str
    check: Check
    explain: Explain
    timer: TimerSpec | None = None
    before_fetch: bool = False
    #: The reads of a poll the rule's finding rests on besides the status: while a rule
    #: whose limit passed earlier than a firing rule's waits for one, the poll makes it first
    #: (`judge_poll`).
    waits_for: tuple[str, ...] = ()


def _measure(
    s: JobState, timer: Timer | None, at: float, quantity: str, spec: TimerSpec
) -> Measure | None:
    """The reading of `spec`'s timer at `at` as a measure (None: not running or not counting)."""
    limit = spec.limit(s)
    if timer is None or limit is None:
        return None
    name, value = limit
    elapsed = at - timer[SINCE]
    return Measure(quantity, elapsed, name, value, elapsed > value)


# --- 1: the client deadline -----------------------------------------------------------------


def _check_client_deadline(s: JobState, now: float) -> Finding | None:
    deadline, anchor = s.policy.deadline_s, s.timers.get("deadline")
    if deadline is None or anchor is None or now - anchor[SINCE] <= deadline:
        return None
    elapsed = now - anchor[SINCE]
    return Finding(
        True,
        (Measure("time since submission", elapsed, "client deadline", deadline, True),),
        evidence=(anchor[SEQ],),
        state=JobPhase.STALLED,
        detail=f"client-side deadline exceeded: {elapsed:.0f}s since submission "
        f"(deadline {deadline:.0f}s)",
    )


def _explain_client_deadline(p: Point) -> Finding:
    s = p.state
    if s.policy.deadline_s is None:
        return Finding(False, facts=("no client deadline was set (deadline_s unset)",))
    anchor = DEADLINE_TIMER.of(s)
    if anchor is None:
        return Finding(False, facts=("nothing to count a deadline from: no submission, no watch",))
    m = _measure(s, anchor, p.at, "time since submission", DEADLINE_TIMER)
    assert m is not None
    return Finding(m.fired, (m,))


CLIENT_DEADLINE = Rule(
    name="client_deadline",
    step="1",
    why="a client deadline, counted from submission in wall-clock time (D2).",
    fires="`deadline_s` set and exceeded, counted from submission (checked before a fetch)",
    verdict="STALLED / `stalled`",
    check=_check_client_deadline,
    explain=_explain_client_deadline,
    timer=DEADLINE_TIMER,
    before_fetch=True,
)


# --- D4: the job is gone ----------------------------------------------------------------------


def _check_job_lost(s: JobState, now: float) -> Finding | None:
    err = s.fetch_error
    if s.cycle != "error" or err is None or err.http_status != 404:
        return None
    return Finding(
        True,
        evidence=(err.seq,),
        state=JobPhase.LOST,
        detail="job no longer exists on RunPod (HTTP 404 on status: "
        f"{err.message or err.error_class}); its TTL or result retention passed",
    )


def _explain_job_lost(p: Point) -> Finding:
    if _check_job_lost(p.state, p.at) is not None:
        err = p.state.fetch_error
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


JOB_LOST = Rule(
    name="job_lost",
    step="D4",
    why="the status route answers 404: the job is gone (TTL or result retention passed).",
    fires="the status route answers HTTP 404",
    verdict="LOST / `lost`",
    check=_check_job_lost,
    explain=_explain_job_lost,
)


# --- D6: the key was refused ----------------------------------------------------------------


def _check_unauthorized(s: JobState, now: float) -> Finding | None:
    err = s.fetch_error
    if s.cycle != "error" or err is None or err.http_status not in AUTH_STATUSES:
        return None
    return Finding(
        True,
        evidence=(err.seq,),
        state=JobPhase.UNAUTHORIZED,
        detail=f"RunPod refused the API key (HTTP {err.http_status} on status: "
        f"{err.message or err.error_class}); revoked or without access to this endpoint, "
        "so no retry can help",
    )


def _explain_unauthorized(p: Point) -> Finding:
    if _check_unauthorized(p.state, p.at) is not None:
        err = p.state.fetch_error
        assert err is not None
        return Finding(
            True,
            facts=(
                f"the status fetch at {p.t(err.at)} (seq {err.seq}) answered "
                f"HTTP {err.http_status}",
            ),
        )
    refused = [
        e.seq
        for e, _, _ in p.steps
        if isinstance(e, StatusFetchFailed) and e.http_status in AUTH_STATUSES
    ]
    if not refused:
        return Finding(False, facts=("no status fetch answered HTTP 401 or 403",))
    return Finding(
        False, facts=(f"the last status fetch was not a 401 or 403 (refusals at seqs {refused})",)
    )


UNAUTHORIZED = Rule(
    name="unauthorized",
    step="D6",
    why="the status route refuses the key (401/403): revoked or wrong, so never retried.",
    fires="the status route answers HTTP 401 or 403, the first time",
    verdict="UNAUTHORIZED / `unauthorized` (not retried)",
    check=_check_unauthorized,
    explain=_explain_unauthorized,
)


# --- 2: too many status errors ---------------------------------------------------------------


def _check_poll_errors(s: JobState, now: float) -> Finding | None:
    err = s.fetch_error
    limit = s.policy.max_poll_errors
    if s.cycle != "error" or err is None or len(s.error_seqs) < limit:
        return None
    code = f" HTTP {err.http_status}" if err.http_status is not None else ""
    streak = len(s.error_seqs)
    return Finding(
        True,
        (Measure("consecutive status errors", streak, "max_poll_errors", limit, True, unit=""),),
        evidence=s.error_seqs,
        state=JobPhase.POLL_ERROR,
        detail=f"{streak} consecutive status errors (limit {limit}); "
        f"last: {err.error_class}{code} {err.message}".rstrip(),
    )


def _streak(event: Event, after: JobState) -> float | None:
    return float(len(after.error_seqs)) if isinstance(event, StatusFetchFailed) else None


def _explain_poll_errors(p: Point) -> Finding:
    fired = _check_poll_errors(p.state, p.at)
    if fired is not None:
        return Finding(True, fired.measures)
    longest = p.longest(_streak)
    if longest is None:
        return Finding(False, facts=("every status fetch succeeded",))
    value, event = longest
    note = f"longest run, ending at seq {event.seq}"
    limit = p.state.policy.max_poll_errors
    m = Measure("consecutive status errors", value, "max_poll_errors", limit, False, "", note)
    return Finding(False, (m,))


POLL_ERRORS = Rule(
    name="poll_errors",
    step="2",
    why="too many consecutive status errors end the watch (infra-shaped, retried).",
    fires="the 8th consecutive status-fetch error; each error waits min(60, interval × n) "
    "instead of the interval",
    verdict="POLL_ERROR / `poll_error`",
    check=_check_poll_errors,
    explain=_explain_poll_errors,
)


# --- 4-6: the job ended on RunPod's side -------------------------------------------------------


def worker_flagged_retriable(s: JobState) -> bool:
    """Steps 4 and 6: the forced heartbeat read says `retriable` (and is this attempt's, D3:
    stamped with a trustworthy `ts`, not before the submission)."""
    hb = s.forced_heartbeat
    if hb is None or not hb.found or not hb.retriable or hb.read_error is not None:
        return False
    if untrusted_heartbeat_ts(hb) is not None:
        return False  # D3: no trustworthy `ts`, so not known to be this attempt's
    return not is_leftover_heartbeat(hb, s.submitted_at)


def heartbeat_unreadable(s: JobState) -> bool:
    """Steps 4 and 6: every forced heartbeat read failed on a transient error."""
    hb = s.forced_heartbeat
    return hb is not None and hb.read_error is not None


def _failed_or_preempted(s: JobState, detail: str) -> Finding:
    """Steps 4 and 6: PREEMPTED when the worker flagged the failure retriable, else FAILED."""
    assert s.status is not None
    evidence = {s.status.seq, *s.forced_read_errors}
    if s.forced_heartbeat is not None:
        evidence.add(s.forced_heartbeat.seq)
    if s.failure_seq is not None:
        evidence.add(s.failure_seq)
    retriable = worker_flagged_retriable(s)
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
    return Finding(True, evidence=tuple(sorted(evidence)), state=state, detail=detail)


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


def _retriable_facts(p: Point) -> tuple[str, ...]:
    """What the forced heartbeat read said about the failure being retriable."""
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
    if is_leftover_heartbeat(hb, s.submitted_at):
        return (
            f"the forced heartbeat predates the submission, a leftover (D3){after}: not retriable",
        )
    untrusted = untrusted_heartbeat_ts(hb)
    if untrusted is not None and hb.retriable:
        return (
            f"the worker's heartbeat (seq {hb.seq}) flagged it retriable but {untrusted}, so it "
            f"cannot be dated to this attempt (D3){after}: not retriable",
        )
    if hb.retriable:
        return (f"the worker's heartbeat (seq {hb.seq}) flagged it retriable{after}",)
    return (f"the worker's heartbeat (seq {hb.seq}) did not flag it retriable{after}",)


def _check_completed(s: JobState, now: float) -> Finding | None:
    st = s.status
    if s.cycle != "status" or st is None or st.status != "COMPLETED" or st.metrics is None:
        return None
    return Finding(
        True,
        evidence=(st.seq,),
        state=JobPhase.SUCCEEDED,
        detail="job COMPLETED",
        metrics=st.metrics,
    )


def _explain_completed(p: Point) -> Finding:
    e = p.last_status_of("COMPLETED")
    if e is None:
        return Finding(False, facts=(f"the job never reported COMPLETED ({p.last_status_text()})",))
    where = f"status COMPLETED at {p.t(e.at)} (seq {e.seq})"
    if e.metrics is None:
        error = first_line(e.output_error) or "no usable output"
        return Finding(False, facts=(f"{where}, but its output is not metrics: {error}",))
    held = _check_completed(p.state, p.at) is not None
    return Finding(held, facts=(f"{where} with metrics {sorted(e.metrics)[:6]}",))


COMPLETED = Rule(
    name="completed",
    step="4",
    why="COMPLETED with an output that decodes to metrics is a success.",
    fires="COMPLETED and the output decodes to a metrics dict",
    verdict="SUCCEEDED",
    check=_check_completed,
    explain=_explain_completed,
)


def _check_completed_with_error(s: JobState, now: float) -> Finding | None:
    st = s.status
    if s.cycle != "status" or st is None or st.status != "COMPLETED" or st.metrics is not None:
        return None
    if s.pending:
        return None  # the forced reads (and their retries) go first
    detail = _with_artifacts(st.output_error or "job COMPLETED without a usable output", s)
    return _failed_or_preempted(s, detail)


def _explain_completed_with_error(p: Point) -> Finding:
    e = p.last_status_of("COMPLETED")
    if e is None:
        return Finding(False, facts=(f"the job never reported COMPLETED ({p.last_status_text()})",))
    where = f"status COMPLETED at {p.t(e.at)} (seq {e.seq})"
    if e.metrics is not None:
        return Finding(False, facts=(f"{where} with metrics: a success, not an error",))
    held = _check_completed_with_error(p.state, p.at) is not None
    error = first_line(e.output_error) or "no usable output"
    return Finding(held, facts=(f"{where} with an error output: {error}", *_retriable_facts(p)))


COMPLETED_WITH_ERROR = Rule(
    name="completed_with_error",
    step="4",
    why="COMPLETED whose output is an error: the worker's `retriable` flag decides.",
    fires="COMPLETED and the output decodes as an error (or is missing): forced heartbeat "
    "read (tried again on a transient error, below), `retriable: true` → retried",
    verdict="PREEMPTED / `job_preempted`, else FAILED / `job_failed`",
    check=_check_completed_with_error,
    explain=_explain_completed_with_error,
)


def _check_platform_termination(s: JobState, now: float) -> Finding | None:
    st = s.status
    if s.cycle != "status" or st is None or st.status not in PLATFORM_TERMINATIONS:
        return None
    return Finding(
        True,
        evidence=(st.seq,),
        state=JobPhase.PREEMPTED,
        detail=f"[{st.status}] {_status_detail(s)}".rstrip(),
    )


def _explain_platform_termination(p: Point) -> Finding:
    e = p.last_status_of(*sorted(PLATFORM_TERMINATIONS))
    if e is None:
        return Finding(
            False, facts=(f"the job was never CANCELLED or TIMED_OUT ({p.last_status_text()})",)
        )
    held = _check_platform_termination(p.state, p.at) is not None
    return Finding(held, facts=(f"status {e.status} at {p.t(e.at)} (seq {e.seq})",))


PLATFORM_TERMINATION = Rule(
    name="platform_termination",
    step="5",
    why="CANCELLED or TIMED_OUT: the platform ended the job, so it is retried.",
    fires="CANCELLED or TIMED_OUT; no heartbeat read",
    verdict="PREEMPTED / `job_preempted`",
    check=_check_platform_termination,
    explain=_explain_platform_termination,
)


def _check_worker_failed(s: JobState, now: float) -> Finding | None:
    st = s.status
    if s.cycle != "status" or st is None or st.status != "FAILED":
        return None
    if s.pending:
        return None  # the forced reads (and their retries) go first
    return _failed_or_preempted(s, _with_artifacts(f"[FAILED] {_status_detail(s)}".rstrip(), s))


def _explain_worker_failed(p: Point) -> Finding:
    e = p.last_status_of("FAILED")
    if e is None:
        return Finding(False, facts=(f"the job never reported FAILED ({p.last_status_text()})",))
    held = _check_worker_failed(p.state, p.at) is not None
    error = first_line(e.error)
    where = f"status FAILED at {p.t(e.at)} (seq {e.seq})" + (f": {error}" if error else "")
    return Finding(held, facts=(where, *_retriable_facts(p)))


WORKER_FAILED = Rule(
    name="worker_failed",
    step="6",
    why="FAILED: the worker's `retriable` flag tells infra from the job's own failure.",
    fires="FAILED: forced heartbeat read; detail `[FAILED] <error>`, the stdout tail, the "
    "failure artifacts",
    verdict="PREEMPTED or FAILED as in 4",
    check=_check_worker_failed,
    explain=_explain_worker_failed,
)


# --- 7: never scheduled -----------------------------------------------------------------------


def _check_queue_grace(s: JobState, now: float) -> Finding | None:
    queued, st = s.timers.get("queue"), s.status
    if queued is None or s.cycle != "status" or st is None or st.status != QUEUED_STATUS:
        return None
    waited, grace = st.at - queued[SINCE], s.policy.queue_grace_s
    if waited <= grace:
        return None
    return Finding(
        True,
        (Measure("IN_QUEUE", waited, "queue grace", grace, True),),
        evidence=(queued[SEQ], st.seq),
        state=JobPhase.NO_CAPACITY,
        detail=f"never scheduled: IN_QUEUE for {waited:.0f}s (queue grace {grace:.0f}s), "
        "no capacity for this GPU class; retry on the next-best GPU",
    )


def _queued_wait(event: Event, after: JobState) -> float | None:
    queued = QUEUE_TIMER.of(after)
    if isinstance(event, StatusObserved) and event.status == QUEUED_STATUS and queued is not None:
        return event.at - queued[SINCE]
    return None


def _explain_queue_grace(p: Point) -> Finding:
    s = p.state
    grace = s.policy.queue_grace_s
    longest = p.longest(_queued_wait)
    if longest is None:
        return Finding(False, facts=("the job was never IN_QUEUE",))
    fired = _check_queue_grace(s, p.at)
    st, queued = s.status, QUEUE_TIMER.of(s)
    if st is not None and st.status == QUEUED_STATUS and queued is not None:
        m = Measure("IN_QUEUE", st.at - queued[SINCE], "queue grace", grace, fired is not None)
        facts = ("the last status fetch failed: the queue grace waits for a good one",)
        return Finding(fired is not None, (m,), facts if s.cycle == "error" else ())
    facts: tuple[str, ...] = ()
    left = p.cleared(QUEUE_TIMER.name)
    if left is not None:
        status = f", status {left.status}" if isinstance(left, StatusObserved) else ""
        facts = (f"the job left IN_QUEUE at {p.t(left.at)} (seq {left.seq}{status})",)
    m = Measure("IN_QUEUE", longest[0], "queue grace", grace, False, note="longest wait")
    return Finding(False, (m,), facts)


QUEUE_GRACE = Rule(
    name="queue_grace",
    step="7",
    why="IN_QUEUE for longer than the queue grace: no capacity for this GPU class.",
    fires="an IN_QUEUE observation more than the queue grace after the first of an unbroken "
    "run of them",
    verdict="NO_CAPACITY / `no_capacity`",
    check=_check_queue_grace,
    explain=_explain_queue_grace,
    timer=QUEUE_TIMER,
)


# --- 8: a stuck worker ------------------------------------------------------------------------


def _stuck_worker(s: JobState, spec: TimerSpec, quantity: str) -> tuple[Measure, Timer] | None:
    """The stuck-worker reading at this poll's probe (None: no probe, or no such worker)."""
    h, since = s.health, spec.of(s)
    if h is None or since is None:
        return None
    m = _measure(s, since, h.at, quantity, spec)
    return None if m is None else (m, since)


def _check_unhealthy_worker(s: JobState, now: float) -> Finding | None:
    if s.health is None or "unhealthy" not in s.timers:
        return None
    reading = _stuck_worker(s, UNHEALTHY_TIMER, "worker unhealthy for")
    if reading is None or not reading[0].fired:
        return None
    m, since = reading
    assert s.health is not None
    return Finding(
        True,
        (m,),
        evidence=(since[SEQ], s.health.seq),
        state=JobPhase.STALLED,
        detail=f"worker unhealthy for {m.value:.0f}s while IN_QUEUE (unhealthy grace "
        f"{m.limit:.0f}s; likely a crash loop or a failed image pull); retry on a fresh endpoint",
    )


def _check_throttled_worker(s: JobState, now: float) -> Finding | None:
    if s.health is None or "throttled" not in s.timers:
        return None
    reading = _stuck_worker(s, THROTTLED_TIMER, "worker THROTTLED for")
    if reading is None or not reading[0].fired:
        return None
    m, since = reading
    assert s.health is not None
    return Finding(
        True,
        (m,),
        evidence=(since[SEQ], s.health.seq),
        state=JobPhase.NO_CAPACITY,
        detail=f"never scheduled: worker THROTTLED for {m.value:.0f}s while IN_QUEUE "
        f"(throttled grace {m.limit:.0f}s), no capacity for this GPU class; "
        "retry on the next-best GPU",
    )


def _explain_stuck_worker(p: Point, spec: TimerSpec, quantity: str, check: Check) -> Finding:
    s = p.state
    word = spec.name  # "throttled" or "unhealthy"
    throttled = spec is THROTTLED_TIMER
    stuck = [
        (e, e.at - since[SINCE])
        for e, _, after in p.steps
        if isinstance(e, HealthObserved)
        and worker_condition(e)[1 if throttled else 0]
        and (since := spec.of(after)) is not None
    ]
    if not stuck:
        probes = [e for e, _, _ in p.steps if isinstance(e, HealthObserved)]
        noisy = [e.seq for e in probes if getattr(e.workers, word) > 0]
        article = "a" if throttled else "an"
        if noisy:
            fact = f"saw {word} workers only beside usable or recovering ones (seqs {noisy})"
        elif probes:
            fact = f"never saw {article} {word} worker in {len(probes)} health probe(s)"
        else:
            fact = f"never saw {article} {word} worker (no health probe was answered)"
        return Finding(False, facts=(fact,))
    held = check(s, p.at) is not None
    limit = spec.limit(s)
    assert limit is not None
    name, grace = limit
    since = spec.of(s)
    if since is not None:
        last = stuck[-1][0]
        note = "" if held else f"at the last probe, {p.t(last.at)}"
        m = Measure(quantity, last.at - since[SINCE], name, grace, held, note=note)
        return Finding(held, (m,))
    facts: tuple[str, ...] = ()
    cleared = p.cleared(spec.name)
    if cleared is not None:
        facts = (
            f"the {word} timer cleared at {p.t(cleared.at)} "
            f"(seq {cleared.seq}: {summarize(cleared)})",
        )
    m = Measure(
        quantity, max(value for _, value in stuck), name, grace, False, "s", "longest spell"
    )
    return Finding(False, (m,), facts)


def _explain_unhealthy_worker(p: Point) -> Finding:
    return _explain_stuck_worker(
        p, UNHEALTHY_TIMER, "worker unhealthy for", _check_unhealthy_worker
    )


def _explain_throttled_worker(p: Point) -> Finding:
    return _explain_stuck_worker(
        p, THROTTLED_TIMER, "worker THROTTLED for", _check_throttled_worker
    )


UNHEALTHY_WORKER = Rule(
    name="unhealthy_worker",
    step="8",
    why="a worker crash-looping past the unhealthy grace: retry on a fresh endpoint.",
    fires="a probe shows unhealthy workers with nothing usable (running, ready, idle) or "
    "initializing, more than the unhealthy grace after the first such probe",
    verdict="STALLED / `stalled` (fresh endpoint)",
    check=_check_unhealthy_worker,
    explain=_explain_unhealthy_worker,
    timer=UNHEALTHY_TIMER,
    waits_for=("probe",),
)
THROTTLED_WORKER = Rule(
    name="throttled_worker",
    step="8",
    why="a worker THROTTLED past the throttled grace: no capacity for this GPU class.",
    fires="the same for throttled workers and the throttled grace",
    verdict="NO_CAPACITY / `no_capacity`",
    check=_check_throttled_worker,
    explain=_explain_throttled_worker,
    timer=THROTTLED_TIMER,
    waits_for=("probe",),
)


# --- 10: no progress --------------------------------------------------------------------------


def _check_stall(s: JobState, now: float) -> Finding | None:
    st, progress = s.status, s.timers.get("progress")
    if s.cycle != "status" or st is None or st.status in TERMINAL_STATUSES or s.pending:
        return None
    if progress is None or s.last_at is None:
        return None
    limit, phase = stall_limit(s)
    idle = s.last_at - progress[SINCE]
    if idle <= limit:
        return None
    _, note, name = stall_limit_name(s)
    return Finding(
        True,
        (Measure("no progress for", idle, name, limit, True, note=note),),
        evidence=(progress[SEQ], st.seq),
        state=JobPhase.STALLED,
        detail=f"no worker progress for {idle:.0f}s during {phase} "
        f"(job status {st.status}, limit {limit:.0f}s)",
    )


def _judged_idle(p: Point, index: int) -> tuple[float, float, str, str] | None:
    """The stall reading at step `index`, if the stall rule judged the job there."""
    after = p.steps[index][2]
    status = after.status
    if after.cycle != "status" or status is None or status.status in TERMINAL_STATUSES:
        return None
    progress = PROGRESS_TIMER.of(after)
    if progress is None or after.last_at is None or set(after.pending) - {"heartbeat"}:
        return None
    nxt = p.steps[index + 1][0] if index + 1 < len(p.steps) else None
    if "heartbeat" in after.pending and isinstance(nxt, HeartbeatObserved) and not nxt.forced:
        return None  # judged after that read
    limit, phase, name = stall_limit_name(after)
    return after.last_at - progress[SINCE], limit, phase, name


def _explain_stall(p: Point) -> Finding:
    s = p.state
    progress = PROGRESS_TIMER.of(s)
    if progress is None or s.last_at is None:
        return Finding(False, facts=("no watch started: nothing measured progress",))
    held = _check_stall(s, p.at) is not None
    st = s.status
    if st is not None and st.status not in TERMINAL_STATUSES:
        limit, phase, name = stall_limit_name(s)
        m = Measure("no progress for", s.last_at - progress[SINCE], name, limit, held, note=phase)
        facts = ("the last status fetch failed: the stall rule waits for a good one",)
        return Finding(held, (m,), facts if s.cycle == "error" else ())
    # The job ended (or never answered): the longest stretch at any point the rule judged.
    best: tuple[float, float, str, str] | None = None
    for i in range(len(p.steps)):
        reading = _judged_idle(p, i)
        if reading is not None and (best is None or reading[0] / reading[1] > best[0] / best[1]):
            best = reading
    facts: tuple[str, ...] = ()
    if st is not None:
        facts = (f"the job reached {st.status} at {p.t(st.at)}, where the stall rule stops",)
    if best is None:
        return Finding(False, facts=(*facts, "the job never had a running status to judge"))
    idle, limit, phase, name = best
    m = Measure("no progress for", idle, name, limit, False, note=f"{phase}, longest stretch")
    return Finding(False, (m,), facts)


STALL = Rule(
    name="stall",
    step="10",
    why="no progress for longer than the limit of the phase (setup or training).",
    fires="no progress for longer than the limit: the setup grace while a heartbeat reader "
    "exists and no training heartbeat was seen, else the stall window",
    verdict="STALLED / `stalled`",
    check=_check_stall,
    explain=_explain_stall,
    timer=PROGRESS_TIMER,
    waits_for=("heartbeat",),
)


# --- the table ------------------------------------------------------------------------------

#: Every verdict rule, in the order they are tried: the order decides which rule wins.
RULES: tuple[Rule, ...] = (
    CLIENT_DEADLINE,
    JOB_LOST,
    UNAUTHORIZED,
    POLL_ERRORS,
    COMPLETED,
    COMPLETED_WITH_ERROR,
    PLATFORM_TERMINATION,
    WORKER_FAILED,
    QUEUE_GRACE,
    UNHEALTHY_WORKER,
    THROTTLED_WORKER,
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


#: The rules judged after each observation with their checks, looked up once.
_CHECKS = tuple((order, rule, rule.check) for order, rule in enumerate(AFTER_OBSERVATION))
#: Reads `judge_poll` makes a poll do although the poll's pace did not ask for them: a
#: probe for a rule that judges one (the heartbeat keeps its pace, D5).
FORCED_READS = frozenset({"probe"})


def judge_poll(s: JobState) -> Verdict | str | None:
    """The verdict of this point of a poll, the read to make before judging it, or None.

    Late is not different (D8). Rules judged on an observation (the job's status, an
    error) fire as before, in `RULES` order. When timer rules fire, the one whose limit
    passed first decides, whatever the order of the reads that showed it: a poll that
    comes late — a paused process, a loaded host, a drifted probe pace — can find more
    than one limit passed, and it must conclude what an on-time watch would have. So
    before concluding, while another timer rule whose limit passed earlier still waits
    for a read (a pending read of this poll, or a health probe this poll has not made),
    the read is made first; then, with that evidence, the earliest limit wins (ties go
    to `RULES` order), and the detail says which other limits it came before.

    The client deadline is not part of this: it is checked before a fetch with the time
    now, because it is a promise to the caller (stop watching after so long) rather than
    a judgement of the job, and it stops the watch however the job is doing.
    """
    fired: list[tuple[float, int, Rule, Finding]] | None = None
    for order, rule, check in _CHECKS:
        finding = check(s, 0.0)
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
    for rule in AFTER_OBSERVATION:
        at = limit_passed_at(rule, s) if rule.waits_for else None
        if at is None or at >= first or any(rule is item[2] for item in fired):
            continue
        # An earlier limit whose rule has not judged this poll's evidence yet.
        if s.pending:
            return s.pending[0]
        forced = FORCED_READS.intersection(rule.waits_for)
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
