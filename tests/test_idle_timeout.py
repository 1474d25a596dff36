"""The endpoint's idle timeout is flashfsm's choice, set explicitly and recorded (issue 28).

RunPod bills an idle worker for the endpoint's idle timeout after each job; runpod-flash's
`Endpoint` would create every endpoint with 60 s. Every endpoint a run deploys — a demo
run, `submit_run`, a supervised walk with a non-default knob — must hold, on the
simulator's records (the GraphQL `saveEndpoint` runpod-flash sends and the REST v2
`GET /v2/serverless/{id}` answer), exactly the idle timeout flashfsm chose, and its
`EndpointDeployed` (v2) must record the same. A bad value is refused with one line
before any request reaches the simulator.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flashfsm import MemoryStore, RunSpec
from flashfsm import demo as demo_module
from flashfsm.adapters import flash_deploy
from flashfsm.adapters.flash_deploy import (
    DEFAULT_IDLE_TIMEOUT_S,
    IDLE_TIMEOUT_RANGE_S,
    DeployedEndpoint,
    DeployRequest,
    KeyPool,
    check_idle_timeout,
    deploy_endpoint,
)
from flashfsm.adapters.simulator import Simulator
from flashfsm.events.codec import encode
from flashfsm.events.models import Candidate, EndpointDeployed
from flashfsm.submit import (
    spec_intake,
    submit_run,
    supervise_spec,
)
from tests.sim_support import sync_client
from tests.test_deploy import Recorder, flash_port, request, saves, sim_factory
from tests.test_submit import spec

#: Values an idle timeout may not take: not a number, a bool, not whole, not finite, or
#: out of RunPod's range (1..3600 s).
BAD_VALUES: tuple[Any, ...] = (
    True,
    False,
    0,
    -5,
    3601,
    10**9,
    5.5,
    0.5,
    math.nan,
    math.inf,
    -math.inf,
    "5",
    None,
    [5],
)
GOOD_VALUES: tuple[tuple[Any, int], ...] = ((1, 1), (5, 5), (60.0, 60), (3600, 3600))


@pytest.fixture
def make_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Simulator]]:
    yield from sim_factory(monkeypatch)


def rest_idle_timeout(sim: Simulator, endpoint_id: str) -> int:
    """The endpoint's idle timeout as REST v2 answers it (`GET /v2/serverless/{id}`)."""
    with sync_client(sim) as client:
        return client.get_endpoint(endpoint_id)["idleTimeout"]


def deployed_events(store: MemoryStore, stream: str) -> list[EndpointDeployed]:
    return [e for e in store.read(stream) if isinstance(e, EndpointDeployed)]


def assert_records(event: EndpointDeployed, seconds: int) -> None:
    """`event` is a v2 `EndpointDeployed` recording `seconds`, written as it is kept."""
    assert (event.v, event.idle_timeout_s) == (2, seconds)
    written = json.loads(encode(event))
    assert (written["v"], written["idle_timeout_s"]) == (2, seconds)


def checking_deployer(sim: Simulator, scenarios: dict[int, str], seen: dict[str, int]):
    """The real deploy (runpod-flash), then the endpoint's REST v2 idle timeout read at
    once into `seen` (a run deletes its endpoints at its end), then the attempt's scenario."""

    def deploy(request: DeployRequest, **kw: Any) -> DeployedEndpoint:
        deployed = deploy_endpoint(request, **kw)
        seen[deployed.endpoint_id] = rest_idle_timeout(sim, deployed.endpoint_id)
        scenario = scenarios[min(request.attempt, max(scenarios))]
        sim.configure_endpoint(deployed.endpoint_id, scenario=scenario)
        return deployed

    return deploy


# --------------------------------------------------------------------------- the knob


def test_the_default_is_one_named_constant_and_runpods_console_default():
    assert DEFAULT_IDLE_TIMEOUT_S == 5 and IDLE_TIMEOUT_RANGE_S == (1, 3600)
    assert RunSpec.model_fields["idle_timeout_s"].default == DEFAULT_IDLE_TIMEOUT_S
    assert DeployRequest.model_fields["idle_timeout_s"].default == DEFAULT_IDLE_TIMEOUT_S
    assert spec().idle_timeout_s == request().idle_timeout_s == DEFAULT_IDLE_TIMEOUT_S
    schema = RunSpec.model_json_schema()["properties"]["idle_timeout_s"]
    assert (schema["minimum"], schema["maximum"]) == IDLE_TIMEOUT_RANGE_S


def test_runpod_flash_would_set_its_own_default_without_the_knob():
    """Why the knob exists: the SDK's `Endpoint` defaults to 60 s, not RunPod's 5 s."""
    flash_port()  # (runpod-flash imported against a loopback host, as every test here has it)
    sdk = flash_deploy.load_sdk()
    default = inspect.signature(sdk.Endpoint.__init__).parameters["idle_timeout"].default
    assert default != DEFAULT_IDLE_TIMEOUT_S
    # nor would the resource class a deploy builds (`endpoint_config`) without it
    assert sdk.LiveServerless.model_fields["idleTimeout"].default != DEFAULT_IDLE_TIMEOUT_S


@pytest.mark.parametrize(("value", "seconds"), GOOD_VALUES)
def test_whole_seconds_in_runpods_range_are_taken(value, seconds):
    assert check_idle_timeout(value) == seconds
    assert type(check_idle_timeout(value)) is int
    assert spec(idle_timeout_s=value).idle_timeout_s == seconds
    assert request(idle_timeout_s=value).idle_timeout_s == seconds


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_a_bad_value_is_refused_with_one_clear_line(value):
    with pytest.raises(ValueError) as caught:
        check_idle_timeout(value)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("idle_timeout_s must be a whole number of seconds from 1 to 3600")
    assert repr(value) in message
    with pytest.raises(ValueError, match="idle_timeout_s must be a whole number"):
        spec(idle_timeout_s=value)
    with pytest.raises(ValueError, match="idle_timeout_s must be a whole number"):
        request(idle_timeout_s=value)


def test_a_spec_hand_off_takes_the_knob_and_an_old_recorded_spec_gets_the_default():
    fields = {"run_id": "r-1", "gpu_class": "L40S", "worker_image": "team/t:1"}
    assert spec_intake({**fields, "idle_timeout_s": 30})[0].idle_timeout_s == 30
    with pytest.raises(ValueError, match="idle_timeout_s must be a whole number"):
        spec_intake({**fields, "idle_timeout_s": 0})
    old = json.dumps(fields)  # a RunStarted.spec recorded before the knob existed
    assert RunSpec.model_validate_json(old).idle_timeout_s == DEFAULT_IDLE_TIMEOUT_S
    assert json.loads(spec(idle_timeout_s=90).to_json())["idle_timeout_s"] == 90


# --------------------------------------------------------------------------- on the platform


@pytest.mark.parametrize("seconds", [DEFAULT_IDLE_TIMEOUT_S, 1, 240, 3600])
def test_a_deploy_sets_the_idle_timeout_and_records_what_it_set(make_sim, seconds):
    sim = make_sim()
    record = Recorder()
    deployed = deploy_endpoint(
        request(idle_timeout_s=seconds), accounts=KeyPool([sim.accounts[0].key]), record=record
    )
    assert deployed.idle_timeout_s == seconds
    assert [s["idleTimeout"] for s in saves(sim)] == [seconds]
    assert rest_idle_timeout(sim, deployed.endpoint_id) == seconds
    kind, fields = record.events[-1]
    assert (kind, fields["idle_timeout_s"]) == ("EndpointDeployed", seconds)
    event = EndpointDeployed(stream="s", seq=0, id="i", at=0.0, **fields)
    assert_records(event, seconds)


def on_sim(sim: Any, store: MemoryStore, tmp_path: Path) -> dict[str, Any]:
    """The keywords of a `submit_run` or `supervise_spec` on the simulator's clock: the
    store, the clock, and a hub cache under `tmp_path`."""
    return {
        "store": store,
        "clock": sim.clock.now,
        "sleep": sim.clock.sleep,
        "hub_options": {"cache_dir": tmp_path / "hf"},
    }


def test_submit_run_deploys_with_the_default_and_records_it(make_sim, tmp_path):
    sim = make_sim()
    store = MemoryStore()
    seen: dict[str, int] = {}
    result = submit_run(
        spec(),
        0,
        **on_sim(sim, store, tmp_path),
        deployer=checking_deployer(sim, {0: "success"}, seen),
    )
    assert result.ok, result.detail
    (event,) = deployed_events(store, "run-run-42-s0-a0")
    assert_records(event, DEFAULT_IDLE_TIMEOUT_S)
    assert [s["idleTimeout"] for s in saves(sim)] == [DEFAULT_IDLE_TIMEOUT_S]
    assert seen == {event.endpoint_id: DEFAULT_IDLE_TIMEOUT_S}
    # submit_run leaves the endpoint to its caller: still there, as it was set
    assert rest_idle_timeout(sim, event.endpoint_id) == DEFAULT_IDLE_TIMEOUT_S


def test_submit_run_with_the_default_deployer_records_the_default(make_sim, tmp_path):
    """The default deployer (no wrapper): what runpod-flash sent, and what was recorded."""
    sim = make_sim()
    store = MemoryStore()
    result = submit_run(
        spec(),
        0,
        **on_sim(sim, store, tmp_path),
    )
    assert result.ok, result.detail
    (event,) = deployed_events(store, "run-run-42-s0-a0")
    assert_records(event, DEFAULT_IDLE_TIMEOUT_S)
    assert [s["idleTimeout"] for s in saves(sim)] == [DEFAULT_IDLE_TIMEOUT_S]
    assert rest_idle_timeout(sim, event.endpoint_id) == DEFAULT_IDLE_TIMEOUT_S


def test_a_walk_with_a_non_default_knob_sets_it_on_every_endpoint(make_sim, tmp_path):
    sim = make_sim()
    store = MemoryStore()
    seen: dict[str, int] = {}
    result = supervise_spec(
        spec(idle_timeout_s=42, weight_cache=None),
        0,
        [Candidate(gpu_class="RTX4090"), Candidate(gpu_class="L40S")],
        **on_sim(sim, store, tmp_path),
        deployer=checking_deployer(sim, {0: "no_capacity", 1: "success"}, seen),
    )
    assert result.ok and result.attempts == 2, result.detail
    events = deployed_events(store, result.stream)
    assert len(events) == 2
    for event in events:
        assert_records(event, 42)
    assert [s["idleTimeout"] for s in saves(sim)] == [42, 42]
    assert seen == {e.endpoint_id: 42 for e in events}


def test_a_demo_run_deploys_with_the_default_and_records_it(monkeypatch):
    """The demo deploys on its own simulator (no runpod-flash): the same idle timeout."""
    seen: dict[str, int] = {}

    class Watched(Simulator):
        def add_endpoint(self, name: str = "flash-sim", **kw: Any) -> str:
            endpoint_id = super().add_endpoint(name, **kw)
            seen[endpoint_id] = rest_idle_timeout(self, endpoint_id)
            return endpoint_id

    monkeypatch.setattr(demo_module, "Simulator", Watched)
    walk = tuple(d for d in demo_module.DEMO_RUNS if d.name == "walk")
    store = MemoryStore()
    (result,) = demo_module.run_demo(store, runs=walk, say=lambda _line: None)
    assert result.ok and result.attempts == 2, result.detail
    events = deployed_events(store, result.stream)
    assert len(events) == 2
    for event in events:
        assert_records(event, DEFAULT_IDLE_TIMEOUT_S)
    assert seen == {e.endpoint_id: DEFAULT_IDLE_TIMEOUT_S for e in events}


# --------------------------------------------------------------------------- refused early


@pytest.mark.parametrize("value", [0, 3601, 7.5, math.nan, True], ids=repr)
def test_a_bad_value_reaches_no_simulator_and_no_store(make_sim, tmp_path, value):
    """A spec built around its validation (`model_copy(update=...)` does not validate) is
    still refused by `submit_run` and `supervise_spec` before any request or record; so is
    such a deploy request by `deploy_endpoint`."""
    sim = make_sim()
    store = MemoryStore()
    bad = spec().model_copy(update={"idle_timeout_s": value})
    common = on_sim(sim, store, tmp_path)
    with pytest.raises(ValueError, match=r"spec\.idle_timeout_s must be a whole number") as caught:
        submit_run(bad, 0, **common)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=r"spec\.idle_timeout_s must be a whole number"):
        supervise_spec(bad, 0, [Candidate(gpu_class="H100")], **common)
    with pytest.raises(ValueError, match=r"spec\.idle_timeout_s must be a whole number"):
        supervise_spec(bad, 0, [Candidate(gpu_class="H100")], store=store, detach=True)
    record = Recorder()
    with pytest.raises(ValueError, match="idle_timeout_s must be a whole number"):
        deploy_endpoint(
            request().model_copy(update={"idle_timeout_s": value}),
            accounts=KeyPool([sim.accounts[0].key]),
            record=record,
        )
    assert record.events == []
    assert sim.requests == [] and sim.endpoints() == [] and store.streams() == []


def test_a_deployer_that_does_not_say_records_a_v1_event(make_sim, tmp_path):
    """A deployer of the caller's own that reports no idle timeout: the run records the
    v1 event, as before the field existed, rather than a value nobody set."""
    sim = make_sim()
    store = MemoryStore()

    def deploy(request: DeployRequest, **kw: Any) -> DeployedEndpoint:
        return DeployedEndpoint(sim.add_endpoint(request.name, scenario="success"), request.name)

    result = submit_run(
        spec(),
        0,
        **on_sim(sim, store, tmp_path),
        deployer=deploy,
        accounts=KeyPool([sim.accounts[0].key]),
    )
    assert result.ok, result.detail
    (event,) = deployed_events(store, "run-run-42-s0-a0")
    assert event.v == 1 and event.idle_timeout_s is None
    assert "idle_timeout_s" not in json.loads(encode(event))
