"""Run adapters a `flashfsm supervise` child process drives handed-off runs with, against a
simulator in another process (`--run-adapters tests.fleet_support:sim_run_adapters`).

The deploy is the simulator's own GraphQL `saveEndpoint` (what runpod-flash calls), made
with httpx to `RUNPOD_API_BASE_URL`; each attempt's job picks its scenario from its input,
by the run's id: a `fail-…` run's job fails (the run ends `job_failed`), the others succeed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import httpx

from flashfsm.adapters.runpod import RunpodClient
from flashfsm.events.models import RunStarted
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, RunpodRunAdapters

#: The runs' poll interval (seconds of the replicas' real clock).
RUN_INTERVAL_S = 2.0
SAVE = "mutation Save($input: EndpointInput!) { saveEndpoint(input: $input) { id name } }"


def scenario_of(run_id: str, attempt: int) -> str:
    """The scenario the attempt's job plays."""
    return "failed" if run_id.startswith("fail-") else "success"


def sim_run_adapters(started: RunStarted, sleep: Callable[[float], None]) -> RunpodRunAdapters:
    """`RunAdapters` for one handed-off run, on the simulator the environment names."""
    base = os.environ["RUNPOD_API_BASE_URL"].rstrip("/")
    key = os.environ["RUNPOD_API_KEY"]

    def deploy(run: RunState, attempt: Attempt, record: Any) -> Deployed:
        name = attempt.started.endpoint_name
        variables = {
            "input": {
                "name": name,
                "template": {"name": f"{name}-t", "imageName": "runpod/flash:sim"},
                "gpuIds": attempt.started.gpu_class,
                "workersMax": 1,
            }
        }
        reply = httpx.post(
            f"{base}/graphql",
            json={"query": SAVE, "variables": variables},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        reply.raise_for_status()
        endpoint = reply.json()["data"]["saveEndpoint"]
        return Deployed(endpoint["id"], endpoint["name"])

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        return {"scenario": scenario_of(started.run_id, attempt.started.attempt)}

    return RunpodRunAdapters(
        RunpodClient.from_env(),
        deploy,
        job_input,
        interval_s=RUN_INTERVAL_S,
        sleep=sleep,
    )
