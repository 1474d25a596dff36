"""The run machine: one training job driven to a result over attempts, with the GPU walk.

Theory of operation. A run's stream records its candidates (`RunStarted`), then for each
attempt the GPU picked (`AttemptStarted`, with its `on_last_gpu`), the deploy and submit
steps, the job's stream (`JobQueued`) and the outcome (`AttemptEnded`); cancels, endpoint
deletions and the result (`RunConcluded`) are events too. `evolve_run` folds them into a
`RunState`; `decide_run(state, now)` says what the shell does next — plan an attempt,
deploy, submit, watch the job, cancel it, delete an endpoint, wait, or conclude. A
control plane restarted mid-run replays the stream and carries on from the same command,
so a walk resumes, it never starts over.

The walk (`plan_attempt`), as the reference runner had it. A candidate is identified by its
(provider, GPU class) pair: `provider` is where the attempt deploys (the run's adapters say
which providers they deploy to, and a run whose candidates name another is refused before
it starts: `flashfsm.runs.UnsupportedProvider`). Each attempt prefers, in this order: a
provider that has not failed this run, a candidate not yet tried, then the run's ranking —
the order `CandidatesRanked` recorded from the store's capacity memory
(`flashfsm.fsm.capacity`), else the static one: the cheapest, the smaller card, the order
given. Once every candidate has been tried it re-rolls the first of the ranking among them,
so it never runs off the list. Infra-shaped failures are retried while the budget lasts
(at most `max_retries + 1` attempts); `job_failed` never is, nor is `unauthorized` (RunPod
refused the key: every further attempt would be refused too). A `slow_start` (capacity was
found, but the worker kept starting past the start grace) is retried without holding it
against its class or provider: the class stays as untried as it was.

The weight cache is a capability of a provider (`PROVIDER_CAPABILITIES`: a RunPod network
volume), so it is attached only to an attempt whose provider has it. Such an attempt's
first `no_capacity` or `poll_error` earns one bonus attempt on the same candidate without
the cache (the drop is sticky) that does not count against the budget; and while that
bonus is still to come, an attempt is not on its last GPU for having spent the budget. A
user cancel wins everywhere: no attempt starts after it, and a success recorded after it
does not count; the job it finds running is cancelled on the platform and watched on to
the platform's answer (so its stream concludes) before the endpoints go. `apply_outcome`
is the one way an attempt's outcome (a deploy or submit error, its job's verdict, a user's
cancel) becomes the run's events.

Restarts pay once. The deploy and the submit are the run's paid calls, and the process
may stop between either and its record, so each intent is recorded before its call
(`DeployIntended`, `SubmitIntended`). A resume that finds a deploy intended and nothing
recorded of it asks the platform first (`LookUpEndpoint`: the endpoints that carry the
attempt's recorded name), before anything else, a cancel included: one found is adopted
as the attempt's endpoint (`adopt_drafts`), any second one deleted, and only when none
exists is the deploy made again; a lookup that fails ends the attempt, never a blind
deploy, and is made again before the run moves on or ends (`TEARDOWN_TRIES` times, waits
growing), so an endpoint the deploy made is found and deleted, not left behind. A submit
intended and never answered in the log may have queued a job whose id nobody knows (`/run`
has no idempotency key): the attempt's endpoint is deleted, the unknown job with it, and
the attempt ends by `SUBMIT_LOST`; a *redo* on the same candidate follows, outside the
budget (our restart, not the platform, ended the attempt). An endpoint that cannot be
deleted ends the attempt `lost_unverified` instead, and nothing is submitted again unless
the run says so (`RunStarted.retry_lost_unverified`, which also decides whether a job
verdict `lost_unverified` is retried: `RunState.retried`).

A run started with `single_attempt` (what `submit_run` records, for a caller that walks
itself) has exactly that one attempt on its first candidate, with the caller's
`on_last_gpu`: no walk, no retry, no bonus, the same deploy, submit and watch. Once its
job is queued the caller holds a handle to it, so the job and its endpoint are left to the
caller when the run ends (`handed_over`); a cancelled run cleans up as any other.

The fold half of the pair — the run's phases and machine, `Attempt`, `RunState`,
`evolve_run` and `replay_run` — is `flashfsm.fsm.run_state`'s, re-exported here; this
module decides: the walk, the retry budget, the outcomes, the teardown, and the
reconciliation of a paid call's intent after a restart, each a small function of the
`RunState`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flashfsm.events.errors import CorruptLogError
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    CancelRequested,
    Candidate,
    DeployFailed,
    EndpointDeployed,
    EventBase,
    FoundEndpoint,
    SubmitFailed,
)
from flashfsm.fsm.capacity import Identity, identity, static_order
from flashfsm.fsm.run_state import ACTIVE_RUN as ACTIVE_RUN
from flashfsm.fsm.run_state import LOOKUP_UNSUPPORTED as LOOKUP_UNSUPPORTED
from flashfsm.fsm.run_state import RETRIABLE_FAILURES as RETRIABLE_FAILURES
from flashfsm.fsm.run_state import RUN_MACHINE as RUN_MACHINE
from flashfsm.fsm.run_state import RUN_TRANSITIONS as RUN_TRANSITIONS
from flashfsm.fsm.run_state import Attempt as Attempt
from flashfsm.fsm.run_state import RunPhase as RunPhase
from flashfsm.fsm.run_state import RunState as RunState
from flashfsm.fsm.run_state import evolve_run as evolve_run
from flashfsm.fsm.run_state import replay_run as replay_run

#: Failures the walk does not hold against the attempt's GPU class or provider: capacity
#: was found (`slow_start`), so the class stays as untried as it was.
CLASS_KEPT_FAILURES = frozenset({FailureKind.SLOW_START})
#: Failures whose job may still hold a worker on RunPod: cancelled before the run moves on
#: or ends. `unauthorized` is never retried (the key was refused: another attempt would be
#: refused too), but its job may still run and bill, so its cancel is tried all the same;
#: nor is `lost_unverified` by default (see `retried`), whose job RunPod no longer knows.
STILL_THERE_FAILURES = RETRIABLE_FAILURES | {FailureKind.UNAUTHORIZED, FailureKind.LOST_UNVERIFIED}
#: Failures after which the weight cache is dropped for one bonus attempt.
CACHE_DROP_FAILURES = frozenset({FailureKind.NO_CAPACITY, FailureKind.POLL_ERROR})
#: What each provider flashfsm deploys to offers. The weight cache is a RunPod network
#: volume: an attempt elsewhere runs without it (and so earns no cache-drop bonus).
WEIGHT_CACHE = "weight_cache"
PROVIDER_CAPABILITIES: Mapping[str, frozenset[str]] = {"runpod": frozenset({WEIGHT_CACHE})}
#: Error classes (as a failed deploy or submit records them) that mean RunPod refused the
#: key: the attempt ends `unauthorized`, never retried, like a job whose status is refused.
KEY_REFUSED_ERRORS = frozenset({"RunpodAuthError"})
DEPLOY_RETRY_WAIT_S = 30.0  # the wait after the first deploy or submit error; grows linearly
DEPLOY_RETRY_WAIT_CAP_S = 300.0
#: The rule an attempt ends by when its submit's answer was lost (the process stopped
#: between `/run` and its record): its endpoint is torn down with the unknown job, and a
#: redo on the same candidate follows, outside the walk's budget.
SUBMIT_LOST = "submit_lost"
#: Tries to tear down the endpoint of a lost submit before giving up on the attempt (it is
#: then `lost_unverified`: its unknown job may still run, so nothing is submitted again).
TEARDOWN_TRIES = 3


# --- the walk -----------------------------------------------------------------------------


def supports(provider: str, capability: str) -> bool:
    """Whether flashfsm offers `capability` (`WEIGHT_CACHE`) on `provider`."""
    return capability in PROVIDER_CAPABILITIES.get(provider, frozenset())


def attempt_has_cache(s: RunState, started: AttemptStarted) -> bool:
    """Whether an attempt's endpoint has the weight cache attached: as recorded, or, in a
    log from before it was, the run's `weight_cache` unless the attempt dropped it."""
    if started.weight_cache is not None:
        return started.weight_cache
    return bool(s.started is not None and s.started.weight_cache and not started.cache_dropped)


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
    weight_cache: bool = False  # the cache is attached to this attempt's endpoint
    redo: bool = False  # a redo of a lost submit's attempt, outside the budget


def walk_order(s: RunState) -> tuple[int, ...]:
    """The run's ranking of its candidates: recorded (`CandidatesRanked`), else by price."""
    if s.ranking is not None:
        return s.ranking.order
    return static_order(s.started.candidates) if s.started is not None else ()


def walk_key(
    candidates: tuple[Candidate, ...],
    failed_providers: set[str],
    tried: set[Identity],
    order: tuple[int, ...] | None = None,
) -> Callable[[int], tuple[bool, bool, int]]:
    """The preference order of the walk: fresh provider, untried (provider, class), then the
    ranking (`order`, the static price order by default)."""
    place = {i: n for n, i in enumerate(order if order is not None else static_order(candidates))}

    def key(index: int) -> tuple[bool, bool, int]:
        c = candidates[index]
        return (c.provider in failed_providers, identity(c) in tried, place[index])

    return key


def _held_against(a: Attempt) -> bool:
    """Whether the walk holds this attempt against its class (not a `slow_start`)."""
    return a.ended is None or a.ended.failure not in CLASS_KEPT_FAILURES


def tried_identities(s: RunState) -> set[Identity]:
    """The (provider, GPU class) pairs the run's attempts have used (an attempt that found
    capacity but started slowly leaves its class untried)."""
    return {(a.started.provider, a.started.gpu_class) for a in s.attempts if _held_against(a)}


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
            weight_cache=started.weight_cache and supports(only.provider, WEIGHT_CACHE),
        )
    candidates = started.candidates
    number = len(s.attempts)
    tried = tried_identities(s)
    failed_providers = {
        a.started.provider
        for a in s.attempts
        if a.ended is not None
        and a.ended.rule != SUBMIT_LOST
        and s.retried(a.ended.failure)
        and _held_against(a)
    }
    last = s.current
    cache_dropped = s.cache_dropped
    if (
        last is not None
        and last.ended is not None
        and last.ended.rule == SUBMIT_LOST
        and last.ended.failure == FailureKind.POLL_ERROR  # (torn down: nothing of it runs)
    ):
        # The redo: the same candidate, as it was, outside the budget (our restart, not
        # the platform's failure, ended the attempt).
        was = last.started
        return AttemptPlan(
            attempt=number,
            candidate=was.candidate,
            provider=was.provider,
            gpu_class=was.gpu_class,
            on_last_gpu=was.on_last_gpu,
            cache_dropped=was.cache_dropped,
            bonus=False,
            weight_cache=attempt_has_cache(s, was),
            redo=True,
        )
    if (
        last is not None
        and not s.bonus_used
        and last.ended is not None
        and last.ended.failure in CACHE_DROP_FAILURES
        and attempt_has_cache(s, last.started)
    ):
        # The bonus: the same candidate again, without the cache, outside the budget.
        untried_after = len({identity(c) for c in candidates} - tried)
        return AttemptPlan(
            attempt=number,
            candidate=last.started.candidate,
            provider=last.started.provider,
            gpu_class=last.started.gpu_class,
            on_last_gpu=untried_after == 0 or s.walk_attempts > started.max_retries,
            cache_dropped=True,
            bonus=True,
            weight_cache=False,
        )
    walk_index = s.walk_attempts
    if walk_index > started.max_retries:
        return None
    key = walk_key(candidates, failed_providers, tried, walk_order(s))
    pick = min(range(len(candidates)), key=key)
    chosen = candidates[pick]
    untried_after = len({identity(c) for c in candidates} - tried - {identity(chosen)})
    with_cache = (
        started.weight_cache and not cache_dropped and supports(chosen.provider, WEIGHT_CACHE)
    )
    bonus_left = with_cache and not s.bonus_used
    budget_spent = walk_index >= started.max_retries
    return AttemptPlan(
        attempt=number,
        candidate=pick,
        provider=chosen.provider,
        gpu_class=chosen.gpu_class,
        on_last_gpu=untried_after == 0 or (budget_spent and not bonus_left),
        cache_dropped=cache_dropped,
        bonus=False,
        weight_cache=with_cache,
    )


# --- outcomes: what an attempt's end, or a cancel, records ---------------------------------


@dataclass(frozen=True, slots=True)
class DeployFailure:
    """The attempt's deploy raised."""

    attempt: int
    error_class: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class SubmitFailure:
    """The attempt's submit raised."""

    attempt: int
    error_class: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class JobVerdict:
    """The attempt's job reached a verdict (what `poll_job` returned)."""

    attempt: int
    ok: bool
    failure: str | None = None
    rule: str | None = None
    detail: str = ""
    metrics: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class UserCancel:
    """A user asked the run to stop."""

    by: str = ""
    reason: str = ""


AttemptOutcome = DeployFailure | SubmitFailure | JobVerdict | UserCancel


@dataclass(frozen=True, slots=True)
class Draft:
    """An event to record: its kind and payload; the shell stamps the envelope."""

    cls: type[EventBase]
    fields: Mapping[str, Any]

    def build(self, stream: str, seq: int, id: str, at: float) -> EventBase:
        """The event, with its envelope (validated, masked and capped as any event)."""
        return self.cls(stream=stream, seq=seq, id=id, at=at, **self.fields)


class IllegalOutcome(ValueError):
    """An outcome that does not fit the run: no such attempt running, or a finished run."""


def apply_outcome(s: RunState, outcome: AttemptOutcome) -> tuple[Draft, ...]:
    """The run events that record `outcome` on the run as it stands (to fold in order).

    A deploy or submit error records the failed step and ends the attempt as a
    `poll_error` (which a retry may follow), or as `unauthorized` when RunPod refused the
    key (`KEY_REFUSED_ERRORS`: never retried); a job's verdict ends the attempt with it; a
    cancel is a `CancelRequested` (nothing once the run has concluded). Raises
    `IllegalOutcome` for an attempt outcome on an attempt that is not the one running.
    """
    if isinstance(outcome, UserCancel):
        return cancel_drafts(s, outcome)
    a = s.current
    if s.done or a is None or a.started.attempt != outcome.attempt or a.ended is not None:
        raise IllegalOutcome(
            f"run {s.stream}: attempt {outcome.attempt} is not running "
            f"(phase {s.state}, current {None if a is None else a.started.attempt})"
        )
    number = outcome.attempt
    match outcome:
        case DeployFailure(error_class=error_class, message=message):
            if a.endpoint_id is not None or a.deploy_error is not None:
                raise IllegalOutcome(f"run {s.stream}: attempt {number} is past its deploy")
            step = DeployFailed
            what = "deploy"
        case SubmitFailure(error_class=error_class, message=message):
            if a.endpoint_id is None or a.job_id is not None or a.submit_error is not None:
                raise IllegalOutcome(f"run {s.stream}: attempt {number} is not submitting")
            step = SubmitFailed
            what = "submit"
        case JobVerdict():
            return (
                Draft(
                    AttemptEnded,
                    {
                        "attempt": number,
                        "ok": outcome.ok,
                        "failure": outcome.failure,
                        "rule": outcome.rule,
                        "detail": outcome.detail or "",
                        "metrics": outcome.metrics,
                    },
                ),
            )
    failed = {"attempt": number, "error_class": error_class, "message": message}
    # RunPod refused the key (401/403): no retry would be let in either.
    refused = error_class in KEY_REFUSED_ERRORS
    ended = {
        "attempt": number,
        "ok": False,
        "failure": FailureKind.UNAUTHORIZED if refused else FailureKind.POLL_ERROR,
        "detail": f"{what} {'refused' if refused else 'failed'}: {error_class}: {message}",
    }
    return (Draft(step, failed), Draft(AttemptEnded, ended))


def cancel_drafts(s: RunState | None, cancel: UserCancel) -> tuple[Draft, ...]:
    """A user's cancel: one `CancelRequested` (none once the run has concluded; `s` None:
    the run is not known, and a cancel always records)."""
    if s is not None and s.done:
        return ()
    return (Draft(CancelRequested, {"by": cancel.by, "reason": cancel.reason}),)


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
    """Record the end of an attempt that never got a job (deploy or submit error, or a
    submit whose answer was lost: `rule` `SUBMIT_LOST`)."""

    attempt: int
    failure: FailureKind
    detail: str
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class LookUpEndpoint:
    """Ask the platform which endpoints carry the attempt's name (its deploy was intended,
    and nothing recorded came of it): record what it says (`EndpointsLookedUp`)."""

    attempt: Attempt


@dataclass(frozen=True, slots=True)
class AdoptEndpoint:
    """Record the endpoint a lookup found as the attempt's (`adopt_drafts`): the deploy the
    process stopped after had made it."""

    attempt: Attempt
    found: FoundEndpoint


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
    | LookUpEndpoint
    | AdoptEndpoint
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


def _attempt_step(s: RunState, a: Attempt, now: float) -> RunCommand:
    """The next step of the running attempt `a`: deploy (adopting what a lookup found),
    submit, watch, or end it."""
    number = a.started.attempt
    if a.deploy_error is not None:
        return EndAttempt(number, FailureKind.POLL_ERROR, f"deploy failed: {a.deploy_error}")
    lookup = a.lookup
    if a.endpoint_id is None:
        if lookup is None or not a.deploy_intended:
            return Deploy(a)
        if lookup.error_class is not None:  # never deploy blind: the attempt ends
            return EndAttempt(
                number,
                FailureKind.POLL_ERROR,
                f"deploy interrupted, and the endpoint {lookup.endpoint_name} could not be "
                f"looked up: {lookup.error_class}: {lookup.message}".rstrip(": "),
            )
        if lookup.found:
            return AdoptEndpoint(a, lookup.found[0])
        return Deploy(a)  # the stopped deploy made nothing: deploy (a new intent)
    if lookup is not None:  # a second endpoint under the attempt's name goes at once
        for found in lookup.found:
            endpoint_id = found.endpoint_id
            if endpoint_id != a.endpoint_id and endpoint_id not in s.deleted:
                return DeleteEndpoint(endpoint_id, "a second endpoint of one attempt")
    if a.submit_error is not None:
        return EndAttempt(number, FailureKind.POLL_ERROR, f"submit failed: {a.submit_error}")
    if a.job_id is not None:
        return WatchJob(a)
    if a.submit_lost:
        return _teardown_lost_submit(s, a, now)
    return Submit(a)


def _teardown_lost_submit(s: RunState, a: Attempt, now: float) -> RunCommand:
    """A submit whose answer was lost: its endpoint is deleted (the unknown job with it),
    then the attempt ends by `SUBMIT_LOST`, so a redo may submit again; if the endpoint
    cannot be deleted after `TEARDOWN_TRIES`, the attempt ends `lost_unverified`, and
    nothing is submitted again unless the run says so."""
    assert a.endpoint_id is not None
    endpoint_id, number = a.endpoint_id, a.started.attempt
    lost = "the submit's answer was lost (the process stopped between /run and its record)"
    failed = s.delete_failures.get(endpoint_id)
    if endpoint_id not in s.deleted:
        return DeleteEndpoint(endpoint_id, f"{lost}: torn down with its unknown job")
    if failed is None:
        detail = f"{lost}; endpoint {endpoint_id} torn down with its unknown job"
        return EndAttempt(number, FailureKind.POLL_ERROR, detail, rule=SUBMIT_LOST)
    tries, last_at = failed
    if tries < TEARDOWN_TRIES:
        due = last_at + DEPLOY_RETRY_WAIT_S * tries
        if now < due:
            return WaitRun(due - now)
        return DeleteEndpoint(endpoint_id, f"{lost}: torn down with its unknown job")
    return EndAttempt(
        number,
        FailureKind.LOST_UNVERIFIED,
        f"{lost}, and endpoint {endpoint_id} could not be deleted ({tries} tries): its "
        "unknown job may still run, so nothing is submitted again",
        rule=SUBMIT_LOST,
    )


def _look_again(a: Attempt, now: float) -> RunCommand | None:
    """The lookup of an attempt whose interrupted deploy could not be looked up, made again
    (after `DEPLOY_RETRY_WAIT_S` × its failures) before the run moves on or ends, up to
    `TEARDOWN_TRIES` times: an endpoint it finds is the run's, deleted by `_cleanup`."""
    assert a.lookup is not None
    if a.lookup_errors > TEARDOWN_TRIES:
        return None
    due = a.lookup.at + DEPLOY_RETRY_WAIT_S * a.lookup_errors
    return WaitRun(due - now) if now < due else LookUpEndpoint(a)


def adopt_drafts(a: Attempt, found: FoundEndpoint) -> tuple[Draft, ...]:
    """The `EndpointDeployed` that adopts `found` (a lookup's) as attempt `a`'s endpoint:
    its id, account and idle timeout as the platform's record has them."""
    return (
        Draft(
            EndpointDeployed,
            {
                "attempt": a.started.attempt,
                "endpoint_id": found.endpoint_id,
                "endpoint_name": a.started.endpoint_name,
                "account": found.account,
                "idle_timeout_s": found.idle_timeout_s,
            },
        ),
    )


def decide_run(s: RunState, now: float) -> RunCommand:
    """The next command for the run's shell, a pure function of the state and `now`."""
    if s.result is not None:
        return RunFinished(s.result)
    if s.started is None:
        raise CorruptLogError("run", s.stream, "the run's stream has no RunStarted", seq=0)
    a = s.current
    if a is not None and a.ended is None and a.deploy_unresolved:
        # Before anything else, a cancel included: what the deploy may have made is found,
        # so it is adopted or deleted, never left behind nor made twice.
        return LookUpEndpoint(a)
    if a is not None and a.lookup_failed and (a.ended is not None or s.cancel_requested):
        step = _look_again(a, now)
        if step is not None:
            return step
    if s.cancel_requested:
        if a is not None and a.ended is None and a.job_cancelled and a.job_id is not None:
            # The job, cancelled on the platform: watched on to the platform's answer (a
            # CANCELLED status concludes it), so the run leaves no job stream open.
            return WatchJob(a)
        step = _cleanup(s, "run cancelled")
        if step is not None:
            return step
        return ConcludeRun(
            False, FailureKind.CANCELLED, f"cancelled by the user {s.cancel_reason}".strip()
        )
    if a is None:
        plan = plan_attempt(s)
        if plan is None:
            return ConcludeRun(False, FailureKind.NO_CANDIDATES, "the run has no GPU candidate")
        return StartAttempt(plan)
    if a.ended is None:
        return _attempt_step(s, a, now)
    ended = a.ended
    if ended.ok:
        step = _cleanup(s, "run succeeded")
        return step or ConcludeRun(True, None, ended.detail, ended.metrics)
    retriable = s.retried(ended.failure)
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
