"""The encoding layer every store backend shares: events ↔ rows (pure: no I/O, no clock).

A backend moves bytes and rows; everything that decides what those bytes are is here, so
every backend stores and checks an event alike (eventsourcing calls this the *mapper*, apart
from its thin *recorders*):

- **Writing.** `encode_batch(stream, events, expected_seq, lease)` turns one append into an
  `EncodedBatch`: a `Row` per event — its envelope (stream, seq, id, at, kind), its body
  (the codec's exact JSON bytes, `codec.encode`) and the body's CRC-32 (`codec.checksum`) —
  and what the append does to the open-streams index (`opens`: the row it adds; `closes`: it
  removes the stream and the streams it opened). The batch is encoded before the backend's
  transaction; inside it, the backend reads the stream's next seq (and, for a fenced append,
  the token of its lease's row) and calls `EncodedBatch.check`, which raises what the
  contract says (`ConcurrencyError`, `ValueError` for a malformed batch,
  `DuplicateEventError` for an id repeated inside it, `StaleLease`); then it stores
  `rows`, refuses an id it already holds (`DuplicateEventError`), and applies `opens` /
  `closes`. A line-based backend stores `sealed(row)` (the JSONL line, its checksum inside).
- **Reading.** `decode_rows(where, stream, seqs, bodies, checksums, strict=…)` turns a
  stream's stored rows back into events: every checksum verified (strict mode: a row
  without one is refused), every body decoded — on the light fast path inside
  `light_reads()` when every checksum matched, upcast from an older schema version when it
  is one — and checked to be the event its position says. Anything else is a
  `CorruptLogError` naming `where`, the stream and the seq.

The index's rules: an event of a kind in `OPENED_BY` opens its stream (a `job` or a `run`),
one in `CLOSED_BY` closes it. The lease an append is made under says whose an opened stream
is: `HANDOFF` makes it the fleet's (claimable), a lease on another stream makes that stream
its `parent` (a run's attempts: never leased alone, closed with it), none leaves it to whoever
opened it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from flashfsm.events.codec import decode_prefix, strict_mode, verify_bodies
from flashfsm.events.errors import (
    ConcurrencyError,
    CorruptLogError,
    DuplicateEventError,
    StaleLease,
)
from flashfsm.events.light import light_mode
from flashfsm.events.models import Event

#: Event kinds that open a stream, and the kind of stream they open.
OPENED_BY = {"JobSubmitted": "job", "RunStarted": "run"}
#: Event kinds that close a stream (its verdict).
CLOSED_BY = frozenset({"Concluded", "RunConcluded"})
_INDEXED = CLOSED_BY | frozenset(OPENED_BY)


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


class Opened(NamedTuple):
    """The open-streams index row an append adds (when the stream has none yet)."""

    stream: str
    kind: str
    parent: str | None
    handoff: bool
    opened_at: float


#: One stored event, as a backend keeps it, in column order: `(stream, seq, id, at, kind,
#: body, checksum)` — the envelope, the body (the codec's exact JSON bytes) and the body's
#: CRC-32. A plain tuple (an SQL backend inserts it as it is; sqlite3 binds a tuple subclass
#: by a slower path), made once per event on the append path.
Row = tuple[str, int, str, float, str, bytes, int]


def sealed(row: Row) -> bytes:
    """A row as one sealed JSONL line (`codec.seal`, no newline): its body with its checksum
    as the last member."""
    return b'%s,"_c":"%08x"}' % (row[5][:-1], row[6])


#: A tuple subclass made from a tuple in C (a NamedTuple's own `__new__` is a Python call:
#: on the append path, once per batch).
_make = tuple.__new__


def encode_rows(stream: str, events: Sequence[Event]) -> list[Row]:
    """The rows of `events` of `stream`: each one's body encoded once, and its checksum."""
    rows: list[Row] = []
    keep = rows.append
    crc = zlib.crc32
    for event in events:
        body = event.__pydantic_serializer__.to_json(event)
        keep((stream, event.seq, event.id, event.at, event.kind, body, crc(body)))
    return rows


def index_change(
    stream: str, events: Sequence[Event], lease: Lease | None
) -> tuple[str, str, str | None, bool, float] | bool | None:
    """What an append of `events` to `stream` under `lease` does to the open-streams index
    (every store applies it in the append's own transaction): True closes the stream (and
    the streams it opened), a row `(stream, kind, parent, handoff, opened_at)` (`Opened`)
    opens it (when it is not open yet), None changes nothing."""
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
    return Opened(stream, opened, parent, handoff, events[0].at)


def check_batch(stream: str, events: Sequence[Event], expected_seq: int, next_seq: int) -> None:
    """Validate a batch against a stream whose next seq is `next_seq` (shared by backends)."""
    if expected_seq != next_seq:
        raise ConcurrencyError(stream, expected_seq, next_seq)
    if len(events) == 1:  # (the common batch: one observation)
        event = events[0]
        if event.stream == stream and event.seq == expected_seq:
            return
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


def stale_lease(stream: str, lease: Lease, current: int | None) -> StaleLease | None:
    """The fencing check of an append to `stream` under `lease`, given the token its
    lease row holds now (None: no row): the `StaleLease` to refuse it with, or None."""
    if current == lease.token:
        return None
    return StaleLease(stream, lease.stream, lease.token, current)


class EncodedBatch(NamedTuple):
    """One stream's append, encoded (`encode_batch`): what a backend stores and checks.

    `rows`: the events as rows. `opens`: the index row the append adds when the stream has
    none (None: it opens nothing); `closes`: the append closes the stream, so its row and
    its children's go. `fence`: the stream whose lease row's token the backend reads
    inside its transaction and hands to `check` (None: the append is not fenced).
    `next_seq`: the stream's next seq once the batch is stored. (A tuple: made and read on
    every append.)
    """

    stream: str
    events: Sequence[Event]
    expected_seq: int
    lease: Lease | None
    rows: list[Row]
    opens: Opened | None
    closes: bool
    fence: str | None
    next_seq: int

    def check(self, next_seq: int, token: int | None = None) -> None:
        """Refuse the batch (inside the backend's transaction) against the stream as it
        stands: `check_seq(next_seq)`, then `check_fence(token)`."""
        events = self.events
        if not (  # (the common batch, one event of its stream at its seq, without a call)
            next_seq == self.expected_seq
            and len(events) == 1
            and events[0].seq == next_seq
            and events[0].stream == self.stream
        ):
            check_batch(self.stream, events, self.expected_seq, next_seq)
        if self.fence is not None and token != self.lease.token:  # type: ignore[union-attr]
            raise StaleLease(self.stream, self.fence, self.lease.token, token)  # type: ignore[union-attr]

    def check_seq(self, next_seq: int) -> None:
        """Refuse the batch when the stream's next seq is not its `expected_seq`
        (`ConcurrencyError`) or when it is malformed: an event of another stream, seqs
        with a gap (`ValueError`), an id it repeats (`DuplicateEventError`)."""
        check_batch(self.stream, self.events, self.expected_seq, next_seq)

    def check_fence(self, token: int | None) -> None:
        """When the batch is fenced, refuse it unless `token` (what the lease row of
        `fence` holds now; None: no row) is its lease's (`StaleLease`)."""
        if self.fence is not None and token != self.lease.token:  # type: ignore[union-attr]
            raise StaleLease(self.stream, self.fence, self.lease.token, token)  # type: ignore[union-attr]


def encode_batch(
    stream: str, events: Sequence[Event], expected_seq: int, lease: Lease | None = None
) -> EncodedBatch:
    """An append of `events` to `stream` at `expected_seq` (under `lease`), encoded: its
    rows and its index change (see `EncodedBatch`). Nothing is checked yet."""
    return encode_batches([(stream, events, expected_seq)], None if lease is None else [lease])[0]


def encode_batches(
    batches: Sequence[tuple[str, Sequence[Event], int]],
    leases: Sequence[Lease | None] | None = None,
) -> list[EncodedBatch]:
    """`encode_batch` of each `(stream, events, expected_seq)` of a group commit, under the
    lease of the same index in `leases` (None: none fenced). One loop for the group: on the
    group commit's path, once per batch of every commit."""
    encoded: list[EncodedBatch] = []
    add = encoded.append
    crc = zlib.crc32
    make = _make
    for n, (stream, events, expected_seq) in enumerate(batches):
        lease = None if leases is None else leases[n]
        rows: list[Row] = []
        keep = rows.append
        indexed = False
        for event in events:  # (`encode_rows`, noting on the way whether the index changes)
            kind = event.kind
            body = event.__pydantic_serializer__.to_json(event)
            keep((stream, event.seq, event.id, event.at, kind, body, crc(body)))
            if kind in _INDEXED:
                indexed = True
        opens, closes = None, False
        if indexed:
            change = index_change(stream, events, lease)
            closes = change is True
            if isinstance(change, Opened):
                opens = change
        fence = None if lease is None or lease == HANDOFF else lease.stream
        next_seq = expected_seq + len(rows)
        add(
            make(
                EncodedBatch,
                (stream, events, expected_seq, lease, rows, opens, closes, fence, next_seq),
            )
        )
    return encoded


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
    written: a checksum that does not match (or, strict — `strict` or
    `codec.require_checksums()` in force — a row without one), a body that does not
    decode, or one that says another stream or seq than its row. Rows whose checksums all
    match are decoded on the light fast path inside `light_reads()`; an older schema
    version is upcast.
    """
    strict = strict or strict_mode()
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
