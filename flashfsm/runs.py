"""`supervise_run`: drive the run machine with real adapters until the run has a result.

Theory of operation. Like the job watch, a loop asks the pure core (`decide_run`) for a
command, performs the one piece of I/O it names through `RunAdapters`, records the result
as an event in the run's stream, and folds it in with `evolve_run`. Each attempt's job is
watched by `poll_job` in its own stream, linked from the run's `AttemptStarted` and
`JobQueued` events. A control plane that dies mid-run is restarted by calling
`supervise_run` again on the same stream: the run is replayed and its current attempt's
watch is reattached (a replay too).

The run's stream has one writer (`flashfsm.writer.StreamWriter`, policy `FOLD_CANCELS`):
only the process driving the run appends to it, except for a user's `CancelRequested`
(`request_cancel`, from any process), which the driver folds in before its next step.

`RunAdapters` is the seam: `RunpodRunAdapters` talks to RunPod's REST API with a pluggable
deployer (runpod-flash in production, via `flashfsm.submit.flash_run_adapters`; the
simulator in tests and the demo). A candidate's `provider` is where its attempt deploys:
adapters that name the providers they deploy to (`providers`) refuse, before the run
starts, a candidate whose provider is not one of them (`UnsupportedProvider`).

A cancelled run leaves no stream open: its job, cancelled on the platform, is watched on
to the platform's answer, and a Ctrl-C (`KeyboardInterrupt`) is a cancel too, recorded and
wound down before it is raised again — unless the caller chose `on_interrupt="detach"`:
then it records nothing and the run is left to resume.

Every outcome of an attempt — a deploy or submit error, its job's verdict — and a user's
cancel becomes events through the pure `flashfsm.fsm.run.apply_outcome`; the shell only
stamps and appends them. A new walk first records its ranking (`CandidatesRanked`) from
the store's capacity memory (`flashfsm.capacity`), unless `capacity_memory` turns it off.

Restarts pay once: the intent of each paid call (`DeployIntended`, `SubmitIntended`) is
recorded before the call, so a resume that finds an intent without its answer looks the
endpoint up by its recorded name (`RunAdapters.find_endpoints`) and adopts or deletes it,
and a lost submit tears its attempt down before anything is submitted again
(`flashfsm.fsm.run` decides; this module performs).

Why it is long: it holds the one driver of a run and the one production adapter set
(`RunpodRunAdapters`) the driver's protocol describes; each of the driver's steps is a small
function, and splitting the adapter from the protocol it implements would leave two halves
that change together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from flashfsm.adapters.runpod import policy_for_budget
from flashfsm.capacity import ranking_for
from flashfsm.errors import WatchStopped
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Candidate,
    CandidatesRanked,
    DeployIntended,
    EndpointDeleted,
    EndpointDeployed,
    EndpointsLookedUp,
    EventBase,
    FoundEndpoint,
    HubLocation,
    JobCancelled,
    JobQueued,
    RunConcluded,
    RunStarted,
    SubmitIntended,
)
from flashfsm.events.policy import stall_kwargs
from flashfsm.events.store import HANDOFF, EventStore, FencedStore, capabilities
from flashfsm.fsm.capacity import DEFAULT_CAPACITY, NO_MEMORY, CapacityPolicy
from flashfsm.fsm.run import (
    LOOKUP_UNSUPPORTED,
    AdoptEndpoint,
    Attempt,
    AttemptOutcome,
    CancelJob,
    ConcludeRun,
    DeleteEndpoint,
    Deploy,
    DeployFailure,
    Draft,
    EndAttempt,
    JobVerdict,
    LookUpEndpoint,
    RunFinished,
    RunState,
    StartAttempt,
    Submit,
    SubmitFailure,
    UserCancel,
    WaitRun,
    WatchJob,
    adopt_drafts,
    apply_outcome,
    cancel_drafts,
    decide_run,
)
from flashfsm.fsm.sweep import bare_name
from flashfsm.naming import attempt_stream, endpoint_name, run_stream
from flashfsm.redact import redact
from flashfsm.shell import JobHandle, PollResult, opened_store, poll_job
from flashfsm.writer import FOLD_CANCELS, REBUILD, RUN, TAIL, StreamWriter

logger = logging.getLogger("flashfsm.runs")


@dataclass(frozen=True)
class Deployed:
    """What a deploy returns. `idle_timeout_s` is the idle timeout the deploy set on the
    endpoint, recorded in its `EndpointDeployed` (v2); None when the deployer does not
    say (a v1 event, as before the field existed)."""

    endpoint_id: str
    endpoint_name: str
    account: int = 0
    volumes: tuple[str, ...] = ()
    disk_gb: int | None = None
    idle_timeout_s: int | None = None


Recorder = Callable[..., Any]
AttemptHook = Callable[[RunState, Attempt], Any]


class UnsupportedProvider(FlashFsmError, ValueError):
    """A run's candidate names a provider its adapters do not deploy to."""


class RunAdapters(Protocol):
    """The I/O a run needs. Each method may raise; the shell records what happened.

    Adapters may also have `providers`, the set of providers they deploy to (a candidate's
    `provider`); a run whose candidates name another is refused before it starts. Adapters
    without it deploy whatever they are asked to.
    """

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        """Deploy the attempt's endpoint under `attempt.started.endpoint_name` (record
        deploy steps through `record`)."""
        ...

    def find_endpoints(self, run: RunState, attempt: Attempt) -> Sequence[Deployed]:
        """The endpoints that exist under the attempt's endpoint name (as the platform's
        records say: id, account, idle timeout): asked when a deploy was intended and the
        process stopped before its outcome was recorded. Adapters without it cannot
        resume such a deploy: the attempt ends, and nothing is deployed blind."""
        ...

    def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
        """Submit the job to the attempt's endpoint; return (job id, submitted_at)."""
        ...

    def watch(
        self, run: RunState, attempt: Attempt, store: EventStore, stop: Callable[[], bool]
    ) -> PollResult:
        """Watch the attempt's job stream to a verdict; raise `WatchStopped` when `stop()`."""
        ...

    def cancel_job(self, run: RunState, attempt: Attempt) -> bool:
        """Cancel the attempt's job on RunPod; False when it failed."""
        ...

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        """Delete an endpoint the run created; False when it failed."""
        ...


@dataclass
class RunResult:
    """A run's result, as an orchestrator consumes it."""

    ok: bool
    failure: str | None
    detail: str
    attempts: int
    metrics: dict[str, Any] | None
    stream: str

    @classmethod
    def from_event(cls, event: RunConcluded) -> RunResult:
        """The result a `RunConcluded` records."""
        failure = None if event.failure is None else str(event.failure)
        return cls(event.ok, failure, event.detail, event.attempts, event.metrics, event.stream)


#: A cancel request is retried this often while other writers keep appending.
CANCEL_TRIES = 50


def request_cancel(
    store: EventStore | str,
    stream: str,
    *,
    by: str = "",
    reason: str = "",
    clock: Callable[[], float] = time.time,
) -> None:
    """Ask a run to stop (from any process): it wins over everything that follows.

    The `CancelRequested` is stamped with `clock()` (inject the run's clock: a virtual one
    in tests and the simulator) and built by the pure `cancel_drafts`. A URL `store` is
    opened and closed by the call; a store object stays the caller's.
    """
    policy = dataclasses.replace(REBUILD, tries=CANCEL_TRIES)
    with opened_store(store) as opened:
        writer = StreamWriter(opened, stream, TAIL, policy)
        writer.open()
        at = clock()
        drafts = cancel_drafts(None, UserCancel(by=by, reason=reason))
        writer.append(lambda _tail: _stamp(writer, drafts, at))


def _stamp(writer: StreamWriter[Any], drafts: Sequence[Draft], at: float) -> list[EventBase]:
    """The drafted events with the stream's next seqs, fresh ids and the time `at`."""
    return [writer.event(d.cls, at, n, **d.fields) for n, d in enumerate(drafts)]


def check_providers(candidates: Sequence[Candidate], adapters: Any) -> None:
    """Refuse candidates whose provider the adapters do not deploy to (`providers`)."""
    providers = getattr(adapters, "providers", None)
    if providers is None:
        return
    foreign = sorted({c.provider for c in candidates if c.provider not in providers})
    if foreign:
        names = ", ".join(
            f"{c.provider}/{c.gpu_class}" for c in candidates if c.provider in foreign
        )
        raise UnsupportedProvider(
            f"these adapters deploy to {sorted(providers)}, not {foreign}: drop the "
            f"candidates {names}, or pass adapters that deploy there"
        )


def _capacity_policy(knob: CapacityPolicy | bool) -> CapacityPolicy:
    if isinstance(knob, CapacityPolicy):
        return knob
    return DEFAULT_CAPACITY if knob else NO_MEMORY


#: What a Ctrl-C (`KeyboardInterrupt`) does to a run `supervise_run` drives: "cancel" (the
#: CLI's, and the default) cancels it and winds it down; "detach" leaves it to resume.
OnInterrupt = Literal["cancel", "detach"]
ON_INTERRUPT: tuple[str, ...] = ("cancel", "detach")


def supervise_run(
    run_id: str,
    candidates: Sequence[Candidate],
    adapters: RunAdapters,
    *,
    max_retries: int = 2,
    weight_cache: bool = False,
    budget_s: float | None = None,
    phase: str | None = None,
    seed: int | None = None,
    store: EventStore | str | None = None,
    stream: str | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    log: Callable[[str], Any] | None = None,
    single_attempt: int | None = None,
    on_last_gpu: bool = False,
    capacity_memory: CapacityPolicy | bool = True,
    on_attempt_end: AttemptHook | None = None,
    on_interrupt: OnInterrupt = "cancel",
    detach: bool = False,
    spec: str | None = None,
    retry_lost_unverified: bool = False,
) -> RunResult:
    """Run one training job to a result: the GPU walk, retries, cleanup; every step an event.

    Calling it again on a stream that holds an unfinished run resumes that run (its
    recorded candidates, budget, run id and seed stand: a fleet replica resuming a run
    handed to it names its attempts' streams as the run recorded them); on a finished run
    it returns the result.
    The stream defaults to `run-<run_id>`; each attempt's job stream is
    `job-<run_id>-a<n>` (`job-<run_id>-s<seed>-a<n>` with a seed). An orchestrator's worker
    names the run by ids its retries keep (`flashfsm.naming.stable_run_id`), so a retried
    worker resumes the run rather than starting a second one.

    `store` is a store object (the caller's, left open), a URL (opened, and closed on
    return), or by default the durable default store (`default_store_url()`:
    `$FLASHFSM_STORE`, else SQLite in the user's data directory), opened and closed by the
    call, so calling again after a crash resumes; `store="memory://"` asks for a fresh
    in-memory store (nothing to resume).

    `single_attempt=n` records a run of exactly attempt `n` on the first candidate, with
    the caller's `on_last_gpu`: no walk, no retry (what `submit_run` does for a caller
    that walks itself).

    A candidate's `provider` is where its attempt deploys; adapters with `providers` refuse
    others before anything is recorded (`UnsupportedProvider`). The weight cache goes only
    to attempts on a provider that has it (RunPod).

    `capacity_memory` (on by default; False or a `CapacityPolicy` with `enabled=False`
    turns it off) ranks a new walk's candidates from the store's recent job logs, by
    expected time to training (`flashfsm.fsm.capacity`), and records the ranking and its
    evidence (`CandidatesRanked`) before the first attempt. `on_attempt_end(run, attempt)`
    is called after each attempt's end is recorded by this call (an exception from it
    stops the call; calling again resumes the run).

    `retry_lost_unverified` lets the walk retry an attempt whose job ended
    `lost_unverified` (RunPod forgot it while nobody watched, and no evidence says whether it
    finished: a retry may train it a second time); off by default. It is recorded, so a
    resumed run keeps it.

    `detach=True` hands the run to a fleet (`flashfsm.fleet`): its `RunStarted` (and
    ranking) is recorded as a hand-off and the call returns at once with a pending result
    (`ok=False`, `failure=None`, no attempt); a replica alive on the same store drives it.
    The store must keep leases (SQLite, PostgreSQL). `spec` (a `RunSpec` as JSON) is
    recorded in the `RunStarted`, for a replica to deploy the run from
    (`flashfsm.submit.supervise_spec(..., detach=True)` records it).

    A cancel (`request_cancel`, or with `on_interrupt="cancel"`, the default, a Ctrl-C: a
    `KeyboardInterrupt` anywhere in the call) closes everything the run opened: its job is
    cancelled on the platform and watched on to the platform's answer (CANCELLED concludes
    its stream by `platform_termination`; a platform that cannot be reached, by
    `poll_errors` once the policy's error budget is spent), its endpoints are deleted and
    the run concludes `cancelled`. After a Ctrl-C the `KeyboardInterrupt` is raised again
    once that is done (a second one leaves at once; calling again on the stream finishes
    the cancel). With `on_interrupt="detach"` a `KeyboardInterrupt` records nothing,
    cancels nothing and deletes nothing: it is raised again at once, the job keeps running
    (and billing) and calling again on the stream resumes the run. Any other value is a
    `ValueError` before anything is opened or recorded. SIGTERM, under Python's default
    handler, ends the process at once like SIGKILL: nothing is recorded, and calling again
    resumes (docs/guarantees.md has the table).
    """
    if on_interrupt not in ON_INTERRUPT:
        raise ValueError(f"on_interrupt must be one of {ON_INTERRUPT}, got {on_interrupt!r}")
    cancel = on_interrupt == "cancel"
    with opened_store(store) as opened:
        name = stream or run_stream(run_id)
        target: EventStore = opened
        if detach:
            if capabilities(opened).leases is None:
                raise ValueError(f"{opened!r} cannot hand a run to a fleet: it keeps no leases")
            target = FencedStore(opened, lambda _stream: HANDOFF)
        writer = StreamWriter(target, name, RUN, FOLD_CANCELS)
        interrupt_writer = StreamWriter(target, name, RUN, FOLD_CANCELS)  # (opened on a Ctrl-C)
        writer.open()
        say = log or (lambda line: logger.info("%s", line))
        ended_before = {a.started.attempt for a in writer.state.attempts if a.ended is not None}
        run = _RunLoop(
            run_id, seed, adapters, opened, clock, sleep, say, on_attempt_end, ended_before
        )
        if writer.state.started is None and not writer.state.done:
            check_providers(candidates, adapters)
            at = clock()
            started = Draft(
                RunStarted,
                {
                    "run_id": run_id,
                    "candidates": tuple(candidates),
                    "max_retries": max_retries,
                    "weight_cache": weight_cache,
                    "budget_s": budget_s,
                    "phase": phase,
                    "seed": seed,
                    "single_attempt": single_attempt,
                    "on_last_gpu": on_last_gpu,
                    "spec": spec,
                    "retry_lost_unverified": retry_lost_unverified,
                },
            )
            drafts = [started]
            policy = _capacity_policy(capacity_memory)
            if policy.enabled and single_attempt is None and len(candidates) > 0:
                ranked = ranking_for(opened, tuple(candidates), at, policy, exclude=(name,))
                drafts.append(Draft(CandidatesRanked, ranked))
            with run.cancelled_on_interrupt(interrupt_writer, cancel=not detach and cancel):
                writer.append(lambda _state: _stamp(writer, drafts, at))
        recorded = writer.state.started
        if recorded is not None:  # a resumed run names its attempts as it was recorded to
            run.run_id, run.seed = recorded.run_id, recorded.seed
        if detach:
            if writer.state.done:
                return RunResult.from_event(writer.state.result)
            opened.unmark(name)  # (a run a replica marked failed to start is claimed again)
            return RunResult(False, None, "handed to the fleet", 0, None, name)
        with run.cancelled_on_interrupt(interrupt_writer, cancel=cancel):
            return run.drive(writer)


#: Who a Ctrl-C's `CancelRequested` names, and its reason.
INTERRUPTED_BY, INTERRUPTED_REASON = "Ctrl-C", "(Ctrl-C)"


def _never() -> bool:
    """The stop of a watch that must reach its verdict (a cancelled job's, to its end)."""
    return False


@dataclass
class _RunLoop:
    """`supervise_run`'s loop: ask `decide_run`, perform the command, record what happened."""

    run_id: str
    seed: int | None
    adapters: RunAdapters
    store: EventStore
    clock: Callable[[], float]
    sleep: Callable[[float], Any]
    say: Callable[[str], Any]
    on_attempt_end: AttemptHook | None
    ended_before: set[int]

    def drive(self, writer: StreamWriter[RunState]) -> RunResult:
        """Drive the run in `writer`'s stream to its result."""
        run_id, seed, adapters, say, clock = (
            self.run_id,
            self.seed,
            self.adapters,
            self.say,
            self.clock,
        )

        def record(cls: type[EventBase], **fields: Any) -> Any:
            return writer.record(cls, clock(), **fields)

        def record_outcome(outcome: AttemptOutcome) -> None:
            at = clock()
            writer.append(lambda state: _stamp(writer, apply_outcome(state, outcome), at))

        def record_drafts(drafts: Sequence[Draft]) -> None:
            at = clock()
            writer.append(lambda _state: _stamp(writer, drafts, at))

        def cancelled() -> bool:  # asked before each status fetch of a watch
            writer.catch_up()
            return writer.state.cancel_requested

        while True:
            writer.catch_up()
            if self.on_attempt_end is not None:
                for a in writer.state.attempts:
                    if a.ended is not None and a.started.attempt not in self.ended_before:
                        self.ended_before.add(a.started.attempt)
                        self.on_attempt_end(writer.state, a)
            command = decide_run(writer.state, clock())
            match command:
                case RunFinished(result=result):
                    return RunResult.from_event(result)
                case StartAttempt(plan=plan):
                    endpoint = endpoint_name(run_id, plan.gpu_class, seed or 0, plan.attempt)
                    where = "" if plan.provider == "runpod" else f"{plan.provider}/"
                    say(
                        f"run {run_id}: attempt {plan.attempt} on {where}{plan.gpu_class}"
                        f"{' (last GPU)' if plan.on_last_gpu else ''}"
                        f"{' without the weight cache' if plan.cache_dropped else ''}"
                        f"{' (a redo: the last submit was lost)' if plan.redo else ''}"
                    )
                    record(
                        AttemptStarted,
                        attempt=plan.attempt,
                        candidate=plan.candidate,
                        provider=plan.provider,
                        gpu_class=plan.gpu_class,
                        on_last_gpu=plan.on_last_gpu,
                        cache_dropped=plan.cache_dropped,
                        bonus=plan.bonus,
                        weight_cache=plan.weight_cache,
                        redo=plan.redo,
                        endpoint_name=endpoint,
                        job_stream=attempt_stream(run_id, plan.attempt, seed),
                    )
                case LookUpEndpoint(attempt=attempt):
                    _look_up(writer.state, record, adapters, attempt, say)
                case AdoptEndpoint(attempt=attempt, found=found):
                    record_drafts(adopt_drafts(attempt, found))
                    name = attempt.started.endpoint_name
                    say(f"run {run_id}: adopted {found.endpoint_id} ({name})")
                case Deploy(attempt=attempt):
                    record(
                        DeployIntended,
                        attempt=attempt.started.attempt,
                        endpoint_name=attempt.started.endpoint_name,
                    )
                    _deploy(writer.state, record, record_outcome, adapters, attempt)
                case Submit(attempt=attempt):
                    record(
                        SubmitIntended,
                        attempt=attempt.started.attempt,
                        endpoint_id=attempt.endpoint_id,
                    )
                    _submit(writer.state, record, record_outcome, adapters, attempt, say)
                case WatchJob(attempt=attempt) if writer.state.cancel_requested:
                    # (a cancelled run's job, cancelled on the platform: its watch must reach
                    # the platform's answer, so the cancel does not stop it)
                    say(
                        f"run {run_id}: job {attempt.job_id} cancelled; "
                        "watching it to the platform's answer"
                    )
                    _watch(writer, record_outcome, adapters, attempt, self.store, _never, say)
                case WatchJob(attempt=attempt):
                    _watch(writer, record_outcome, adapters, attempt, self.store, cancelled, say)
                case EndAttempt(attempt=number, failure=failure, detail=detail, rule=rule):
                    record(
                        AttemptEnded,
                        attempt=number,
                        ok=False,
                        failure=failure,
                        rule=rule,
                        detail=detail,
                    )
                case CancelJob(attempt=attempt):
                    ok = _quietly(adapters.cancel_job, writer.state, attempt)
                    number, job_id = attempt.started.attempt, attempt.job_id
                    record(JobCancelled, attempt=number, job_id=job_id, ok=ok)
                case DeleteEndpoint(endpoint_id=endpoint_id, reason=reason):
                    ok = _quietly(adapters.delete_endpoint, writer.state, endpoint_id)
                    record(EndpointDeleted, endpoint_id=endpoint_id, reason=reason, ok=ok)
                case WaitRun(seconds=seconds):
                    self.sleep(seconds)
                case ConcludeRun(ok=ok, failure=failure, detail=detail, metrics=metrics):
                    record(
                        RunConcluded,
                        ok=ok,
                        failure=failure,
                        attempts=len(writer.state.attempts),
                        detail=detail,
                        metrics=metrics,
                    )
                    say(f"run {run_id}: {'succeeded' if ok else failure}")

    @contextlib.contextmanager
    def cancelled_on_interrupt(
        self, writer: StreamWriter[RunState], cancel: bool = True
    ) -> Iterator[None]:
        """A Ctrl-C (`KeyboardInterrupt`) in the block cancels the run when `cancel`
        (`interrupted`, in `writer`'s stream), then goes on (it is raised again). Without
        `cancel` (`on_interrupt="detach"`, or a run handed to a fleet: the fleet's) it
        records, cancels and deletes nothing: the run is left as it is, to resume."""
        try:
            yield
        except KeyboardInterrupt:
            if cancel:
                self.interrupted(writer)
            else:
                self.say(
                    f"run {self.run_id}: interrupted; nothing cancelled (calling again resumes)"
                )
            raise

    def interrupted(self, writer: StreamWriter[RunState]) -> None:
        """After a Ctrl-C (a `KeyboardInterrupt` anywhere in `drive`): cancel the run and
        drive it to its `cancelled` result — its job cancelled on the platform and watched
        to the platform's answer, its endpoints deleted.

        `writer` is a fresh one: the interrupted writer may be behind its stream (an append
        the store took, cut short before it was folded), so the stream is replayed.
        """
        writer.open()
        if writer.state.done or writer.state.started is None:
            return
        self.say(f"run {self.run_id}: interrupted (Ctrl-C): cancelling it")
        at = self.clock()
        cancel = UserCancel(by=INTERRUPTED_BY, reason=INTERRUPTED_REASON)
        writer.append(lambda state: _stamp(writer, apply_outcome(state, cancel), at))
        self.drive(writer)


def _error(exc: BaseException) -> dict[str, str]:
    """A failed step's `error_class` and `message` (masked and capped by the event)."""
    error_class = getattr(exc, "error_class", None)
    return {
        "error_class": error_class if isinstance(error_class, str) else type(exc).__name__,
        "message": str(exc),
    }


def _quietly(fn: Callable[..., bool], *args: Any) -> bool:
    try:
        return bool(fn(*args))
    except Exception as exc:  # a failed cleanup is recorded (ok=False), never fatal
        logger.warning("cleanup %s failed: %s", getattr(fn, "__name__", fn), redact(str(exc)))
        return False


def _look_up(
    run: RunState,
    record: Recorder,
    adapters: RunAdapters,
    attempt: Attempt,
    say: Callable[[str], Any],
) -> None:
    """Ask the platform what an interrupted deploy made, and record it (or why it cannot)."""
    name = attempt.started.endpoint_name
    find = getattr(adapters, "find_endpoints", None)
    fields: dict[str, Any] = {"attempt": attempt.started.attempt, "endpoint_name": name}
    if find is None:
        fields.update(
            error_class=LOOKUP_UNSUPPORTED,
            message=f"{type(adapters).__name__} has no find_endpoints",
        )
    else:
        try:
            found = find(run, attempt)
        except Exception as exc:
            fields.update(_error(exc))
        else:
            fields["found"] = tuple(
                FoundEndpoint(
                    endpoint_id=d.endpoint_id, account=d.account, idle_timeout_s=d.idle_timeout_s
                )
                for d in found
            )
    record(EndpointsLookedUp, **fields)
    ids = [f.endpoint_id for f in fields.get("found", ())]
    say(f"deploy of {name} was interrupted: the platform has {ids or 'no such endpoint'}")


def _deploy(
    run: RunState,
    record: Recorder,
    record_outcome: Callable[[AttemptOutcome], None],
    adapters: RunAdapters,
    attempt: Attempt,
) -> None:
    number = attempt.started.attempt
    try:
        deployed = adapters.deploy(run, attempt, record)
    except Exception as exc:  # any deploy error is a poll_error that consumes a retry
        record_outcome(DeployFailure(number, **_error(exc)))
        return
    record(
        EndpointDeployed,
        attempt=number,
        endpoint_id=deployed.endpoint_id,
        endpoint_name=deployed.endpoint_name,
        account=deployed.account,
        volumes=deployed.volumes,
        disk_gb=deployed.disk_gb,
        idle_timeout_s=deployed.idle_timeout_s,  # None: written as v1
    )


def _submit(
    run: RunState,
    record: Recorder,
    record_outcome: Callable[[AttemptOutcome], None],
    adapters: RunAdapters,
    attempt: Attempt,
    say: Callable[[str], Any],
) -> None:
    started = attempt.started
    try:
        job_id, submitted_at = adapters.submit(run, attempt)
    except Exception as exc:
        record_outcome(SubmitFailure(started.attempt, **_error(exc)))
        say(f"submit to {started.endpoint_name} failed ({type(exc).__name__})")
        return
    record(
        JobQueued,
        attempt=started.attempt,
        endpoint_id=attempt.endpoint_id,
        job_id=job_id,
        job_stream=started.job_stream,
        submitted_at=submitted_at,
    )
    say(
        f"submitted job {job_id} to {started.endpoint_name} ({attempt.endpoint_id}): "
        f"attempt {started.attempt}, gpu {started.gpu_class}"
    )


def _watch(
    writer: StreamWriter[RunState],
    record_outcome: Callable[[AttemptOutcome], None],
    adapters: RunAdapters,
    attempt: Attempt,
    store: EventStore,
    stop: Callable[[], bool],
    say: Callable[[str], Any],
) -> None:
    try:
        result = adapters.watch(writer.state, attempt, store, stop)
    except WatchStopped:
        writer.catch_up()
        return  # the cancel is in the state now; decide_run takes it from here
    record_outcome(
        JobVerdict(
            attempt.started.attempt,
            ok=result.ok,
            failure=result.failure,
            rule=result.rule,
            detail=result.detail or "",
            metrics=result.metrics,
        )
    )
    say(
        f"attempt {attempt.started.attempt} on {attempt.started.gpu_class}: "
        f"{'ok' if result.ok else f'{result.failure} ({result.rule})'}"
    )


Deployer = Callable[[RunState, Attempt, Recorder], Deployed]
JobInput = Callable[[RunState, Attempt], dict[str, Any]]
ReaderFactory = Callable[[RunState, Attempt], tuple[Any, Any]]


@dataclass
class RunpodRunAdapters:
    """`RunAdapters` over RunPod's REST API, with a pluggable deployer.

    `deployer` makes the attempt's endpoint (runpod-flash in production, see
    `flashfsm.submit.flash_run_adapters`; the simulator in tests and the demo); `job_input`
    builds the job's input; `readers` gives the attempt's Hub heartbeat and failure
    readers. Watching is `poll_job` on the attempt's job stream with
    `stall_kwargs(on_last_gpu)`, so a restarted control plane reattaches by replay.

    `client` talks to RunPod for every attempt; with a key pool, `client_for(account)`
    gives the client of the account an attempt's endpoint was deployed on instead (and
    `close()` closes what it made). `on_handle(handle_dict)` is called when a job's watch
    starts, with the handle an orchestrator would persist to reattach.

    The watched endpoint is always the one this run deployed (the attempt's endpoint comes
    only from its own `EndpointDeployed` record), so the handle is `trusted_output` and a
    Flash envelope's pickled result is unpickled; `allow_pickle=False` keeps it JSON-only.
    The exception a deploy or submit raised is kept by attempt number in `errors`.
    """

    client: Any
    deployer: Deployer
    job_input: JobInput
    readers: ReaderFactory | None = None
    budget_s: float | None = None
    interval_s: float = 10.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Any] = time.sleep
    log: Callable[[str], Any] | None = None
    allow_pickle: bool | None = None
    client_for: Callable[[int], Any] | None = None
    on_handle: Callable[[dict[str, Any]], Any] | None = None
    errors: dict[int, BaseException] = field(default_factory=dict)
    #: Who watches the attempts' jobs, as their `WatchStarted` names it (None: host:pid).
    watcher: str | None = None
    #: The providers these adapters deploy to: RunPod only.
    providers: frozenset[str] = frozenset({"runpod"})
    #: The accounts (of the key pool `client_for` serves) an endpoint may be on: where an
    #: interrupted deploy's endpoint is looked for.
    accounts: tuple[int, ...] = (0,)
    #: Where an attempt's worker writes its heartbeat and artifacts (recorded with its job,
    #: so a verdict can say where the artifacts of a result RunPod forgot are).
    hub: Callable[[RunState, Attempt], HubLocation | None] | None = None

    def _client(self, account: int) -> Any:
        return self.client if self.client_for is None else self.client_for(account)

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        """The attempt's endpoint, from the deployer."""
        try:
            return self.deployer(run, attempt, record)
        except Exception as exc:
            self.errors[attempt.started.attempt] = exc
            raise

    def find_endpoints(self, run: RunState, attempt: Attempt) -> list[Deployed]:
        """The endpoints named like the attempt's (runpod-flash's `live-` form too) on each
        of `accounts`, with the idle timeout each one's record says."""
        name = attempt.started.endpoint_name
        found = []
        for account in self.accounts:
            for record in self._client(account).list_endpoints():
                if not isinstance(record, dict) or bare_name(str(record.get("name"))) != name:
                    continue
                endpoint_id, idle = record.get("id"), record.get("idleTimeout")
                if isinstance(endpoint_id, str) and endpoint_id:
                    idle_s = idle if isinstance(idle, int) and not isinstance(idle, bool) else None
                    found.append(Deployed(endpoint_id, name, account, idle_timeout_s=idle_s))
        return found

    def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
        """Queue the job with the run's budget as its TTL and execution timeout."""
        assert attempt.endpoint_id is not None
        budget = policy_for_budget(self.budget_s) if self.budget_s else {}
        submitted_at = self.clock()
        try:
            job_input = self.job_input(run, attempt)
            client = self._client(attempt.account)
            return client.run(attempt.endpoint_id, job_input, **budget), submitted_at
        except Exception as exc:
            self.errors[attempt.started.attempt] = exc
            raise

    def handle(self, attempt: Attempt, run: RunState | None = None) -> JobHandle:
        """The handle of the attempt's job (trusted: this run deployed its endpoint)."""
        assert attempt.endpoint_id is not None and attempt.job_id is not None
        started = attempt.started
        return JobHandle(
            attempt.endpoint_id,
            started.endpoint_name,
            attempt.job_id,
            on_last_gpu=started.on_last_gpu,
            submitted_at=attempt.submitted_at,
            gpu_class=started.gpu_class,
            attempt=started.attempt,
            trusted_output=True,  # the endpoint of the run's own EndpointDeployed
            hub=None if self.hub is None or run is None else self.hub(run, attempt),
        )

    def watch(
        self, run: RunState, attempt: Attempt, store: EventStore, stop: Callable[[], bool]
    ) -> PollResult:
        """`poll_job` on the attempt's job stream, tuned for the attempt."""
        handle = self.handle(attempt, run)
        if self.on_handle is not None:
            self.on_handle(handle.to_dict())
        heartbeat, failure_detail = self.readers(run, attempt) if self.readers else (None, None)
        return poll_job(
            handle,
            log=self.log,
            interval_s=self.interval_s,
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
            client=self._client(attempt.account),
            clock=self.clock,
            sleep=self.sleep,
            store=store,
            stream=attempt.job_stream,
            stop=stop,
            allow_pickle=self.allow_pickle,
            watcher=self.watcher,
            **stall_kwargs(attempt.started.on_last_gpu),
        )

    def cancel_job(self, run: RunState, attempt: Attempt) -> bool:
        """Cancel the attempt's job on RunPod."""
        assert attempt.endpoint_id is not None and attempt.job_id is not None
        self._client(attempt.account).cancel(attempt.endpoint_id, attempt.job_id)
        return True

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        """Delete an endpoint the run created (False from RunPod: already gone, fine too)."""
        account = next((a.account for a in run.attempts if a.endpoint_id == endpoint_id), 0)
        self._client(account).delete_endpoint(endpoint_id)
        return True

    def close(self) -> None:
        """Close the clients `client_for` made (the given `client` is the caller's)."""
        close = getattr(self.client_for, "close", None)
        if close is not None:
            close()
