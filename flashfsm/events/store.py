"""The event-store protocol every backend implements.

A store holds streams of events. Each stream's seqs are 0, 1, 2 … with no gap; an append
is atomic for its batch and names the seq its first event must take (`expected_seq`, which
is the stream's current length), so two writers can never interleave in one stream: the
slower one gets a `ConcurrencyError` and must re-read. Event ids are unique across the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol, runtime_checkable

from flashfsm.events.codec import decode_prefix, verify_bodies
from flashfsm.events.errors import (
    ConcurrencyError,
    CorruptLogError,
    DuplicateEventError,
    StaleLease,
)
from flashfsm.events.light import light_mode
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

    A store may also offer `save_snapshots(snapshots)`, many `(stream, seq, version,
    body)` kept in one transaction: the snapshot writer then saves what falls due together.
    """

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        """Keep `body` as the snapshot of `stream` at `seq`, replacing the one kept unless
        that one is of the same `version` and a later seq."""
        ...

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        """The snapshot kept for `stream`: `(seq, version, body)`, or None."""
        ...


# --- the open-streams index and leases ------------------------------------------------------
#
# A store that can host a fleet (`LeaseStore`: SQLite, PostgreSQL) keeps an index of its
# open streams, updated in the same transaction as the appends that open and close them:
# an event of a kind in `OPENED_BY` opens its stream, one in `CLOSED_BY` closes it. Each
# open stream a writer handed to the fleet (`HANDOFF`) can be leased to one replica at a
# time; every claim gives the lease a new fencing token, and an append made under a lease
# whose token is no longer the stream's is refused (`StaleLease`) in its own transaction.
#
# A stream whose watch fails as it starts on every claim is *marked* (`mark_failed`): its
# row keeps the reason, and no replica claims it again until it is handed off anew, which
# clears the mark (`unmark`). Each replica's heartbeat row says what it drives (`kinds`),
# so a reader can tell a handed-off run that no live replica can drive.

#: Event kinds that open a stream, and the kind of stream they open.
OPENED_BY = {"JobSubmitted": "job", "RunStarted": "run"}
#: Event kinds that close a stream (its verdict).
CLOSED_BY = frozenset({"Concluded", "RunConcluded"})
#: The longest reason a stream's failed mark keeps (`LeaseStore.mark_failed`).
FAILED_REASON_CAP = 500


@dataclass(frozen=True, slots=True)
class Lease:
    """A replica's hold on an open stream: the stream, its kind and the fencing token.

    Appends to the stream, and to the streams it opens (a run's attempts), carry it. A
    stream opened under a lease belongs to the leased one (its `parent`): it is never
    leased on its own, and closing the parent closes it.
    """

    stream: str
    token: int
    kind: str = "job"


#: Appending with this in place of a lease hands the stream the batch opens to the fleet
#: (intake): it is listed as open with no owner, and the next replica to claim takes it.
HANDOFF = Lease("", 0, "handoff")


@dataclass(frozen=True, slots=True)
class OpenStream:
    """One row of the open-streams index, as `LeaseStore.open_streams` reads it.

    `handoff`: the stream waits for, or is watched by, a fleet replica (else whoever
    opened it watches it). `owner` and `expires_in` (seconds, by the database's clock;
    negative once expired) describe its lease; `token` counts its claims. `failed`: why
    its watch failed on every claim (`LeaseStore.mark_failed`); no replica claims it again
    until it is handed off anew.
    """

    stream: str
    kind: str
    parent: str | None
    handoff: bool
    opened_at: float
    owner: str | None
    expires_in: float | None
    token: int
    failed: str | None = None

    @property
    def held(self) -> bool:
        """Whether a replica holds it now (an unexpired lease)."""
        return self.owner is not None and self.expires_in is not None and self.expires_in > 0

    @property
    def claimable(self) -> bool:
        """Whether a replica may claim it when it is free: handed off, not an attempt of a
        run, not marked failed."""
        return self.handoff and self.parent is None and self.failed is None


@dataclass(frozen=True, slots=True)
class Replica:
    """A live replica, as `LeaseStore.replicas` reads its heartbeat row: its name, what it
    drives (`kinds`, e.g. `("job", "run")`; None when its row does not say: an older
    library's) and in how many seconds its heartbeat expires."""

    owner: str
    kinds: tuple[str, ...] | None
    expires_in: float


def kinds_text(kinds: Sequence[str] | None) -> str | None:
    """What a replica drives as its heartbeat row keeps it ("job,run"; None: not said)."""
    return None if kinds is None else ",".join(kinds)


def parse_kinds(text: str | None) -> tuple[str, ...] | None:
    """`kinds_text`'s inverse."""
    return None if text is None else tuple(kind for kind in text.split(",") if kind)


def undriven(row: OpenStream, replicas: Sequence[Replica]) -> str | None:
    """Why nobody drives the handed-off run `row` now, as `flashfsm ls` says it: "no live
    replica", or "no live replica drives runs" when every live replica says it drives no
    runs. None when it is held, not a claimable run, or a live replica may drive it (or
    does not say what it drives)."""
    if row.kind != "run" or not row.claimable or row.held:
        return None
    if not replicas:
        return "no live replica"
    if all(r.kinds is not None and "run" not in r.kinds for r in replicas):
        return "no live replica drives runs"
    return None


@dataclass(frozen=True, slots=True)
class Census:
    """What one replica's heartbeat learns: live replicas (itself included), open streams
    that a replica may lease, how many of those this replica holds, and in how many
    seconds the soonest unexpired lease another replica holds expires (None: it holds
    none), so a replica can be there to take a dead peer's streams the moment they free."""

    replicas: int
    claimable: int
    held: int
    next_expiry_s: float | None = None


def index_change(
    stream: str, events: Sequence[Event], lease: Lease | None
) -> tuple[str, str, str | None, bool, float] | bool | None:
    """What an append of `events` to `stream` under `lease` does to the open-streams index
    (every store applies it in the append's own transaction): True closes the stream (and
    the streams it opened), a row `(stream, kind, parent, handoff, opened_at)` opens it
    (when it is not open yet), None changes nothing."""
    opened: str | None = None
    for event in events:
        kind = event.kind
        if kind in CLOSED_BY:
            return True
        if kind in OPENED_BY:
            opened = OPENED_BY[kind]
    if opened is None:
        return None
    handoff = lease == HANDOFF
    parent = lease.stream if lease is not None and not handoff and lease.stream != stream else None
    return (stream, opened, parent, handoff, events[0].at)


@runtime_checkable
class LeaseStore(Protocol):
    """What a store offers to host a fleet of supervisor replicas (SQLite, PostgreSQL).

    Claims pass over streams marked failed (`mark_failed`). Times of leases and
    heartbeats come from the database's clock, never a replica's.
    """

    def append(
        self, stream: str, events: Sequence[Event], expected_seq: int, *, lease: Lease | None = None
    ) -> None:
        """`EventStore.append`, fenced: with a lease, `StaleLease` when its token is stale."""
        ...

    def claim(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        kinds: Sequence[str] = ("job", "run"),
        *,
        expired_only: bool = False,
    ) -> list[Lease]:
        """Lease to `owner` for `ttl_s` at most `limit` handed-off open streams of `kinds`
        that nobody holds (or whose lease expired; `expired_only`: only those), oldest
        first, each with a new fencing token."""
        ...

    def renew(self, owner: str, leases: Sequence[Lease], ttl_s: float) -> list[Lease]:
        """Extend the leases `owner` still holds unexpired; returns those (the rest are lost)."""
        ...

    def release(self, owner: str, leases: Sequence[Lease]) -> None:
        """Give the leases back (a replica draining or shedding load)."""
        ...

    def beat(self, owner: str, ttl_s: float, kinds: Sequence[str] | None = None) -> Census:
        """Record that `owner` is alive for `ttl_s`, and the kinds of stream it drives
        (`kinds`: None records nothing said); the fleet as it stands (a marked stream is
        not claimable)."""
        ...

    def join(self, owner: str, ttl_s: float, kinds: Sequence[str] | None = None) -> Census | None:
        """`beat` for a replica starting under the name `owner`, in one transaction with
        the check that no live replica holds that name (an unexpired heartbeat or lease of
        `owner`): None, and nothing recorded, when one does."""
        ...

    def leave(self, owner: str) -> None:
        """Forget `owner`'s heartbeat and release every lease it holds."""
        ...

    def open_streams(self) -> list[OpenStream]:
        """The open-streams index, oldest first."""
        ...

    def replicas(self) -> list[Replica]:
        """The live replicas (an unexpired heartbeat), by name."""
        ...

    def mark_failed(self, owner: str, lease: Lease, reason: str) -> bool:
        """Mark `lease`'s stream as failed to start, keeping `reason` (its first
        `FAILED_REASON_CAP` characters): no replica claims it again until `unmark`. Fenced:
        only while `owner` holds the stream under `lease`'s token (True when marked). The
        lease stays held: the replica releases it."""
        ...

    def unmark(self, stream: str) -> bool:
        """Clear `stream`'s failed mark, so replicas claim it again (what handing it off
        anew does). True when a mark went."""
        ...

    def drop_closed(self, stream: str) -> bool:
        """Remove `stream` (and the streams it opened) from the index if its log holds its
        verdict: a row a writer that keeps no index (an older library) left open. True
        when a row went."""
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


_SEQ = attrgetter("seq")
_STREAM = attrgetter("stream")


def first_misplaced(events: Sequence[Event], seqs: Sequence[int], stream: str) -> int | None:
    """The index of the first event whose seq is not `seqs[i]` or whose stream is not `stream`.

    What a backend checks after decoding a read: the body of each row or line must be the
    event its position says. Comparing whole lists first keeps the common, all-good case
    off a Python-level loop.
    """
    n = len(events)
    if list(map(_SEQ, events)) == list(seqs[:n]) and list(map(_STREAM, events)).count(stream) == n:
        return None
    for index, event in enumerate(events):
        if event.seq != seqs[index] or event.stream != stream:
            return index
    return None  # pragma: no cover - the fast comparison said otherwise


def stale_lease(stream: str, lease: Lease, current: int | None) -> StaleLease | None:
    """The fencing check of an append to `stream` under `lease`, given the token its
    lease row holds now (None: no row): the `StaleLease` to refuse it with, or None."""
    if current == lease.token:
        return None
    return StaleLease(stream, lease.stream, lease.token, current)


def decode_rows(
    where: str,
    stream: str,
    seqs: Sequence[int],
    bodies: Sequence[bytes],
    checksums: Sequence[int | None],
    *,
    strict: bool,
) -> list[Event]:
    """The events of a table's rows of `stream` (each a seq, its body's bytes and the
    checksum stored beside it), each checked against its checksum and its position.

    Raises `CorruptLogError` (naming `where`) at the first row that is not what was
    written: a checksum that does not match (or, `strict`, a row without one), a body that
    does not decode, or one that says another stream or seq than its row. Rows whose
    checksums all match are decoded on the light fast path inside `light_reads()`.
    """
    bad_sum = verify_bodies(bodies, checksums, strict=strict)
    checked = bodies if bad_sum is None else bodies[:bad_sum]
    light = light_mode() and not strict and None not in checksums
    events, error = decode_prefix(checked, light=light)
    bad = first_misplaced(events, seqs, stream)
    if bad is not None:
        event = events[bad]
        problem = f"the body says stream {event.stream!r} seq {event.seq}, not the row's"
        raise CorruptLogError(where, stream, problem, seq=seqs[bad])
    if error is not None:
        raise CorruptLogError(where, stream, str(error), seq=seqs[len(events)]) from error
    if bad_sum is not None:
        problem = (
            "the row carries no checksum (strict mode requires one)"
            if checksums[bad_sum] is None
            else "checksum mismatch: the row's body is not what was written"
        )
        raise CorruptLogError(where, stream, problem, seq=seqs[bad_sum])
    return events


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


class FencedStore:
    """A store seen through leases: every append carries the lease `lease_of(stream)` gives
    for its stream (None: unfenced), so the store fences it (`LeaseStore.append`).

    Reads, snapshots and everything else go to the store as they are. A fleet replica gives
    its supervisor one of these over its held leases; a run driven by a replica, one that
    fences every stream with the run's lease; intake, one that hands off (`HANDOFF`).
    """

    def __init__(self, store: EventStore, lease_of: Callable[[str], Lease | None]):
        self.inner = store
        self.lease_of = lease_of

    def __repr__(self) -> str:
        return f"FencedStore({self.inner!r})"

    def append(self, stream: str, events: Sequence[Event], expected_seq: int) -> None:
        """The store's append, under the stream's lease."""
        self.inner.append(stream, events, expected_seq, lease=self.lease_of(stream))  # type: ignore[call-arg]

    def append_many(
        self, batches: Sequence[tuple[str, Sequence[Event], int]]
    ) -> list[Exception | None]:
        """A group commit, each batch under its stream's lease (one transaction when the
        store can, else batch by batch)."""
        leases = [self.lease_of(stream) for stream, _, _ in batches]
        grouped = getattr(self.inner, "append_many", None)
        if grouped is not None:
            return list(grouped(batches, leases))
        outcomes: list[Exception | None] = []
        for (stream, events, expected_seq), lease in zip(batches, leases, strict=True):
            try:
                self.inner.append(stream, events, expected_seq, lease=lease)  # type: ignore[call-arg]
                outcomes.append(None)
            except (ConcurrencyError, DuplicateEventError, StaleLease, ValueError) as exc:
                outcomes.append(exc)
        return outcomes

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)
