"""Clients on a running `Simulator`, as the tests that drive one build them."""

from __future__ import annotations

from flashfsm import AsyncRunpodClient, RunpodClient
from flashfsm.adapters.simulator import Simulator


def async_client(sim: Simulator) -> AsyncRunpodClient:
    """An async RunPod client on the simulator (its first account's key)."""
    env = sim.env()
    return AsyncRunpodClient(
        env["RUNPOD_API_KEY"],
        endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
        api_base_url=env["RUNPOD_API_BASE_URL"],
    )


def sync_client(sim: Simulator) -> RunpodClient:
    """A RunPod client on the simulator (its first account's key)."""
    env = sim.env()
    return RunpodClient(
        env["RUNPOD_API_KEY"],
        endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
        api_base_url=env["RUNPOD_API_BASE_URL"],
    )
