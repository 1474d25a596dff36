"""Replicas restarted under their own names, as a service manager restarts them: each new
incarnation takes over from the one before at once, fences it, and nothing is lost.

Three `flashfsm supervise` processes on PostgreSQL (`tests.fleet_support.FleetHarness`: the
simulator in this process, triggers noting which process wrote each row and which bumped
each lease's token), every one SIGKILLed and restarted at once under its `--owner`, three
times, with pauses between the rounds shorter and longer than a lease. Every stream must
end with one verdict, the verdict of the same streams under one replica and no fault; no
row may be written under a stale token; every restart must say it took over from a dead
incarnation; and a live replica's name must still be refused to a duplicate, in one line.
A second test pauses a replica (SIGSTOP), restarts its name meanwhile, then wakes it
(SIGCONT): the newcomer takes over once the old heartbeat stood still, and the old one finds
itself fenced, stops, writes nothing more and exits 8 in one line.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.fleet_support import FleetHarness, one_line_refusal, stale_writes
from tests.store_support import PG_ENV, postgres_dsn
from tests.test_fleet_replicas import INTERVAL_S, LEASE_S, POLICY, SPEED

pytestmark = pytest.mark.skipif(postgres_dsn() is None, reason=f"{PG_ENV} not set")

#: Streams handed off: a tenth runs; enough that each replica holds some when killed.
STREAMS = int(os.environ.get("FLASHFSM_TEST_RESTART_STREAMS", "60"))
RUNS = max(2, STREAMS // 10)
JOBS = STREAMS - RUNS
OWNERS = ("r0", "r1", "r2")
#: The pause after each round of restarts: shorter, then longer, then shorter than a lease.
PAUSES = (0.5 * LEASE_S, 1.5 * LEASE_S, 0.25 * LEASE_S)


def harness(tmp: Path) -> FleetHarness:
    dsn = postgres_dsn()
    assert dsn is not None
    return FleetHarness(
        dsn, tmp, speed=SPEED, lease_s=LEASE_S, interval_s=INTERVAL_S, policy=POLICY, runs=RUNS
    )


def test_replicas_killed_and_restarted_under_their_names_lose_nothing_and_write_nothing_stale(
    tmp_path: Path,
) -> None:
    with harness(tmp_path) as baseline:  # one replica, no fault
        baseline.start("solo")
        baseline.await_replicas(1)
        baseline.hand_off(JOBS, RUNS)
        baseline.wait_idle()
        assert baseline.drain() == {"solo": 0}
        reference = baseline.outcomes()

    with harness(tmp_path) as fleet:
        for owner in OWNERS:
            fleet.start(owner)
        fleet.await_replicas(len(OWNERS))
        fleet.hand_off(JOBS, RUNS)
        time.sleep(2 * INTERVAL_S)  # two ticks: each holds its share
        for pause in PAUSES:
            for owner in OWNERS:
                held = fleet.held().get(owner, 0)
                assert held > 0, (owner, fleet.held())  # it holds streams as it is killed
                fleet.replicas[owner].kill()  # SIGKILL
                fleet.replicas[owner].wait()
                fleet.start(owner)  # at once, under the same name
            for owner in OWNERS:  # each new incarnation is up before the next round kills it
                fleet.await_log(owner, "took over from a dead incarnation")
            time.sleep(pause)
        # a live replica's name is still refused to a duplicate, in one line
        line = one_line_refusal(fleet, "r0")
        assert line.startswith("error: replica name 'r0' is held by a live replica"), line
        fleet.wait_idle()
        assert fleet.drain() == dict.fromkeys(OWNERS, 0)  # (each one's last incarnation)
        restarted = [fleet.log(owner, n).read_text() for owner in OWNERS for n in (2, 3, 4)]
        faulty = fleet.outcomes()

    for log in restarted:  # each restart took over at once from the process it replaced
        assert "took over from a dead incarnation (pid " in log, log
        assert "is gone)" in log and "stood still" not in log, log
    assert set(faulty) == set(reference) and len(faulty) == JOBS + 2 * RUNS
    for stream, ref in reference.items():
        got = faulty[stream]
        assert got.verdicts == ref.verdicts == 1, stream
        assert got.verdict == ref.verdict, (stream, got, ref)
    assert stale_writes(faulty) == []


def test_a_paused_replica_whose_name_was_restarted_is_fenced_when_it_wakes(
    tmp_path: Path,
) -> None:
    with harness(tmp_path) as fleet:
        old = fleet.start("r0")
        fleet.await_replicas(1)
        fleet.hand_off(12, 0, scenarios=("no_capacity", "crash_loop"))  # open for 20 s
        deadline = time.monotonic() + 30
        while fleet.held().get("r0", 0) < 12:
            assert time.monotonic() < deadline, fleet.held()
            time.sleep(0.2)
        time.sleep(INTERVAL_S)  # (it watches them)
        old.send_signal(signal.SIGSTOP)
        paused_at = time.time()
        new = fleet.start("r0")  # the old process is there, stopped: its heartbeat decides
        deadline = time.monotonic() + 30
        while "took over" not in fleet.log("r0", 2).read_text():
            assert time.monotonic() < deadline and new.poll() is None, fleet.log("r0", 2)
            time.sleep(0.2)
        time.sleep(INTERVAL_S)  # the newcomer claims and watches the streams
        old.send_signal(signal.SIGCONT)
        assert old.wait(timeout=30) == 8
        said = fleet.log("r0", 1).read_text()
        assert "r0: fenced by a newer incarnation: stopping" in said
        assert said.strip().splitlines()[-1].startswith("error: fenced: a newer incarnation")
        newcomer = fleet.log("r0", 2).read_text()
        assert "r0: took over: the holder's heartbeat stood still for " in newcomer
        fleet.wait_idle()
        assert fleet.drain() == {"r0": 0}
        outcomes = fleet.outcomes()

    assert all(got.verdicts == 1 for got in outcomes.values())
    assert stale_writes(outcomes) == []
    # the old incarnation wrote nothing after the take-over (the newcomer's first bump)
    taken = min(at for got in outcomes.values() for app, at in got.claimers if app == "r0.2")
    assert taken > paused_at
    late = [(s, at) for s, got in outcomes.items() for app, at in got.writes if app == "r0.1"]
    assert [w for w in late if w[1] > taken] == []
