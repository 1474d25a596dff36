"""The RunPod + Hugging Face simulator itself, over real loopback HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashfsm.adapters.observations import heartbeat_fields
from flashfsm.adapters.simulator import (
    QUOTA_MESSAGE,
    Scenario,
    SimClock,
    Simulator,
    Step,
    builtin_scenarios,
    end_record,
    finished,
    heartbeat,
)
from flashfsm.adapters.simulator import graphql as gql
from flashfsm.adapters.simulator.scenarios import METRICS
from flashfsm.events.models import END_STAGE
from tests.test_simulator_cli import python_ok

KEY = "sim-test-key-5678"


@pytest.fixture
def sim():
    with Simulator(speed=0, api_keys=(KEY, "sim-second-account")) as s:
        yield s
        assert s.errors == [], s.errors[0]


def status_at(sim: Simulator, http: httpx.Client, endpoint: str, job: str) -> str | int:
    answer = http.get(f"/v2/{endpoint}/status/{job}")
    return answer.json()["status"] if answer.status_code == 200 else answer.status_code


# ----------------------------------------------------------------------- the clock


def test_the_sim_clock_runs_fast_or_by_hand():
    fast = SimClock(speed=600, start=0)
    time.sleep(0.02)
    assert 10 <= fast.elapsed < 120
    manual = SimClock(speed=0, start=100)
    assert manual.now() == 100 and manual.manual
    manual.sleep(30)
    manual.advance(5)
    assert manual() == 135
    with pytest.raises(ValueError):
        manual.advance(-1)


def test_the_clock_route_shares_a_manual_clock_and_refuses_a_running_one(sim):
    sim.add_fault("*", 503, times=None)  # no fault fires on the control route
    with httpx.Client(base_url=sim.url, timeout=5) as anyone:  # no API key needed
        start = sim.clock()
        assert anyone.get("/_sim/clock").json() == {"now": start}
        moved = anyone.post("/_sim/clock", json={"advance": 12.5})
        assert moved.status_code == 200 and moved.json() == {"now": start + 12.5}
        assert sim.clock() == start + 12.5
        sim.clock.advance(0.25)  # and the simulator's own moves show in the route
        assert anyone.get("/_sim/clock").json() == {"now": start + 12.75}
        for bad in ({"advance": -1}, {"advance": "5"}, {"advance": True}, {}, [3]):
            assert anyone.post("/_sim/clock", json=bad).status_code == 400, bad
        assert anyone.post("/_sim/clock", content=b"{nope").status_code == 400
        assert anyone.put("/_sim/clock", json={"advance": 1}).status_code == 405
        assert sim.clock() == start + 12.75
    assert [r.fault for r in sim.requests_for("sim_clock")] == [None] * 10
    with Simulator(speed=60, api_keys=(KEY,)) as running, httpx.Client(timeout=5) as http:
        assert http.get(f"{running.url}/_sim/clock").status_code == 409
        assert http.post(f"{running.url}/_sim/clock", json={"advance": 5}).status_code == 409


def test_a_fast_clock_moves_jobs_in_real_time():
    with Simulator(speed=400, api_keys=(KEY,)) as sim:
        endpoint = sim.add_endpoint(scenario="success")
        job = sim.submit(endpoint, {})
        deadline = time.monotonic() + 3
        while sim.job(job).status != "COMPLETED" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sim.job(job).status == "COMPLETED"  # 90 simulated seconds in ~0.25 s


# ----------------------------------------------------------------------- scenarios

# (scenario, [(sim seconds after submission, status or HTTP code, workers expected)])
TIMELINES: list[tuple[str, list[tuple[float, Any, dict[str, int]]]]] = [
    (
        "success",
        [
            (0, "IN_QUEUE", {"initializing": 1}),
            (25, "IN_PROGRESS", {"running": 1}),
            (91, "COMPLETED", {"idle": 1}),
            (100, "COMPLETED", {}),
        ],
    ),
    ("no_capacity", [(0, "IN_QUEUE", {}), (86_000, "IN_QUEUE", {}), (86_401, 404, {})]),
    ("throttled", [(0, "IN_QUEUE", {"throttled": 1}), (5000, "IN_QUEUE", {"throttled": 1})]),
    ("crash_loop", [(0, "IN_QUEUE", {"unhealthy": 1}), (5000, "IN_QUEUE", {"unhealthy": 1})]),
    (
        "slow_cold_start",
        [(60, "IN_QUEUE", {"initializing": 1}), (1500, "IN_PROGRESS", {"running": 1})],
    ),
    (
        "worker_death",
        [
            (100, "IN_PROGRESS", {"running": 1}),
            (130, "IN_QUEUE", {}),  # the dead worker is gone; the next one starts at 160 …
            (165, "IN_QUEUE", {"initializing": 1}),  # … 20 s before it takes the job at 180
            (200, "IN_PROGRESS", {"running": 1}),
            (301, "COMPLETED", {"idle": 1}),
        ],
    ),
    ("completed_no_output", [(61, "COMPLETED", {"idle": 1})]),
    ("failed", [(71, "FAILED", {"idle": 1})]),
    ("timed_out", [(121, "TIMED_OUT", {"idle": 1}), (126, "TIMED_OUT", {})]),
    ("ttl_expired", [(590, "IN_PROGRESS", {"running": 1}), (601, 404, {"idle": 1})]),
    ("result_expired", [(61, "COMPLETED", {"idle": 1}), (181, 404, {})]),
    ("training_stall", [(5000, "IN_PROGRESS", {"running": 1})]),
]


@pytest.mark.parametrize(("scenario", "timeline"), TIMELINES, ids=[t[0] for t in TIMELINES])
def test_scenarios_progress_as_scripted_on_the_sim_clock(sim, http, scenario, timeline):
    endpoint = sim.add_endpoint()
    job = http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": scenario}}).json()["id"]
    start = sim.clock()
    for at, expected, workers in timeline:
        sim.clock.advance(start + at - sim.clock())
        assert status_at(sim, http, endpoint, job) == expected, (scenario, at)
        counts = http.get(f"/v2/{endpoint}/health").json()["workers"]
        assert {k: v for k, v in counts.items() if v} == workers, (scenario, at)


def test_every_builtin_scenario_runs_to_its_end(sim, http):
    every = len(builtin_scenarios())  # one worker each: none waits for another's
    endpoint = sim.add_endpoint(hf_repo="team/runs", check_quota=False, workers_max=every)
    jobs = {}
    for name in builtin_scenarios():
        payload = {"scenario": name, "phase": "rl", "run_id": name, "seed": 0}
        jobs[name] = http.post(f"/v2/{endpoint}/run", json={"input": payload}).json()["id"]
    sim.clock.advance(5000)
    finals = {name: sim.job(job).status for name, job in jobs.items()}
    assert finals["training"] == finals["success"] == finals["completed_envelope"] == "COMPLETED"
    assert finals["failed"] == "FAILED" and finals["timed_out"] == "TIMED_OUT"
    assert finals["no_capacity"] == finals["throttled"] == finals["crash_loop"] == "IN_QUEUE"
    assert finals["training_stall"] == "IN_PROGRESS"
    gone = {name for name, job in jobs.items() if sim.job(job).gone}
    finished = {n for n, status in finals.items() if status in ("COMPLETED", "FAILED", "TIMED_OUT")}
    assert gone == finished | {"ttl_expired"}  # finished > 30 min ago (result retention), or TTL
    for name in ("completed_error", "failed_retriable"):
        files = sim.hub.files("team/runs")
        assert f"rl/{name}/seed0/error_rl.txt" in files
        assert f"rl/{name}/seed0/console_rl.txt" in files


def test_completed_answers_carry_outputs_and_errors(sim, http):
    endpoint = sim.add_endpoint(workers_max=4)
    runs = {
        name: http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": name}}).json()["id"]
        for name in ("success", "completed_error", "completed_no_output", "failed")
    }
    sim.clock.advance(120)
    answers = {n: http.get(f"/v2/{endpoint}/status/{j}").json() for n, j in runs.items()}
    assert answers["success"]["output"] == {"reward": 0.82, "loss": 0.117, "steps": 300}
    assert answers["completed_error"]["output"]["error"].startswith("ValueError")
    assert "output" not in answers["completed_no_output"]
    error = json.loads(answers["failed"]["error"])
    assert error["error_message"] == "reward model returned NaN"
    assert answers["success"]["delayTime"] == 20_000
    assert answers["success"]["executionTime"] == 70_000


def test_scenario_comes_from_the_input_then_the_endpoint_then_the_default(sim, http):
    plain = sim.add_endpoint()
    throttled = sim.add_endpoint(scenario="throttled")
    a = http.post(f"/v2/{plain}/run", json={"input": {}}).json()["id"]
    b = http.post(f"/v2/{throttled}/run", json={"input": {}}).json()["id"]
    c = http.post(f"/v2/{throttled}/run", json={"input": {"sim": {"scenario": "failed"}}})
    assert (sim.job(a).scenario.name, sim.job(b).scenario.name) == ("success", "throttled")
    assert sim.job(c.json()["id"]).scenario.name == "failed"
    bad = http.post(f"/v2/{plain}/run", json={"input": {"scenario": "nope"}})
    assert bad.status_code == 400 and "nope" in bad.json()["error"]


def test_a_registered_custom_scenario_is_selectable(sim, http):
    sim.register_scenario(
        Scenario("blip", (Step(0, status="IN_QUEUE"), Step(5, status="COMPLETED", output={"a": 1})))
    )
    endpoint = sim.add_endpoint()
    job = http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": "blip"}}).json()["id"]
    sim.clock.advance(6)
    assert http.get(f"/v2/{endpoint}/status/{job}").json()["output"] == {"a": 1}
    with pytest.raises(ValueError):
        Scenario("backwards", (Step(5), Step(1)))


def test_job_policy_sets_ttl_and_execution_timeout(sim, http):
    endpoint = sim.add_endpoint(scenario="training", workers_max=2)
    short = {"input": {}, "policy": {"ttl": 300_000}}
    capped = {"input": {}, "policy": {"executionTimeout": 200_000}}
    a = http.post(f"/v2/{endpoint}/run", json=short).json()["id"]
    b = http.post(f"/v2/{endpoint}/run", json=capped).json()["id"]
    sim.clock.advance(250)
    assert status_at(sim, http, endpoint, a) == "IN_PROGRESS"
    assert status_at(sim, http, endpoint, b) == "TIMED_OUT"  # 20 s queued + 200 s running
    sim.clock.advance(60)
    assert status_at(sim, http, endpoint, a) == 404
    too_long = {"input": {}, "policy": {"ttl": 8 * 24 * 3600 * 1000}}
    assert http.post(f"/v2/{endpoint}/run", json=too_long).status_code == 400


def test_cancel_retry_purge_runsync_and_worker_requeue_counts(sim, http):
    endpoint = sim.add_endpoint(scenario="no_capacity", workers_max=3)
    queued = [http.post(f"/v2/{endpoint}/run", json={"input": {}}).json()["id"] for _ in range(3)]
    cancel = http.post(f"/v2/{endpoint}/cancel/{queued[0]}").json()
    assert cancel == {"id": queued[0], "status": "CANCELLED"}
    assert http.post(f"/v2/{endpoint}/purge-queue").json() == {"removed": 2, "status": "completed"}
    assert status_at(sim, http, endpoint, queued[1]) == 404

    failed = http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": "failed"}}).json()["id"]
    assert http.post(f"/v2/{endpoint}/retry/{failed}").status_code == 400  # not failed yet
    sim.clock.advance(80)
    assert http.post(f"/v2/{endpoint}/retry/{failed}").json()["status"] == "IN_QUEUE"
    assert http.get(f"/v2/{endpoint}/health").json()["jobs"]["retried"] == 1

    death = http.post(f"/v2/{endpoint}/run", json={"input": {"scenario": "worker_death"}})
    sim.clock.advance(150)
    assert sim.job(death.json()["id"]).requeues == 1
    assert http.get(f"/v2/{endpoint}/health").json()["jobs"]["retried"] == 2

    quick = sim.add_endpoint(scenario="completed_no_output")
    answer = http.post(f"/v2/{quick}/runsync", json={"input": {}}).json()
    assert answer["status"] == "IN_QUEUE"  # a manual clock does not move while runsync waits


def test_health_counts_standing_workers_and_jobs(sim, http):
    endpoint = sim.add_endpoint(scenario="no_capacity")
    sim.configure_endpoint(endpoint, idle=2, ready=1)
    http.post(f"/v2/{endpoint}/run", json={"input": {}})
    health = http.get(f"/v2/{endpoint}/health").json()
    assert health["workers"]["idle"] == 2 and health["workers"]["ready"] == 1
    assert health["jobs"] == {
        "completed": 0,
        "failed": 0,
        "inProgress": 0,
        "inQueue": 1,
        "retried": 0,
    }
    workers = http.get(f"/v2/serverless/{endpoint}/workers").json()["workers"]
    assert sorted(w["status"] for w in workers) == ["idle", "idle", "idle"]  # ready lists idle


def test_a_thousand_concurrent_jobs_stay_cheap(sim):
    endpoint = sim.add_endpoint(scenario="training", check_quota=False, workers_max=1000)
    jobs = [sim.submit(endpoint, {"i": i}) for i in range(1000)]
    sim.clock.advance(600)

    limits = httpx.Limits(max_connections=64)
    with httpx.Client(
        headers={"Authorization": f"Bearer {KEY}"}, timeout=10, limits=limits
    ) as client:

        def poll(job: str) -> str:
            return client.get(f"{sim.url}/v2/{endpoint}/status/{job}").json()["status"]

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=64) as pool:
            statuses = list(pool.map(poll, jobs))
        elapsed = time.monotonic() - started
        health = client.get(f"{sim.url}/v2/{endpoint}/health").json()
    assert set(statuses) == {"IN_PROGRESS"} and len(statuses) == 1000
    assert elapsed < 10
    assert health["jobs"]["inProgress"] == 1000 and health["workers"]["running"] == 1000


# ----------------------------------------------------------------------- the Hub

HF_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from huggingface_hub import hf_hub_download
    out = {}
    for path in sys.argv[2:]:
        try:
            local = hf_hub_download(sys.argv[1], path, repo_type="dataset", force_download=True)
            out[path] = open(local).read()
        except Exception as exc:
            names = []
            while exc is not None:
                names.append(type(exc).__name__)
                exc = exc.__cause__
            out[path] = "<-".join(names)
    print(json.dumps(out))
    """
)


def _hf_download(sim: Simulator, tmp_path: Path, repo: str, *paths: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(sim.env())
    env.update(HOME=str(tmp_path), HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")
    done = python_ok(["-c", HF_SCRIPT, repo, *paths], env, tmp_path, 60)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hf_hub_download_reads_the_heartbeat_the_simulator_wrote(sim, http, tmp_path):
    endpoint = sim.add_endpoint(hf_repo="team/runs")
    payload = {"scenario": "success", "phase": "rl", "job_spec_json": '{"run_id": "r7"}', "seed": 1}
    http.post(f"/v2/{endpoint}/run", json={"input": payload})
    submitted = sim.clock()
    sim.clock.advance(25)
    sim.hub.put("team/runs", "notes/readme.txt", "hello")
    path = "rl/r7/seed1/heartbeat.json"
    first = _hf_download(sim, tmp_path, "team/runs", path, "rl/r7/seed1/absent.json")
    beat = json.loads(first[path])
    assert beat["stage"] == "boot" and beat["retriable"] is False
    assert beat["ts"] == pytest.approx(submitted + 20)
    assert first["rl/r7/seed1/absent.json"].startswith("RemoteEntryNotFoundError")

    sim.clock.advance(40)  # a newer heartbeat: force_download must fetch it, not the cache
    second = _hf_download(sim, tmp_path, "team/runs", path, "notes/readme.txt")
    assert json.loads(second[path])["stage"] == "train"
    assert second["notes/readme.txt"] == "hello"
    heads = [r for r in sim.requests_for("hub_resolve") if r.method == "HEAD"]
    assert heads and all(r.path.startswith("/datasets/team/runs/resolve/main/") for r in heads)
    missing_repo = _hf_download(sim, tmp_path, "team/none", path)
    # With force_download, huggingface_hub wraps the HEAD error in a ValueError.
    assert "RepositoryNotFoundError" in missing_repo[path]


def test_two_simulators_never_share_a_commit_so_a_shared_hf_cache_stays_right(tmp_path):
    # huggingface_hub keeps a download under its commit and, even with force_download,
    # serves the file it holds for that commit: equal commit ids from two simulators with
    # different files would hand the second one's reader the first one's heartbeat.
    from huggingface_hub import hf_hub_download

    read = {}
    for text in ('{"retriable": false}', '{"retriable": true}'):
        with Simulator(speed=0) as each:
            commit = each.hub.put("team/runs", "rl/r1/seed0/heartbeat.json", text)
            local = hf_hub_download(
                "team/runs",
                "rl/r1/seed0/heartbeat.json",
                repo_type="dataset",
                force_download=True,
                cache_dir=tmp_path,
                endpoint=each.url,
            )
            read[commit] = Path(local).read_text()
    assert list(read.values()) == ['{"retriable": false}', '{"retriable": true}']


def test_hub_answers_carry_the_headers_huggingface_hub_needs(sim):
    commit = sim.hub.put("a/b", "x/y.json", '{"k": 1}')
    head = httpx.head(f"{sim.url}/datasets/a/b/resolve/main/x/y.json")
    assert head.status_code == 200 and head.headers["X-Repo-Commit"] == commit
    assert head.headers["ETag"].strip('"') and head.headers["Content-Length"] == "8"
    assert httpx.get(f"{sim.url}/datasets/a/b/resolve/{commit}/x/y.json").json() == {"k": 1}
    gone = httpx.head(f"{sim.url}/datasets/a/b/resolve/main/x/z.json")
    assert gone.status_code == 404 and gone.headers["X-Error-Code"] == "EntryNotFound"
    bad_rev = httpx.head(f"{sim.url}/datasets/a/b/resolve/v9/x/y.json")
    assert bad_rev.headers["X-Error-Code"] == "RevisionNotFound"


# ----------------------------------------------------------------------- management APIs


def save_endpoint(http: httpx.Client, name: str, workers_max: int = 1, **extra: Any):
    query = "mutation saveEndpoint($input: EndpointInput!) { saveEndpoint(input: $input) { id name workersMax templateId } }"  # noqa: E501
    template = {"name": f"{name}-tpl", "imageName": "img:1", "env": []}
    variables = {"input": {"name": name, "workersMax": workers_max, "template": template, **extra}}
    return http.post("/graphql", json={"query": query, "variables": variables}).json()


def test_the_account_worker_quota_refuses_the_next_endpoint(sim, http):
    for i in range(5):
        assert "errors" not in save_endpoint(http, f"flash-{i}")
    refused = save_endpoint(http, "flash-5")
    message = refused["errors"][0]["message"]
    assert "max workers across all endpoints" in message.lower()
    assert message == QUOTA_MESSAGE.format(quota=5, total=6)
    assert refused["data"] is None
    first = http.get("/v2/serverless").json()["endpoints"][0]["id"]
    assert http.delete(f"/v2/serverless/{first}").status_code == 204
    assert save_endpoint(http, "flash-5")["data"]["saveEndpoint"]["name"] == "flash-5"
    other = httpx.post(
        f"{sim.url}/graphql",
        headers={"Authorization": "Bearer sim-second-account"},
        json={"query": "query { myself { endpoints { id } } }"},
    ).json()
    assert other == {"data": {"myself": {"endpoints": []}}}  # quota and endpoints per account
    sim.accounts[0].worker_quota = 7
    assert "errors" not in save_endpoint(http, "flash-big", workers_max=2)


def test_graphql_queries_runpod_sdks_send(sim, http):
    saved = save_endpoint(http, "flash-q")["data"]["saveEndpoint"]
    assert set(saved) == {"id", "name", "workersMax", "templateId"}
    exists = "query getEndpoint($id: String!) { myself { endpoint(id: $id) { id } } }"
    found = http.post("/graphql", json={"query": exists, "variables": {"id": saved["id"]}})
    assert found.json() == {"data": {"myself": {"endpoint": {"id": saved["id"]}}}}
    template = http.post(
        "/graphql",
        json={
            "query": "query T($id: String!) { podTemplate(id: $id) { id imageName env { key value } } }",  # noqa: E501
            "variables": {"id": saved["templateId"]},
        },
    ).json()["data"]["podTemplate"]
    assert template == {"id": saved["templateId"], "imageName": "img:1", "env": []}
    deleted = http.post(
        "/graphql", json={"query": f'mutation {{ deleteEndpoint(id: "{saved["id"]}") }}'}
    )
    assert deleted.json() == {"data": {"deleteEndpoint": None}}
    again = http.post("/graphql", json={"query": exists, "variables": {"id": saved["id"]}})
    assert again.json() == {"data": {"myself": {"endpoint": None}}}
    unknown = http.post("/graphql", json={"query": "query { nope { id } }"}).json()
    assert "Cannot query field" in unknown["errors"][0]["message"]
    stock = http.post(
        "/graphql",
        json={
            "query": "query G($i: GpuTypeFilter) { gpuTypes(input: $i) { lowestPrice(input: {gpuCount: 1}) { stockStatus } } }",  # noqa: E501
            "variables": {"i": {"ids": ["AMPERE_80"]}},
        },
    ).json()
    assert stock == {"data": {"gpuTypes": [{"lowestPrice": {"stockStatus": "High"}}]}}
    user = http.post("/graphql", json={"query": "query myself { myself { id pubKey } }"}).json()
    assert user["data"]["myself"]["id"] == "user_account0"


def test_graphql_parser_reads_aliases_literals_and_block_strings():
    op = gql.parse(
        'mutation M($v: X) { a: saveEndpoint(input: {name: "n\\"q", n: -1.5e2, l: [1, true, null],'
        ' e: QB, d: """block""", v: $v}) { id } }'
    )
    field = op.selections[0]
    assert (op.kind, op.name, field.alias, field.name) == ("mutation", "M", "a", "saveEndpoint")
    args = gql.substitute(field.args, {"v": 3})
    assert args == {
        "input": {"name": 'n"q', "n": -150.0, "l": [1, True, None], "e": "QB", "d": "block", "v": 3}
    }
    for bad in ("", "query { a ", "{ ...frag }", "query { a } query { b }"):
        with pytest.raises(gql.GraphQLError):
            gql.parse(bad)


def test_network_volumes_are_idempotent_and_refused_in_us_mo_1(sim, http):
    made = http.post(
        "/v1/networkvolumes", json={"name": "w", "size": 50, "dataCenterId": "EU-RO-1"}
    )
    again = http.post(
        "/v1/networkvolumes", json={"name": "w", "size": 50, "dataCenterId": "EU-RO-1"}
    )
    assert made.status_code == 200 and again.json()["id"] == made.json()["id"]
    refused = http.post(
        "/v1/networkvolumes", json={"name": "w", "size": 50, "dataCenterId": "US-MO-1"}
    )
    assert refused.status_code == 500 and "US-MO-1" in refused.json()["error"]
    assert [v["dataCenterId"] for v in http.get("/v1/networkvolumes").json()] == ["EU-RO-1"]
    bad = http.post("/v1/networkvolumes", json={"name": "w", "size": 5, "dataCenterId": "EU-RO-1"})
    assert bad.status_code == 400


def test_rest_v2_management_speaks_rfc_9457(sim, http):
    endpoint = sim.add_endpoint("flash-rest")
    assert http.get(f"/v2/serverless/{endpoint}").json()["name"] == "flash-rest"
    patched = http.patch(f"/v2/serverless/{endpoint}", json={"workersMax": 2}).json()
    assert patched["workersMax"] == 2
    missing = http.get("/v2/serverless/nope")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json() == {
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "detail": "endpoint nope not found",
    }
    assert http.delete(f"/v2/serverless/{endpoint}").status_code == 204
    assert http.delete(f"/v2/serverless/{endpoint}").status_code == 404


# ----------------------------------------------------------------------- auth, recording, faults


def test_requests_are_recorded_without_credentials(sim, http):
    endpoint = sim.add_endpoint()
    http.post(f"/v2/{endpoint}/run", json={"input": {"a": 1}}, headers={"X-Trace": "t1"})
    anonymous = httpx.get(f"{sim.url}/v2/{endpoint}/health")
    assert anonymous.status_code == 401
    run, health = sim.requests
    assert (run.method, run.path, run.route, run.status) == (
        "POST",
        f"/v2/{endpoint}/run",
        "run",
        200,
    )
    assert run.json == {"input": {"a": 1}} and run.headers["x-trace"] == "t1"
    assert "authorization" not in run.headers and run.account == "account0"
    assert (health.route, health.authenticated, health.status) == ("health", False, 401)
    assert KEY not in repr(sim.requests)
    sim.clear_requests()
    assert sim.requests == []


def test_faults_fire_on_schedule_and_by_graphql_operation(sim, http):
    endpoint = sim.add_endpoint()
    fault = sim.add_fault("health", 503, times=2, after=1, retry_after=7)
    codes = [http.get(f"/v2/{endpoint}/health").status_code for _ in range(4)]
    assert codes == [200, 503, 503, 200] and fault.fired == 2
    assert [r.fault for r in sim.requests_for("health")] == [None, "status", "status", None]
    sim.add_fault("health", 429, retry_after=7)
    assert http.get(f"/v2/{endpoint}/health").headers["Retry-After"] == "7"

    sim.add_fault("graphql:saveEndpoint", 500)
    assert http.post("/graphql", json={"query": "{ myself { id } }"}).status_code == 200
    assert save_endpoint(http, "flash-f")["errors"][0]["message"].startswith("simulated fault")
    assert len(sim.requests_for("graphql:saveEndpoint")) == 1

    sim.add_fault("*", "missing_keys", keys=["workers"])
    assert set(http.get(f"/v2/{endpoint}/health").json()) == {"jobs"}
    sim.add_fault("health", "non_object")
    assert http.get(f"/v2/{endpoint}/health").json() == ["unexpected", "list"]
    sim.add_fault("health", "malformed")
    with pytest.raises(json.JSONDecodeError):
        http.get(f"/v2/{endpoint}/health").json()
    sim.add_fault("health", "reset")
    with pytest.raises(httpx.TransportError):
        http.get(f"/v2/{endpoint}/health")
    sim.add_fault("health", "slow", delay_s=0.3)
    with pytest.raises(httpx.ReadTimeout):
        http.get(f"/v2/{endpoint}/health", timeout=0.1)
    with pytest.raises(ValueError):
        sim.add_fault("health", "gremlins")


def test_env_points_every_sdk_host_at_the_simulator(sim):
    env = sim.env()
    assert env["RUNPOD_ENDPOINT_BASE_URL"] == f"{sim.url}/v2"
    assert env["RUNPOD_API_BASE_URL"] == env["HF_ENDPOINT"] == sim.url
    assert env["RUNPOD_REST_API_URL"] == f"{sim.url}/v1"
    assert env["RUNPOD_API_KEY"] == f"{KEY},sim-second-account"
    assert {"RUNPOD_HAPI_URL", "RUNPOD_CONSOLE_URL"} <= set(env)


def test_the_command_line_serves_until_interrupted():
    proc = subprocess.Popen(
        [sys.executable, "-m", "flashfsm.adapters.simulator", "--port", "0", "--speed", "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("export RUNPOD_API_KEY=")
        lines = [proc.stdout.readline() for _ in range(7)]  # type: ignore[union-attr]
        url = next(x for x in lines if x.startswith("export HF_ENDPOINT=")).split("=", 1)[1]
        assert httpx.get(f"{url.strip()}/v2/x/health").status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ----------------------------------------------------------------------- runpod-flash

FLASH_SCRIPT = textwrap.dedent(
    """
    import asyncio, json
    from runpod_flash import DataCenter, Endpoint, GpuGroup, NetworkVolume
    from runpod_flash.core.api.runpod import RunpodGraphQLClient
    from runpod_flash.core.resources.resource_manager import ResourceManager

    async def deploy(name, dcs):
        volumes = [NetworkVolume(name=f"cache-{dc}", size=20, datacenter=DataCenter(dc))
                   for dc in dcs]
        ep = Endpoint(name=name, gpu=GpuGroup.AMPERE_80, workers=(0, 1), image="team/worker:1",
                      volume=volumes or None,
                      datacenter=[DataCenter(dc) for dc in dcs] or None)
        try:
            return (await ResourceManager().get_or_deploy_resource(
                ep._build_resource_config())).id
        except Exception as exc:
            return "error: " + str(exc)

    async def main():
        out = {"a": await deploy("flash-a", ["US-CA-2", "EU-RO-1"]),
               "b": await deploy("flash-b", ["US-CA-2"]),
               "quota": await deploy("flash-c", []),
               "mo1": await deploy("flash-d", ["US-MO-1"])}
        async with RunpodGraphQLClient() as client:
            out["delete"] = await client.delete_endpoint(out["a"])
            out["a_exists"] = await client.endpoint_exists(out["a"])
            out["b_exists"] = await client.endpoint_exists(out["b"])
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def test_runpod_flash_deploys_and_deletes_through_the_simulator(tmp_path):
    with Simulator(speed=0, api_keys=(KEY,), worker_quota=2) as sim:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD", "FLASH"))}
        env.update(sim.env())
        env.update(
            HOME=str(tmp_path),
            RUNPOD_FLASH_SILENCE_DEPRECATION="1",
            FLASH_IS_LIVE_PROVISIONING="true",
        )
        done = python_ok(["-c", FLASH_SCRIPT], env, tmp_path, 90)
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert "max workers across all endpoints" in out["quota"].lower()
        assert "500" in out["mo1"] and "US-MO-1" in out["mo1"]
        assert out["delete"] == {"success": True}
        assert (out["a_exists"], out["b_exists"]) == (False, True)
        assert [e["name"] for e in sim.endpoints()] == ["live-flash-b"]
        assert sorted(v["dataCenterId"] for v in sim.volumes()) == ["EU-RO-1", "US-CA-2"]
        saves = sim.requests_for("graphql:saveEndpoint")
        assert len(saves) == 3 and saves[0].json["variables"]["input"]["workersMax"] == 1
        assert saves[0].json["variables"]["input"]["locations"] == "US-CA-2,EU-RO-1"
        assert len(sim.requests_for("graphql:deleteEndpoint")) == 1
        assert all(r.authenticated for r in sim.requests)
        creates = sim.requests_for("create_volume")
        assert [r.json["dataCenterId"] for r in creates] == ["US-CA-2", "EU-RO-1", "US-MO-1"]


def test_heartbeat_helper_shapes():
    assert heartbeat("train", 5, retriable=True) == {"stage": "train", "step": 5, "retriable": True}


def test_the_end_record_helpers_shape_a_done_heartbeat_on_the_completed_step():
    record = end_record(300, {"reward": 0.5})
    assert record == {"stage": END_STAGE, "step": 300, "metrics": {"reward": 0.5}}
    step = finished(1920, 300, {"reward": 0.5})
    assert (step.at, step.status, step.output) == (1920, "COMPLETED", {"reward": 0.5})
    assert step.heartbeat == record
    assert finished(90, 20).output == METRICS == finished(90, 20).heartbeat["metrics"]


def _hub_json(sim: Simulator, repo: str, path: str) -> dict[str, Any]:
    answer = httpx.get(f"{sim.url}/datasets/{repo}/resolve/main/{path}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_training_scenario_s_last_heartbeat_is_its_end_record_at_completed(sim, http):
    endpoint = sim.add_endpoint(hf_repo="team/runs", scenario="training")
    payload = {"phase": "train", "run_id": "r1", "seed": 0}
    job = http.post(f"/v2/{endpoint}/run", json={"input": payload}).json()["id"]
    submitted, path = sim.clock(), "train/r1/seed0/heartbeat.json"

    sim.clock.advance(1919)  # the last training heartbeat, a minute before the end
    assert status_at(sim, http, endpoint, job) == "IN_PROGRESS"
    assert _hub_json(sim, "team/runs", path) == {
        "stage": "train",
        "step": 290,
        "retriable": False,
        "ts": submitted + 1860,
    }

    sim.clock.advance(1)  # 1920 s: the worker writes its end record as the job COMPLETES
    answer = http.get(f"/v2/{endpoint}/status/{job}").json()
    assert answer["status"] == "COMPLETED" and answer["output"] == METRICS
    end = _hub_json(sim, "team/runs", path)
    assert end == {"stage": "done", "step": 300, "metrics": METRICS, "ts": submitted + 1920}
    assert answer["delayTime"] + answer["executionTime"] == (end["ts"] - submitted) * 1000
    read = heartbeat_fields(end)  # what a watcher records of it
    assert (read["stage"], read["step"], read["metrics"]) == (END_STAGE, 300, METRICS)

    sim.clock.advance(3600)  # nothing is written after it: it stays the worker's last word
    assert _hub_json(sim, "team/runs", path) == end
    worker = answer["workerId"]
    log = http.get(f"/v2/serverless/{endpoint}/workers/{worker}/logs", params={"tail": 5000})
    assert "training done at step 300; metrics written" in log.text


def _trains(scenario: Scenario) -> bool:
    return any((s.heartbeat or {}).get("stage") == "train" for s in scenario.steps)


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_a_scenario_that_trains_to_completed_ends_with_the_end_record(name):
    """Invariant: a built-in scenario that trains and then COMPLETES with its metrics writes
    the end record on its COMPLETED step, as its last heartbeat; no other writes one."""
    scenario = builtin_scenarios()[name]
    beats = [s for s in scenario.steps if s.heartbeat is not None]
    done = [s for s in beats if s.heartbeat["stage"] == END_STAGE]
    completed = [s for s in scenario.steps if s.status == "COMPLETED"]
    succeeds = completed and isinstance(completed[-1].output, dict)
    succeeds = succeeds and "error" not in completed[-1].output
    if _trains(scenario) and succeeds:
        assert done == [beats[-1]] == [completed[-1]], name
        assert done[0].heartbeat["metrics"] == completed[-1].output
        trained = [s.heartbeat["step"] for s in beats if s.heartbeat["stage"] == "train"]
        assert done[0].heartbeat["step"] > max(trained)  # it trained on after its last beat
    else:
        assert done == [], name


def test_the_python_api_raises_value_errors(sim):
    with pytest.raises(ValueError, match="unknown simulator scenario"):
        sim.add_endpoint(scenario="nope")
    with pytest.raises(ValueError, match="not found"):
        sim.submit("no-such-endpoint", {})
    with pytest.raises(ValueError, match="unknown scenario"):
        Simulator(default_scenario="nope")
    for _ in range(5):
        sim.add_endpoint()
    with pytest.raises(ValueError, match="Max workers across all endpoints"):
        sim.add_endpoint()
