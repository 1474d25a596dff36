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

`RunAdapters` is the seam (`flashfsm.run_adapters`): `RunpodRunAdapters` talks to RunPod's
REST API with a pluggable deployer; adapters that name the providers they deploy to refuse,
before the run starts, a candidate whose provider is not one of them (`UnsupportedProvider`).

A cancelled run leaves no stream open: its job, cancelled on the platform, is watched on
to the platform's answer, and a Ctrl-C (`KeyboardInterrupt`) is a cancel too, recorded and
wound down before it is raised again — unless the caller chose `on_interrupt="detach"`:
then it records nothing and the run is left to resume.

The loop is written once, as a sans-IO generator (`flashfsm.run_loop.RunLoop.steps`)
yielding each piece of I/O it needs; `supervise_run` performs the requests in its thread
and `asupervise_run` awaits them on an event loop (store calls and synchronous adapter
calls in worker threads, an attempt's job watched by a `Supervisor` through
`RunpodRunAdapters.awatch`), so the two record the same events in the same order.

Every outcome of an attempt — a deploy or submit error, its job's verdict — and a user's
cancel becomes events through the pure `flashfsm.fsm.run.apply_outcome`; the shell only
stamps and appends them. A new walk first records its ranking (`CandidatesRanked`) from
the store's capacity memory (`flashfsm.capacity`), unless `capacity_memory` turns it off.

Restarts pay once: the intent of each paid call (`DeployIntended`, `SubmitIntended`) is
recorded before the call, so a resume that finds an intent without its answer looks the
endpoint up by its recorded name (`RunAdapters.find_endpoints`) and adopts or deletes it,
and a lost submit tears its attempt down before anything is submitted again
(`flashfsm.fsm.run` decides; this module performs).

This module holds the two drivers' entry points and how a run starts or resumes
(`RunStarted`, its ranking, a hand-off to a fleet); the loop they drive is
`flashfsm.run_loop`'s, the adapters' protocol and RunPod's adapters are
`flashfsm.run_adapters`'s, and this module re-exports their public names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from flashfsm.capacity import ranking_for
from flashfsm.events.models import Candidate, CandidatesRanked, RunStarted
from flashfsm.events.store import HANDOFF, EventStore, FencedStore, capabilities
from flashfsm.fsm.capacity import DEFAULT_CAPACITY, NO_MEMORY, CapacityPolicy
from flashfsm.fsm.run import Draft, RunState, UserCancel, cancel_drafts
from flashfsm.naming import check_plain, check_stream, run_stream
from flashfsm.run_adapters import Deployed as Deployed
from flashfsm.run_adapters import Recorder as Recorder
from flashfsm.run_adapters import RunAdapters, check_providers
from flashfsm.run_adapters import RunpodRunAdapters as RunpodRunAdapters
from flashfsm.run_adapters import UnsupportedProvider as UnsupportedProvider
from flashfsm.run_loop import AsyncIO, AttemptHook, RunLoop, RunResult, stamp
from flashfsm.shell import opened_store
from flashfsm.writer import FOLD_CANCELS, REBUILD, RUN, TAIL, StreamWriter

logger = logging.getLogger("flashfsm.runs")


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
        writer.append(lambda _tail: stamp(writer, drafts, at))


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
        run = RunLoop(run_id, seed, adapters, opened, clock, sleep, say, on_attempt_end, set())
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

    Both drive one sans-IO generator (`RunLoop.steps`); this one awaits what the other
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
        run = RunLoop(run_id, seed, adapters, opened, clock, time.sleep, say, on_attempt_end, set())
        writer, _ = settings.writers(opened)
        pending = await asyncio.to_thread(settings.begin, writer, run)
        if pending is not None:
            return pending
        return await AsyncIO(run, writer, sleep).drive()
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

    def begin(self, writer: StreamWriter[RunState], run: RunLoop) -> RunResult | None:
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
            writer.append(lambda _state: stamp(writer, drafts, at))
        recorded = writer.state.started
        if recorded is not None:  # a resumed run names its attempts as it was recorded to
            run.run_id, run.seed = recorded.run_id, recorded.seed
        if not self.detach:
            return None
        if writer.state.done:
            return RunResult.from_event(writer.state.result)
        run.store.unmark(name)  # (a run a replica marked failed to start is claimed again)
        return RunResult(False, None, "handed to the fleet", 0, None, name)

    def drive(self, run: RunLoop, cancel: bool) -> RunResult:
        """Begin the run and drive it to its result in this thread; a Ctrl-C cancels it when
        `cancel` (while it begins, only when it is not handed to a fleet)."""
        writer, interrupt_writer = self.writers(run.store)
        with run.cancelled_on_interrupt(interrupt_writer, cancel=not self.detach and cancel):
            pending = self.begin(writer, run)
        if pending is not None:
            return pending
        with run.cancelled_on_interrupt(interrupt_writer, cancel=cancel):
            return run.drive(writer)
