"""The demo: real flashfsm watches of simulated jobs, end to end, in a few seconds.

It starts the bundled RunPod + Hugging Face simulator on loopback with a manual clock (each
`sleep` of the watch jumps simulated time), submits one job per scenario through the real
REST client, and watches each with `poll_job` and the Hub heartbeat and failure readers,
recording every observation in the given store. The caller prints the post-mortems.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
)
from flashfsm.adapters.runpod import RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.stores import open_store
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


def run_demo(
    store_url: str,
    *,
    say: Callable[[str], Any] = print,
    jobs: tuple[tuple[str, str], ...] = DEMO_JOBS,
) -> list[str]:
    """Watch one simulated job per scenario into `store_url`; return the streams written."""
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
                    name = f"flash-{run_id}-{scenario}".replace("_", "-")
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
                    stream = f"{run_id}-{scenario}"
                    say(f"[bold]{scenario}[/bold]: {what}")
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
