"""A replica's identity: one live incarnation per name (a restart under the name takes over
from a dead one and fences it; a live one refuses the newcomer), its runs stopped before
they are given back, and the attempts it watches named after it.

Store-level tests run on SQLite and, when `FLASHFSM_TEST_POSTGRES_DSN` is set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.cli.common import EXIT_FENCED
from flashfsm.events.errors import StaleLease
from flashfsm.events.models import Candidate, RunStarted, WatchStarted
from flashfsm.events.store import Census, Holder, Incarnation, Lease
from flashfsm.fleet import Fleet, OwnerInUse, hand_off_job, process_started
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, RunpodRunAdapters, supervise_run
from flashfsm.submit import fleet_run_adapters
from flashfsm.testing.contract import contract_event
from tests.store_support import make_backend, run_cleanups
from tests.test_fleet_marks import columns, execute

runner = CliRunner()


def sqlite_store(tmp_path: Path) -> tuple[Any, str, list]:
    cleanups: list = []
    backend = make_backend("sqlite", tmp_path, cleanups)
    return backend.open(), backend.url, cleanups


# --- one live incarnation per name: a dead one is taken over, a live one refuses ------------

HOST = socket.gethostname()


def dead_incarnation() -> Incarnation:
    """The incarnation of a process of this host that ran (its start marker read while it
    lived) and is gone now."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_started(child.pid)
    finally:
        child.kill()
        child.wait()
    assert started, "this host cannot tell when a process started"
    return Incarnation("dead", HOST, child.pid, started, 10.0)


@contextmanager
def beating(leases: Any, owner: str, incarnation: Incarnation) -> Iterator[None]:
    """A live holder of `owner` (in a thread): joined, and beating every tick it records."""
    assert incarnation.tick_s is not None
    assert isinstance(leases.join(owner, 30.0, ("job",), incarnation), Census)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(incarnation.tick_s):
            leases.beat(owner, 30.0, ("job",), incarnation)

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "flashfsm.fleet"]


def test_a_replica_restarted_under_its_name_takes_over_at_once_from_a_process_that_is_gone(
    leases, caplog
):
    for n in range(2):
        hand_off_job({"endpoint_id": "ep", "job_id": f"j{n}"}, leases)
    old = dead_incarnation()
    leases.join("r1", 30.0, ("job",), old)
    held = leases.claim("r1", 30.0, 10, incarnation=old)
    fleet = Fleet(leases, None, owner="r1", lease_s=30.0)  # (it would watch for 25 s)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="flashfsm.fleet"):
        assert asyncio.run(fleet.join())
    assert time.monotonic() - started < 5.0
    assert f"r1: took over from a dead incarnation (pid {old.pid} on host {HOST} is gone)" in (
        said(caplog)
    )
    rows = leases.open_streams()
    assert [(row.owner, row.token, row.held) for row in rows] == [("r1", 2, False)] * 2
    assert leases.renew("r1", held, 30.0) == []  # fenced: the old incarnation's renewals fail
    assert leases.beat("r1", 30.0, None, old) is None
    taken = leases.claim("r1", 30.0, 10, expired_only=True, incarnation=fleet.incarnation)
    assert sorted(lease.token for lease in taken) == [3, 3]  # the newcomer claims them at once


def test_a_holder_whose_heartbeat_stands_still_is_taken_over_once_watched(leases, caplog):
    hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, leases)
    old = Incarnation("stalled", "another-host", 4242, "boot:1", 0.2)  # (beats every 0.2 s)
    leases.join("r1", 30.0, ("job",), old)
    [lease] = leases.claim("r1", 30.0, 10, incarnation=old)
    fleet = Fleet(leases, None, owner="r1", lease_s=30.0, tick_s=0.2)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="flashfsm.fleet"):
        assert asyncio.run(fleet.join())
    took = time.monotonic() - started
    assert 0.8 < took < 5.0, took  # two of its ticks and a margin (1 s) from its last beat
    [line] = [m for m in said(caplog) if "took over" in m]
    stood = float(line.rsplit("for ", 1)[1].removesuffix(" s"))
    assert line.startswith("r1: took over: the holder's heartbeat stood still for ")
    assert 1.3 <= stood < 5.0, line
    assert leases.open_streams()[0].token == lease.token + 1  # fenced
    assert [r.owner for r in leases.replicas()] == ["r1"]


def test_a_live_holder_is_refused_and_left_alone(leases, caplog):
    hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, leases)
    live = Incarnation("live", "another-host", 4242, "boot:1", 0.1)
    with beating(leases, "r1", live):
        [lease] = leases.claim("r1", 30.0, 10, incarnation=live)
        fleet = Fleet(leases, None, owner="r1", lease_s=30.0, tick_s=0.5)
        refused = pytest.raises(OwnerInUse, match="'r1' is held by a live replica")
        with caplog.at_level(logging.INFO, logger="flashfsm.fleet"), refused:
            asyncio.run(fleet.join())
        assert "r1: refused: the holder is alive (its heartbeat advanced)" in said(caplog)
        assert leases.open_streams()[0].token == lease.token  # nothing fenced
        assert leases.renew("r1", [lease], 30.0) == [lease]
        assert leases.beat("r1", 30.0, ("job",), live) is not None  # its row is still its own


def test_a_second_fleet_of_this_process_under_a_running_one_s_name_is_refused(leases):
    async def main() -> None:
        first = Fleet(leases, None, owner="r1", lease_s=30.0, tick_s=0.1)
        task = asyncio.create_task(first.run())
        while not first.stats.census:
            await asyncio.sleep(0.02)
        # same host, same process, same start: nothing shows the first dead; it beats
        second = Fleet(leases, None, owner="r1", lease_s=30.0, tick_s=0.1)
        with pytest.raises(OwnerInUse):
            await second.join()
        first.stop()
        stats = await task
        assert not stats.fenced

    asyncio.run(main())
    assert leases.replicas() == []  # the first drained, and left


def test_claims_racing_a_take_over_leave_the_old_incarnation_no_lease_unfenced(leases):
    for n in range(60):
        hand_off_job({"endpoint_id": "ep", "job_id": f"j{n}"}, leases)
    old, new = Incarnation("old"), Incarnation("new")
    leases.join("r1", 30.0, None, old)
    got: list[Lease] = []
    late: list[Lease] = []  # (claimed by calls made once the take-over had returned)
    started, taken = threading.Event(), threading.Event()

    def claim() -> None:  # the old incarnation's loop, claiming one stream at a time
        while len(late) < 20:
            after = taken.is_set()
            claimed = leases.claim("r1", 30.0, 1, incarnation=old)
            (late if after else got).extend(claimed or [Lease("none", 0)] * after)
            started.set()

    thread = threading.Thread(target=claim)
    thread.start()
    started.wait(30)
    holder = leases.join("r1", 30.0, None, new)
    assert isinstance(leases.join("r1", 30.0, None, new, replacing=holder), Census)
    taken.set()
    thread.join(60)
    tokens = {row.stream: row.token for row in leases.open_streams()}
    assert got and set(late) == {Lease("none", 0)}  # it claimed before, and nothing after
    assert [lease for lease in got if tokens[lease.stream] == lease.token] == []  # all fenced


def test_concurrent_joins_under_a_free_name_admit_one(leases):
    barrier = threading.Barrier(4)
    answers: list[object] = []

    def join(n: int) -> None:
        barrier.wait()
        answers.append(leases.join("same", 30.0, None, Incarnation(f"i{n}")))

    threads = [threading.Thread(target=join, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(isinstance(answer, Census) for answer in answers) == 1


class Parked:
    """Run adapters whose deploy waits (on the replica's sleep) until the run is stopped."""

    def __call__(self, started: RunStarted, sleep: Callable[[float], None]) -> Any:
        class Adapters:
            providers = frozenset({"runpod"})

            def deploy(self, run: RunState, attempt: Attempt, record: Any) -> Deployed:
                sleep(600.0)  # stopped here: LeaseLost
                raise AssertionError("unreachable")

        return Adapters()


def test_a_fenced_replica_stops_writes_nothing_more_and_leaves_the_newcomer_alone(leases, caplog):
    supervise_run("x", [Candidate(gpu_class="L4")], None, store=leases, detach=True)  # type: ignore[arg-type]
    newcomer = Incarnation("newer")

    async def main() -> Any:
        fleet = Fleet(leases, None, owner="r1", lease_s=30.0, tick_s=0.1, run_adapters=Parked())
        task = asyncio.create_task(fleet.run())
        while not fleet.held:
            await asyncio.sleep(0.02)
        [row] = leases.open_streams()
        old = Lease(row.stream, row.token, row.kind)
        holder = leases.join("r1", 30.0, ("job",), newcomer)
        assert isinstance(leases.join("r1", 30.0, ("job",), newcomer, replacing=holder), Census)
        return old, await asyncio.wait_for(task, 10.0)  # it learns at its next beat

    with caplog.at_level(logging.INFO, logger="flashfsm.fleet"):
        old, stats = asyncio.run(main())
    assert stats.fenced and stats.lost == 1
    assert "r1: fenced by a newer incarnation: stopping" in said(caplog)
    [row] = leases.open_streams()
    assert (row.owner, row.token) == ("r1", old.token + 1)  # its drain released nothing
    assert [r.owner for r in leases.replicas()] == ["r1"]  # nor removed the newcomer's row
    assert leases.beat("r1", 30.0, ("job",), newcomer) is not None
    written = leases.read(row.stream)
    with pytest.raises(StaleLease):  # what it had in flight is refused
        leases.append(
            row.stream, [contract_event(row.stream, len(written))], len(written), lease=old
        )
    assert leases.read(row.stream) == written


def test_supervise_under_a_live_name_is_one_line_and_exit_1(lease_url: str, monkeypatch):
    store = open_store(lease_url)
    try:
        hand_off_job({"endpoint_id": "ep", "job_id": "j1"}, store)
        monkeypatch.setenv("RUNPOD_API_KEY", "rpk-test-key-000001")
        with beating(store, "r1", Incarnation("live", "another-host", 7, "boot:1", 0.1)):
            result = runner.invoke(app, ["supervise", "--owner", "r1", "--store", lease_url])
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: replica name 'r1' is held"), lines
        assert "pid 7 on host 'another-host'" in lines[0]
        assert [(row.owner, row.token) for row in store.open_streams()] == [(None, 0)]
    finally:
        store.close()


def test_supervise_fenced_by_a_newer_incarnation_exits_8_with_one_line(lease_url: str, monkeypatch):
    store = open_store(lease_url)
    monkeypatch.setenv("RUNPOD_API_KEY", "rpk-test-key-000001")

    def take_over() -> None:  # (a newer incarnation of r1, once r1 beats)
        deadline = time.monotonic() + 30
        while "r1" not in [r.owner for r in store.replicas()] and time.monotonic() < deadline:
            time.sleep(0.05)
        holder = store.join("r1", 30.0, None, Incarnation("newer"))
        store.join("r1", 30.0, None, Incarnation("newer"), replacing=holder)

    thread = threading.Thread(target=take_over)
    thread.start()
    try:
        args = ["supervise", "--owner", "r1", "--lease", "3", "--store", lease_url]
        result = runner.invoke(app, args)
        thread.join()
        assert result.exit_code == EXIT_FENCED == 8, result.output
        last = result.output.strip().splitlines()[-1]
        assert last.startswith("error: fenced: a newer incarnation of this replica's name"), last
        assert "drained:" not in result.output
        assert isinstance(store.beat("r1", 30.0, None, Incarnation("newer")), Census)
    finally:
        thread.join()
        store.close()


def test_a_store_made_before_incarnations_opens_read_only_unchanged_and_a_writer_adds_them(
    lease_url: str,
):
    store = open_store(lease_url)
    try:
        store.join("old-replica", 600.0, ("job",))  # what an older library recorded
        execute(store, "ALTER TABLE {replicas} DROP COLUMN incarnation")
    finally:
        store.close()
    reader = open_store(lease_url, read_only=True)
    try:  # a read reads it as it is, and adds nothing
        assert [r.owner for r in reader.replicas()] == ["old-replica"]
        assert "incarnation" not in columns(reader, "replicas")
    finally:
        reader.close()
    store = open_store(lease_url)  # a writer open adds the column
    try:
        assert "incarnation" in columns(store, "replicas")
        held = store.join("old-replica", 30.0, None, Incarnation("new"))
        assert isinstance(held, Holder) and held.incarnation is None  # it names none
        assert isinstance(
            store.join("old-replica", 30.0, None, Incarnation("new"), replacing=held), Census
        )
    finally:
        store.close()


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

            def adapters(started: RunStarted, sleep: Callable[[float], None]) -> Any:
                def deploy(run: RunState, attempt: Attempt, record: Any) -> Deployed:
                    name = attempt.started.endpoint_name
                    return Deployed(sim.add_endpoint(name, scenario="success"), name)

                client = sim.client()
                return RunpodRunAdapters(
                    client, deploy, lambda run, attempt: {}, interval_s=0.2, sleep=sleep
                )

            supervise_run("named", [Candidate(gpu_class="L4")], None, store=store, detach=True)  # type: ignore[arg-type]

            async def main() -> None:
                async with sim.async_client() as client:
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
