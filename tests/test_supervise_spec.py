"""`supervise_spec`: the whole answer — runpod-flash deploys, the GPU walk, watches, cleanup."""

from __future__ import annotations

from typing import Any

import pytest

from flashfsm import MemoryStore, replay, verify
from flashfsm.adapters import flash_deploy
from flashfsm.events.models import (
    AttemptStarted,
    Candidate,
    EndpointDeleted,
    EndpointDeployed,
    JobCancelled,
    RunConcluded,
)
from flashfsm.submit import supervise_spec
from tests.test_deploy import sim_factory
from tests.test_submit import spec


@pytest.fixture
def make_sim(monkeypatch):
    yield from sim_factory(monkeypatch)


def by_gpu(sim, scenarios: dict[str, str]):
    """Deploy for real, then give the endpoint the scenario of its GPU class."""

    def deploy(request, **kw: Any):
        deployed = flash_deploy.deploy_endpoint(request, **kw)
        sim.configure_endpoint(deployed.endpoint_id, scenario=scenarios[request.gpu_class])
        return deployed

    return deploy


def test_the_walk_moves_past_a_class_without_capacity_and_cleans_up_every_endpoint(
    make_sim, tmp_path
):
    sim = make_sim()
    store = MemoryStore()
    result = supervise_spec(
        spec(weight_cache=None),
        0,
        [
            Candidate(gpu_class="RTX4090", price_per_hour=0.69, vram_gb=24),
            Candidate(gpu_class="L40S", price_per_hour=0.99, vram_gb=48),
        ],
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        deployer=by_gpu(sim, {"RTX4090": "no_capacity", "L40S": "success"}),
        hub_options={"cache_dir": tmp_path / "hf"},
    )
    assert result.ok and result.attempts == 2 and result.metrics
    run = store.read(result.stream)
    attempts = [e for e in run if isinstance(e, AttemptStarted)]
    assert [(a.gpu_class, a.on_last_gpu) for a in attempts] == [("RTX4090", False), ("L40S", True)]
    assert all(a.endpoint_name.startswith("flash-") for a in attempts)  # the sweeper's kind
    deployed = [e.endpoint_id for e in run if isinstance(e, EndpointDeployed)]
    deleted = [e.endpoint_id for e in run if isinstance(e, EndpointDeleted) and e.ok]
    assert len(deployed) == 2 and sorted(deleted) == sorted(deployed)
    assert [
        e.job_id for e in run if isinstance(e, JobCancelled)
    ]  # the starved job, before the retry
    assert sim.endpoints() == []  # nothing left behind on RunPod
    assert isinstance(run[-1], RunConcluded)
    for attempt in attempts:
        job = store.read(attempt.job_stream)
        assert replay(job).verdict is not None and verify(job).ok


def test_a_code_error_fails_fast_after_one_deploy(make_sim, tmp_path):
    sim = make_sim()
    store = MemoryStore()
    result = supervise_spec(
        spec(weight_cache=None, run_id="run-43"),
        1,
        [
            Candidate(gpu_class="L40S", price_per_hour=0.99),
            Candidate(gpu_class="H100", price_per_hour=2.5),
        ],
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        deployer=by_gpu(sim, {"L40S": "failed", "H100": "success"}),
        hub_options={"cache_dir": tmp_path / "hf"},
    )
    assert not result.ok and result.failure == "job_failed" and result.attempts == 1
    assert sim.endpoints() == []
