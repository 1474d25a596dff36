"""An in-memory event store, for tests and the default of `poll_job`.

It keeps the same guarantees as the durable backends for one process: atomic batches,
`expected_seq` checks, unique ids, and a `follow` that wakes on every append. It keeps
snapshots too (`save_snapshot`, `load_snapshot`), but a watch writes them only when asked:
`MemoryStore(snapshot_every=N)`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from flashfsm.events.errors import DuplicateEventError
from flashfsm.events.models import Event
from flashfsm.events.store import check_batch


class MemoryStore:
    """Streams of events held in a dict; thread-safe."""

    def __init__(self, *, snapshot_every: int | None = None) -> None:
        #: Events between two snapshots of a watched job stream (None: never written).
        self.snapshot_every = snapshot_every
        self._snapshots: dict[str, tuple[int, int, bytes]] = {}
        self._streams: dict[str, list[Event]] = {}
        self._ids: set[str] = set()
        self._changed = threading.Condition()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._streams)} streams)"

    def append(self, stream: str, events: Sequence[Event], expected_seq: int) -> None:
        """Append a batch atomically (see `EventStore.append`)."""
        if not events:
            return
        with self._changed:
            log = self._streams.get(stream, [])
            check_batch(stream, events, expected_seq, len(log))
            for event in events:
                if event.id in self._ids:
                    raise DuplicateEventError(stream, event.id)
            log = self._streams.setdefault(stream, log)
            log.extend(events)
            self._ids.update(event.id for event in events)
            self._changed.notify_all()

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        """The stream's events with seq > `after` (all when None)."""
        with self._changed:
            log = self._streams.get(stream, [])
            start = 0 if after is None else max(0, after + 1)
            return log[start:]

    def streams(self) -> list[str]:
        """Every stream name, sorted."""
        with self._changed:
            return sorted(self._streams)

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        """Yield events after `after`, then wait for new ones (forever; break to stop)."""
        last = -1 if after is None else after
        while True:
            batch = self.read(stream, last)
            if batch:
                yield from batch
                last = batch[-1].seq
                continue
            with self._changed:
                if len(self._streams.get(stream, [])) <= last + 1:
                    self._changed.wait(poll_s)

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        """Keep a snapshot of `stream` (see `SnapshotStore.save_snapshot`)."""
        self.save_snapshots([(stream, seq, version, body)])

    def save_snapshots(self, snapshots: Sequence[tuple[str, int, int, bytes]]) -> None:
        """`save_snapshot` of many `(stream, seq, version, body)` at once."""
        with self._changed:
            for stream, seq, version, body in snapshots:
                kept = self._snapshots.get(stream)
                if kept is None or kept[1] != version or kept[0] <= seq:
                    self._snapshots[stream] = (seq, version, bytes(body))

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        """The snapshot kept for `stream`: `(seq, version, body)`, or None."""
        with self._changed:
            return self._snapshots.get(stream)

    def close(self) -> None:
        """Nothing to release."""
