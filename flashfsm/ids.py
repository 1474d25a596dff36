"""Time-ordered unique event ids (ULID layout: 48-bit milliseconds, 80 random bits).

Ids sort by creation time, which keeps a store's unique index append-mostly and cheap.
The milliseconds come from the injected clock, so a virtual-clock test gets ids in
virtual-time order; the random part keeps them unique across processes.
"""

from __future__ import annotations

import os
import threading

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
#: Every pair of digits, indexed by 10 bits: an id is 13 lookups instead of 26.
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_lock = threading.Lock()
_last: tuple[int, int] = (-1, 0)


def new_id(at: float) -> str:
    """A 26-character id for an event made at `at` (seconds); strictly increasing per process."""
    global _last
    ms = max(0, int(at * 1000)) & ((1 << 48) - 1)
    with _lock:
        last_ms, last_rand = _last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1  # same or earlier millisecond: keep ids ordered
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # headroom for increments
        _last = (ms, rand)
    value = (ms << 80) | (rand & ((1 << 80) - 1))
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(120, -1, -10)])


def _forget_after_fork() -> None:
    """A forked child must not continue its parent's sequence: both would make the same ids."""
    global _last
    _last = (-1, 0)


os.register_at_fork(after_in_child=_forget_after_fork)
