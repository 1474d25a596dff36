"""Fencing: two supervisors on one job — the newest watch owns it, the other stops cleanly.

An older supervisor whose append conflicts re-reads the stream, finds the newer
`WatchStarted`, and raises `JobOwnedElsewhere` instead of interleaving its events with the
owner's. Checked with threads, and with separate processes on SQLite and Postgres.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest

from flashfsm import JobHandle, JobOwnedElsewhere, poll_job, verify
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import Concluded, WatchStarted
from tests.store_support import make_backend, postgres_dsn, run_cleanups

FORK = multiprocessing.get_context("fork")
HANDLE = JobHandle("ep-fence", "flash-fence", "job-fence")
STREAM = "job-job-fence"
OWNED_ELSEWHERE = 3


class WallClockJob:
    """IN_PROGRESS until `done_at` (wall-clock), then COMPLETED with metrics."""

    def __init__(self, done_at: float):
        self.done_at = done_at

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        if time.time() < self.done_at:
            return {"status": "IN_PROGRESS"}
        return {"status": "COMPLETED", "output": {"loss": 0.1}}

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return {}


def supervise(url: str, done_at: float, go: Any = None) -> str:
    """One supervisor: 'finished' or 'owned elsewhere'."""
    store = open_store(url)
    try:
        if go is not None:
            go.wait(30)
        poll_job(HANDLE, interval_s=0.02, client=WallClockJob(done_at), store=store)
        return "finished"
    except JobOwnedElsewhere:
        return "owned elsewhere"
    finally:
        store.close()


def supervise_process(url: str, done_at: float, go: Any = None) -> None:
    """`supervise` as a process: exit 0 when finished, 3 when another watch took over."""
    outcome = supervise(url, done_at, go)
    raise SystemExit(0 if outcome == "finished" else OWNED_ELSEWHERE)


def _wait_for_events(url: str, count: int, timeout_s: float = 10.0) -> None:
    store = open_store(url)
    try:
        deadline = time.monotonic() + timeout_s
        while len(store.read(STREAM)) < count:
            assert time.monotonic() < deadline, "the first supervisor never got going"
            time.sleep(0.01)
    finally:
        store.close()


def _check_log(url: str, watches: tuple[int, ...]) -> None:
    store = open_store(url)
    try:
        events = store.read(STREAM)
    finally:
        store.close()
    assert [e.seq for e in events] == list(range(len(events)))
    assert len({e.id for e in events}) == len(events)
    assert sum(isinstance(e, WatchStarted) for e in events) in watches
    assert isinstance(events[-1], Concluded) and events[-1].ok
    report = verify(events)
    assert report.ok, str(report)


@pytest.fixture
def location(request, tmp_path):
    cleanups: list = []
    if request.param == "postgres" and postgres_dsn() is None:
        pytest.skip("FLASHFSM_TEST_POSTGRES_DSN not set")
    backend = make_backend(request.param, tmp_path, cleanups)
    yield backend.url
    run_cleanups(cleanups)


@pytest.mark.parametrize("location", ["sqlite", "postgres"], indirect=True)
def test_a_newer_supervisor_process_takes_over_and_the_older_one_stops(location):
    done_at = time.time() + 3.0
    older = FORK.Process(target=supervise_process, args=(location, done_at))
    older.start()
    _wait_for_events(location, 5)
    newer = FORK.Process(target=supervise_process, args=(location, done_at))
    newer.start()
    older.join(30)
    newer.join(30)
    assert older.exitcode == OWNED_ELSEWHERE
    assert newer.exitcode == 0
    _check_log(location, watches=(2,))


@pytest.mark.parametrize("location", ["sqlite", "postgres"], indirect=True)
def test_two_supervisor_processes_started_at_once_leave_exactly_one_running(location):
    done_at = time.time() + 1.5
    go = FORK.Event()
    procs = [FORK.Process(target=supervise_process, args=(location, done_at, go)) for _ in range(2)]
    for proc in procs:
        proc.start()
    go.set()
    for proc in procs:
        proc.join(30)
    assert sorted(p.exitcode for p in procs) == [0, OWNED_ELSEWHERE]
    # The loser either lost the first claim (one watch) or was fenced out later (two).
    _check_log(location, watches=(1, 2))


@pytest.mark.parametrize("location", ["memory", "sqlite"], indirect=True)
def test_two_supervisor_threads_on_one_job_leave_exactly_one_running(location):
    url = location
    if url.startswith("memory"):
        store = open_store(url)  # threads share one in-memory store object
        opener = lambda _url: store  # noqa: E731
    else:
        opener = open_store
    done_at = time.time() + 1.5
    go = threading.Barrier(2)
    outcomes: list[str] = []

    def run() -> None:
        shared = opener(url)
        go.wait(10)
        try:
            poll_job(HANDLE, interval_s=0.02, client=WallClockJob(done_at), store=shared)
            outcomes.append("finished")
        except JobOwnedElsewhere:
            outcomes.append("owned elsewhere")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["finished", "owned elsewhere"]
    events = opener(url).read(STREAM)
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[-1], Concluded) and events[-1].ok
    assert verify(events).ok
