"""`asupervise_run` and `supervise_run` are one run: the same events, in the same order.

Both drive `RunLoop.steps`; this checks the drivers around it. Each run is played twice on
its own simulator (manual clock from the same start, real HTTP on 127.0.0.1, the Hub
readers): once by `supervise_run` in this thread, once by `asupervise_run` on an event
loop (the attempt's job watched by `RunpodRunAdapters.awatch`: a `Supervisor`). The two
logs — the run's stream and every attempt's job stream — must be equal event for event:
kind, fields and order, times included; only event ids and the simulator's own random ids
(endpoints, jobs, workers) are renamed by first appearance.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashfsm import MemoryStore, RunResult, request_cancel
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.simulator.scenarios import builtin_scenarios
from flashfsm.demo import DEMO_RUNS, GPUS, PHASE, DemoRun, _DemoRunner
from flashfsm.events.models import JobQueued
from flashfsm.runs import asupervise_run

T0 = 1_800_000_000.0
TAG = "0a0a0a0a"
SEED = 0


@contextmanager
def demo_runner(demo: DemoRun) -> Iterator[_DemoRunner]:
    """The demo's adapters for `demo` on a fresh simulator whose clock starts at `T0`."""
    with (
        tempfile.TemporaryDirectory() as cache,
        Simulator(clock=SimClock(speed=0, start=T0)) as sim,
        sim.client() as client,
    ):
        yield _DemoRunner(sim, client, demo, TAG, SEED, cache, MemoryStore())


def by_sync(demo: DemoRun, during: Callable[[_DemoRunner], Any] | None = None) -> list[str]:
    with demo_runner(demo) as runner:
        _hook(runner, during)
        result = runner.supervise()
        return logs(runner, result)


def by_async(demo: DemoRun, during: Callable[[_DemoRunner], Any] | None = None) -> list[str]:
    with demo_runner(demo) as runner:
        _hook(runner, during)
        sim = runner.sim
        adapters = dataclasses.replace(runner.adapters(), asleep=sim.clock.async_sleep)
        result = asyncio.run(
            asupervise_run(
                runner.run_id,
                [GPUS[g] for g in demo.gpus],
                adapters,
                max_retries=2,
                phase=PHASE,
                seed=runner.seed,
                store=runner.store,
                stream=runner.stream,
                clock=sim.clock.now,
                sleep=sim.clock.async_sleep,
                capacity_memory=False,
            )
        )
        return logs(runner, result)


def _hook(runner: _DemoRunner, during: Callable[[_DemoRunner], Any] | None) -> None:
    """Call `during(runner)` once the first job is queued (a cancel from elsewhere)."""
    if during is None:
        return
    store = runner.store
    original = store.append

    def append(stream: str, events: Any, expected_seq: int | None = None) -> Any:
        answer = original(stream, events, expected_seq)
        if any(isinstance(e, JobQueued) for e in events):
            during(runner)
        return answer

    store.append = append  # type: ignore[method-assign]  (our own test store)


ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(-u1)?"  # jobs
    r"|\b[0-9a-z]{14}\b"  # endpoints
    r"|\bw-[0-9a-f]{8}\b"  # workers
)


def logs(runner: _DemoRunner, result: RunResult) -> list[str]:
    """The run's events and its attempts' job events, as JSON lines with ids renamed."""
    store = runner.store
    streams = [runner.stream] + [
        e.job_stream for e in store.read(runner.stream) if isinstance(e, JobQueued)
    ]
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"<id{len(names)}>")

    lines = [json.dumps(result.to_dict(), sort_keys=True)]
    for stream in streams:
        for event in store.read(stream):
            data = event.model_dump(mode="json", exclude={"id"})
            lines.append(ID.sub(rename, json.dumps(data, sort_keys=True)))
    return lines


@pytest.mark.parametrize("demo", DEMO_RUNS, ids=[d.name for d in DEMO_RUNS])
def test_every_demo_run_records_the_same_events_whichever_driver(demo: DemoRun) -> None:
    expected = by_sync(demo)
    assert len(expected) > 10  # a whole run: deploys, submits, watches, cleanup
    assert by_async(demo) == expected


def cancel(runner: _DemoRunner) -> None:
    request_cancel(runner.store, runner.stream, by="test", clock=runner.sim.clock.now)


def test_a_cancel_from_elsewhere_winds_the_run_down_alike() -> None:
    demo = DEMO_RUNS[0]
    expected = by_sync(demo, during=cancel)
    assert '"ok": false' in expected[0] and "cancelled" in expected[0]
    assert by_async(demo, during=cancel) == expected


SCENARIOS = sorted(builtin_scenarios())
scripts = st.lists(st.sampled_from(SCENARIOS), min_size=1, max_size=3)
gpu_lists = st.lists(st.sampled_from(sorted(GPUS)), min_size=1, max_size=2, unique=True)


# Each example plays a whole run twice: a twentieth of the profile's examples (8 at least).
@settings(
    max_examples=max(8, settings.default.max_examples // 20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(gpus=gpu_lists, scenarios=scripts)
def test_async_driver_records_the_sync_drivers_events_for_any_outcome_script(
    gpus: list[str], scenarios: list[str]
) -> None:
    demo = DemoRun("random", "", tuple(gpus), tuple(scenarios))
    assert by_async(demo) == by_sync(demo)
