"""The simulator's clock: epoch seconds that can run faster than real time, or by hand.

`SimClock(speed=60)` makes one real second sixty simulated ones, so a scripted hour of a
job's life passes in a minute. `SimClock(speed=0)` stands still until `advance()` (or
`sleep()`) moves it: a test can then pass `clock=sim.clock, sleep=sim.clock.sleep` to
`poll_job` and drive hours of polling over real HTTP in milliseconds.

`async_sleep` is `sleep` for asyncio code (the `Supervisor`'s `sleep=`). On a running
clock it waits `seconds / speed` real seconds. On a manual clock many tasks sleep at once,
so a sleep cannot simply jump the clock (three watches each waiting 10 s would move it
30 s): each sleeper registers when it is due, and once the other tasks have reached their
own waits, the sleeper due first moves the clock to its wake-up time and returns; the others
wake in turn, earliest first. "Reached their own waits": every task that has slept on this
clock and is still running is asleep on it now, and no sleeper has come or gone for
`settle_s` real seconds (for tasks that have not slept yet). A task busy with I/O — an HTTP
call, a commit — is waited for, however slow the machine, so a loaded machine sees the same
simulated times as an idle one; only a task busy for longer than `busy_s` real seconds
(stuck, or waiting on another sleeper) is not: it then sees a later time, as a slow poll
would.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import weakref
from typing import Any


class SimClock:
    """Simulated epoch seconds: `start + speed × real elapsed + manual advances`."""

    def __init__(
        self,
        speed: float = 1.0,
        start: float | None = None,
        *,
        settle_s: float = 0.01,
        busy_s: float = 5.0,
    ):
        if speed < 0:
            raise ValueError(f"speed must be >= 0, got {speed!r}")
        self.speed = float(speed)
        self.start = time.time() if start is None else float(start)
        self.settle_s = settle_s  # see `async_sleep`
        self.busy_s = busy_s
        self._origin = time.monotonic()
        self._offset = 0.0
        self._lock = threading.Lock()
        self._sleepers: set[tuple[float, int]] = set()  # (wake-up time, ticket)
        # The tasks that have slept on this clock (see `async_sleep`), and those asleep now.
        self._tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._asleep: dict[tuple[float, int], asyncio.Task[Any] | None] = {}
        self._tickets = itertools.count()
        self._stirred = 0.0  # when a sleeper last came or went (real, monotonic)

    def __repr__(self) -> str:
        return f"SimClock(speed={self.speed}, elapsed={self.elapsed:.1f})"

    def now(self) -> float:
        """The simulated time (seconds since the epoch)."""
        with self._lock:
            return self._now()

    def _now(self) -> float:  # under the lock
        return self.start + (time.monotonic() - self._origin) * self.speed + self._offset

    __call__ = now

    @property
    def elapsed(self) -> float:
        """Simulated seconds since the clock started."""
        return self.now() - self.start

    @property
    def manual(self) -> bool:
        """True when only `advance` moves the clock."""
        return self.speed == 0

    def advance(self, seconds: float) -> None:
        """Jump forward by `seconds` of simulated time."""
        if seconds < 0:
            raise ValueError(f"cannot go back in time ({seconds!r} s)")
        with self._lock:
            self._offset += seconds

    def sleep(self, seconds: float) -> None:
        """Let `seconds` of simulated time pass: jump when manual, else really wait."""
        if seconds <= 0:
            return
        if self.manual:
            self.advance(seconds)
        else:
            time.sleep(seconds / self.speed)

    async def async_sleep(self, seconds: float) -> None:
        """`sleep` for asyncio: wait `seconds / speed` real seconds, or on a manual clock
        take turns with the other sleepers, earliest wake-up first (see the module notes).

        Give it to the `Supervisor` with the clock: `Supervisor(store, client,
        clock=sim.clock.now, sleep=sim.clock.async_sleep)`.
        """
        if not self.manual:
            await asyncio.sleep(max(0.0, seconds) / self.speed)
            return
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        task = asyncio.current_task()
        with self._lock:
            wake = self._now() + seconds
            ticket = (wake, next(self._tickets))
            self._sleepers.add(ticket)
            self._asleep[ticket] = task
            if task is not None:
                self._tasks.add(task)
            self._stirred = time.monotonic()
        try:
            while True:
                await asyncio.sleep(self.settle_s)
                with self._lock:
                    now = self._now()
                    if now >= wake:
                        return
                    quiet = time.monotonic() - self._stirred
                    settled = quiet >= self.busy_s or (
                        quiet >= self.settle_s and self._all_asleep()
                    )
                    if settled and ticket == min(self._sleepers):
                        self._offset += wake - now
                        return
        finally:
            with self._lock:
                self._sleepers.discard(ticket)
                self._asleep.pop(ticket, None)
                self._stirred = time.monotonic()

    def _all_asleep(self) -> bool:  # under the lock
        """Every task that has slept on this clock and still runs is asleep on it now."""
        asleep = set(self._asleep.values())
        return all(task.done() or task in asleep for task in self._tasks)
