"""The simulator's clock: epoch seconds that can run faster than real time, or by hand.

`SimClock(speed=60)` makes one real second sixty simulated ones, so a scripted hour of a
job's life passes in a minute. `SimClock(speed=0)` stands still until `advance()` (or
`sleep()`) moves it: a test can then pass `clock=sim.clock, sleep=sim.clock.sleep` to
`poll_job` and drive hours of polling over real HTTP in milliseconds.
"""

from __future__ import annotations

import threading
import time


class SimClock:
    """Simulated epoch seconds: `start + speed × real elapsed + manual advances`."""

    def __init__(self, speed: float = 1.0, start: float | None = None):
        if speed < 0:
            raise ValueError(f"speed must be >= 0, got {speed!r}")
        self.speed = float(speed)
        self.start = time.time() if start is None else float(start)
        self._origin = time.monotonic()
        self._offset = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SimClock(speed={self.speed}, elapsed={self.elapsed:.1f})"

    def now(self) -> float:
        """The simulated time (seconds since the epoch)."""
        with self._lock:
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
