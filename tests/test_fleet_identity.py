"""A replica's identity: one live replica per name, its runs stopped before they are given
back, and the attempts it watches named after it.

Store-level tests run on SQLite and, when `FLASHFSM_TEST_POSTGRES_DSN` is set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import AsyncRunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.cli import app
from flashfsm.events.models import Candidate, RunStarted, WatchStarted
from flashfsm.fleet import Fleet, OwnerInUse, hand_off_job
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, RunpodRunAdapters, supervise_run
from flashfsm.submit import fleet_run_adapters
from tests.store_support import make_backend, run_cleanups

runner = CliRunner()


def sqlite_store(tmp_path: Path) -> tuple[Any, str, list]:
    cleanups: list = []
    backend = make_backend("sqlite", tmp_path, cleanups)
    return backend.open(), backend.url, cleanups


# --- one live replica per name ---------------------------------------------------------------


def test_a_name_a_live_replica_holds_cannot_join_and_is_free_once_it_left_or_expired(leases):
    assert leases.join("r1", 30.0) is not None
    assert leases.join("r1", 30.0) is None  # its heartbeat is live
    assert leases.join("r2", 30.0) is not None  # another name joins
    assert leases.beat("r1", 30.0).replicas == 2  # the refusal recorded nothing
    leases.leave("r1")
    assert leases.join("r1", 30.0) is not None  # a drained replica's name is free at once
    leases.join("r3", 0.05)
    time.sleep(0.15)
    assert leases.join("r3", 30.0) is not None  # an expired one's too


def test_a_live_lease_holds_the_name_even_when_its_heartbeat_is_gone(leases):
    hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, leases)
    [lease] = leases.claim("r1", 30.0, 10)
    assert lease.stream == "job-j1"
    assert leases.join("r1", 30.0) is None


def test_concurrent_joins_under_one_name_admit_one(leases):
    barrier = threading.Barrier(4)
    answers: list[object] = []

    def join() -> None:
        barrier.wait()
        answers.append(leases.join("same", 30.0))

    threads = [threading.Thread(target=join) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(answer is not None for answer in answers) == 1


def test_a_replica_started_under_a_live_name_refuses_claims_nothing_and_leaves_it_alone(
    tmp_path: Path,
):
    store, _url, cleanups = sqlite_store(tmp_path)
    try:
        hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, store)
        store.join("r1", 30.0)  # a live replica named r1 (it holds nothing yet)

        async def main() -> None:
            fleet = Fleet(store, None, owner="r1", lease_s=5.0)
            await fleet.run()

        with pytest.raises(OwnerInUse, match="'r1' is held by a live replica"):
            asyncio.run(main())
        [row] = store.open_streams()
        assert row.owner is None and row.token == 0  # nothing claimed
        assert store.join("r1", 30.0) is None  # the live replica's heartbeat is still there
    finally:
        run_cleanups(cleanups)


def test_supervise_under_a_live_name_is_one_line_and_exit_1(tmp_path: Path, monkeypatch):
    store, url, cleanups = sqlite_store(tmp_path)
    try:
        hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, store)
        store.join("r1", 60.0)
        monkeypatch.setenv("RUNPOD_API_KEY", "rpk-test-key-000001")
        result = runner.invoke(app, ["supervise", "--owner", "r1", "--store", url])
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: replica name 'r1' is held"), lines
        assert [(row.owner, row.token) for row in store.open_streams()] == [(None, 0)]
    finally:
        run_cleanups(cleanups)


# --- a run given back stops first --------------------------------------------------------------


class SlowDeploys:
    """Run adapters whose deploy blocks its thread for `deploy_s` (a deploy call in flight
    cannot be interrupted), recording when each run's adapters were closed: the end of the
    run's worker thread (`Fleet._drive_run` closes them as it returns)."""

    def __init__(self, deploy_s: float) -> None:
        self.deploy_s = deploy_s
        self.deploying: dict[str, threading.Event] = {}
        self.closed: dict[str, float] = {}

    def __call__(self, started: RunStarted, sleep: Callable[[float], None]) -> Any:
        run_id = started.run_id
        self.deploying[run_id] = threading.Event()
        outer = self

        class Adapters:
            providers = frozenset({"runpod"})

            def deploy(self, run: RunState, attempt: Attempt, record: Any) -> Deployed:
                outer.deploying[run_id].set()
                time.sleep(outer.deploy_s)
                return Deployed("ep", attempt.started.endpoint_name)

            def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
                sleep(60.0)  # stopped here: LeaseLost
                raise AssertionError("unreachable")

            def close(self) -> None:
                outer.closed[f"run-{run_id}"] = time.monotonic()

        return Adapters()


def test_a_shed_run_is_released_only_once_its_worker_thread_stopped(tmp_path: Path):
    store, _url, cleanups = sqlite_store(tmp_path)
    try:
        for n in range(4):
            supervise_run(f"r{n}", [Candidate(gpu_class="L4")], None, store=store, detach=True)  # type: ignore[arg-type]
        released: dict[str, float] = {}
        release = store.release

        def spy(owner: str, given: list) -> None:
            for lease in given:
                released.setdefault(lease.stream, time.monotonic())
            release(owner, given)

        store.release = spy  # type: ignore[method-assign]
        slow = SlowDeploys(deploy_s=1.0)

        async def main() -> list[str]:
            first = Fleet(store, None, owner="a", lease_s=6.0, tick_s=0.2, run_adapters=slow)
            task = asyncio.create_task(first.run())
            while len(slow.deploying) < 4 or not all(e.is_set() for e in slow.deploying.values()):
                await asyncio.sleep(0.02)
            assert len(first.held) == 4
            store.join("b", 30.0)  # a second replica joins: the first's share halves
            while first.stats.released < 2:
                await asyncio.sleep(0.02)
            shed = [s for s in released]
            first.stop()
            await task
            return shed

        shed = asyncio.run(main())
        assert len(shed) >= 2
        for stream in shed[:2]:
            assert stream in slow.closed, stream
            assert slow.closed[stream] <= released[stream], stream  # stopped, then released
    finally:
        run_cleanups(cleanups)


# --- the attempts a replica watches are named after it -----------------------------------------


def test_a_run_attempts_watch_started_names_the_replica(tmp_path: Path, monkeypatch):
    store, _url, cleanups = sqlite_store(tmp_path)
    try:
        with Simulator(speed=600) as sim:
            env = sim.env()

            def adapters(started: RunStarted, sleep: Callable[[float], None]) -> Any:
                def deploy(run: RunState, attempt: Attempt, record: Any) -> Deployed:
                    name = attempt.started.endpoint_name
                    return Deployed(sim.add_endpoint(name, scenario="success"), name)

                from flashfsm import RunpodClient

                client = RunpodClient(
                    env["RUNPOD_API_KEY"],
                    endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                    api_base_url=env["RUNPOD_API_BASE_URL"],
                )
                return RunpodRunAdapters(
                    client, deploy, lambda run, attempt: {}, interval_s=0.2, sleep=sleep
                )

            supervise_run("named", [Candidate(gpu_class="L4")], None, store=store, detach=True)  # type: ignore[arg-type]

            async def main() -> None:
                async with AsyncRunpodClient(
                    env["RUNPOD_API_KEY"],
                    endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                    api_base_url=env["RUNPOD_API_BASE_URL"],
                ) as client:
                    fleet = Fleet(
                        store, client, owner="replica-x", tick_s=0.2, run_adapters=adapters
                    )
                    await fleet.run(until=lambda: not store.open_streams())

            asyncio.run(main())
        [job] = [s for s in store.streams() if s.startswith("job-")]
        watches = [e for e in store.read(job) if isinstance(e, WatchStarted)]
        assert [w.watcher for w in watches] == ["replica-x"]
    finally:
        run_cleanups(cleanups)


# --- a replica that cannot drive runs says so ----------------------------------------------------


def test_a_replica_without_run_adapters_names_the_runs_that_wait(tmp_path: Path, caplog):
    store, _url, cleanups = sqlite_store(tmp_path)
    try:
        supervise_run("waits", [Candidate(gpu_class="L4")], None, store=store, detach=True)  # type: ignore[arg-type]
        hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, store)  # a job it can watch

        async def main() -> None:
            fleet = Fleet(store, None, owner="r", tick_s=0.1, no_runs_reason="no key")
            task = asyncio.create_task(fleet.run())
            await asyncio.sleep(0.5)
            fleet.stop()
            await task

        with caplog.at_level(logging.WARNING, logger="flashfsm.fleet"):
            asyncio.run(main())
        said = [r.getMessage() for r in caplog.records if "cannot drive runs" in r.getMessage()]
        assert said == [
            "r: cannot drive runs (no key): 1 handed-off run(s) wait for a replica "
            "that can: run-waits"
        ]  # one line, once
    finally:
        run_cleanups(cleanups)


def test_the_default_run_adapters_need_a_key_and_a_recorded_spec(tmp_path: Path, monkeypatch):
    store, _url, cleanups = sqlite_store(tmp_path)
    try:
        monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
        with pytest.raises(ValueError, match="RUNPOD_API_KEY holds no RunPod API key"):
            fleet_run_adapters(store)
        monkeypatch.setenv("RUNPOD_API_KEY", "rpk-test-key-000001")
        make = fleet_run_adapters(store)
        started = RunStarted(
            stream="run-x",
            seq=0,
            id="i",
            at=1.0,
            run_id="x",
            candidates=(Candidate(gpu_class="L4"),),
        )
        with pytest.raises(ValueError, match="handed off without a spec"):
            make(started, time.sleep)
    finally:
        run_cleanups(cleanups)
