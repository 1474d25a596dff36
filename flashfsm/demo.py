"""The demo: a small fleet of runs through `supervise_run`, against the bundled simulator.

It starts the RunPod + Hugging Face simulator on loopback with a manual clock (each wait
of a watch jumps simulated time), and runs five training runs end to end into the given
store — each with its GPU walk, deploys, submissions, watches (with the Hub heartbeat and
failure readers), retries and cleanup recorded as events. The simulator plays a scripted
life for each attempt's job; the caller prints the post-mortems.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
)
from flashfsm.adapters.runpod import RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import Candidate
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.naming import endpoint_name, job_stream
from flashfsm.runs import Deployed, Recorder, RunpodRunAdapters, RunResult, supervise_run
from flashfsm.shell import JobHandle, PollResult, poll_job

#: (scenario, what it shows)
DEMO_JOBS: tuple[tuple[str, str], ...] = (
    ("success", "a clean run: cold start, training heartbeats, metrics"),
    ("no_capacity", "no worker ever comes: the queue grace ends it (next GPU class)"),
    ("crash_loop", "the worker crash-loops: unhealthy grace, retry on a fresh endpoint"),
    ("training_stall", "heartbeats stop mid-training: the stall window ends it"),
    ("failed", "the training code raises: fails fast, not retried"),
)
HF_REPO = "flashfsm-demo/runs"
PHASE = "sft"
GPUS = {
    "RTX4090": Candidate(gpu_class="RTX4090", price_per_hour=0.69, vram_gb=24),
    "L40S": Candidate(gpu_class="L40S", price_per_hour=0.99, vram_gb=48),
    "A100-80GB": Candidate(gpu_class="A100-80GB", price_per_hour=1.89, vram_gb=80),
}


@dataclass(frozen=True)
class DemoRun:
    """One run of the demo: what it shows, its GPUs, and each attempt's scripted job."""

    name: str
    shows: str
    gpus: tuple[str, ...]
    scenarios: tuple[str, ...]  # the job life of attempt 0, 1, …


DEMO_RUNS: tuple[DemoRun, ...] = (
    DemoRun("clean", "a clean success", ("RTX4090",), ("success",)),
    DemoRun(
        "walk",
        "no capacity on the cheapest GPU: the walk moves to the next class, which succeeds",
        ("RTX4090", "L40S"),
        ("no_capacity", "success"),
    ),
    DemoRun(
        "crashloop",
        "a crash-looping worker: retried on a fresh endpoint",
        ("L40S",),
        ("crash_loop", "success"),
    ),
    DemoRun(
        "stall",
        "the trainer stalls mid-training: retried",
        ("A100-80GB", "L40S"),
        ("training_stall", "success"),
    ),
    DemoRun(
        "codeerror", "the training code raises: fails fast, not retried", ("L40S",), ("failed",)
    ),
)


def run_demo(
    store_url: str,
    *,
    say: Callable[[str], Any] = print,
    runs: tuple[DemoRun, ...] = DEMO_RUNS,
) -> list[RunResult]:
    """Supervise every demo run into `store_url`; return their results (streams included)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    store = open_store(store_url)
    results: list[RunResult] = []
    try:
        with Simulator(speed=0) as sim:
            env = sim.env()
            client = RunpodClient(
                sim.accounts[0].key,
                endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                api_base_url=env["RUNPOD_API_BASE_URL"],
            )
            with client:
                for seed, demo in enumerate(runs):
                    run_id = f"demo-{stamp}-{demo.name}"
                    say(f"{demo.name}: {demo.shows}")
                    adapters = _adapters(sim, client, demo, run_id, seed)
                    result = supervise_run(
                        run_id,
                        [GPUS[g] for g in demo.gpus],
                        adapters,
                        max_retries=2,
                        phase=PHASE,
                        seed=seed,
                        store=store,
                        clock=sim.clock.now,
                        sleep=sim.clock.sleep,
                    )
                    outcome = "succeeded" if result.ok else result.failure
                    say(f"  → {outcome} after {result.attempts} attempt(s)")
                    results.append(result)
    finally:
        store.close()
    return results


def _adapters(
    sim: Simulator, client: RunpodClient, demo: DemoRun, run_id: str, seed: int
) -> RunpodRunAdapters:
    def deploy(run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        number = attempt.started.attempt
        scenario = demo.scenarios[min(number, len(demo.scenarios) - 1)]
        name = attempt.started.endpoint_name
        endpoint_id = sim.add_endpoint(name, scenario=scenario, hf_repo=HF_REPO)
        return Deployed(endpoint_id, name)

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        return {"hf_repo": HF_REPO, "phase": PHASE, "run_id": run_id, "seed": seed}

    def readers(run: RunState, attempt: Attempt) -> tuple[Any, Any]:
        prefix = heartbeat_prefix(PHASE, run_id, seed)
        hub = {"clock": sim.clock.now, "endpoint": sim.url}
        return (
            make_hf_heartbeat_reader(HF_REPO, prefix, **hub),
            make_hf_failure_detail_reader(HF_REPO, prefix, PHASE, **hub),
        )

    return RunpodRunAdapters(
        client,
        deploy,
        job_input,
        readers,
        budget_s=6 * 3600,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
    )


def watch_scenarios(
    store_url: str,
    *,
    say: Callable[[str], Any] = print,
    jobs: tuple[tuple[str, str], ...] = DEMO_JOBS,
) -> list[str]:
    """Watch one simulated job per scenario with `poll_job` into `store_url`; return the streams.

    The job-level counterpart of `run_demo` (no run machine): handy for making logs.
    """
    run_id = time.strftime("demo-%Y%m%d-%H%M%S")
    streams: list[str] = []
    store = open_store(store_url)
    try:
        with Simulator(speed=0) as sim:
            env = sim.env()
            client = RunpodClient(
                sim.accounts[0].key,
                endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                api_base_url=env["RUNPOD_API_BASE_URL"],
            )
            with client:
                for seed, (scenario, what) in enumerate(jobs):
                    name = endpoint_name(run_id, scenario, seed)
                    endpoint_id = sim.add_endpoint(name, hf_repo=HF_REPO)
                    job_input = {
                        "scenario": scenario,
                        "hf_repo": HF_REPO,
                        "phase": PHASE,
                        "run_id": run_id,
                        "seed": seed,
                    }
                    job_id = client.run(endpoint_id, job_input, ttl_s=7 * 24 * 3600)
                    handle = JobHandle(endpoint_id, name, job_id, submitted_at=sim.clock.now())
                    prefix = heartbeat_prefix(PHASE, run_id, seed)
                    hub = {"clock": sim.clock.now, "endpoint": sim.url}
                    stream = job_stream(f"{run_id}-{scenario}")
                    say(f"{scenario}: {what}")
                    result: PollResult = poll_job(
                        handle,
                        heartbeat_reader=make_hf_heartbeat_reader(HF_REPO, prefix, **hub),
                        failure_detail_reader=make_hf_failure_detail_reader(
                            HF_REPO, prefix, PHASE, **hub
                        ),
                        client=client,
                        clock=sim.clock.now,
                        sleep=sim.clock.sleep,
                        store=store,
                        stream=stream,
                    )
                    outcome = "ok" if result.ok else f"{result.failure} ({result.rule})"
                    say(f"  → {outcome}")
                    streams.append(stream)
    finally:
        store.close()
    return streams
