"""The PostgreSQL store's fleet half: the open-streams index and the replicas' leases.

A fleet (`flashfsm.fleet`, `LeaseStore`): `<table>_open` indexes the open streams (one row
per stream that a `JobSubmitted` or `RunStarted` opened and no verdict closed yet), kept
by the appends themselves in their own transactions, with each row's lease (owner, expiry
by the server's clock, fencing token) and, for a stream whose watch failed on every claim,
the reason (`failed`: claims pass it over); `<table>_replicas` holds the replicas'
heartbeats and what each drives (`kinds`). Claims are `SELECT … FOR UPDATE SKIP LOCKED`;
an append under a lease reads its row `FOR SHARE` and refuses a stale token
(`StaleLease`). A writer open creates both tables and fills the index from the log once,
and adds the columns an older library's tables lack (`ADD COLUMN IF NOT EXISTS`, only
when one is missing); a read-only open never does, and reads such tables as saying
nothing there. A renewal extends a lease from when the server received it
(`statement_timestamp()`), not from when its lock waits ended: a renewal sent just before
its replica froze, waiting on that replica's own commit, must not renew its leases for a
lease's time after the freeze (as a frozen process's idle transaction must not keep its
row locks: see `idle_in_transaction_s` in `flashfsm.adapters.postgres`).

What it holds, and how it relates to `flashfsm.adapters.postgres` (of which it was a
part): `PostgresLeases`, which `PostgresStore` mixes in, with the making of the two tables
(a writer open), the index changes and fence reads an append makes inside its own
transaction (`_index`, `_lock_fences`, `_fence_token`), and the `LeaseStore` methods, on a
pool of their own (`_lease_pool`). They run on the store's table names, pools and settings
(see that module's notes), so `PostgresLeases` is no store alone. This module imports
nothing of that one, which imports this one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from flashfsm.events.errors import StoreError
from flashfsm.events.rows import EncodedBatch
from flashfsm.events.store import (
    FAILED_REASON_CAP,
    Census,
    Holder,
    Incarnation,
    Lease,
    OpenStream,
    Replica,
    is_mine,
    kinds_text,
    parse_kinds,
)

#: The server's clock in seconds since the epoch: every lease time is read from it.
_NOW = sql.SQL("extract(epoch from clock_timestamp())::float8")
#: When the server received the statement: a renewal that waited on a lock (its replica
#: may have been paused since) extends leases only from when it was sent.
_SENT = sql.SQL("extract(epoch from statement_timestamp())::float8")
#: Columns added to the fleet's tables after they were first made: (table suffix, column,
#: type).
_ADDED_COLUMNS = (
    ("_open", "failed", "TEXT"),
    ("_replicas", "kinds", "TEXT"),
    ("_replicas", "incarnation", "TEXT"),
)


def _columns(conn: Any, table: str) -> set[str]:
    """The columns of the table named `table` (none when it does not exist)."""
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped",
        (f'"{table}"',),  # (created quoted, case kept; the name is checked)
    ).fetchall()
    return {str(row[0]) for row in rows}


class PostgresLeases:
    """The `LeaseStore` methods of `PostgresStore`, the open-streams index its appends keep,
    and the making of the fleet's tables (a part of the store, mixed into it: see the module
    notes)."""

    if TYPE_CHECKING:  # (what `PostgresStore` gives these methods)
        dsn: str
        table: str
        read_only: bool
        _t: sql.Identifier
        _open: sql.Identifier
        _replicas: sql.Identifier
        _pool: ConnectionPool
        _leases: ConnectionPool | None
        _followers_lock: threading.Lock
        _connect_kwargs: dict[str, int]

        def _configure(self, conn: psycopg.Connection) -> None: ...

    # -- the fleet's tables (a writer open) ---------------------------------------------

    def _create_index(self, conn: psycopg.Connection) -> None:
        """The open-streams index (filled from the log) and the replicas' heartbeats."""
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {o} (stream TEXT PRIMARY KEY, kind TEXT NOT NULL,"
                " parent TEXT, handoff BOOLEAN NOT NULL DEFAULT false,"
                " opened_at DOUBLE PRECISION NOT NULL, owner TEXT,"
                " expires_at DOUBLE PRECISION, token BIGINT NOT NULL DEFAULT 0, failed TEXT)"
            ).format(o=self._open)
        )
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {o} (parent)").format(
                i=sql.Identifier(f"{self.table}_open_parent"), o=self._open
            )
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {o} (stream, kind, opened_at)"
                " SELECT stream, CASE min(kind) WHEN 'RunStarted' THEN 'run' ELSE 'job' END,"
                " min(at) FROM {t} WHERE kind IN ('JobSubmitted', 'RunStarted') AND stream NOT IN"
                " (SELECT stream FROM {t} WHERE kind IN ('Concluded', 'RunConcluded'))"
                " GROUP BY stream ON CONFLICT (stream) DO NOTHING"
            ).format(o=self._open, t=self._t)
        )
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {r} (owner TEXT PRIMARY KEY,"
                " seen_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,"
                " kinds TEXT, incarnation TEXT)"
            ).format(r=self._replicas)
        )

    def _add_columns(self, conn: psycopg.Connection) -> None:
        """Add the columns the fleet's tables gained since they were made (tables an older
        library made): `ADD COLUMN IF NOT EXISTS`, only when one is missing."""
        for suffix, column, kind in _ADDED_COLUMNS:  # (a table an older library made)
            if column not in _columns(conn, f"{self.table}{suffix}"):
                conn.execute(
                    sql.SQL("ALTER TABLE {x} ADD COLUMN IF NOT EXISTS {c} {k}").format(
                        x=sql.Identifier(f"{self.table}{suffix}"),
                        c=sql.Identifier(column),
                        k=sql.SQL(kind),
                    )
                )

    # -- the index and the fences, in an append's transaction ---------------------------

    def _lock_fences(
        self, conn: psycopg.Connection, batches: Sequence[EncodedBatch]
    ) -> dict[str, int]:
        """Take a group's fence rows `FOR SHARE` in stream order, before any batch (the
        order renewals lock them in: no cycle of waits): their tokens, by stream."""
        leased = sorted({b.fence for b in batches if b.fence is not None})
        if not leased:
            return {}
        rows = conn.execute(
            sql.SQL(
                "SELECT stream, token FROM {o} WHERE stream = ANY(%s) ORDER BY stream FOR SHARE"
            ).format(o=self._open),
            (leased,),
        ).fetchall()
        return {stream: int(token) for stream, token in rows}

    def _fence_token(self, conn: psycopg.Connection, fence: str) -> int | None:
        """The token of the lease row `fence`, read `FOR SHARE` (None: no row)."""
        row = conn.execute(
            sql.SQL("SELECT token FROM {o} WHERE stream = %s FOR SHARE").format(o=self._open),
            (fence,),
        ).fetchone()
        return None if row is None else int(row[0])

    def _index(self, conn: psycopg.Connection, batches: Sequence[EncodedBatch]) -> None:
        """Keep the open-streams index in step with appends (inside their transaction):
        one change per stream at most."""
        closed = [batch.stream for batch in batches if batch.closes]
        opened = [batch.opens for batch in batches if batch.opens is not None]
        if closed:
            conn.execute(
                sql.SQL("DELETE FROM {o} WHERE stream = ANY(%s) OR parent = ANY(%s)").format(
                    o=self._open
                ),
                (closed, closed),
            )
        if opened:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {o} (stream, kind, parent, handoff, opened_at)"
                    " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bool[],"
                    " %s::float8[]) ON CONFLICT (stream) DO NOTHING"
                ).format(o=self._open),
                tuple(list(column) for column in zip(*opened, strict=True)),
            )

    # -- leases (`flashfsm.events.store.LeaseStore`) ------------------------------------

    def _refuse_write(self) -> None:
        if self.read_only:
            raise StoreError(f"{self!r} was opened read-only")

    def _lease_pool(self) -> ConnectionPool:
        """The connections of lease traffic (claims, renewals, heartbeats), apart from the
        appends' and reads': a replica's renewal never waits behind its own group commits
        and runs for a connection, which could outlast its leases."""
        with self._followers_lock:
            if self._leases is None:
                self._leases = ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=2,
                    kwargs={"autocommit": True, **self._connect_kwargs},
                    configure=self._configure,
                    open=True,
                    name=f"flashfsm-{self.table}-leases",
                )
            return self._leases

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
        """Lease free handed-off open streams to `owner` (see `LeaseStore.claim`):
        `SELECT … FOR UPDATE SKIP LOCKED`, so replicas claiming at once never wait on, nor
        take, the same rows. Given an `incarnation`, its heartbeat row is read `FOR SHARE`
        first: a take-over of the name waits for the claim, and fences what it took."""
        self._refuse_write()
        if limit <= 0:
            return []
        free = sql.SQL(
            "owner IS NOT NULL AND expires_at <= {now}"
            if expired_only
            else "owner IS NULL OR expires_at <= {now}"
        ).format(now=_NOW)
        mine, params = sql.SQL("true"), [list(kinds), limit, owner, ttl_s]
        if incarnation is not None:
            mine = sql.SQL(
                "EXISTS (SELECT 1 FROM {r} WHERE owner = %s AND incarnation = %s FOR SHARE)"
            ).format(r=self._replicas)
            params[:0] = [owner, incarnation.text()]
        query = sql.SQL(
            "WITH picked AS (SELECT stream FROM {o} WHERE {mine} AND handoff AND parent IS NULL"
            " AND failed IS NULL AND kind = ANY(%s) AND ({free})"
            " ORDER BY opened_at, stream LIMIT %s"
            " FOR UPDATE SKIP LOCKED)"
            " UPDATE {o} AS o SET owner = %s, expires_at = {now} + %s, token = o.token + 1"
            " FROM picked WHERE o.stream = picked.stream RETURNING o.stream, o.token, o.kind"
        ).format(o=self._open, now=_NOW, free=free, mine=mine)
        with self._lease_pool().connection() as conn:
            rows = conn.execute(query, params).fetchall()
        return [Lease(stream, int(token), kind) for stream, token, kind in rows]

    def renew(self, owner: str, leases: Sequence[Lease], ttl_s: float) -> list[Lease]:
        """Extend `owner`'s unexpired leases (see `LeaseStore.renew`)."""
        self._refuse_write()
        if not leases:
            return []
        # The rows are locked in stream order (a LockRows over a Sort), the order a group
        # commit takes its fences in: the two never wait on each other in a cycle.
        query = sql.SQL(
            "WITH mine AS (SELECT o.stream FROM {o} AS o"
            " JOIN unnest(%s::text[], %s::bigint[]) AS l(stream, token)"
            " ON o.stream = l.stream AND o.token = l.token"
            " WHERE o.owner = %s AND o.expires_at > {now} ORDER BY o.stream FOR UPDATE OF o)"
            " UPDATE {o} AS o SET expires_at = {sent} + %s FROM mine"
            " WHERE o.stream = mine.stream RETURNING o.stream"
        ).format(o=self._open, now=_NOW, sent=_SENT)
        streams, tokens = [lease.stream for lease in leases], [lease.token for lease in leases]
        rows = self._retrying(query, (streams, tokens, owner, ttl_s))
        kept = {row[0] for row in rows}
        return [lease for lease in leases if lease.stream in kept]

    def _retrying(self, query: sql.Composable, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run a lease statement, again after a deadlock (the server aborts one of two
        transactions that wait on each other: a retry, not a failure)."""
        for tries in range(1, 4):
            try:
                with self._lease_pool().connection() as conn:
                    cursor = conn.execute(query, params)
                    return cursor.fetchall() if cursor.description else []
            except psycopg.errors.DeadlockDetected:
                if tries == 3:
                    raise
        raise AssertionError("unreachable")

    def release(self, owner: str, leases: Sequence[Lease]) -> None:
        """Give leases back (see `LeaseStore.release`)."""
        self._refuse_write()
        if not leases:
            return
        query = sql.SQL(
            "WITH mine AS (SELECT o.stream FROM {o} AS o"
            " JOIN unnest(%s::text[], %s::bigint[]) AS l(stream, token)"
            " ON o.stream = l.stream AND o.token = l.token"
            " WHERE o.owner = %s ORDER BY o.stream FOR UPDATE OF o)"
            " UPDATE {o} AS o SET owner = NULL, expires_at = NULL FROM mine"
            " WHERE o.stream = mine.stream"
        ).format(o=self._open)
        streams, tokens = [lease.stream for lease in leases], [lease.token for lease in leases]
        self._retrying(query, (streams, tokens, owner))

    def join(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
        *,
        replacing: Holder | None = None,
    ) -> Census | Holder:
        """Join under `owner`, fencing an earlier incarnation (see `LeaseStore.join`)."""
        self._refuse_write()
        with self._lease_pool().connection() as conn, conn.transaction():
            # Two replicas joining under one name at once: one waits for the other's commit.
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (owner,))
            row = conn.execute(  # (locked: the holder's beats and claims wait for this)
                sql.SQL(
                    "SELECT incarnation, expires_at, {now} - seen_at, expires_at - {now}"
                    " FROM {r} WHERE owner = %s FOR UPDATE"
                ).format(r=self._replicas, now=_NOW),
                (owner,),
            ).fetchone()
            if row is None or not is_mine(row[0], incarnation):
                holder = Holder.of(owner, row)
                live = (row is not None and row[3] > 0) or conn.execute(
                    sql.SQL("SELECT 1 FROM {o} WHERE owner = %s AND expires_at > {now}").format(
                        o=self._open, now=_NOW
                    ),
                    (owner,),
                ).fetchone() is not None
                if live and not holder.same(replacing):
                    return holder
                conn.execute(  # (fenced: every lease of an earlier incarnation, in stream order)
                    sql.SQL(
                        "WITH f AS (SELECT stream FROM {o} WHERE owner = %s ORDER BY stream"
                        " FOR UPDATE) UPDATE {o} AS o SET token = o.token + 1, expires_at = {now}"
                        " FROM f WHERE o.stream = f.stream"
                    ).format(o=self._open, now=_NOW),
                    (owner,),
                )
            census = self._beat(conn, owner, ttl_s, kinds, incarnation, replace=True)
            assert census is not None
            return census

    def beat(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
    ) -> Census | None:
        """Record `owner`'s heartbeat (see `LeaseStore.beat`)."""
        self._refuse_write()
        with self._lease_pool().connection() as conn, conn.transaction():
            return self._beat(conn, owner, ttl_s, kinds, incarnation)

    def _beat(
        self,
        conn: Any,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None,
        incarnation: Incarnation | None,
        *,
        replace: bool = False,
    ) -> Census | None:
        """(In `conn`'s transaction.) Record `owner`'s heartbeat; the census (None: the row
        names another incarnation, unless `replace`)."""
        text = None if incarnation is None else incarnation.text()
        if not conn.execute(
            sql.SQL(
                "INSERT INTO {r} (owner, seen_at, expires_at, kinds, incarnation)"
                " VALUES (%s, {now}, {now} + %s, %s, %s)"
                " ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at,"
                " expires_at = excluded.expires_at, kinds = excluded.kinds,"
                " incarnation = excluded.incarnation WHERE %s OR excluded.incarnation IS NULL"
                " OR {r}.incarnation = excluded.incarnation"
            ).format(r=self._replicas, now=_NOW),
            (owner, ttl_s, kinds_text(kinds), text, replace),
        ).rowcount:
            return None  # (the row names another incarnation: this one was fenced)
        conn.execute(
            sql.SQL("DELETE FROM {r} WHERE expires_at < {now} - 86400").format(
                r=self._replicas, now=_NOW
            )
        )
        (replicas,) = conn.execute(  # type: ignore[misc]
            sql.SQL("SELECT count(*) FROM {r} WHERE expires_at > {now}").format(
                r=self._replicas, now=_NOW
            )
        ).fetchone()
        claimable, held, soonest = conn.execute(  # type: ignore[misc]
            sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE owner = %s AND expires_at > {now}),"
                " min(expires_at) FILTER (WHERE owner <> %s AND expires_at > {now}) - {now}"
                " FROM {o} WHERE handoff AND parent IS NULL AND failed IS NULL"
            ).format(o=self._open, now=_NOW),
            (owner, owner),
        ).fetchone()
        return Census(
            int(replicas), int(claimable), int(held), None if soonest is None else float(soonest)
        )

    def leave(self, owner: str, incarnation: Incarnation | None = None) -> None:
        """Forget `owner` and free its leases (see `LeaseStore.leave`)."""
        self._refuse_write()
        text = None if incarnation is None else incarnation.text()
        with self._lease_pool().connection() as conn, conn.transaction():
            gone = conn.execute(
                sql.SQL(
                    "DELETE FROM {r} WHERE owner = %s AND (%s::text IS NULL OR incarnation = %s)"
                ).format(r=self._replicas),
                (owner, text, text),
            ).rowcount
            if gone or incarnation is None:  # (else: fenced, the name is another's)
                conn.execute(
                    sql.SQL(
                        "UPDATE {o} SET owner = NULL, expires_at = NULL WHERE owner = %s"
                    ).format(o=self._open),
                    (owner,),
                )

    def drop_closed(self, stream: str) -> bool:
        """Drop a concluded stream's stale index row (see `LeaseStore.drop_closed`)."""
        self._refuse_write()
        query = sql.SQL(
            "DELETE FROM {o} WHERE (stream = %s OR parent = %s) AND EXISTS"
            " (SELECT 1 FROM {t} WHERE stream = %s AND kind IN ('Concluded', 'RunConcluded'))"
        ).format(o=self._open, t=self._t)
        with self._lease_pool().connection() as conn:
            return conn.execute(query, (stream, stream, stream)).rowcount > 0

    def mark_failed(self, owner: str, lease: Lease, reason: str) -> bool:
        """Mark a stream `owner` holds as failed to start (see `LeaseStore.mark_failed`)."""
        self._refuse_write()
        query = sql.SQL(
            "UPDATE {o} SET failed = %s WHERE stream = %s AND token = %s AND owner = %s"
        ).format(o=self._open)
        params = (reason[:FAILED_REASON_CAP], lease.stream, lease.token, owner)
        with self._lease_pool().connection() as conn:
            return conn.execute(query, params).rowcount > 0

    def unmark(self, stream: str) -> bool:
        """Clear a stream's failed mark (see `LeaseStore.unmark`)."""
        self._refuse_write()
        query = sql.SQL(
            "UPDATE {o} SET failed = NULL WHERE stream = %s AND failed IS NOT NULL"
        ).format(o=self._open)
        with self._lease_pool().connection() as conn:
            return conn.execute(query, (stream,)).rowcount > 0

    def _column_or_null(self, conn: Any, suffix: str, column: str) -> sql.Composable:
        """`column` of the fleet table `<table><suffix>`; NULL when a read-only open finds
        it missing (a writer open has added it)."""
        if self.read_only and column not in _columns(conn, f"{self.table}{suffix}"):
            return sql.SQL("NULL")
        return sql.Identifier(column)

    def replicas(self) -> list[Replica]:
        """The live replicas (see `LeaseStore.replicas`; none without the table, what they
        drive unsaid without the column: a read-only open adds neither)."""
        with self._pool.connection() as conn:
            kinds = self._column_or_null(conn, "_replicas", "kinds")
            query = sql.SQL(
                "SELECT owner, {k}, expires_at - {now} FROM {r} WHERE expires_at > {now}"
                " ORDER BY owner"
            ).format(k=kinds, r=self._replicas, now=_NOW)
            try:
                rows = conn.execute(query).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
        return [Replica(o, parse_kinds(k), float(e)) for o, k, e in rows]

    def open_streams(self) -> list[OpenStream]:
        """The open-streams index, oldest first (empty when the table does not exist, and
        no mark read without the column: a read-only open adds neither)."""
        with self._pool.connection() as conn:
            failed = self._column_or_null(conn, "_open", "failed")
            query = sql.SQL(
                "SELECT stream, kind, parent, handoff, opened_at, owner, expires_at - {now},"
                " token, {f} FROM {o} ORDER BY opened_at, stream"
            ).format(o=self._open, now=_NOW, f=failed)
            try:
                rows = conn.execute(query).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
        return [
            OpenStream(s, k, p, bool(h), float(at), o, None if e is None else float(e), int(t), f)
            for s, k, p, h, at, o, e, t, f in rows
        ]
