"""What docs/simulator.md's "From another process" showed as a runnable example, kept as a
test: `python -m flashfsm.adapters.simulator` with a manual clock, one crash-looping job
queued (`--fleet 1`, its JSON line on stdout) and a fault, watched from this process by
reading the printed exports and moving the simulator's clock over HTTP (`/_sim/clock`);
what it created and billed is read back over HTTP (`read_usage`)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import httpx

from flashfsm import JobHandle, RunpodClient, poll_job
from flashfsm.adapters.simulator import read_usage


def test_a_watch_in_another_process_moves_the_manual_clock_over_http() -> None:
    command = [
        sys.executable, "-m", "flashfsm.adapters.simulator", "--port", "0", "--speed", "0",
        "--fleet", "1", "--scenario", "crash_loop", "--fault", "status=503,times=2",
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        try:
            env: dict[str, str] = {}
            jobs: list[dict[str, str]] = []
            assert server.stdout is not None
            for line in server.stdout:
                if line.startswith("export "):  # export NAME=value, shell-quoted
                    name, _, value = shlex.split(line)[1].partition("=")
                    env[name] = value
                elif line.startswith("{"):  # the fleet's jobs, one JSON object each
                    jobs.append(json.loads(line))
                elif line.startswith("# serving"):
                    break
            sim = httpx.Client(base_url=env["HF_ENDPOINT"])  # the simulator's own URL

            def clock() -> float:  # the manual clock, read over HTTP ...
                return float(sim.get("/_sim/clock").json()["now"])

            def sleep(seconds: float) -> None:  # ... and moved: no real time passes
                sim.post("/_sim/clock", json={"advance": seconds})

            with (
                sim,
                RunpodClient(
                    env["RUNPOD_API_KEY"],
                    endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                    api_base_url=env["RUNPOD_API_BASE_URL"],
                    sleep=sleep,  # its retries (of the two 503s) wait on the simulated clock too
                ) as client,
            ):
                result = poll_job(JobHandle(**jobs[0]), client=client, clock=clock, sleep=sleep)
            usage = read_usage(env["HF_ENDPOINT"])  # what it created and billed, over HTTP
        finally:
            server.terminate()  # leaving the `with` closes its output and waits for it

    assert len(jobs) == 1 and set(jobs[0]) == {"endpoint_id", "endpoint_name", "job_id"}
    assert (result.failure, result.rule) == ("stalled", "unhealthy_worker")
    assert usage.endpoints[0].jobs == (jobs[0]["job_id"],)
    assert usage.workers[0].stop_reason is None  # the crash-looping worker is still billed
