"""Helpers of the store tests: backends by kind, event factories, crashes.

The contract's own helpers (its process workers among them) ship with it, in
`flashfsm.testing.contract`. The crash helpers (`KillAfter`, `run_in_child`,
`check_reattached`, …) serve the SIGKILL tests, which fork their watchers.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashfsm import verify
from flashfsm.adapters.stores import open_store, path_url
from flashfsm.events.models import (
    Concluded,
    Event,
    WatchStarted,
)
from flashfsm.events.store import EventStore
from flashfsm.testing.contract import contract_event, contract_events

PG_ENV = "FLASHFSM_TEST_POSTGRES_DSN"
KINDS = ("memory", "sqlite", "jsonl", "postgres")
DURABLE = ("sqlite", "jsonl", "postgres")

_counter = itertools.count()


def postgres_dsn() -> str | None:
    """The test server's DSN, or None when the suite runs without Postgres."""
    return os.environ.get(PG_ENV) or None


#: The contract suite's event factories (`flashfsm.testing.contract`), by the names these
#: tests use: real events, odd seqs heartbeats, even ones statuses, text a line-based store
#: must survive.
make_event = contract_event
make_events = contract_events


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
        for suffix in ("snapshots", "open", "replicas"):
            extra = sql.Identifier(f"{table}_{suffix}")
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(extra))


def run_cleanups(cleanups: list[Callable[[], None]]) -> None:
    """Run cleanups newest first (stores close before their location is removed)."""
    while cleanups:
        cleanups.pop()()


# -- crash tests: SIGKILL a watcher after an append, reattach, compare ----------------------

FORK = multiprocessing.get_context("fork")


def crash_store_kinds() -> list[Any]:
    """Parameters for the store kinds of a crash test (Postgres only when the DSN is set).

    (pytest is imported here, not at the top: spawned workers import this module too.)
    """
    import pytest

    return [
        "sqlite",
        "jsonl",
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(postgres_dsn() is None, reason=f"{PG_ENV} not set"),
        ),
    ]


Verdict = tuple[str, str, str | None, float]


@contextlib.contextmanager
def store_locations(kind: str, root: Path) -> Iterator[Callable[[], str]]:
    """`new()` gives the URL of a fresh, empty location of `kind`; all are removed on exit."""
    cleanups: list[Callable[[], None]] = []
    try:
        yield lambda: make_backend(kind, root, cleanups).url
    finally:
        run_cleanups(cleanups)


class KillAfter:
    """A store proxy that SIGKILLs its own process once the stream holds `events` events."""

    def __init__(self, store: Any, events: int | None):
        self._store, self._events = store, events

    def append(self, stream: str, events: Any, expected_seq: int) -> None:
        self._store.append(stream, events, expected_seq)
        if self._events is not None and expected_seq + len(events) >= self._events:
            os.kill(os.getpid(), signal.SIGKILL)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def run_in_child(target: Callable[..., Any], *args: Any, timeout_s: float = 60.0) -> int | None:
    """Run `target(*args)` in a forked process; its exit code (-9 when SIGKILLed)."""
    child = FORK.Process(target=target, args=args)
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        raise AssertionError("the watching process hung")
    return child.exitcode


def write_stream(url: str, stream: str, events: list[Event]) -> None:
    """Append `events` as the whole of `stream` in the store at `url`."""
    store = open_store(url)
    try:
        store.append(stream, events, 0)
    finally:
        store.close()


@contextlib.contextmanager
def jsonl_copied_to(directory: Path) -> Iterator[tuple[EventStore, Path]]:
    """A JSONL store in a scratch directory, and that directory; once the block ends
    without an error, the store's logs copied into `directory` (which must not exist)."""
    with tempfile.TemporaryDirectory() as scratch:
        store = open_store(f"jsonl://{scratch}/store")
        try:
            yield store, Path(scratch)
        finally:
            store.close()
        directory.mkdir(parents=True)
        for path in sorted(Path(scratch, "store").glob("*.jsonl")):
            shutil.copyfile(path, directory / path.name)


def read_stream(url: str, stream: str) -> list[Event]:
    """The events of `stream` in the store at `url`."""
    store = open_store(url)
    try:
        return store.read(stream)
    finally:
        store.close()


def verdict_of(events: list[Event]) -> Verdict:
    """(state, rule, failure, at) of the verdict that ends a log."""
    final = events[-1]
    assert isinstance(final, Concluded), f"log ends with {final.kind}, not a verdict"
    return final.state, final.rule, final.failure, final.at


def append_boundaries(events: list[Event]) -> list[int]:
    """Stream lengths after each append of an uninterrupted watch (the first batch is 2)."""
    return list(range(2, len(events) + 1))


def check_reattached(events: list[Event], expected: Verdict, k: int, reference: int) -> None:
    """The log of a watch killed at boundary `k` then reattached, against the reference.

    Contiguous seqs, no duplicate id, the reference's verdict at the reference's time, a log
    `verify` accepts, and exactly one reattach when the kill came before the verdict — but
    for a kill between the last observation and the verdict the rules reach on it: the new
    watch records that verdict as the dead one would have, the log then the reference's
    length, with no claim.
    """
    assert [e.seq for e in events] == list(range(len(events))), f"k={k}: seq gap"
    assert len({e.id for e in events}) == len(events), f"k={k}: duplicate id"
    got = verdict_of(events)
    assert got == expected, f"k={k}: verdict {got} after the crash, {expected} without"
    report = verify(events)
    assert report.ok, f"k={k}: {report}"
    if k < reference:
        reattaches = sum(isinstance(e, WatchStarted) and e.reattach for e in events)
        verdict_only = reattaches == 0 and len(events) == reference and k == reference - 1
        assert reattaches == 1 or verdict_only, f"k={k}: {reattaches} reattaching watches"
