"""A fleet of supervisor replicas: every open job and run of a store, watched by whoever is alive.

Theory of operation. Work reaches the fleet through the store (intake): `hand_off_job`
records a job's `JobSubmitted`, `supervise_run(..., detach=True)` a run's `RunStarted`,
each appended as a hand-off (`flashfsm.events.store.HANDOFF`), so the store's open-streams
index lists the stream as open and free, in the same transaction as the append. The
verdict (`Concluded`, `RunConcluded`) removes it, in the same way.

Each replica (`Fleet`, `flashfsm supervise`) runs one asyncio loop. Every `tick_s`:

1. **heartbeat** (`LeaseStore.beat`): the replica says it is alive for `lease_s` and learns
   how many replicas are, and how many streams are open;
2. **renew** every lease it holds (every third of a lease), by the database's clock; a
   lease the store no longer renews (it expired, another replica took it) is lost, and
   its watch is stopped at once. A renewal that fails (the database is unreachable)
   stops every watch at once: the replica cannot know its leases outlive the failure;
3. **balance**: its fair share is the open streams over the live replicas, rounded up; it
   gives back (releases) leases beyond its share plus a slack (a tenth of it, at least
   one: handing a stream over costs a reattach, so small imbalances stay; with three
   replicas none holds more than 37 % or, once they settle, less than 26 %), so a replica that
   joins finds work, and claims (`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL) free
   or expired streams up to its share — at most `claim_batch` per tick, so a replica that
   starts first does not take everything in its first breath — and then any stream whose
   lease expired (its owner died) beyond its share: a dead replica is still counted live
   until its heartbeat expires too, and its streams must not wait for that;
4. **watch** each newly claimed stream: a job in the replica's `Supervisor` (one HTTP
   client, group commit, rate limits), a run in a worker thread (`supervise_run`, with
   the adapters `run_adapters` makes). Both reattach by replay (from the stream's latest
   snapshot when the store keeps one), so a stream taken over from a dead replica picks
   up where the log stops; the time nobody watched is judged as for any reattach (the
   unwatched-gap rule).

Fencing. Every append the replica makes carries the lease of its stream (a run's attempt
streams carry the run's lease); the store refuses one whose fencing token is no longer the
stream's (`StaleLease`), in the append's own transaction. So a replica that was paused or
cut off past its lease cannot write anything once another replica has claimed the stream,
even before it notices. A watch refused that way, or one that finds a newer watch in the
log, ends quietly: the stream is someone else's now.

SIGTERM or SIGINT (`install_signal_handlers`) drains: every watch is stopped at its next
await (nothing false is recorded), pending events are committed, every lease released and
the replica's heartbeat removed, so other replicas take its streams at their next tick
rather than after the lease time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from flashfsm.errors import JobOwnedElsewhere, LeaseLost
from flashfsm.events.errors import StaleLease
from flashfsm.events.models import JobSubmitted, RunStarted
from flashfsm.events.policy import GracePolicy
from flashfsm.events.store import (
    HANDOFF,
    Census,
    EventStore,
    FencedStore,
    Lease,
    LeaseStore,
    iter_events,
)
from flashfsm.fsm.job import JobState
from flashfsm.runs import RunAdapters, supervise_run
from flashfsm.shell import resolve_store
from flashfsm.supervisor import JobSpec, Supervisor
from flashfsm.watch import JobHandle, default_stream, recorded_handle, submission
from flashfsm.writer import JOB, NEWER_WATCH_WINS, Replay, StreamWriter, perform, preload

logger = logging.getLogger("flashfsm.fleet")

#: How long a lease lasts without renewal (seconds, by the database's clock).
DEFAULT_LEASE_S = 30.0
#: Most runs one replica drives at once (a thread each, asleep nearly all the time).
MAX_RUNS = 1024
#: Most streams one replica claims per tick.
DEFAULT_CLAIM_BATCH = 1000

#: Makes the adapters a replica drives a handed-off run with, from its `RunStarted` and the
#: sleep the adapters must use (it raises `LeaseLost` once the run is no longer this
#: replica's, so the run stops at its next wait).
RunAdaptersFactory = Callable[[RunStarted, Callable[[float], None]], RunAdapters]


def hand_off_job(
    handle: JobHandle | dict[str, Any],
    store: EventStore | str,
    *,
    policy: GracePolicy | None = None,
    stream: str | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """Hand a submitted job to the fleet: record its `JobSubmitted` and return at once.

    Returns the job's stream (default `job-<job_id>`); whichever replica is alive claims it
    and watches it to its verdict. A stream that already records this job is left as it
    is (handing off twice is harmless); one that records another job is a `ValueError`.
    The handle is JSON-only there (`trusted_output` is not recorded).
    """
    job = handle if isinstance(handle, JobHandle) else JobHandle.from_dict(handle)
    name = stream or default_stream(job)
    opened = resolve_store(store)
    try:
        _record_hand_off(opened, job, name, policy or GracePolicy(), clock)
    finally:
        if isinstance(store, str):  # opened here: closed here
            opened.close()
    return name


def _record_hand_off(
    store: EventStore, job: JobHandle, name: str, policy: GracePolicy, clock: Callable[[], float]
) -> None:
    _require_leases(store)
    writer = StreamWriter(FencedStore(store, lambda _s: HANDOFF), name, JOB, NEWER_WATCH_WINS)
    writer.open()
    recorded = writer.state.submitted
    if recorded is not None:
        if recorded.job_id != job.job_id:
            raise ValueError(f"stream {name!r} records job {recorded.job_id!r}, not {job.job_id!r}")
        return
    if writer.next_seq:
        raise ValueError(f"stream {name!r} holds events but no submitted job: not a job stream")
    writer.record(JobSubmitted, clock(), **submission(job, policy))


def _require_leases(store: EventStore) -> LeaseStore:
    inner = getattr(store, "inner", store)
    if not isinstance(inner, LeaseStore):
        raise ValueError(
            f"{inner!r} cannot host a fleet: it keeps no open-streams index or leases "
            "(use an SQLite or PostgreSQL store)"
        )
    return inner


def default_owner() -> str:
    """A replica's name: host, process id and a random suffix (unique per start)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class FleetStats:
    """What a replica did, for tests, benches and `flashfsm supervise`'s last line."""

    claimed: int = 0
    released: int = 0
    lost: int = 0
    finished: int = 0
    failed: int = 0
    renew_failures: int = 0
    census: Census | None = None


class _Batched:
    """Runs `work(keys)` for many keys per worker-thread call (it answers one `(ok,
    value)` per key): a replica that claims thousands of streams at once replays them a
    batch at a time in one thread, with the batch's reads made in bulk, instead of one
    thread hop (and one fight for the interpreter lock) and two queries per stream."""

    def __init__(self, work: Callable[[list[str]], list[tuple[bool, Any]]], batch: int = 100):
        self.work = work
        self.batch = batch
        self._pending: list[tuple[str, asyncio.Future[Any]]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, key: str) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((key, future))
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="flashfsm-fleet-replays")
        return await future

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                chunk, self._pending = self._pending[: self.batch], self._pending[self.batch :]
                keys = [key for key, future in chunk if not future.done()]
                outcomes = dict(zip(keys, await asyncio.to_thread(self.work, keys), strict=True))
                for key, future in chunk:
                    if future.done() or key not in outcomes:
                        continue
                    ok, value = outcomes[key]
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


@dataclass
class _Held:
    lease: Lease
    task: asyncio.Task[Any]
    stop: threading.Event


class Fleet:
    """One replica of a fleet: claims open streams of `store`, watches them, hands them on.

    `client` is the async RunPod client the jobs are watched with (see `Supervisor`);
    `run_adapters` (optional) drives handed-off runs, which a replica without it leaves to
    others. `supervisor_options` go to the replica's `Supervisor`.
    """

    def __init__(
        self,
        store: EventStore | str,
        client: Any,
        *,
        owner: str | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        tick_s: float | None = None,
        interval_s: float = 10.0,
        claim_batch: int = DEFAULT_CLAIM_BATCH,
        max_streams: int | None = None,
        run_adapters: RunAdaptersFactory | None = None,
        clock: Callable[[], float] = time.time,
        **supervisor_options: Any,
    ):
        if lease_s <= 0 or interval_s <= 0:
            raise ValueError("lease_s and interval_s must be positive")
        self.store = resolve_store(store)
        self.leases = _require_leases(self.store)
        self.owner = owner or default_owner()
        self.lease_s = lease_s
        # Renew three times per lease at least, and look for free work every poll interval.
        self.tick_s = tick_s if tick_s is not None else min(lease_s / 3, interval_s)
        if not 0 < self.tick_s < lease_s:
            raise ValueError(f"tick_s must be positive and under lease_s ({lease_s:g})")
        self.interval_s = interval_s
        self.claim_batch = claim_batch
        self.max_streams = max_streams
        self.run_adapters = run_adapters
        self.clock = clock
        self.kinds = ("job", "run") if run_adapters is not None else ("job",)
        self._held: dict[str, _Held] = {}
        # Runs block a thread for their whole life: their own pool, so they never starve
        # the loop's default one (heartbeats, renewals, claims, the watches' store reads).
        self._runs: ThreadPoolExecutor | None = None
        self.fenced = FencedStore(self.store, self._lease_of)
        self.supervisor = Supervisor(
            self.fenced, client, clock=clock, watcher=self.owner, **supervisor_options
        )
        self.stats = FleetStats()
        self._stopping: asyncio.Event | None = None
        self._renewed_at = -math.inf  # (monotonic) when the held leases were last renewed
        self._replays = _Batched(self._job_specs)

    def __repr__(self) -> str:
        return f"Fleet({self.owner!r}, {len(self._held)} streams)"

    @property
    def held(self) -> list[str]:
        """The streams this replica holds now, sorted."""
        return sorted(self._held)

    def _lease_of(self, stream: str) -> Lease:
        held = self._held.get(stream)
        # A stream this replica does not hold gets a token no claim ever gives: refused.
        return held.lease if held is not None else Lease(stream, -1)

    # -- the loop --------------------------------------------------------------------------

    async def run(self, *, until: Callable[[], bool] | None = None) -> FleetStats:
        """Run the replica until `stop()` (or a signal, or `until()` turns true), then drain."""
        self._stopping = asyncio.Event()
        self.supervisor.committer.start()
        try:
            first = True
            while not self._stopping.is_set() and not (until is not None and until()):
                await self._tick(claim=not first)  # (first breath: let peers be counted)
                first = False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.tick_s)
        finally:
            await self._drain()
        return self.stats

    def stop(self) -> None:
        """Drain and end `run` (from the event loop's thread; a signal handler calls it)."""
        if self._stopping is not None:
            self._stopping.set()

    def install_signal_handlers(
        self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
    ) -> None:
        """Make SIGINT/SIGTERM drain the replica (call from the running loop)."""
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)

    async def _tick(self, *, claim: bool = True) -> None:
        leases = [held.lease for held in self._held.values()]
        # Renewals every third of a lease (a tick may be much shorter: it is how often the
        # replica looks for free work, and renewing thousands of leases costs a write each).
        started = time.monotonic()
        renew = started - self._renewed_at >= self.lease_s / 3
        try:
            census = await asyncio.to_thread(self.leases.beat, self.owner, self.lease_s)
            kept = leases
            if renew and leases:
                kept = await asyncio.to_thread(self.leases.renew, self.owner, leases, self.lease_s)
                self._renewed_at = started
        except Exception as exc:  # the database is unreachable: any driver's error
            self._renew_failed(exc)
            return
        self.stats.census = census
        still = {lease.stream for lease in kept}
        for lease in leases:
            if lease.stream not in still:
                self._stop_watch(lease.stream, "lease lost")
                self.stats.lost += 1
        if not claim:
            return
        share = math.ceil(census.claimable / max(1, census.replicas))
        if self.max_streams is not None:
            share = min(share, self.max_streams)
        slack = max(1, share // 10)
        if len(self._held) > share + slack and census.replicas > 1:
            await self._shed(len(self._held) - share)
        room = min(share - len(self._held), self.claim_batch)
        await self._claim(room)
        # Streams whose owner died (their lease expired) are taken beyond the fair share:
        # a dead replica still counts among the live ones until its heartbeat expires too,
        # and its streams must not wait for that; balancing sheds the excess later.
        cap = self.claim_batch if self.max_streams is None else self.max_streams
        await self._claim(min(cap - len(self._held), self.claim_batch), expired_only=True)

    async def _claim(self, room: int, *, expired_only: bool = False) -> None:
        if room <= 0:
            return
        try:
            claimed = await asyncio.to_thread(
                functools.partial(
                    self.leases.claim,
                    self.owner,
                    self.lease_s,
                    room,
                    self.kinds,
                    expired_only=expired_only,
                )
            )
        except Exception as exc:
            logger.warning("%s: claim failed (%s)", self.owner, type(exc).__name__)
            return
        for lease in claimed:
            self._start_watch(lease)

    def _renew_failed(self, exc: BaseException) -> None:
        self.stats.renew_failures += 1
        logger.warning(
            "%s: cannot renew leases (%s); stopping all %d watches",
            self.owner,
            type(exc).__name__,
            len(self._held),
        )
        for stream in list(self._held):
            self._stop_watch(stream, "renewal failed")
            self.stats.lost += 1

    async def _shed(self, count: int) -> None:
        """Give back `count` streams (the newest claims first): stop, then release."""
        streams = list(self._held)[-count:]
        held = [self._held[stream] for stream in streams]
        for stream in streams:
            self._stop_watch(stream, "rebalancing")
        await asyncio.gather(*(h.task for h in held), return_exceptions=True)
        await self.supervisor.committer.flush()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.leases.release, self.owner, [h.lease for h in held])
        self.stats.released += len(held)

    def _start_watch(self, lease: Lease) -> None:
        stop = threading.Event()
        task = asyncio.create_task(self._watch(lease, stop), name=f"fleet-{lease.stream}")
        self._held[lease.stream] = _Held(lease, task, stop)
        self.stats.claimed += 1

    def _stop_watch(self, stream: str, why: str) -> None:
        held = self._held.pop(stream, None)
        if held is None:
            return
        logger.info("%s: stops watching %s (%s)", self.owner, stream, why)
        held.stop.set()
        held.task.cancel()

    async def _watch(self, lease: Lease, stop: threading.Event) -> None:
        stream = lease.stream
        try:
            if lease.kind == "run":
                if self._runs is None:
                    self._runs = ThreadPoolExecutor(
                        max_workers=MAX_RUNS, thread_name_prefix="flashfsm-fleet-run"
                    )
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._runs, self._drive_run, lease, stop)
            else:
                spec, writer = await self._replays(stream)
                await self.supervisor.watch(spec, writer)
            self.stats.finished += 1
            # The verdict's append closed the stream's row; a row left open by a writer
            # that keeps no index (an older library) would be claimed again and again.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.leases.drop_closed, stream)
        except asyncio.CancelledError:
            raise
        except (StaleLease, JobOwnedElsewhere, LeaseLost) as exc:
            logger.info("%s: %s is someone else's now (%s)", self.owner, stream, exc)
            self.stats.lost += 1
        except Exception:
            logger.exception("%s: watching %s failed; giving its lease back", self.owner, stream)
            self.stats.failed += 1
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.leases.release, self.owner, [lease])
        finally:
            held = self._held.get(stream)
            if held is not None and held.lease == lease:
                del self._held[stream]

    def _job_specs(self, streams: list[str]) -> list[tuple[bool, Any]]:
        """The watches of handed-off job streams, from their replays (from each stream's
        latest snapshot when the store keeps them, the batch's reads made in bulk): each
        handle is the stream's recorded `JobSubmitted`'s. One `(ok, spec and writer, or
        the error)` per stream."""
        try:
            view = preload(self.fenced, streams, JOB)
        except Exception:  # a bulk read failed: each stream is read on its own
            view = self.fenced
        out: list[tuple[bool, Any]] = []
        for stream in streams:
            try:
                out.append((True, self._job_spec(view, stream)))
            except Exception as exc:
                out.append((False, exc))
        return out

    def _job_spec(self, store: EventStore, stream: str) -> tuple[JobSpec, StreamWriter[JobState]]:
        request = Replay(stream, JOB)
        state: JobState = perform(store, request)
        first = state.submitted
        if first is None:
            raise ValueError(f"stream {stream!r} records no JobSubmitted")
        handle = recorded_handle(first)
        writer = StreamWriter(
            None, stream, JOB, NEWER_WATCH_WINS, state=state, snapshot_seq=request.loaded
        )
        spec = JobSpec(handle, stream=stream, interval_s=self.interval_s, policy=first.policy)
        return spec, writer

    def _drive_run(self, lease: Lease, stop: threading.Event) -> None:
        """Drive a handed-off run (in a worker thread) under its lease."""
        assert self.run_adapters is not None
        first = next(iter_events(self.store, lease.stream), None)
        if not isinstance(first, RunStarted):
            raise ValueError(f"stream {lease.stream!r} does not start with a RunStarted")

        def sleep(seconds: float) -> None:
            if stop.wait(seconds):
                raise LeaseLost(f"{lease.stream}: this replica no longer drives it")

        adapters = self.run_adapters(first, sleep)
        try:
            supervise_run(
                first.run_id,
                first.candidates,
                adapters,
                store=FencedStore(self.store, lambda _stream: lease),
                stream=lease.stream,
                clock=self.clock,
                sleep=sleep,
            )
        finally:
            close = getattr(adapters, "close", None)
            if close is not None:
                close()

    async def _drain(self) -> None:
        """Stop every watch, commit what is pending, give every lease back, leave."""
        held = list(self._held.values())
        for stream in list(self._held):
            self._stop_watch(stream, "draining")
        await asyncio.gather(*(h.task for h in held), return_exceptions=True)
        await self._replays.close()
        if self._runs is not None:  # each run stops at its next wait (its sleep raises)
            await asyncio.to_thread(self._runs.shutdown, wait=True)
            self._runs = None
        with contextlib.suppress(Exception):
            await self.supervisor.committer.close()
        with contextlib.suppress(Exception):
            await self.supervisor.snapshots.close()
        try:
            await asyncio.to_thread(self.leases.release, self.owner, [h.lease for h in held])
            await asyncio.to_thread(self.leases.leave, self.owner)
        except Exception as exc:  # the leases expire by themselves
            logger.warning("%s: could not release its leases (%s)", self.owner, exc)
        self.stats.released += len(held)


def run_fleet(store: EventStore | str, client: Any, **options: Any) -> FleetStats:
    """Run one `Fleet` replica from synchronous code until SIGINT/SIGTERM."""

    async def main() -> FleetStats:
        fleet = Fleet(store, client, **options)
        fleet.install_signal_handlers()
        return await fleet.run()

    return asyncio.run(main())


__all__ = [
    "DEFAULT_LEASE_S",
    "Fleet",
    "FleetStats",
    "RunAdaptersFactory",
    "default_owner",
    "hand_off_job",
    "run_fleet",
]
