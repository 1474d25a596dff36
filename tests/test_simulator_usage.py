"""What the simulated platform created and billed: `sim.usage()`, `GET /_sim/usage` and
`read_usage(url)`, read from the simulator's own records (endpoints, deleted ones too; the
jobs submitted to each; every worker's start, stop and billed seconds)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from flashfsm.adapters.simulator import (
    EndpointUsage,
    SimClock,
    Simulator,
    Usage,
    WorkerUsage,
    read_usage,
)

KEY = "sim-usage-key-1"
T0 = 1_774_483_200.0  # 2026-03-26T00:00:00Z: the manual clock's start


@pytest.fixture
def sim():
    with Simulator(clock=SimClock(speed=0, start=T0), api_keys=(KEY, "sim-usage-key-2")) as s:
        yield s
        assert s.errors == [], s.errors[0]


def at(sim: Simulator, seconds: float) -> None:
    """Move the manual clock to `seconds` after T0."""
    sim.clock.advance(T0 + seconds - sim.clock())


def run(http: httpx.Client, endpoint: str, scenario: str) -> str:
    answer = http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": scenario}})
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def test_usage_counts_a_second_job_a_deleted_endpoint_and_every_worker_second(sim, http):
    one = sim.add_endpoint("flash-one", workers_max=1, idleTimeout=5)
    first, second = run(http, one, "success"), run(http, one, "success")  # the second waits
    at(sim, 30)
    doomed = sim.add_endpoint("flash-doomed", account=1, scenario="training")
    third = sim.submit(doomed, {})
    at(sim, 100)
    assert http.delete(f"/v2/serverless/{doomed}").status_code == 404  # not this account's
    owner = {"Authorization": "Bearer sim-usage-key-2"}
    assert httpx.delete(f"{sim.url}/v2/serverless/{doomed}", headers=owner).status_code == 204
    at(sim, 400)

    usage = sim.usage()
    assert usage.at == T0 + 400
    assert usage.endpoint(one) == EndpointUsage(
        id=one, name="flash-one", account=0, created_at=T0, deleted_at=None, jobs=(first, second)
    )
    assert usage.endpoint(one).submitted == 2
    assert usage.endpoint(doomed) == EndpointUsage(
        id=doomed,
        name="flash-doomed",
        account=1,
        created_at=T0 + 30,
        deleted_at=T0 + 100,
        jobs=(third,),
    )
    assert [e.id for e in usage.alive] == [one]
    # One worker took both jobs in turn (20 s start-up, 70 s each, 5 s idle); the deleted
    # endpoint's worker was billed from its start until the deletion stopped it.
    (worker,) = usage.workers_of(one)
    assert (worker.job_id, worker.started_at, worker.stopped_at) == (first, T0, T0 + 165)
    assert (worker.seconds, worker.stop_reason) == (165, "idle timeout")
    (cut,) = usage.workers_of(doomed)
    assert cut == WorkerUsage(
        id=cut.id,
        endpoint_id=doomed,
        job_id=third,
        started_at=T0 + 30,
        stopped_at=T0 + 100,
        stop_reason="endpoint deleted",
        seconds=70,
    )
    assert usage.worker_seconds == 165 + 70
    with pytest.raises(KeyError):
        usage.endpoint("never-created")


def test_a_worker_is_billed_up_to_the_reading_and_one_not_started_is_not_in_it(sim, http):
    endpoint = sim.add_endpoint("flash-late", scenario="training", startup_s=5)
    job = run(http, endpoint, "training")
    at(sim, 10)
    assert sim.usage().workers == ()  # its worker starts 5 s before its pickup at 20 s
    assert sim.usage().endpoint(endpoint).jobs == (job,)
    at(sim, 600)
    (worker,) = sim.usage().workers
    assert (worker.started_at, worker.stopped_at, worker.stop_reason) == (T0 + 15, None, None)
    assert worker.seconds == 585  # it still runs: billed up to the reading
    at(sim, 1922)  # the job COMPLETED at 1920; the worker idles until 1925
    assert sim.usage().workers[0].stopped_at is None
    at(sim, 1925)
    assert sim.usage().workers[0].stopped_at == T0 + 1925
    assert sim.usage().worker_seconds == 1910


def test_a_retry_is_the_same_job_and_a_standing_worker_is_billed_too(sim, http):
    endpoint = sim.add_endpoint("flash-retry", scenario="failed")
    job = run(http, endpoint, "failed")
    at(sim, 80)
    assert http.post(f"/v2/{endpoint}/retry/{job}").json()["status"] == "IN_QUEUE"
    sim.configure_endpoint(endpoint, idle=1)
    at(sim, 100)
    usage = sim.usage()
    assert usage.endpoint(endpoint).jobs == (job,)  # retried, not submitted again
    standing = [w for w in usage.workers if w.job_id is None]
    assert [(w.started_at, w.seconds) for w in standing] == [(T0 + 80, 20)]
    assert sorted(w.job_id or "" for w in usage.workers) == ["", job, job]


def test_the_usage_route_answers_the_same_without_a_key_and_without_faults(sim, http):
    kept = sim.add_endpoint("flash-kept", workers_max=2)
    run(http, kept, "success")
    run(http, kept, "training")
    gone = sim.add_endpoint("flash-gone")
    http.delete(f"/v2/serverless/{gone}")
    at(sim, 200)
    sim.add_fault("*", 503, times=None)  # every other route fails; control routes never do
    answer = httpx.get(f"{sim.url}/_sim/usage")  # no Authorization header
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    assert body == json.loads(sim.usage().model_dump_json())
    assert {e["id"]: e["deleted_at"] for e in body["endpoints"]} == {kept: None, gone: T0}
    assert body["endpoints"][0]["submitted"] == 2
    assert body["worker_seconds"] == sum(w["seconds"] for w in body["workers"])
    assert read_usage(sim.url) == sim.usage() == Usage.model_validate(body)
    assert httpx.post(f"{sim.url}/_sim/usage").status_code == 405  # read-only
    assert sim.requests_for("sim_usage")  # recorded like any request
