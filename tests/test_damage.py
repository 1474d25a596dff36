"""Damage is contained: one damaged event costs its stream, never the whole store.

A store of 1,000 job streams (copies of small real job logs from the example logs) in which
exactly one event is damaged (a line or row whose bytes no longer match their checksum):
the store-wide commands — `ls`, `cost` and `whatif --all` — read every other stream, report
999, flag the damaged one (its file or store, stream and seq, one line), exit 7 (`damaged`)
and write nothing. A crossed `--fail-if` gate still exits 6, the damage still flagged.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import example_logs
from flashfsm.adapters.jsonl import JsonlStore, read_jsonl_file
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.cli.common import EXIT_CODE_TABLE, EXIT_DAMAGED, EXIT_GATE, EXIT_USAGE
from flashfsm.events.models import Event
from flashfsm.ids import new_id
from tests.store_support import drop_table, postgres_dsn
from tests.test_integrity import _hashes

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = example_logs()
#: Short real job logs, each with a verdict, copied round-robin under the 1,000 names.
TEMPLATES = ("job-codeerror-s0-a0", "job-crashloop-s0-a1", "job-walk-s0-a1")
STREAMS = 1_000
DAMAGED = "job-0417"
DAMAGED_SEQ = 5

runner = CliRunner()


def names() -> list[str]:
    return [f"job-{i:04d}" for i in range(STREAMS)]


def copies() -> Iterator[tuple[str, list[Event]]]:
    """Each stream's log: a template's events under its name, with fresh unique ids."""
    logs = [read_jsonl_file(EXAMPLES / f"{name}.jsonl") for name in TEMPLATES]
    for n, stream in enumerate(names()):
        yield (
            stream,
            [
                e.model_copy(update={"stream": stream, "id": new_id(e.at)})
                for e in logs[n % len(logs)]
            ],
        )


def damage(body: bytes) -> bytes:
    """The body with one value changed and its checksum left as it was."""
    assert b'"at":' in body
    return body.replace(b'"at":', b'"at":9', 1)


# --- stores ---------------------------------------------------------------------------------


@dataclass
class Damaged:
    """A store of `STREAMS` streams, one event of `DAMAGED` damaged."""

    kind: str
    url: str
    root: Path | None  # the files a reader must leave as they were (None: a server's table)


def fill_and_close(store: Any) -> None:
    """Append `copies()` in group commits of 250 streams, then close the store."""
    try:
        batches = [(stream, events, 0) for stream, events in copies()]
        for first in range(0, len(batches), 250):
            assert not any(store.append_many(batches[first : first + 250]))
    finally:
        store.close()


def build_sqlite(root: Path) -> Damaged:
    db = root / "events.db"
    fill_and_close(SqliteStore(db, durable=False))
    conn = sqlite3.connect(db)
    with conn:
        (body,) = conn.execute(
            "SELECT body FROM events WHERE stream = ? AND seq = ?", (DAMAGED, DAMAGED_SEQ)
        ).fetchone()
        broken = damage(body if isinstance(body, bytes) else body.encode())
        conn.execute(
            "UPDATE events SET body = ? WHERE stream = ? AND seq = ?",
            (broken if isinstance(body, bytes) else broken.decode(), DAMAGED, DAMAGED_SEQ),
        )
    conn.close()
    return Damaged("sqlite", f"sqlite:///{db}", root)


def build_jsonl(root: Path) -> Damaged:
    store = JsonlStore(root, fsync=False)
    try:
        for stream, events in copies():
            store.append(stream, events, 0)
        path = store.path_for(DAMAGED)
    finally:
        store.close()
    lines = path.read_bytes().split(b"\n")
    lines[DAMAGED_SEQ] = damage(lines[DAMAGED_SEQ])
    path.write_bytes(b"\n".join(lines))
    return Damaged("jsonl", f"jsonl://{root}", root)


def build_postgres(dsn: str, table: str) -> Damaged:
    import psycopg

    url = f"{dsn}{'&' if '?' in dsn else '?'}table={table}"
    fill_and_close(open_store(url))
    with psycopg.connect(dsn, autocommit=True) as conn:
        (body,) = conn.execute(
            f"SELECT body FROM {table} WHERE stream = %s AND seq = %s", (DAMAGED, DAMAGED_SEQ)
        ).fetchone()
        conn.execute(
            f"UPDATE {table} SET body = %s WHERE stream = %s AND seq = %s",
            (damage(body.encode()).decode(), DAMAGED, DAMAGED_SEQ),
        )
    return Damaged("postgres", url, None)


@pytest.fixture(
    scope="module",
    params=["sqlite", "jsonl", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def damaged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    kind = request.param
    if kind == "postgres":
        dsn = postgres_dsn()
        if dsn is None:
            pytest.skip("FLASHFSM_TEST_POSTGRES_DSN is not set: no Postgres server to test")
        table = f"flashfsm_test_{uuid.uuid4().hex[:16]}"
        try:
            yield build_postgres(dsn, table)
        finally:
            drop_table(dsn, table)
        return
    root = tmp_path_factory.mktemp(kind)
    yield build_sqlite(root) if kind == "sqlite" else build_jsonl(root)


def invoke(store: Damaged, args: list[str]) -> Any:
    """Run the command on the store; check it wrote nothing there."""
    before = None if store.root is None else _hashes(store.root)
    result = runner.invoke(app, [*args, "--store", store.url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    if store.root is not None:
        assert _hashes(store.root) == before, "a read command changed the store"
    return result


def flag_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("damaged:")]


def check_flagged(result: Any) -> None:
    """One `damaged:` line on stderr, naming the stream and the seq; nothing on stdout."""
    [line] = flag_lines(result)
    assert f"stream '{DAMAGED}'" in line and f"seq {DAMAGED_SEQ}" in line, line
    assert "checksum" in line, line  # the reason
    assert "damaged:" not in result.stdout


def check_damaged_json(data: dict[str, Any], store: Damaged) -> None:
    [flag] = data["damaged"]
    assert (flag["stream"], flag["seq"]) == (DAMAGED, DAMAGED_SEQ)
    assert flag["where"] and flag["where"] in flag["error"] and "checksum" in flag["error"]
    if store.kind == "jsonl":
        assert flag["line"] == DAMAGED_SEQ + 1 and flag["where"].endswith(f"{DAMAGED}.jsonl")


# --- the commands -----------------------------------------------------------------------------


def test_ls_lists_the_999_healthy_streams_and_flags_the_damaged_one(damaged: Damaged) -> None:
    result = invoke(damaged, ["ls", "--json"])
    assert result.exit_code == EXIT_DAMAGED, result.output
    data = json.loads(result.stdout)
    listed = [row["stream"] for row in data["streams"]]
    assert listed == [name for name in names() if name != DAMAGED]
    assert all(row["state"] in ("FAILED", "SUCCEEDED") for row in data["streams"])
    check_damaged_json(data, damaged)

    result = invoke(damaged, ["ls"])
    assert result.exit_code == EXIT_DAMAGED, result.output
    assert f": {STREAMS - 1} stream(s), 1 damaged (skipped)" in result.stdout.splitlines()[0]
    assert "job-0416" in result.stdout and "job-0418" in result.stdout
    assert DAMAGED not in result.stdout
    check_flagged(result)


def test_cost_totals_the_999_healthy_streams_and_flags_the_damaged_one(
    damaged: Damaged,
) -> None:
    result = invoke(damaged, ["cost", "--price", "1.5", "--json"])
    assert result.exit_code == EXIT_DAMAGED, result.output
    data = json.loads(result.stdout)
    assert data["total"]["streams"] == STREAMS - 1
    assert DAMAGED not in {led["stream"] for led in data["ledgers"]}
    assert data["total"]["money"] > 0
    check_damaged_json(data, damaged)

    result = invoke(damaged, ["cost", "--price", "1.5"])
    assert result.exit_code == EXIT_DAMAGED, result.output
    assert f"total: {STREAMS - 1} stream(s)" in result.stdout
    check_flagged(result)


def test_whatif_all_replays_the_999_healthy_jobs_and_flags_the_damaged_one(
    damaged: Damaged,
) -> None:
    args = ["whatif", "--all", "--set", "stall_after_s=5", "--price", "1"]
    result = invoke(damaged, [*args, "--json"])
    assert result.exit_code == EXIT_DAMAGED, result.output
    data = json.loads(result.stdout)
    assert data["jobs"] == STREAMS - 1 and data["open"] == 0
    assert data["metrics"]["changed"] > 0  # the override moved something: jobs were replayed
    assert DAMAGED not in {c["stream"] for c in data["changes"]}
    check_damaged_json(data, damaged)

    result = invoke(damaged, args)
    assert result.exit_code == EXIT_DAMAGED, result.output
    assert f"over {STREAMS - 1} recorded job(s)" in result.stdout
    check_flagged(result)


def test_a_crossed_gate_wins_over_the_damage_which_is_still_flagged(damaged: Damaged) -> None:
    args = ["whatif", "--all", "--set", "stall_after_s=5", "--fail-if", "changed>0"]
    result = invoke(damaged, args)
    assert result.exit_code == EXIT_GATE, result.output
    assert "crossed" in result.stdout
    check_flagged(result)
    result = invoke(damaged, [*args, "--json"])
    assert result.exit_code == EXIT_GATE, result.output
    data = json.loads(result.stdout)
    assert data["gates"][0]["crossed"] and data["jobs"] == STREAMS - 1
    check_damaged_json(data, damaged)
    # a gate that holds leaves the damage's own code
    result = invoke(damaged, ["whatif", "--all", "--fail-if", "jobs>5000"])
    assert result.exit_code == EXIT_DAMAGED, result.output


@pytest.mark.parametrize("command", ["cost", "replay"])
def test_naming_the_damaged_stream_is_still_an_error(damaged: Damaged, command: str) -> None:
    """The containment is for the store-wide commands: a stream asked for by name that cannot
    be read is the command's whole input, one line, exit 1."""
    result = invoke(damaged, [command, DAMAGED])
    assert result.exit_code == EXIT_USAGE, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error:") and f"seq {DAMAGED_SEQ}" in line, line


# --- healthy stores, the code, escaping ---------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["ls"], ["cost"], ["whatif", "--all", "--set", "stall_after_s=600"]],
    ids=" ".join,
)
def test_a_healthy_store_exits_0_with_an_empty_damaged_list(args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--store", f"jsonl:{EXAMPLES}", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["damaged"] == []
    result = runner.invoke(app, [*args, "--store", f"jsonl:{EXAMPLES}"])
    assert result.exit_code == 0 and not flag_lines(result), result.output


def test_the_damaged_code_is_documented() -> None:
    [row] = [e for e in EXIT_CODE_TABLE if e.code == EXIT_DAMAGED]
    assert (row.code, row.name) == (7, "damaged")
    page = (ROOT / "docs" / "cli.md").read_text()
    assert "| 7 | `damaged`" in page


def test_a_flag_escapes_the_outside_text_it_names(tmp_path: Path) -> None:
    """A store's path and a stream's name are outside text: the flag line shows their
    control characters escaped, never raw (a terminal would run them)."""
    root = tmp_path / "store\x1b[2J\u202e"
    evil = "job-\x07\x1b]0;owned\x07"
    store = JsonlStore(root, fsync=False)
    try:
        log = read_jsonl_file(EXAMPLES / f"{TEMPLATES[0]}.jsonl")
        for stream in ("job-ok", evil):
            copied = [e.model_copy(update={"stream": stream, "id": new_id(e.at)}) for e in log]
            store.append(stream, copied, 0)
        path = store.path_for(evil)
    finally:
        store.close()
    lines = path.read_bytes().split(b"\n")
    lines[2] = damage(lines[2])
    path.write_bytes(b"\n".join(lines))
    result = runner.invoke(app, ["ls", "--store", f"jsonl://{root}"])
    assert result.exit_code == EXIT_DAMAGED, result.output
    [line] = flag_lines(result)
    assert not any(ch in line for ch in "\x1b\x07\u202e"), repr(line)
    assert "\\x1b[2J\\u202e" in line and "seq 2" in line, line
    assert "job-ok" in result.stdout
    data = json.loads(runner.invoke(app, ["ls", "--json", "--store", f"jsonl://{root}"]).stdout)
    assert data["damaged"][0]["stream"] == evil  # JSON carries the name, escaped by JSON


def test_a_store_that_cannot_be_listed_is_still_one_line_exit_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ls", "--store", f"jsonl://{tmp_path / 'nowhere'}"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert not (tmp_path / "nowhere").exists()
