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

The loop is written once, as a sans-IO generator (`_RunLoop.steps`) yielding each piece of
I/O it needs; `supervise_run` performs the requests in its thread and `asupervise_run` awaits
them on an event loop (store calls and synchronous adapter calls in worker threads, an
attempt's job watched by a `Supervisor` through `RunpodRunAdapters.awatch`), so the two
record the same events in the same order.

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

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
from flashfsm.events.policy import GracePolicy, stall_kwargs
from flashfsm.events.store import HANDOFF, EventStore, FencedStore, capabilities
from flashfsm.fsm.capacity import DEFAULT_CAPACITY, NO_MEMORY, CapacityPolicy
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
    cancel_drafts,
    decide_run,
)
from flashfsm.fsm.sweep import bare_name
from flashfsm.naming import attempt_stream, check_plain, check_stream, endpoint_name, run_stream
from flashfsm.redact import redact
from flashfsm.results import Portable
from flashfsm.shell import JobHandle, PollResult, opened_store, poll_job
from flashfsm.watch import CLOCK, Clock, Sleep
from flashfsm.writer import (
    FOLD_CANCELS,
    REBUILD,
    RUN,
    TAIL,
    Done,
    StoreRequest,
    StreamWriter,
    advance,
    perform,
    run_steps,
)

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
    worker resumes the run rather than starting a second one. A run id or stream holding a
    control character (`flashfsm.naming.check_stream`) is a `ValueError` before anything is
    opened.

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
    settings = _RunSettings.of_call(locals())
    with opened_store(store) as opened:
        say = log or _log_line
        run = _RunLoop(run_id, seed, adapters, opened, clock, sleep, say, on_attempt_end, set())
        return settings.drive(run, cancel=on_interrupt == "cancel")


async def asupervise_run(
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
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    log: Callable[[str], Any] | None = None,
    single_attempt: int | None = None,
    on_last_gpu: bool = False,
    capacity_memory: CapacityPolicy | bool = True,
    on_attempt_end: AttemptHook | None = None,
    spec: str | None = None,
    retry_lost_unverified: bool = False,
) -> RunResult:
    """`supervise_run` from an event loop: the same run, the same events in the same order.

    Both drive one sans-IO generator (`_RunLoop.steps`); this one awaits what the other
    calls. Waits are `await sleep(seconds)`; the store's reads and appends, and each
    adapter call without an async form, run in worker threads, so the loop is never
    blocked by them. An adapter may offer async forms (`adeploy`, `afind_endpoints`,
    `asubmit`, `acancel_job`, `adelete_endpoint`, `awatch`), awaited instead;
    `RunpodRunAdapters.awatch` watches the attempt's job in a `Supervisor` on the loop.
    `on_attempt_end` may be a coroutine function. Opening and replaying the run's stream
    (and ranking a new walk's candidates) is one blocking step, run in a worker thread.

    The parameters are `supervise_run`'s, but for `sleep` (a coroutine function) and
    the interrupt: a cancelled task (`asyncio.CancelledError`: a triggerer moving its
    triggers, an orchestrator shutting down) records nothing and cancels nothing; the run
    resumes when this, or `supervise_run`, is called again on its stream. A user's cancel is
    `request_cancel`, from anywhere: it stops the watch before its next status fetch and the
    run winds down (its job cancelled, its endpoints deleted) as `supervise_run` winds it.
    A run handed to a fleet is `supervise_run(..., detach=True)`'s.
    """
    settings = _RunSettings.of_call(locals())
    say = log or _log_line
    opening = opened_store(store)  # (entered and left in worker threads: both may block)
    opened = await asyncio.to_thread(opening.__enter__)
    try:
        run = _RunLoop(
            run_id, seed, adapters, opened, clock, time.sleep, say, on_attempt_end, set()
        )
        writer, _ = settings.writers(opened)
        pending = await asyncio.to_thread(settings.begin, writer, run)
        if pending is not None:
            return pending
        return await _AsyncIO(run, writer, sleep).drive()
    finally:
        await asyncio.to_thread(opening.__exit__, None, None, None)


def _log_line(line: str) -> None:
    logger.info("%s", line)


#: The arguments of `supervise_run` (and `asupervise_run`) its `RunStarted` records.
_STARTED_FIELDS = (
    "max_retries",
    "weight_cache",
    "budget_s",
    "phase",
    "seed",
    "single_attempt",
    "on_last_gpu",
    "spec",
    "retry_lost_unverified",
)


@dataclass(frozen=True)
class _RunSettings:
    """What starting or resuming a run needs, whichever driver drives it: the run's
    `RunStarted` fields (`started`), the ranking policy, its stream, and whether it is
    handed to a fleet."""

    run_id: str
    candidates: tuple[Candidate, ...]
    started: dict[str, Any]
    capacity: CapacityPolicy
    stream: str | None
    detach: bool

    @classmethod
    def of_call(cls, arguments: dict[str, Any]) -> _RunSettings:
        """The settings a `supervise_run` or `asupervise_run` call names, from its arguments
        by name (`locals()` on entry; `asupervise_run` has no `detach`: it hands no run)."""
        return cls(
            arguments["run_id"],
            tuple(arguments["candidates"]),
            {name: arguments[name] for name in _STARTED_FIELDS},
            _capacity_policy(arguments["capacity_memory"]),
            arguments["stream"],
            arguments.get("detach", False),
        )

    def __post_init__(self) -> None:
        # (both drivers make these settings before the store is opened: a run id or stream
        # that would name a stream with a control character is refused before anything)
        check_plain(self.run_id, "run_id")
        check_stream(self.stream or run_stream(self.run_id), "" if self.stream else "run_id")

    def writers(self, opened: EventStore) -> tuple[StreamWriter[RunState], StreamWriter[RunState]]:
        """The run's writer, and the one a Ctrl-C winds the run down through (opened then)."""
        name = self.stream or run_stream(self.run_id)
        target: EventStore = opened
        if self.detach:
            if capabilities(opened).leases is None:
                raise ValueError(f"{opened!r} cannot hand a run to a fleet: it keeps no leases")
            target = FencedStore(opened, lambda _stream: HANDOFF)
        return (
            StreamWriter(target, name, RUN, FOLD_CANCELS),
            StreamWriter(target, name, RUN, FOLD_CANCELS),
        )

    def begin(self, writer: StreamWriter[RunState], run: _RunLoop) -> RunResult | None:
        """Replay the run's stream and record a new run's start (and ranking); set `run`'s
        names as the run recorded them. A result when the call has nothing to drive (a run
        handed to a fleet), else None."""
        writer.open()
        run.ended_before.update(
            a.started.attempt for a in writer.state.attempts if a.ended is not None
        )
        name = writer.stream
        if writer.state.started is None and not writer.state.done:
            check_providers(self.candidates, run.adapters)
            at = run.clock()
            fields = {"run_id": self.run_id, "candidates": self.candidates, **self.started}
            drafts = [Draft(RunStarted, fields)]
            single = self.started["single_attempt"] is not None
            if self.capacity.enabled and not single and len(self.candidates) > 0:
                ranked = ranking_for(run.store, self.candidates, at, self.capacity, exclude=(name,))
                drafts.append(Draft(CandidatesRanked, ranked))
            writer.append(lambda _state: _stamp(writer, drafts, at))
        recorded = writer.state.started
        if recorded is not None:  # a resumed run names its attempts as it was recorded to
            run.run_id, run.seed = recorded.run_id, recorded.seed
        if not self.detach:
            return None
        if writer.state.done:
            return RunResult.from_event(writer.state.result)
        run.store.unmark(name)  # (a run a replica marked failed to start is claimed again)
        return RunResult(False, None, "handed to the fleet", 0, None, name)

    def drive(self, run: _RunLoop, cancel: bool) -> RunResult:
        """Begin the run and drive it to its result in this thread; a Ctrl-C cancels it when
        `cancel` (while it begins, only when it is not handed to a fleet)."""
        writer, interrupt_writer = self.writers(run.store)
        with run.cancelled_on_interrupt(interrupt_writer, cancel=not self.detach and cancel):
            pending = self.begin(writer, run)
        if pending is not None:
            return pending
        with run.cancelled_on_interrupt(interrupt_writer, cancel=cancel):
            return run.drive(writer)


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
    yield from writer.append_steps(lambda state: _stamp(writer, apply_outcome(state, outcome), at))


def _record_drafts(
    writer: StreamWriter[RunState], drafts: Sequence[Draft]
) -> Generator[RunRequest, Any, Any]:
    """Append `drafts` to `writer`'s stream, stamped now."""
    at = yield CLOCK
    yield from writer.append_steps(lambda _state: _stamp(writer, drafts, at))


@dataclass
class _RunLoop:
    """The run's loop: ask `decide_run`, have the command's I/O done, record what happened.

    `steps` is the loop as a sans-IO generator; `drive` runs it in this thread
    (`supervise_run`), `_AsyncIO.drive` on an event loop (`asupervise_run`).
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
        writer.append(lambda state: _stamp(writer, apply_outcome(state, cancel), at))
        self.drive(writer)


@dataclass
class _AsyncIO:
    """`_RunLoop.steps` driven on an event loop (`asupervise_run`): each request awaited."""

    run: _RunLoop
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
    #: The waits of a watch on an event loop (`awatch`): `sleep`'s twin.
    asleep: Callable[[float], Awaitable[Any]] = asyncio.sleep

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
        from flashfsm.adapters.runpod import policy_for_budget  # (httpx: loaded on first use)

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

    async def awatch(
        self,
        run: RunState,
        attempt: Attempt,
        store: EventStore,
        stop: Callable[[], Awaitable[bool]] | None,
    ) -> PollResult:
        """`watch` on an event loop (`asupervise_run`): the same watch, driven by a
        `Supervisor` of this one job (no jitter, so it polls when `poll_job` would), its
        client's calls and the readers in worker threads; `stop()` is awaited before each
        status fetch (None: the watch runs to its verdict)."""
        from flashfsm.supervisor import JobSpec, Supervisor, ThreadedClient

        handle = self.handle(attempt, run)
        if self.on_handle is not None:
            self.on_handle(handle.to_dict())
        heartbeat, failure_detail = self.readers(run, attempt) if self.readers else (None, None)
        client = ThreadedClient(self._client(attempt.account))
        supervisor = Supervisor(
            store,
            client,
            clock=self.clock,
            sleep=self.asleep,
            jitter=0.0,
            log=self.log,
            watcher=self.watcher,
        )
        job = JobSpec(
            handle,
            stream=attempt.job_stream,
            interval_s=self.interval_s,
            policy=GracePolicy(**stall_kwargs(attempt.started.on_last_gpu)),
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
            allow_pickle=self.allow_pickle,
            stop=stop,
        )
        try:
            return await supervisor.watch(job)
        finally:
            await supervisor.committer.close()
            await supervisor.snapshots.close()

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
