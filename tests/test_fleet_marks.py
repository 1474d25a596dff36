"""A stream that fails on every claim is marked failed with its reason, and a replica that
cannot drive what waits says so: in the store, in its log and in `flashfsm ls`.

(A) A stream whose watch fails as it starts on `MAX_CLAIM_FAILURES` claims in a row is
marked on its row of the open-streams index (`LeaseStore.mark_failed`, fenced by its lease)
and given back; no replica claims it again, `ls` (`--json`, `--owner`) shows the reason,
and handing it off anew clears the mark. (B) Each replica's heartbeat row says what it
drives, so `ls` says when a handed-off run waits for a replica that can drive runs. A
database made before these columns is migrated by a writer open and read as it is by `ls`.

Every test runs on SQLite and, when `FLASHFSM_TEST_POSTGRES_DSN` is set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.events.models import Candidate
from flashfsm.events.store import FAILED_REASON_CAP, Lease
from flashfsm.fleet import MAX_CLAIM_FAILURES, Fleet, hand_off_job
from flashfsm.runs import supervise_run

runner = CliRunner()
JOB = {"endpoint_id": "ep-1", "job_id": "job-1"}
#: Why the run adapters below refuse every run: outside text, with an escape sequence, longer
#: than a mark keeps.
REFUSAL = "no deploy for this run \x1b[31mred\x1b[0m " + "x" * 600


@pytest.fixture
def url(lease_url: str) -> str:
    """A fresh store that keeps leases (conftest's `lease_url`: SQLite, then PostgreSQL)."""
    return lease_url


@pytest.fixture
def store(leases: Any) -> Any:
    """That store, opened (conftest's `leases`)."""
    return leases


def execute(store: Any, statement: str) -> None:
    """Run raw SQL on the store's database; `{events}`, `{open}` and `{replicas}` name its
    tables."""
    if hasattr(store, "table"):  # PostgreSQL
        names = {"events": store.table, "open": f"{store.table}_open"}
        names["replicas"] = f"{store.table}_replicas"
        with store._pool.connection() as conn:
            conn.execute(statement.format(**{k: f'"{v}"' for k, v in names.items()}))
    else:
        names = {"events": "events", "open": "open_streams", "replicas": "replicas"}
        store._write(lambda conn: conn.execute(statement.format(**names)))


def rewrite_bodies(store: Any, old: str, new: str) -> None:
    """Replace `old` by `new` in every stored event's body (its checksum left as it was)."""
    body = f"replace(body, '{old}', '{new}')"
    if not hasattr(store, "table"):  # (SQLite keeps the body as a BLOB)
        body = f"CAST(replace(CAST(body AS TEXT), '{old}', '{new}') AS BLOB)"
    execute(store, "UPDATE {events} SET body = " + body.replace("{", "{{").replace("}", "}}"))


def columns(store: Any, table: str) -> set[str]:
    """The columns of one of the store's fleet tables (`open` or `replicas`)."""
    if hasattr(store, "table"):
        from flashfsm.adapters.postgres_leases import _columns

        with store._pool.connection() as conn:
            return _columns(conn, f"{store.table}_{table}")
    from flashfsm.adapters.sqlite_leases import _columns as sqlite_columns

    name = {"open": "open_streams", "replicas": "replicas"}[table]
    return store._read(lambda conn: sqlite_columns(conn, name))


def refusing_adapters(started: Any, sleep: Any) -> Any:
    """Run adapters that cannot drive any run: every claim of a run fails as it starts."""
    raise ValueError(REFUSAL)


def run_replica(store: Any, owner: str, ticks: int, **options: Any) -> tuple[Fleet, list[Lease]]:
    """Run a replica for `ticks` ticks after its first failed-to-start mark (or `ticks` in
    all, with `until_marked=False`); the fleet and every lease its claims got."""
    until_marked = options.pop("until_marked", True)
    claims: list[Lease] = []
    real = store.claim

    def claim(*args: Any, **kwargs: Any) -> list[Lease]:
        got = real(*args, **kwargs)
        claims.extend(got)
        return got

    async def main() -> Fleet:
        fleet = Fleet(store, object(), owner=owner, lease_s=3, tick_s=0.05, **options)
        seen = 0

        def enough() -> bool:
            nonlocal seen
            if fleet.stats.failed_streams or not until_marked:
                seen += 1
            return seen > ticks

        await asyncio.wait_for(fleet.run(until=enough), 60)
        return fleet

    store.claim = claim
    try:
        return asyncio.run(main()), claims
    finally:
        del store.claim


def ls(url: str, *args: str) -> Any:
    result = runner.invoke(app, ["ls", "--store", url, *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result


# --- (A) a stream that fails on every claim -----------------------------------------------


def test_the_mark_is_fenced_by_the_lease_and_a_marked_stream_is_not_claimable(store: Any):
    hand_off_job(JOB, store)
    [lease] = store.claim("r1", 30, 10)
    assert not store.mark_failed("r2", lease, "not its lease")
    assert not store.mark_failed("r1", Lease(lease.stream, lease.token + 1), "a stale token")
    assert store.open_streams()[0].failed is None
    assert store.mark_failed("r1", lease, "y" * (FAILED_REASON_CAP + 10))
    store.release("r1", [lease])
    [row] = store.open_streams()
    assert row.failed == "y" * FAILED_REASON_CAP and row.owner is None
    assert store.claim("r2", 30, 10) == [] and store.claim("r2", 30, 10, expired_only=True) == []
    assert store.beat("r2", 30).claimable == 0  # (fair shares count it no more)
    assert store.unmark(lease.stream) and not store.unmark(lease.stream)
    [again] = store.claim("r2", 30, 10)
    assert again.stream == lease.stream and again.token == lease.token + 1


def test_a_job_failing_on_every_claim_is_marked_released_skipped_and_retried_on_a_new_hand_off(
    store: Any, url: str
):
    stream = hand_off_job(JOB, store)
    rewrite_bodies(store, "ep-1", "ep-X")  # a damaged row: its replay fails on every claim

    first, claims = run_replica(store, "r1", 5)
    assert [lease.stream for lease in claims] == [stream] * MAX_CLAIM_FAILURES
    assert first.stats.failed == MAX_CLAIM_FAILURES
    [row] = store.open_streams()
    assert row.failed is not None and "checksum" in row.failed.lower()
    assert row.failed == first.stats.failed_streams[stream]
    assert not row.held  # given back, not held unwatched

    second, claims = run_replica(store, "r2", 20, until_marked=False)
    assert claims == [] and second.stats.claimed == 0  # nobody claims it again

    # (plain `ls` lists the damaged stream as damaged: the run test below shows its mark)
    [owned] = json.loads(ls(url, "--owner", "--json").output)["open"]
    assert owned["failed_to_start"] == row.failed and owned["owner"] is None
    assert "failed to start: CorruptLogError" in ls(url, "--owner").output

    rewrite_bodies(store, "ep-X", "ep-1")  # repaired
    assert hand_off_job(JOB, store) == stream  # handed off anew: the mark is cleared
    [row] = store.open_streams()
    assert row.failed is None
    assert [lease.stream for lease in store.claim("r2", 30, 10)] == [stream]
    assert "failed_to_start" not in json.loads(ls(url, "--json").output)["streams"][0]


def test_a_run_no_adapters_can_drive_is_marked_with_its_reason_escaped_and_capped(
    store: Any, url: str
):
    candidates = [Candidate(gpu_class="L4")]
    handed = supervise_run("r9", candidates, None, store=store, detach=True)  # type: ignore[arg-type]

    _, claims = run_replica(store, "r1", 5, run_adapters=refusing_adapters)
    assert [lease.stream for lease in claims] == [handed.stream] * MAX_CLAIM_FAILURES
    [row] = store.open_streams()
    assert row.failed is not None and row.failed.startswith("ValueError: no deploy for this run")
    assert len(row.failed) == FAILED_REASON_CAP  # capped as it is kept

    text = ls(url).output
    assert "\x1b" not in text and "\\x1b[31mred" in text  # escaped
    [line] = [line for line in text.splitlines() if handed.stream in line]
    assert "failed to start: ValueError: no deploy for this run" in line
    assert "x" * 200 not in line and "…" in line  # capped in the table
    [shown] = json.loads(ls(url, "--json").output)["streams"]
    assert shown["failed_to_start"] == row.failed  # the exact text, as kept

    _, claims = run_replica(store, "r2", 20, until_marked=False, run_adapters=refusing_adapters)
    assert claims == []
    supervise_run("r9", candidates, None, store=store, detach=True)  # type: ignore[arg-type]
    assert store.open_streams()[0].failed is None
    assert [lease.stream for lease in store.claim("r2", 30, 10)] == [handed.stream]


# --- (B) a run no live replica can drive -------------------------------------------------


def with_live_replica(store: Any, owner: str, check: Callable[[], None], **options: Any) -> None:
    """Run `check()` while a replica is live (in a thread of its own), then drain it."""
    done = threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        async def main() -> None:
            fleet = Fleet(store, object(), owner=owner, lease_s=30, tick_s=0.05, **options)
            await fleet.run(until=done.is_set)

        try:
            asyncio.run(main())
        except BaseException as exc:  # (reported below)
            failure.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while owner not in [r.owner for r in store.replicas()]:
            assert time.monotonic() < deadline and not failure, failure
            time.sleep(0.02)
        check()
    finally:
        done.set()
        thread.join(60)
    assert not failure, failure


def test_a_run_waiting_while_only_a_replica_without_run_adapters_is_live_says_so(
    store: Any, url: str
):
    handed = supervise_run("r9", [Candidate(gpu_class="L4")], None, store=store, detach=True)  # type: ignore[arg-type]
    hand_off_job(JOB, store)

    def without_runs() -> None:
        [replica] = store.replicas()
        assert replica.kinds == ("job",)
        [line] = [line for line in ls(url).output.splitlines() if handed.stream in line]
        assert "waiting: no live replica drives runs" in line
        rows = {r["stream"]: r for r in json.loads(ls(url, "--json").output)["streams"]}
        assert rows[handed.stream]["waiting"] == "no live replica drives runs"
        assert "waiting" not in rows["job-job-1"]  # a job: this replica takes it
        owned = {r["stream"]: r for r in json.loads(ls(url, "--owner", "--json").output)["open"]}
        assert owned[handed.stream]["waiting"] == "no live replica drives runs"

    with_live_replica(store, "jobs-only", without_runs, max_streams=0)  # (it claims nothing)

    # No live replica at all (the one above drained): the run waits for one.
    rows = {r["stream"]: r for r in json.loads(ls(url, "--json").output)["streams"]}
    assert rows[handed.stream]["waiting"] == "no live replica"

    def with_runs() -> None:
        [replica] = store.replicas()
        assert replica.kinds == ("job", "run")
        rows = {r["stream"]: r for r in json.loads(ls(url, "--json").output)["streams"]}
        assert "waiting" not in rows[handed.stream]
        assert store.open_streams()[0].owner is None  # (free: a replica can take it)

    with_live_replica(store, "all", with_runs, run_adapters=refusing_adapters, max_streams=0)


# --- a database made before the columns ------------------------------------------------------


def test_an_old_database_is_read_as_it_is_by_ls_and_migrated_by_a_writer_open(url: str):
    store = open_store(url)
    try:
        hand_off_job(JOB, store)
        supervise_run("r9", [Candidate(gpu_class="L4")], None, store=store, detach=True)  # type: ignore[arg-type]
        store.join("old-replica", 600, ("job",))
        # what a library before the mark and the replicas' kinds made
        execute(store, "ALTER TABLE {open} DROP COLUMN failed")
        execute(store, "ALTER TABLE {replicas} DROP COLUMN kinds")
        assert "failed" not in columns(store, "open") and "kinds" not in columns(store, "replicas")
    finally:
        store.close()

    listed = json.loads(ls(url, "--json").output)["streams"]
    assert {r["stream"] for r in listed} == {"job-job-1", "run-r9"}
    assert not any("failed_to_start" in r or "waiting" in r for r in listed)  # nothing said
    owned = json.loads(ls(url, "--owner", "--json").output)["open"]
    assert [(r["failed_to_start"], r["waiting"]) for r in owned] == [(None, None)] * 2
    assert "2 stream(s)" in ls(url).output

    store = open_store(url, read_only=True)
    try:  # ls wrote nothing: the columns are still missing
        assert "failed" not in columns(store, "open") and "kinds" not in columns(store, "replicas")
    finally:
        store.close()

    store = open_store(url)  # a writer open adds them
    try:
        assert "failed" in columns(store, "open") and "kinds" in columns(store, "replicas")
        assert [r.kinds for r in store.replicas()] == [None]  # (said nothing yet)
        [lease] = store.claim("r1", 30, 1, ("job",))
        assert store.mark_failed("r1", lease, "boom")
        assert store.beat("r1", 30, ("job",)).claimable == 1  # the run, not the marked job
    finally:
        store.close()
    rows = {r["stream"]: r for r in json.loads(ls(url, "--json").output)["streams"]}
    assert rows["job-job-1"]["failed_to_start"] == "boom"
