"""The simulator's queue cases (issue 40), over real loopback HTTP on a manual clock.

Three built-in scenarios keep a job IN_QUEUE for different reasons, told apart only by the
endpoint's workers: `slow_image_pull` (a worker initializing for 10 minutes, then it takes
the job), `crash_loop_queue` (a worker that restarts forever: initializing, unhealthy,
initializing, ...) and `timed_out_in_queue` (no worker at all, then TIMED_OUT). Each test
reads what a watcher would (the status, `/health`, the worker list) and what the platform
bills (`GET /_sim/usage`) at chosen simulated times. The verdicts are the rules' business,
not tested here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flashfsm.adapters.simulator import Scenario, SimClock, Simulator, Step, read_usage
from flashfsm.adapters.simulator.usage import WorkerUsage
from flashfsm.adapters.simulator.workers import rfc3339

KEY = "sim-queue-cases-key"
T0 = 1_774_483_200.0  # 2026-03-26T00:00:00Z: the manual clock's start
IDLE_S = 30  # the endpoints' idle timeout


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(clock=SimClock(speed=0, start=T0), api_keys=(KEY,)) as s:
        yield s
        assert s.errors == [], s.errors[0]


@pytest.fixture
def http(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sim.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    ) as client:
        yield client


def submit(sim: Simulator, http: httpx.Client, scenario: str) -> tuple[str, str]:
    """A fresh endpoint and a job of `scenario` queued on it at T0: (endpoint, job)."""
    endpoint = sim.add_endpoint(f"flash-{scenario}", idleTimeout=IDLE_S)
    answer = http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": scenario}})
    assert answer.status_code == 200, answer.text
    return endpoint, answer.json()["id"]


def at(sim: Simulator, t: float) -> None:
    """Move the manual clock to T0 + t."""
    sim.clock.advance(T0 + t - sim.clock())


def read(http: httpx.Client, endpoint: str, job: str) -> tuple[dict[str, Any], ...]:
    """What a watcher reads now: the status answer, /health's workers (those it counts) and
    the worker list's workers."""
    status = http.get(f"/v2/{endpoint}/status/{job}").json()
    counts = http.get(f"/v2/{endpoint}/health").json()["workers"]
    listed = http.get(f"/v2/serverless/{endpoint}/workers").json()
    return status, {k: v for k, v in counts.items() if v}, listed["workers"]


def billed(sim: Simulator, endpoint: str) -> tuple[WorkerUsage, ...]:
    """The endpoint's workers as the platform bills them (`GET /_sim/usage`)."""
    return read_usage(sim.url).workers_of(endpoint)


def log_text(http: httpx.Client, endpoint: str, worker: str) -> str:
    answer = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs", params={"tail": 200})
    assert answer.status_code == 200
    return answer.text


# --------------------------------------------------------------------------- slow_image_pull


def test_slow_image_pull_queues_with_an_initializing_worker_until_it_takes_the_job(sim, http):
    endpoint, job = submit(sim, http, "slow_image_pull")
    worker_id = None
    for t in (0, 299, 300, 301, 599):  # past a small queue grace (300 s), still pulling
        at(sim, t)
        status, counts, workers = read(http, endpoint, job)
        assert status["status"] == "IN_QUEUE" and "workerId" not in status, t
        assert counts == {"initializing": 1}, t
        [worker] = workers
        assert (worker["status"], worker["startedAt"]) == ("initializing", rfc3339(T0)), t
        assert worker["uptimeSeconds"] == t
        worker_id = worker_id or worker["id"]
        assert worker["id"] == worker_id  # one worker all along, started as the job queued
    assert "20.4 GB" in log_text(http, endpoint, worker_id)

    at(sim, 600)  # the pull is over: the very worker takes the job
    status, counts, workers = read(http, endpoint, job)
    assert status["status"] == "IN_PROGRESS" and status["workerId"] == worker_id
    assert status["delayTime"] == 600_000
    assert counts == {"running": 1}
    assert [(w["id"], w["status"], w["startedAt"]) for w in workers] == [
        (worker_id, "running", rfc3339(T0))
    ]

    at(sim, 900)
    status, counts, _ = read(http, endpoint, job)
    assert status["status"] == "COMPLETED" and status["output"]["reward"] == 0.82
    assert status["executionTime"] == 300_000
    assert counts == {"idle": 1}
    [bill] = billed(sim, endpoint)
    assert (bill.id, bill.job_id, bill.started_at, bill.stopped_at) == (worker_id, job, T0, None)
    assert bill.seconds == 900  # the 10 minutes of pulling are billed

    at(sim, 900 + IDLE_S + 60)
    _, counts, workers = read(http, endpoint, job)
    assert counts == {} and workers == []
    [bill] = billed(sim, endpoint)
    assert (bill.stopped_at, bill.stop_reason) == (T0 + 900 + IDLE_S, "idle timeout")
    assert bill.seconds == 900 + IDLE_S


# --------------------------------------------------------------------------- crash_loop_queue

#: (simulated second, the state /health and the list show then): 30 s initializing (the
#: image pull and a first start), then round after round of 30 s unhealthy (the crash) and
#: 30 s initializing (the restart); a phase's end belongs to the next phase.
CRASH_LOOP_READS = (
    (0, "initializing"),
    (29, "initializing"),
    (30, "unhealthy"),
    (59, "unhealthy"),
    (60, "initializing"),
    (90, "unhealthy"),
    (120, "initializing"),
    (3630, "unhealthy"),
    (3660, "initializing"),
    (86_399, "unhealthy"),  # a second before the job's 24 h TTL: still at it
)


def test_crash_loop_queue_restarts_one_worker_forever_while_the_job_stays_queued(sim, http):
    endpoint, job = submit(sim, http, "crash_loop_queue")
    ids = set()
    for t, state in CRASH_LOOP_READS:
        at(sim, t)
        status, counts, workers = read(http, endpoint, job)
        assert status["status"] == "IN_QUEUE" and "workerId" not in status, t
        assert counts == {state: 1}, t  # /health and the list agree at every instant
        [worker] = workers
        assert (worker["status"], worker["startedAt"]) == (state, rfc3339(T0)), t
        ids.add(worker["id"])
        [bill] = billed(sim, endpoint)  # billed all along, like any worker
        assert (bill.id, bill.job_id, bill.started_at, bill.stopped_at) == (
            worker["id"],
            job,
            T0,
            None,
        )
        assert bill.seconds == t
    assert len(ids) == 1  # it restarts its container; it stays the same worker
    text = log_text(http, endpoint, ids.pop())
    assert "ModuleNotFoundError" in text and "restarting container" in text
    assert "(crash 1440); restarting in 30 s" in text  # the day's last crash


@pytest.mark.parametrize("first", [0, 15, 30, 47])
def test_crash_loop_queue_probes_90_s_apart_never_see_unhealthy_twice_in_a_row(sim, http, first):
    """What keeps the reference's unhealthy grace from arming: at the probe pace (90 s),
    every other probe finds the worker initializing; the list shows it unhealthy at some."""
    endpoint, job = submit(sim, http, "crash_loop_queue")
    seen = []
    for t in range(first, 1800, 90):
        at(sim, t)
        _, counts, workers = read(http, endpoint, job)
        assert [w["status"] for w in workers] == list(counts)
        seen.append(next(iter(counts)))
    assert "unhealthy" in seen and "initializing" in seen
    assert not any(a == b == "unhealthy" for a, b in itertools.pairwise(seen))


def test_crash_loop_queue_worker_stops_at_once_when_the_job_is_cancelled(sim, http):
    endpoint, job = submit(sim, http, "crash_loop_queue")
    at(sim, 100)  # initializing, in its second round
    assert http.post(f"/v2/{endpoint}/cancel/{job}").json()["status"] == "CANCELLED"
    status, counts, workers = read(http, endpoint, job)
    assert status["status"] == "CANCELLED"
    assert counts == {} and workers == []  # a crash-looping worker does not idle
    [bill] = billed(sim, endpoint)
    assert (bill.stopped_at, bill.stop_reason, bill.seconds) == (
        T0 + 100,
        "no job left to take",
        100,
    )


# --------------------------------------------------------------------------- timed_out_in_queue


def test_timed_out_in_queue_times_out_with_no_worker_ever(sim, http):
    endpoint, job = submit(sim, http, "timed_out_in_queue")
    for t in (0, 90, 180, 239):
        at(sim, t)
        status, counts, workers = read(http, endpoint, job)
        assert status == {"id": job, "status": "IN_QUEUE"}, t
        assert counts == {} and workers == [], t  # /health all zero, nothing listed
    at(sim, 240)
    status, counts, workers = read(http, endpoint, job)
    assert status == {"id": job, "status": "TIMED_OUT"}  # no workerId, no delayTime: never taken
    assert counts == {} and workers == []
    health = http.get(f"/v2/{endpoint}/health").json()
    assert health["jobs"]["failed"] == 1 and health["jobs"]["inQueue"] == 0
    usage = read_usage(sim.url)
    assert usage.endpoint(endpoint).jobs == (job,)
    assert usage.workers_of(endpoint) == ()  # nothing was billed


# --------------------------------------------------------------------------- Step.cycle


def test_a_cycle_step_hires_a_worker_and_a_pickup_settles_it(sim, http):
    """A scenario of one's own: a step's `cycle` with no worker yet hires one in the first
    phase; the pickup ends the round, and the same worker runs the job."""
    sim.register_scenario(
        Scenario(
            "flaky_start",
            (
                Step(0, status="IN_QUEUE", cycle=(("initializing", 20.0), ("unhealthy", 10.0))),
                Step(100, status="IN_PROGRESS"),
                Step(130, status="COMPLETED", output={"ok": True}),
            ),
        )
    )
    endpoint, job = submit(sim, http, "flaky_start")
    rounds = ((0, "initializing"), (20, "unhealthy"), (30, "initializing"), (85, "unhealthy"))
    for t, state in (*rounds, (99, "initializing")):  # 30 s rounds: 20 s, then 10 s
        at(sim, t)
        _, counts, workers = read(http, endpoint, job)
        assert counts == {state: 1} and [w["status"] for w in workers] == [state], t
    worker_id = workers[0]["id"]
    at(sim, 100)
    status, counts, workers = read(http, endpoint, job)
    assert status["workerId"] == worker_id and counts == {"running": 1}
    assert workers[0]["startedAt"] == rfc3339(T0)
    at(sim, 115)  # no longer going round: it runs
    assert read(http, endpoint, job)[1] == {"running": 1}
    at(sim, 130)
    status, counts, _ = read(http, endpoint, job)
    assert status["status"] == "COMPLETED" and counts == {"idle": 1}


def test_a_cycle_needs_phases_that_last():
    with pytest.raises(ValueError, match="a cycle needs phases"):
        Scenario("bad", (Step(0, cycle=(("initializing", 0.0),)),))
    with pytest.raises(ValueError, match="a cycle needs phases"):
        Scenario("bad", (Step(0, cycle=()),))
