"""Clients on a running `Simulator`, as the tests that drive one build them."""

from __future__ import annotations

import asyncio
from typing import Any

from flashfsm import AsyncRunpodClient, RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.fleet import Fleet


def async_client(sim: Simulator) -> AsyncRunpodClient:
    """An async RunPod client on the simulator (its first account's key)."""
    return sim.async_client()


def sync_client(sim: Simulator) -> RunpodClient:
    """A RunPod client on the simulator (its first account's key)."""
    return sim.client()


def run_replica_until_idle(url: str, sim: Simulator, **options: Any) -> None:
    """One fleet replica (`replica-1`) on the store at `url`, on `sim`'s clock, until no
    handed-off stream is open; `options` go to the `Fleet`."""

    async def main() -> None:
        async with async_client(sim) as client:
            fleet = Fleet(
                url,
                client,
                owner="replica-1",
                lease_s=5,
                tick_s=0.2,
                clock=sim.clock.now,
                **options,
            )
            try:
                idle = lambda: not fleet.store.open_streams()  # noqa: E731
                await asyncio.wait_for(fleet.run(until=idle), 120)
            finally:
                fleet.store.close()

    asyncio.run(main())
