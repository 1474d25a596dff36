"""Helpers of the store contract tests: backends by kind, event factories, process workers.

The worker functions run in processes started with the `spawn` method, so they live in an
importable module and take only picklable arguments (a store URL, never a store).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashfsm.adapters.stores import open_store, path_url
from flashfsm.events.errors import ConcurrencyError
from flashfsm.events.models import Event, HeartbeatObserved, StatusObserved
from flashfsm.events.store import EventStore
from flashfsm.ids import new_id

PG_ENV = "FLASHFSM_TEST_POSTGRES_DSN"
KINDS = ("memory", "sqlite", "jsonl", "postgres")
DURABLE = ("sqlite", "jsonl", "postgres")

_counter = itertools.count()


def postgres_dsn() -> str | None:
    """The test server's DSN, or None when the suite runs without Postgres."""
    return os.environ.get(PG_ENV) or None


def make_event(stream: str, seq: int, at: float | None = None, *, tag: str = "") -> Event:
    """A real event for `stream` at `seq`; odd seqs are heartbeats, even ones statuses.

    Text fields carry a newline, a quote and non-ASCII, which a line-based file must survive.
    """
    t = time.time() if at is None else at
    if seq % 2:
        return HeartbeatObserved(
            stream=stream, seq=seq, id=new_id(t), at=t, stage=f"sft_start{tag}", step=seq, ts=t
        )
    return StatusObserved(
        stream=stream,
        seq=seq,
        id=new_id(t),
        at=t,
        status="IN_QUEUE",
        stdout_tail=f'line one\nline "two" ünïcødé {tag}',
    )


def make_events(stream: str, first: int, count: int, *, tag: str = "") -> list[Event]:
    """`count` events of `stream` with seqs `first`, `first + 1`, …"""
    return [make_event(stream, first + i, tag=tag) for i in range(count)]


@dataclass
class Backend:
    """One store location of one kind; `open()` returns a new store object on it."""

    kind: str
    url: str
    cleanups: list[Callable[[], None]]
    opened: list[EventStore] = field(default_factory=list)
    _memory: EventStore | None = None

    @property
    def durable(self) -> bool:
        """Whether a new store object on the same location sees the same events."""
        return self.kind in DURABLE

    def open(self) -> EventStore:
        """A store object on this location (the same object every time for memory)."""
        if self.kind == "memory":
            if self._memory is None:
                self._memory = open_store(self.url)
                self.opened.append(self._memory)
            return self._memory
        store = open_store(self.url)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        """Close every store this backend opened."""
        while self.opened:
            with contextlib.suppress(Exception):
                self.opened.pop().close()
        self._memory = None


def make_backend(kind: str, root: Path, cleanups: list[Callable[[], None]]) -> Backend:
    """A fresh, empty location of `kind` under `root` (Postgres: a new table)."""
    n = next(_counter)
    if kind == "memory":
        backend = Backend(kind, "memory://", cleanups)
    elif kind == "sqlite":
        backend = Backend(kind, path_url("sqlite", root / f"sqlite-{n}" / "events.db"), cleanups)
        cleanups.append(lambda: shutil.rmtree(root / f"sqlite-{n}", ignore_errors=True))
    elif kind == "jsonl":
        backend = Backend(kind, path_url("jsonl", root / f"jsonl-{n}"), cleanups)
        cleanups.append(lambda: shutil.rmtree(root / f"jsonl-{n}", ignore_errors=True))
    elif kind == "postgres":
        dsn = postgres_dsn()
        if dsn is None:
            raise RuntimeError(f"{PG_ENV} not set")
        table = f"flashfsm_test_{uuid.uuid4().hex[:16]}"
        sep = "&" if "?" in dsn else "?"
        backend = Backend(kind, f"{dsn}{sep}table={table}", cleanups)
        cleanups.append(lambda: drop_table(dsn, table))
    else:
        raise ValueError(kind)
    cleanups.append(backend.close_all)
    return backend


def drop_table(dsn: str, table: str) -> None:
    """Remove a test table."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def run_cleanups(cleanups: list[Callable[[], None]]) -> None:
    """Run cleanups newest first (stores close before their location is removed)."""
    while cleanups:
        cleanups.pop()()


def append_with_retry(store: EventStore, stream: str, count: int, *, tag: str) -> list[str]:
    """Append `count` single-event batches, re-reading the stream after each conflict."""
    written: list[str] = []
    for _ in range(count):
        while True:
            next_seq = len(store.read(stream))
            event = make_event(stream, next_seq, tag=tag)
            try:
                store.append(stream, [event], next_seq)
            except ConcurrencyError:
                continue
            written.append(event.id)
            break
    return written


# -- process workers (spawned) -------------------------------------------------------------


def writer_process(url: str, stream: str, count: int, tag: str, go: Any, out: Any) -> None:
    """Open the store, wait for the start signal, race to append, report the ids written."""
    store = open_store(url)
    try:
        go.wait(30)
        out.put((tag, append_with_retry(store, stream, count, tag=tag)))
    finally:
        store.close()


def delayed_writer_process(url: str, stream: str, seq: int, ready: Any, delay_s: float) -> None:
    """Open the store, say so, wait `delay_s`, then append one event stamped with the time."""
    store = open_store(url)
    try:
        ready.set()
        time.sleep(delay_s)
        store.append(stream, [make_event(stream, seq)], seq)
    finally:
        store.close()
