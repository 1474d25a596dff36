"""The SQLite event store: the embedded default.

Theory of operation. One table holds every stream:

    events(stream, seq, id UNIQUE, at, kind, body, checksum, PRIMARY KEY (stream, seq))
    WITHOUT ROWID

`body` is the codec's exact JSON line, so a read decodes the bytes it stored, and
`checksum` its CRC-32 (`codec.checksum`), verified on every read: a row whose body or
checksum was changed is a `CorruptLogError` naming the file, stream and seq. The rows, the
checks of a batch and of a read, and the index changes are the shared encoding layer's
(`flashfsm.events.rows`): this module moves rows in and out of the file. Schema
version 2 (`PRAGMA user_version`) added the column; opening a version-1 file to write adds
it (`ALTER TABLE`), and its old rows, whose checksum is NULL, read unchecked (a store
opened `strict=True`, or a read inside `codec.require_checksums()`, refuses them). A
read-only open of a version-1 file changes nothing and reads every row unchecked. The primary
key clusters a stream's rows together; the unique id index is cheap because ids are
time-ordered (they land at the right end of the b-tree).

The file is in WAL mode: readers never block the writer and see a consistent snapshot
per statement. An append is one `BEGIN IMMEDIATE` transaction: IMMEDIATE takes the write
lock up front (waiting up to `busy_timeout_s`, 1 to 3,600 s, for another writer, thread or
process), so the stream's max seq read inside it cannot change before the insert. A stale
`expected_seq` is a `ConcurrencyError`; an id clash makes the unique index raise, mapped
to `DuplicateEventError`; either way the transaction is rolled back and nothing of the
batch remains.

Durability: `durable=True` (default) sets `synchronous=FULL`, so a commit returns only
after the WAL is fsynced: an acknowledged append survives a power cut. `durable=False`
sets `synchronous=NORMAL`: still atomic and safe against a process crash, but the last
commits may be lost on a power cut (they are never half-applied).

Connections: sqlite3 connections must not be shared by two threads at once, so the store
keeps a small pool; a thread borrows one connection per operation and returns it. A
process that forks gets a fresh pool (connections never cross a fork). The database file
is created 0600, missing parent directories 0700; SQLite gives its `-wal` and `-shm`
files the database file's mode.

A full disk (SQLITE_FULL, or an OSError ENOSPC) makes an append raise `StoreFullError`
naming the file; the transaction is rolled back, so nothing of the batch is stored.

Snapshots (`save_snapshot`, `load_snapshot`): a second table, one row per stream,

    snapshots(stream PRIMARY KEY, seq, version, body) WITHOUT ROWID

holding the latest folded state of a job stream (`flashfsm.fsm.snapshot`, which checks the
body's own checksum). It is a cache beside the log, so it changes no schema version (an
older library opens the file and ignores the table): a writer open creates it when it is
missing; a read-only open never does, and reads no snapshot from a file without it.
`snapshot_every` (default 100) is how many events a watch lets pass between two snapshots.

A fleet (`flashfsm.fleet`, `LeaseStore`): the open-streams index and the replicas'
heartbeats are two more tables, a cache of the log like snapshots; their statements and the
`LeaseStore` methods are `flashfsm.adapters.sqlite_leases` (`SqliteLeases`, which
`SqliteStore` mixes in), and an append keeps the index in its own transaction through that
module's `_index`.

Read-only (`read_only=True`, what the CLI's read commands use): nothing is created or
changed. A missing file is `StoreNotFound`; a file that is not a flashfsm store is a
`StoreError` naming it. A WAL reader, even one opened `mode=ro`, creates the `-wal` and
`-shm` files when they are missing and leaves them behind, so each read-only query opens
its own connection: when neither a `-wal` nor a `-journal` file exists (no connection is
open, every commit is in the main file) it reads `immutable=1`, which opens nothing else,
then checks that the file did not change meanwhile (else it reads again); when one exists,
a writer is about and a plain `mode=ro` connection joins it without creating a file.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from flashfsm.adapters._files import create_private_file, make_private_dirs
from flashfsm.adapters.sqlite_leases import SqliteLeases, _index, _token
from flashfsm.adapters.urls import check_option, path_url
from flashfsm.errors import StoreNotFound
from flashfsm.events.codec import CHUNK, gc_paused, strict_mode
from flashfsm.events.errors import (
    ConcurrencyError,
    DuplicateEventError,
    StoreError,
    StoreFullError,
)
from flashfsm.events.models import Event
from flashfsm.events.rows import (
    EncodedBatch,
    Row,
    decode_rows,
    encode_batch,
    encode_batches,
    encode_rows,
)
from flashfsm.events.store import Lease, follow_by_polling
from flashfsm.fsm.snapshot import DEFAULT_SNAPSHOT_EVERY, checked_interval

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL UNIQUE,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID
"""

_SNAPSHOTS = """
CREATE TABLE IF NOT EXISTS snapshots (
    stream TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    version INTEGER NOT NULL,
    body BLOB NOT NULL
) WITHOUT ROWID
"""
# One row per stream: a snapshot replaces the one kept unless that one is of the same fold
# version and later (a slow background write never goes back in time).
_SAVE_SNAPSHOT = (
    "INSERT INTO snapshots (stream, seq, version, body) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (stream) DO UPDATE SET seq = excluded.seq, version = excluded.version, "
    "body = excluded.body WHERE excluded.version != snapshots.version "
    "OR excluded.seq >= snapshots.seq"
)
_LOAD_SNAPSHOT = "SELECT seq, version, body FROM snapshots WHERE stream = ?"

_INSERT = (
    "INSERT INTO events (stream, seq, id, at, kind, body, checksum) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_SELECT = "SELECT seq, body, {} FROM events WHERE stream = ? AND seq > ? ORDER BY seq"

#: A row as a read selects it: seq, body, checksum (None: written before checksums).
Stored = tuple[int, bytes, "int | None"]


def _row(stream: str, event: Event) -> Row:
    """One event's row, as an append inserts it (`_INSERT`)."""
    return encode_rows(stream, [event])[0]


def _check_next(conn: sqlite3.Connection, batch: EncodedBatch) -> None:
    """Refuse `batch` unless it starts at its stream's next seq and its fence (if any) is
    the lease's current token (inside the writing transaction)."""
    (last,) = conn.execute(
        "SELECT max(seq) FROM events WHERE stream = ?", (batch.stream,)
    ).fetchone()
    batch.check(
        0 if last is None else last + 1,
        None if batch.fence is None else _token(conn, batch.fence),
    )


def _is_full(exc: BaseException) -> bool:
    """Whether an error raised by an append means the disk (or the database) is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc)
    return False


_T = TypeVar("_T")


class _Lent:
    """`SqliteStore._connection()`: a connection borrowed from the pool for the `with`
    block, and given back after it (a class, not a generator-based context manager: it is
    on the path of every append and read)."""

    __slots__ = ("conn", "store")

    def __init__(self, store: SqliteStore):
        self.store = store

    def __enter__(self) -> sqlite3.Connection:
        self.conn = self.store._borrow()
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.store._give_back(self.conn)


# Connections inherited across a fork are kept referenced and never closed by the child:
# closing them could disturb the parent's locks.
_inherited: list[sqlite3.Connection] = []


class SqliteStore(SqliteLeases):
    """An event store in one SQLite file, shared safely by threads and processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durable: bool = True,
        busy_timeout_s: float = 30.0,
        read_only: bool = False,
        strict: bool = False,
        snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
    ):
        check_option("busy_timeout_s", busy_timeout_s)
        self.path = Path(path).expanduser().absolute()
        self.strict = strict
        #: Events between two snapshots of a watched job stream (None: never written).
        self.snapshot_every = checked_interval(snapshot_every)
        self._checksum_column = "checksum"  # "NULL" for a version-1 file opened read-only
        self.durable = durable
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        if read_only:
            self._check_readable()
            return
        make_private_dirs(self.path.parent)
        create_private_file(self.path)
        try:
            self._setup()
        except sqlite3.DatabaseError as exc:  # not a database, a malformed one
            self.close()
            raise StoreError(f"{self.path}: {exc}") from None

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return f"SqliteStore({str(self.path)!r}, durable={self.durable}{mode})"

    @property
    def url(self) -> str:
        """The store's URL (see `flashfsm.adapters.stores`)."""
        return path_url("sqlite", self.path)

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout_s,
            isolation_level=None,  # autocommit; transactions are explicit
            check_same_thread=False,  # the pool hands a connection to one thread at a time
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        conn.execute(f"PRAGMA synchronous = {'FULL' if self.durable else 'NORMAL'}")
        if self.durable:  # macOS: fsync stops at the drive's cache, F_FULLFSYNC does not
            conn.execute("PRAGMA fullfsync = ON")
        return conn

    def _connection(self) -> _Lent:
        """A pooled connection for one operation: `with self._connection() as conn:`."""
        return _Lent(self)

    def _borrow(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            if os.getpid() != self._pid:  # forked: start afresh, leave the parent's alone
                _inherited.extend(self._all)
                self._idle, self._all, self._pid = [], [], os.getpid()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
            with self._lock:
                self._all.append(conn)
        return conn

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if self._closed or os.getpid() != self._pid:
                if conn in self._all:
                    self._all.remove(conn)
                conn.close()
            elif conn in self._all:  # (not dropped while it was out)
                self._idle.append(conn)

    def _drop(self, conn: sqlite3.Connection) -> None:
        """Close a borrowed connection that must not go back to the pool."""
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _setup(self) -> None:
        with self._connection() as conn:
            # Switching to WAL needs a moment without other connections; a process opening
            # the same new file at the same time can make it report busy, so retry briefly.
            deadline = time.monotonic() + self.busy_timeout_s
            while True:
                try:
                    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch the database to WAL mode ({mode})")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this library's "
                    f"({SCHEMA_VERSION}); upgrade flashfsm"
                )
            if version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Re-read under the write lock: another process may have migrated it.
                    version = conn.execute("PRAGMA user_version").fetchone()[0]
                    if version == 1:
                        conn.execute("ALTER TABLE events ADD COLUMN checksum INTEGER")
                    elif version == 0:
                        conn.execute(_SCHEMA)
                    conn.execute(f"PRAGMA user_version = {max(version, SCHEMA_VERSION)}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'snapshots'"
            if conn.execute(found).fetchone() is None:
                conn.execute(_SNAPSHOTS)  # (IF NOT EXISTS: another process may have made it)
            self._create_index(conn)
            self._add_columns(conn)

    # -- read-only ---------------------------------------------------------------------

    def _check_readable(self) -> None:
        """A read-only store's file: it exists, is an SQLite file, and is a flashfsm store."""
        if not self.path.exists():
            raise StoreNotFound(str(self.path), "SQLite store")
        if not self.path.is_file():
            raise StoreError(f"{self.path} is not a file: an SQLite store is one file")
        tables, version = self._query(
            lambda conn: (
                {row[0] for row in conn.execute("SELECT name FROM sqlite_master")},
                conn.execute("PRAGMA user_version").fetchone()[0],
            )
        )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this library's "
                f"({SCHEMA_VERSION}); upgrade flashfsm"
            )
        if tables and "events" not in tables:
            raise StoreError(f"{self.path} is an SQLite database, but not a flashfsm store")
        if version < 2:
            self._checksum_column = "NULL"  # written before checksums: read unchecked

    def _quiet(self) -> tuple[int, int, int] | None:
        """The file's identity when no connection has anything outside it (no `-wal` and no
        `-journal` file), else None."""
        for suffix in ("-wal", "-journal"):
            if os.path.exists(f"{self.path}{suffix}"):
                return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreNotFound(str(self.path), "SQLite store") from None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _query(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `work` on a connection that creates and changes nothing (see the module notes).

        An SQLite error (not a database, a malformed image) is a `StoreError` naming the file.
        """
        for tries in range(4):
            before = self._quiet() if tries < 3 else None
            uri = f"file:{quote(str(self.path))}?mode=ro" + ("&immutable=1" if before else "")
            try:
                conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s)
                try:
                    conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
                    result = work(conn)
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                if before is not None and self._quiet() != before:
                    continue  # it changed under the immutable read: read again
                raise StoreError(f"{self.path}: {exc}") from None
            if before is None or self._quiet() == before:
                return result
        raise AssertionError("unreachable: the last try is a plain read-only connection")

    def _read_only_rows(self, stream: str, after: int | None) -> list[Stored]:
        def rows(conn: sqlite3.Connection) -> list[Stored]:
            try:
                with gc_paused():
                    return conn.execute(
                        _SELECT.format(self._checksum_column),
                        (stream, -1 if after is None else after),
                    ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # an empty SQLite file: no stream yet
                    return []
                raise

        return self._query(rows)

    def _refuse_write(self) -> None:
        if self.read_only:
            raise StoreError(f"{self!r} was opened read-only")

    # -- the protocol ------------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        expected_seq: int,
        *,
        lease: Lease | None = None,
    ) -> None:
        """Append a batch atomically in one IMMEDIATE transaction (see `EventStore.append`;
        `lease` fences it, see `LeaseStore.append`)."""
        self._refuse_write()
        if not events:
            return
        batch = encode_batch(stream, events, expected_seq, lease)
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                _check_next(conn, batch)
                try:
                    conn.executemany(_INSERT, batch.rows)
                except sqlite3.IntegrityError as exc:
                    raise self._integrity_error(conn, stream, events, expected_seq) from exc
                _index(conn, batch)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(conn)
                if _is_full(exc):
                    raise StoreFullError(str(self.path), stream, "the disk is full") from None
                raise

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        """Roll back what is open (SQLite may already have, on a full disk)."""
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def append_many(
        self,
        batches: Sequence[tuple[str, Sequence[Event], int]],
        leases: Sequence[Lease | None] | None = None,
    ) -> list[StoreError | ValueError | None]:
        """Group commit: many streams' batches in ONE transaction (one fsync).

        Each batch keeps `append`'s all-or-nothing contract through its own savepoint, so
        one stale batch fails alone; returns, per batch, None or the error it raised.
        `leases` (one per batch, or None) fences each batch as `append`'s `lease` does.
        The batches are encoded before the transaction takes the write lock.
        """
        self._refuse_write()
        outcomes: list[StoreError | ValueError | None] = []
        if not batches:
            return outcomes
        encoded = encode_batches(batches, leases)
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                fast = self._append_all_in(conn, encoded)
                if fast is not None:
                    outcomes = fast
                else:
                    outcomes = [self._append_in(conn, batch) for batch in encoded]
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(conn)
                if _is_full(exc):
                    streams = ", ".join(sorted({stream for stream, _, _ in batches}))
                    raise StoreFullError(str(self.path), streams, "the disk is full") from None
                raise
        return outcomes

    def _append_all_in(
        self, conn: sqlite3.Connection, batches: Sequence[EncodedBatch]
    ) -> list[StoreError | ValueError | None] | None:
        """The group's fast path: one query for every stream's next seq, one insert.

        Each batch is checked against the seqs as the batches before it leave them, so the
        outcomes are those of appending the batches one by one. If the insert clashes (a
        duplicate id), nothing of it stays and None sends the caller to the batch-by-batch
        path, whose savepoints tell which batch clashed.
        """
        streams = list(dict.fromkeys(batch.stream for batch in batches))
        next_seq: dict[str, int] = {}
        for first in range(0, len(streams), 500):  # well under SQLite's bound-variable limit
            chunk = streams[first : first + 500]
            marks = ",".join(["(?)"] * len(chunk))
            # One max per stream, each an index seek (SQLite's min/max optimisation); an
            # `IN (…) GROUP BY` would read every row of every stream instead.
            next_seq.update(
                (stream, last + 1)
                for stream, last in conn.execute(
                    f"WITH wanted(stream) AS (VALUES {marks}) SELECT stream, "
                    "(SELECT max(seq) FROM events WHERE events.stream = wanted.stream) "
                    "FROM wanted",
                    chunk,
                )
                if last is not None
            )
        outcomes: list[StoreError | ValueError | None] = []
        rows: list[Row] = []
        taken: list[EncodedBatch] = []
        for batch in batches:
            if not batch.rows:
                outcomes.append(None)
                continue
            try:
                batch.check(
                    next_seq.get(batch.stream, 0),
                    None if batch.fence is None else _token(conn, batch.fence),
                )
            except (StoreError, ValueError) as error:
                outcomes.append(error)
                continue
            rows.extend(batch.rows)
            next_seq[batch.stream] = batch.next_seq
            taken.append(batch)
            outcomes.append(None)
        conn.execute("SAVEPOINT group_insert")
        try:
            conn.executemany(_INSERT, rows)
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK TO group_insert")
            conn.execute("RELEASE group_insert")
            return None
        for batch in taken:
            if batch.closes or batch.opens is not None:
                _index(conn, batch)
        conn.execute("RELEASE group_insert")
        return outcomes

    def _append_in(
        self, conn: sqlite3.Connection, batch: EncodedBatch
    ) -> StoreError | ValueError | None:
        if not batch.rows:
            return None
        stream = batch.stream
        conn.execute("SAVEPOINT batch")
        try:
            _check_next(conn, batch)
            try:
                conn.executemany(_INSERT, batch.rows)
            except sqlite3.IntegrityError:
                error = self._integrity_error(conn, stream, batch.events, batch.expected_seq)
                conn.execute("ROLLBACK TO batch")
                conn.execute("RELEASE batch")
                return error
            _index(conn, batch)
        except (StoreError, ValueError) as error:
            conn.execute("ROLLBACK TO batch")
            conn.execute("RELEASE batch")
            return error
        conn.execute("RELEASE batch")
        return None

    def _integrity_error(
        self, conn: sqlite3.Connection, stream: str, events: Sequence[Event], expected_seq: int
    ) -> StoreError:
        """Name what a failed insert clashed with (the transaction is still open)."""
        ids = [e.id for e in events]
        marks = ",".join("?" * len(ids))
        clash = conn.execute(f"SELECT id FROM events WHERE id IN ({marks}) LIMIT 1", ids)
        row = clash.fetchone()
        if row is not None:
            return DuplicateEventError(stream, row[0])
        (last,) = conn.execute("SELECT max(seq) FROM events WHERE stream = ?", (stream,)).fetchone()
        return ConcurrencyError(stream, expected_seq, 0 if last is None else last + 1)

    def _rows(self, stream: str, after: int | None) -> list[Stored]:
        if self.read_only:
            return self._read_only_rows(stream, after)
        with gc_paused(), self._connection() as conn:  # fresh row tuples hold no cycles
            return conn.execute(
                _SELECT.format(self._checksum_column), (stream, -1 if after is None else after)
            ).fetchall()

    def _decode_rows(self, stream: str, rows: list[Stored], strict: bool) -> list[Event]:
        seqs, bodies, sums = zip(*rows, strict=True) if rows else ((), (), ())
        return decode_rows(f"sqlite file {self.path}", stream, seqs, bodies, sums, strict=strict)

    def _strict(self) -> bool:
        return self.strict or strict_mode()

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        """The stream's events with seq > `after` (all when None), in seq order.

        Each row's checksum is verified; a mismatch is a `CorruptLogError`.
        """
        return self._decode_rows(stream, self._rows(stream, after), self._strict())

    def iter_read(self, stream: str, after: int | None = None) -> Iterator[Event]:
        """`read`, fetched and decoded lazily `CHUNK` rows at a time (what a replay wants).

        One statement reads the whole stream, so the events come from one consistent
        snapshot, as `read`'s do; the connection it holds goes back to the pool when the
        iterator is exhausted or closed. (Read-only, it is `read`: one short query.)
        """
        if self.read_only:
            yield from self.read(stream, after)
            return
        strict = self._strict()
        with self._connection() as conn:
            cursor = conn.execute(
                _SELECT.format(self._checksum_column), (stream, -1 if after is None else after)
            )
            try:
                while True:
                    with gc_paused():
                        rows = cursor.fetchmany(CHUNK)
                    if not rows:
                        return
                    yield from self._decode_rows(stream, rows, strict)
            finally:
                cursor.close()

    def read_tails(self, afters: Mapping[str, int]) -> dict[str, list[Event]]:
        """Many streams' events after their seqs in one query: `{stream: read(stream,
        after)}` (what a replica reattaching a batch of streams from snapshots wants)."""
        out: dict[str, list[Event]] = {stream: [] for stream in afters}
        items = list(afters.items())
        strict = self._strict()
        for first in range(0, len(items), 400):  # (two bound variables per stream)
            chunk = items[first : first + 400]
            marks = ",".join(["(?, ?)"] * len(chunk))
            query = (
                f"WITH wanted(stream, after) AS (VALUES {marks}) SELECT e.stream, e.seq, "
                f"e.body, e.{self._checksum_column} FROM wanted JOIN events AS e ON "
                "e.stream = wanted.stream AND e.seq > wanted.after ORDER BY e.stream, e.seq"
            ).replace("e.NULL", "NULL")
            params = [value for pair in chunk for value in pair]
            if self.read_only:
                rows = self._query(lambda conn, q=query, p=params: conn.execute(q, p).fetchall())
            else:
                with gc_paused(), self._connection() as conn:
                    rows = conn.execute(query, params).fetchall()
            for stream, group in itertools.groupby(rows, key=lambda row: row[0]):
                out[stream] = self._decode_rows(stream, [r[1:] for r in group], strict)
        return out

    def load_snapshots(self, streams: Sequence[str]) -> dict[str, tuple[int, int, bytes]]:
        """`load_snapshot` of many streams in one query (those without one are left out)."""
        out: dict[str, tuple[int, int, bytes]] = {}

        def load(conn: sqlite3.Connection, chunk: Sequence[str]) -> list[tuple[object, ...]]:
            marks = ",".join("?" * len(chunk))
            try:
                return conn.execute(
                    f"SELECT stream, seq, version, body FROM snapshots WHERE stream IN ({marks})",
                    list(chunk),
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []
                raise

        for first in range(0, len(streams), 500):
            chunk = streams[first : first + 500]
            if self.read_only:
                rows = self._query(lambda conn, chunk=chunk: load(conn, chunk))
            else:
                with self._connection() as conn:
                    rows = load(conn, chunk)
            for stream, seq, version, body in rows:
                out[str(stream)] = (int(seq), int(version), bytes(body))  # type: ignore[call-overload,arg-type]
        return out

    def streams(self) -> list[str]:
        """Every stream name with at least one event, sorted."""
        if self.read_only:

            def names(conn: sqlite3.Connection) -> list[tuple[str]]:
                try:
                    return conn.execute("SELECT DISTINCT stream FROM events").fetchall()
                except sqlite3.OperationalError as exc:
                    if "no such table" in str(exc):  # an empty SQLite file
                        return []
                    raise

            return sorted(row[0] for row in self._query(names))
        with self._connection() as conn:
            rows = conn.execute("SELECT DISTINCT stream FROM events").fetchall()
        return sorted(row[0] for row in rows)

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        """Yield events after `after`, then poll every `poll_s` for new ones (forever)."""
        return follow_by_polling(self.read, stream, after, poll_s, time.sleep)

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        """Keep a snapshot of `stream` (see `SnapshotStore.save_snapshot`): one short
        transaction of its own, never part of an append's."""
        self.save_snapshots([(stream, seq, version, body)])

    def save_snapshots(self, snapshots: Sequence[tuple[str, int, int, bytes]]) -> None:
        """`save_snapshot` of many `(stream, seq, version, body)` in one transaction (one
        commit for a batch the snapshot writer has due)."""
        self._refuse_write()
        if not snapshots:
            return
        rows = [(stream, seq, version, bytes(body)) for stream, seq, version, body in snapshots]
        with self._connection() as conn:
            # A snapshot is a cache: its commit need not wait for an fsync (a power cut may
            # lose it, never half-apply it, and the events it folds were committed before it
            # was taken). The next durable commit syncs the WAL it is in.
            if self.durable:
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_SAVE_SNAPSHOT, rows)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(conn)
                if _is_full(exc):
                    streams = ", ".join(sorted({row[0] for row in rows}))
                    raise StoreFullError(str(self.path), streams, "the disk is full") from None
                raise
            finally:
                if self.durable:
                    try:
                        conn.execute("PRAGMA synchronous = FULL")
                    except sqlite3.Error:  # never lend out a connection that skips fsyncs
                        self._drop(conn)
                        raise

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        """The snapshot kept for `stream`: `(seq, version, body)`, or None (also from a
        file without the snapshots table, which a read-only open never creates)."""

        def load(conn: sqlite3.Connection) -> tuple[int, int, bytes] | None:
            try:
                row = conn.execute(_LOAD_SNAPSHOT, (stream,)).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
            return None if row is None else (int(row[0]), int(row[1]), bytes(row[2]))

        if self.read_only:
            return self._query(load)
        with self._connection() as conn:
            return load(conn)

    def close(self) -> None:
        """Close the connections; the store cannot be used afterwards.

        A connection another thread is using closes when that thread returns it.
        """
        with self._lock:
            self._closed = True
            conns, self._idle = self._idle, []
            self._all = [conn for conn in self._all if conn not in conns]
            mine = os.getpid() == self._pid
        if not mine:
            _inherited.extend(conns)
            return
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
