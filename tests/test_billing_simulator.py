"""What RunPod bills, checked against the simulator's own workers.

Runs and jobs are driven on the bundled simulator (manual clock, real HTTP on 127.0.0.1):
a clean run, a GPU walk, a stall, a retry, a lost job, a requeue (the worker dies, another
takes the job), a cancelled run, a bare job whose verdict left it running (no cancel, no
teardown) and a bare job whose endpoint the sweeper reaped. The simulator knows every
worker it started, when, and when it stopped (`Simulator.workers`): the billing model is
"each worker of the attempt, from its start (not before the job was submitted) to its
stop (or, for a worker still running, to the newest event read)". Each attempt's bill is
computed from those records alone, and `flashfsm cost --json`, `flashfsm timeline --json`
and `flashfsm whatif --all --json` must agree with it to the cent.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import JobHandle, RunpodClient, poll_job
from flashfsm.adapters.flash_deploy import DEFAULT_IDLE_TIMEOUT_S
from flashfsm.adapters.hub import hub_readers
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.demo import GPUS, PHASE
from flashfsm.events.models import HubLocation, JobQueued
from flashfsm.runs import Deployed, RunpodRunAdapters, request_cancel
from flashfsm.sweeper import IdleSweeper
from tests.test_docs_examples import supervise_example

START = 1_700_000_000.0
HF_REPO = "my-org/runs"
#: run id -> (its GPU walk, the simulator scenario of attempt 0, 1, …)
RUNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "clean": (("L40S",), ("success",)),
    "walk": (("RTX4090", "L40S"), ("no_capacity", "success")),
    "stall": (("L40S",), ("training_stall", "success")),
    "retry": (("L40S",), ("failed_retriable", "success")),
    "lost": (("L40S",), ("ttl_expired", "success")),
    "requeue": (("L40S",), ("worker_death",)),
    "cancel": (("L40S",), ("training",)),
}
CANCEL_AT_S = 200.0  # the cancelled run is cancelled this long after it starts
PRICE = GPUS["L40S"].price_per_hour  # the bare jobs' price (`--price`)


@dataclass
class Fleet:
    """A store of simulated runs and jobs, and the simulator's record of their workers."""

    url: str
    workers: list[dict[str, Any]]
    job_endpoints: dict[str, str]  # job stream -> endpoint id
    job_submitted: dict[str, float]  # job stream -> submission time


def _run(sim: Simulator, client: RunpodClient, store: Any, run_id: str, scratch: str) -> None:
    gpus, scenarios = RUNS[run_id]

    def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
        scenario = scenarios[min(attempt.started.attempt, len(scenarios) - 1)]
        name = attempt.started.endpoint_name
        idle = DEFAULT_IDLE_TIMEOUT_S
        endpoint_id = sim.add_endpoint(name, scenario=scenario, hf_repo=HF_REPO, idleTimeout=idle)
        return Deployed(endpoint_id, name, idle_timeout_s=idle)

    def readers(run: Any, attempt: Any) -> Any:
        hub = HubLocation(hf_repo=HF_REPO, phase=PHASE, run_id=run_id, seed=0)
        return hub_readers(hub, endpoint=sim.url, clock=sim.clock.now, cache_dir=f"{scratch}/hf")

    started = sim.clock.now()

    def sleep(seconds: float) -> None:
        before = sim.clock.now()
        sim.clock.sleep(seconds)
        cancel_at = started + CANCEL_AT_S
        if run_id == "cancel" and before < cancel_at <= sim.clock.now():
            request_cancel(store, f"run-{run_id}", by="test", clock=sim.clock.now)

    adapters = RunpodRunAdapters(
        client,
        deploy,
        lambda run, attempt: {"hf_repo": HF_REPO, "phase": PHASE, "run_id": run_id, "seed": 0},
        readers,
        budget_s=6 * 3600,
        clock=sim.clock.now,
        sleep=sleep,
    )
    supervise_example(run_id, [GPUS[g] for g in gpus], adapters, store, sim, sleep)


def _bare_job(sim: Simulator, client: RunpodClient, store: Any, name: str, scenario: str) -> str:
    """A job watched by plain `poll_job`: nothing cancels it or deletes its endpoint."""
    idle = 600 if name == "reaped" else 5
    endpoint = f"flash-{name}-s0"  # (the sweeper's kind of endpoint: a flash training one)
    endpoint_id = sim.add_endpoint(endpoint, scenario=scenario, hf_repo=HF_REPO, idleTimeout=idle)
    submitted = sim.clock.now()
    job_input = {"hf_repo": HF_REPO, "phase": PHASE, "run_id": name, "seed": 0}
    job_id = sim.submit(endpoint_id, job_input)
    poll_job(
        JobHandle(endpoint_id, endpoint, job_id, submitted_at=submitted, gpu_class="L40S"),
        client=client,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        store=store,
        stream=f"job-{name}",
    )
    return endpoint_id


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with tempfile.TemporaryDirectory() as scratch:
        url = f"jsonl:{scratch}/store"
        store = open_store(url)
        with Simulator(clock=SimClock(speed=0, start=START)) as sim:
            with sim.client() as client:
                for run_id in RUNS:
                    _run(sim, client, store, run_id, scratch)
                _bare_job(sim, client, store, "noteardown", "training_stall")
                reaped = _bare_job(sim, client, store, "reaped", "success")
                sim.clock.sleep(120)  # idle for 2 minutes, short of its 10-minute idle timeout
                sweeper = IdleSweeper(client, store, clock=sim.clock.now)
                sweeper.sweep(min_idle_s=60)  # its idle timer starts: seen idle now
                sim.clock.sleep(60)
                report = sweeper.sweep(min_idle_s=60)  # idle a minute: reaped
                assert reaped in report.deleted, report
            endpoints: dict[str, str] = {}
            submitted: dict[str, float] = {}
            for name in store.streams():
                for event in store.read(name):
                    if isinstance(event, JobQueued):
                        endpoints[event.job_stream] = event.endpoint_id
                        submitted[event.job_stream] = event.submitted_at
            for name in ("job-noteardown", "job-reaped"):
                first = store.read(name)[0]
                endpoints[name] = first.endpoint_id  # type: ignore[union-attr]
                submitted[name] = first.submitted_at  # type: ignore[union-attr]
            workers = sim.workers()
        store.close()
        yield Fleet(url, workers, endpoints, submitted)


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code in (0, 10), result.output
    return json.loads(result.output)


def _billed_by_the_simulator(fleet: Fleet, stream: str, as_of: float) -> float:
    """The model, on the simulator's records: each worker that took the job, from its start
    (not before the submission) to its stop, or to `as_of` while it still runs."""
    endpoint, submitted = fleet.job_endpoints[stream], fleet.job_submitted[stream]
    total = 0.0
    for w in fleet.workers:
        if w["endpoint_id"] != endpoint or w["picked_up_at"] is None:
            continue
        stop = as_of if w["stopped_at"] is None else min(w["stopped_at"], as_of)
        total += max(0.0, stop - max(w["started_at"], submitted))
    return total


def _cost(fleet: Fleet, stream: str, *price: str) -> dict[str, Any]:
    [led] = _cli("cost", stream, "--store", fleet.url, "--json", *price)["ledgers"]
    return led


@pytest.mark.parametrize("run_id", sorted(RUNS))
def test_a_runs_bill_is_its_workers_time_on_the_platform(fleet: Fleet, run_id: str) -> None:
    led = _cost(fleet, f"run-{run_id}")
    assert led["attempts"], led
    for a in led["attempts"]:
        if a["stream"] is None:
            continue
        expected = _billed_by_the_simulator(fleet, a["stream"], led["as_of"])
        assert a["billed_s"] == pytest.approx(expected, abs=1e-6), (run_id, a["stream"])
        assert round(a["money"], 2) == round(expected * a["price_per_hour"] / 3600, 2)
        assert a["open_since"] is None  # a run cancels and tears down what it opened


def test_a_verdict_without_teardown_is_still_billing(fleet: Fleet) -> None:
    led = _cost(fleet, "job-noteardown", "--price", str(PRICE))
    [a] = led["attempts"]
    alive = [w for w in fleet.workers if w["endpoint_id"] == fleet.job_endpoints["job-noteardown"]]
    assert any(w["stopped_at"] is None for w in alive)  # the platform still runs it
    assert a["open_since"] is not None and a["outcome"]["state"] == "STALLED"
    expected = _billed_by_the_simulator(fleet, "job-noteardown", led["as_of"])
    assert a["billed_s"] == pytest.approx(expected, abs=1e-6)


def test_the_sweepers_reap_ends_a_bill(fleet: Fleet) -> None:
    led = _cost(fleet, "job-reaped", "--price", str(PRICE))
    [a] = led["attempts"]
    [worker] = [w for w in fleet.workers if w["endpoint_id"] == fleet.job_endpoints["job-reaped"]]
    assert worker["stop_reason"] and worker["stopped_at"] is not None
    assert a["open_since"] is None and a["end"] == pytest.approx(worker["stopped_at"])
    expected = _billed_by_the_simulator(fleet, "job-reaped", led["as_of"])
    assert a["billed_s"] == pytest.approx(expected, abs=1e-6)
    assert a["causes"]["idle"]["billed_s"] > 0  # idle until the reap, short of the timeout


@pytest.mark.parametrize("run_id", sorted(RUNS))
def test_the_timeline_prices_as_cost_does(fleet: Fleet, run_id: str, tmp_path: Path) -> None:
    led = _cost(fleet, f"run-{run_id}")
    out = str(tmp_path / "t.html")
    pic = _cli("timeline", f"run-{run_id}", "--store", fleet.url, "--out", out, "--json")
    assert [round(lane["cost"]["money"], 2) for lane in pic["lanes"]] == [
        round(a["money"], 2) for a in led["attempts"]
    ]
    assert [lane["cost"]["billed_s"] for lane in pic["lanes"]] == [
        a["billed_s"] for a in led["attempts"]
    ]


def test_whatif_prices_the_recorded_verdicts_as_cost_does(fleet: Fleet) -> None:
    costs = {
        a["stream"]: a
        for led in _cli("cost", "--store", fleet.url, "--json", "--price", str(PRICE))["ledgers"]
        for a in led["attempts"]
        if a["stream"]
    }
    changed = 0
    for change in ("stall_after_s=600", "queue_grace_s=60", "stall_after_s=3000"):
        report = _cli("whatif", "--all", "--store", fleet.url, "--json", "--set", change,
                      "--price", str(PRICE))  # fmt: skip
        for c in report["changes"]:
            recorded = costs[c["stream"]]
            assert round(c["money_before"], 2) == round(recorded["money"], 2), c
            assert c["billed_before_s"] == pytest.approx(recorded["billed_s"]), c
            changed += 1
        if change == "stall_after_s=3000":  # only waits longer: it can never save money
            assert report["metrics"]["saved"] <= 0, report["metrics"]
    assert changed >= 3
