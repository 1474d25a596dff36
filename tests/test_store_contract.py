"""The event-store contract, run against every backend, and each backend's own behaviour.

The contract is `flashfsm.testing.StoreContract`, the suite the package ships for any
backend (modelled on the eventsourcing library's recorder tests, which it ships for
third-party recorders): one subclass per backend below — memory, SQLite, JSONL and
Postgres (the last skipped, with the reason, unless FLASHFSM_TEST_POSTGRES_DSN names a
server; each test gets its own table). A backend written outside the package passes the
same suite in tests/test_outside_backend.py. Then what the suite cannot say alike for
every backend: copies between every pair of kinds, a Hypothesis model of each, JSONL torn
lines and corruption, file modes, URLs.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import stat
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from flashfsm.adapters.jsonl import JsonlStore, TornLineWarning, read_jsonl_file
from flashfsm.adapters.memory import MemoryStore
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import (
    SCHEMES,
    copy_streams,
    default_store_url,
    open_store,
    path_url,
    url_path,
)
from flashfsm.events.codec import encode_sealed
from flashfsm.events.errors import ConcurrencyError, CorruptLogError, DuplicateEventError
from flashfsm.events.models import Event
from flashfsm.events.store import (
    CAPABILITIES,
    EventStore,
    StoreContractError,
    capabilities,
    check_store,
)
from flashfsm.testing import StoreContract
from flashfsm.testing.contract import _awkwardly_named_logs, _follow_into
from tests.store_support import (
    KINDS,
    PG_ENV,
    Backend,
    drop_table,
    make_backend,
    make_event,
    make_events,
    postgres_dsn,
    run_cleanups,
)

NO_POSTGRES = f"{PG_ENV} not set"
EVERY_CAPABILITY = frozenset(capability.name for capability in CAPABILITIES)


def _kind_param(kind: str):
    if kind != "postgres":
        return pytest.param(kind, id=kind)
    return pytest.param(
        kind,
        id=kind,
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES),
        ],
    )


def _available_kinds() -> list[str]:
    return [k for k in KINDS if k != "postgres" or postgres_dsn() is not None]


@pytest.fixture
def cleanups():
    pending: list = []
    yield pending
    run_cleanups(pending)


@pytest.fixture(params=[_kind_param(k) for k in KINDS])
def backend(request, tmp_path, cleanups) -> Backend:
    """An empty store location of each kind."""
    return make_backend(request.param, tmp_path, cleanups)


def _seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


def _next(received: Any, timeout: float = 10.0) -> tuple[float, Event]:
    at, item = received.get(timeout=timeout)
    if isinstance(item, Exception):
        raise item
    return at, item


# -- the shipped contract, once per backend ----------------------------------------------------


class TestMemoryStore(StoreContract):
    capabilities = frozenset({"snapshots", "snapshot_batches"})
    shared = False  # (a new MemoryStore is a new, empty store)

    def new_store(self) -> EventStore:
        return MemoryStore()


class TestSqliteStore(StoreContract):
    capabilities = EVERY_CAPABILITY

    def new_store(self) -> EventStore:
        return SqliteStore(self.tmp / "events.db")

    def store_url(self) -> str:
        return path_url("sqlite", self.tmp / "events.db")

    def damage(self, store: EventStore, stream: str, seq: int) -> bool:
        with sqlite3.connect(self.tmp / "events.db") as conn:
            conn.execute(
                "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), 'IN_QUEUE', "
                "'IN_QUEUX') AS BLOB) WHERE stream = ? AND seq = ?",
                (stream, seq),
            )
        conn.close()
        return True


class TestJsonlStore(StoreContract):
    capabilities = frozenset({"lazy_reads"})

    def new_store(self) -> EventStore:
        return JsonlStore(self.tmp / "log")

    def store_url(self) -> str:
        return path_url("jsonl", self.tmp / "log")

    def damage(self, store: EventStore, stream: str, seq: int) -> bool:
        path = self.tmp / "log" / JsonlStore(self.tmp / "log").path_for(stream).name
        lines = path.read_bytes().split(b"\n")
        lines[seq] = lines[seq].replace(b"IN_QUEUE", b"IN_QUEUX")
        path.write_bytes(b"\n".join(lines))
        return True


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
class TestPostgresStore(StoreContract):
    capabilities = EVERY_CAPABILITY - {"lazy_reads"}

    def new_store(self) -> EventStore:
        from flashfsm.adapters.postgres import PostgresStore

        dsn = postgres_dsn()
        assert dsn is not None
        if not self._cleanups:
            self.on_teardown(lambda: drop_table(dsn, self.location_id))
        return PostgresStore(dsn, table=self.location_id)

    def store_url(self) -> str:
        dsn = postgres_dsn()
        assert dsn is not None
        return f"{dsn}{'&' if '?' in dsn else '?'}table={self.location_id}"

    def damage(self, store: EventStore, stream: str, seq: int) -> bool:
        import psycopg
        from psycopg import sql

        with psycopg.connect(postgres_dsn(), autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET body = replace(body, 'IN_QUEUE', 'IN_QUEUX') "
                    "WHERE stream = %s AND seq = %s"
                ).format(sql.Identifier(self.location_id)),
                (stream, seq),
            )
        return True


# -- what the suite says of the contract itself ----------------------------------------------


def test_open_store_checks_a_backend_once_and_refuses_half_a_capability(tmp_path, monkeypatch):
    class HalfLeases(MemoryStore):
        """A store with a claim but no renewal, no index, no heartbeat."""

        def claim(self, owner: str, ttl_s: float, limit: int) -> list:
            return []

    closed: list[bool] = []

    def half(url: str, read_only: bool) -> EventStore:
        store = HalfLeases()
        store.close = lambda: closed.append(True)  # type: ignore[method-assign]
        return store

    monkeypatch.setitem(SCHEMES, "half", half)
    with pytest.raises(StoreContractError, match="part of LeaseStore: claim without renew"):
        open_store("half://")
    assert closed == [True]  # the refused store was closed
    with pytest.raises(StoreContractError, match="not an EventStore: no read"):
        check_store(object.__new__(type("Appends", (), {"append": lambda *a: None})))
    assert capabilities(HalfLeases()).leases is None  # (a lookup never offers half of one)


def test_a_wrapper_offers_what_the_store_it_forwards_to_offers(tmp_path):
    from flashfsm.events.store import HANDOFF, FencedStore
    from flashfsm.writer import JOB, preload

    store = SqliteStore(tmp_path / "events.db")
    fenced = FencedStore(store, lambda _s: HANDOFF)
    assert capabilities(fenced).names == capabilities(store).names == EVERY_CAPABILITY
    memory = capabilities(FencedStore(MemoryStore(), lambda _s: None))
    assert memory.names == {"group_commit", "snapshots", "snapshot_batches"}
    store.save_snapshot("job-a", 0, 1, b"x")
    assert capabilities(preload(store, ["job-a"], JOB)).snapshots is not None
    store.close()


@pytest.mark.parametrize("kind", [_kind_param(k) for k in KINDS])
def test_copy_streams_between_every_pair_of_backends_keeps_streams_seqs_and_ids(
    kind, tmp_path, cleanups
):
    src = make_backend(kind, tmp_path, cleanups).open()
    logs = _awkwardly_named_logs(src)
    for other in _available_kinds():
        dst = make_backend(other, tmp_path, cleanups).open()
        copied = copy_streams(src, dst, batch_size=2)
        assert copied == {name: len(events) for name, events in logs.items()}
        assert dst.streams() == sorted(logs)
        for name, events in logs.items():
            assert dst.read(name) == events, (kind, other, name)


def test_the_store_matches_a_dict_model(backend):
    shared = {"store": backend.open()}

    class Machine(StoreVersusModel):
        location = backend
        current = shared

    run_state_machine_as_test(Machine, settings=settings(settings(), stateful_step_count=20))


# -- the dict model --------------------------------------------------------------------------

STREAMS = st.sampled_from(["job-a", "job/b", "ünï c", "50%"])
_examples = itertools.count()


class StoreVersusModel(RuleBasedStateMachine):
    """Every store answer equals a plain dict's: stream -> list of events.

    The examples share one store location (a new one per example would cost more than the
    example); each example works in streams of its own, named with a fresh prefix.
    """

    location: Backend
    current: dict[str, EventStore]

    @initialize()
    def start(self) -> None:
        self.prefix = f"ex{next(_examples)}:"
        self.model: dict[str, list[Event]] = {}
        self.clock = 1_700_000_000.0

    @property
    def store(self) -> EventStore:
        return self.current["store"]

    def _stored_ids(self) -> list[str]:
        return sorted(e.id for log in self.model.values() for e in log)

    @rule(
        stream=STREAMS,
        n=st.integers(1, 3),
        delta=st.sampled_from([0, 0, 0, -1, 1]),
        dup=st.sampled_from(["none", "none", "batch", "store"]),
        data=st.data(),
    )
    def append(self, stream: str, n: int, delta: int, dup: str, data) -> None:
        stream = self.prefix + stream
        next_seq = len(self.model.get(stream, []))
        expected = next_seq + delta if next_seq + delta >= 0 else next_seq + 1
        events = []
        for i in range(n):
            self.clock += 1.5
            events.append(make_event(stream, expected + i, self.clock))
        if dup == "batch" and n > 1:
            events[-1] = events[-1].model_copy(update={"id": events[0].id})
        elif dup == "store" and self._stored_ids():
            clash = data.draw(st.sampled_from(self._stored_ids()))
            events[-1] = events[-1].model_copy(update={"id": clash})
        else:
            dup = "none"
        if expected != next_seq:
            with pytest.raises(ConcurrencyError):
                self.store.append(stream, events, expected)
        elif dup != "none":
            with pytest.raises(DuplicateEventError):
                self.store.append(stream, events, expected)
        else:
            self.store.append(stream, events, expected)
            self.model.setdefault(stream, []).extend(events)

    @rule(stream=STREAMS, after=st.none() | st.integers(-2, 10))
    def read(self, stream: str, after: int | None) -> None:
        stream = self.prefix + stream
        log = self.model.get(stream, [])
        start = 0 if after is None else max(0, after + 1)
        assert self.store.read(stream, after) == log[start:]

    @rule()
    def streams(self) -> None:
        mine = [s for s in self.store.streams() if s.startswith(self.prefix)]
        assert mine == sorted(s for s, log in self.model.items() if log)

    @precondition(lambda self: self.location.durable)
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.current["store"] = self.location.open()
        for stream, log in self.model.items():
            assert self.store.read(stream) == log


# -- JSONL: torn lines, corruption, the file alone, modes ------------------------------------


def _jsonl_with(tmp_path: Path, stream: str, count: int) -> tuple[JsonlStore, list[Event], Path]:
    store = JsonlStore(tmp_path / "log")
    events = make_events(stream, 0, count)
    store.append(stream, events, 0)
    return store, events, store.path_for(stream)


def test_jsonl_a_torn_last_line_is_ignored_by_a_read_and_cut_only_by_the_next_append(tmp_path):
    _, events, path = _jsonl_with(tmp_path, "job-1", 3)
    good = path.read_bytes()
    torn = encode_sealed(make_event("job-1", 3))
    path.write_bytes(good + torn[: len(torn) // 2])  # the crash hit mid-write
    reopened = JsonlStore(tmp_path / "log")
    for read in (reopened.read, lambda s: list(reopened.iter_read(s))):
        with pytest.warns(TornLineWarning, match="line 4.*never changes the file"):
            assert read("job-1") == events
    assert path.read_bytes() == good + torn[: len(torn) // 2]  # a read cut nothing
    nxt = make_event("job-1", 3)
    cut = f"line 4 was torn .*[(]{len(torn) // 2} bytes, never acknowledged[)]; cut it"
    with pytest.warns(TornLineWarning, match=cut):
        reopened.append("job-1", [nxt], 3)
    assert path.read_bytes() == good + encode_sealed(nxt) + b"\n"
    assert reopened.read("job-1") == [*events, nxt]


def test_jsonl_a_torn_last_line_is_cut_on_append(tmp_path):
    _, events, path = _jsonl_with(tmp_path, "job-1", 2)
    good = path.read_bytes()
    path.write_bytes(good + b'{"stream":"job-1","seq":2,"id":"01')
    writer = JsonlStore(tmp_path / "log")
    nxt = make_event("job-1", 2)
    with pytest.warns(TornLineWarning, match="line 3"):
        writer.append("job-1", [nxt], 2)
    assert path.read_bytes() == good + encode_sealed(nxt) + b"\n"
    assert JsonlStore(tmp_path / "log").read("job-1") == [*events, nxt]


@pytest.mark.parametrize(
    "last",
    [b"\x00\x00\x00\x00\n", b"{}\n", b"not json\n"],
    ids=["zero-filled", "another object", "not json"],
)
def test_jsonl_an_undecodable_complete_last_line_is_corruption_and_never_cut(tmp_path, last):
    store, _, path = _jsonl_with(tmp_path, "job-1", 2)
    damaged = path.read_bytes() + last
    path.write_bytes(damaged)
    for read in (store.read, lambda s: list(store.iter_read(s))):
        with pytest.raises(CorruptLogError, match="line 3 seq 2") as caught:
            read("job-1")
        assert caught.value.seq == 2 and caught.value.line == 3
    with pytest.raises(CorruptLogError, match="line 3"):
        read_jsonl_file(path)
    writer = JsonlStore(tmp_path / "log")
    with pytest.raises(CorruptLogError, match="line 3"):
        writer.append("job-1", [make_event("job-1", 2)], 2)
    assert path.read_bytes() == damaged  # neither a read nor a refused append cut it


def test_jsonl_a_verdict_whose_newline_was_damaged_is_corruption_not_a_torn_line(tmp_path):
    store, _, path = _jsonl_with(tmp_path, "job-1", 3)
    damaged = path.read_bytes()[:-1] + b"\x0b"  # the last newline, one bit flipped
    path.write_bytes(damaged)
    with pytest.raises(CorruptLogError, match="newline is damaged"):
        store.read("job-1")
    with pytest.raises(CorruptLogError, match="newline is damaged"):
        JsonlStore(tmp_path / "log").append("job-1", [make_event("job-1", 3)], 3)
    assert path.read_bytes() == damaged


def test_jsonl_a_corrupt_middle_line_raises_naming_the_line(tmp_path):
    store, _, path = _jsonl_with(tmp_path, "job-1", 4)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:-5] + b"#####"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptLogError, match="line 2") as caught:
        store.read("job-1")
    assert caught.value.line == 2
    assert str(path) in str(caught.value)
    with pytest.raises(CorruptLogError, match="line 2"):
        read_jsonl_file(path)
    writer = JsonlStore(tmp_path / "log")
    with pytest.raises(CorruptLogError, match="line 2"):
        writer.append("job-1", [make_event("job-1", 4)], 4)
    writer.append("job-2", make_events("job-2", 0, 1), 0)  # other streams carry on
    assert _seqs(writer.read("job-2")) == [0]


def test_jsonl_a_line_out_of_place_raises_naming_the_line(tmp_path):
    store, _, path = _jsonl_with(tmp_path, "job-1", 3)
    lines = path.read_bytes().split(b"\n")
    lines[0], lines[1] = lines[1], lines[0]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptLogError, match="line 1"):
        store.read("job-1")


def test_jsonl_a_stream_file_replays_with_nothing_but_the_file(tmp_path):
    _, events, path = _jsonl_with(tmp_path, "runs/7", 3)
    elsewhere = tmp_path / "post-mortem.jsonl"
    shutil.copyfile(path, elsewhere)
    assert read_jsonl_file(elsewhere) == events
    with open(elsewhere, "ab") as f:
        f.write(b'{"stream":')
    before = elsewhere.read_bytes()
    with pytest.warns(TornLineWarning, match="ignoring"):
        assert read_jsonl_file(elsewhere) == events
    assert elsewhere.read_bytes() == before  # a post-mortem read never modifies the file


def test_jsonl_copy_exports_one_stream_to_one_file(tmp_path):
    src = SqliteStore(tmp_path / "events.db")
    events = make_events("job-1", 0, 4)
    src.append("job-1", events, 0)
    src.append("job-2", make_events("job-2", 0, 1), 0)
    copy_streams(src, path_url("jsonl", tmp_path / "export"), ["job-1"])
    assert sorted(os.listdir(tmp_path / "export")) == [".flashfsm.lock", "job-1.jsonl"]
    assert read_jsonl_file(tmp_path / "export" / "job-1.jsonl") == events


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_jsonl_files_are_owner_only(tmp_path):
    store = JsonlStore(tmp_path / "a" / "b" / "log")
    store.append("job-1", make_events("job-1", 0, 1), 0)
    for directory in ("a", "a/b", "a/b/log"):
        assert _mode(tmp_path / directory) == 0o700, directory
    assert _mode(store.path_for("job-1")) == 0o600
    assert _mode(tmp_path / "a/b/log/.flashfsm.lock") == 0o600


def test_jsonl_long_stream_names_get_a_hashed_file_name_and_read_back(tmp_path):
    store = JsonlStore(tmp_path / "log")
    long_name = "ü/" * 100
    store.append(long_name, make_events(long_name, 0, 2), 0)
    assert len(store.path_for(long_name).name) < 255
    assert store.streams() == [long_name]
    assert _seqs(JsonlStore(tmp_path / "log").read(long_name)) == [0, 1]


def test_sqlite_files_are_owner_only(tmp_path):
    store = SqliteStore(tmp_path / "x" / "y" / "events.db")
    store.append("job-1", make_events("job-1", 0, 1), 0)
    for directory in ("x", "x/y"):
        assert _mode(tmp_path / directory) == 0o700, directory
    for name in ("events.db", "events.db-wal", "events.db-shm"):
        path = tmp_path / "x" / "y" / name
        assert _mode(path) == 0o600, name
    store.close()


def test_sqlite_a_corrupt_body_raises_naming_file_stream_and_seq(tmp_path):
    store = SqliteStore(tmp_path / "events.db")
    store.append("job-1", make_events("job-1", 0, 3), 0)
    with sqlite3.connect(tmp_path / "events.db") as conn:
        conn.execute("UPDATE events SET body = x'7b6e6f7065' WHERE seq = 1")
    with pytest.raises(CorruptLogError, match="seq 1") as caught:
        store.read("job-1")
    assert caught.value.stream == "job-1"
    assert "events.db" in str(caught.value)
    store.close()


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_postgres_follow_is_woken_by_notify_not_by_polling(tmp_path, cleanups):
    from flashfsm.adapters.postgres import PostgresStore

    backend = make_backend("postgres", tmp_path, cleanups)
    table = backend.url.rsplit("table=", 1)[1]
    dsn = postgres_dsn()
    assert dsn is not None
    writer = PostgresStore(dsn, table=table)
    follower = PostgresStore(dsn, table=table, fallback_s=60.0)
    backend.opened += [writer, follower]
    # no quick polls either: only a NOTIFY can wake the follower within the minute
    received, thread = _follow_into(follower, "job-1", None, until_seq=0, poll_s=60.0)
    time.sleep(0.3)  # the follower is listening, with a minute between fallback polls
    writer.append("job-2", make_events("job-2", 0, 1), 0)  # another stream: not woken for it
    event = make_event("job-1", 0)
    writer.append("job-1", [event], 0)
    got_at, got = _next(received, timeout=5)
    assert got == event
    assert got_at - event.at < 1.0
    thread.join(5)


# -- URLs --------------------------------------------------------------------------------------


def test_store_urls_name_their_backends(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert isinstance(open_store("memory://"), MemoryStore)
    absolute = open_store(f"sqlite://{tmp_path}/abs.db")
    assert isinstance(absolute, SqliteStore) and absolute.path == tmp_path / "abs.db"
    assert absolute.durable
    absolute.close()
    relative = open_store("sqlite:rel/events.db?durable=false")
    assert isinstance(relative, SqliteStore) and relative.path == tmp_path / "rel/events.db"
    assert not relative.durable
    relative.close()
    logs = open_store("jsonl:logs?fsync=0")
    assert isinstance(logs, JsonlStore) and logs.directory == tmp_path / "logs"
    assert not logs.fsync
    assert url_path("sqlite:////srv/x.db") == Path("/srv/x.db")  # the SQLAlchemy spelling
    assert url_path("sqlite:///srv/with%20space.db") == Path("/srv/with space.db")
    assert url_path(path_url("jsonl", tmp_path / "a b%")) == tmp_path / "a b%"
    with pytest.raises(ValueError, match="local path"):
        open_store("sqlite://relative.db")
    with pytest.raises(ValueError, match="unknown parameter"):
        open_store(f"sqlite://{tmp_path}/p.db?durible=0")
    with pytest.raises(ValueError, match="unknown store URL scheme"):
        open_store("mysql://x")


def test_a_store_url_sets_the_snapshot_interval_and_refuses_a_bad_one(tmp_path):
    every = open_store(f"sqlite://{tmp_path}/a.db?snapshot_every=25")
    off = open_store(f"sqlite://{tmp_path}/b.db?snapshot_every=none")
    default = open_store(f"sqlite://{tmp_path}/c.db")
    assert (every.snapshot_every, off.snapshot_every, default.snapshot_every) == (25, None, 100)
    for store in (every, off, default):
        store.close()
    for bad in ("0", "-5", "2.5", "often", ""):
        with pytest.raises(ValueError, match="snapshot_every"):
            open_store(f"sqlite://{tmp_path}/d.db?snapshot_every={bad}")
    assert not (tmp_path / "d.db").exists()  # refused before anything is created
    with pytest.raises(ValueError, match="snapshot_every must be at least 1"):
        SqliteStore(tmp_path / "e.db", snapshot_every=0)


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_a_postgres_url_sets_the_store_s_own_options(tmp_path, cleanups):
    backend = make_backend("postgres", tmp_path, cleanups)
    store = open_store(f"{backend.url}&snapshot_every=none&idle_in_transaction_s=2.5&pool_size=2")
    backend.opened.append(store)
    assert (store.snapshot_every, store.idle_in_transaction_s) == (None, 2.5)
    with store._pool.connection() as conn:  # the server ends idle transactions at 2.5 s
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("2500ms",)
    for bad in ("idle_in_transaction_s=0", "idle_in_transaction_s=inf", "pool_size=many"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            open_store(f"{backend.url}&{bad}")


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_postgres_urls_open_a_postgres_store(tmp_path, cleanups):
    from flashfsm.adapters.postgres import PostgresStore

    backend = make_backend("postgres", tmp_path, cleanups)
    for url in (backend.url, backend.url.replace("postgresql://", "postgres://", 1)):
        store = open_store(url)
        backend.opened.append(store)
        assert isinstance(store, PostgresStore)
        assert store.table == backend.url.rsplit("table=", 1)[1]


def test_default_store_url_is_the_env_var_else_a_user_sqlite_file(monkeypatch):
    monkeypatch.setenv("FLASHFSM_STORE", "jsonl:///srv/flashfsm")
    assert default_store_url() == "jsonl:///srv/flashfsm"
    monkeypatch.delenv("FLASHFSM_STORE")
    url = default_store_url()
    assert url.startswith("sqlite:///") and url.endswith("/flashfsm/events.db")
    assert url_path(url).is_absolute()


def test_store_protocol_is_implemented_by_every_backend(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for store in (MemoryStore(), SqliteStore(tmp_path / "e.db"), JsonlStore(tmp_path / "j")):
            assert isinstance(store, EventStore)
            store.close()
