"""The SQLite store's fleet half: the open-streams index and the replicas' leases.

A fleet (`flashfsm.fleet`, `LeaseStore`): `open_streams` indexes the open streams (one
row per stream a `JobSubmitted` or `RunStarted` opened and no verdict closed), kept by the
appends themselves inside their transactions, with each row's lease (owner, expiry by
SQLite's clock, fencing token) and, for a stream whose watch failed on every claim, the
reason (`failed`: claims pass it over); `replicas` holds the replicas' heartbeats and what
each drives (`kinds`). Every claim, renewal and fenced append is an IMMEDIATE transaction,
so they are serialised; an append under a stale token is refused (`StaleLease`). Like
snapshots, a cache of the log: a writer open creates the tables and fills the index once,
and adds the columns an older library's tables lack (`failed`, `kinds`: `ALTER TABLE …
ADD COLUMN`); a read-only open never does, and reads such tables as saying nothing there.

What it holds, and how it relates to `flashfsm.adapters.sqlite` (of which it was a part):
the two tables' statements, the index changes an append makes inside its own transaction
(`_index`, and `_token`, the fence an append under a lease checks), and `SqliteLeases`,
the `LeaseStore` methods and the making of the two tables, which `SqliteStore` mixes in.
They run on the store's connections and transactions (`_connection`, `_query`,
`_rollback`, `_refuse_write`: see that module's notes), so `SqliteLeases` is no store
alone. This module imports nothing of that one, which imports this one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

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

# The open-streams index and the fleet's leases (`flashfsm.events.store.LeaseStore`): a
# cache of the log kept in the appends' own transactions, so, like snapshots, no schema
# version (a writer open creates the tables and fills the index from the log once).
_OPEN_STREAMS = """
CREATE TABLE IF NOT EXISTS open_streams (
    stream TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    parent TEXT,
    handoff INTEGER NOT NULL DEFAULT 0,
    opened_at REAL NOT NULL,
    owner TEXT,
    expires_at REAL,
    token INTEGER NOT NULL DEFAULT 0,
    failed TEXT
) WITHOUT ROWID
"""
_OPEN_BY_PARENT = "CREATE INDEX IF NOT EXISTS open_streams_parent ON open_streams (parent)"
_REPLICAS = """
CREATE TABLE IF NOT EXISTS replicas (
    owner TEXT PRIMARY KEY,
    seen_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    kinds TEXT,
    incarnation TEXT
) WITHOUT ROWID
"""
#: Columns added to the fleet's tables after they were first made: (table, column, type).
_ADDED_COLUMNS = (
    ("open_streams", "failed", "TEXT"),
    ("replicas", "kinds", "TEXT"),
    ("replicas", "incarnation", "TEXT"),
)
# Streams opened and not closed when the index is first made (whoever opened them watches
# them: none is handed to a fleet).
_FILL_OPEN = """
INSERT OR IGNORE INTO open_streams (stream, kind, opened_at)
SELECT stream, CASE kind WHEN 'RunStarted' THEN 'run' ELSE 'job' END, min(at) FROM events
WHERE kind IN ('JobSubmitted', 'RunStarted') AND stream NOT IN
    (SELECT stream FROM events WHERE kind IN ('Concluded', 'RunConcluded'))
GROUP BY stream
"""
#: The database's clock, in seconds since the epoch (every lease time is read from it).
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_CLOSE = "DELETE FROM open_streams WHERE stream = ? OR parent = ?"
_OPEN = (
    "INSERT INTO open_streams (stream, kind, parent, handoff, opened_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (stream) DO NOTHING"
)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns of `table` (none when it does not exist)."""
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def _token(conn: sqlite3.Connection, fence: str) -> int | None:
    """The token of the lease row `fence` (inside an append's transaction; None: no row)."""
    row = conn.execute("SELECT token FROM open_streams WHERE stream = ?", (fence,)).fetchone()
    return None if row is None else int(row[0])


def _index(conn: sqlite3.Connection, batch: EncodedBatch) -> None:
    """Keep the open-streams index in step with an append (inside its transaction)."""
    if batch.closes:
        conn.execute(_CLOSE, (batch.stream, batch.stream))
    elif batch.opens is not None:
        stream, kind, parent, handoff, opened_at = batch.opens
        conn.execute(_OPEN, (stream, kind, parent, int(handoff), opened_at))


_T = TypeVar("_T")


class SqliteLeases:
    """The `LeaseStore` methods of `SqliteStore`, and the making of the fleet's tables (a
    part of the store, mixed into it: see the module notes)."""

    if TYPE_CHECKING:  # (what `SqliteStore` gives these methods)
        read_only: bool

        def _refuse_write(self) -> None: ...

        def _connection(self) -> AbstractContextManager[sqlite3.Connection]: ...

        def _query(self, work: Callable[[sqlite3.Connection], _T]) -> _T: ...

        @staticmethod
        def _rollback(conn: sqlite3.Connection) -> None: ...

    # -- the fleet's tables (a writer open) ---------------------------------------------

    @staticmethod
    def _create_index(conn: sqlite3.Connection) -> None:
        """The open-streams index (filled from the log) and the replicas' heartbeats, when
        the file has none yet (a writer open: a new file, or one an older library made)."""
        found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'replicas'"
        if conn.execute(found).fetchone() is None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute(found).fetchone() is None:  # (another process made it?)
                    conn.execute(_OPEN_STREAMS)
                    conn.execute(_OPEN_BY_PARENT)
                    conn.execute(_FILL_OPEN)
                    conn.execute(_REPLICAS)  # (last: its presence says all is made)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _add_columns(conn: sqlite3.Connection) -> None:
        """Add the columns the fleet's tables gained since a file's were made (a file an
        older library made): `ALTER TABLE … ADD COLUMN`, each a nullable column."""
        if all(column in _columns(conn, table) for table, column, _ in _ADDED_COLUMNS):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table, column, kind in _ADDED_COLUMNS:
                if column not in _columns(conn, table):  # (another process may have added it)
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # -- leases (`flashfsm.events.store.LeaseStore`) ------------------------------------

    def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `work` in one IMMEDIATE transaction."""
        self._refuse_write()
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
                conn.execute("COMMIT")
            except BaseException:
                self._rollback(conn)
                raise
        return result

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
        """Lease free handed-off open streams to `owner` (see `LeaseStore.claim`)."""
        if limit <= 0:
            return []
        marks = ",".join("?" * len(kinds))
        free = (
            f"owner IS NOT NULL AND expires_at <= {_NOW}"
            if expired_only
            else (f"owner IS NULL OR expires_at <= {_NOW}")
        )
        mine: tuple[str, ...] = ()
        if incarnation is not None:  # (only while the name's heartbeat row names it)
            free = (  # (the OR above in parentheses: AND binds tighter)
                f"({free}) AND EXISTS (SELECT 1 FROM replicas WHERE owner = ? AND incarnation = ?)"
            )
            mine = (owner, incarnation.text())
        rows = self._write(
            lambda conn: conn.execute(
                f"UPDATE open_streams SET owner = ?, expires_at = {_NOW} + ?, token = token + 1 "
                "WHERE stream IN (SELECT stream FROM open_streams WHERE handoff = 1 "
                f"AND parent IS NULL AND failed IS NULL AND kind IN ({marks}) AND ({free}) "
                "ORDER BY opened_at, stream LIMIT ?) RETURNING stream, token, kind",
                (owner, ttl_s, *kinds, *mine, limit),
            ).fetchall()
        )
        return [Lease(stream, token, kind) for stream, token, kind in rows]

    def renew(self, owner: str, leases: Sequence[Lease], ttl_s: float) -> list[Lease]:
        """Extend `owner`'s unexpired leases (see `LeaseStore.renew`)."""
        wanted = {(lease.stream, lease.token): lease for lease in leases}

        def renew(conn: sqlite3.Connection) -> list[Lease]:
            held = conn.execute(
                f"SELECT stream, token FROM open_streams WHERE owner = ? AND expires_at > {_NOW}",
                (owner,),
            ).fetchall()
            kept = [wanted[key] for key in map(tuple, held) if key in wanted]
            conn.executemany(
                f"UPDATE open_streams SET expires_at = {_NOW} + ? WHERE stream = ?",
                [(ttl_s, lease.stream) for lease in kept],
            )
            return kept

        return self._write(renew)

    def release(self, owner: str, leases: Sequence[Lease]) -> None:
        """Give leases back (see `LeaseStore.release`)."""
        self._write(
            lambda conn: conn.executemany(
                "UPDATE open_streams SET owner = NULL, expires_at = NULL "
                "WHERE stream = ? AND token = ? AND owner = ?",
                [(lease.stream, lease.token, owner) for lease in leases],
            )
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
        """Join under `owner`, fencing an earlier incarnation (see `LeaseStore.join`)."""

        def join(conn: sqlite3.Connection) -> Census | Holder:
            row = conn.execute(
                f"SELECT incarnation, expires_at, {_NOW} - seen_at, expires_at - {_NOW} "
                "FROM replicas WHERE owner = ?",
                (owner,),
            ).fetchone()
            if row is None or not is_mine(row[0], incarnation):
                holder = Holder.of(owner, row)
                live = (row is not None and row[3] > 0) or conn.execute(
                    f"SELECT 1 FROM open_streams WHERE owner = ? AND expires_at > {_NOW} LIMIT 1",
                    (owner,),
                ).fetchone() is not None
                if live and not holder.same(replacing):
                    return holder
                conn.execute(  # (fenced: every lease of an earlier incarnation)
                    f"UPDATE open_streams SET token = token + 1, expires_at = {_NOW} "
                    "WHERE owner = ?",
                    (owner,),
                )
            census = self._beat(owner, ttl_s, kinds, incarnation, replace=True)(conn)
            assert census is not None
            return census

        return self._write(join)

    def beat(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None = None,
        incarnation: Incarnation | None = None,
    ) -> Census | None:
        """Record `owner`'s heartbeat (see `LeaseStore.beat`)."""
        return self._write(self._beat(owner, ttl_s, kinds, incarnation))

    def _beat(
        self,
        owner: str,
        ttl_s: float,
        kinds: Sequence[str] | None,
        incarnation: Incarnation | None,
        *,
        replace: bool = False,
    ) -> Callable[[sqlite3.Connection], Census | None]:
        text = None if incarnation is None else incarnation.text()

        def beat(conn: sqlite3.Connection) -> Census | None:
            if not conn.execute(
                "INSERT INTO replicas (owner, seen_at, expires_at, kinds, incarnation) "
                f"VALUES (?, {_NOW}, {_NOW} + ?, ?, ?) ON CONFLICT (owner) DO UPDATE SET "
                "seen_at = excluded.seen_at, expires_at = excluded.expires_at, "
                "kinds = excluded.kinds, incarnation = excluded.incarnation WHERE ? "
                "OR excluded.incarnation IS NULL OR replicas.incarnation = excluded.incarnation",
                (owner, ttl_s, kinds_text(kinds), text, replace),
            ).rowcount:
                return None  # (the row names another incarnation: this one was fenced)
            conn.execute(f"DELETE FROM replicas WHERE expires_at < {_NOW} - 86400")
            (replicas,) = conn.execute(
                f"SELECT count(*) FROM replicas WHERE expires_at > {_NOW}"
            ).fetchone()
            claimable, held, soonest = conn.execute(
                f"SELECT count(*), coalesce(sum(owner = ? AND expires_at > {_NOW}), 0), "
                f"min(CASE WHEN owner <> ? AND expires_at > {_NOW} THEN expires_at END) - {_NOW} "
                "FROM open_streams WHERE handoff = 1 AND parent IS NULL AND failed IS NULL",
                (owner, owner),
            ).fetchone()
            return Census(
                int(replicas), int(claimable), int(held), None if soonest is None else soonest
            )

        return beat

    def leave(self, owner: str, incarnation: Incarnation | None = None) -> None:
        """Forget `owner` and free its leases (see `LeaseStore.leave`)."""

        def leave(conn: sqlite3.Connection) -> None:
            text = None if incarnation is None else incarnation.text()
            gone = conn.execute(
                "DELETE FROM replicas WHERE owner = ? AND (? IS NULL OR incarnation = ?)",
                (owner, text, text),
            ).rowcount
            if gone or incarnation is None:  # (else: fenced, the name is another's)
                conn.execute(
                    "UPDATE open_streams SET owner = NULL, expires_at = NULL WHERE owner = ?",
                    (owner,),
                )

        self._write(leave)

    def drop_closed(self, stream: str) -> bool:
        """Drop a concluded stream's stale index row (see `LeaseStore.drop_closed`)."""
        return self._changes(
            "DELETE FROM open_streams WHERE (stream = ? OR parent = ?) AND EXISTS "
            "(SELECT 1 FROM events WHERE stream = ? AND kind IN "
            "('Concluded', 'RunConcluded'))",
            (stream, stream, stream),
        )

    def mark_failed(self, owner: str, lease: Lease, reason: str) -> bool:
        """Mark a stream `owner` holds as failed to start (see `LeaseStore.mark_failed`)."""
        return self._changes(
            "UPDATE open_streams SET failed = ? WHERE stream = ? AND token = ? AND owner = ?",
            (reason[:FAILED_REASON_CAP], lease.stream, lease.token, owner),
        )

    def unmark(self, stream: str) -> bool:
        """Clear a stream's failed mark (see `LeaseStore.unmark`)."""
        return self._changes(
            "UPDATE open_streams SET failed = NULL WHERE stream = ? AND failed IS NOT NULL",
            (stream,),
        )

    def _changes(self, sql: str, params: Sequence[object]) -> bool:
        """Run one write statement in its own transaction: did it change a row?"""
        return bool(self._write(lambda conn: conn.execute(sql, params).rowcount))

    def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run the read `work` on a connection (read-only: one that changes nothing)."""
        if self.read_only:
            return self._query(work)
        with self._connection() as conn:
            return work(conn)

    def replicas(self) -> list[Replica]:
        """The live replicas (see `LeaseStore.replicas`; none for a file without the
        table, what they drive unsaid for one without the column: a read-only open adds
        neither)."""

        def rows(conn: sqlite3.Connection) -> list[Replica]:
            columns = _columns(conn, "replicas")
            if not columns:
                return []
            kinds = "kinds" if "kinds" in columns else "NULL"
            found = conn.execute(
                f"SELECT owner, {kinds}, expires_at - {_NOW} FROM replicas "
                f"WHERE expires_at > {_NOW} ORDER BY owner"
            ).fetchall()
            return [Replica(o, parse_kinds(k), float(e)) for o, k, e in found]

        return self._read(rows)

    def open_streams(self) -> list[OpenStream]:
        """The open-streams index, oldest first (empty for a file without one, and no
        mark read from one without the column: a read-only open adds neither)."""

        def rows(conn: sqlite3.Connection) -> list[OpenStream]:
            columns = _columns(conn, "open_streams")
            if not columns:
                return []
            failed = "failed" if "failed" in columns else "NULL"
            found = conn.execute(
                "SELECT stream, kind, parent, handoff, opened_at, owner, "
                f"expires_at - {_NOW}, token, {failed} FROM open_streams "
                "ORDER BY opened_at, stream"
            ).fetchall()
            return [
                OpenStream(s, k, p, bool(h), float(at), o, e, int(t), f)
                for s, k, p, h, at, o, e, t, f in found
            ]

        return self._read(rows)
