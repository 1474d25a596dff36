"""The run's loop, sans I/O (`RunLoop.steps`), and its two ways of being driven.

Like the job watch, the loop asks the pure core (`decide_run`) for a command, yields the
one piece of I/O it names (a request: `AdapterCall`, `WatchAttempt`, `AttemptEndHook`, a
store request, the clock, a wait), records what happened as an event in the run's stream,
and folds it in. `RunLoop.drive` performs the requests in its thread (`supervise_run`),
`AsyncIO.drive` awaits them on an event loop (`asupervise_run`), so the two record the same
events in the same order; the loop ends with the run's `RunResult`.

It was the sans-IO part of `flashfsm.runs` (which holds the two drivers' entry points and
re-exports `RunResult`); this module imports nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from flashfsm.errors import WatchStopped
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    DeployIntended,
    EndpointDeleted,
    EndpointDeployed,
    EndpointsLookedUp,
    EventBase,
    FoundEndpoint,
    JobCancelled,
    JobQueued,
    RunConcluded,
    SubmitIntended,
)
from flashfsm.events.store import EventStore
from flashfsm.fsm.run import (
    LOOKUP_UNSUPPORTED,
    AdoptEndpoint,
    Attempt,
    AttemptOutcome,
    AttemptPlan,
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
    decide_run,
)
from flashfsm.naming import attempt_stream, endpoint_name
from flashfsm.reads import CLOCK, Clock, Sleep
from flashfsm.redact import redact
from flashfsm.results import Portable
from flashfsm.run_adapters import RunAdapters
from flashfsm.shell import PollResult
from flashfsm.writer import Done, StoreRequest, StreamWriter, advance, perform, run_steps

#: (The runs' logger: a run's lines name it, wherever its code lives.)
logger = logging.getLogger("flashfsm.runs")

AttemptHook = Callable[[RunState, Attempt], Any]


@dataclass
class RunResult(Portable):
    """A run's result, as an orchestrator consumes it (`to_dict`/`from_dict`: plain JSON
    for an orchestrator to store)."""

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


def stamp(writer: StreamWriter[Any], drafts: Sequence[Draft], at: float) -> list[EventBase]:
    """The drafted events with the stream's next seqs, fresh ids and the time `at`."""
    return [writer.event(d.cls, at, n, **d.fields) for n, d in enumerate(drafts)]


#: Who a Ctrl-C's `CancelRequested` names, and its reason.
INTERRUPTED_BY, INTERRUPTED_REASON = "Ctrl-C", "(Ctrl-C)"


# --- the run loop, sans I/O -----------------------------------------------------------------


@dataclass(slots=True)
class AdapterCall:
    """Call the adapters' method `name` with `args` (a paid call, a lookup, a cleanup):
    its answer, or the exception it raised thrown back into the loop."""

    name: str
    args: tuple[Any, ...]


@dataclass(slots=True)
class WatchAttempt:
    """Watch the attempt's job to its verdict (a `PollResult`); `stoppable`: a cancel of
    the run stops the watch before its next status fetch (`WatchStopped`)."""

    attempt: Attempt
    stoppable: bool


@dataclass(slots=True)
class AttemptEndHook:
    """Call the caller's `on_attempt_end(run, attempt)`."""

    run: RunState
    attempt: Attempt


RunRequest = Clock | Sleep | AdapterCall | WatchAttempt | AttemptEndHook | StoreRequest


def _record(
    writer: StreamWriter[RunState], cls: type[EventBase], /, **fields: Any
) -> Generator[RunRequest, Any, Any]:
    """Append one event of `cls` with `fields` to `writer`'s stream, stamped now."""
    at = yield CLOCK
    build = lambda _state: [writer.event(cls, at, **fields)]  # noqa: E731
    [event] = yield from writer.append_steps(build)
    return event


def _record_outcome(
    writer: StreamWriter[RunState], outcome: AttemptOutcome
) -> Generator[RunRequest, Any, Any]:
    """Append the events the core makes of an attempt's `outcome`, stamped now."""
    at = yield CLOCK
    yield from writer.append_steps(lambda state: stamp(writer, apply_outcome(state, outcome), at))


def _record_drafts(
    writer: StreamWriter[RunState], drafts: Sequence[Draft]
) -> Generator[RunRequest, Any, Any]:
    """Append `drafts` to `writer`'s stream, stamped now."""
    at = yield CLOCK
    yield from writer.append_steps(lambda _state: stamp(writer, drafts, at))


@dataclass
class RunLoop:
    """The run's loop: ask `decide_run`, have the command's I/O done, record what happened.

    `steps` is the loop as a sans-IO generator; `drive` runs it in this thread
    (`supervise_run`), `AsyncIO.drive` on an event loop (`asupervise_run`).
    """

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
        """Drive the run in `writer`'s stream to its result, in this thread."""
        return run_steps(self.steps(writer), lambda request: self.perform(writer, request))

    def perform(self, writer: StreamWriter[RunState], request: RunRequest) -> Any:
        """One request of the loop, the synchronous way."""
        kind = type(request)
        if kind is Clock:
            return self.clock()
        if kind is AdapterCall:
            return getattr(self.adapters, request.name)(*request.args)
        if kind is WatchAttempt:
            stop = _cancel_asked(writer) if request.stoppable else _never
            return self.adapters.watch(writer.state, request.attempt, self.store, stop)
        if kind is Sleep:
            self.sleep(request.seconds)
            return None
        if kind is AttemptEndHook:
            assert self.on_attempt_end is not None
            return self.on_attempt_end(request.run, request.attempt)
        return perform(self.store, request)

    def steps(self, writer: StreamWriter[RunState]) -> Generator[RunRequest, Any, RunResult]:
        """The run in `writer`'s stream, to its result: every piece of I/O yielded."""
        run_id, say = self.run_id, self.say
        while True:
            yield from writer.catch_up_steps()
            yield from self._attempt_end_hooks(writer)
            command = decide_run(writer.state, (yield CLOCK))
            match command:
                case RunFinished(result=result):
                    return RunResult.from_event(result)
                case StartAttempt(plan=plan):
                    yield from self._start_attempt(writer, plan)
                case LookUpEndpoint(attempt=attempt):
                    fields = yield from _look_up(writer.state, self.adapters, attempt)
                    yield from _record(writer, EndpointsLookedUp, **fields)
                    ids = [f.endpoint_id for f in fields.get("found", ())]
                    say(
                        f"deploy of {attempt.started.endpoint_name} was interrupted: "
                        f"the platform has {ids or 'no such endpoint'}"
                    )
                case AdoptEndpoint(attempt=attempt, found=found):
                    yield from _record_drafts(writer, adopt_drafts(attempt, found))
                    name = attempt.started.endpoint_name
                    say(f"run {run_id}: adopted {found.endpoint_id} ({name})")
                case Deploy(attempt=attempt):
                    yield from self._deploy(writer, attempt)
                case Submit(attempt=attempt):
                    yield from self._submit(writer, attempt)
                case WatchJob(attempt=attempt):
                    yield from self._watch(writer, attempt)
                case EndAttempt(attempt=number, failure=failure, detail=detail, rule=rule):
                    yield from _record(
                        writer,
                        AttemptEnded,
                        attempt=number,
                        ok=False,
                        failure=failure,
                        rule=rule,
                        detail=detail,
                    )
                case CancelJob(attempt=attempt):
                    ok = yield from _quietly("cancel_job", writer.state, attempt)
                    number, job_id = attempt.started.attempt, attempt.job_id
                    yield from _record(writer, JobCancelled, attempt=number, job_id=job_id, ok=ok)
                case DeleteEndpoint(endpoint_id=endpoint_id, reason=reason):
                    ok = yield from _quietly("delete_endpoint", writer.state, endpoint_id)
                    yield from _record(
                        writer, EndpointDeleted, endpoint_id=endpoint_id, reason=reason, ok=ok
                    )
                case WaitRun(seconds=seconds):
                    yield Sleep(seconds)
                case ConcludeRun(ok=ok, failure=failure, detail=detail, metrics=metrics):
                    yield from _record(
                        writer,
                        RunConcluded,
                        ok=ok,
                        failure=failure,
                        attempts=len(writer.state.attempts),
                        detail=detail,
                        metrics=metrics,
                    )
                    say(f"run {run_id}: {'succeeded' if ok else failure}")

    def _attempt_end_hooks(
        self, writer: StreamWriter[RunState]
    ) -> Generator[RunRequest, Any, None]:
        """Call `on_attempt_end` once for each attempt whose end is newly in the state."""
        if self.on_attempt_end is not None:
            for a in writer.state.attempts:
                if a.ended is not None and a.started.attempt not in self.ended_before:
                    self.ended_before.add(a.started.attempt)
                    yield AttemptEndHook(writer.state, a)

    def _start_attempt(
        self, writer: StreamWriter[RunState], plan: AttemptPlan
    ) -> Generator[RunRequest, Any, None]:
        """Announce the planned attempt and record its `AttemptStarted`."""
        run_id, seed = self.run_id, self.seed
        endpoint = endpoint_name(run_id, plan.gpu_class, seed or 0, plan.attempt)
        where = "" if plan.provider == "runpod" else f"{plan.provider}/"
        self.say(
            f"run {run_id}: attempt {plan.attempt} on {where}{plan.gpu_class}"
            f"{' (last GPU)' if plan.on_last_gpu else ''}"
            f"{' without the weight cache' if plan.cache_dropped else ''}"
            f"{' (a redo: the last submit was lost)' if plan.redo else ''}"
        )
        yield from _record(
            writer,
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

    def _deploy(
        self, writer: StreamWriter[RunState], attempt: Attempt
    ) -> Generator[RunRequest, Any, None]:
        """Record the deploy's intent, deploy, and record the endpoint or the failure."""

        def deploy_record(cls: type[EventBase], **fields: Any) -> Any:
            # (the deployer's own steps, recorded from inside its call: a blocking append)
            return writer.record(cls, self.clock(), **fields)

        number = attempt.started.attempt
        yield from _record(
            writer, DeployIntended, attempt=number, endpoint_name=attempt.started.endpoint_name
        )
        try:
            deployed = yield AdapterCall("deploy", (writer.state, attempt, deploy_record))
        except Exception as exc:  # any deploy error: a poll_error, a retry spent
            yield from _record_outcome(writer, DeployFailure(number, **_error(exc)))
            return
        yield from _record(
            writer,
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
        self, writer: StreamWriter[RunState], attempt: Attempt
    ) -> Generator[RunRequest, Any, None]:
        """Record the submit's intent, submit, and record the queued job or the failure."""
        started = attempt.started
        yield from _record(
            writer, SubmitIntended, attempt=started.attempt, endpoint_id=attempt.endpoint_id
        )
        try:
            job_id, submitted_at = yield AdapterCall("submit", (writer.state, attempt))
        except Exception as exc:
            yield from _record_outcome(writer, SubmitFailure(started.attempt, **_error(exc)))
            self.say(f"submit to {started.endpoint_name} failed ({type(exc).__name__})")
            return
        yield from _record(
            writer,
            JobQueued,
            attempt=started.attempt,
            endpoint_id=attempt.endpoint_id,
            job_id=job_id,
            job_stream=started.job_stream,
            submitted_at=submitted_at,
        )
        self.say(
            f"submitted job {job_id} to {started.endpoint_name} "
            f"({attempt.endpoint_id}): attempt {started.attempt}, "
            f"gpu {started.gpu_class}"
        )

    def _watch(
        self, writer: StreamWriter[RunState], attempt: Attempt
    ) -> Generator[RunRequest, Any, None]:
        """Watch the attempt's job to its verdict and record it (a cancel may stop the watch)."""
        # A cancelled run's job, cancelled on the platform, is watched to the
        # platform's answer: the cancel does not stop that watch.
        stoppable = not writer.state.cancel_requested
        if not stoppable:
            self.say(
                f"run {self.run_id}: job {attempt.job_id} cancelled; "
                "watching it to the platform's answer"
            )
        try:
            result = yield WatchAttempt(attempt, stoppable)
        except WatchStopped:
            yield from writer.catch_up_steps()
            return  # the cancel is in the state now; decide_run takes it
        number = attempt.started.attempt
        yield from _record_outcome(
            writer,
            JobVerdict(
                number,
                ok=result.ok,
                failure=result.failure,
                rule=result.rule,
                detail=result.detail or "",
                metrics=result.metrics,
            ),
        )
        self.say(
            f"attempt {number} on {attempt.started.gpu_class}: "
            f"{'ok' if result.ok else f'{result.failure} ({result.rule})'}"
        )

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
        writer.append(lambda state: stamp(writer, apply_outcome(state, cancel), at))
        self.drive(writer)


@dataclass
class AsyncIO:
    """`RunLoop.steps` driven on an event loop (`asupervise_run`): each request awaited."""

    run: RunLoop
    writer: StreamWriter[RunState]
    sleep: Callable[[float], Awaitable[Any]]

    async def drive(self) -> RunResult:
        """The run to its result (the twin of `flashfsm.writer.run_steps`)."""
        steps = self.run.steps(self.writer)
        reply: Any = None
        error: BaseException | None = None
        while not isinstance(request := advance(steps, reply, error), Done):
            reply, error = None, None
            try:
                reply = await self.perform(request)
            except asyncio.CancelledError:
                steps.close()
                raise
            except Exception as exc:  # thrown back: the loop decides what it means
                error = exc
        return request.value

    async def perform(self, request: RunRequest) -> Any:
        """One request of the loop, awaited."""
        run, kind = self.run, type(request)
        if kind is Clock:
            return run.clock()
        if kind is Sleep:
            return await self.sleep(request.seconds)
        if kind is AdapterCall:
            method = getattr(run.adapters, f"a{request.name}", None)
            if method is not None:
                return await method(*request.args)
            return await asyncio.to_thread(getattr(run.adapters, request.name), *request.args)
        if kind is WatchAttempt:
            return await self.watch(request)
        if kind is AttemptEndHook:
            assert run.on_attempt_end is not None
            answer = run.on_attempt_end(request.run, request.attempt)
            return await answer if inspect.isawaitable(answer) else answer
        return await asyncio.to_thread(perform, run.store, request)

    async def watch(self, request: WatchAttempt) -> PollResult:
        """The attempt's job watched to its verdict: the adapters' `awatch` on this loop,
        else their `watch` in a worker thread."""
        run, writer, state = self.run, self.writer, self.writer.state
        awatch = getattr(run.adapters, "awatch", None)
        if awatch is None:  # (the stop is asked in the watch's thread; the loop waits)
            stop = _cancel_asked(writer) if request.stoppable else _never
            return await asyncio.to_thread(
                run.adapters.watch, state, request.attempt, run.store, stop
            )

        async def acancelled() -> bool:
            await asyncio.to_thread(writer.catch_up)
            return writer.state.cancel_requested

        astop = acancelled if request.stoppable else None
        return await awatch(state, request.attempt, run.store, astop)  # type: ignore[no-any-return]


def _cancel_asked(writer: StreamWriter[RunState]) -> Callable[[], bool]:
    """The stop of a run's watch: asked before each status fetch, it folds in what others
    appended to the run's stream and says whether a cancel is among it."""

    def cancelled() -> bool:
        writer.catch_up()
        return writer.state.cancel_requested

    return cancelled


def _never() -> bool:
    """The stop of a watch that must reach its verdict (a cancelled job's, to its end)."""
    return False


def _error(exc: BaseException) -> dict[str, str]:
    """A failed step's `error_class` and `message` (masked and capped by the event)."""
    error_class = getattr(exc, "error_class", None)
    return {
        "error_class": error_class if isinstance(error_class, str) else type(exc).__name__,
        "message": str(exc),
    }


def _quietly(name: str, *args: Any) -> Generator[RunRequest, Any, bool]:
    """A cleanup call: False when it failed (recorded so, never fatal)."""
    try:
        return bool((yield AdapterCall(name, args)))
    except Exception as exc:
        logger.warning("cleanup %s failed: %s", name, redact(str(exc)))
        return False


def _look_up(
    run: RunState, adapters: RunAdapters, attempt: Attempt
) -> Generator[RunRequest, Any, dict[str, Any]]:
    """Ask the platform what an interrupted deploy made: the `EndpointsLookedUp` fields
    (what was found, or why it could not be asked)."""
    name = attempt.started.endpoint_name
    fields: dict[str, Any] = {"attempt": attempt.started.attempt, "endpoint_name": name}
    if getattr(adapters, "find_endpoints", None) is None:
        fields.update(
            error_class=LOOKUP_UNSUPPORTED,
            message=f"{type(adapters).__name__} has no find_endpoints",
        )
        return fields
    try:
        found = yield AdapterCall("find_endpoints", (run, attempt))
    except Exception as exc:
        fields.update(_error(exc))
        return fields
    fields["found"] = tuple(
        FoundEndpoint(endpoint_id=d.endpoint_id, account=d.account, idle_timeout_s=d.idle_timeout_s)
        for d in found
    )
    return fields
