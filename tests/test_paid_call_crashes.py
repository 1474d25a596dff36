"""Restart anywhere, pay once: a run killed between a paid call and its record resumes
without paying twice.

A paid call's answer is recorded after the call returns, so a process can die in between:
the platform has made the endpoint, queued the job, cancelled it or deleted the endpoint,
and the log does not say so. Each case here kills `supervise_run` (SIGKILL, in its own
process: tests/paid_call_support.py) right after one such call — the deploy, the submit,
the cancel, the delete, of the first attempt or of a second one after a retriable failure —
or right before it (the intent recorded, the call never made), advances the simulator's
clock by a restart's `RESTART_S`, and calls `supervise_run` again (same run id, same store)
to the end. From the simulator's own records, against the same walk run without a crash:

- at most one endpoint created per attempt (by its recorded name), and none that is no
  attempt's; at most one job submitted per attempt (a lost submit's redo is an attempt of
  its own in the log, with its own endpoint);
- no endpoint alive at the run's end;
- worker-seconds billed at most the uncrashed run's plus one cold start (the longest
  start-up of a worker of that run), and no more completed trainings;
- the same verdict (ok, failure).

Two more: a run killed after each of its paid calls in turn (each process one step
further, the recovery's own calls included: the adopted endpoint's submit, a lost submit's
teardown, a re-issued cancel), held to the same bounds with one cold start per lost
submit; and a deploy whose lookup fails on the resume, whose endpoint is looked up again
and deleted before the run moves on.

The walks are short on the simulator's manual clock: `one` (a job that completes after 90
s), `cancelled` (the same, cancelled mid-watch by `request_cancel`), `retry` (the first
candidate's job times out, the second's completes).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from flashfsm.adapters.runpod import RetryPolicy
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.urls import path_url
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    EndpointDeleted,
    EndpointDeployed,
    EndpointsLookedUp,
    JobCancelled,
    JobQueued,
    RunConcluded,
)
from flashfsm.fsm.run import SUBMIT_LOST
from tests.paid_call_support import STREAM, Bill, CrashPoint, Platform, Walk, bill, drive
from tests.store_support import read_stream, run_in_child

T0 = 1_700_000_000.0
RESTART_S = 5.0  # simulated seconds between the kill and the new process's first call
WALKS = {
    w.name: w
    for w in (
        Walk("one", (("L4", "success"),)),
        Walk("cancelled", (("L4", "success"),), cancel_after_s=30),
        Walk("retry", (("L4", "timed_out"), ("A40", "success"))),
    )
}
CASES = [
    ("one", CrashPoint("deploy", 0)),
    ("one", CrashPoint("deploy", 0, before=True)),
    ("one", CrashPoint("submit", 0)),
    ("one", CrashPoint("submit", 0, before=True)),
    ("one", CrashPoint("delete", 0)),
    ("cancelled", CrashPoint("cancel", 0)),
    ("cancelled", CrashPoint("delete", 0)),
    ("retry", CrashPoint("cancel", 0)),
    ("retry", CrashPoint("delete", 0)),
    ("retry", CrashPoint("deploy", 1)),
    ("retry", CrashPoint("submit", 1)),
    ("retry", CrashPoint("delete", 1)),
]


@contextmanager
def simulator() -> Iterator[tuple[Simulator, Platform]]:
    """A fresh simulator on a manual clock at `T0`, and how a child process reaches it."""
    with Simulator(clock=SimClock(speed=0, start=T0)) as sim:
        yield sim, Platform(sim.url, sim.accounts[0].key)
        assert sim.errors == [], sim.errors[0]


@dataclass
class Walked:
    """A walk driven to its end: the run's log when its first process was killed, its final
    log, its bill, and the kills it took."""

    killed: list[Any]
    log: list[Any]
    paid: Bill
    kills: int


def run_walk(walk: Walk, url: str, crashes: Sequence[CrashPoint] = ()) -> Walked:
    """`walk` driven to its end on a fresh simulator: one process killed at each of
    `crashes` in turn (`RESTART_S` later the next one resumes the run), then one to the
    end (a `new` crash point that finds no new paid call lets its process end the run)."""
    with simulator() as (sim, platform):
        kills, first = 0, None
        for crash in crashes:
            code = run_in_child(drive, walk, platform, url, crash)
            if code == 0 and crash.call == "new":
                break
            assert code == -signal.SIGKILL, f"{crash}: the driver was not killed (exit {code})"
            kills += 1
            first = read_stream(url, STREAM) if first is None else first
            sim.clock.advance(RESTART_S)
        else:
            code = run_in_child(drive, walk, platform, url, None)
            assert code == 0, f"the last process failed (exit {code})"
        log = read_stream(url, STREAM)
        return Walked(log if first is None else first, log, bill(sim), kills)


@pytest.fixture(scope="module")
def uncrashed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The final log and the bill of each walk run without a crash (made once)."""
    made: dict[str, tuple[list[Any], Bill]] = {}

    def get(walk: Walk) -> tuple[list[Any], Bill]:
        if walk.name not in made:
            url = path_url("sqlite", tmp_path_factory.mktemp(walk.name) / "run.db")
            walked = run_walk(walk, url)
            made[walk.name] = (walked.log, walked.paid)
        return made[walk.name]

    return get


def answered(log: list[Any], crash: CrashPoint) -> bool:
    """Whether `log` records the answer of the call `crash` names."""
    endpoints = {e.attempt: e.endpoint_id for e in log if isinstance(e, EndpointDeployed)}
    for e in log:
        match crash.call, e:
            case "deploy", EndpointDeployed(attempt=crash.attempt):
                return True
            case "submit", JobQueued(attempt=crash.attempt):
                return True
            case "cancel", JobCancelled(attempt=crash.attempt):
                return True
            case "delete", EndpointDeleted(endpoint_id=endpoint_id):
                if endpoint_id == endpoints.get(crash.attempt):
                    return True
    return False


def verdict(log: list[Any]) -> tuple[bool, str | None]:
    """The run's (ok, failure), from its `RunConcluded`."""
    concluded = log[-1]
    assert isinstance(concluded, RunConcluded), f"the run ends with {concluded.kind}"
    return concluded.ok, concluded.failure


def test_the_uncrashed_walks_end_as_designed(uncrashed):
    """The references are what the cases assume: each walk's verdict, and what it paid."""
    for walk, expected in [("one", (True, None)), ("cancelled", (False, "cancelled"))]:
        log, paid = uncrashed(WALKS[walk])
        assert verdict(log) == expected and paid.completed == (walk == "one")
        assert sum(isinstance(e, AttemptStarted) for e in log) == 1
    log, paid = uncrashed(WALKS["retry"])
    assert verdict(log) == (True, None) and paid.completed == 1
    assert [e.failure for e in log if isinstance(e, AttemptEnded)] == ["job_preempted", None]
    for _, paid in map(uncrashed, WALKS.values()):
        assert paid.worker_s > 0 and paid.cold_start_s > 0 and not paid.alive


def check_paid_once(got: Walked, reference: list[Any], paid_once: Bill) -> None:
    """What a restart may not pay for: a second endpoint or job for one attempt, an endpoint
    left alive, more than one cold start of worker time per lost submit (one at least: a
    single crash's bound), a second training, another verdict."""
    log, paid = got.log, got.paid
    assert verdict(log) == verdict(reference)
    names = [e.endpoint_name for e in log if isinstance(e, AttemptStarted)]
    assert set(paid.created) <= set(names), f"an endpoint of no attempt: {paid.created}"
    for name in names:  # one endpoint and one job per attempt, at most
        assert paid.created[name] <= 1, f"{name}: {paid.created[name]} endpoints"
        assert paid.jobs[name] <= 1, f"{name}: {paid.jobs[name]} jobs"
    assert paid.alive == [], f"endpoints alive after the run: {paid.alive}"
    assert paid.completed <= paid_once.completed
    lost = sum(isinstance(e, AttemptEnded) and e.rule == SUBMIT_LOST for e in log)
    bound = paid_once.worker_s + paid_once.cold_start_s * max(1, lost)
    assert paid.worker_s <= bound, (
        f"{paid.worker_s} worker-seconds against {paid_once.worker_s} uncrashed ({lost} lost)"
    )


@pytest.mark.parametrize(("walk", "crash"), CASES, ids=[f"{w}-{c}" for w, c in CASES])
def test_a_kill_between_a_paid_call_and_its_record_pays_once(walk, crash, tmp_path, uncrashed):
    walk = WALKS[walk]
    reference, paid_once = uncrashed(walk)
    got = run_walk(walk, path_url("sqlite", tmp_path / "run.db"), [crash])

    assert not answered(got.killed, crash), f"{crash}: the kill came after the answer's record"
    check_paid_once(got, reference, paid_once)
    log = got.log
    lost = [e for e in log if isinstance(e, AttemptEnded) and e.rule == SUBMIT_LOST]
    redos = [e for e in log if isinstance(e, AttemptStarted) and e.redo]
    if crash.call == "submit":  # the attempt's endpoint torn down, then a redo
        assert [e.attempt for e in lost] == [crash.attempt]
        assert [e.attempt for e in redos] == [crash.attempt + 1]
    else:  # the same attempts as the uncrashed run
        assert lost == [] and redos == []
        started = sum(isinstance(e, AttemptStarted) for e in log)
        assert started == sum(isinstance(e, AttemptStarted) for e in reference)


@pytest.mark.parametrize("walk", sorted(WALKS))
def test_a_run_killed_after_each_of_its_paid_calls_in_turn_pays_once(walk, tmp_path, uncrashed):
    """Each process dies after the first paid call no process died after before, the
    recovery's own included (a lookup's adopt then its submit, a lost submit's teardown, a
    re-issued cancel, the next attempt's deploy): the run still ends as the uncrashed one,
    having paid once."""
    walk = WALKS[walk]
    reference, paid_once = uncrashed(walk)
    ledger = tmp_path / "killed-after"
    chain = [CrashPoint("new", ledger=str(ledger))] * 20
    got = run_walk(walk, path_url("sqlite", tmp_path / "run.db"), chain)
    check_paid_once(got, reference, paid_once)
    killed_after = ledger.read_text().split()
    assert got.kills == len(killed_after) >= 4  # (a run of the chain's end: no new call left)
    calls = {line.split(":")[0] for line in killed_after}
    assert calls >= {"deploy", "submit", "delete"}
    assert ("cancel" in calls) == (walk.name != "one")


@pytest.mark.parametrize("walk", ["one", "retry"])
def test_an_interrupted_deploy_whose_lookup_fails_leaves_no_endpoint_behind(walk, tmp_path):
    """Killed after the deploy, resumed while the platform fails to list its endpoints (one
    lookup's worth of tries): the attempt ends without deploying blind, and its endpoint,
    looked up again before the run moves on, is deleted rather than left alive."""
    walk = WALKS[walk]
    url = path_url("sqlite", tmp_path / "run.db")
    with simulator() as (sim, platform):
        code = run_in_child(drive, walk, platform, url, CrashPoint("deploy", 0))
        assert code == -signal.SIGKILL
        sim.add_fault("list_endpoints", 503, times=RetryPolicy().attempts)
        sim.clock.advance(RESTART_S)
        assert run_in_child(drive, walk, platform, url, None) == 0
        log, paid = read_stream(url, STREAM), bill(sim)
    assert verdict(log) == (True, None)
    lookups = [e for e in log if isinstance(e, EndpointsLookedUp)]
    assert [bool(e.error_class) for e in lookups][:1] == [True]
    [found] = [f.endpoint_id for e in lookups for f in e.found]
    assert found in {e.endpoint_id for e in log if isinstance(e, EndpointDeleted) and e.ok}
    [ended] = [e for e in log if isinstance(e, AttemptEnded) and e.attempt == 0]
    assert ended.failure == "poll_error"  # never a blind deploy for attempt 0
    names = [e.endpoint_name for e in log if isinstance(e, AttemptStarted)]
    assert all(paid.created[name] <= 1 and paid.jobs[name] <= 1 for name in names)
    assert paid.alive == [], f"endpoints alive after the run: {paid.alive}"


def test_the_crash_points_cover_every_paid_call():
    """Each paid call is a crash point, after the call (and before it, where cheap)."""
    calls = {c.call for _, c in CASES}
    assert calls == {"deploy", "submit", "cancel", "delete"}
    assert {c.attempt for _, c in CASES if c.call in ("deploy", "submit")} == {0, 1}
