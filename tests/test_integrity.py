"""Stored events carry checksums, and reading a store never changes it.

Each durable backend keeps a CRC-32 of every event's bytes (a JSONL line's seal, a
`checksum` column) and verifies it on every read. The properties below damage one stored
event in every possible way — every single-bit flip, and single-byte changes to any value
— and require each damage to be reported as a `CorruptLogError`: never a different event
read back, never a line skipped or cut. The rest of the module checks that every read-only
CLI command leaves every byte of a store as it found it, and the strict mode.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from flashfsm import example_logs
from flashfsm.adapters.jsonl import JsonlStore, TornLineWarning, read_jsonl_file
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.cli import app
from flashfsm.events.codec import (
    decode,
    decode_sealed_prefix,
    encode,
    encode_sealed,
    require_checksums,
    unseal,
)
from flashfsm.events.errors import ChecksumError, CorruptLogError
from flashfsm.events.models import Event
from flashfsm.ids import new_id
from tests.store_support import drop_table, postgres_dsn
from tests.test_events import any_event

STREAM = "job-integrity"
EXAMPLES = example_logs()
SLOW = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]


def _restamp(events: list[Event], stream: str = STREAM) -> list[Event]:
    """Random events made into one stream's log: its name, seqs 0.., fresh unique ids."""
    return [
        e.model_copy(update={"stream": stream, "seq": i, "id": new_id(1.7e9 + i)})
        for i, e in enumerate(events)
    ]


def _small(limit: int) -> st.SearchStrategy[Event]:
    """Events whose line is at most `limit` bytes (exhaustive damage costs 8 reads a byte)."""
    return any_event.filter(lambda e: len(encode(e)) <= limit)


logs = st.lists(_small(500), min_size=1, max_size=3).map(_restamp)


def _flips(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Every single-bit flip of `data`: (position, damaged bytes)."""
    for pos in range(len(data)):
        for bit in range(8):
            yield pos, data[:pos] + bytes([data[pos] ^ (1 << bit)]) + data[pos + 1 :]


def _changes(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Every single-byte change of `data` to any other value."""
    for pos in range(len(data)):
        for value in range(256):
            if value != data[pos]:
                yield pos, data[:pos] + bytes([value]) + data[pos + 1 :]


def _assert_detected(read: Callable[[], object], what: str) -> None:
    """`read` raises CorruptLogError: it neither returns events nor warns of a torn line."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TornLineWarning)
        try:
            got = read()
        except CorruptLogError:
            return
    raise AssertionError(f"{what}: undetected, the read returned {got!r}")


# --- the codec: the seal ------------------------------------------------------------------


@given(any_event)
def test_a_sealed_line_is_one_json_object_and_unseals_to_the_exact_body(event: Event) -> None:
    body = encode(event)
    line = encode_sealed(event)
    assert b"\n" not in line and line.startswith(body[:-1])
    assert unseal(line) == body and decode(unseal(line)) == event
    assert decode_sealed_prefix([line, body]) == ([event, event], None)  # old lines read too


@settings(max_examples=8, suppress_health_check=SLOW, deadline=None)
@given(_small(400))
def test_every_single_byte_change_of_a_sealed_line_fails_to_decode(event: Event) -> None:
    line = encode_sealed(event)
    for pos, damaged in _changes(line):
        events, error = decode_sealed_prefix([damaged])
        assert events == [] and error is not None, (pos, damaged)


def test_strict_mode_refuses_an_unsealed_line_and_names_why() -> None:
    body = encode(_restamp([_sample_event()])[0])
    with pytest.raises(ChecksumError, match="no checksum"):
        unseal(body, strict=True)
    events, error = decode_sealed_prefix([body], strict=True)
    assert events == [] and isinstance(error, ChecksumError)


def _sample_event() -> Event:
    return read_jsonl_file(EXAMPLES / "job-walk-s0-a0.jsonl")[0]


# --- JSONL: every flip and change of the file ---------------------------------------------


def _written(directory: Path, log: list[Event]) -> tuple[JsonlStore, Path, bytes]:
    """A JSONL store in `directory` holding `log`: the store, the log's file, its bytes."""
    store = JsonlStore(directory)
    store.append(STREAM, log, 0)
    path = store.path_for(STREAM)
    return store, path, path.read_bytes()


@settings(max_examples=10, suppress_health_check=SLOW, deadline=None)
@given(log=logs)
def test_every_single_bit_flip_in_a_jsonl_file_is_a_corrupt_log_error_and_never_cut(
    tmp_path_factory: pytest.TempPathFactory, log: list[Event]
) -> None:
    store, path, good = _written(tmp_path_factory.mktemp("flip"), log)
    assert store.read(STREAM) == log
    reader = JsonlStore(store.directory, read_only=True)
    for pos, damaged in _flips(good):
        path.write_bytes(damaged)
        _assert_detected(lambda: reader.read(STREAM), f"bit flip at byte {pos}")
        assert path.read_bytes() == damaged  # the read cut nothing


@settings(max_examples=2, suppress_health_check=SLOW, deadline=None)
@given(log=st.lists(_small(250), min_size=1, max_size=1).map(_restamp))
def test_every_single_byte_change_in_a_jsonl_file_is_a_corrupt_log_error(
    tmp_path_factory: pytest.TempPathFactory, log: list[Event]
) -> None:
    _, path, good = _written(tmp_path_factory.mktemp("change"), log)
    for pos, damaged in _changes(good):
        path.write_bytes(damaged)
        _assert_detected(lambda: read_jsonl_file(path), f"byte {pos} -> {damaged[pos]}")


@settings(max_examples=25, suppress_health_check=SLOW, deadline=None)
@given(log=logs, data=st.data())
def test_any_single_byte_change_in_a_many_line_jsonl_file_is_a_corrupt_log_error(
    tmp_path_factory: pytest.TempPathFactory, log: list[Event], data: st.DataObject
) -> None:
    store, path, good = _written(tmp_path_factory.mktemp("anychange"), log)
    for _ in range(20):
        pos = data.draw(st.integers(0, len(good) - 1))
        value = data.draw(st.integers(0, 255).filter(lambda v, p=pos: v != good[p]))
        damaged = good[:pos] + bytes([value]) + good[pos + 1 :]
        path.write_bytes(damaged)
        _assert_detected(lambda: store.read(STREAM), f"byte {pos} -> {value}")
        _assert_detected(lambda: list(store.iter_read(STREAM)), f"byte {pos} -> {value}")
        assert path.read_bytes() == damaged


# --- SQLite: every flip of a stored body and checksum -------------------------------------


def _sqlite_row(db: Path, seq: int) -> tuple[bytes, int]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT body, checksum FROM events WHERE stream = ? AND seq = ?", (STREAM, seq)
        ).fetchone()


def _sqlite_set(db: Path, seq: int, body: bytes, checksum: int | None) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE events SET body = ?, checksum = ? WHERE stream = ? AND seq = ?",
            (body, checksum, STREAM, seq),
        )
    conn.close()


@settings(max_examples=5, suppress_health_check=SLOW, deadline=None)
@given(log=logs, data=st.data())
def test_every_single_bit_flip_of_a_sqlite_body_or_checksum_is_a_corrupt_log_error(
    tmp_path_factory: pytest.TempPathFactory, log: list[Event], data: st.DataObject
) -> None:
    db = tmp_path_factory.mktemp("sqlite") / "events.db"
    SqliteStore(db).append(STREAM, log, 0)  # the writer's connections closed at exit
    seq = data.draw(st.integers(0, len(log) - 1))
    body, checksum = _sqlite_row(db, seq)
    assert checksum is not None
    reader = SqliteStore(db, read_only=True)
    try:
        for pos, damaged in _flips(bytes(body)):
            _sqlite_set(db, seq, damaged, checksum)
            _assert_detected(lambda: reader.read(STREAM), f"body bit flip at {pos}")
        for bit in range(32):
            _sqlite_set(db, seq, body, checksum ^ (1 << bit))
            _assert_detected(lambda: reader.read(STREAM), f"checksum bit {bit}")
        for _ in range(20):
            pos = data.draw(st.integers(0, len(body) - 1))
            value = data.draw(st.integers(0, 255).filter(lambda v, p=pos: v != body[p]))
            _sqlite_set(db, seq, body[:pos] + bytes([value]) + body[pos + 1 :], checksum)
            _assert_detected(lambda: reader.read(STREAM), f"body byte {pos} -> {value}")
        _sqlite_set(db, seq, body, checksum)
        assert reader.read(STREAM) == log
    finally:
        reader.close()


# --- Postgres -----------------------------------------------------------------------------


@pytest.mark.postgres
@settings(max_examples=3, suppress_health_check=SLOW, deadline=None)
@given(log=logs, data=st.data())
def test_every_storable_bit_flip_of_a_postgres_body_or_checksum_is_a_corrupt_log_error(
    log: list[Event], data: st.DataObject
) -> None:
    dsn = postgres_dsn()
    if dsn is None:
        pytest.skip("FLASHFSM_TEST_POSTGRES_DSN is not set: no Postgres server to test")
    import psycopg

    table = f"flashfsm_test_{uuid.uuid4().hex[:16]}"
    url = f"{dsn}{'&' if '?' in dsn else '?'}table={table}"
    store = open_store(url)
    try:
        store.append(STREAM, log, 0)
        seq = data.draw(st.integers(0, len(log) - 1))
        with psycopg.connect(dsn, autocommit=True) as conn:
            body, checksum = conn.execute(
                f"SELECT body, checksum FROM {table} WHERE stream = %s AND seq = %s",
                (STREAM, seq),
            ).fetchone()
            tried = 0
            for pos, damaged in _flips(body.encode()):
                try:
                    text = damaged.decode()
                except UnicodeDecodeError:
                    continue  # Postgres stores only valid UTF-8 text: not a damage it can hold
                if "\x00" in text:
                    continue
                conn.execute(
                    f"UPDATE {table} SET body = %s WHERE stream = %s AND seq = %s",
                    (text, STREAM, seq),
                )
                tried += 1
                _assert_detected(lambda: store.read(STREAM), f"body bit flip at {pos}")
            for bit in range(32):
                conn.execute(
                    f"UPDATE {table} SET body = %s, checksum = %s WHERE stream = %s AND seq = %s",
                    (body, checksum ^ (1 << bit), STREAM, seq),
                )
                _assert_detected(lambda: store.read(STREAM), f"checksum bit {bit}")
            assert tried > len(body)  # most flips of ASCII JSON stay storable text
    finally:
        store.close()
        drop_table(dsn, table)


# --- old logs, strict mode, copies ---------------------------------------------------------


_SEAL = re.compile(rb',"_c":"[0-9a-f]{8}"}$', re.M)


def old_logs(directory: Path) -> Path:
    """`directory` holding the example logs as a flashfsm from before checksums wrote them
    (each line without its seal); the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in EXAMPLES.glob("*.jsonl"):
        (directory / path.name).write_bytes(_SEAL.sub(b"}", path.read_bytes()))
    return directory


def test_an_old_unsealed_jsonl_log_reads_unchecked_and_strict_mode_refuses_it(
    tmp_path: Path,
) -> None:
    directory = old_logs(tmp_path / "old")
    old = directory / "job-walk-s0-a0.jsonl"
    assert not old.read_bytes().rstrip(b"\n").endswith(b'"}')  # as written before checksums
    events = read_jsonl_file(old)
    assert JsonlStore(directory, read_only=True).read(old.stem) == events
    with pytest.raises(CorruptLogError, match=r"line 1 seq 0: .*no checksum"):
        JsonlStore(directory, read_only=True, strict=True).read(old.stem)
    with require_checksums(), pytest.raises(CorruptLogError, match="no checksum"):
        read_jsonl_file(old)
    with pytest.raises(CorruptLogError, match="no checksum"):
        copy_streams(f"jsonl:{directory}", f"sqlite:///{tmp_path}/a.db", strict=True)
    # a copy seals them: the copy reads strictly
    copy_streams(f"jsonl:{directory}", f"jsonl:{tmp_path}/sealed")
    assert JsonlStore(tmp_path / "sealed", strict=True).read(old.stem) == events


def test_a_version_1_sqlite_store_reads_unchecked_and_gains_the_column_on_a_write_open(
    tmp_path: Path,
) -> None:
    db = tmp_path / "v1.db"
    events = read_jsonl_file(EXAMPLES / "job-walk-s0-a0.jsonl")
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE events (stream TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL "
        "UNIQUE, at REAL NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL, "
        "PRIMARY KEY (stream, seq)) WITHOUT ROWID"
    )
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
        [(e.stream, e.seq, e.id, e.at, e.kind, encode(e)) for e in events],
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    stream = events[0].stream
    before = db.read_bytes()
    reader = SqliteStore(db, read_only=True)
    assert reader.read(stream) == events
    with pytest.raises(CorruptLogError, match="no checksum"):
        SqliteStore(db, read_only=True, strict=True).read(stream)
    assert db.read_bytes() == before  # read-only: not migrated
    writer = SqliteStore(db)
    assert writer.read(stream) == events
    more = events[-1].model_copy(update={"seq": len(events), "id": new_id(2e9)})
    writer.append(stream, [more], len(events))
    writer.close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    sums = [row[0] for row in conn.execute("SELECT checksum FROM events ORDER BY seq")]
    conn.close()
    assert sums[:-1] == [None] * len(events) and sums[-1] is not None
    assert SqliteStore(db, read_only=True).read(stream) == [*events, more]


def test_copy_streams_verifies_the_source_and_copies_nothing_after_a_damaged_event(
    tmp_path: Path,
) -> None:
    log = _restamp([_sample_event()] * 3)
    store = JsonlStore(tmp_path / "src")
    store.append(STREAM, log, 0)
    path = store.path_for(STREAM)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"seq":1', b'"seq":1 ', 1)  # one byte more, JSON still
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptLogError, match=r"line 2 seq 1: .*checksum mismatch"):
        copy_streams(f"jsonl:{tmp_path}/src", f"sqlite:///{tmp_path}/dst.db")
    assert SqliteStore(tmp_path / "dst.db", read_only=True).read(STREAM) == []


# --- every read-only CLI command changes no byte ------------------------------------------

JOB = "job-walk-s0-a0"
RUN = "run-stall"


def _hashes(root: Path) -> dict[str, str]:
    """Every entry under `root`: a file's sha256, a directory's mark."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


READ_ONLY_COMMANDS = [
    ["ls"],
    ["ls", "--json"],
    ["replay", JOB],
    ["replay", JOB, "--verify", "--strict"],
    ["replay", RUN, "--verify"],
    ["explain", JOB],
    ["explain", RUN],
    ["why-not", JOB, "stall"],
    ["whatif", JOB, "--set", "queue_grace_s=600"],
    ["timeline", JOB, "--out", "{out}/picture.svg"],
    ["watch", JOB, "--read-only"],
    ["export", JOB, "--to", "jsonl:///{out}/exported"],
    ["logs", JOB],
    ["logs", RUN, "--json"],
]


@pytest.fixture(scope="module")
def sealed_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example logs copied (so sealed) into a SQLite store and a JSONL store."""
    root = tmp_path_factory.mktemp("stores")
    copy_streams(f"jsonl:{EXAMPLES}", f"sqlite:///{root}/sqlite/events.db")
    copy_streams(f"jsonl:{EXAMPLES}", f"jsonl:{root}/jsonl")
    return {"sqlite": root / "sqlite", "jsonl": root / "jsonl"}


@pytest.mark.parametrize("args", READ_ONLY_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
def test_a_read_only_cli_command_changes_no_byte_of_the_store(
    sealed_stores: dict[str, Path], tmp_path: Path, scheme: str, args: list[str]
) -> None:
    root = tmp_path / "store"
    shutil.copytree(sealed_stores[scheme], root)
    url = f"sqlite:///{root}/events.db" if scheme == "sqlite" else f"jsonl:///{root}"
    out = tmp_path / "out"
    out.mkdir()
    line = [a.format(out=out) for a in args]
    before = _hashes(root)
    result = CliRunner().invoke(app, [*line, "--store", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), result.output
    assert result.output.strip()
    assert _hashes(root) == before


@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
def test_replay_verify_strict_refuses_an_unchecked_log_in_one_line(
    tmp_path: Path, scheme: str
) -> None:
    url = f"jsonl:///{old_logs(tmp_path / 'old')}"
    if scheme == "sqlite":  # a copy into a version-1 file keeps them unchecked
        db = tmp_path / "old.db"
        SqliteStore(db).close()
        copy_streams(url, f"sqlite:///{db}", [JOB])
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE events SET checksum = NULL")
        conn.close()
        url = f"sqlite:///{db}"
    lenient = CliRunner().invoke(app, ["replay", JOB, "--verify", "--store", url])
    assert lenient.exit_code != 1, lenient.output
    result = CliRunner().invoke(app, ["replay", JOB, "--verify", "--strict", "--store", url])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and "no checksum" in lines[0] and "seq 0" in lines[0], lines


def test_replay_strict_without_verify_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["replay", JOB, "--strict", "--store", f"jsonl:{EXAMPLES}"])
    assert result.exit_code == 1 and "--verify" in result.output
