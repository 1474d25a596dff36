"""An event-store backend written outside flashfsm, only against its documented contract
(docs/stores.md), and registered as a plug-in: the scheme `dict` by the entry point
`dict = tests.outside_store:open_dict_store` of the group `flashfsm.stores`.

`DictStore` keeps its tables in the dicts of a `Location` (what a file or a database is to
the other backends: store objects may share one) and moves rows only: the encoding layer
(`flashfsm.events.rows`) makes each append's rows, checksums and index change, and checks
each batch and each read. It implements every capability: `EventStore`, `LazyReads`,
`GroupCommit`, `SnapshotStore` (with its `snapshot_every` setting), `SnapshotBatches`,
`BulkReads` and `LeaseStore` (the open-streams index, leases, heartbeats, by its own clock).

A `Location` lives in memory, or in a file that processes share (`dict:///abs/tables.pkl`,
what another process opens by URL): each transaction then holds an exclusive `flock` of
the file, loads the tables from it and writes them back. `distribution()` registers the
entry point without an installer: a `*.dist-info` directory that `importlib.metadata`
finds on `sys.path`. (The file is pickled: it is the tests' own, in their scratch
directory.)
"""

from __future__ import annotations

import contextlib
import fcntl
import pickle
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

from flashfsm.adapters.urls import url_path
from flashfsm.errors import StoreNotFound
from flashfsm.events.errors import DuplicateEventError, StoreError
from flashfsm.events.models import Event
from flashfsm.events.rows import CLOSED_BY, EncodedBatch, Row, decode_rows, encode_batch
from flashfsm.events.store import (
    FAILED_REASON_CAP,
    Census,
    Holder,
    Incarnation,
    Lease,
    OpenStream,
    Replica,
    follow_by_polling,
    is_mine,
)


@dataclass(slots=True)
class _Open:
    """One row of the open-streams index."""

    stream: str
    kind: str
    parent: str | None
    handoff: bool
    opened_at: float
    owner: str | None = None
    expires: float | None = None
    token: int = 0
    failed: str | None = None

    def claimable(self) -> bool:
        return self.handoff and self.parent is None and self.failed is None

    def live(self, now: float) -> bool:
        return self.owner is not None and self.expires is not None and self.expires > now

    def left(self, now: float) -> float | None:
        return None if self.expires is None else self.expires - now


class Location:
    """The tables: rows by stream, ids, snapshots, the index, heartbeats; in memory, or in
    the file `path` (shared by processes; `read_only`: never written)."""

    def __init__(self, path: Path | None = None, *, read_only: bool = False) -> None:
        self.path, self.read_only, self.depth = path, read_only, 0
        self.lock = threading.RLock()
        self.rows: dict[str, list[Row]] = {}
        self.ids: set[str] = set()
        self.snapshots: dict[str, tuple[int, int, bytes]] = {}
        self.open: dict[str, _Open] = {}
        # (expiry, kinds, incarnation text, last beat) by replica name
        self.beats: dict[str, tuple[float, tuple[str, ...] | None, str | None, float]] = {}

    def tables(self) -> tuple[object, ...]:
        return self.rows, self.ids, self.snapshots, self.open, self.beats

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the tables alone (re-entrant): a file's are loaded, then saved unless the
        block raised (which so changes nothing)."""
        with self.lock:
            if self.path is None or self.depth:
                self.depth += 1
                try:
                    yield
                finally:
                    self.depth -= 1
                return
            with open(self.path, "rb" if self.read_only else "a+b") as file:
                fcntl.flock(file, fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX)
                file.seek(0)
                kept = file.read() or pickle.dumps(({}, set(), {}, {}, {}))
                self.rows, self.ids, self.snapshots, self.open, self.beats = pickle.loads(kept)
                kept = pickle.dumps(self.tables()) if self.read_only else kept
                self.depth = 1
                try:
                    yield
                finally:
                    self.depth = 0
                changed = pickle.dumps(self.tables())
                if changed != kept and self.read_only:
                    raise StoreError(f"{self.path}: opened read-only")
                if changed != kept:
                    file.seek(0)
                    file.truncate()
                    file.write(changed)


def open_dict_store(url: str, *, read_only: bool = False) -> DictStore:
    """The `dict` scheme's opener (the plug-in's entry point): `dict://` a new store in
    memory, `dict:///abs/tables.pkl` one in that file (`read_only`: it must exist)."""
    if url.partition(":")[2] in ("", "//"):
        return DictStore(Location())
    path = url_path(url)
    if read_only and not path.is_file():
        raise StoreNotFound(str(path))
    return DictStore(Location(path, read_only=read_only))


class DictStore:
    """An event store in a `Location`; every operation holds its lock (a transaction)."""

    def __init__(self, where: Location, *, strict: bool = False) -> None:
        self.where, self.strict, self.snapshot_every = where, strict, 100

    # -- EventStore (append fenced: LeaseStore) -------------------------------------------

    def append(
        self, stream: str, events: Sequence[Event], expected_seq: int, *, lease: Lease | None = None
    ) -> None:
        if events:
            batch = encode_batch(stream, events, expected_seq, lease)
            with self.where.transaction():
                self._append(batch)

    def _append(self, batch: EncodedBatch) -> None:
        where, fence = self.where, batch.fence
        row = None if fence is None else where.open.get(fence)
        batch.check(len(where.rows.get(batch.stream, ())), None if row is None else row.token)
        ids = [row[2] for row in batch.rows]  # (a row: stream, seq, id, at, kind, body, crc)
        for event_id in ids:
            if event_id in where.ids:
                raise DuplicateEventError(batch.stream, event_id)
        where.rows.setdefault(batch.stream, []).extend(batch.rows)
        where.ids.update(ids)
        if batch.closes:
            for name in [s for s, o in where.open.items() if batch.stream in (s, o.parent)]:
                del where.open[name]
        elif batch.opens is not None and batch.stream not in where.open:
            where.open[batch.stream] = _Open(*batch.opens)

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        with self.where.transaction():
            rows = self.where.rows.get(stream, [])[0 if after is None else max(0, after + 1) :]
        seqs, bodies, sums = [r[1] for r in rows], [r[5] for r in rows], [r[6] for r in rows]
        return decode_rows("dict store", stream, seqs, bodies, sums, strict=self.strict)

    def streams(self) -> list[str]:
        with self.where.transaction():
            return sorted(stream for stream, rows in self.where.rows.items() if rows)

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        return follow_by_polling(self.read, stream, after, poll_s, time.sleep)

    def close(self) -> None:
        """Nothing is held."""

    # -- LazyReads, GroupCommit ------------------------------------------------------------

    def iter_read(self, stream: str, after: int | None = None) -> Iterator[Event]:
        return iter(self.read(stream, after))

    def append_many(
        self,
        batches: Sequence[tuple[str, Sequence[Event], int]],
        leases: Sequence[Lease | None] | None = None,
    ) -> list[Exception | None]:
        outcomes: list[Exception | None] = []
        fences = list(leases) if leases is not None else [None] * len(batches)
        with self.where.transaction():
            for (stream, events, expected), lease in zip(batches, fences, strict=True):
                try:
                    if events:
                        self._append(encode_batch(stream, events, expected, lease))
                    outcomes.append(None)
                except (StoreError, ValueError) as exc:
                    outcomes.append(exc)
        return outcomes

    # -- SnapshotStore, SnapshotBatches, BulkReads ----------------------------------------

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        self.save_snapshots([(stream, seq, version, body)])

    def save_snapshots(self, snapshots: Sequence[tuple[str, int, int, bytes]]) -> None:
        with self.where.transaction():
            for stream, seq, version, body in snapshots:
                kept = self.where.snapshots.get(stream)
                if kept is None or kept[1] != version or kept[0] <= seq:
                    self.where.snapshots[stream] = (seq, version, bytes(body))

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        with self.where.transaction():
            return self.where.snapshots.get(stream)

    def load_snapshots(self, streams: Sequence[str]) -> dict[str, tuple[int, int, bytes]]:
        with self.where.transaction():
            return {s: self.where.snapshots[s] for s in streams if s in self.where.snapshots}

    def read_tails(self, afters: Mapping[str, int]) -> dict[str, list[Event]]:
        with self.where.transaction():
            return {stream: self.read(stream, after) for stream, after in afters.items()}

    # -- LeaseStore: the index and leases, by this store's clock ----------------------------

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
        now = time.time()
        with self.where.transaction():
            if incarnation is not None and not self._mine(owner, incarnation):
                return []
            rows = sorted(self.where.open.values(), key=lambda o: (o.opened_at, o.stream))
            free = [o for o in rows if o.claimable() and o.kind in kinds and not o.live(now)]
            free = [o for o in free if o.owner is not None or not expired_only][: max(0, limit)]
            for o in free:
                o.owner, o.expires, o.token = owner, now + ttl_s, o.token + 1
            return [Lease(o.stream, o.token, o.kind) for o in free]

    def renew(self, owner: str, leases: Sequence[Lease], ttl_s: float) -> list[Lease]:
        now, kept = time.time(), []
        with self.where.transaction():
            for lease in leases:
                o = self.where.open.get(lease.stream)
                if o is not None and o.owner == owner and o.token == lease.token and o.live(now):
                    o.expires = now + ttl_s
                    kept.append(lease)
        return kept

    def release(self, owner: str, leases: Sequence[Lease]) -> None:
        with self.where.transaction():
            for lease in leases:
                o = self.where.open.get(lease.stream)
                if o is not None and o.owner == owner and o.token == lease.token:
                    o.owner = o.expires = None

    def _mine(self, owner: str, incarnation: Incarnation) -> bool:
        beat = self.where.beats.get(owner)
        return beat is not None and is_mine(beat[2], incarnation)

    def beat(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
    ) -> Census | None:
        now = time.time()
        with self.where.transaction():
            beats = self.where.beats
            if incarnation is not None and owner in beats and not self._mine(owner, incarnation):
                return None  # the row names another incarnation: this one was fenced
            text = None if incarnation is None else incarnation.text()
            beats[owner] = (now + ttl_s, None if kinds is None else tuple(kinds), text, now)
            for name in [n for n, (expires, *_) in beats.items() if expires < now - 86400]:
                del beats[name]
            claimable = [o for o in self.where.open.values() if o.claimable()]
            others = [
                o.expires for o in claimable if o.live(now) and o.owner != owner and o.expires
            ]
            return Census(
                sum(expires > now for expires, *_ in beats.values()),
                len(claimable),
                sum(o.owner == owner and o.live(now) for o in claimable),
                min(others) - now if others else None,
            )

    def join(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
        *,
        replacing: Holder | None = None,
    ) -> Census | Holder:
        now = time.time()
        with self.where.transaction():
            beat = self.where.beats.get(owner)
            if beat is None or not is_mine(beat[2], incarnation):
                row = None if beat is None else (beat[2], beat[0], now - beat[3], beat[0] - now)
                holder = Holder.of(owner, row)
                mine = [o for o in self.where.open.values() if o.owner == owner]
                live = (beat is not None and beat[0] > now) or any(o.live(now) for o in mine)
                if live and not holder.same(replacing):
                    return holder
                for o in mine:  # fenced: every lease of an earlier incarnation
                    o.token, o.expires = o.token + 1, now
                self.where.beats.pop(owner, None)
            census = self.beat(owner, ttl_s, kinds, incarnation)
            assert census is not None
            return census

    def leave(self, owner: str, incarnation: Incarnation | None = None) -> None:
        with self.where.transaction():
            if incarnation is not None and not self._mine(owner, incarnation):
                return  # fenced: the name is another incarnation's
            self.where.beats.pop(owner, None)
            for o in self.where.open.values():
                if o.owner == owner:
                    o.owner = o.expires = None

    def open_streams(self) -> list[OpenStream]:
        now = time.time()
        with self.where.transaction():
            rows = sorted(self.where.open.values(), key=lambda o: (o.opened_at, o.stream))
            return [OpenStream(*astuple(o)[:6], o.left(now), o.token, o.failed) for o in rows]

    def replicas(self) -> list[Replica]:
        now = time.time()
        with self.where.transaction():
            live = sorted((o, k, e - now) for o, (e, k, *_) in self.where.beats.items() if e > now)
            return [Replica(owner, kinds, left) for owner, kinds, left in live]

    def mark_failed(self, owner: str, lease: Lease, reason: str) -> bool:
        with self.where.transaction():
            o = self.where.open.get(lease.stream)
            if o is None or o.owner != owner or o.token != lease.token:
                return False
            o.failed = reason[:FAILED_REASON_CAP]
            return True

    def unmark(self, stream: str) -> bool:
        with self.where.transaction():
            o = self.where.open.get(stream)
            marked = o is not None and o.failed is not None
            if o is not None:
                o.failed = None
            return marked

    def drop_closed(self, stream: str) -> bool:
        with self.where.transaction():
            if not any(row[4] in CLOSED_BY for row in self.where.rows.get(stream, ())):
                return False
            gone = [s for s, o in self.where.open.items() if stream in (s, o.parent)]
            for name in gone:
                del self.where.open[name]
            return bool(gone)


def distribution(site: Path, name: str, stores: Mapping[str, str]) -> Path:
    """Register store URL schemes by entry point with no installer: the `*.dist-info`
    directory of a distribution `name` in `site` (a directory to put on `sys.path`), whose
    entry points of the group `flashfsm.stores` are `stores` (scheme: `module:opener`)."""
    info = site / f"{name.replace('-', '_')}-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n")
    entries = "".join(f"{scheme} = {value}\n" for scheme, value in stores.items())
    (info / "entry_points.txt").write_text(f"[flashfsm.stores]\n{entries}")
    return info
