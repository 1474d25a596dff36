"""The event-store protocol every backend implements.

A store holds streams of events. Each stream's seqs are 0, 1, 2 … with no gap; an append
is atomic for its batch and names the seq its first event must take (`expected_seq`, which
is the stream's current length), so two writers can never interleave in one stream: the
slower one gets a `ConcurrencyError` and must re-read. Event ids are unique across the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from flashfsm.events.errors import ConcurrencyError, DuplicateEventError
from flashfsm.events.models import Event


@runtime_checkable
class EventStore(Protocol):
    """What the shell, the supervisor and the CLI need from a store."""

    def append(self, stream: str, events: Sequence[Event], expected_seq: int) -> None:
        """Append `events` (seqs `expected_seq`, `expected_seq + 1`, …) atomically.

        Raises `ConcurrencyError` when the stream's next seq is not `expected_seq`, and
        `DuplicateEventError` when an event id is already stored.
        """
        ...

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        """The stream's events in seq order, only those with seq > `after` when given."""
        ...

    def streams(self) -> list[str]:
        """Every stream name, sorted."""
        ...

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        """Yield the stream's events after `after`, then each new one as it is appended."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """What a store offers to keep snapshots (optional: a store without it never snapshots).

    A snapshot is the folded state of a stream at a seq, as bytes, with the version of the
    fold's code that made it (`flashfsm.fsm.snapshot`). It is a cache beside the log, never
    part of it: one per stream is kept, and a reader checks it before trusting it.
    """

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        """Keep `body` as the snapshot of `stream` at `seq`, replacing the one kept unless
        that one is of the same `version` and a later seq."""
        ...

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        """The snapshot kept for `stream`: `(seq, version, body)`, or None."""
        ...


def check_batch(stream: str, events: Sequence[Event], expected_seq: int, next_seq: int) -> None:
    """Validate a batch against a stream whose next seq is `next_seq` (shared by backends)."""
    if expected_seq != next_seq:
        raise ConcurrencyError(stream, expected_seq, next_seq)
    ids: set[str] = set()
    for offset, event in enumerate(events):
        if event.stream != stream:
            raise ValueError(
                f"event {event.id!r} belongs to stream {event.stream!r}, not {stream!r}"
            )
        if event.seq != expected_seq + offset:
            raise ValueError(
                f"stream {stream!r}: batch seqs must run from {expected_seq} without a gap, "
                f"found seq {event.seq} at position {offset}"
            )
        if event.id in ids:
            raise DuplicateEventError(stream, event.id)
        ids.add(event.id)


def iter_events(store: EventStore, stream: str, after: int | None = None) -> Iterator[Event]:
    """`store.read(stream, after)` as an iterator, decoded a chunk at a time when the store
    can (an `iter_read` method): a replay then holds only the events its state keeps, and
    decodes into memory that is still in the CPU cache.
    """
    lazy = getattr(store, "iter_read", None)
    return iter(store.read(stream, after)) if lazy is None else lazy(stream, after)


def first_misplaced(events: Sequence[Event], seqs: Sequence[int], stream: str) -> int | None:
    """The index of the first event whose seq is not `seqs[i]` or whose stream is not `stream`.

    What a backend checks after decoding a read: the body of each row or line must be the
    event its position says. Comparing whole lists first keeps the common, all-good case
    off a Python-level loop.
    """
    n = len(events)
    if [e.seq for e in events] == list(seqs[:n]) and [e.stream for e in events].count(stream) == n:
        return None
    for index, event in enumerate(events):
        if event.seq != seqs[index] or event.stream != stream:
            return index
    return None  # pragma: no cover - the fast comparison said otherwise


def follow_by_polling(
    read: Callable[[str, int | None], list[Event]],
    stream: str,
    after: int | None,
    poll_s: float,
    sleep: Callable[[float], None],
) -> Iterator[Event]:
    """`follow` for a backend that can only be polled: re-read after the last seq seen.

    The store's `read` and a `sleep` are passed in, so this module still does no I/O itself.
    """
    last = -1 if after is None else after
    while True:
        batch = read(stream, last)
        if batch:
            for event in batch:
                if event.seq > last:
                    last = event.seq
                    yield event
            continue
        sleep(poll_s)


def append_many(
    store: EventStore, batches: Sequence[tuple[str, Sequence[Event], int]]
) -> list[Exception | None]:
    """Append many streams' batches, in one transaction when the store can (group commit).

    Returns, per batch, None or the error it raised; one failing batch never blocks another.
    """
    grouped = getattr(store, "append_many", None)
    if grouped is not None:
        return list(grouped(batches))
    outcomes: list[Exception | None] = []
    for stream, events, expected_seq in batches:
        try:
            store.append(stream, events, expected_seq)
            outcomes.append(None)
        except (ConcurrencyError, DuplicateEventError, ValueError) as exc:
            outcomes.append(exc)
    return outcomes
