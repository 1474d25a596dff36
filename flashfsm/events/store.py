"""The event-store contract: what every backend implements, and what some offer more.

A store holds streams of events. Each stream's seqs are 0, 1, 2 … with no gap; an append
is atomic for its batch and names the seq its first event must take (`expected_seq`, which
is the stream's current length), so two writers can never interleave in one stream: the
slower one gets a `ConcurrencyError` and must re-read. Event ids are unique across the store.

The contract is declared, not guessed. `EventStore` is what every store has; each optional
capability is a protocol of its own (`LazyReads`, `GroupCommit`, `SnapshotStore`,
`SnapshotBatches`, `BulkReads`, `LeaseStore`). `check_store(store)` checks a store against
them once, when it is opened (`open_store` does): a store that has only part of a
capability's methods is refused (`StoreContractError`), so an outside backend cannot lose
one silently. `capabilities(store)` says what a store offers (resolved once per store
object), and callers ask it — `capabilities(store).snapshots`, `.leases`, … and a
capability's settings, `.snapshot_every` — instead of looking for methods or attributes.
What a backend stores, and how it checks what it reads, is the encoding layer's
(`flashfsm.events.rows`); the suite every backend must pass ships as
`flashfsm.testing.StoreContract`.

Why it is long: it is the store contract, read in one place: each capability's protocol
beside the declaration and the check that enforce it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, cast, runtime_checkable

from flashfsm.events.errors import ConcurrencyError, DuplicateEventError, StaleLease
from flashfsm.events.models import Event
from flashfsm.events.rows import (
    CLOSED_BY,
    HANDOFF,
    OPENED_BY,
    Lease,
    check_batch,
    decode_rows,
    first_misplaced,
    index_change,
    stale_lease,
)

__all__ = [
    "CAPABILITIES",
    "CLOSED_BY",
    "FAILED_REASON_CAP",
    "HANDOFF",
    "INCARNATION_CAP",
    "OPENED_BY",
    "BulkReads",
    "Capabilities",
    "Capability",
    "Census",
    "EventStore",
    "FencedStore",
    "GroupCommit",
    "Holder",
    "Incarnation",
    "LazyReads",
    "Lease",
    "LeaseStore",
    "OpenStream",
    "Replica",
    "SnapshotBatches",
    "SnapshotStore",
    "StoreContractError",
    "append_many",
    "capabilities",
    "check_batch",
    "check_store",
    "decode_rows",
    "first_misplaced",
    "follow_by_polling",
    "index_change",
    "is_mine",
    "iter_events",
    "kinds_text",
    "parse_kinds",
    "stale_lease",
    "undriven",
]


@runtime_checkable
class EventStore(Protocol):
    """What every store offers: the shell, the supervisor and the CLI need only this.

    Errors: an append raises `ConcurrencyError` (a stale `expected_seq`),
    `DuplicateEventError` (an id the store holds, or one the batch repeats) or `ValueError`
    (a batch whose events name another stream or whose seqs do not run from `expected_seq`
    without a gap), and leaves nothing of the batch behind; a read of damaged bytes raises
    `CorruptLogError` (never skips them); a full disk is `StoreFullError`.
    """

    def append(self, stream: str, events: Sequence[Event], expected_seq: int) -> None:
        """Append `events` (seqs `expected_seq`, `expected_seq + 1`, …) atomically.

        Raises `ConcurrencyError` when the stream's next seq is not `expected_seq`, and
        `DuplicateEventError` when an event id is already stored. An empty batch changes
        nothing.
        """
        ...

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        """The stream's events in seq order, only those with seq > `after` when given (a
        stream never appended to reads empty)."""
        ...

    def streams(self) -> list[str]:
        """Every stream name with at least one event, sorted (by code point)."""
        ...

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        """Yield the stream's events after `after`, then each new one as it is appended
        (by this store object, another one, or another process), forever."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class LazyReads(Protocol):
    """A store that decodes a read a chunk at a time (optional): a replay then holds only
    the events its state keeps (`iter_events` uses it)."""

    def iter_read(self, stream: str, after: int | None = None) -> Iterator[Event]:
        """`read(stream, after)` as an iterator: the same events, decoded lazily."""
        ...


@runtime_checkable
class GroupCommit(Protocol):
    """A store that appends many streams' batches in one transaction (optional; the
    supervisor's committer uses it through `append_many`)."""

    def append_many(
        self,
        batches: Sequence[tuple[str, Sequence[Event], int]],
        leases: Sequence[Lease | None] | None = None,
    ) -> list[Exception | None]:
        """Append `(stream, events, expected_seq)` batches in one transaction, each one
        all-or-nothing on its own: per batch, None or the error `append` would have raised
        (`ConcurrencyError`, `DuplicateEventError`, `StaleLease`, `ValueError`), as if the
        batches were appended one by one in order. `leases` (a `LeaseStore`: one per batch,
        or None) fences each batch as `LeaseStore.append`'s `lease` does."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """What a store offers to keep snapshots (optional: a store without it never snapshots).

    A snapshot is the folded state of a stream at a seq, as bytes, with the version of the
    fold's code that made it (`flashfsm.fsm.snapshot`). It is a cache beside the log, never
    part of it: one per stream is kept, and a reader checks it before trusting it.

    The capability has one setting, an attribute the store may declare: `snapshot_every`,
    how many events a watch lets pass between two snapshots (a whole number from 1; None
    or absent: snapshots are read but never written). Callers read it through the
    capability (`capabilities(store).snapshot_every`), and `check_store` refuses any other
    value, or one declared by a store that keeps no snapshots.
    """

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        """Keep `body` as the snapshot of `stream` at `seq`, replacing the one kept unless
        that one is of the same `version` and a later seq."""
        ...

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        """The snapshot kept for `stream`: `(seq, version, body)`, or None."""
        ...


@runtime_checkable
class SnapshotBatches(Protocol):
    """A `SnapshotStore` that keeps many snapshots in one transaction (optional): the
    snapshot writer then saves what falls due together."""

    def save_snapshots(self, snapshots: Sequence[tuple[str, int, int, bytes]]) -> None:
        """`save_snapshot` of many `(stream, seq, version, body)`, all or none."""
        ...


@runtime_checkable
class BulkReads(Protocol):
    """A `SnapshotStore` that reads many streams at once (optional): a fleet replica
    reattaching a batch of streams makes two queries, not two per stream
    (`flashfsm.writer.preload`), and the web view reads the open streams' new events in one."""

    def read_tails(self, afters: Mapping[str, int]) -> dict[str, list[Event]]:
        """`{stream: read(stream, after)}` for every `stream: after` given (a stream with
        nothing after its seq maps to an empty list)."""
        ...

    def load_snapshots(self, streams: Sequence[str]) -> dict[str, tuple[int, int, bytes]]:
        """`{stream: load_snapshot(stream)}` for the given streams that have one."""
        ...


# --- the open-streams index and leases ------------------------------------------------------
#
# A store that can host a fleet (`LeaseStore`: SQLite, PostgreSQL) keeps an index of its
# open streams, updated in the same transaction as the appends that open and close them
# (`flashfsm.events.rows`: an event of a kind in `OPENED_BY` opens its stream, one in
# `CLOSED_BY` closes it). Each open stream a writer handed to the fleet (`HANDOFF`) can be
# leased to one replica at a time; every claim gives the lease a new fencing token, and an
# append made under a lease whose token is no longer the stream's is refused (`StaleLease`)
# in its own transaction.
#
# A stream whose watch fails as it starts on every claim is *marked* (`mark_failed`): its
# row keeps the reason, and no replica claims it again until it is handed off anew, which
# clears the mark (`unmark`). Each replica's heartbeat row says what it drives (`kinds`),
# so a reader can tell a handed-off run that no live replica can drive, and which
# incarnation of its name wrote it (`Incarnation`): a replica restarted under its name
# fences the one before (`LeaseStore.join`), whose heartbeat, claims and leaving then change
# nothing.

#: The longest reason a stream's failed mark keeps (`LeaseStore.mark_failed`).
FAILED_REASON_CAP = 500


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


#: The longest incarnation text a heartbeat row keeps (`Incarnation.text`); a longer or
#: malformed one reads as an unknown incarnation.
INCARNATION_CAP = 1000


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One start of a replica under its name: `id` (unique per start) and what lets a
    newcomer under the same name tell whether it still runs — `host` (its host name),
    `pid`, `started` (a marker of the process's start, so a reused pid is not taken for
    it; "" when unknown) — and how often it beats (`tick_s`). Kept in the replica's
    heartbeat row as `text()`."""

    id: str
    host: str = ""
    pid: int = 0
    started: str = ""
    tick_s: float | None = None

    def text(self) -> str:
        """The incarnation as its heartbeat row keeps it (JSON)."""
        return json.dumps([self.id, self.host, self.pid, self.started, self.tick_s])

    @staticmethod
    def parse(text: str | None) -> Incarnation | None:
        """`text()`'s inverse; None for no text, or one that is not an incarnation's."""
        if text is None or len(text) > INCARNATION_CAP:
            return None
        try:
            id_, host, pid, started, tick_s = json.loads(text)
        except (ValueError, TypeError):
            return None
        fields = (id_, host, started)
        if not all(isinstance(f, str) for f in fields) or type(pid) is not int:
            return None
        if tick_s is not None and not (isinstance(tick_s, int | float) and 0 < tick_s < 1e9):
            return None
        return Incarnation(id_, host, pid, started, None if tick_s is None else float(tick_s))


@dataclass(frozen=True, slots=True)
class Holder:
    """The replica holding a name that `LeaseStore.join` was asked to join under: its
    heartbeat row's `incarnation` (None: the row names none, an older library's replica,
    or there is no row and a live lease holds the name), `heartbeat` (the row's expiry as
    the store keeps it: every beat moves it; None without a row), and, by the store's
    clock, `silent_s` since its last beat and `expires_in` (negative: expired; both None
    without a row). Pass it back as `join(..., replacing=holder)` to take the name over
    if the row still shows exactly this."""

    owner: str
    incarnation: Incarnation | None
    heartbeat: float | None
    silent_s: float | None = None
    expires_in: float | None = None

    @staticmethod
    def of(owner: str, row: Sequence[Any] | None) -> Holder:
        """The holder of `owner` from its heartbeat row as a backend reads it:
        `(incarnation text, expiry, seconds since its last beat, seconds left)`, or None."""
        if row is None:
            return Holder(owner, None, None)
        text, heartbeat, silent_s, expires_in = row
        return Holder(
            owner, Incarnation.parse(text), float(heartbeat), float(silent_s), float(expires_in)
        )

    def same(self, other: Holder | None) -> bool:
        """Whether `other` shows this holder as it was: its incarnation, its heartbeat."""
        mine = None if self.incarnation is None else self.incarnation.id
        theirs = None if other is None or other.incarnation is None else other.incarnation.id
        return other is not None and mine == theirs and self.heartbeat == other.heartbeat


def is_mine(row_text: str | None, incarnation: Incarnation | None) -> bool:
    """Whether a heartbeat row's incarnation text names `incarnation` (None names none)."""
    found = Incarnation.parse(row_text)
    return incarnation is not None and found is not None and found.id == incarnation.id


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


@runtime_checkable
class LeaseStore(Protocol):
    """What a store offers to host a fleet of supervisor replicas (SQLite, PostgreSQL).

    The store keeps the open-streams index (one row per open stream: its kind, parent,
    hand-off flag, `opened_at`, lease owner, expiry, fencing token and failed mark), changed
    only by appends (`flashfsm.events.rows.EncodedBatch`: `opens` adds a row unless the
    stream has one, `closes` removes it and its children's) and by the methods below, and
    one heartbeat row per replica name (owner, expiry, kinds, incarnation). A stream is
    *claimable* when it is handed off, has no parent and no failed mark; it is *free* when
    it has no owner or its lease expired. Times of leases and heartbeats come from the
    store's clock, never a replica's; `ttl_s` is counted from when the store runs the call.

    Incarnations. A replica restarted under its name is a new `Incarnation` of it. `join`
    records the newcomer's incarnation in the name's heartbeat row and *fences* every lease
    still recorded under the name (each stream's token bumped and its lease expired: the
    old incarnation's appends are refused, its renewals and releases change nothing, and
    the newcomer claims the streams at once); it refuses while another incarnation is shown
    alive, and takes the name over from one the caller judged dead (`replacing`) only if
    the row still shows it as it was. `beat`, `claim` and `leave` given an incarnation
    change nothing once the row names another. (None: an anonymous caller, as an older
    library's replica: never refused, never fenced.)
    """

    def append(
        self, stream: str, events: Sequence[Event], expected_seq: int, *, lease: Lease | None = None
    ) -> None:
        """`EventStore.append`, fenced: under a `lease`, the token of the leased stream's
        row is read in the append's transaction and a token other than the lease's (or no
        row) refuses the batch with `StaleLease`; `HANDOFF` hands the stream the batch
        opens to the fleet; a lease on another stream makes it the opened stream's parent."""
        ...

    def claim(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        kinds: Sequence[str] = ("job", "run"),
        *,
        expired_only: bool = False,
        incarnation: Incarnation | None = None,
    ) -> list[Lease]:
        """Lease to `owner` for `ttl_s` at most `limit` claimable streams of `kinds` that
        are free (`expired_only`: only those whose lease expired, not those never held),
        oldest first (`opened_at`, then name), each with its token increased by one: the
        leases (stream, new token, kind). A replica claiming at the same time never gets
        the same stream. Given an `incarnation`, nothing is claimed unless `owner`'s
        heartbeat row names it (a claim and a take-over of the name never interleave)."""
        ...

    def renew(self, owner: str, leases: Sequence[Lease], ttl_s: float) -> list[Lease]:
        """Extend for `ttl_s` the leases `owner` still holds unexpired under the same
        token; returns those (the rest are lost)."""
        ...

    def release(self, owner: str, leases: Sequence[Lease]) -> None:
        """Give the leases back (a replica draining or shedding load): each stream `owner`
        holds under the lease's token is left with no owner (a fenced incarnation's leases
        carry stale tokens: its releases change nothing)."""
        ...

    def beat(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
    ) -> Census | None:
        """Record that `owner` is alive for `ttl_s`, and the kinds of stream it drives
        (`kinds`: None records nothing said); the fleet as it stands: live replicas,
        claimable streams (held or not), those `owner` holds unexpired, and the soonest
        expiry of a lease another replica holds. A heartbeat expired for a day is dropped.
        Given an `incarnation`: None, and nothing recorded, when the row names another one
        (this incarnation was fenced: a newer one holds the name)."""
        ...

    def join(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
        *,
        replacing: Holder | None = None,
    ) -> Census | Holder:
        """`beat` for `incarnation` starting under the name `owner`, in one transaction
        with the check of who holds the name. Free (no unexpired heartbeat, no unexpired
        lease of `owner`), already this incarnation's, or held by `replacing` exactly as
        it shows (same incarnation, same heartbeat): the row is this incarnation's, every
        lease still under the name is fenced (its token bumped, its lease expired), and the
        census is returned. Otherwise the `Holder` as it is now, and nothing recorded."""
        ...

    def leave(self, owner: str, incarnation: Incarnation | None = None) -> None:
        """Forget `owner`'s heartbeat and release every lease it holds; given an
        `incarnation`, only while the heartbeat row names it (else nothing)."""
        ...

    def open_streams(self) -> list[OpenStream]:
        """The open-streams index, oldest first (`opened_at`, then name)."""
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


# --- capabilities, declared and resolved once -----------------------------------------------


class StoreContractError(TypeError):
    """A store that breaks the declared contract: a method of `EventStore` missing, or only
    part of an optional capability's methods (see `check_store`)."""


@dataclass(frozen=True, slots=True)
class Capability:
    """One optional capability: its name (`Capabilities`' attribute), its protocol, the
    methods that make it, the capability it builds on (`needs`), and its settings: the
    attributes a store offering it may declare (each read as `Capabilities`' attribute of
    the same name, and checked by `check_store`)."""

    name: str
    protocol: type
    methods: tuple[str, ...]
    needs: str | None = None
    settings: tuple[str, ...] = ()


#: The methods every store has (`EventStore`).
CORE_METHODS = ("append", "read", "streams", "follow", "close")
#: Every optional capability, in the order `check_store` checks them.
CAPABILITIES = (
    Capability("lazy_reads", LazyReads, ("iter_read",)),
    Capability("group_commit", GroupCommit, ("append_many",)),
    Capability(
        "snapshots", SnapshotStore, ("save_snapshot", "load_snapshot"), settings=("snapshot_every",)
    ),
    Capability("snapshot_batches", SnapshotBatches, ("save_snapshots",), needs="snapshots"),
    Capability("bulk_reads", BulkReads, ("read_tails", "load_snapshots"), needs="snapshots"),
    Capability(
        "leases",
        LeaseStore,
        (
            "claim",
            "renew",
            "release",
            "beat",
            "join",
            "leave",
            "open_streams",
            "replicas",
            "mark_failed",
            "unmark",
            "drop_closed",
        ),
    ),
)


class Capabilities:
    """What one store offers beyond `EventStore` (`capabilities(store)`): each attribute
    is the store itself, typed as the capability's protocol, or None when it lacks it.

        caps = capabilities(store)
        if caps.snapshots is not None:
            kept = caps.snapshots.load_snapshot(stream)

    `names` is the set of capability names it offers (`CAPABILITIES`).
    """

    __slots__ = ("names", "store")

    def __init__(self, store: EventStore, names: frozenset[str]):
        self.store = store
        self.names = names

    def __repr__(self) -> str:
        return f"Capabilities({self.store!r}: {', '.join(sorted(self.names)) or 'none'})"

    def _offer(self, name: str) -> Any:
        return self.store if name in self.names else None

    @property
    def lazy_reads(self) -> LazyReads | None:
        """`iter_read`, a chunk at a time."""
        return cast("LazyReads | None", self._offer("lazy_reads"))

    @property
    def group_commit(self) -> GroupCommit | None:
        """`append_many` in one transaction."""
        return cast("GroupCommit | None", self._offer("group_commit"))

    @property
    def snapshots(self) -> SnapshotStore | None:
        """`save_snapshot`, `load_snapshot`."""
        return cast("SnapshotStore | None", self._offer("snapshots"))

    @property
    def snapshot_every(self) -> int | None:
        """The `SnapshotStore` setting: how many events a watch lets pass between two
        snapshots, as the store declares it now; None when it keeps no snapshots, declares
        none, or declares what is not a whole number from 1."""
        if "snapshots" not in self.names:
            return None
        every = getattr(self.store, "snapshot_every", None)
        return every if _interval(every) else None

    @property
    def snapshot_batches(self) -> SnapshotBatches | None:
        """`save_snapshots` in one transaction."""
        return cast("SnapshotBatches | None", self._offer("snapshot_batches"))

    @property
    def bulk_reads(self) -> BulkReads | None:
        """`read_tails`, `load_snapshots`: many streams in one query."""
        return cast("BulkReads | None", self._offer("bulk_reads"))

    @property
    def leases(self) -> LeaseStore | None:
        """The open-streams index and leases: the store can host a fleet."""
        return cast("LeaseStore | None", self._offer("leases"))


#: Capability names by store object, resolved once (a store is never kept alive by it).
_RESOLVED: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def _interval(every: object) -> TypeGuard[int]:
    """Whether `every` is a `snapshot_every` that asks for snapshots: a whole number from 1."""
    return type(every) is int and every >= 1


def _offered(store: object) -> tuple[frozenset[str], list[str]]:
    """The capabilities `store` has every method of, and what it has only part of."""
    names: set[str] = set()
    partial: list[str] = []
    for capability in CAPABILITIES:
        have = [m for m in capability.methods if callable(getattr(store, m, None))]
        if len(have) == len(capability.methods):
            if capability.needs is None or capability.needs in names:
                names.add(capability.name)
            else:
                partial.append(
                    f"{capability.protocol.__name__} ({', '.join(have)}) without {capability.needs}"
                )
        elif have:
            lacking = [m for m in capability.methods if m not in have]
            partial.append(
                f"part of {capability.protocol.__name__}: {', '.join(have)} without "
                f"{', '.join(lacking)}"
            )
    return frozenset(names), partial


def _remember(store: object, names: frozenset[str]) -> None:
    with contextlib.suppress(TypeError):  # (not weakly referable, or not hashable: resolved
        _RESOLVED[store] = names  # on every call)


def capabilities(store: EventStore) -> Capabilities:
    """What `store` offers beyond `EventStore` (see `Capabilities`), resolved once per store
    object: a capability counts when the store has every one of its methods (and the one
    it builds on). A wrapper that forwards attributes to another store (`FencedStore`)
    offers what the store it wraps offers."""
    try:
        names = _RESOLVED.get(store)
    except TypeError:
        names = None
    if names is None:
        names = _offered(store)[0]
        _remember(store, names)
    return Capabilities(store, names)


def _takes(method: Callable[..., Any], name: str) -> bool:
    """Whether `method` accepts an argument called `name` (or any keyword)."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # (no signature to read: given the benefit of the doubt)
        return True
    return name in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def check_store(store: object) -> Capabilities:
    """Check `store` against the declared contract and return its capabilities (what
    `open_store` does once for every store it opens; a backend's test does it too).

    Raises `StoreContractError` naming every problem: a method of `EventStore` missing;
    part of a capability's methods without the rest (say `claim` without `renew`), or one
    without the capability it builds on (`read_tails` with no snapshots); a `LeaseStore`
    whose `append` takes no `lease` (or whose `append_many` takes no `leases`); a
    capability's setting declared by a store that lacks the capability, or of a wrong value
    (`snapshot_every` neither None nor a whole number from 1).
    """
    problems: list[str] = []
    missing = [m for m in CORE_METHODS if not callable(getattr(store, m, None))]
    if missing:
        problems.append(f"not an EventStore: no {', '.join(missing)}")
    names, partial = _offered(store)
    problems.extend(partial)
    if "leases" in names:
        append = getattr(store, "append", None)
        if append is not None and not _takes(append, "lease"):
            problems.append("a LeaseStore whose append takes no lease")
        if "group_commit" in names and not _takes(store.append_many, "leases"):  # type: ignore[attr-defined]
            problems.append("a LeaseStore whose append_many takes no leases")
    for capability in CAPABILITIES:
        for setting in capability.settings:
            value = getattr(store, setting, None)
            if value is not None and capability.name not in names:
                problems.append(f"{setting} without {capability.protocol.__name__}")
            elif value is not None and setting == "snapshot_every" and not _interval(value):
                problems.append(f"snapshot_every={value!r:.40} (not None or a whole number from 1)")
    if problems:
        raise StoreContractError(f"{store!r} breaks the store contract: {'; '.join(problems)}")
    _remember(store, names)
    return Capabilities(cast(EventStore, store), names)


# --- helpers every caller shares --------------------------------------------------------------


def iter_events(store: EventStore, stream: str, after: int | None = None) -> Iterator[Event]:
    """`store.read(stream, after)` as an iterator, decoded a chunk at a time when the store
    can (`LazyReads`): a replay then holds only the events its state keeps, and decodes
    into memory that is still in the CPU cache.
    """
    lazy = capabilities(store).lazy_reads
    return iter(store.read(stream, after)) if lazy is None else lazy.iter_read(stream, after)


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
    """Append many streams' batches, in one transaction when the store can (`GroupCommit`).

    Returns, per batch, None or the error it raised; one failing batch never blocks another.
    """
    grouped = capabilities(store).group_commit
    if grouped is not None:
        return list(grouped.append_many(batches))
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

    Reads, snapshots and everything else go to the store as they are (its capabilities are
    the store's, and it always offers `append_many`). A fleet replica gives its supervisor
    one of these over its held leases; a run driven by a replica, one that fences every
    stream with the run's lease; intake, one that hands off (`HANDOFF`).
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
        grouped = capabilities(self.inner).group_commit
        if grouped is not None:
            return list(grouped.append_many(batches, leases))
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
