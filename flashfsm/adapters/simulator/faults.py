"""Faults the simulator injects, per route, on a schedule.

`Fault(route, kind, times=1, after=0)` fires on the matching requests number `after + 1`
to `after + times` (`times=None`: forever). `route` is a route name (`status`, `run`,
`health`, `graphql`, `hub_resolve`, …), `graphql:<rootField>` for one GraphQL operation
(`graphql:saveEndpoint`), or `*` for every route.

Kinds, and whether the request takes effect before the fault:

- `status` (or just an int, e.g. `429`, `503`): answer that HTTP status instead of
  handling the request (no effect). `retry_after=` adds a `Retry-After` header and
  `body=` replaces the route's usual error body.
- `reset`: close the connection with a TCP reset before answering (no effect, unless
  `handled=True`: the request took effect and only the answer was lost).
- `slow`: handle the request, then wait `delay_s` real seconds before answering (so a
  client with a shorter timeout gives up although the request took effect).
- `malformed`: handle it, answer 200 with a body that is not JSON.
- `non_object`: handle it, answer 200 with a JSON list.
- `missing_keys`: handle it, answer with `keys` (default: every key) dropped from the
  JSON object.
- `gzip`: handle it, answer with the body gzip-encoded (`Content-Encoding: gzip`).

On the worker-log stream (`worker_logs`) `malformed` ends the stream in half an event
whose data is not JSON, `non_object` adds an event whose data is a JSON list, and
`missing_keys` drops `keys` (default: every key) from each event's data. Two kinds are
only for that stream, to prove a reader bounded in bytes and in time:

- `flood`: the log's lines, then filler lines, `size_bytes` in all (default 50 MiB) in one
  answer, made as they are sent (never held whole); `gzip=True` encodes it (a few hundred
  KiB on the wire that inflate to `size_bytes`).
- `trickle`: one line, then each next one `delay_s` real seconds later, then live lines
  on and on, until the client goes away or the simulator stops (a `delay_s` of an hour is
  a stream that sends a line and stalls); `gzip=True` encodes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

KINDS = frozenset(
    {
        "status",
        "reset",
        "slow",
        "malformed",
        "non_object",
        "missing_keys",
        "gzip",
        "flood",
        "trickle",
    }
)
STREAM_KINDS = frozenset({"flood", "trickle"})  # kinds of the worker-log stream only
STREAM_FAULT_ROUTES = frozenset({"worker_logs"})
DEFAULT_FLOOD_BYTES = 50 * 1024 * 1024
_ALIASES = {
    "rate_limit": ("status", 429),
    "server_error": ("status", 500),
    "timeout": ("slow", None),
}


@dataclass
class Fault:
    """One scheduled fault (see the module notes)."""

    route: str
    kind: str
    times: int | None = 1
    after: int = 0
    status: int | None = None
    retry_after: float | str | None = None
    delay_s: float = 1.0
    body: Any = None
    keys: tuple[str, ...] | None = None
    handled: bool = False
    size_bytes: int = DEFAULT_FLOOD_BYTES
    gzip: bool = False
    when: Callable[[Any], bool] | None = None
    seen: int = 0
    fired: int = 0

    def __post_init__(self) -> None:
        kind: Any = self.kind
        if isinstance(kind, int) or (isinstance(kind, str) and kind.isdigit()):
            self.kind, self.status = "status", int(kind)
        elif kind in _ALIASES:
            self.kind, status = _ALIASES[kind]
            self.status = self.status or status
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {sorted(KINDS)} or a status")
        if self.kind == "status" and not (self.status and 100 <= self.status <= 599):
            raise ValueError("a status fault needs status=<HTTP status>")
        if self.kind in STREAM_KINDS and self.route not in STREAM_FAULT_ROUTES:
            raise ValueError(f"a {self.kind} fault is for worker_logs, not {self.route!r}")
        if self.size_bytes < 0:
            raise ValueError("size_bytes must be >= 0")
        if self.keys is not None:
            self.keys = tuple(self.keys)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times

    def matches(self, names: Iterable[str]) -> bool:
        return self.route == "*" or self.route in names


class FaultPlan:
    """The simulator's faults, in the order they were added; the first applicable fires."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def take(self, names: Iterable[str], request: Any) -> Fault | None:
        """The fault that fires on this request, if any (its counters move)."""
        names = tuple(names)
        with self._lock:
            for fault in self._faults:
                if fault.exhausted or not fault.matches(names):
                    continue
                if fault.when is not None and not fault.when(request):
                    continue
                fault.seen += 1
                if fault.seen <= fault.after:
                    continue
                fault.fired += 1
                return fault
        return None
