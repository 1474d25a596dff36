"""`submit_run` end to end: real runpod-flash, httpx and huggingface_hub against the simulator."""

from __future__ import annotations

import base64
import functools
from typing import Any

import cloudpickle
import pytest

import flashfsm
from flashfsm import GracePolicy, MemoryStore, RunpodApiError, RunSpec, replay, verify
from flashfsm.adapters import flash_deploy
from flashfsm.adapters.flash_wire import build_function_input, function_source
from flashfsm.adapters.runpod import job_policy, policy_for_budget
from flashfsm.adapters.simulator import Simulator, builtin_scenarios
from flashfsm.events.models import Candidate, HubLocation
from flashfsm.fsm.run import replay_run
from flashfsm.naming import endpoint_name
from flashfsm.submit import (
    WorkerDependencyError,
    build_payload,
    resolve_worker_dependencies,
    submit_run,
)
from tests.test_deploy import sim_factory

BUDGET_S = 3600.0
HF_REPO = "org/runs"

#: The verdict each scenario reaches through submit_run: (state, failure, rule). submit_run
#: always sends a TTL and an execution timeout from the budget (1 h + 10 min), so the
#: `ttl_expired` job, whose own 10-minute TTL would apply only without one, runs into the
#: execution timeout instead: TIMED_OUT.
EXPECTED: dict[str, tuple[str, str | None, str]] = {
    "success": ("SUCCEEDED", None, "completed"),
    "training": ("SUCCEEDED", None, "completed"),
    "completed_envelope": ("SUCCEEDED", None, "completed"),
    "no_capacity": ("NO_CAPACITY", "no_capacity", "queue_grace"),
    "throttled": ("NO_CAPACITY", "no_capacity", "queue_grace"),
    "crash_loop": ("STALLED", "stalled", "unhealthy_worker"),
    "slow_cold_start": ("SUCCEEDED", None, "completed"),
    "training_stall": ("STALLED", "stalled", "stall"),
    "worker_death": ("SUCCEEDED", None, "completed"),
    "completed_error": ("FAILED", "job_failed", "completed_with_error"),
    "completed_error_retriable": ("PREEMPTED", "job_preempted", "completed_with_error"),
    "completed_no_output": ("FAILED", "job_failed", "completed_with_error"),
    "failed": ("FAILED", "job_failed", "worker_failed"),
    "failed_retriable": ("PREEMPTED", "job_preempted", "worker_failed"),
    "timed_out": ("PREEMPTED", "job_preempted", "platform_termination"),
    "ttl_expired": ("PREEMPTED", "job_preempted", "platform_termination"),
    "result_expired": ("SUCCEEDED", None, "completed"),
    # the queue's cases, told apart by the worker records (D10)
    "slow_image_pull": ("SUCCEEDED", None, "completed"),
    "crash_loop_queue": ("STALLED", "stalled", "crash_loop"),
    "timed_out_in_queue": ("NO_CAPACITY", "no_capacity", "expired_in_queue"),
}


@pytest.fixture
def make_sim(monkeypatch):
    yield from sim_factory(monkeypatch)


def spec(**kw: Any) -> RunSpec:
    kw.setdefault("run_id", "run-42")
    kw.setdefault("gpu_class", "H100")
    kw.setdefault("hf_repo", HF_REPO)
    kw.setdefault("worker_image", "team/trainer:3")
    kw.setdefault("max_wall_seconds", BUDGET_S)
    return RunSpec(**kw)


def scripted(sim: Simulator, scenario: str):
    """A deployer that deploys for real, then gives the endpoint a simulator scenario."""

    def deploy(request, **kw):
        deployed = flash_deploy.deploy_endpoint(request, **kw)
        sim.configure_endpoint(deployed.endpoint_id, scenario=scenario)
        return deployed

    return deploy


def run(sim: Simulator, store: MemoryStore, tmp_path, scenario: str = "success", **kw: Any):
    kw.setdefault("deployer", scripted(sim, scenario))
    return submit_run(
        kw.pop("spec", None) or spec(),
        kw.pop("seed", 0),
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        hub_options={"cache_dir": tmp_path / "hf"},
        **kw,
    )


def kinds(store: MemoryStore, stream: str) -> list[str]:
    return [e.kind for e in store.read(stream)]


def test_expectations_cover_every_builtin_scenario():
    assert set(EXPECTED) == set(builtin_scenarios())


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_submit_run_deploys_submits_and_watches_each_scenario_to_its_verdict(
    make_sim, tmp_path, scenario
):
    sim = make_sim()
    store, handles, lines = MemoryStore(), [], []

    result = run(sim, store, tmp_path, scenario, on_handle=handles.append, log=lines.append)

    state, failure, rule = EXPECTED[scenario]
    assert (result.state, result.failure, result.rule) == (state, failure, rule), result.detail
    assert result.ok is (state == "SUCCEEDED")
    stream = "job-run-42-s0-a0"
    events = store.read(stream)
    submitted, watch, concluded = events[0], events[1], events[-1]
    assert (submitted.kind, submitted.seq, watch.kind, concluded.kind) == (
        "JobSubmitted",
        0,
        "WatchStarted",
        "Concluded",
    )
    assert submitted.policy == GracePolicy.for_attempt(False) and not watch.reattach
    assert (submitted.gpu_class, submitted.attempt, submitted.on_last_gpu) == ("H100", 0, False)
    replayed = replay(events)
    assert (replayed.verdict.state, replayed.verdict.rule) == (state, rule)
    assert verify(events).ok
    # The run stream is a run log of exactly this attempt (readable by every CLI command);
    # the job and its endpoint are handed over to the caller, who walks on.
    run_log = store.read("run-run-42-s0-a0")
    assert kinds(store, "run-run-42-s0-a0") == [
        "RunStarted",
        "AttemptStarted",
        "DeployIntended",
        "DeployAttempted",
        "EndpointDeployed",
        "SubmitIntended",
        "JobQueued",
        "AttemptEnded",
        "RunConcluded",
    ]
    assert run_log[0].single_attempt == 0 and not run_log[0].on_last_gpu
    ended = run_log[-2]
    assert (ended.ok, ended.failure, ended.rule) == (result.ok, result.failure, result.rule)
    assert replay_run(run_log).done and [e["id"] for e in sim.endpoints()]
    queued = run_log[6]
    assert (queued.job_stream, queued.job_id, queued.endpoint_id) == (
        stream,
        submitted.job_id,
        submitted.endpoint_id,
    )
    assert handles == [
        {
            "provider": "runpod",
            "endpoint_id": submitted.endpoint_id,
            "endpoint_name": "flash-run-42-h100-s0",
            "job_id": submitted.job_id,
            "on_last_gpu": False,
            "submitted_at": submitted.submitted_at,
            "gpu_class": "H100",
            "attempt": 0,
            "trusted_output": True,  # submit_run deployed the endpoint
            # where the worker writes its heartbeat: recorded, so a verdict can name it
            "hub": {"hf_repo": HF_REPO, "phase": "train", "run_id": "run-42", "seed": 0},
        }
    ]
    assert submitted.hub == HubLocation.model_validate(handles[0]["hub"])
    assert any(submitted.job_id in line for line in lines)
    body = sim.requests_for("run")[0].json
    assert body["policy"] == job_policy(**policy_for_budget(BUDGET_S))
    assert body["input"]["env"]["ATTEMPT"] == "0"


def test_a_failed_submit_deletes_its_endpoint(make_sim, tmp_path):
    sim = make_sim()
    sim.add_fault("run", 500)
    store, handles = MemoryStore(), []

    with pytest.raises(RunpodApiError) as caught:
        run(sim, store, tmp_path, on_handle=handles.append)

    assert caught.value.status_code == 500
    assert sim.endpoints() == [] and handles == []
    assert kinds(store, "run-run-42-s0-a0") == [
        "RunStarted",
        "AttemptStarted",
        "DeployIntended",
        "DeployAttempted",
        "EndpointDeployed",
        "SubmitIntended",
        "SubmitFailed",
        "AttemptEnded",
        "EndpointDeleted",
        "RunConcluded",
    ]
    deleted = store.read("run-run-42-s0-a0")[-2]
    deployed = store.read("run-run-42-s0-a0")[4]
    assert deleted.ok and deleted.endpoint_id == deployed.endpoint_id
    assert store.read("job-run-42-s0-a0") == []
    assert len(sim.requests_for("run")) == 1  # a submit is never retried blindly


def test_a_lost_submit_answer_also_deletes_the_endpoint(make_sim, tmp_path):
    sim = make_sim()
    sim.add_fault("run", "reset")
    store = MemoryStore()
    with pytest.raises(RunpodApiError):
        run(sim, store, tmp_path)
    assert sim.endpoints() == []
    assert kinds(store, "run-run-42-s0-a0")[-4:] == [
        "SubmitFailed",
        "AttemptEnded",
        "EndpointDeleted",
        "RunConcluded",
    ]


def test_a_later_attempt_gets_a_fresh_endpoint_and_knows_its_number(make_sim, tmp_path):
    sim = make_sim()
    store = MemoryStore()
    candidate = Candidate(gpu_class="A100-80GB", price_per_hour=1.9)

    result = run(sim, store, tmp_path, attempt=2, on_last_gpu=True, candidate=candidate)

    assert result.ok
    assert [e["name"] for e in sim.endpoints()] == ["live-flash-run-42-a100-80gb-s0-r2"]
    first = store.read("job-run-42-s0-a2")[0]
    assert first.policy == GracePolicy.for_attempt(True) and first.on_last_gpu
    assert first.gpu_class == "A100-80GB" and first.attempt == 2
    assert sim.requests_for("run")[0].json["input"]["env"]["ATTEMPT"] == "2"
    # the same attempt again (an orchestrator's retry): its recorded result, nothing paid
    again = run(sim, store, tmp_path, attempt=2)
    assert (again.ok, again.state, again.rule) == (result.ok, result.state, result.rule)
    assert len(sim.endpoints()) == 1 and len(sim.requests_for("run")) == 1
    with pytest.raises(ValueError, match="already records another run"):
        run(sim, store, tmp_path, attempt=3, run_stream="run-run-42-s0-a2")


def test_dependencies_are_checked_before_anything_is_provisioned(make_sim, tmp_path):
    sim = make_sim()
    store = MemoryStore()
    with pytest.raises(WorkerDependencyError, match="malformed"):
        run(sim, store, tmp_path, spec=spec(worker_image=None, worker_pip=("torch>=>2",)))
    with pytest.raises(WorkerDependencyError):
        run(sim, store, tmp_path, spec=spec(worker_image=None, worker_system_deps=("rm -rf",)))
    with pytest.raises(ValueError, match="entrypoint or function"):
        run(sim, store, tmp_path, spec=spec(worker_image=None))
    assert sim.requests == [] and store.streams() == []


def train_body(payload: dict[str, Any]) -> dict[str, Any]:
    """A worker entrypoint, as a non-baked job ships it."""
    return {"seed": payload["seed"]}


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        return fn(*a, **k)

    return wrapper


@_decorate
def decorated_body(payload):
    return payload


def test_a_worker_without_an_image_gets_the_function_and_its_dependencies(make_sim, tmp_path):
    sim = make_sim()
    store = MemoryStore()
    plain = spec(
        worker_image=None, worker_pip=("trl==0.19", "vllm>=0.9"), worker_system_deps=("git",)
    )

    result = run(sim, store, tmp_path, spec=plain, function=train_body, seed=3)

    assert result.ok
    job_input = sim.requests_for("run")[0].json["input"]
    assert job_input["function_name"] == "train_body"
    assert job_input["dependencies"] == ["trl==0.19", "vllm>=0.9"]
    assert job_input["system_dependencies"] == ["git"]
    (arg,) = job_input["args"]
    payload = cloudpickle.loads(base64.b64decode(arg))
    assert payload["seed"] == 3 and payload["extra_pip"] == []
    save = sim.requests_for("graphql:saveEndpoint")[0].json["variables"]["input"]
    assert "flash" in save["template"]["imageName"]  # the Flash runtime image


def test_build_function_input_has_two_shapes():
    payload = {"hf_repo": HF_REPO, "seed": 1, "env": {"A": "b"}}
    assert build_function_input(payload, baked_image=True) is payload

    shaped = build_function_input(
        payload, baked_image=False, function=train_body, dependencies=("x==1",)
    )
    assert set(shaped) == {
        "function_name",
        "function_code",
        "args",
        "accelerate_downloads",
        "dependencies",
        "system_dependencies",
    }
    assert shaped["function_name"] == "train_body" and shaped["accelerate_downloads"] is True
    assert shaped["dependencies"] == ["x==1"] and shaped["system_dependencies"] == []
    assert [cloudpickle.loads(base64.b64decode(a)) for a in shaped["args"]] == [payload]
    namespace: dict[str, Any] = {}
    exec(shaped["function_code"], namespace)  # the worker runs the shipped source
    assert namespace["train_body"](payload) == {"seed": 1}
    assert function_source(decorated_body).startswith("def decorated_body(payload):")
    with pytest.raises(ValueError):
        build_function_input(payload, baked_image=False)


def test_the_args_encoding_is_the_one_runpod_flash_reads(make_sim):
    flash_deploy.load_sdk()  # imported the way deploys import it
    from runpod_flash.runtime.serialization import deserialize_args, serialize_args

    payload = {"seed": 7, "env": {"ATTEMPT": "1"}}
    shaped = build_function_input(payload, baked_image=False, function=train_body)
    assert deserialize_args(shaped["args"]) == [payload]
    assert deserialize_args(serialize_args((payload,))) == [payload]


def test_the_payload_carries_the_spec_env_and_runtime_secrets():
    s = spec(env={"WANDB_PROJECT": "p"}, worker_pip=("trl",))
    payload = build_payload(s, 5, 1, {"WANDB_API_KEY": "wandb-secret-value"})
    assert payload["env"] == {
        "WANDB_PROJECT": "p",
        "RUN_ID": "run-42",
        "PHASE": "train",
        "SEED": "5",
        "ATTEMPT": "1",
        "WANDB_API_KEY": "wandb-secret-value",
    }
    assert payload["extra_pip"] == ["trl"] and payload["seed"] == 5
    assert RunSpec.model_validate_json(payload["job_spec_json"]) == s
    assert "wandb-secret-value" not in payload["job_spec_json"]


def test_names_and_specs_are_validated():
    assert endpoint_name("x" * 90, "H100", 0).startswith("flash-xxxx")
    assert len(endpoint_name("x" * 90, "H100", 0)) <= 70
    assert endpoint_name("x" * 90, "H100", 0) != endpoint_name("x" * 91, "H100", 0)
    with pytest.raises(ValueError):
        spec(run_id="has space")
    with pytest.raises(ValueError):
        spec(env={"ATTEMPT": "3"})
    assert resolve_worker_dependencies(spec(worker_pip=("a", "a", "b"))).pip == ("a", "b")


def test_flashfsm_exports_submit_run_without_importing_runpod_flash():
    import subprocess
    import sys

    code = (
        "import sys, flashfsm; "
        "assert flashfsm.submit_run and flashfsm.RunSpec and flashfsm.build_function_input; "
        "print('runpod_flash' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    assert flashfsm.submit_run is submit_run
