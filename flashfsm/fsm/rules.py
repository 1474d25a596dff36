"""The job rules of DESIGN §6 and the divergences D1–D5, one named function each.

Two kinds of rule live here. *Bookkeeping rules* (steps 2–4, 6–9, D1–D3 and D5) say how
one observation moves a timer, the progress mark or a read still due; `evolve` calls them.
*Verdict rules* (steps 1, 2, 4–8, 10 and D4) look at the state after an observation and
either return a `Verdict` or None; `decide` tries them in `VERDICT_RULES` order, so the
order of that table decides which rule wins when two could fire in the same poll.

Verdict rules judge by the time of the observations they rest on (the status fetch, the
health probe, the last read of the poll), never by "now", so re-running them over a
recorded log gives the same answer. Only the client deadline, checked before a fetch,
takes `now`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.table import JobPhase

if TYPE_CHECKING:
    from flashfsm.events.models import HealthObserved, HeartbeatObserved
    from flashfsm.fsm.job import JobState

#: Job statuses that end the job on RunPod's side.
TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
#: The platform ended the job: infra-shaped, retried, no worker heartbeat consulted.
PLATFORM_TERMINATIONS = frozenset({"CANCELLED", "TIMED_OUT"})
QUEUED_STATUS = "IN_QUEUE"
#: Heartbeat stages sent during cold start, before the training loop runs.
SETUP_STAGES = frozenset({"boot", "sft_start", "rl_start", "sft_model_load", "rl_train_start"})


# --- bookkeeping rules (called by evolve) -------------------------------------------------


def status_error_backoff(interval_s: float, streak: int, cap_s: float) -> float:
    """Step 2: after the n-th consecutive status error wait min(cap, interval × n)."""
    return min(cap_s, interval_s * streak)


def status_counts_as_progress(previous: str | None, status: str) -> bool:
    """Step 3: a status different from the previous one is progress (the job moved)."""
    return status != previous


def probe_is_due(last_probe_at: float | None, at: float, every_s: float) -> bool:
    """Step 8: probe `/health` while queued, at most once per `every_s`."""
    return last_probe_at is None or at - last_probe_at > every_s


#: Float slack when pacing heartbeat reads: poll times are sums of recorded floats, and a
#: poll due exactly `heartbeat_every_s` after the last read must not miss it by an ulp.
HEARTBEAT_PACE_SLACK_S = 1e-3


def heartbeat_read_is_due(last_asked_at: float | None, at: float, every_s: float | None) -> bool:
    """Step 9, D5: a poll asks for a regular heartbeat read at most once per `every_s`.

    The pace is kept by the core from the log (`last_asked_at` is the time of the last poll
    that asked, None at the start of a watch and after a blind gap), not by the reader
    process, so a reattached watcher asks on the same polls an uninterrupted one would.
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


def is_training_stage(stage: str | None) -> bool:
    """Step 9: any stage outside the cold-start set means the training loop runs."""
    return stage not in SETUP_STAGES


def capacity_timers_clear_on_leaving_queue() -> bool:
    """D1: the throttled and unhealthy timers also clear when the job leaves IN_QUEUE.

    The reference cleared them only on a probe without the condition; a job that left the
    queue and came back would inherit a stale timer and be judged at once.
    """
    return True


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


# --- verdict rules (called by decide, in VERDICT_RULES order) -----------------------------


def rule_client_deadline(s: JobState, now: float) -> Verdict | None:
    """Step 1: a client deadline, counted from submission in wall-clock time (D2)."""
    deadline = s.policy.deadline_s
    start = s.deadline_anchor
    if deadline is None or start is None or now - start <= deadline:
        return None
    return Verdict(
        JobPhase.STALLED,
        "client_deadline",
        f"client-side deadline exceeded: {now - start:.0f}s since submission "
        f"(deadline {deadline:.0f}s)",
        evidence=s.deadline_evidence,
    )


def rule_job_lost(s: JobState) -> Verdict | None:
    """D4: the status route answers 404: the job is gone (TTL or result retention passed)."""
    err = s.fetch_error
    if s.cycle != "error" or err is None or err.http_status != 404:
        return None
    return Verdict(
        JobPhase.LOST,
        "job_lost",
        f"job no longer exists on RunPod (HTTP 404 on status: {err.message or err.error_class}); "
        "its TTL or result retention passed",
        evidence=(err.seq,),
    )


def rule_poll_errors(s: JobState) -> Verdict | None:
    """Step 2: too many consecutive status errors end the watch (infra-shaped, retried)."""
    err = s.fetch_error
    limit = s.policy.max_poll_errors
    if s.cycle != "error" or err is None or len(s.error_seqs) < limit:
        return None
    code = f" HTTP {err.http_status}" if err.http_status is not None else ""
    return Verdict(
        JobPhase.POLL_ERROR,
        "poll_errors",
        f"{len(s.error_seqs)} consecutive status errors (limit {limit}); "
        f"last: {err.error_class}{code} {err.message}".rstrip(),
        evidence=s.error_seqs,
    )


def rule_completed(s: JobState) -> Verdict | None:
    """Step 4: COMPLETED with an output that decodes to metrics is a success."""
    st = s.status
    if s.cycle != "status" or st is None or st.status != "COMPLETED" or st.metrics is None:
        return None
    return Verdict(
        JobPhase.SUCCEEDED, "completed", "job COMPLETED", evidence=(st.seq,), metrics=st.metrics
    )


def rule_completed_with_error(s: JobState) -> Verdict | None:
    """Step 4: COMPLETED whose output is an error: the worker's `retriable` flag decides.

    The flag comes from the forced heartbeat read, which waits for its retries when it fails
    on a transient error (`forced_read_retry_at`): the rule fires once no read is pending.
    """
    st = s.status
    if s.cycle != "status" or st is None or st.status != "COMPLETED" or st.metrics is not None:
        return None
    if s.pending:
        return None
    detail = _with_artifacts(st.output_error or "job COMPLETED without a usable output", s)
    return _failed_or_preempted(s, "completed_with_error", detail)


def rule_platform_termination(s: JobState) -> Verdict | None:
    """Step 5: CANCELLED or TIMED_OUT: the platform ended the job, so it is retried."""
    st = s.status
    if s.cycle != "status" or st is None or st.status not in PLATFORM_TERMINATIONS:
        return None
    return Verdict(
        JobPhase.PREEMPTED,
        "platform_termination",
        f"[{st.status}] {_status_detail(s)}".rstrip(),
        evidence=(st.seq,),
    )


def rule_worker_failed(s: JobState) -> Verdict | None:
    """Step 6: FAILED: the worker's `retriable` flag tells infra from the job's own failure.

    As in step 4, the forced heartbeat read is retried on a transient error before this fires.
    """
    st = s.status
    if s.cycle != "status" or st is None or st.status != "FAILED" or s.pending:
        return None
    detail = _with_artifacts(f"[FAILED] {_status_detail(s)}".rstrip(), s)
    return _failed_or_preempted(s, "worker_failed", detail)


def rule_queue_grace(s: JobState) -> Verdict | None:
    """Step 7: IN_QUEUE for longer than the queue grace: no capacity for this GPU class."""
    st = s.status
    if s.cycle != "status" or st is None or st.status != QUEUED_STATUS or s.queued_since is None:
        return None
    waited = st.at - s.queued_since
    if waited <= s.policy.queue_grace_s:
        return None
    return Verdict(
        JobPhase.NO_CAPACITY,
        "queue_grace",
        f"never scheduled: IN_QUEUE for {waited:.0f}s (queue grace "
        f"{s.policy.queue_grace_s:.0f}s), no capacity for this GPU class; "
        "retry on the next-best GPU",
        evidence=(s.queued_seq, st.seq),
    )


def rule_unhealthy_worker(s: JobState) -> Verdict | None:
    """Step 8: a worker crash-looping past the unhealthy grace: retry on a fresh endpoint."""
    h = s.health
    if h is None or s.unhealthy_since is None:
        return None
    stuck = h.at - s.unhealthy_since
    if stuck <= s.policy.unhealthy_grace_s:
        return None
    return Verdict(
        JobPhase.STALLED,
        "unhealthy_worker",
        f"worker unhealthy for {stuck:.0f}s while IN_QUEUE (unhealthy grace "
        f"{s.policy.unhealthy_grace_s:.0f}s; likely a crash loop or a failed image pull); "
        "retry on a fresh endpoint",
        evidence=(s.unhealthy_seq, h.seq),
    )


def rule_throttled_worker(s: JobState) -> Verdict | None:
    """Step 8: a worker THROTTLED past the throttled grace: no capacity for this GPU class."""
    h = s.health
    if h is None or s.throttled_since is None:
        return None
    stuck = h.at - s.throttled_since
    if stuck <= s.policy.throttled_grace_s:
        return None
    return Verdict(
        JobPhase.NO_CAPACITY,
        "throttled_worker",
        f"never scheduled: worker THROTTLED for {stuck:.0f}s while IN_QUEUE (throttled grace "
        f"{s.policy.throttled_grace_s:.0f}s), no capacity for this GPU class; "
        "retry on the next-best GPU",
        evidence=(s.throttled_seq, h.seq),
    )


def rule_stall(s: JobState) -> Verdict | None:
    """Step 10: no progress for longer than the limit of the phase (setup or training)."""
    st = s.status
    if s.cycle != "status" or st is None or st.status in TERMINAL_STATUSES or s.pending:
        return None
    if s.progress_at is None or s.last_at is None:
        return None
    limit, phase = stall_limit(s)
    idle = s.last_at - s.progress_at
    if idle <= limit:
        return None
    return Verdict(
        JobPhase.STALLED,
        "stall",
        f"no worker progress for {idle:.0f}s during {phase} "
        f"(job status {st.status}, limit {limit:.0f}s)",
        evidence=(s.progress_seq, st.seq),
    )


def stall_limit(s: JobState) -> tuple[float, str]:
    """Step 10: the setup grace while a heartbeat reader can tell setup from training and no
    training heartbeat was seen yet; the stall window otherwise."""
    has_reader = s.watch is not None and s.watch.has_heartbeat_reader
    if has_reader and not s.training_seen:
        return s.policy.setup_grace_s, "setup (pre-training)"
    return s.policy.stall_after_s, "training"


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """A verdict rule and where it sits in DESIGN §6."""

    name: str
    step: str
    check: Callable[[JobState], Verdict | None]


#: The verdict rules in the order they are tried after each observation.
VERDICT_RULES: tuple[RuleInfo, ...] = (
    RuleInfo("job_lost", "D4", rule_job_lost),
    RuleInfo("poll_errors", "2", rule_poll_errors),
    RuleInfo("completed", "4", rule_completed),
    RuleInfo("completed_with_error", "4", rule_completed_with_error),
    RuleInfo("platform_termination", "5", rule_platform_termination),
    RuleInfo("worker_failed", "6", rule_worker_failed),
    RuleInfo("queue_grace", "7", rule_queue_grace),
    RuleInfo("unhealthy_worker", "8", rule_unhealthy_worker),
    RuleInfo("throttled_worker", "8", rule_throttled_worker),
    RuleInfo("stall", "10", rule_stall),
)
RULE_NAMES: tuple[str, ...] = ("client_deadline", *(r.name for r in VERDICT_RULES))


def judge(s: JobState) -> Verdict | None:
    """The first verdict rule that fires on the current poll, or None."""
    for rule in VERDICT_RULES:
        verdict = rule.check(s)
        if verdict is not None:
            return verdict
    return None


# --- helpers ------------------------------------------------------------------------------


def worker_flagged_retriable(s: JobState) -> bool:
    """Steps 4 and 6: the forced heartbeat read says `retriable` (and is this attempt's, D3)."""
    hb = s.forced_heartbeat
    if hb is None or not hb.found or not hb.retriable or hb.read_error is not None:
        return False
    return not is_leftover_heartbeat(hb, s.submitted_at)


def heartbeat_unreadable(s: JobState) -> bool:
    """Steps 4 and 6: every forced heartbeat read failed on a transient error."""
    hb = s.forced_heartbeat
    return hb is not None and hb.read_error is not None


def _failed_or_preempted(s: JobState, rule: str, detail: str) -> Verdict:
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
    return Verdict(state, rule, detail, evidence=tuple(sorted(evidence)))


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
