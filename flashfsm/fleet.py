"""A fleet of supervisor replicas: every open job and run of a store, watched by whoever is alive.

Theory of operation. Work reaches the fleet through the store (intake): `hand_off_job`
records a job's `JobSubmitted`, `supervise_run(..., detach=True)` a run's `RunStarted`,
each appended as a hand-off (`flashfsm.events.store.HANDOFF`), so the store's open-streams
index lists the stream as open and free, in the same transaction as the append. The
verdict (`Concluded`, `RunConcluded`) removes it, in the same way.

Each replica (`Fleet`, `flashfsm supervise`) runs one asyncio loop for its watches, and
keeps itself alive in the store from a thread of its own (the keeper), so no replay, group
commit or burst of polls on the loop can delay a renewal:

1. **heartbeat** (`LeaseStore.beat`, every `tick_s`): the replica says it is alive for
   `lease_s` and learns how many replicas are, how many streams are open, and when the
   soonest lease another replica holds expires;
2. **renew** every lease it holds (every third of a lease), by the database's clock; a
   lease the store no longer renews (it expired, another replica took it) is lost, and
   its watch is stopped at once. A renewal that fails (the database is unreachable)
   stops every watch at once: the replica cannot know its leases outlive the failure.
   The keeper renews only while the loop answers it (within half a lease): a replica
   whose loop hangs lets its leases lapse rather than hold streams nobody watches.

Every `tick_s`, and the moment another replica's lease is due to expire, the loop:

3. **balances**: its fair share is the open streams over the live replicas, rounded up; it
   gives back (releases) leases beyond its share plus a slack (a tenth of it, at least
   one: handing a stream over costs a reattach, so small imbalances stay; with three
   replicas none holds more than 37 % or, once they settle, less than 26 %), so a replica that
   joins finds work, and claims (`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL) free
   or expired streams up to its share — at most `claim_batch` per tick, so a replica that
   starts first does not take everything in its first breath — and then any stream whose
   lease expired (its owner died) beyond its share: a dead replica is still counted live
   until its heartbeat expires too, and its streams must not wait for that (those whose
   lease had lapsed before the replica started, it claims as it starts, not a tick later);
4. **watches** each newly claimed stream: a job in the replica's `Supervisor` (one HTTP
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

A stream whose watch fails as it starts on `MAX_CLAIM_FAILURES` claims in a row (a damaged
log, a run nothing can deploy) is marked failed with its reason on its row of the index
(`LeaseStore.mark_failed`, fenced by its lease) and given back: no replica claims it again
until it is handed off anew (`hand_off_job`, `flashfsm runs add`, `supervise_run(...,
detach=True)` on its stream), which clears the mark (`LeaseStore.unmark`).

SIGTERM or SIGINT (`install_signal_handlers`) drains: every watch is stopped at its next
await (nothing false is recorded), pending events are committed, every lease released and
the replica's heartbeat removed, so other replicas take its streams at their next tick
rather than after the lease time.

Beside this module: `flashfsm.fleet_intake` (what a hand-off may say, `hand_off_job`),
`flashfsm.fleet_identity` (a replica's name and incarnations, `Fleet.join`) and
`flashfsm.fleet_keeper` (the keeper thread); `Fleet` inherits the methods of the last two,
and this module re-exports their public names.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from flashfsm.adapters.hub import hub_readers
from flashfsm.errors import JobOwnedElsewhere, LeaseLost
from flashfsm.events.errors import StaleLease
from flashfsm.events.models import RunStarted
from flashfsm.events.store import (
    FAILED_REASON_CAP,
    Census,
    EventStore,
    FencedStore,
    Lease,
    iter_events,
)
from flashfsm.events.text import redact_then_cap
from flashfsm.fleet_identity import JoinsTheFleet, this_incarnation
from flashfsm.fleet_identity import OwnerInUse as OwnerInUse
from flashfsm.fleet_identity import default_owner as default_owner
from flashfsm.fleet_identity import process_started as process_started
from flashfsm.fleet_intake import MAX_INTAKE_BYTES as MAX_INTAKE_BYTES
from flashfsm.fleet_intake import MAX_INTAKE_DEPTH as MAX_INTAKE_DEPTH
from flashfsm.fleet_intake import MAX_INTERVAL_S as MAX_INTERVAL_S
from flashfsm.fleet_intake import hand_off_job as hand_off_job
from flashfsm.fleet_intake import job_intake as job_intake
from flashfsm.fleet_intake import load_intake as load_intake
from flashfsm.fleet_intake import require_leases
from flashfsm.fleet_intake import run_intake as run_intake
from flashfsm.fleet_keeper import KeepsItsLeases
from flashfsm.fsm.job import JobState
from flashfsm.naming import check_plain
from flashfsm.run_adapters import RunAdapters, RunpodRunAdapters
from flashfsm.runs import supervise_run
from flashfsm.shell import resolve_store
from flashfsm.supervisor import JobSpec, StopsOnSignals, Supervisor
from flashfsm.watch import recorded_handle
from flashfsm.writer import JOB, NEWER_WATCH_WINS, Replay, StreamWriter, perform, preload

logger = logging.getLogger("flashfsm.fleet")

#: How long a lease lasts without renewal (seconds, by the database's clock).
DEFAULT_LEASE_S = 30.0
#: The longest lease a replica takes (`flashfsm supervise --lease`).
MAX_LEASE_S = 86_400.0
#: Most runs one replica drives at once (a thread each, asleep nearly all the time).
MAX_RUNS = 1024
#: Most streams one replica claims per tick.
DEFAULT_CLAIM_BATCH = 1000
#: Failures in a row after which a stream is marked failed to start, and claimed no more
#: until it is handed off anew (`LeaseStore.mark_failed`).
MAX_CLAIM_FAILURES = 3
#: How often a replica that cannot drive runs looks for handed-off runs it has not named.
UNDRIVEN_EVERY_S = 60.0

#: Makes the adapters a replica drives a handed-off run with, from its `RunStarted` and the
#: sleep the adapters must use (it raises `LeaseLost` once the run is no longer this
#: replica's, so the run stops at its next wait).
RunAdaptersFactory = Callable[[RunStarted, Callable[[float], None]], RunAdapters]


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
    #: A newer incarnation of the replica's name took over: this one stopped (`Fleet.run`).
    fenced: bool = False
    #: Failures in a row of each stream's watch (from its claim); a stream that reaches
    #: `MAX_CLAIM_FAILURES` is marked failed in the store (`LeaseStore.mark_failed`: no
    #: replica claims it again until it is handed off anew), given back, and kept in
    #: `failed_streams` with its reason.
    claim_failures: dict[str, int] = field(default_factory=dict)
    failed_streams: dict[str, str] = field(default_factory=dict)


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
    #: A run's worker thread (its future), once it started: a stream given back waits for it.
    worker: Future[None] | None = None


class Fleet(JoinsTheFleet, KeepsItsLeases, StopsOnSignals):
    """One replica of a fleet: claims open streams of `store`, watches them, hands them on.

    `client` is the async RunPod client the jobs are watched with (see `Supervisor`);
    `owner` names the replica (default `default_owner()`; a control character in it is a
    `ValueError`: it is written in its log lines and in every lease it holds);
    `run_adapters` (optional) drives handed-off runs, which a replica without it leaves to
    others. `supervisor_options` go to the replica's `Supervisor`. A run's thread waits on
    the real clock; `run_sleep` (a blocking `sleep(seconds)`, e.g. a simulator clock's) makes
    its waits on the time `clock` keeps instead — a run given back stops at its next wait.
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
        no_runs_reason: str = "no run adapters",
        clock: Callable[[], float] = time.time,
        run_sleep: Callable[[float], Any] | None = None,
        **supervisor_options: Any,
    ):
        if lease_s <= 0 or interval_s <= 0:
            raise ValueError("lease_s and interval_s must be positive")
        if owner:
            check_plain(owner, "owner")
        self.store = resolve_store(store)
        self.leases = require_leases(self.store)
        self.owner = owner or default_owner()
        self.lease_s = lease_s
        idle_s = getattr(self.leases, "idle_in_transaction_s", None)
        if idle_s is not None and lease_s <= idle_s:
            logger.warning(
                "%s: a lease of %g s is not longer than the store's idle-in-transaction "
                "timeout (%g s): a paused replica's row locks can hide its streams past "
                "its lease",
                self.owner,
                lease_s,
                idle_s,
            )
        # Renew three times per lease at least, and look for free work every poll interval.
        self.tick_s = tick_s if tick_s is not None else min(lease_s / 3, interval_s)
        if not 0 < self.tick_s < lease_s:
            raise ValueError(f"tick_s must be positive and under lease_s ({lease_s:g})")
        #: This start of the replica under its name (what a newcomer under it judges).
        self.incarnation = this_incarnation(self.tick_s)
        self.interval_s = interval_s
        self.claim_batch = claim_batch
        self.max_streams = max_streams
        self.run_adapters = run_adapters
        self.no_runs_reason = no_runs_reason
        self._undriven: set[str] = set()  # the runs it said it cannot drive
        self._undriven_due = -math.inf  # (monotonic) when to look for such runs again
        self.clock = clock
        self.run_sleep = run_sleep
        self.kinds = ("job", "run") if run_adapters is not None else ("job",)
        # The streams held: changed on the loop, under the lock, which the keeper thread
        # takes to read the leases it renews.
        self._held: dict[str, _Held] = {}
        self._held_lock = threading.Lock()
        self._keeper: threading.Thread | None = None
        self._keeper_stop = threading.Event()
        self._loop_seen = -math.inf  # (monotonic) when the loop last answered the keeper
        self._next_expiry = math.inf  # (monotonic) when another replica's lease expires
        # Runs block a thread for their whole life: their own pool, so they never starve
        # the loop's default one (heartbeats, renewals, claims, the watches' store reads).
        self._runs: ThreadPoolExecutor | None = None
        self.fenced = FencedStore(self.store, self._lease_of)
        self.supervisor = Supervisor(
            self.fenced, client, clock=clock, watcher=self.owner, **supervisor_options
        )
        self.stats = FleetStats()
        self._stopping: asyncio.Event | None = None
        self._woken: asyncio.Event | None = None
        self._losing: set[asyncio.Task[None]] = set()
        # The loop's lease calls (claims, releases) have threads of their own: never queued
        # behind the watches' store reads, commits and replays in the default pool.
        self._lease_calls: ThreadPoolExecutor | None = None
        self._replays = _Batched(self._job_specs)
        self._joined = False
        self._watched_from = 0.0  # (monotonic) when it began to watch a holder's heartbeat

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

    async def _say_undriven(self) -> None:
        """A replica that cannot drive runs says so, in one warning naming the handed-off
        runs that wait for a replica that can (those nobody holds), as it starts and then
        at most every `UNDRIVEN_EVERY_S` for the runs it has not named yet."""
        if self.run_adapters is not None or time.monotonic() < self._undriven_due:
            return
        self._undriven_due = time.monotonic() + UNDRIVEN_EVERY_S
        try:
            rows = await self._leased(self.leases.open_streams)
        except Exception:  # (the census and the claims say when the store is unreachable)
            return
        waiting = [o.stream for o in rows if o.kind == "run" and o.claimable and not o.held]
        new = [stream for stream in waiting if stream not in self._undriven]
        self._undriven = set(waiting)
        if new:
            shown = ", ".join(new[:5]) + (f" and {len(new) - 5} more" if len(new) > 5 else "")
            logger.warning(
                "%s: cannot drive runs (%s): %d handed-off run(s) wait for a replica that can: %s",
                self.owner,
                self.no_runs_reason,
                len(new),
                shown,
            )

    def _close_lease_calls(self) -> None:
        if self._lease_calls is not None:
            self._lease_calls.shutdown(wait=False)
            self._lease_calls = None

    async def run(self, *, until: Callable[[], bool] | None = None) -> FleetStats:
        """Run the replica until `stop()` (or a signal, or `until()` turns true), then drain.

        It joins the fleet first (`join`: `OwnerInUse` when a live replica has its name)."""
        if not await self.join():
            return self.stats
        assert self._stopping is not None
        self.supervisor.committer.start()
        try:
            self._start_keeper()
            await self._say_undriven()
            # Streams whose owner died before this replica started are taken at once: a
            # replica restarted after its leases lapsed polls again without waiting a tick.
            await self._claim_expired()
            await self._pause(expiry=False)  # (first breath: the next census counts the peers)
            while not self._stopping.is_set() and not (until is not None and until()):
                await self._tick()
                await self._say_undriven()
                await self._pause()
        finally:
            await self._drain()
        return self.stats

    async def _pause(self, *, expiry: bool = True) -> None:
        """Wait for the keeper's next census (every `tick_s`), or until another replica's
        lease expires if that is sooner and `expiry` (a dead peer's streams are taken the
        moment they free, not up to a tick later), or until the replica stops. (If no
        census comes, the database being slow, the loop goes on after two ticks.)"""
        assert self._woken is not None
        self._woken.clear()
        wait = self._next_expiry + 0.05 - time.monotonic() if expiry else 0.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._woken.wait(), wait if 0 < wait < self.tick_s else 2 * self.tick_s
            )

    def stop(self) -> None:
        """Drain and end `run` (from the event loop's thread; a signal handler calls it)."""
        if self._stopping is not None and self._woken is not None:
            self._stopping.set()
            self._woken.set()

    # -- claims and balance (on the loop) -----------------------------------------------------

    async def _tick(self) -> None:
        census = self.stats.census
        if census is None:  # (no heartbeat has got through yet)
            return
        share = math.ceil(census.claimable / max(1, census.replicas))
        if self.max_streams is not None:
            share = min(share, self.max_streams)
        slack = max(1, share // 10)
        if len(self._held) > share + slack and census.replicas > 1:
            await self._shed(len(self._held) - share)
        room = min(share - len(self._held), self.claim_batch)
        await self._claim(room)
        await self._claim_expired()

    async def _claim_expired(self) -> None:
        """Claim streams whose owner died (their lease expired) beyond the fair share: a
        dead replica still counts among the live ones until its heartbeat expires too, and
        its streams must not wait for that; balancing sheds the excess later."""
        cap = math.inf if self.max_streams is None else self.max_streams
        await self._claim(int(min(cap - len(self._held), self.claim_batch)), expired_only=True)

    async def _claim(self, room: int, *, expired_only: bool = False) -> None:
        if room <= 0:
            return
        try:
            claimed = await self._leased(
                functools.partial(
                    self.leases.claim,
                    self.owner,
                    self.lease_s,
                    room,
                    self.kinds,
                    expired_only=expired_only,
                    incarnation=self.incarnation,
                )
            )
        except Exception as exc:
            logger.warning("%s: claim failed (%s)", self.owner, type(exc).__name__)
            return
        if claimed:
            what = "expired leases" if expired_only else "its share"
            logger.info("%s: claims %d streams (%s)", self.owner, len(claimed), what)
        for lease in claimed:
            self._start_watch(lease)

    async def _shed(self, count: int) -> None:
        """Give back `count` streams (the newest claims first): stop, then release — a run
        only once its worker thread has stopped (at its next wait), so nothing of it acts
        after its lease is another replica's to take."""
        streams = list(self._held)[-count:]
        held = [self._held[stream] for stream in streams]
        for stream in streams:
            self._stop_watch(stream, "rebalancing")
        await asyncio.gather(*(h.task for h in held), return_exceptions=True)
        workers = [h.worker for h in held if h.worker is not None]
        await asyncio.gather(*map(asyncio.wrap_future, workers), return_exceptions=True)
        await self.supervisor.committer.flush()
        with contextlib.suppress(Exception):
            await self._leased(self.leases.release, self.owner, [h.lease for h in held])
        self.stats.released += len(held)

    def _start_watch(self, lease: Lease) -> None:
        if lease.stream in self._held:  # its own lease lapsed (a hung loop) and it claimed
            self._stop_watch(lease.stream, "lease lost")  # the stream anew: one watch only
            self.stats.lost += 1
        stop = threading.Event()
        task = asyncio.create_task(self._watch(lease, stop), name=f"fleet-{lease.stream}")
        with self._held_lock:
            self._held[lease.stream] = _Held(lease, task, stop)
        self.stats.claimed += 1

    def _forget(self, stream: str, lease: Lease | None = None) -> _Held | None:
        """Stop holding `stream` (only under `lease`, when given): the keeper renews it no more."""
        held = self._held.get(stream)
        if held is None or (lease is not None and held.lease != lease):
            return None
        with self._held_lock:
            del self._held[stream]
        return held

    def _stop_watch(self, stream: str, why: str) -> None:
        held = self._forget(stream)
        if held is None:
            return
        logger.info("%s: stops watching %s (%s)", self.owner, stream, why)
        held.stop.set()
        held.task.cancel()

    async def _watch(self, lease: Lease, stop: threading.Event) -> None:
        stream = lease.stream
        unwatched = False  # (held on, unwatched: it failed on every claim, and the mark did not)
        try:
            if lease.kind == "run":
                if self._runs is None:
                    self._runs = ThreadPoolExecutor(
                        max_workers=MAX_RUNS, thread_name_prefix="flashfsm-fleet-run"
                    )
                worker = self._runs.submit(self._drive_run, lease, stop)
                held = self._held.get(stream)
                if held is not None and held.lease == lease:
                    held.worker = worker
                await asyncio.wrap_future(worker)
            else:
                spec, writer = await self._replays(stream)
                await self.supervisor.watch(spec, writer)
            self.stats.finished += 1
            self.stats.claim_failures.pop(stream, None)
            self._forget(stream, lease)  # (its verdict closed it: no lease left to renew)
            # The verdict's append closed the stream's row; a row left open by a writer
            # that keeps no index (an older library) would be claimed again and again.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.leases.drop_closed, stream)
        except asyncio.CancelledError:
            raise
        except (StaleLease, JobOwnedElsewhere, LeaseLost) as exc:
            logger.info("%s: %s is someone else's now (%s)", self.owner, stream, exc)
            self.stats.lost += 1
        except Exception as exc:
            # A replica back from a pause finds its sessions ended and its leases taken:
            # that failure is a lease lost, not a broken watch.
            if not await self._still_held(lease):
                logger.info("%s: %s was someone else's when it failed", self.owner, stream)
                self.stats.lost += 1
                return
            self.stats.failed += 1
            failures = self.stats.claim_failures[stream] = 1 + self.stats.claim_failures.get(
                stream, 0
            )
            if failures >= MAX_CLAIM_FAILURES:  # it fails on every claim: marked, given back
                unwatched = not await self._mark_failed(lease, exc, failures)
                if unwatched:
                    return
            else:
                logger.exception(
                    "%s: watching %s failed; giving its lease back", self.owner, stream
                )
            with contextlib.suppress(Exception):
                await self._leased(self.leases.release, self.owner, [lease])
        finally:
            if not unwatched:
                self._forget(stream, lease)

    async def _mark_failed(self, lease: Lease, exc: Exception, failures: int) -> bool:
        """Mark the stream of `lease`, whose watch failed on `failures` claims in a row,
        failed to start with the reason (`LeaseStore.mark_failed`), so no replica claims it
        again until it is handed off anew. True when the lease may be given back: marked,
        or no longer this replica's; False when the store could not be told, and the
        replica keeps holding it unwatched (until it drains), so no one claims it in a loop."""
        stream = lease.stream
        reason = redact_then_cap(f"{type(exc).__name__}: {exc}", FAILED_REASON_CAP)
        self.stats.failed_streams[stream] = reason
        self.stats.claim_failures.pop(stream, None)  # (handed off anew, it starts afresh)
        try:
            marked = await self._leased(self.leases.mark_failed, self.owner, lease, reason)
        except Exception as error:
            logger.warning(
                "%s: %s failed on %d claims in a row, and cannot be marked so (%s); held "
                "unwatched: %s",
                self.owner,
                stream,
                failures,
                type(error).__name__,
                reason,
            )
            return False
        if marked:
            logger.warning(
                "%s: %s failed on %d claims in a row; marked failed to start and given back "
                "(hand it off again to retry): %s",
                self.owner,
                stream,
                failures,
                reason,
            )
        return True

    async def _leased(self, call: Callable[..., Any], *args: Any) -> Any:
        """`call(*args)` (a lease operation of the store) in the replica's lease threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._lease_calls, functools.partial(call, *args))

    async def _still_held(self, lease: Lease) -> bool:
        """Whether the store still gives this replica `lease` (renewing it); when the store
        cannot say, yes."""
        try:
            kept = await self._leased(self.leases.renew, self.owner, [lease], self.lease_s)
        except Exception:
            return True
        return bool(kept)

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
        heartbeat, failure_detail = hub_readers(first.hub, clock=self.clock)
        spec = JobSpec(
            handle,
            stream=stream,
            interval_s=first.interval_s or self.interval_s,
            policy=first.policy,
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
        )
        return spec, writer

    def _drive_run(self, lease: Lease, stop: threading.Event) -> None:
        """Drive a handed-off run (in a worker thread) under its lease."""
        assert self.run_adapters is not None
        first = next(iter_events(self.store, lease.stream), None)
        if not isinstance(first, RunStarted):
            raise ValueError(f"stream {lease.stream!r} does not start with a RunStarted")

        def sleep(seconds: float) -> None:
            if self.run_sleep is None:
                stopped = stop.wait(seconds)
            else:
                self.run_sleep(seconds)
                stopped = stop.is_set()
            if stopped:
                raise LeaseLost(f"{lease.stream}: this replica no longer drives it")

        adapters = self.run_adapters(first, sleep)
        if isinstance(adapters, RunpodRunAdapters) and adapters.watcher is None:
            adapters.watcher = self.owner  # (each attempt's WatchStarted names this replica)
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
        await self._stop_keeper()  # (what was pending is committed: the leases may go)
        try:
            await self._leased(self.leases.release, self.owner, [h.lease for h in held])
            await self._leased(self.leases.leave, self.owner, self.incarnation)
        except Exception as exc:  # the leases expire by themselves
            logger.warning("%s: could not release its leases (%s)", self.owner, exc)
        self.stats.released += len(held)
        self._close_lease_calls()
        self._joined = False
        self._stopping = self._woken = None


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
