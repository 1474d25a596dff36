"""A run's adapters on a running simulator, for drivers in other processes: the RunPod
client on its REST routes, and a deployer that makes each attempt's endpoint over its GraphQL
`saveEndpoint` (one worker, idle timeout 5 s) — the paid calls of
tests/test_paid_call_crashes.py and tests/test_late_resume.py."""

from __future__ import annotations

import random
from typing import Any

import httpx

from flashfsm.adapters.runpod import RunpodClient
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, Recorder

SAVE = (
    "mutation Save($input: EndpointInput!) { saveEndpoint(input: $input) { id name idleTimeout } }"
)


def sim_client(url: str, key: str, sleep: Any) -> RunpodClient:
    """The RunPod client of the simulator at `url` (its waits on `sleep`)."""
    return RunpodClient(
        key, endpoint_base_url=f"{url}/v2", api_base_url=url, sleep=sleep, rng=random.Random(0)
    )


def graphql_deployer(url: str, key: str) -> Any:
    """A deployer making the attempt's endpoint under its recorded name over GraphQL."""

    def deploy(run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        name = attempt.started.endpoint_name
        fields = {
            "name": name,
            "template": {"name": f"{name}-t", "imageName": "runpod/flash:sim"},
            "gpuIds": attempt.started.gpu_class,
            "workersMax": 1,
            "idleTimeout": 5,
        }
        reply = httpx.post(
            f"{url}/graphql",
            json={"query": SAVE, "variables": {"input": fields}},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        reply.raise_for_status()
        made = reply.json()["data"]["saveEndpoint"]
        return Deployed(made["id"], made["name"], idle_timeout_s=made["idleTimeout"])

    return deploy
