"""Bad stores: one line through the CLI, typed errors in the library, no surprise waits.

The broad matrix of bad inputs (missing, empty, garbage, truncated, a directory for a file,
another program's database, …) is tests/test_cli_manners.py; this module adds the cases it
does not cover: a newer schema, a doctored row, a file where the parent directory should
be, a stream file that is a directory, read-only files and directories, a full disk, and a
Postgres server that does not answer.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import example_logs
from flashfsm.adapters.jsonl import JsonlStore, stream_file_name
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.cli import app
from flashfsm.events.errors import StoreError, StoreFullError
from flashfsm.events.models import Event
from tests.store_support import make_events

EXAMPLES = example_logs()
JOB = "job-walk-s0-a0"

#: Every command that only reads a store (`export` writes only its destination).
READERS = [
    ["ls"],
    ["replay", JOB, "--verify"],
    ["explain", JOB],
    ["why-not", JOB, "stall"],
    ["whatif", JOB, "--set", "queue_grace_s=600"],
    ["timeline", JOB, "--out", "{out}/picture.svg"],
    ["watch", JOB, "--read-only"],
    ["export", JOB, "--to", "jsonl:///{out}/exported"],
]


def invoke(args: list[str]) -> Any:
    """Run the command line; a Python exception other than an exit fails the test."""
    result = CliRunner().invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    return result


def one_error_line(args: list[str]) -> str:
    """The command failed with exit 1 and printed exactly one line, `error: …`."""
    result = invoke(args)
    lines = result.output.splitlines()
    assert result.exit_code == 1, (args, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.output)
    assert "Traceback" not in result.output
    return lines[0]


def _sqlite_copy(tmp_path: Path) -> Path:
    db = tmp_path / "events.db"
    copy_streams(f"jsonl:{EXAMPLES}", f"sqlite:///{db}")
    return db


# --- one line per case --------------------------------------------------------------------


def test_a_newer_schema_version_is_one_line_naming_the_file(tmp_path: Path) -> None:
    db = _sqlite_copy(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    for args in (["ls"], ["replay", JOB]):
        line = one_error_line([*args, "--store", f"sqlite:///{db}"])
        assert str(db) in line and "schema version 99 is newer" in line, line
    with pytest.raises(StoreError, match="upgrade flashfsm"):
        SqliteStore(db)


def test_a_doctored_row_is_a_checksum_mismatch_in_one_line(tmp_path: Path) -> None:
    db = _sqlite_copy(tmp_path)
    with sqlite3.connect(db) as conn:  # an edit that keeps the body a valid event
        conn.execute(
            "UPDATE events SET body = replace(body, '\"IN_QUEUE\"', '\"IN_PROGRESS\"') "
            "WHERE stream = ? AND seq = 3",
            (JOB,),
        )
        assert conn.total_changes == 1
    conn.close()
    line = one_error_line(["explain", JOB, "--store", f"sqlite:///{db}"])
    assert str(db) in line and f"stream '{JOB}'" in line and "seq 3" in line, line
    assert "checksum mismatch" in line


def test_a_file_where_the_parent_directory_should_be_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory\n")
    for url in (f"sqlite:///{tmp_path}/afile/events.db", f"jsonl:///{tmp_path}/afile/logs"):
        line = one_error_line(["ls", "--store", url])
        assert str(tmp_path / "afile") in line, line


def test_a_stream_file_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    copy_streams(f"jsonl:{EXAMPLES}", f"jsonl:{tmp_path}/logs", ["job-stall-s0-a0"])
    (tmp_path / "logs" / stream_file_name(JOB)).mkdir()
    line = one_error_line(["replay", JOB, "--store", f"jsonl:///{tmp_path}/logs"])
    assert str(tmp_path / "logs" / stream_file_name(JOB)) in line, line
    with pytest.raises(StoreError, match="is a directory"):
        JsonlStore(tmp_path / "logs").read(JOB)


@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_read_only_store_is_readable_by_every_read_command(
    tmp_path: Path, scheme: str, args: list[str]
) -> None:
    root = tmp_path / "store"
    if scheme == "sqlite":
        root.mkdir()
        copy_streams(f"jsonl:{EXAMPLES}", f"sqlite:///{root}/events.db")
        url = f"sqlite:///{root}/events.db"
    else:
        copy_streams(f"jsonl:{EXAMPLES}", f"jsonl:{root}")
        url = f"jsonl:///{root}"
    for path in root.iterdir():
        path.chmod(0o444)
    root.chmod(0o555)
    out = tmp_path / "out"
    out.mkdir()
    try:
        result = invoke([*(a.format(out=out) for a in args), "--store", url])
    finally:
        root.chmod(0o755)
    assert result.exit_code != 1, result.output  # a verdict's exit code, not an error
    assert result.output.strip() and "error:" not in result.output


# --- a full disk --------------------------------------------------------------------------


def _full_write(fd: int, data: Any) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_makes_a_jsonl_append_a_store_full_error_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path / "logs")
    first = make_events("job-1", 0, 3)
    store.append("job-1", first, 0)
    before = store.path_for("job-1").read_bytes()
    more = make_events("job-1", 3, 2)
    with monkeypatch.context() as patch:
        patch.setattr("flashfsm.adapters.jsonl.os.write", _full_write)
        with pytest.raises(StoreFullError, match=f"{store.path_for('job-1')}.*job-1") as caught:
            store.append("job-1", more, 3)
    assert isinstance(caught.value, StoreError) and caught.value.__cause__ is None
    assert store.path_for("job-1").read_bytes() == before  # nothing half-written
    assert store.read("job-1") == first
    store.append("job-1", more, 3)  # room again: the same append succeeds
    assert JsonlStore(tmp_path / "logs").read("job-1") == [*first, *more]


def test_a_full_disk_on_fsync_cuts_the_unacknowledged_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path / "logs")
    first = make_events("job-1", 0, 2)
    store.append("job-1", first, 0)

    def full_fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("flashfsm.adapters.jsonl.fsync_fd", full_fsync)
    with pytest.raises(StoreFullError):
        store.append("job-1", make_events("job-1", 2, 1), 2)
    assert JsonlStore(tmp_path / "logs").read("job-1") == first


def _full_sqlite(monkeypatch: pytest.MonkeyPatch, store: SqliteStore) -> None:
    """Make every new connection of `store` see a database that cannot grow (SQLITE_FULL)."""
    original = SqliteStore._connect

    def connect(self: SqliteStore) -> sqlite3.Connection:
        conn = original(self)
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    store.close()
    monkeypatch.setattr(SqliteStore, "_connect", connect)


def test_a_full_disk_makes_a_sqlite_append_a_store_full_error_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "events.db"
    store = SqliteStore(db)
    first = make_events("job-1", 0, 2)
    store.append("job-1", first, 0)
    _full_sqlite(monkeypatch, store)
    full = SqliteStore(db)
    big: list[Event] = make_events("job-1", 2, 400)
    with pytest.raises(StoreFullError, match=f"{db}: cannot append to stream 'job-1'"):
        full.append("job-1", big, 2)
    outcomes = None
    with pytest.raises(StoreFullError):
        outcomes = full.append_many([("job-1", big, 2), ("job-2", make_events("job-2", 0, 1), 0)])
    assert outcomes is None
    assert full.read("job-1") == first and full.streams() == ["job-1"]
    full.close()
    monkeypatch.undo()
    again = SqliteStore(db)
    again.append("job-1", big, 2)
    assert len(again.read("job-1")) == 402
    again.close()


# --- Postgres that does not answer ---------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_a_closed_postgres_port_fails_at_once_in_one_line(read_only: bool) -> None:
    pytest.importorskip("psycopg")
    port = _closed_port()
    started = time.monotonic()
    with pytest.raises(StoreError, match=f"cannot connect to postgres 127.0.0.1:{port}/db"):
        open_store(f"postgresql://u:pw@127.0.0.1:{port}/db", read_only=read_only)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_a_silent_postgres_server_honours_the_urls_connect_timeout(read_only: bool) -> None:
    """A listener that never answers: the open gives up after `connect_timeout=1`."""
    pytest.importorskip("psycopg")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever speaks
        port = silent.getsockname()[1]
        started = time.monotonic()
        url = f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=1"
        with pytest.raises(StoreError, match="cannot connect to postgres"):
            open_store(url, read_only=read_only)
        elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 6, elapsed


def test_a_postgres_url_without_connect_timeout_gets_a_default_one() -> None:
    pytest.importorskip("psycopg")
    from flashfsm.adapters.postgres import DEFAULT_CONNECT_TIMEOUT_S, _connect_timeout

    assert _connect_timeout("postgresql://u@h/db", None) == (
        DEFAULT_CONNECT_TIMEOUT_S,
        {"connect_timeout": round(DEFAULT_CONNECT_TIMEOUT_S)},
    )
    assert _connect_timeout("postgresql://u@h/db?connect_timeout=2", None) == (2.0, {})
    assert _connect_timeout("postgresql://u@h/db?connect_timeout=0", 3.0) == (
        3.0,
        {"connect_timeout": 3},
    )


def test_the_example_logs_are_where_these_tests_expect_them() -> None:
    assert (EXAMPLES / f"{JOB}.jsonl").is_file() and shutil.which("true") is not None
    assert os.access(EXAMPLES, os.R_OK)
