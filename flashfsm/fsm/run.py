"""The run machine: one training job driven to a result over attempts, with the GPU walk.

Theory of operation. A run's stream records its candidates (`RunStarted`), then for each
attempt the GPU picked (`AttemptStarted`, with its `on_last_gpu`), the deploy and submit
steps, the job's stream (`JobQueued`) and the outcome (`AttemptEnded`); cancels, endpoint
deletions and the result (`RunConcluded`) are events too. `evolve_run` folds them into a
`RunState`; `decide_run(state, now)` says what the shell does next — plan an attempt,
deploy, submit, watch the job, cancel it, delete an endpoint, wait, or conclude. A
control plane restarted mid-run replays the stream and carries on from the same command,
so a walk resumes, it never starts over.

The walk (`plan_attempt`), as the reference runner had it. Each attempt prefers, in this
order: a provider that has not failed this run, a GPU class not yet tried, the cheapest,
the smaller card. Once every class has been tried it re-rolls the cheapest, so it never
runs off the list. Infra-shaped failures are retried while the budget lasts (at most
`max_retries + 1` attempts); `job_failed` never is, nor is `unauthorized` (RunPod refused
the key: every further attempt would be refused too). With the weight cache attached, the
first `no_capacity` or `poll_error` earns one bonus attempt on the same class without the
cache (the drop is sticky) that does not count against the budget. A user cancel wins
everywhere: no attempt starts after it, and a success recorded after it does not count.

A run started with `single_attempt` (what `submit_run` records, for a caller that walks
itself) has exactly that one attempt on its first candidate, with the caller's
`on_last_gpu`: no walk, no retry, no bonus, the same deploy, submit and watch. Once its
job is queued the caller holds a handle to it, so the job and its endpoint are left to the
caller when the run ends (`handed_over`); a cancelled run cleans up as any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from flashfsm.events.errors import CorruptLogError
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Candidate,
    Event,
    RunStarted,
)
from flashfsm.fsm.machine import IllegalTransition, build_machine, fire

#: Failure kinds that are the infrastructure's fault: worth another attempt.
RETRIABLE_FAILURES = frozenset(
    {
        FailureKind.STALLED,
        FailureKind.NO_CAPACITY,
        FailureKind.POLL_ERROR,
        FailureKind.JOB_PREEMPTED,
        FailureKind.LOST,
    }
)
#: Failures whose job may still hold a worker on RunPod: cancelled before the run moves on
#: or ends. `unauthorized` is never retried (the key was refused: another attempt would be
#: refused too), but its job may still run and bill, so its cancel is tried all the same.
STILL_THERE_FAILURES = RETRIABLE_FAILURES | {FailureKind.UNAUTHORIZED}
#: Failures after which the weight cache is dropped for one bonus attempt.
CACHE_DROP_FAILURES = frozenset({FailureKind.NO_CAPACITY, FailureKind.POLL_ERROR})
DEPLOY_RETRY_WAIT_S = 30.0  # the wait after the first deploy or submit error; grows linearly
DEPLOY_RETRY_WAIT_CAP_S = 300.0


class RunPhase(StrEnum):
    """Where a run is."""

    STARTING = "STARTING"  # no attempt yet
    DEPLOYING = "DEPLOYING"  # an attempt is planned; its endpoint is being deployed
    SUBMITTING = "SUBMITTING"  # the endpoint exists; the job is being submitted
    WATCHING = "WATCHING"  # the job is queued: its stream is being watched
    BETWEEN = "BETWEEN"  # an attempt ended: cleaning up, waiting, deciding the next
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


ACTIVE_RUN = (
    RunPhase.STARTING,
    RunPhase.DEPLOYING,
    RunPhase.SUBMITTING,
    RunPhase.WATCHING,
    RunPhase.BETWEEN,
)
RUN_TRANSITIONS: tuple[tuple[str, tuple[RunPhase, ...], RunPhase], ...] = (
    ("begin_attempt", (RunPhase.STARTING, RunPhase.BETWEEN), RunPhase.DEPLOYING),
    ("deployed", (RunPhase.DEPLOYING,), RunPhase.SUBMITTING),
    ("queued", (RunPhase.SUBMITTING,), RunPhase.WATCHING),
    (
        "end_attempt",
        (RunPhase.DEPLOYING, RunPhase.SUBMITTING, RunPhase.WATCHING),
        RunPhase.BETWEEN,
    ),
    ("succeed", ACTIVE_RUN, RunPhase.SUCCEEDED),
    ("fail", ACTIVE_RUN, RunPhase.FAILED),
    ("cancel", ACTIVE_RUN, RunPhase.CANCELLED),
)
RUN_MACHINE = build_machine("flashfsm-run", RunPhase, RUN_TRANSITIONS, RunPhase.STARTING)


# --- state --------------------------------------------------------------------------------


@dataclass(slots=True)
class Attempt:
    """What the run's stream says about one attempt."""

    started: AttemptStarted
    endpoint_id: str | None = None
    account: int = 0  # the key pool's account the endpoint was deployed on
    job_id: str | None = None
    job_stream: str | None = None
    submitted_at: float | None = None
    deploy_error: str | None = None
    submit_error: str | None = None
    job_cancelled: bool = False
    ended: AttemptEnded | None = None


@dataclass(slots=True)
class RunState:
    """A run rebuilt from its stream."""

    state: str = RunPhase.STARTING.value
    stream: str | None = None
    next_seq: int = 0
    last_at: float | None = None
    started: RunStarted | None = None
    attempts: list[Attempt] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)  # every endpoint the run created
    deleted: set[str] = field(default_factory=set)
    cancel_requested: bool = False
    cancel_reason: str = ""
    result: Any = None  # the RunConcluded event

    @property
    def phase(self) -> RunPhase:
        return RunPhase(self.state)

    @property
    def current(self) -> Attempt | None:
        """The latest attempt."""
        return self.attempts[-1] if self.attempts else None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def cache_dropped(self) -> bool:
        """True once an attempt ran without the weight cache (sticky)."""
        return any(a.started.cache_dropped for a in self.attempts)

    @property
    def bonus_used(self) -> bool:
        return any(a.started.bonus for a in self.attempts)

    @property
    def walk_attempts(self) -> int:
        """Attempts that count against the retry budget (the bonus does not)."""
        return sum(not a.started.bonus for a in self.attempts)


def evolve_run(s: RunState, event: Event) -> RunState:
    """Fold one run event into the state (in place); a concluded run absorbs later events."""
    if s.result is not None:
        return s
    if event.seq != s.next_seq:
        raise CorruptLogError(
            "replay", event.stream, f"expected seq {s.next_seq}, got {event.seq}", seq=event.seq
        )
    apply = _APPLY.get(event.kind)
    if apply is None:
        raise CorruptLogError(
            "replay", event.stream, f"{event.kind} is not a run event", seq=event.seq
        )
    try:
        apply(s, event)
    except IllegalTransition as exc:  # a step the run machine refuses: the log is corrupt
        raise CorruptLogError("replay", event.stream, str(exc), seq=event.seq) from None
    s.stream, s.next_seq, s.last_at = event.stream, event.seq + 1, event.at
    return s


def replay_run(events: Any) -> RunState:
    """The run state a log folds to."""
    s = RunState()
    for event in events:
        evolve_run(s, event)
    return s


def _attempt(s: RunState, number: int, event: Event) -> Attempt:
    if not s.attempts or s.attempts[-1].started.attempt != number:
        raise CorruptLogError(
            "replay",
            event.stream,
            f"{event.kind} for attempt {number}, which is not the current one",
            seq=event.seq,
        )
    return s.attempts[-1]


def _on_run_started(s: RunState, e: Any) -> None:
    s.started = e


def _on_attempt_started(s: RunState, e: Any) -> None:
    s.attempts.append(Attempt(started=e))
    fire(s, "begin_attempt", RUN_MACHINE)


def _on_noop(s: RunState, e: Any) -> None:
    """Deploy progress (tries, quota, failover): recorded for the post-mortem only."""


def _on_deployed(s: RunState, e: Any) -> None:
    a = _attempt(s, e.attempt, e)
    a.endpoint_id, a.account = e.endpoint_id, e.account
    if e.endpoint_id not in s.endpoints:
        s.endpoints.append(e.endpoint_id)
    fire(s, "deployed", RUN_MACHINE)


def _on_deploy_failed(s: RunState, e: Any) -> None:
    _attempt(s, e.attempt, e).deploy_error = f"{e.error_class}: {e.message}"


def _on_queued(s: RunState, e: Any) -> None:
    a = _attempt(s, e.attempt, e)
    a.job_id, a.job_stream, a.submitted_at = e.job_id, e.job_stream, e.submitted_at
    fire(s, "queued", RUN_MACHINE)


def _on_submit_failed(s: RunState, e: Any) -> None:
    _attempt(s, e.attempt, e).submit_error = f"{e.error_class}: {e.message}"


def _on_job_cancelled(s: RunState, e: Any) -> None:
    for a in s.attempts:
        if a.job_id == e.job_id:
            a.job_cancelled = True


def _on_endpoint_deleted(s: RunState, e: Any) -> None:
    s.deleted.add(e.endpoint_id)


def _on_attempt_ended(s: RunState, e: Any) -> None:
    a = _attempt(s, e.attempt, e)
    a.ended = e
    fire(s, "end_attempt", RUN_MACHINE)


def _on_cancel_requested(s: RunState, e: Any) -> None:
    s.cancel_requested = True
    s.cancel_reason = e.reason


def _on_run_concluded(s: RunState, e: Any) -> None:
    trigger = "succeed" if e.ok else "cancel" if e.failure == FailureKind.CANCELLED else "fail"
    fire(s, trigger, RUN_MACHINE)
    s.result = e


_APPLY = {
    "RunStarted": _on_run_started,
    "AttemptStarted": _on_attempt_started,
    "DeployAttempted": _on_noop,
    "QuotaExhausted": _on_noop,
    "AccountFailedOver": _on_noop,
    "EndpointDeployed": _on_deployed,
    "DeployFailed": _on_deploy_failed,
    "JobQueued": _on_queued,
    "SubmitFailed": _on_submit_failed,
    "JobCancelled": _on_job_cancelled,
    "EndpointDeleted": _on_endpoint_deleted,
    "AttemptEnded": _on_attempt_ended,
    "CancelRequested": _on_cancel_requested,
    "RunConcluded": _on_run_concluded,
}


# --- the walk -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptPlan:
    """The next attempt: which candidate, with how much patience, with or without the cache."""

    attempt: int
    candidate: int
    provider: str
    gpu_class: str
    on_last_gpu: bool
    cache_dropped: bool
    bonus: bool


def walk_key(candidates: tuple[Candidate, ...], failed_providers: set[str], tried: set[str]):
    """The preference order of the walk: fresh provider, untried class, cheaper, smaller."""

    def key(index: int) -> tuple[bool, bool, float, float, int]:
        c = candidates[index]
        return (
            c.provider in failed_providers,
            c.gpu_class in tried,
            c.price_per_hour,
            c.vram_gb,
            index,
        )

    return key


def plan_attempt(s: RunState) -> AttemptPlan | None:
    """The next attempt of the walk, or None when the run has no attempt left."""
    started = s.started
    if started is None or not started.candidates:
        return None
    if started.single_attempt is not None:  # the caller walks: this run is one attempt
        if s.attempts:
            return None
        only = started.candidates[0]
        return AttemptPlan(
            attempt=started.single_attempt,
            candidate=0,
            provider=only.provider,
            gpu_class=only.gpu_class,
            on_last_gpu=started.on_last_gpu,
            cache_dropped=False,
            bonus=False,
        )
    candidates = started.candidates
    number = len(s.attempts)
    tried = {a.started.gpu_class for a in s.attempts}
    failed_providers = {
        a.started.provider
        for a in s.attempts
        if a.ended is not None and a.ended.failure in RETRIABLE_FAILURES
    }
    last = s.current
    cache_dropped = s.cache_dropped
    if (
        last is not None
        and started.weight_cache
        and not cache_dropped
        and not s.bonus_used
        and last.ended is not None
        and last.ended.failure in CACHE_DROP_FAILURES
    ):
        # The bonus: the same class again, without the cache, outside the budget.
        untried_after = sum(c.gpu_class not in tried for c in candidates)
        return AttemptPlan(
            attempt=number,
            candidate=last.started.candidate,
            provider=last.started.provider,
            gpu_class=last.started.gpu_class,
            on_last_gpu=untried_after == 0 or s.walk_attempts > started.max_retries,
            cache_dropped=True,
            bonus=True,
        )
    walk_index = s.walk_attempts
    if walk_index > started.max_retries:
        return None
    pick = min(range(len(candidates)), key=walk_key(candidates, failed_providers, tried))
    chosen = candidates[pick]
    untried_after = sum(
        c.gpu_class not in tried and c.gpu_class != chosen.gpu_class for c in candidates
    )
    cache_fallback_left = started.weight_cache and not cache_dropped and not s.bonus_used
    budget_spent = walk_index >= started.max_retries
    return AttemptPlan(
        attempt=number,
        candidate=pick,
        provider=chosen.provider,
        gpu_class=chosen.gpu_class,
        on_last_gpu=untried_after == 0 or (budget_spent and not cache_fallback_left),
        cache_dropped=cache_dropped,
        bonus=False,
    )


def deploy_retry_wait(s: RunState) -> float:
    """The wait before the attempt after a deploy or submit error: 30 s × errors in a row."""
    streak = 0
    for a in reversed(s.attempts):
        if a.deploy_error is None and a.submit_error is None:
            break
        streak += 1
    return min(DEPLOY_RETRY_WAIT_CAP_S, DEPLOY_RETRY_WAIT_S * streak)


# --- decide -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartAttempt:
    plan: AttemptPlan


@dataclass(frozen=True, slots=True)
class Deploy:
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class Submit:
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class WatchJob:
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class EndAttempt:
    """Record the end of an attempt that never got a job (deploy or submit error)."""

    attempt: int
    failure: FailureKind
    detail: str


@dataclass(frozen=True, slots=True)
class CancelJob:
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class DeleteEndpoint:
    endpoint_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class WaitRun:
    seconds: float


@dataclass(frozen=True, slots=True)
class ConcludeRun:
    ok: bool
    failure: FailureKind | None
    detail: str
    metrics: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunFinished:
    result: Any


RunCommand = (
    StartAttempt
    | Deploy
    | Submit
    | WatchJob
    | EndAttempt
    | CancelJob
    | DeleteEndpoint
    | WaitRun
    | ConcludeRun
    | RunFinished
)


def handed_over(s: RunState) -> set[str]:
    """The endpoints a single-attempt run leaves to its caller: once its job is queued, the
    caller holds a handle to it and walks on itself, so the job and its endpoint are the
    caller's to keep or tear down — unless the run was cancelled."""
    if s.started is None or s.started.single_attempt is None or s.cancel_requested:
        return set()
    return {a.endpoint_id for a in s.attempts if a.job_id is not None and a.endpoint_id}


def _cleanup(s: RunState, reason: str) -> RunCommand | None:
    """Cancel a job still running and delete every endpoint not yet deleted (but those a
    single-attempt run hands over to its caller)."""
    kept = handed_over(s)
    a = s.current
    # A job that may still hold a worker: running when the watch stopped, or ended by an
    # infra rule while RunPod still has it (queued, stalled). A success or a job_failed is over.
    still_there = a is not None and (a.ended is None or a.ended.failure in STILL_THERE_FAILURES)
    if still_there and a.job_id and not a.job_cancelled and a.endpoint_id not in kept:
        return CancelJob(a)
    for endpoint_id in s.endpoints:
        if endpoint_id not in s.deleted and endpoint_id not in kept:
            return DeleteEndpoint(endpoint_id, reason)
    return None


def decide_run(s: RunState, now: float) -> RunCommand:
    """The next command for the run's shell, a pure function of the state and `now`."""
    if s.result is not None:
        return RunFinished(s.result)
    if s.started is None:
        raise CorruptLogError("run", s.stream, "the run's stream has no RunStarted", seq=0)
    if s.cancel_requested:
        step = _cleanup(s, "run cancelled")
        if step is not None:
            return step
        return ConcludeRun(
            False, FailureKind.CANCELLED, f"cancelled by the user {s.cancel_reason}".strip()
        )
    a = s.current
    if a is None:
        plan = plan_attempt(s)
        if plan is None:
            return ConcludeRun(False, FailureKind.NO_CANDIDATES, "the run has no GPU candidate")
        return StartAttempt(plan)
    if a.ended is None:
        if a.deploy_error is not None:
            return EndAttempt(
                a.started.attempt, FailureKind.POLL_ERROR, f"deploy failed: {a.deploy_error}"
            )
        if a.submit_error is not None:
            return EndAttempt(
                a.started.attempt, FailureKind.POLL_ERROR, f"submit failed: {a.submit_error}"
            )
        if a.endpoint_id is None:
            return Deploy(a)
        if a.job_id is None:
            return Submit(a)
        return WatchJob(a)
    ended = a.ended
    if ended.ok:
        step = _cleanup(s, "run succeeded")
        return step or ConcludeRun(True, None, ended.detail, ended.metrics)
    retriable = ended.failure in RETRIABLE_FAILURES
    plan = plan_attempt(s) if retriable else None
    if plan is None:
        step = _cleanup(s, "run ended")
        if step is not None:
            return step
        tail = "" if retriable else " (not retried)"
        return ConcludeRun(
            False, ended.failure, f"attempt {a.started.attempt}: {ended.detail}{tail}"
        )
    step = _cleanup(s, f"retrying after {ended.failure}")
    if step is not None:
        return step
    wait = deploy_retry_wait(s)
    if wait > 0 and now < ended.at + wait:
        return WaitRun(ended.at + wait - now)
    return StartAttempt(plan)
