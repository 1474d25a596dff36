"""One run, one result: every demo run (a walk of GPU classes, each attempt's job a simulator
scenario) driven by `supervise_run` in process and by a fleet replica it was handed to
(`supervise_run(..., detach=True)`) ends alike: the same result, the same attempts, and each
attempt's job the same verdict, rule and decision time, on a SQLite and a PostgreSQL store.

Both drive the run on the simulator's manual clock (the replica's run thread waits with the
clock's `sleep`: `Fleet(run_sleep=...)`), with the demo's adapters, so times must be equal.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from flashfsm import MemoryStore
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.demo import DEMO_RUNS, GPUS, PHASE, DemoRun, _DemoRunner
from flashfsm.events.models import Concluded, RunStarted
from flashfsm.fsm.run import replay_run
from flashfsm.runs import supervise_run
from tests.sim_support import run_replica_until_idle, sync_client

TAG = "0ne0ne"
SEED = 0


@dataclass(frozen=True)
class AttemptVerdict:
    stream: str
    state: str
    rule: str
    after_s: float  # since the run started


@dataclass(frozen=True)
class RunOutcome:
    ok: bool
    failure: str | None
    attempts: tuple[AttemptVerdict, ...]


@contextmanager
def runner(demo: DemoRun, store: Any) -> Iterator[_DemoRunner]:
    with (
        tempfile.TemporaryDirectory() as cache,
        Simulator(speed=0) as sim,
        sync_client(sim) as client,
    ):
        yield _DemoRunner(sim, client, demo, TAG, SEED, cache, store)


def outcome(store: Any, stream: str) -> RunOutcome:
    run_events = store.read(stream)
    started = run_events[0]
    assert isinstance(started, RunStarted)
    run = replay_run(run_events)
    assert run.result is not None, f"{stream} has no result"
    attempts = []
    for attempt in run.attempts:
        job_stream = attempt.started.job_stream
        verdict = store.read(job_stream)[-1]
        assert isinstance(verdict, Concluded), job_stream
        attempts.append(
            AttemptVerdict(job_stream, verdict.state, verdict.rule, verdict.at - started.at)
        )
    return RunOutcome(run.result.ok, run.result.failure, tuple(attempts))


def in_process(demo: DemoRun) -> RunOutcome:
    store = MemoryStore()
    with runner(demo, store) as r:
        r.supervise()
        return outcome(store, r.stream)


@pytest.mark.parametrize("demo", DEMO_RUNS, ids=[d.name for d in DEMO_RUNS])
def test_a_run_handed_to_a_fleet_ends_as_supervise_run_ends_it(
    demo: DemoRun, lease_url: str
) -> None:
    expected = in_process(demo)
    store = open_store(lease_url)
    try:
        with runner(demo, store) as r:
            supervise_run(
                r.run_id,
                [GPUS[g] for g in demo.gpus],
                None,  # type: ignore[arg-type]  (a hand-off deploys nothing)
                max_retries=2,
                phase=PHASE,
                seed=SEED,
                store=store,
                stream=r.stream,
                clock=r.sim.clock.now,
                detach=True,
            )

            def adapters(started: RunStarted, sleep: Any) -> Any:
                made = r.adapters()
                made.sleep = sleep  # (the replica's wait, which stops when it sheds the run)
                return made

            run_replica_until_idle(
                lease_url, r.sim, run_adapters=adapters, run_sleep=r.sim.clock.sleep
            )
            got = outcome(store, r.stream)
    finally:
        store.close()
    assert (got.ok, got.failure) == (expected.ok, expected.failure)
    assert [(a.stream, a.state, a.rule) for a in got.attempts] == [
        (a.stream, a.state, a.rule) for a in expected.attempts
    ]
    for mine, theirs in zip(got.attempts, expected.attempts, strict=True):
        assert mine.after_s == pytest.approx(theirs.after_s, abs=1e-6), (mine, theirs)
