"""An asyncio supervisor: thousands of job watches in one process.

Theory of operation. Each watched job is one asyncio task driving the same watch as
`poll_job`: the sans-IO generator of `flashfsm.watch`, which yields each piece of I/O it
needs and receives the answer. So a job watched here and a job watched by the sync loop
reach the same verdicts from the same observations. This module is the asyncio driver of
that generator, and what it adds is sharing:

- one HTTP client (`AsyncRunpodClient`, one `httpx.AsyncClient`) for every job;
- per-endpoint token buckets that keep status and health calls under RunPod's limits;
- poll times jittered (the first poll of each job spread over part of its interval) so a
  fleet started together does not poll in lockstep;
- one group committer: events from all jobs are gathered for a few milliseconds and
  written in one store transaction (`append_many`), so durability costs one fsync per
  batch instead of one per observation;
- blocking work (store reads on attach, Hub readers) runs in worker threads;
- snapshots of job streams (`flashfsm.fsm.snapshot`), once due, are handed to one
  background `SnapshotWriter`: it keeps the latest per stream and writes them in a worker
  thread after the commit, so no watch waits for one.

`stop()` (or SIGINT/SIGTERM after `install_signal_handlers()`) cancels every watch at its
next await; nothing is recorded for an interrupted step, so every watch resumes by replay
(a new supervisor, or `poll_job`, reattaches).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flashfsm.errors import JobOwnedElsewhere
from flashfsm.events.models import Event
from flashfsm.events.policy import GracePolicy
from flashfsm.events.store import EventStore, append_many
from flashfsm.fsm.job import JobState
from flashfsm.naming import check_stream, job_stream
from flashfsm.reads import (
    ApiCall,
    Clock,
    HealthCall,
    Outcome,
    ReaderCall,
    Request,
    Sleep,
    StatusCall,
    StopAsked,
    has_worker_reader,
)
from flashfsm.shell import resolve_store
from flashfsm.watch import (
    JobHandle,
    PollResult,
    WatchSpec,
    attach_steps,
    call,
    default_stream,
    default_watcher,
    loop_steps,
    make_say,
)
from flashfsm.writer import (
    Append,
    SaveSnapshot,
    StreamWriter,
    perform,
    save_snapshots,
    snapshot_interval,
)

logger = logging.getLogger("flashfsm.supervisor")
R = TypeVar("R")

#: RunPod's per-endpoint limit on /status is 2000 per 10 s; stay well under it.
STATUS_RATE_PER_S = 150.0
HEALTH_RATE_PER_S = 20.0
#: How long a group commit gathers appends. Each commit has a fixed cost (a worker-thread
#: hand-off, the transaction, an fsync: about 1 ms of CPU), so a longer window is less CPU
#: per observation; 10 ms of added latency is nothing next to a 10 s poll interval.
COMMIT_WINDOW_S = 0.01


class TokenBucket:
    """An asyncio rate limiter: `rate` calls per second, bursts of at most `burst`."""

    def __init__(self, rate: float, burst: float | None = None):
        self.rate = rate
        self.capacity = burst if burst is not None else max(1.0, rate)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def try_take(self) -> bool:
        """Take a token now if one is free and nobody is waiting for one (no await: the
        usual case of a call under the limit costs no coroutine)."""
        if self._lock.locked():
            return False  # callers are waiting: join the queue behind them
        return self._take()

    def _take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait until a call is allowed."""
        async with self._lock:
            while not self._take():
                await asyncio.sleep((1 - self.tokens) / self.rate)


@dataclass
class _Pending:
    stream: str
    events: Sequence[Event]
    expected_seq: int
    done: asyncio.Future[None]


class GroupCommitter:
    """Gathers appends from many tasks and writes each gathering in one transaction."""

    def __init__(
        self, store: EventStore, *, window_s: float = COMMIT_WINDOW_S, max_batch: int = 1000
    ):
        self.store = store
        self.window_s = window_s
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        self.events_written = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="flashfsm-group-commit")

    async def append(self, stream: str, events: Sequence[Event], expected_seq: int) -> None:
        """Append through the next group commit; raises what the store raised for this batch."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(stream, events, expected_seq, done))
        self._wake.set()
        await done

    async def _run(self) -> None:
        # One commit per window at most (unless a full batch is waiting): appends that
        # arrive while a commit is being written wait for the next window instead of
        # starting a commit of their own, so a steady trickle of observations costs one
        # transaction and one fsync per window, not one per observation.
        while True:
            await self._wake.wait()
            if len(self._pending) < self.max_batch:
                await asyncio.sleep(self.window_s)
            await self._commit_once()

    async def _commit_once(self) -> None:
        """Write what is pending now (at most `max_batch`); later arrivals wait their turn."""
        self._wake.clear()
        if not self._pending:
            return
        await self._write(self._take())
        if self._pending:
            self._wake.set()

    def _take(self) -> list[_Pending]:
        batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        return batch

    async def flush(self) -> None:
        """Write everything pending now."""
        self._wake.clear()
        while self._pending:
            await self._write(self._take())

    async def _write(self, batch: list[_Pending]) -> None:
        """One group commit of `batch`; each waiter learns its own batch's outcome."""
        try:
            outcomes = await asyncio.to_thread(
                append_many, self.store, [(p.stream, p.events, p.expected_seq) for p in batch]
            )
        except BaseException as exc:  # the store itself failed: every waiter learns it
            for p in batch:
                if not p.done.done():
                    p.done.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.commits += 1
        for p, outcome in zip(batch, outcomes, strict=True):
            if p.done.done():
                continue
            if outcome is None:
                self.events_written += len(p.events)
                p.done.set_result(None)
            else:
                p.done.set_exception(outcome)

    async def close(self) -> None:
        """Flush and stop."""
        await self.flush()
        self._task = await _stopped(self._task)


class SnapshotWriter:
    """Writes the snapshots the watches ask for, in a worker thread, never in their way.

    `submit` only files the request (the latest per stream wins) and returns; one task
    hands what is filed to a worker thread a batch at a time. `written` counts the
    snapshots written and `cpu_s` the worker thread's CPU time spent encoding and writing
    them (what they cost the fleet).
    """

    def __init__(self, store: EventStore):
        self.store = store
        self._pending: dict[str, SaveSnapshot[Any]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._cpu_lock = threading.Lock()
        self.written = 0
        self.cpu_s = 0.0

    def submit(self, request: SaveSnapshot[Any]) -> None:
        """File a snapshot to write (called from the event loop; never waits)."""
        self._pending[request.stream] = request
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="flashfsm-snapshots")

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            await self.flush()

    async def flush(self) -> None:
        """Write everything filed now."""
        if self._wake is not None:
            self._wake.clear()
        while self._pending:
            batch, self._pending = list(self._pending.values()), {}
            await asyncio.to_thread(self._write, batch)

    def _write(self, batch: list[SaveSnapshot[Any]]) -> None:
        start = time.thread_time()
        written = save_snapshots(self.store, batch)
        spent = time.thread_time() - start
        with self._cpu_lock:
            self.written += written
            self.cpu_s += spent

    async def close(self) -> None:
        """Write what is filed, then stop."""
        await self.flush()
        self._task = await _stopped(self._task)


async def _stopped(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task and wait for it to end (None: nothing to stop)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass
class JobSpec:
    """One job to watch.

    Output is JSON-only unless `handle.trusted_output` (an endpoint this run deployed);
    `allow_pickle` overrides the handle as in `poll_job`. Its stream (`stream`, else
    `job-<job_id>`) holding a control character is a `ValueError` when it is made
    (`flashfsm.naming.check_stream`).
    """

    handle: JobHandle
    stream: str | None = None
    interval_s: float = 10.0
    policy: GracePolicy = field(default_factory=GracePolicy)
    heartbeat_reader: Callable[..., Any] | None = None
    failure_detail_reader: Callable[..., Any] | None = None
    allow_pickle: bool | None = None
    #: Asked before each status fetch (a run's cancel, `flashfsm.runs.asupervise_run`): True
    #: ends the watch with `WatchStopped`, recording nothing. None: the watch stops only
    #: when its task is cancelled (`Supervisor.stop`).
    stop: Callable[[], Awaitable[bool]] | None = None

    def __post_init__(self) -> None:
        check_stream(self.stream or job_stream(self.handle.job_id), "" if self.stream else "job_id")


class StopsOnSignals:
    """`install_signal_handlers` for a driver whose `stop` ends it cleanly from its loop
    (the supervisor, a fleet replica)."""

    def stop(self) -> None:
        """End the driver cleanly (see the subclass)."""
        raise NotImplementedError

    def install_signal_handlers(
        self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
    ) -> None:
        """Make SIGINT/SIGTERM call `stop` (call from the running loop)."""
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)


class Supervisor(StopsOnSignals):
    """Watches many jobs concurrently with one client, one committer and shared limits."""

    def __init__(
        self,
        store: EventStore | str,
        client: Any,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        jitter: float = 0.1,
        spread: float | None = None,
        status_rate_per_s: float = STATUS_RATE_PER_S,
        health_rate_per_s: float = HEALTH_RATE_PER_S,
        commit_window_s: float = COMMIT_WINDOW_S,
        max_in_flight: int = 64,
        log: Callable[[str], Any] | None = None,
        rng: random.Random | None = None,
        watcher: str | None = None,
        lag_observer: Callable[[float], Any] | None = None,
    ):
        self.store = resolve_store(store)
        self.client = client
        self.clock = clock
        self.sleep = sleep
        self.jitter = jitter
        # The share of its interval over which each job's first poll is spread (default:
        # `jitter`); 1.0 spreads a fleet started together evenly over a whole interval.
        self.spread = jitter if spread is None else spread
        self.status_rate = status_rate_per_s
        self.health_rate = health_rate_per_s
        self.committer = GroupCommitter(self.store, window_s=commit_window_s)
        self.snapshots = SnapshotWriter(self.store)
        self.snapshot_every = snapshot_interval(self.store)
        self.say = make_say(log)
        self.rng = rng or random.Random()
        self.watcher = watcher or default_watcher()
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # httpx's pool rescans its whole wait queue on every request, so thousands of
        # waiting requests cost quadratic CPU: a semaphore keeps that queue short.
        self.max_in_flight = max_in_flight
        self._in_flight: asyncio.Semaphore | None = None
        self.lag: list[float] = []  # how late each status fetch was, seconds (bounded)
        # Told how late each status fetch was, every one (the metrics' poll-lag histogram).
        self.lag_observer = lag_observer

    def _gate(self) -> asyncio.Semaphore:
        if self._in_flight is None:
            self._in_flight = asyncio.Semaphore(self.max_in_flight)
        return self._in_flight

    def _bucket(self, endpoint_id: str, route: str) -> TokenBucket:
        key = (endpoint_id, route)
        bucket = self._buckets.get(key)
        if bucket is None:
            rate = self.status_rate if route == "status" else self.health_rate
            bucket = self._buckets[key] = TokenBucket(rate)
        return bucket

    async def watch(self, job: JobSpec, writer: StreamWriter[JobState] | None = None) -> PollResult:
        """Watch one job to its verdict inside this supervisor.

        `writer`, when given, holds the job stream already replayed (a fleet replica reads
        the handle from the replay): the watch claims the stream from its state.
        """
        self.committer.start()
        handle = job.handle
        spec = WatchSpec.of(
            handle,
            job.policy,
            job.interval_s,
            stream=job.stream,
            heartbeat=job.heartbeat_reader is not None,
            failure_detail=job.failure_detail_reader is not None,
            watcher=self.watcher,
            allow_pickle=job.allow_pickle,
            stoppable=job.stop is not None,
            snapshot_every=self.snapshot_every,
            worker=has_worker_reader(self.client),
        )
        writer = await self._drive(attach_steps(spec, writer, opened=writer is not None), job)
        if not writer.state.done and self.spread > 0:
            await self.sleep(self.rng.uniform(0, self.spread * job.interval_s))
        steps = loop_steps(writer, spec, self.say)
        del spec, writer  # (the watch holds what it needs: one object less per sleeping job)
        verdict = await self._drive(steps, job)
        return PollResult.from_verdict(verdict)

    async def _drive(self, steps: Generator[Request, Any, R], job: JobSpec) -> R:
        """Run a watch generator to its end, performing each request the asyncio way (the
        twin of `flashfsm.writer.run_steps`; an exception is thrown back into the watch).

        Every request is performed right here, the ones every poll makes first: thousands
        of watches make them, so none costs a coroutine or a pattern match of its own.
        """
        # (No bound `steps.send`/`steps.throw` kept in locals: with thousands of watches
        # asleep, every object a suspended watch holds is one more for the collector.)
        clock, handle = self.clock, job.handle
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            try:
                kind = type(request)
                if kind is Clock:
                    reply = clock()
                elif kind is StopAsked:  # (asked only of a job with a `stop`)
                    reply = job.stop is not None and bool(await job.stop())
                elif kind is Sleep:
                    jitter = 1 + self.rng.uniform(0, self.jitter / 10)
                    await self.sleep(request.seconds * jitter)
                    reply = clock()
                elif kind is StatusCall:
                    bucket = self._bucket(handle.endpoint_id, "status")
                    if not bucket.try_take():
                        await bucket.acquire()
                    at = clock()
                    if request.due is not None:
                        late = max(0.0, at - request.due)
                        if len(self.lag) < 1_000_000:
                            self.lag.append(late)
                        if self.lag_observer is not None:
                            self.lag_observer(late)
                    args = (handle.endpoint_id, handle.job_id)
                    reply = await _acall(self._gate(), self.client.job_status, args, at)
                elif kind is Append:  # straight to the group commit
                    await self.committer.append(
                        request.stream, request.events, request.expected_seq
                    )
                elif kind is HealthCall:
                    bucket = self._bucket(handle.endpoint_id, "health")
                    if not bucket.try_take():
                        await bucket.acquire()
                    at = clock()
                    args = (handle.endpoint_id,)
                    reply = await _acall(self._gate(), self.client.endpoint_health, args, at)
                elif kind is ReaderCall:
                    reply = await asyncio.to_thread(
                        call,
                        job.heartbeat_reader
                        if request.reader == "heartbeat"
                        else job.failure_detail_reader,
                        force=request.force,
                        at=request.at,
                    )
                elif kind is ApiCall:  # a read of the platform's records (rare)
                    method = getattr(self.client, request.name, None)
                    reply = await _acall(
                        self._gate(), method, request.args, request.at, request.kwargs
                    )
                elif kind is SaveSnapshot:  # written in the background, after the commit
                    self.snapshots.submit(request)
                else:  # a read of the store
                    reply = await asyncio.to_thread(perform, self.store, request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a store's error: the watch's writer decides
                error = exc

    async def run(self, jobs: Iterable[JobSpec]) -> dict[str, PollResult | BaseException]:
        """Watch every job to its verdict; a job's exception is its result, not the fleet's."""
        self.committer.start()
        specs = list(jobs)
        tasks = []
        for spec in specs:
            task = asyncio.create_task(self.watch(spec))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            tasks.append(task)
        try:
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await self.committer.close()
            await self.snapshots.close()
        return {
            spec.stream or default_stream(spec.handle): outcome
            for spec, outcome in zip(specs, outcomes, strict=True)
        }

    def stop(self) -> None:
        """Stop every watch at its next await; nothing false is recorded."""
        for task in list(self._tasks):
            task.cancel()


class ThreadedClient:
    """A synchronous platform client (`RunpodClient`, a test's scripted one) whose calls a
    `Supervisor` awaits: each method of the wrapped client, run in a worker thread. The
    methods it has are the wrapped client's, so what a watch reads (`has_worker_reader`)
    is the same whichever form drives it."""

    def __init__(self, client: Any):
        self.client = client

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.client, name)
        if name.startswith("_") or not callable(method):
            raise AttributeError(name)

        async def in_a_thread(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return in_a_thread


async def _acall(
    gate: asyncio.Semaphore,
    fn: Callable[..., Awaitable[Any]] | None,
    args: tuple[Any, ...],
    at: float,
    kwargs: dict[str, Any] | None = None,
) -> Outcome:
    if fn is None:  # (a client without the method: no answer, as `watch.call` gives none)
        return Outcome(at)
    try:
        async with gate:
            return Outcome(at, await fn(*args, **(kwargs or {})))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # every failure is an observation
        return Outcome(at, error=exc)


def supervise(
    jobs: Iterable[JobSpec], store: EventStore | str, client: Any, **options: Any
) -> dict[str, PollResult | BaseException]:
    """Run a `Supervisor` over `jobs` to completion from synchronous code."""

    async def main() -> dict[str, PollResult | BaseException]:
        supervisor = Supervisor(store, client, **options)
        supervisor.install_signal_handlers()
        return await supervisor.run(jobs)

    return asyncio.run(main())


__all__ = [
    "GroupCommitter",
    "JobOwnedElsewhere",
    "JobSpec",
    "SnapshotWriter",
    "Supervisor",
    "ThreadedClient",
    "TokenBucket",
    "supervise",
]
