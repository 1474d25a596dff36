"""The simulator's queue: a job waits IN_QUEUE while every worker its endpoint may have
(`workersMax`) is busy with another job, as on RunPod, and is picked up when one frees."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashfsm.adapters.simulator import HubStore, SimClock, Simulator
from flashfsm.adapters.simulator.world import Account, World

KEY = "sim-queue-key-1"
T0 = 1_774_483_200.0  # 2026-03-26T00:00:00Z: the manual clock's start


@pytest.fixture
def sim():
    with Simulator(clock=SimClock(speed=0, start=T0), api_keys=(KEY,)) as s:
        yield s
        assert s.errors == [], s.errors[0]


def run(http: httpx.Client, endpoint: str, scenario: str, **policy: Any) -> str:
    body: dict[str, Any] = {"input": {"scenario": scenario}}
    if policy:
        body["policy"] = policy
    answer = http.post(f"/v2/{endpoint}/run", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def at(sim: Simulator, seconds: float) -> None:
    """Move the manual clock to `seconds` after T0."""
    sim.clock.advance(T0 + seconds - sim.clock())


def status(http: httpx.Client, endpoint: str, job: str) -> dict[str, Any]:
    answer = http.get(f"/v2/{endpoint}/status/{job}")
    return answer.json() if answer.status_code == 200 else {"status": answer.status_code}


def jobs(http: httpx.Client, endpoint: str) -> dict[str, int]:
    return http.get(f"/v2/{endpoint}/health").json()["jobs"]


def running_workers(http: httpx.Client, endpoint: str) -> int:
    return http.get(f"/v2/serverless/{endpoint}/workers").json()["summary"]["running"]


def test_two_jobs_on_a_one_worker_endpoint_train_one_after_the_other(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    first, second = run(http, endpoint, "success"), run(http, endpoint, "success")
    for second_at in range(0, 170, 5):
        at(sim, second_at)
        assert running_workers(http, endpoint) <= 1, second_at  # never two at once
    done_first, done_second = status(http, endpoint, first), status(http, endpoint, second)
    assert done_first["status"] == done_second["status"] == "COMPLETED"
    assert done_first["delayTime"] == 20_000 and done_first["executionTime"] == 70_000
    # The second waited for the first's end (90 s), then the same warm worker took it at
    # once and its script ran on from its pickup: 70 s of training, as the first's did.
    assert done_second["delayTime"] == 90_000 and done_second["executionTime"] == 70_000
    assert done_second["workerId"] == done_first["workerId"]
    (worker,) = sim.workers(endpoint)  # one worker was ever hired
    assert worker["started_at"] == T0 and worker["picked_up_at"] == T0 + 90


def test_a_waiting_job_has_no_worker_and_health_counts_it_in_queue(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    first, second = run(http, endpoint, "training"), run(http, endpoint, "training")
    at(sim, 30)
    assert jobs(http, endpoint)["inQueue"] == 1 and jobs(http, endpoint)["inProgress"] == 1
    assert status(http, endpoint, second) == {"id": second, "status": "IN_QUEUE"}
    assert [w["job_id"] for w in sim.workers(endpoint)] == [first]
    at(sim, 1919)
    assert jobs(http, endpoint)["inQueue"] == 1
    at(sim, 1920)
    assert jobs(http, endpoint)["inQueue"] == 0 and jobs(http, endpoint)["inProgress"] == 1
    assert status(http, endpoint, second)["status"] == "IN_PROGRESS"


def test_with_two_workers_two_jobs_run_together(sim, http):
    endpoint = sim.add_endpoint("flash-two", workers_max=2)
    first, second = run(http, endpoint, "success"), run(http, endpoint, "success")
    at(sim, 20)
    assert running_workers(http, endpoint) == 2
    assert jobs(http, endpoint)["inQueue"] == 0
    at(sim, 90)
    for job in (first, second):
        answer = status(http, endpoint, job)
        assert (answer["status"], answer["delayTime"]) == ("COMPLETED", 20_000)
    assert len(sim.workers(endpoint)) == 2


def test_a_cancelled_first_job_frees_its_worker_for_the_next(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    first, second = run(http, endpoint, "training"), run(http, endpoint, "success")
    at(sim, 100)
    assert http.post(f"/v2/{endpoint}/cancel/{first}").json()["status"] == "CANCELLED"
    answer = status(http, endpoint, second)
    assert (answer["status"], answer["delayTime"]) == ("IN_PROGRESS", 100_000)
    at(sim, 170)
    assert status(http, endpoint, second)["status"] == "COMPLETED"


def test_a_first_job_past_its_ttl_frees_its_worker_for_the_next(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    first, second = run(http, endpoint, "ttl_expired"), run(http, endpoint, "success")
    at(sim, 599)
    assert status(http, endpoint, second)["status"] == "IN_QUEUE"
    at(sim, 600)  # the first's 10-minute TTL: RunPod deletes it, its worker is free
    assert status(http, endpoint, first)["status"] == 404
    assert status(http, endpoint, second)["delayTime"] == 600_000


def test_a_waiting_job_s_ttl_counts_from_its_submission(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    first = run(http, endpoint, "training")
    never = run(http, endpoint, "success", ttl=300_000)  # expires before the first ends
    late = run(http, endpoint, "training", ttl=2_000_000)  # its TTL passes mid-training
    at(sim, 300)
    assert status(http, endpoint, never)["status"] == 404
    assert status(http, endpoint, late)["status"] == "IN_QUEUE"
    at(sim, 1920)  # the first ends; the expired job is skipped and `late` is picked up
    assert status(http, endpoint, first)["status"] == "COMPLETED"
    assert status(http, endpoint, late)["delayTime"] == 1_920_000
    at(sim, 1999)
    assert status(http, endpoint, late)["status"] == "IN_PROGRESS"
    at(sim, 2000)  # 2000 s after its submission: queue and execution both count
    assert status(http, endpoint, late)["status"] == 404
    assert {w["job_id"] for w in sim.workers(endpoint)} == {first}  # `never` had none


def test_one_clock_jump_replays_the_queue_in_time_order(sim, http):
    endpoint = sim.add_endpoint("flash-two", workers_max=2)
    run(http, endpoint, "success")  # ends at 90
    run(http, endpoint, "training")  # ends at 1920
    early, next_one = run(http, endpoint, "success"), run(http, endpoint, "success")
    at(sim, 1500)  # everything in one replay (before the results' 30-minute retention ends)
    assert status(http, endpoint, early)["delayTime"] == 90_000  # the first free worker
    assert status(http, endpoint, next_one)["delayTime"] == 160_000  # `early`'s, at its end
    assert len(sim.workers(endpoint)) == 2  # the first's warm worker took both in turn


def test_a_worker_that_does_not_idle_leaves_the_next_job_a_cold_start(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    looping, second = run(http, endpoint, "crash_loop"), run(http, endpoint, "success")
    at(sim, 100)
    http.post(f"/v2/{endpoint}/cancel/{looping}")  # its unhealthy worker stops at once
    assert status(http, endpoint, second)["status"] == "IN_QUEUE"
    at(sim, 120)  # the scenario's own 20 s cold start, counted from the slot's release
    answer = status(http, endpoint, second)
    assert (answer["status"], answer["delayTime"]) == ("IN_PROGRESS", 120_000)
    new = [w for w in sim.workers(endpoint) if w["job_id"] == second]
    assert [w["started_at"] for w in new] == [T0 + 100]


def test_a_job_submitted_while_a_worker_idles_is_taken_without_a_cold_start(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1, idleTimeout=30)
    first = run(http, endpoint, "success")
    at(sim, 100)  # the first ended at 90; its worker idles until 120
    second = run(http, endpoint, "success")
    answer = status(http, endpoint, second)
    assert (answer["status"], answer["delayTime"]) == ("IN_PROGRESS", 0)
    assert answer["workerId"] == status(http, endpoint, first)["workerId"]
    at(sim, 200)
    third = run(http, endpoint, "success")  # the worker stopped at 200 (170 + 30)
    assert status(http, endpoint, third)["status"] == "IN_QUEUE"
    at(sim, 220)
    assert status(http, endpoint, third)["delayTime"] == 20_000
    assert len(sim.workers(endpoint)) == 2


def test_purge_removes_waiting_jobs_and_a_raised_workers_max_starts_them(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    training = run(http, endpoint, "training")
    purged, kept = run(http, endpoint, "success"), run(http, endpoint, "success")
    http.post(f"/v2/{endpoint}/cancel/{kept}")
    at(sim, 30)  # the first was picked up at 20: it is no longer queued
    assert http.post(f"/v2/{endpoint}/purge-queue").json()["removed"] == 1
    assert status(http, endpoint, purged)["status"] == 404
    assert status(http, endpoint, training)["status"] == "IN_PROGRESS"
    waiting = run(http, endpoint, "success")
    at(sim, 50)
    assert status(http, endpoint, waiting)["status"] == "IN_QUEUE"
    assert http.patch(f"/v2/serverless/{endpoint}", json={"workersMax": 2}).status_code == 200
    assert status(http, endpoint, waiting)["status"] == "IN_QUEUE"  # a cold start from 50 s
    at(sim, 70)
    assert status(http, endpoint, waiting)["delayTime"] == 40_000  # queued at 30


def test_deleting_the_endpoint_ends_its_waiting_jobs_like_its_running_ones(sim, http):
    endpoint = sim.add_endpoint("flash-one", workers_max=1)
    running, waiting = run(http, endpoint, "training"), run(http, endpoint, "success")
    at(sim, 60)
    assert http.delete(f"/v2/serverless/{endpoint}").status_code == 204
    for job in (running, waiting):
        assert sim.job(job).gone
        answer = http.get(f"/v2/{endpoint}/status/{job}")
        assert answer.status_code == 404 and "not found" in answer.json()["error"]
    at(sim, 5000)  # nothing of theirs happens any more
    assert [w["job_id"] for w in sim.workers(endpoint)] == [running]
    assert sim.job(waiting).status == "IN_QUEUE" and sim.job(waiting).crew == []


RUNS = {"success": 70_000, "training": 1_900_000, "failed": 50_000, "worker_death": 120_000}


@settings(max_examples=40)
@given(
    workers_max=st.integers(1, 3),
    jobs=st.lists(
        st.tuples(st.sampled_from(sorted(RUNS)), st.sampled_from([0, 5, 20, 60, 100, 400])),
        min_size=1,
        max_size=6,
    ),
)
def test_the_queue_delays_a_job_and_never_changes_its_run(workers_max, jobs):
    """Invariant: at no moment are more than `workersMax` of an endpoint's jobs
    IN_PROGRESS or more than `workersMax` of its workers listed, and every job, however long
    it waited, runs exactly as it would alone (the same execution time)."""
    clock = SimClock(speed=0, start=T0)
    world = World(clock, HubStore(), [Account("a", KEY)])
    endpoint = world.add_endpoint(world.accounts[0], "flash-q", config={"workersMax": workers_max})
    submitted: list[tuple[str, str]] = []
    for scenario, gap in jobs:
        clock.advance(gap)
        world.tick()
        job = world.submit(endpoint, {"input": {"scenario": scenario}})
        submitted.append((job.id, scenario))
    for _ in range(0, 12_000, 10):
        clock.advance(10)
        world.tick()
        assert endpoint.health()["jobs"]["inProgress"] <= workers_max
        assert sum(1 for w in endpoint.live_workers() if w.listed(clock.now())) <= workers_max
    for job_id, scenario in submitted:
        answer = world.jobs[job_id].status_answer()
        assert answer["status"] in ("COMPLETED", "FAILED"), answer
        assert answer["executionTime"] == RUNS[scenario], (scenario, answer)
        assert answer["delayTime"] >= 0
