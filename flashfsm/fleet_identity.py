"""A fleet replica's identity: its name, its incarnations, and how it joins under that name.

A replica runs under a name (`owner`, default `default_owner()`); each start of it is an
incarnation (`this_incarnation`: a random id, its host, pid and the pid's start marker).
Joining (`Fleet.join`, `LeaseStore.join`) takes the name over from another incarnation only
when that one is shown dead: at once when its process is gone (`gone`, which
`process_started` lets it tell on the same host and boot), else once its heartbeat stood
still while watched (`WATCH_TICKS` of its ticks and a margin); `OwnerInUse` when its
heartbeat advanced.

It was part of `flashfsm.fleet`, which re-exports its public names. `JoinsTheFleet` holds
`Fleet`'s joining methods (`Fleet` inherits them, unchanged); this module imports nothing
of the fleet's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flashfsm.events.errors import FlashFsmError
from flashfsm.events.store import Census, Holder, Incarnation

#: (The fleet's logger: a replica's lines name it, wherever its code lives.)
logger = logging.getLogger("flashfsm.fleet")


def default_owner() -> str:
    """A replica's name: host, process id and a random suffix (unique per start)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# --- incarnations: one start of a replica under its name ------------------------------------

#: A live holder of a name beats every tick: a newcomer watches its heartbeat for two of
#: its ticks and a margin (half a tick, at least `WATCH_MARGIN_S`) from its last beat.
WATCH_TICKS = 2.0
WATCH_MARGIN_S = 1.0


def process_started(pid: int) -> str | None:
    """A marker of when process `pid` of this host started (Linux: the boot's id and the
    start time in clock ticks, from /proc), so a pid reused by another process is not taken
    for it; "" when this host cannot say; None when no such process runs (a zombie, ended
    and not yet reaped, counts as gone)."""
    if pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else _signalable(pid)
    except OSError:
        return _signalable(pid)
    fields = stat[stat.rfind(")") + 2 :].split()  # (the name, in parentheses, may hold spaces)
    if fields and fields[0] in ("Z", "X"):
        return None
    if len(fields) < 20:
        return ""
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot}:{fields[19]}" if boot else ""


def _signalable(pid: int) -> str | None:
    """ "" when process `pid` exists (its start unknown), None when it does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # (it exists, another user's)
        pass
    return ""


def this_incarnation(tick_s: float) -> Incarnation:
    """A new incarnation for a replica of this process that beats every `tick_s`."""
    pid = os.getpid()
    started = process_started(pid) or ""
    return Incarnation(uuid.uuid4().hex, socket.gethostname(), pid, started, tick_s)


def gone(holder: Incarnation | None, me: Incarnation) -> str | None:
    """Why the incarnation `holder` cannot be running, as `me` (a newcomer under its name)
    can tell — "pid N on host H is gone" — or None when it cannot be shown: only on the
    same host and boot, where its pid no longer runs or runs another process (its start
    marker differs), or is `me`'s own with another start marker (a container restarted)."""
    if holder is None or not holder.started or not me.started or holder.host != me.host:
        return None
    if holder.started.partition(":")[0] != me.started.partition(":")[0]:
        return None  # (another boot, or another machine of the same name: pids say nothing)
    now = me.started if holder.pid == me.pid else process_started(holder.pid)
    if now is None or (now and now != holder.started):
        return f"pid {holder.pid} on host {holder.host} is gone"
    return None


class OwnerInUse(FlashFsmError, ValueError):
    """A replica was started under the name (`owner`) of one shown to be alive (its
    heartbeat advanced while the newcomer watched it): two replicas under one name would
    fence each other in turn."""


class JoinsTheFleet:
    """`Fleet.join` and its helpers: a `Fleet` inherits them. They use the replica's
    attributes (`owner`, `lease_s`, `tick_s`, `kinds`, `incarnation`, `leases`, `stats`, and
    its loop's events and lease threads) and its `_leased`, `_census` and
    `_close_lease_calls`."""

    async def join(self) -> bool:
        """Join the fleet under `owner` as this incarnation (`LeaseStore.join`): the
        replica's first heartbeat, the census its first claims are sized by. A name held by
        another incarnation is taken over — every lease under it fenced, to be claimed
        again at once — when that one is shown dead: at once when its process is gone
        (`gone`), else once its heartbeat stood still while watched (two of its ticks and
        a margin, never more than its heartbeat has left). `OwnerInUse` when it advanced:
        nothing recorded or claimed, the live replica left alone. While the store does not
        answer, it tries again every tick; False when the replica was stopped first. `run`
        joins first when this was not called."""
        if self._joined:
            return True
        if self._stopping is None or self._woken is None:
            self._stopping, self._woken = asyncio.Event(), asyncio.Event()
        if self._lease_calls is None:
            self._lease_calls = ThreadPoolExecutor(2, thread_name_prefix="flashfsm-fleet-leases")
        replacing: Holder | None = None
        dead: str | None = None
        while not self._stopping.is_set():
            try:
                outcome = await self._leased(
                    functools.partial(
                        self.leases.join,
                        self.owner,
                        self.lease_s,
                        self.kinds,
                        self.incarnation,
                        replacing=replacing,
                    )
                )
            except Exception as exc:  # the database is unreachable: any driver's error
                self.stats.renew_failures += 1
                logger.warning(
                    "%s: cannot join the fleet (%s); trying again", self.owner, type(exc).__name__
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.tick_s)
                continue
            if isinstance(outcome, Census):
                if replacing is not None:
                    self._say_taken_over(replacing, dead)
                self._census(outcome)
                self._joined = True
                return True
            if replacing is not None:  # its heartbeat advanced (or another newcomer won)
                self._refuse(outcome)
            replacing, dead = outcome, gone(outcome.incarnation, self.incarnation)
            if dead is None:
                self._watched_from = time.monotonic()
                await self._watch_holder(outcome)
        self._close_lease_calls()
        return False

    def _watch_s(self, holder: Holder) -> float:
        """How long to watch `holder`'s heartbeat before taking its name: two of its ticks
        and a margin from its last beat, never past its heartbeat's expiry nor a lease."""
        tick = (holder.incarnation and holder.incarnation.tick_s) or self.tick_s
        wait = WATCH_TICKS * tick + max(tick / 2, WATCH_MARGIN_S) - (holder.silent_s or 0.0)
        if holder.expires_in is not None:
            wait = min(wait, holder.expires_in + 0.05)
        return max(0.0, min(wait, self.lease_s))

    async def _watch_holder(self, holder: Holder) -> None:
        assert self._stopping is not None
        wait = self._watch_s(holder)
        logger.debug("%s: held by another incarnation; watching its heartbeat", self.owner)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), wait)

    def _say_taken_over(self, holder: Holder, dead: str | None) -> None:
        if dead is not None:
            logger.info("%s: took over from a dead incarnation (%s)", self.owner, dead)
            return
        still = (holder.silent_s or 0.0) + time.monotonic() - self._watched_from
        logger.info(
            "%s: took over: the holder's heartbeat stood still for %.1f s", self.owner, still
        )

    def _refuse(self, holder: Holder) -> None:
        """Raise `OwnerInUse`: `holder` was shown alive (its heartbeat advanced)."""
        self._close_lease_calls()
        logger.info(
            "%s: refused: the holder is alive (its heartbeat advanced)",
            self.owner,
            extra={"raised": True},  # (the error says it: `flashfsm supervise` prints it once)
        )
        who = holder.incarnation
        where = "" if who is None else f" (pid {who.pid} on host {who.host!r})"
        raise OwnerInUse(
            f"replica name {self.owner!r} is held by a live replica{where}: its heartbeat "
            "advanced while this one watched it. Choose another --owner, or start this one "
            "once that replica has stopped"
        )
