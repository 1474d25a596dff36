"""`supervise_run`: drive the run machine with real adapters until the run has a result.

Theory of operation. Like the job shell, a loop asks the pure core (`decide_run`) for a
command, performs the one piece of I/O it names through `RunAdapters`, records the result
as an event in the run's stream, and folds it in with `evolve_run`. Each attempt's job is
watched by `poll_job` in its own stream, linked from the run's `JobQueued` event. A control
plane that dies mid-run is restarted by calling `supervise_run` again on the same stream: the
run is replayed and its current attempt's watch is reattached (a replay too).

`RunAdapters` is the seam: `FlashRunAdapters` (in `flashfsm.submit`) deploys with
runpod-flash and talks to RunPod; tests pass scripted ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flashfsm.errors import JobOwnedElsewhere, WatchStopped
from flashfsm.events.errors import ConcurrencyError
from flashfsm.events.models import (
    DETAIL_CAP,
    MESSAGE_CAP,
    AttemptEnded,
    AttemptStarted,
    CancelRequested,
    Candidate,
    DeployFailed,
    EndpointDeleted,
    EndpointDeployed,
    EventBase,
    JobCancelled,
    JobQueued,
    RunConcluded,
    RunStarted,
    SubmitFailed,
    cap_text,
)
from flashfsm.events.store import EventStore
from flashfsm.fsm.run import (
    Attempt,
    CancelJob,
    ConcludeRun,
    DeleteEndpoint,
    Deploy,
    EndAttempt,
    RunFinished,
    RunState,
    StartAttempt,
    Submit,
    WaitRun,
    WatchJob,
    decide_run,
    evolve_run,
    replay_run,
)
from flashfsm.ids import new_id
from flashfsm.naming import endpoint_name
from flashfsm.redact import redact
from flashfsm.shell import PollResult, resolve_store

logger = logging.getLogger("flashfsm.runs")


@dataclass(frozen=True)
class Deployed:
    """What a deploy returns."""

    endpoint_id: str
    endpoint_name: str
    account: int = 0
    volumes: tuple[str, ...] = ()


class RunAdapters(Protocol):
    """The I/O a run needs. Each method may raise; the shell records what happened."""

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        """Deploy the attempt's endpoint (record deploy steps through `record`)."""
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


Recorder = Callable[..., Any]


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
        return cls(
            event.ok, event.failure, event.detail, event.attempts, event.metrics, event.stream
        )


class RunWriter:
    """Appends events to a run's stream and folds them into its state."""

    def __init__(self, store: EventStore, stream: str, clock: Callable[[], float]):
        self.store, self.stream, self.clock = store, stream, clock
        self.state = replay_run(store.read(stream))

    def record(self, cls: type[EventBase], **fields: Any) -> Any:
        """Build one event now, append it (fenced by seq), fold it in, return it."""
        at = self.clock()
        event = cls(stream=self.stream, seq=self.state.next_seq, id=new_id(at), at=at, **fields)
        try:
            self.store.append(self.stream, [event], event.seq)
        except ConcurrencyError:
            newer = self.store.read(self.stream, self.state.next_seq - 1)
            cancels = [e for e in newer if isinstance(e, CancelRequested)]
            if cancels and len(cancels) == len(newer):
                for e in newer:  # a cancel from another process: take it in and go on
                    evolve_run(self.state, e)
                return self.record(cls, **fields)
            raise JobOwnedElsewhere(self.stream, None) from None
        evolve_run(self.state, event)
        return event

    def refresh(self) -> None:
        """Fold in events other processes appended (a user's cancel)."""
        for event in self.store.read(self.stream, self.state.next_seq - 1):
            evolve_run(self.state, event)


def request_cancel(store: EventStore | str, stream: str, *, by: str = "", reason: str = "") -> None:
    """Ask a run to stop (from any process): it wins over everything that follows."""
    opened = resolve_store(store)
    for _ in range(50):
        events = opened.read(stream)
        at = time.time()
        event = CancelRequested(
            stream=stream, seq=len(events), id=new_id(at), at=at, by=by, reason=reason
        )
        try:
            opened.append(stream, [event], len(events))
            return
        except ConcurrencyError:
            continue
    raise ConcurrencyError(stream, len(events), len(opened.read(stream)))


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
) -> RunResult:
    """Run one training job to a result: the GPU walk, retries, cleanup; every step an event.

    Calling it again on a stream that holds an unfinished run resumes that run (its
    recorded candidates and budget stand); on a finished run it returns the result.
    """
    opened = resolve_store(store)
    writer = RunWriter(opened, stream or f"run-{run_id}", clock)
    say = log or (lambda line: logger.info("%s", line))
    if writer.state.started is None and not writer.state.done:
        writer.record(
            RunStarted,
            run_id=run_id,
            candidates=tuple(candidates),
            max_retries=max_retries,
            weight_cache=weight_cache,
            budget_s=budget_s,
            phase=phase,
            seed=seed,
        )
    stop = _cancel_probe(writer)
    while True:
        writer.refresh()
        command = decide_run(writer.state, clock())
        match command:
            case RunFinished(result=result):
                return RunResult.from_event(result)
            case StartAttempt(plan=plan):
                name = endpoint_name(run_id, plan.gpu_class, seed or 0, plan.attempt)
                say(
                    f"run {run_id}: attempt {plan.attempt} on {plan.gpu_class}"
                    f"{' (last GPU)' if plan.on_last_gpu else ''}"
                    f"{' without the weight cache' if plan.cache_dropped else ''}"
                )
                writer.record(
                    AttemptStarted,
                    attempt=plan.attempt,
                    candidate=plan.candidate,
                    provider=plan.provider,
                    gpu_class=plan.gpu_class,
                    on_last_gpu=plan.on_last_gpu,
                    cache_dropped=plan.cache_dropped,
                    bonus=plan.bonus,
                    endpoint_name=name,
                    job_stream=f"job-{run_id}-a{plan.attempt}",
                )
            case Deploy(attempt=attempt):
                _deploy(writer, adapters, attempt)
            case Submit(attempt=attempt):
                _submit(writer, adapters, attempt)
            case WatchJob(attempt=attempt):
                _watch(writer, adapters, attempt, opened, stop, say)
            case EndAttempt(attempt=number, failure=failure, detail=detail):
                writer.record(
                    AttemptEnded, attempt=number, ok=False, failure=failure, detail=_cap(detail)
                )
            case CancelJob(attempt=attempt):
                ok = _quietly(adapters.cancel_job, writer.state, attempt)
                writer.record(
                    JobCancelled, attempt=attempt.started.attempt, job_id=attempt.job_id, ok=ok
                )
            case DeleteEndpoint(endpoint_id=endpoint_id, reason=reason):
                ok = _quietly(adapters.delete_endpoint, writer.state, endpoint_id)
                writer.record(EndpointDeleted, endpoint_id=endpoint_id, reason=reason, ok=ok)
            case WaitRun(seconds=seconds):
                sleep(seconds)
            case ConcludeRun(ok=ok, failure=failure, detail=detail, metrics=metrics):
                writer.record(
                    RunConcluded,
                    ok=ok,
                    failure=failure,
                    attempts=len(writer.state.attempts),
                    detail=_cap(detail),
                    metrics=metrics,
                )
                say(f"run {run_id}: {'succeeded' if ok else failure}")


def _cap(text: str | None) -> str:
    return cap_text(redact(text), DETAIL_CAP) or ""


def _error(exc: BaseException) -> dict[str, str]:
    return {
        "error_class": type(exc).__name__,
        "message": cap_text(redact(str(exc)), MESSAGE_CAP) or "",
    }


def _quietly(fn: Callable[..., bool], *args: Any) -> bool:
    try:
        return bool(fn(*args))
    except Exception as exc:  # a failed cleanup is recorded (ok=False), never fatal
        logger.warning("cleanup %s failed: %s", getattr(fn, "__name__", fn), redact(str(exc)))
        return False


def _deploy(writer: RunWriter, adapters: RunAdapters, attempt: Attempt) -> None:
    number = attempt.started.attempt
    try:
        deployed = adapters.deploy(writer.state, attempt, writer.record)
    except Exception as exc:  # any deploy error is a poll_error that consumes a retry
        writer.record(DeployFailed, attempt=number, **_error(exc))
        return
    writer.record(
        EndpointDeployed,
        attempt=number,
        endpoint_id=deployed.endpoint_id,
        endpoint_name=deployed.endpoint_name,
        account=deployed.account,
        volumes=deployed.volumes,
    )


def _submit(writer: RunWriter, adapters: RunAdapters, attempt: Attempt) -> None:
    number = attempt.started.attempt
    try:
        job_id, submitted_at = adapters.submit(writer.state, attempt)
    except Exception as exc:
        writer.record(SubmitFailed, attempt=number, **_error(exc))
        return
    writer.record(
        JobQueued,
        attempt=number,
        endpoint_id=attempt.endpoint_id,
        job_id=job_id,
        job_stream=attempt.started.job_stream,
        submitted_at=submitted_at,
    )


def _watch(
    writer: RunWriter,
    adapters: RunAdapters,
    attempt: Attempt,
    store: EventStore,
    stop: Callable[[], bool],
    say: Callable[[str], Any],
) -> None:
    try:
        result = adapters.watch(writer.state, attempt, store, stop)
    except WatchStopped:
        writer.refresh()
        return  # the cancel is in the state now; decide_run takes it from here
    writer.record(
        AttemptEnded,
        attempt=attempt.started.attempt,
        ok=result.ok,
        failure=result.failure,
        rule=result.rule,
        detail=_cap(result.detail),
        metrics=result.metrics,
    )
    say(
        f"attempt {attempt.started.attempt} on {attempt.started.gpu_class}: "
        f"{'ok' if result.ok else f'{result.failure} ({result.rule})'}"
    )


def _cancel_probe(writer: RunWriter) -> Callable[[], bool]:
    """A cheap check, made before each status fetch, for a cancel from another process."""

    def cancelled() -> bool:
        writer.refresh()
        return writer.state.cancel_requested

    return cancelled


Deployer = Callable[[RunState, Attempt, Recorder], Deployed]
JobInput = Callable[[RunState, Attempt], dict[str, Any]]
ReaderFactory = Callable[[RunState, Attempt], tuple[Any, Any]]


@dataclass
class RunpodRunAdapters:
    """`RunAdapters` over RunPod's REST API, with a pluggable deployer.

    `deployer` makes the attempt's endpoint (runpod-flash in production, see
    `flashfsm.adapters.flash_deploy`; the simulator in tests and the demo); `job_input`
    builds the job's input; `readers` gives the attempt's Hub heartbeat and failure
    readers. Watching is `poll_job` on the attempt's job stream with
    `stall_kwargs(on_last_gpu)`, so a restarted control plane reattaches by replay.

    The watched endpoint is always the one this run deployed (the attempt's endpoint comes
    only from its own `EndpointDeployed` record), so the handle is `trusted_output` and a
    Flash envelope's pickled result is unpickled; `allow_pickle=False` keeps it JSON-only.
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

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        return self.deployer(run, attempt, record)

    def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
        from flashfsm.adapters.runpod import policy_for_budget

        budget = policy_for_budget(self.budget_s) if self.budget_s else {}
        assert attempt.endpoint_id is not None
        job_id = self.client.run(attempt.endpoint_id, self.job_input(run, attempt), **budget)
        return job_id, self.clock()

    def watch(
        self, run: RunState, attempt: Attempt, store: EventStore, stop: Callable[[], bool]
    ) -> PollResult:
        from flashfsm.events.policy import stall_kwargs
        from flashfsm.shell import JobHandle, poll_job

        assert attempt.endpoint_id is not None and attempt.job_id is not None
        started = attempt.started
        heartbeat, failure_detail = self.readers(run, attempt) if self.readers else (None, None)
        handle = JobHandle(
            attempt.endpoint_id,
            started.endpoint_name,
            attempt.job_id,
            on_last_gpu=started.on_last_gpu,
            submitted_at=attempt.submitted_at,
            gpu_class=started.gpu_class,
            attempt=started.attempt,
            trusted_output=True,  # the endpoint of the run's own EndpointDeployed
        )
        return poll_job(
            handle,
            log=self.log,
            interval_s=self.interval_s,
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
            client=self.client,
            clock=self.clock,
            sleep=self.sleep,
            store=store,
            stream=attempt.job_stream,
            stop=stop,
            allow_pickle=self.allow_pickle,
            **stall_kwargs(started.on_last_gpu),
        )

    def cancel_job(self, run: RunState, attempt: Attempt) -> bool:
        assert attempt.endpoint_id is not None and attempt.job_id is not None
        self.client.cancel(attempt.endpoint_id, attempt.job_id)
        return True

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        self.client.delete_endpoint(endpoint_id)  # False (already gone) is fine too
        return True
