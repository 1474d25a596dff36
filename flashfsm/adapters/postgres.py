"""The PostgreSQL event store: one log shared by many orchestrator replicas.

Theory of operation. The schema is SQLite's (`stream, seq, id, at, kind, body, checksum`,
primary key `(stream, seq)`, unique `id`); `body` is TEXT holding the codec's exact JSON
line, so a read decodes what was written byte for byte, and `body::jsonb` still works for
ad-hoc queries. `checksum` is the CRC-32 of the body's UTF-8 bytes, verified on every read
(a mismatch is a `CorruptLogError`): the rows, the checks of a batch and of a read, and the
index changes are the shared encoding layer's (`flashfsm.events.rows`), and this module moves
them in and out of the tables. A table made before checksums gets the column when a
writer opens it (`ADD COLUMN IF NOT EXISTS`), and its old rows (NULL) read unchecked unless
the store is strict. A full disk (`DiskFull`) makes an append a `StoreFullError`.

An append is one transaction on a pooled connection: it takes a transaction-scoped
advisory lock on (table, stream), so appends to one stream queue up while appends to
different streams run side by side; reads the stream's max seq (READ COMMITTED sees every
append committed before the lock was granted), checks `expected_seq`, inserts the batch and
`pg_notify`s the table's channel with the stream name as payload. The notification is
delivered at commit, so a listener never hears of an event it cannot read yet. A unique
violation is mapped to `DuplicateEventError` (the id index) or `ConcurrencyError` (the
primary key: a writer that bypassed the lock), and the whole batch is rolled back.

`follow` LISTENs on a dedicated connection (a pooled one would miss notifications between
uses), reads, then sleeps until a notification for its stream arrives; it re-reads the table
only every `fallback_s` (default 5 s) in case a notification was lost, and polls every
`poll_s` while its connection is being re-established. Commits are as durable as the
server's `synchronous_commit` makes them (on by default: fsynced WAL).

A group commit (`append_many`, what the supervisor's committer calls) is one transaction
of a few statements for the whole group: its streams' advisory locks (in stream order, so
two groups never wait on each other in a cycle), one query for every stream's next seq,
the fences read with their rows locked `FOR SHARE`, each batch checked against them as the
batches before it leave them (a stale one fails alone), then one insert. Only when that
insert clashes (a duplicate id), or two batches would change one stream's index, does it
go batch by batch, each in a savepoint of its own, so the clash fails its batch alone.

A fleet (`flashfsm.fleet`, `LeaseStore`): the open-streams index (`<table>_open`) and
the replicas' heartbeats (`<table>_replicas`) are two more tables; their statements and
the `LeaseStore` methods are `flashfsm.adapters.postgres_leases` (`PostgresLeases`, which
`PostgresStore` mixes in), and an append keeps the index, and reads its fence, in its own
transaction through that class's methods. Every pooled connection ends a transaction left
idle for `idle_in_transaction_s` (default 5 s, from 0.5 to 86,400: the server's
`idle_in_transaction_session_timeout`): our transactions never wait on anything but the
client, so one idle that long belongs to a paused or cut-off process, and the row locks it
holds must not keep `SKIP LOCKED` claims from the streams whose leases it lost. (Keep
leases longer than that.)

Snapshots (`save_snapshot`, `load_snapshot`) live in a second table, `<table>_snapshots`
(`stream` primary key, `seq`, `version`, `body` BYTEA), created with the events table by a
writer open; a read-only open never creates it and reads no snapshot when it is missing.
`snapshot_every` (default 100) is how many events a watch lets pass between two snapshots.

One store object per process: a connection pool does not survive a fork.

Read-only (`read_only=True`, what the CLI's read commands use): the table is not created; a
missing table is `StoreNotFound`, and `append` refuses. A server that cannot be reached
within the connect timeout is a `StoreError` naming the host and database (never the
password). The timeout is the URL's `connect_timeout=N` (libpq's own parameter, seconds),
else `connect_timeout_s`, else 10 s; every connection is opened with it, so an unreachable
host never hangs a process.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from flashfsm.adapters.postgres_leases import PostgresLeases
from flashfsm.adapters.urls import check_option, hide_url_secrets, in_range, option_range
from flashfsm.errors import StoreNotFound
from flashfsm.events.errors import (
    ConcurrencyError,
    DuplicateEventError,
    StoreError,
    StoreFullError,
)
from flashfsm.events.models import Event
from flashfsm.events.rows import EncodedBatch, decode_rows, encode_batch, encode_batches
from flashfsm.events.store import Lease
from flashfsm.fsm.snapshot import DEFAULT_SNAPSHOT_EVERY, checked_interval

logger = logging.getLogger(__name__)

DEFAULT_TABLE = "flashfsm_events"
DEFAULT_CONNECT_TIMEOUT_S = 10.0
#: How long the server lets a pooled connection sit idle inside a transaction (seconds).
DEFAULT_IDLE_IN_TRANSACTION_S = 5.0
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,49}$")


class PostgresStore(PostgresLeases):
    """An event store in one PostgreSQL table."""

    def __init__(
        self,
        dsn: str,
        *,
        table: str = DEFAULT_TABLE,
        pool_size: int = 4,
        fallback_s: float = 5.0,
        connect_timeout_s: float | None = None,
        read_only: bool = False,
        strict: bool = False,
        snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
        idle_in_transaction_s: float = DEFAULT_IDLE_IN_TRANSACTION_S,
    ):
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise ValueError(
                f"table name {table!r}: letters, digits and underscores, at most 50, "
                "not starting with a digit"
            )
        check_option("pool_size", pool_size)
        check_option("fallback_s", fallback_s)
        check_option("idle_in_transaction_s", idle_in_transaction_s)
        if connect_timeout_s is not None:
            check_option("connect_timeout_s", connect_timeout_s)
        self.dsn = dsn
        self.table = table
        self.channel = f"{table}_appended"
        self.fallback_s = fallback_s
        self.read_only = read_only
        self.strict = strict
        #: Events between two snapshots of a watched job stream (None: never written).
        self.snapshot_every = checked_interval(snapshot_every)
        #: How long a pooled connection may sit idle inside a transaction (see above).
        self.idle_in_transaction_s = idle_in_transaction_s
        self._snap = sql.Identifier(f"{table}_snapshots")
        self._open = sql.Identifier(f"{table}_open")
        self._replicas = sql.Identifier(f"{table}_replicas")
        self._checksum = sql.SQL("checksum")  # NULL for a table made before checksums
        self._t = sql.Identifier(table)
        self._followers: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        self._leases: ConnectionPool | None = None  # (made by the first lease operation)
        self._followers_lock = threading.Lock()
        connect_timeout_s, self._connect_kwargs = _connect_timeout(dsn, connect_timeout_s)
        self._probe(connect_timeout_s)
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, **self._connect_kwargs},
            configure=self._configure,
            open=True,
            name=f"flashfsm-{table}",
        )
        try:
            try:
                self._pool.wait(timeout=connect_timeout_s)
            except PoolTimeout:
                raise StoreError(
                    f"cannot connect to {self.where} within {connect_timeout_s:g} s"
                ) from None
            if read_only:
                self._check_table()
            else:
                self._create_table()
        except BaseException:
            self._pool.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore(table={self.table!r})"

    @property
    def url(self) -> str:
        """The DSN the store was opened with (with its table as a `table=` parameter)."""
        sep = "&" if "?" in self.dsn else "?"
        return self.dsn if self.table == DEFAULT_TABLE else f"{self.dsn}{sep}table={self.table}"

    @property
    def where(self) -> str:
        """The server, database and table, as errors name them (no user, no password)."""
        try:
            info = conninfo_to_dict(self.dsn)
        except psycopg.Error:
            info = {}
        host = info.get("host") or "localhost"
        port = f":{info['port']}" if info.get("port") else ""
        return f"postgres {host}{port}/{info.get('dbname') or ''} table {self.table}"

    def _configure(self, conn: psycopg.Connection) -> None:
        """(Each new pooled connection.) End a transaction left idle too long (see above)."""
        ms = str(max(1, round(self.idle_in_transaction_s * 1000)))
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)", (ms,))

    def _probe(self, timeout_s: float) -> None:
        """Fail fast, in one line, when the server cannot be reached (nobody waits for the
        pool's retries)."""
        try:
            psycopg.connect(self.dsn, connect_timeout=max(1, round(timeout_s))).close()
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(
                f"cannot connect to {self.where}: {hide_url_secrets(reason, self.dsn)}"
            ) from None

    def _check_table(self) -> None:
        """A read-only store's table exists (it is never created here)."""
        with self._pool.connection() as conn:
            quoted = f'"{self.table}"'  # created quoted (case kept); the name is checked
            (found,) = conn.execute("SELECT to_regclass(%s)", (quoted,)).fetchone()  # type: ignore[misc]
        if found is None:
            raise StoreNotFound(self.where, "flashfsm store")
        with self._pool.connection() as conn:
            has_checksum = conn.execute(
                "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attname = 'checksum' AND NOT attisdropped",
                (quoted,),
            ).fetchone()
        if has_checksum is None:
            self._checksum = sql.SQL("NULL")

    def _create_table(self) -> None:
        ddl = sql.SQL(
            """CREATE TABLE IF NOT EXISTS {t} (
                stream TEXT NOT NULL,
                seq BIGINT NOT NULL,
                id TEXT NOT NULL,
                at DOUBLE PRECISION NOT NULL,
                kind TEXT NOT NULL,
                body TEXT NOT NULL,
                checksum BIGINT,
                CONSTRAINT {pkey} PRIMARY KEY (stream, seq),
                CONSTRAINT {idkey} UNIQUE (id)
            )"""
        ).format(
            t=self._t,
            pkey=sql.Identifier(f"{self.table}_pkey"),
            idkey=sql.Identifier(f"{self.table}_id_key"),
        )
        with self._pool.connection() as conn, conn.transaction():
            # Two processes creating the table at once would race in the catalog.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('flashfsm schema'))")
            conn.execute(ddl)
            conn.execute(
                sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS checksum BIGINT").format(
                    t=self._t
                )
            )
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {s} (stream TEXT PRIMARY KEY, seq BIGINT NOT NULL,"
                    " version INTEGER NOT NULL, body BYTEA NOT NULL)"
                ).format(s=self._snap)
            )
            (made,) = conn.execute(  # type: ignore[misc]
                "SELECT to_regclass(%s)", (f'"{self.table}_replicas"',)
            ).fetchone()
            if made is None:
                self._create_index(conn)
            self._add_columns(conn)

    # -- the protocol ------------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        expected_seq: int,
        *,
        lease: Lease | None = None,
    ) -> None:
        """Append a batch in one transaction under the stream's advisory lock.

        Under a `lease` (see `LeaseStore.append`), the leased stream's index row is read
        `FOR SHARE` in the same transaction: a claim (`FOR UPDATE SKIP LOCKED`) passes the
        row by until this commit, and a token already changed refuses the batch
        (`StaleLease`).
        """
        if self.read_only:
            raise StoreError(f"{self!r} was opened read-only")
        if not events:
            return
        batch = encode_batch(stream, events, expected_seq, lease)
        with self._pool.connection() as conn:
            try:
                with conn.transaction():
                    self._append_in(conn, batch)
            except psycopg.errors.UniqueViolation as exc:
                raise self._unique_error(conn, exc, stream, events, expected_seq) from None
            except psycopg.errors.DiskFull:
                raise StoreFullError(self.where, stream, "the server's disk is full") from None

    def append_many(
        self,
        batches: Sequence[tuple[str, Sequence[Event], int]],
        leases: Sequence[Lease | None] | None = None,
    ) -> list[Exception | None]:
        """Group commit: many streams' batches in ONE transaction (one WAL flush).

        Each batch keeps `append`'s all-or-nothing contract through its own savepoint, so
        one stale batch fails alone; returns, per batch, None or the error it raised.
        Batches take their streams' advisory locks in stream order, so two groups never
        wait on each other in a cycle. `leases` (one per batch, or None) fences each batch.
        """
        if self.read_only:
            raise StoreError(f"{self!r} was opened read-only")
        encoded = encode_batches(batches, leases)
        order = sorted(range(len(batches)), key=lambda n: batches[n][0])
        for tries in range(1, 4):  # a deadlock aborts the whole group: it is tried again
            outcomes: list[Exception | None] = [None] * len(batches)
            if not batches:
                return outcomes
            try:
                self._group_in(encoded, order, outcomes)
                return outcomes
            except psycopg.errors.DeadlockDetected:
                if tries == 3:
                    raise
        raise AssertionError("unreachable")

    def _group_in(
        self,
        batches: Sequence[EncodedBatch],
        order: Sequence[int],
        outcomes: list[Exception | None],
    ) -> None:
        with self._pool.connection() as conn:
            try:
                with conn.transaction():
                    tokens = self._lock_fences(conn, batches)
                    fast = self._group_all_in(conn, batches, order, tokens)
                    if fast is not None:
                        outcomes[:] = fast
                        return
                    for n in order:
                        batch = batches[n]
                        if not batch.rows:
                            continue
                        try:
                            with conn.transaction():  # a savepoint
                                self._append_in(conn, batch)
                        except psycopg.errors.UniqueViolation as exc:
                            outcomes[n] = self._unique_error(
                                conn, exc, batch.stream, batch.events, batch.expected_seq
                            )
                        except (StoreError, ValueError) as exc:
                            outcomes[n] = exc
            except psycopg.errors.DiskFull:
                streams = ", ".join(sorted({batch.stream for batch in batches}))
                raise StoreFullError(self.where, streams, "the server's disk is full") from None

    def _group_all_in(
        self,
        conn: psycopg.Connection,
        batches: Sequence[EncodedBatch],
        order: Sequence[int],
        tokens: Mapping[str, int],
    ) -> list[Exception | None] | None:
        """The group's fast path: a handful of statements for the whole group, not a few
        round trips per batch. Every stream's advisory lock (in stream order), then one
        query for every stream's next seq; each batch is checked (its seqs, its fence)
        against them as the batches before it leave them, so the outcomes are those of
        appending the batches one by one; then one insert, one notification per stream and
        the index changes. If the insert clashes (a duplicate id), nothing of it stays and
        None sends the caller to the batch-by-batch path, whose savepoints tell which batch
        clashed; so does a stream whose index two batches of the group would change."""
        streams = sorted({batches[n].stream for n in order if batches[n].rows})
        if not streams:
            return [None] * len(batches)
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(s))"
            " FROM unnest(%s::text[]) WITH ORDINALITY AS u(s, n) ORDER BY n",
            (self.table, streams),
        )
        next_seq = {
            stream: last + 1
            for stream, last in conn.execute(
                sql.SQL(
                    "SELECT s, (SELECT max(seq) FROM {t} WHERE stream = s)"
                    " FROM unnest(%s::text[]) AS s"
                ).format(t=self._t),
                (streams,),
            ).fetchall()
            if last is not None
        }
        outcomes: list[Exception | None] = [None] * len(batches)
        taken: list[EncodedBatch] = []
        changing: list[str] = []
        for n in order:
            batch = batches[n]
            if not batch.rows:
                continue
            fence = batch.fence
            try:
                batch.check(
                    next_seq.get(batch.stream, 0), None if fence is None else tokens.get(fence)
                )
            except (StoreError, ValueError) as exc:
                outcomes[n] = exc
                continue
            next_seq[batch.stream] = batch.next_seq
            taken.append(batch)
            if batch.closes or batch.opens is not None:
                changing.append(batch.stream)
        if len(changing) != len(set(changing)):  # (their order matters: one by one)
            return None
        if not taken:
            return outcomes
        try:
            with conn.transaction():  # a savepoint: a clash leaves nothing of the insert
                self._insert(conn, taken)
        except psycopg.errors.UniqueViolation:
            return None
        if changing:
            self._index(conn, taken)
        return outcomes

    def _append_in(self, conn: psycopg.Connection, batch: EncodedBatch) -> None:
        """One batch inside an open transaction: lock, check, fence, insert, index."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", (self.table, batch.stream)
        )
        (last,) = conn.execute(  # type: ignore[misc]
            sql.SQL("SELECT max(seq) FROM {t} WHERE stream = %s").format(t=self._t),
            (batch.stream,),
        ).fetchone()
        batch.check_seq(0 if last is None else last + 1)
        if batch.fence is not None:  # (its row is locked only once the seqs are right)
            batch.check_fence(self._fence_token(conn, batch.fence))
        self._insert(conn, [batch])
        self._index(conn, [batch])

    def _insert(self, conn: psycopg.Connection, batches: Sequence[EncodedBatch]) -> None:
        """Insert the rows of `batches` (checked already) in one statement (arrays, not a
        round trip per row), which also queues one notification per stream (the server
        delivers them only at commit)."""
        rows = [row for batch in batches for row in batch.rows]
        streams, seqs, ids, ats, kinds, bodies, sums = map(list, zip(*rows, strict=True))
        conn.execute(
            sql.SQL(
                "WITH appended AS ("
                " INSERT INTO {t} (stream, seq, id, at, kind, body, checksum)"
                " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::float8[],"
                " %s::text[], %s::text[], %s::bigint[]))"
                " SELECT pg_notify(%s, s) FROM unnest(%s::text[]) AS s"
            ).format(t=self._t),
            (
                streams,
                seqs,
                ids,
                ats,
                kinds,
                [body.decode() for body in bodies],
                sums,
                self.channel,
                sorted({batch.stream for batch in batches}),
            ),
        )

    def _unique_error(
        self,
        conn: psycopg.Connection,
        exc: psycopg.errors.UniqueViolation,
        stream: str,
        events: Sequence[Event],
        expected_seq: int,
    ) -> Exception:
        """Name what the failed insert clashed with (its transaction is rolled back)."""
        if exc.diag.constraint_name == f"{self.table}_id_key":
            row = conn.execute(
                sql.SQL("SELECT id FROM {t} WHERE id = ANY(%s) LIMIT 1").format(t=self._t),
                ([e.id for e in events],),
            ).fetchone()
            return DuplicateEventError(stream, row[0] if row else events[0].id)
        (last,) = conn.execute(  # type: ignore[misc]
            sql.SQL("SELECT max(seq) FROM {t} WHERE stream = %s").format(t=self._t), (stream,)
        ).fetchone()
        return ConcurrencyError(stream, expected_seq, 0 if last is None else last + 1)

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        """The stream's events with seq > `after` (all when None), in seq order.

        Each row's checksum is verified; a mismatch is a `CorruptLogError`.
        """
        with self._pool.connection() as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT seq, body, {c} FROM {t} WHERE stream = %s AND seq > %s ORDER BY seq"
                ).format(t=self._t, c=self._checksum),
                (stream, -1 if after is None else after),
            ).fetchall()
        return self._decode(stream, rows)

    def _decode(self, stream: str, rows: list[tuple[int, str, int | None]]) -> list[Event]:
        seqs, texts, sums = zip(*rows, strict=True) if rows else ((), (), ())
        # (a checksum is of the body's UTF-8, the bytes the decoder reads too)
        bodies = [text.encode("utf-8", "surrogatepass") for text in texts]
        where = f"postgres table {self.table}"
        return decode_rows(where, stream, seqs, bodies, sums, strict=self.strict)

    def read_tails(self, afters: Mapping[str, int]) -> dict[str, list[Event]]:
        """Many streams' events after their seqs in one query: `{stream: read(stream,
        after)}` (what a replica reattaching a batch of streams from snapshots wants)."""
        out: dict[str, list[Event]] = {stream: [] for stream in afters}
        if not afters:
            return out
        # A lateral subquery per stream: an index range scan each (a plain join may read
        # the whole table by hash).
        query = sql.SQL(
            "SELECT l.stream, e.seq, e.body, e.c FROM unnest(%s::text[], %s::bigint[])"
            " AS l(stream, after) CROSS JOIN LATERAL (SELECT seq, body, {c} AS c FROM {t}"
            " WHERE stream = l.stream AND seq > l.after ORDER BY seq) AS e"
            " ORDER BY l.stream, e.seq"
        ).format(t=self._t, c=self._checksum)
        with self._pool.connection() as conn:
            rows = conn.execute(query, (list(afters), list(afters.values()))).fetchall()
        for stream, group in itertools.groupby(rows, key=lambda row: row[0]):
            out[stream] = self._decode(stream, [r[1:] for r in group])
        return out

    def load_snapshots(self, streams: Sequence[str]) -> dict[str, tuple[int, int, bytes]]:
        """`load_snapshot` of many streams in one query (those without one are left out)."""
        query = sql.SQL("SELECT stream, seq, version, body FROM {s} WHERE stream = ANY(%s)").format(
            s=self._snap
        )
        with self._pool.connection() as conn:
            try:
                rows = conn.execute(query, (list(streams),)).fetchall()
            except psycopg.errors.UndefinedTable:
                return {}
        return {row[0]: (int(row[1]), int(row[2]), bytes(row[3])) for row in rows}

    def save_snapshot(self, stream: str, seq: int, version: int, body: bytes) -> None:
        """Keep a snapshot of `stream` (see `SnapshotStore.save_snapshot`): its own
        statement, never part of an append's transaction."""
        self.save_snapshots([(stream, seq, version, body)])

    def save_snapshots(self, snapshots: Sequence[tuple[str, int, int, bytes]]) -> None:
        """`save_snapshot` of many `(stream, seq, version, body)` in one transaction (one
        commit for a batch the snapshot writer has due)."""
        if self.read_only:
            raise StoreError(f"{self!r} was opened read-only")
        if not snapshots:
            return
        upsert = sql.SQL(
            "INSERT INTO {s} AS kept (stream, seq, version, body) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (stream) DO UPDATE SET seq = excluded.seq,"
            " version = excluded.version, body = excluded.body"
            " WHERE excluded.version <> kept.version OR excluded.seq >= kept.seq"
        ).format(s=self._snap)
        rows = [(stream, seq, version, bytes(body)) for stream, seq, version, body in snapshots]
        with self._pool.connection() as conn:
            try:
                with conn.transaction(), conn.cursor() as cursor:
                    # A snapshot is a cache: its commit need not wait for the WAL flush (a
                    # server crash may lose it, never half-apply it).
                    cursor.execute("SET LOCAL synchronous_commit = off")
                    cursor.executemany(upsert, rows)
            except psycopg.errors.DiskFull:
                streams = ", ".join(sorted({row[0] for row in rows}))
                raise StoreFullError(self.where, streams, "the server's disk is full") from None

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        """The snapshot kept for `stream`: `(seq, version, body)`, or None (also when the
        snapshots table does not exist: a read-only open never creates it)."""
        query = sql.SQL("SELECT seq, version, body FROM {s} WHERE stream = %s").format(s=self._snap)
        with self._pool.connection() as conn:
            try:
                row = conn.execute(query, (stream,)).fetchone()
            except psycopg.errors.UndefinedTable:
                return None
        return None if row is None else (int(row[0]), int(row[1]), bytes(row[2]))

    def streams(self) -> list[str]:
        """Every stream with at least one event, sorted (by code point, as Python sorts)."""
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT DISTINCT stream FROM {t}").format(t=self._t))
            return sorted(row[0] for row in rows.fetchall())

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        """Yield events after `after`, then each new one as its NOTIFY arrives (forever)."""
        last = -1 if after is None else after
        listener: psycopg.Connection | None = None
        try:
            while True:
                if listener is None or listener.closed:
                    listener = self._listen()  # before the read: nothing slips between
                batch = self.read(stream, last)
                if batch:
                    for event in batch:
                        last = event.seq
                        yield event
                    continue
                if listener is None:
                    time.sleep(poll_s)
                    continue
                if not self._wait(listener, stream):
                    with contextlib.suppress(psycopg.Error):
                        listener.close()
                    listener = None
        finally:
            if listener is not None:
                with contextlib.suppress(psycopg.Error):
                    listener.close()

    def _listen(self) -> psycopg.Connection | None:
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, **self._connect_kwargs)
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error as exc:
            logger.warning(
                "%r: cannot LISTEN (%s); polling the table",
                self,
                hide_url_secrets(str(exc), self.dsn),
            )
            return None
        with self._followers_lock:
            self._followers.add(conn)
        return conn

    def _wait(self, conn: psycopg.Connection, stream: str) -> bool:
        """Wait for a notification about `stream`, at most `fallback_s`; False if conn broke."""
        deadline = time.monotonic() + self.fallback_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                for note in conn.notifies(timeout=left, stop_after=1):
                    if note.payload == stream:
                        return True
        except psycopg.Error as exc:
            logger.warning(
                "%r: listening connection lost (%s); reconnecting",
                self,
                hide_url_secrets(str(exc), self.dsn),
            )
            return False
        return True

    def close(self) -> None:
        """Close the pool and every follower's listening connection."""
        with self._followers_lock:
            followers = list(self._followers)
        for conn in followers:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        if self._leases is not None:
            self._leases.close()
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect_timeout(dsn: str, given: float | None) -> tuple[float, dict[str, int]]:
    """The connect timeout to wait for a server, and the connection kwargs that set it.

    The DSN's `connect_timeout` wins (libpq applies it to every connection itself); else
    `given`, else `DEFAULT_CONNECT_TIMEOUT_S`, passed to every connection as a kwarg.
    """
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        info = {}
    raw = info.get("connect_timeout")
    if raw not in (None, ""):
        try:
            seconds = float(raw) if len(raw) <= 32 else math.nan
        except ValueError:
            seconds = math.nan
        if in_range("connect_timeout", seconds):
            return seconds, {}
        if not seconds <= 0:  # (libpq: 0 or less waits forever; we wait the default instead)
            raise ValueError(
                f"connect_timeout={raw[:40]!r} is not {option_range('connect_timeout')} "
                "seconds (or 0: the default)"
            )
    seconds = DEFAULT_CONNECT_TIMEOUT_S if given is None else given
    return seconds, {"connect_timeout": max(1, round(seconds))}
