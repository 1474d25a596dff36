"""The simulator's workers: the list RunPod REST v2 answers, each worker's life on the sim
clock, and its log as Server-Sent Events, over real loopback HTTP."""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from flashfsm.adapters.simulator import Scenario, SimClock, Simulator, Step, builtin_scenarios
from flashfsm.adapters.simulator.serve import parse_fault
from flashfsm.adapters.simulator.workers import DEFAULT_STARTUP_S
from tests.integrations.support import wait_for

KEY = "sim-workers-key-1"
OTHER = "sim-workers-key-2"
T0 = 1_774_483_200.0  # 2026-03-26T00:00:00Z: the manual clock's start
LISTED = ("running", "idle", "initializing", "throttled", "unhealthy")


@pytest.fixture
def sim():
    with Simulator(clock=SimClock(speed=0, start=T0), api_keys=(KEY, OTHER)) as s:
        yield s
        assert s.errors == [], s.errors[0]


def run(http: httpx.Client, endpoint: str, job_input: dict[str, Any] | None = None) -> str:
    answer = http.post(f"/v2/{endpoint}/run", json={"input": job_input or {}})
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def at(sim: Simulator, seconds: float) -> None:
    """Move the manual clock to `seconds` after T0."""
    sim.clock.advance(T0 + seconds - sim.clock())


def listed(http: httpx.Client, endpoint: str) -> dict[str, Any]:
    answer = http.get(f"/v2/serverless/{endpoint}/workers")
    assert answer.status_code == 200, answer.text
    return answer.json()


def by_id(http: httpx.Client, endpoint: str) -> dict[str, dict[str, Any]]:
    return {w["id"]: w for w in listed(http, endpoint)["workers"]}


def epoch(text: str) -> float:
    assert text.endswith("Z"), text  # RFC 3339 in UTC
    return datetime.fromisoformat(text).timestamp()


def events(text: str) -> list[dict[str, Any]]:
    """Parse an SSE body strictly: every event is `id: <ts>`, `data: <json>`, a blank line."""
    assert text == "" or text.endswith("\n\n"), text[-200:]
    out = []
    for block in text.split("\n\n")[:-1]:
        fields = block.split("\n")
        assert len(fields) == 2 and fields[0].startswith("id: "), block
        assert fields[1].startswith("data: "), block
        data = json.loads(fields[1][len("data: ") :])
        assert set(data) == {"source", "line", "ts"} and data["source"] in ("container", "system")
        assert fields[0][len("id: ") :] == data["ts"]  # the id is the line's timestamp
        out.append(data)
    return out


def log(http: httpx.Client, endpoint: str, worker: str, **params: Any) -> list[dict[str, Any]]:
    answer = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "text/event-stream"
    return events(answer.text)


def lines(http: httpx.Client, endpoint: str, worker: str, **params: Any) -> list[str]:
    return [e["line"] for e in log(http, endpoint, worker, **params)]


def health_workers(http: httpx.Client, endpoint: str) -> dict[str, int]:
    return http.get(f"/v2/{endpoint}/health").json()["workers"]


def status(http: httpx.Client, endpoint: str, job: str) -> dict[str, Any]:
    return http.get(f"/v2/{endpoint}/status/{job}").json()


# ----------------------------------------------------------------------- the list


def test_the_list_names_the_worker_the_status_names_in_runpods_shape(sim, http):
    endpoint = sim.add_endpoint(scenario="success", gpuIds="ADA_48_PRO", locations="EU-RO-1")
    job = run(http, endpoint)
    at(sim, 30)
    worker_id = status(http, endpoint, job)["workerId"]
    assert worker_id == f"w-{job[:8]}"
    answer = listed(http, endpoint)
    assert answer == {
        "workers": [
            {
                "id": worker_id,
                "status": "running",
                "gpuTypeId": "NVIDIA L40S",
                "dataCenterId": "EU-RO-1",
                "startedAt": "2026-03-26T00:00:00Z",
                "uptimeSeconds": 30,
                "gpuCount": 1,
                "isStale": False,
                "version": 0,
                "image": "runpod/worker-flash:sim",
            }
        ],
        "summary": {
            "running": 1,
            "idle": 0,
            "initializing": 0,
            "throttled": 0,
            "unhealthy": 0,
            "total": 1,
        },
        "endpointVersion": 0,
    }
    http.patch(f"/v2/serverless/{endpoint}", json={"workersMax": 1})  # a new config version
    (worker,) = listed(http, endpoint)["workers"]
    assert worker["isStale"] and listed(http, endpoint)["endpointVersion"] == 1


@pytest.mark.parametrize(
    ("where", "startup"),
    [("default", DEFAULT_STARTUP_S), ("endpoint", 45.0), ("input", 7.5), ("scenario", 120.0)],
)
def test_a_worker_starts_its_startup_before_it_picks_the_job_up(sim, http, where, startup):
    knobs: dict[str, Any] = {"startup_s": 45.0} if where == "endpoint" else {}
    scenario = "slow_cold_start" if where == "scenario" else "success"
    endpoint = sim.add_endpoint(scenario=scenario, **knobs)
    job = run(http, endpoint, {"sim": {"startup_s": 7.5}} if where == "input" else {})
    at(sim, 130 if where == "scenario" else 50)  # running (its pickup is at 120, or 20)
    answer = status(http, endpoint, job)
    picked_up = sim.job(job).created_at + answer["delayTime"] / 1000
    worker = by_id(http, endpoint)[answer["workerId"]]
    assert epoch(worker["startedAt"]) == pytest.approx(picked_up - startup, abs=1e-3)
    assert worker["uptimeSeconds"] == int(sim.clock() - epoch(worker["startedAt"]))
    (record,) = sim.workers(endpoint)
    assert record["picked_up_at"] - record["started_at"] == pytest.approx(startup)


def test_a_worker_is_listed_and_counted_from_its_start_not_before(sim, http):
    endpoint = sim.add_endpoint(scenario="success", startup_s=5)  # pickup at 20: start at 15
    job = run(http, endpoint)
    for second, expected in ((0, {}), (14, {}), (15, {"initializing": 1}), (21, {"running": 1})):
        at(sim, second)
        counts = listed(http, endpoint)["summary"]
        assert {k: v for k, v in counts.items() if v and k != "total"} == expected, second
        assert {k: v for k, v in health_workers(http, endpoint).items() if v} == expected
    assert status(http, endpoint, job)["workerId"] in by_id(http, endpoint)


def test_a_longer_startup_than_the_queue_wait_started_before_the_job(sim, http):
    endpoint = sim.add_endpoint(scenario="success", startup_s=60)  # pickup at 20
    run(http, endpoint)
    (worker,) = listed(http, endpoint)["workers"]  # listed at once: it was starting already
    assert (worker["status"], epoch(worker["startedAt"])) == ("initializing", T0 - 40)


@pytest.mark.parametrize(
    ("scenario", "ends_at"),
    [("success", 90), ("failed", 70), ("completed_no_output", 60), ("timed_out", 120)],
)
def test_a_finished_job_s_worker_idles_for_the_idle_timeout_then_stops(
    sim, http, scenario, ends_at
):
    endpoint = sim.add_endpoint(scenario=scenario, idleTimeout=30)
    job = run(http, endpoint)
    at(sim, ends_at + 1)
    worker_id = status(http, endpoint, job)["workerId"]
    assert by_id(http, endpoint)[worker_id]["status"] == "idle"
    assert health_workers(http, endpoint)["idle"] == 1
    at(sim, ends_at + 29.5)
    assert worker_id in by_id(http, endpoint)
    at(sim, ends_at + 30)
    assert listed(http, endpoint)["workers"] == [] and health_workers(http, endpoint)["idle"] == 0
    (record,) = sim.workers(endpoint)
    assert (record["status"], record["stop_reason"]) == ("stopped", "idle timeout")
    assert record["stopped_at"] == T0 + ends_at + 30
    assert lines(http, endpoint, worker_id)[-1] == "worker stopped (idle timeout)"  # still read


def test_a_cancel_releases_the_worker_to_its_idle_timeout(sim, http):
    endpoint = sim.add_endpoint(scenario="training", idleTimeout=10)
    job = run(http, endpoint)
    at(sim, 300)
    assert http.post(f"/v2/{endpoint}/cancel/{job}").json()["status"] == "CANCELLED"
    worker_id = status(http, endpoint, job)["workerId"]
    assert by_id(http, endpoint)[worker_id]["status"] == "idle"
    assert f"{job} | Cancelled." in lines(http, endpoint, worker_id)
    at(sim, 310)
    assert listed(http, endpoint)["workers"] == []
    assert sim.workers(endpoint)[0]["stopped_at"] == T0 + 310


def test_deleting_the_endpoint_stops_its_workers_at_once(sim, http):
    endpoint = sim.add_endpoint(scenario="training", idleTimeout=600, workers_max=2)
    jobs = [run(http, endpoint) for _ in range(2)]
    sim.configure_endpoint(endpoint, idle=1)
    at(sim, 200)
    assert listed(http, endpoint)["summary"]["total"] == 3
    assert http.delete(f"/v2/serverless/{endpoint}").status_code == 204
    gone = http.get(f"/v2/serverless/{endpoint}/workers")
    assert gone.status_code == 404
    assert gone.headers["content-type"] == "application/problem+json"
    assert set(gone.json()) >= {"title", "status", "detail"} and gone.json()["status"] == 404
    records = sim.workers(endpoint)
    assert len(records) == 3 and {r["stopped_at"] for r in records} == {T0 + 200}
    assert {r["stop_reason"] for r in records} == {"endpoint deleted"}
    assert {r["job_id"] for r in records} == {*jobs, None}


def test_a_stalled_job_keeps_its_worker_running_and_its_log_stops_at_its_last_step(sim, http):
    endpoint = sim.add_endpoint(scenario="training_stall")
    job = run(http, endpoint)
    at(sim, 3 * 3600)  # long after any watch's stall verdict: nobody tore it down
    worker_id = status(http, endpoint, job)["workerId"]
    worker = by_id(http, endpoint)[worker_id]
    assert worker["status"] == "running" and worker["uptimeSeconds"] == 3 * 3600
    assert health_workers(http, endpoint)["running"] == 1
    tail = log(http, endpoint, worker_id, tail=3)
    assert [e["line"] for e in tail][-1] == "train step 30: loss 1.2500"  # its last heartbeat
    assert epoch(tail[-1]["ts"]) == T0 + 240
    assert http.delete(f"/v2/serverless/{endpoint}").status_code == 204  # the teardown
    assert sim.workers(endpoint)[0]["stopped_at"] == T0 + 3 * 3600  # billed until here


def test_a_crash_loop_lists_an_unhealthy_worker_whose_log_shows_the_crash(sim, http):
    endpoint = sim.add_endpoint(scenario="crash_loop")
    job = run(http, endpoint)
    at(sim, 600)
    assert "workerId" not in status(http, endpoint, job)  # it never took the job
    (worker,) = listed(http, endpoint)["workers"]
    assert worker["status"] == "unhealthy" and health_workers(http, endpoint)["unhealthy"] == 1
    assert sim.workers(endpoint)[0]["picked_up_at"] is None
    text = lines(http, endpoint, worker["id"], tail=5000)
    assert text.count("Traceback (most recent call last):") == 20  # a restart every 30 s
    assert "ModuleNotFoundError: No module named 'flash_attn'" in text
    assert "starting container (attempt 20)" in text
    container = log(http, endpoint, worker["id"], source="container", tail=6)
    assert [e["line"] for e in container][-1].startswith("ModuleNotFoundError")
    system = log(http, endpoint, worker["id"], source="system", tail=5000)
    assert {e["source"] for e in system} == {"system"}


def test_a_throttled_worker_is_listed_throttled_and_says_it_waits(sim, http):
    endpoint = sim.add_endpoint(scenario="throttled", gpuIds="AMPERE_80")
    run(http, endpoint)
    at(sim, 200)
    (worker,) = listed(http, endpoint)["workers"]
    assert worker["status"] == "throttled" and health_workers(http, endpoint)["throttled"] == 1
    waits = [t for t in lines(http, endpoint, worker["id"]) if t.startswith("waiting")]
    assert waits == ["waiting for capacity: no NVIDIA A100 80GB PCIe free on the host "
                     "(throttled)"] * 4  # fmt: skip


def test_a_worker_that_died_stops_and_a_new_one_takes_the_requeued_job(sim, http):
    endpoint = sim.add_endpoint(scenario="worker_death")
    job = run(http, endpoint)
    at(sim, 100)
    first = status(http, endpoint, job)["workerId"]
    at(sim, 200)
    second = status(http, endpoint, job)["workerId"]
    assert first != second and set(by_id(http, endpoint)) == {second}
    records = {r["id"]: r for r in sim.workers(endpoint)}
    assert (records[first]["stopped_at"], records[first]["stop_reason"]) == (T0 + 120, "died")
    assert records[second]["started_at"] == T0 + 160  # 20 s before it took the job at 180
    assert any("exit" in line and "137" in line for line in lines(http, endpoint, first))


@pytest.mark.parametrize("workers_max", [1, 3, 20], ids=["queued", "some-queued", "none-queued"])
def test_the_list_and_health_agree_for_every_scenario_at_every_moment(sim, http, workers_max):
    endpoint = sim.add_endpoint(check_quota=False, idleTimeout=15, workers_max=workers_max)
    sim.configure_endpoint(endpoint, idle=1, ready=1)
    for name in builtin_scenarios():
        run(http, endpoint, {"scenario": name})
    for second in range(0, 3200, 13):
        at(sim, second)
        summary = listed(http, endpoint)["summary"]
        health = health_workers(http, endpoint)
        assert summary["idle"] == health["idle"] + health["ready"], second  # ready lists idle
        for state in ("running", "initializing", "throttled", "unhealthy"):
            assert summary[state] == health[state], (second, state)
        assert summary["total"] == sum(summary[s] for s in LISTED)


def test_every_scenario_s_workers_have_a_plausible_log(sim, http):
    every = len(builtin_scenarios())
    endpoint = sim.add_endpoint(check_quota=False, workers_max=every)
    jobs = {name: run(http, endpoint, {"scenario": name}) for name in builtin_scenarios()}
    at(sim, 125)  # every worker that will take its job took it (a stopped one's log is read)
    for name, job in jobs.items():
        worker = status(http, endpoint, job).get("workerId")
        workerless = name in ("no_capacity", "timed_out_in_queue")  # no worker, ever
        if worker is None and not workerless:  # not taken yet, or never taken
            worker = next(r["id"] for r in sim.workers(endpoint) if r["job_id"] == job)
        if workerless:
            assert worker is None and not [r for r in sim.workers() if r["job_id"] == job]
            continue
        got = log(http, endpoint, worker, tail=5000)
        # (a throttled worker never ran; a slow image pull has not finished by now)
        quiet = name in ("throttled", "slow_image_pull")
        sources = {"system"} if quiet else {"system", "container"}
        assert got and {e["source"] for e in got} == sources, name
        assert got[0]["line"].startswith(f"worker {worker} created on"), name
        assert all(epoch(e["ts"]) <= sim.clock() for e in got), name  # nothing from the future
        assert [epoch(e["ts"]) for e in got] == sorted(epoch(e["ts"]) for e in got), name
    completed_error = lines(
        http, endpoint, status(http, endpoint, jobs["completed_error"])["workerId"]
    )
    assert "ValueError: reward model returned NaN" in completed_error


# ----------------------------------------------------------------------- the log route


def test_tail_backfills_the_last_lines_and_is_bounded(sim, http):
    endpoint = sim.add_endpoint(scenario="crash_loop")
    run(http, endpoint)
    at(sim, 23 * 3600)  # nearly a day of crash loop (its TTL): 24k lines, read in a blink
    worker = listed(http, endpoint)["workers"][0]["id"]
    started = time.monotonic()
    assert len(log(http, endpoint, worker)) == 100  # the default
    assert len(log(http, endpoint, worker, tail=5000)) == 5000
    assert time.monotonic() - started < 5
    assert log(http, endpoint, worker, tail=0) == []
    one = log(http, endpoint, worker, tail=1)
    assert one == log(http, endpoint, worker, tail=5000)[-1:]
    for bad in ("5001", "-1", "ten", "1.5"):
        answer = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs", params={"tail": bad})
        assert answer.status_code == 400, bad
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["status"] == 400 and "tail" in answer.json()["detail"]
    bad_source = http.get(
        f"/v2/serverless/{endpoint}/workers/{worker}/logs", params={"source": "kernel"}
    )
    assert bad_source.status_code == 400


def test_unknown_endpoints_and_workers_are_404_problems_and_keys_are_checked(sim, http):
    endpoint = sim.add_endpoint(scenario="success")
    job = run(http, endpoint)
    at(sim, 30)
    worker = status(http, endpoint, job)["workerId"]
    for path in (
        "/v2/serverless/nope/workers",
        "/v2/serverless/nope/workers/w-1/logs",
        f"/v2/serverless/{endpoint}/workers/w-unknown/logs",
    ):
        answer = http.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"] == "application/problem+json"
        assert {"title", "status", "detail"} <= set(answer.json())
    other = {"Authorization": f"Bearer {OTHER}"}  # another account's key: not its endpoint
    assert http.get(f"/v2/serverless/{endpoint}/workers", headers=other).status_code == 404
    logs = f"/v2/serverless/{endpoint}/workers/{worker}/logs"
    assert http.get(logs, headers=other).status_code == 404
    assert httpx.get(f"{sim.url}{logs}").status_code == 401


def test_planted_text_appears_in_the_log(sim, http):
    secret = "hf_PlantedSecretToken0123456789"
    sim.register_scenario(
        Scenario(
            "leaky",
            (
                Step(0, status="IN_QUEUE", workers={"initializing": 1}),
                Step(20, status="IN_PROGRESS", workers={"running": 1}),
                Step(30, log=(f"HF_TOKEN={secret}", ("system", "host note: disk 93% full"))),
                Step(40, status="FAILED", error=f"push failed with token {secret}"),
            ),
        )
    )
    endpoint = sim.add_endpoint(scenario="leaky")
    job = run(http, endpoint, {"sim": {"log": ["RUNPOD_API_KEY=rpa_InputPlanted"]}})
    at(sim, 25)
    worker = status(http, endpoint, job)["workerId"]
    assert sim.plant_log(job, "by hand: Bearer sk-by-hand", source="system") == worker
    at(sim, 45)
    got = log(http, endpoint, worker)
    text = [e["line"] for e in got]
    assert "RUNPOD_API_KEY=rpa_InputPlanted" in text  # printed as its container came up
    assert f"HF_TOKEN={secret}" in text and f"push failed with token {secret}" in text
    assert {"source": "system", "line": "host note: disk 93% full"} in [
        {"source": e["source"], "line": e["line"]} for e in got
    ]
    planted = next(e for e in got if e["line"] == "by hand: Bearer sk-by-hand")
    assert (planted["source"], epoch(planted["ts"])) == ("system", T0 + 25)
    with pytest.raises(ValueError):
        sim.plant_log("no-such-worker", "x")


# ----------------------------------------------------------------------- faults on the log route


def _stream_worker(sim: Simulator, http: httpx.Client) -> tuple[str, str]:
    endpoint = sim.add_endpoint(scenario="training")
    job = run(http, endpoint)
    at(sim, 600)
    return endpoint, status(http, endpoint, job)["workerId"]


def test_a_flood_is_one_huge_answer_streamed_in_chunks(sim, http):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("worker_logs", "flood", size_bytes=3 * 1024 * 1024)
    answer = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs")
    assert (
        answer.headers["transfer-encoding"] == "chunked" and "content-length" not in answer.headers
    )
    got = events(answer.text)
    assert 3 * 1024 * 1024 <= len(answer.content) < 3 * 1024 * 1024 + 70_000
    assert got[0]["line"].startswith("worker ") and got[-1]["line"].startswith("flood line")
    assert len(log(http, endpoint, worker)) < 100  # the fault fired once


def test_a_default_flood_is_50_mib_and_a_reader_can_cut_it(sim, http):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("worker_logs", "flood")
    read = 0
    with http.stream("GET", f"/v2/serverless/{endpoint}/workers/{worker}/logs") as answer:
        for chunk in answer.iter_raw():
            read += len(chunk)
            if read > 1024 * 1024:
                break  # a bounded reader stops here; the simulator notices and gives up
    assert read > 1024 * 1024
    assert log(http, endpoint, worker)  # the simulator still answers


def test_a_gzip_flood_inflates_to_its_size(sim, http):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("worker_logs", "flood", size_bytes=8 * 1024 * 1024, gzip=True)
    with http.stream("GET", f"/v2/serverless/{endpoint}/workers/{worker}/logs") as answer:
        assert answer.headers["content-encoding"] == "gzip"
        wire = b"".join(answer.iter_raw())
    assert len(wire) < 512 * 1024  # small on the wire …
    inflated = gzip.decompress(wire)
    assert len(inflated) >= 8 * 1024 * 1024  # … large once decoded
    assert events(inflated.decode())[-1]["line"].startswith("flood line")


def test_gzip_encodes_a_json_answer_or_the_log(sim, http):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("list_workers", "gzip")
    sim.add_fault("worker_logs", "gzip")
    answer = http.get(f"/v2/serverless/{endpoint}/workers")
    assert answer.headers["content-encoding"] == "gzip" and answer.json()["summary"]["total"] == 1
    streamed = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs", params={"tail": 5})
    assert streamed.headers["content-encoding"] == "gzip" and len(events(streamed.text)) == 5


def test_a_trickle_sends_a_line_then_stalls_until_the_reader_gives_up(sim, http):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("worker_logs", "trickle", delay_s=30)
    url = f"/v2/serverless/{endpoint}/workers/{worker}/logs"
    got: list[bytes] = []
    started = time.monotonic()
    with http.stream("GET", url, timeout=httpx.Timeout(10, read=0.5)) as answer:
        assert answer.status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            for chunk in answer.iter_raw():
                got.append(chunk)
    assert time.monotonic() - started < 5
    assert len(events(b"".join(got).decode())) == 1  # one line, then nothing for 30 s


def test_a_trickle_goes_on_with_live_lines_and_ends_when_the_simulator_stops(http, sim):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("worker_logs", "trickle", delay_s=0.01)
    url = f"/v2/serverless/{endpoint}/workers/{worker}/logs"
    text = b""
    with http.stream("GET", url, params={"tail": 2}) as answer:
        for chunk in answer.iter_raw():
            text += chunk
            if text.count(b"\n\n") >= 6:
                break
    parsed = events(text[: text.rindex(b"\n\n") + 2].decode())
    assert [e["line"] for e in parsed[2:5]] == ["live line 1", "live line 2", "live line 3"]
    sim.add_fault("worker_logs", "trickle", delay_s=3600)

    def hold() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the stream ends cut short: expected
            httpx.get(f"{sim.url}{url}", timeout=60, headers={"Authorization": f"Bearer {KEY}"})

    asked = len(sim.requests_for("worker_logs"))
    holder = threading.Thread(target=hold)
    holder.start()
    wait_for(  # the held request is being served
        "the held log request at the simulator",
        lambda: len(sim.requests_for("worker_logs")) > asked,
        timeout=10,
    )
    sim.stop()  # the hour-long wait ends with the simulator: the stream closes
    holder.join(timeout=10)
    assert not holder.is_alive()


def test_stream_faults_are_for_the_log_route_only(sim):
    with pytest.raises(ValueError):
        sim.add_fault("status", "flood")
    with pytest.raises(ValueError):
        sim.add_fault("*", "trickle")


# ----------------------------------------------------------------------- idleTimeout


def test_an_endpoint_saved_through_graphql_keeps_its_idle_timeout(sim, http):
    query = "mutation saveEndpoint($input: EndpointInput!) { saveEndpoint(input: $input) { id idleTimeout } }"  # noqa: E501
    template = {"name": "t", "imageName": "team/trainer:3", "env": []}
    variables = {"input": {"name": "flash-idle", "idleTimeout": 42, "template": template,
                           "gpuIds": "AMPERE_80", "workersMax": 1}}  # fmt: skip
    saved = http.post("/graphql", json={"query": query, "variables": variables}).json()
    endpoint = saved["data"]["saveEndpoint"]["id"]
    assert saved["data"]["saveEndpoint"]["idleTimeout"] == 42
    assert http.get(f"/v2/serverless/{endpoint}").json()["idleTimeout"] == 42
    assert [e["idleTimeout"] for e in sim.endpoints() if e["id"] == endpoint] == [42]
    job = run(http, endpoint, {"scenario": "success"})
    at(sim, 91)
    worker = by_id(http, endpoint)[status(http, endpoint, job)["workerId"]]
    assert (worker["status"], worker["image"]) == ("idle", "team/trainer:3")
    assert worker["gpuTypeId"] == "NVIDIA A100 80GB PCIe"
    at(sim, 90 + 42)
    assert listed(http, endpoint)["workers"] == []


def test_the_command_line_schedules_the_log_faults():
    flood = parse_fault("worker_logs=flood,size_bytes=1048576,gzip=1,times=always")
    assert (flood.kind, flood.size_bytes, flood.gzip, flood.times) == ("flood", 1048576, True, None)
    trickle = parse_fault("worker_logs=trickle,delay_s=120")
    assert (trickle.kind, trickle.delay_s, trickle.gzip) == ("trickle", 120.0, False)
    assert parse_fault("status=gzip").kind == "gzip"
    with pytest.raises(ValueError, match="worker_logs"):
        parse_fault("status=flood")


@pytest.mark.parametrize("kind", ["malformed", "non_object", "missing_keys"])
def test_garbling_faults_spoil_the_log_stream(sim, http, kind):
    endpoint, worker = _stream_worker(sim, http)
    sim.add_fault("worker_logs", kind, **({"keys": ("line",)} if kind == "missing_keys" else {}))
    text = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs", params={"tail": 3}).text
    blocks = text.split("\n\n")
    if kind == "malformed":  # three good events, then half of one
        assert len(events("\n\n".join(blocks[:3]) + "\n\n")) == 3 and not text.endswith("\n\n")
        assert blocks[-1].endswith('"line": "trunc')
    elif kind == "non_object":
        assert blocks[-2] == 'data: ["unexpected", "list"]'
    else:
        datas = [json.loads(b.split("\ndata: ")[1]) for b in blocks[:-1]]
        assert len(datas) == 3 and all(set(d) == {"source", "ts"} for d in datas)
    assert len(log(http, endpoint, worker, tail=3)) == 3  # once: then the stream is whole
