"""A fleet replica's keeper: the thread that keeps it alive in the store.

The keeper (`Fleet`'s, started as the replica runs) beats the replica's heartbeat every
tick and renews every lease it holds every third of a lease, by the database's clock, from
a thread of its own, so no replay, group commit or burst of polls on the replica's loop
can delay a renewal; it renews only while the loop answers it (within half a lease). Each
round's outcome goes back to the loop (`_call_soon`): the census, the leases the renewal
did not keep (their watches stop, `_lose`), a renewal that failed (every watch stops), or
a newer incarnation of the replica's name (`_fenced`: the replica stops).

It was part of `flashfsm.fleet` (see its theory of operation, steps 1 and 2).
`KeepsItsLeases` holds `Fleet`'s keeper methods (`Fleet` inherits them, unchanged); this
module imports nothing of the fleet's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from flashfsm.events.store import Census, Lease

#: (The fleet's logger: a replica's lines name it, wherever its code lives.)
logger = logging.getLogger("flashfsm.fleet")

#: How long a watch whose lease was not renewed may take to show it just ended (seconds).
LOSS_GRACE_S = 1.0


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Have `loop` run `callback(*args)` (from another thread); nothing once it closed."""
    with contextlib.suppress(RuntimeError):  # (the loop closed: the replica is done)
        loop.call_soon_threadsafe(callback, *args)


class KeepsItsLeases:
    """The keeper of a `Fleet` (which inherits these methods): `_start_keeper` and
    `_stop_keeper` on the loop, `_keep` in the keeper's thread, and what the loop does with
    each round's outcome. They use the replica's attributes (`owner`, `lease_s`, `tick_s`,
    `kinds`, `incarnation`, `leases`, `stats`, the streams it holds and their lock, its
    loop's events) and its `_stop_watch` and `stop`."""

    def _start_keeper(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop_seen = time.monotonic()
        self._keeper_stop.clear()
        self._keeper = threading.Thread(
            target=self._keep, args=(loop,), name=f"flashfsm-keeper-{self.owner}", daemon=True
        )
        self._keeper.start()

    def _keep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Heartbeat every tick, renew every third of a lease, tell the loop what came of it.

        Runs in its own thread with the store's own lease connections: however busy the
        loop is, a renewal is never late because of it. But it renews only while the loop
        answers (a callback it schedules each round runs within half a lease): leases of a
        hung loop lapse, and other replicas take its streams.
        """
        renew_every, renewed = self.lease_s / 3, time.monotonic()
        pinged = -math.inf  # when the loop was asked the question it has not answered yet
        while not self._keeper_stop.wait(self.tick_s):
            now = time.monotonic()
            if self._loop_seen >= pinged:  # (answered: ask again)
                pinged = now
                _call_soon(loop, self._answer)
            sent: list[Lease] = []
            kept: list[Lease] | None = None
            try:
                census = self.leases.beat(self.owner, self.lease_s, self.kinds, self.incarnation)
                if census is None:  # a newer incarnation holds the name: nothing more
                    _call_soon(loop, self._fenced)
                    return
                if now + self.tick_s - renewed > renew_every:  # (the next round: too late)
                    if now - renewed > self.lease_s / 2:
                        logger.warning(
                            "%s: leases renewed %.1f s apart (lease %g s): the database or "
                            "this host is slow",
                            self.owner,
                            now - renewed,
                            self.lease_s,
                        )
                    renewed = now
                    if self._loop_seen >= pinged or now - pinged <= self.lease_s / 2:
                        with self._held_lock:
                            sent = [held.lease for held in self._held.values()]
                        kept = self.leases.renew(self.owner, sent, self.lease_s) if sent else []
                    else:
                        logger.warning(
                            "%s: the loop has not answered for %.1f s; its leases lapse",
                            self.owner,
                            now - pinged,
                        )
            except Exception as exc:  # the database is unreachable: any driver's error
                _call_soon(loop, self._renew_failed, exc)
                continue
            _call_soon(loop, self._kept, census, sent, kept)

    def _answer(self) -> None:
        self._loop_seen = time.monotonic()

    def _fenced(self) -> None:
        """(On the loop.) A newer incarnation of the name took over: stop every watch (its
        leases were fenced) and end `run`, writing nothing more."""
        if self.stats.fenced:
            return
        self.stats.fenced = True
        logger.info("%s: fenced by a newer incarnation: stopping", self.owner)
        for stream in list(self._held):
            self._stop_watch(stream, "fenced")
            self.stats.lost += 1
        self.stop()

    def _census(self, census: Census) -> None:
        self.stats.census = census
        after = census.next_expiry_s
        self._next_expiry = math.inf if after is None else time.monotonic() + after
        if self._woken is not None:  # (the loop's next tick)
            self._woken.set()

    def _kept(self, census: Census, sent: list[Lease], kept: list[Lease] | None) -> None:
        """(On the loop.) A keeper round's outcome: the census, and the leases the renewal
        of `sent` did not keep, whose watches stop (unless the stream was given back or
        claimed anew meanwhile: then its lease is another)."""
        self._census(census)
        if kept is None:
            return
        still = set(kept)
        for lease in sent:
            held = self._held.get(lease.stream)
            if lease not in still and held is not None and held.lease == lease:
                task = asyncio.create_task(self._lose(lease, held.task))
                self._losing.add(task)
                task.add_done_callback(self._losing.discard)

    async def _lose(self, lease: Lease, watch: asyncio.Task[Any]) -> None:
        """Stop the watch of a lease the store no longer renews, unless its watch is just
        ending: a renewal that waited on the row locks of a group commit finds the rows of
        the streams whose verdicts it committed gone, and those watches are not lost but
        done (each forgets its lease once its verdict is committed)."""
        await asyncio.wait({watch}, timeout=LOSS_GRACE_S)
        held = self._held.get(lease.stream)
        if held is not None and held.lease == lease:
            self._stop_watch(lease.stream, "lease lost")
            self.stats.lost += 1

    async def _stop_keeper(self) -> None:
        self._keeper_stop.set()
        if self._keeper is not None:
            await asyncio.to_thread(self._keeper.join)
            self._keeper = None

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
