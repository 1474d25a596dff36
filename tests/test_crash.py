"""Crash consistency: SIGKILL a watching process after every append, reattach, compare.

Every scenario × every append boundary × SQLite, JSONL and Postgres (when
`FLASHFSM_TEST_POSTGRES_DSN` is set).

For each scenario the uninterrupted run gives the reference log. Then, for every append
boundary k of that log, a forked process runs the watch and kills itself with SIGKILL right
after the append that brings the stream to k events; a second forked process reattaches
and finishes. The verdict (state, rule, failure) and its time must equal the reference, the
final log must have contiguous seqs with no duplicate id, and `verify` must accept it.
"""

from __future__ import annotations

import multiprocessing
import signal
import uuid

import pytest

from flashfsm import verify
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import Concluded, WatchStarted
from tests.crash_scenarios import SCENARIOS, run_watch
from tests.store_support import drop_table, postgres_dsn

FORK = multiprocessing.get_context("fork")
STREAM = "job-crash"


def _run_in_child(name: str, url: str, kill_after: int | None) -> int:
    child = FORK.Process(target=run_watch, args=(name, url, STREAM, kill_after))
    child.start()
    child.join(60)
    assert not child.is_alive(), "the watching process hung"
    return child.exitcode


def _store_url(kind: str, tmp_path, tag: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/{tag}.db"
    if kind == "postgres":
        table = f"flashfsm_crash_{uuid.uuid4().hex[:12]}"
        _TABLES.append(table)
        return f"{postgres_dsn()}?table={table}"
    return f"jsonl:///{tmp_path}/{tag}"


_TABLES: list[str] = []


@pytest.fixture(autouse=True)
def _drop_postgres_tables():
    yield
    while _TABLES:
        drop_table(postgres_dsn(), _TABLES.pop())


def _read(url: str):
    store = open_store(url)
    try:
        return store.read(STREAM)
    finally:
        store.close()


def _verdict(events) -> tuple[str, str, str | None, float]:
    final = events[-1]
    assert isinstance(final, Concluded), f"log ends with {final.kind}, not a verdict"
    return final.state, final.rule, final.failure, final.at


def _append_boundaries(events) -> list[int]:
    """Stream lengths after each append of an uninterrupted run (the first batch is 2)."""
    return list(range(2, len(events) + 1))


@pytest.mark.parametrize(
    "store_kind",
    [
        "sqlite",
        "jsonl",
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(
                postgres_dsn() is None, reason="FLASHFSM_TEST_POSTGRES_DSN not set"
            ),
        ),
    ],
)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sigkill_after_any_append_then_reattach_reaches_the_same_verdict(
    scenario, store_kind, tmp_path
):
    reference_url = _store_url(store_kind, tmp_path, "reference")
    assert _run_in_child(scenario, reference_url, None) == 0
    reference = _read(reference_url)
    expected = _verdict(reference)
    assert verify(reference).ok

    for k in _append_boundaries(reference):
        url = _store_url(store_kind, tmp_path, f"k{k}")
        code = _run_in_child(scenario, url, k)
        assert code == -signal.SIGKILL, f"k={k}: the watcher was not killed (exit {code})"
        assert len(_read(url)) >= k
        assert _run_in_child(scenario, url, None) == 0, f"k={k}: the reattach failed"
        events = _read(url)
        assert [e.seq for e in events] == list(range(len(events))), f"k={k}: seq gap"
        assert len({e.id for e in events}) == len(events), f"k={k}: duplicate id"
        assert _verdict(events) == expected, f"k={k}: a different verdict after the crash"
        report = verify(events)
        assert report.ok, f"k={k}: {report}"
        if k < len(reference):
            assert sum(isinstance(e, WatchStarted) and e.reattach for e in events) == 1
