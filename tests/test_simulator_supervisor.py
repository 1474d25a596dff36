"""The asyncio `Supervisor` over the simulator: the sim clock's `async_sleep` makes it work."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from flashfsm import AsyncRunpodClient, JobHandle, MemoryStore, replay
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.supervisor import JobSpec, Supervisor


def test_the_readme_recipe_watches_three_jobs_to_their_verdicts_in_seconds():
    # --- the recipe, as the README has it -----------------------------------------------
    store = MemoryStore()
    with Simulator(speed=0) as sim:  # speed=0: the clock moves only when someone sleeps
        jobs = []
        for scenario in ("success", "crash_loop", "no_capacity"):
            endpoint = sim.add_endpoint(f"flash-{scenario}", scenario=scenario)
            handle = JobHandle(endpoint, f"flash-{scenario}", sim.submit(endpoint, {}))
            jobs.append(JobSpec(handle, stream=f"job-{scenario}"))

        async def main():
            async with sim.async_client() as client:
                supervisor = Supervisor(
                    store, client, clock=sim.clock.now, sleep=sim.clock.async_sleep
                )
                return await supervisor.run(jobs)

        started = time.monotonic()
        results = asyncio.run(main())
        real_s = time.monotonic() - started
        simulated_s = sim.clock.elapsed
    # --- what it gives --------------------------------------------------------------------
    verdicts = {stream: (r.state, r.failure, r.rule) for stream, r in results.items()}
    assert verdicts == {
        "job-success": ("SUCCEEDED", None, "completed"),
        "job-crash_loop": ("STALLED", "stalled", "unhealthy_worker"),
        "job-no_capacity": ("NO_CAPACITY", "no_capacity", "queue_grace"),
    }
    assert real_s < 20, real_s
    # the verdicts are judged on simulated time: the graces (240 s, 300 s) really passed,
    # and the three watches shared the clock rather than each pushing it (3 x 300 s)
    assert 300 <= simulated_s < 450, simulated_s
    for stream in verdicts:
        assert replay(store.read(stream)).verdict is not None


def test_a_manual_clock_moves_to_the_earliest_wake_up_of_concurrent_sleepers():
    clock = SimClock(speed=0, start=1000.0, settle_s=0.002)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float, times: int) -> None:
        for _ in range(times):
            await clock.async_sleep(seconds)
            woke.append((name, clock.now()))

    async def main():
        await asyncio.gather(sleeper("a", 10, 3), sleeper("b", 25, 1), sleeper("c", 0, 1))

    asyncio.run(main())
    assert woke == [("c", 1000.0), ("a", 1010.0), ("a", 1020.0), ("b", 1025.0), ("a", 1030.0)]
    assert clock.now() == 1030.0  # the longest sleep, not the sum of all (55 s)
    assert clock._sleepers == set()


def test_a_cancelled_sleeper_leaves_no_wake_up_behind():
    clock = SimClock(speed=0, start=0.0, settle_s=0.05)

    async def main():
        long = asyncio.create_task(clock.async_sleep(1000))
        await asyncio.sleep(0)  # it registered its wake-up and waits for the others to settle
        assert len(clock._sleepers) == 1
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        await clock.async_sleep(5)

    asyncio.run(main())
    assert clock.now() == 5.0 and clock._sleepers == set()


def test_a_running_clock_sleeps_seconds_over_speed():
    clock = SimClock(speed=1000)

    async def main() -> float:
        started = time.monotonic()
        await clock.async_sleep(100)  # 0.1 real seconds
        return time.monotonic() - started

    assert 0.09 <= asyncio.run(main()) < 2.0


class _SlowClient:
    """The client with every call taking `delay_s` real seconds more (a loaded machine)."""

    def __init__(self, client: AsyncRunpodClient, delay_s: float):
        self.client, self.delay_s = client, delay_s

    async def job_status(self, *args: object) -> object:
        await asyncio.sleep(self.delay_s)
        return await self.client.job_status(*args)

    async def endpoint_health(self, *args: object) -> object:
        await asyncio.sleep(self.delay_s)
        return await self.client.endpoint_health(*args)


def _watch_three(delay_s: float) -> tuple[dict[str, tuple[str | None, float]], float]:
    """The README's three jobs under a Supervisor whose calls each take `delay_s` more real
    time: each job's (rule, verdict time after the start) and the simulated time spent."""
    store = MemoryStore()
    with Simulator(speed=0) as sim:
        origin = sim.clock.start
        jobs = []
        for scenario in ("success", "crash_loop", "no_capacity"):
            endpoint = sim.add_endpoint(f"flash-{scenario}", scenario=scenario)
            handle = JobHandle(endpoint, f"flash-{scenario}", sim.submit(endpoint, {}))
            jobs.append(JobSpec(handle, stream=f"job-{scenario}"))

        async def main() -> dict[str, object]:
            async with sim.async_client() as client:
                supervisor = Supervisor(
                    store,
                    _SlowClient(client, delay_s),
                    clock=sim.clock.now,
                    sleep=sim.clock.async_sleep,
                    spread=1.0,  # first polls spread over an interval: the watches interleave
                    rng=random.Random(7),
                )
                return await supervisor.run(jobs)

        results = asyncio.run(main())
        simulated_s = sim.clock.elapsed
    out = {}
    for stream, r in results.items():
        verdict = replay(store.read(stream)).verdict
        assert verdict is not None, (stream, r)
        out[stream] = (verdict.rule, verdict.at - origin)
    return out, simulated_s


def test_slow_calls_on_a_manual_clock_change_no_verdict_and_no_simulated_time():
    """The manual clock waits for a watch busy with I/O (here every call takes 50 ms of real
    time, five times `settle_s`): a loaded machine sees the same simulated times as an idle
    one, so the verdicts and their times do not depend on the machine's speed. (Before, the
    other watches' sleeps moved the clock during a slow call; on a loaded CI machine the
    README's crash-looping job once reached FAILED before its unhealthy grace ran out.)"""
    idle, idle_s = _watch_three(0.0)
    loaded, loaded_s = _watch_three(0.05)
    assert {s: rule for s, (rule, _) in loaded.items()} == {
        "job-success": "completed",
        "job-crash_loop": "unhealthy_worker",
        "job-no_capacity": "queue_grace",
    }
    assert loaded == idle and loaded_s == idle_s
