"""The run's state and its fold: what a run's stream says, event by event.

`flashfsm.fsm.run` is the run machine: this module is its fold half, and the decisions
(the walk, the outcomes, `decide_run`) are that module's. Here: the run's phases and their
machine (`RunPhase`, `RUN_MACHINE`), what the stream says about each attempt (`Attempt`)
and about the run (`RunState`), and `evolve_run` / `replay_run`, which fold a run's events
into a `RunState` and refuse a log that breaks the machine (`CorruptLogError`). A
`RunState` answers the questions every decision asks of it (the current attempt, the bonus
used, the attempts that count against the budget, whether a failure is retried:
`RETRIABLE_FAILURES`). `flashfsm.fsm.run` re-exports every public name here; this module
imports nothing of it. Pure: no I/O, no clock.
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
    CandidatesRanked,
    EndpointsLookedUp,
    Event,
    RunStarted,
)
from flashfsm.fsm.capacity import check_order
from flashfsm.fsm.machine import IllegalTransition, build_machine, fire

#: Failure kinds that are the infrastructure's fault: worth another attempt.
RETRIABLE_FAILURES = frozenset(
    {
        FailureKind.STALLED,
        FailureKind.NO_CAPACITY,
        FailureKind.SLOW_START,
        FailureKind.POLL_ERROR,
        FailureKind.JOB_PREEMPTED,
        FailureKind.LOST,
    }
)
#: The `error_class` of a lookup the run's adapters cannot make (no `find_endpoints`):
#: never asked again.
LOOKUP_UNSUPPORTED = "LookupUnsupported"


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
    #: Restart bookkeeping: the deploy and the submit were intended (recorded before their
    #: call), and what a lookup of the intended endpoint found since the latest intent.
    deploy_intended: bool = False
    lookup: EndpointsLookedUp | None = None
    lookup_errors: int = 0  # lookups that failed
    submit_intended: bool = False

    @property
    def deploy_unresolved(self) -> bool:
        """A deploy was intended and nothing recorded came of it: the process stopped between
        the call and its record, and the platform must be asked what exists."""
        return (
            self.deploy_intended
            and self.endpoint_id is None
            and self.deploy_error is None
            and self.lookup is None
        )

    @property
    def lookup_failed(self) -> bool:
        """Its deploy was interrupted and the platform could not say what it made (a lookup
        the adapters can make failed): an endpoint of the run may exist, unknown to it."""
        lookup = self.lookup
        return (
            self.endpoint_id is None
            and lookup is not None
            and lookup.error_class not in (None, LOOKUP_UNSUPPORTED)
        )

    @property
    def submit_lost(self) -> bool:
        """A submit was intended and neither its job nor its error was recorded: the job may
        exist on the endpoint, under an id nobody knows."""
        return self.submit_intended and self.job_id is None and self.submit_error is None


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
    deleted: set[str] = field(default_factory=set)  # deletes tried (ok or not)
    delete_failures: dict[str, tuple[int, float]] = field(default_factory=dict)  # (tries, last)
    cancel_requested: bool = False
    cancel_reason: str = ""
    ranking: CandidatesRanked | None = None  # the walk's recorded order (None: price order)
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
        """Attempts that count against the retry budget (the bonus and a redo do not)."""
        return sum(not (a.started.bonus or a.started.redo) for a in self.attempts)

    def retried(self, failure: str | None) -> bool:
        """Whether the walk retries an attempt that ended with `failure`: the infra-shaped
        failures, and `lost_unverified` only when the run says so (a retry may train the
        job a second time)."""
        if failure in RETRIABLE_FAILURES:
            return True
        return (
            failure == FailureKind.LOST_UNVERIFIED
            and self.started is not None
            and self.started.retry_lost_unverified
        )


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


def _on_candidates_ranked(s: RunState, e: Any) -> None:
    if s.started is None or s.attempts or s.ranking is not None:
        raise CorruptLogError(
            "replay", e.stream, "CandidatesRanked must follow RunStarted, once", seq=e.seq
        )
    wrong = check_order(e.order, len(s.started.candidates))
    if wrong is not None:
        raise CorruptLogError("replay", e.stream, wrong, seq=e.seq)
    s.ranking = e


def _on_attempt_started(s: RunState, e: Any) -> None:
    s.attempts.append(Attempt(started=e))
    fire(s, "begin_attempt", RUN_MACHINE)


def _on_noop(s: RunState, e: Any) -> None:
    """Deploy progress (tries, quota, failover): recorded for the post-mortem only."""


def _on_deploy_intended(s: RunState, e: Any) -> None:
    a = _attempt(s, e.attempt, e)
    a.deploy_intended, a.lookup = True, None


def _on_looked_up(s: RunState, e: Any) -> None:
    a = _attempt(s, e.attempt, e)
    a.lookup = e
    a.lookup_errors += e.error_class is not None
    for found in e.found:  # the run made them: each is deleted or adopted, never forgotten
        if found.endpoint_id not in s.endpoints:
            s.endpoints.append(found.endpoint_id)


def _on_submit_intended(s: RunState, e: Any) -> None:
    _attempt(s, e.attempt, e).submit_intended = True


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
    if e.ok:
        s.delete_failures.pop(e.endpoint_id, None)
    else:
        tries, _ = s.delete_failures.get(e.endpoint_id, (0, e.at))
        s.delete_failures[e.endpoint_id] = (tries + 1, e.at)


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
    "CandidatesRanked": _on_candidates_ranked,
    "AttemptStarted": _on_attempt_started,
    "DeployIntended": _on_deploy_intended,
    "DeployAttempted": _on_noop,
    "QuotaExhausted": _on_noop,
    "AccountFailedOver": _on_noop,
    "EndpointsLookedUp": _on_looked_up,
    "EndpointDeployed": _on_deployed,
    "DeployFailed": _on_deploy_failed,
    "SubmitIntended": _on_submit_intended,
    "JobQueued": _on_queued,
    "SubmitFailed": _on_submit_failed,
    "JobCancelled": _on_job_cancelled,
    "EndpointDeleted": _on_endpoint_deleted,
    "AttemptEnded": _on_attempt_ended,
    "CancelRequested": _on_cancel_requested,
    "RunConcluded": _on_run_concluded,
}
