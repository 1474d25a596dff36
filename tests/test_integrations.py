"""What every orchestrator integration shares (`flashfsm.integrations`), without any
orchestrator: the run id goes into the spec, an orchestrator's cancel asked between the
watch's waits or arriving as its stop exception is recorded by the orchestrator and carried
out, a stop that is not a cancel leaves the run to resume, and an integration whose
orchestrator is missing says which extra installs it. The orchestrators' own runs are in
tests/integrations/ (each skipped without its orchestrator).
"""

from __future__ import annotations

import importlib
import itertools
import sys
from typing import Any

import pytest

from flashfsm import Candidate, MemoryStore, RunResult
from flashfsm.events.models import (
    CancelRequested,
    EndpointDeleted,
    EndpointDeployed,
    JobCancelled,
    JobQueued,
    RunConcluded,
    WatchStarted,
)
from flashfsm.integrations import named_spec, supervise, watching_sleep
from flashfsm.naming import stable_run_id
from flashfsm.submit import RunSpec
from tests.test_deploy import sim_factory
from tests.test_submit import scripted, spec

RUN_ID = stable_run_id("prefect", flow_run_id="5f0c3e4e-0000-4000-8000-000000000001", name="sft")
STREAM = f"run-{RUN_ID}-s0"


class Stopped(BaseException):
    """What an orchestrator raises into running code to stop it (TerminationSignal, …)."""


@pytest.fixture
def make_sim(monkeypatch):
    yield from sim_factory(monkeypatch)


def drive(sim: Any, store: MemoryStore, tmp_path: Any, **options: Any) -> dict[str, Any]:
    """`supervise` of a 90-second `success` training on the simulator's manual clock."""
    return supervise(
        named_spec(spec(), RUN_ID),
        orchestrator="prefect",
        store=store,
        clock=sim.clock.now,
        sleep=options.pop("sleep", sim.clock.sleep),
        deployer=scripted(sim, "success"),
        hub_options={"cache_dir": tmp_path / "hf"},
        capacity_memory=False,
        **options,
    )


def count(store: MemoryStore, *classes: type) -> int:
    return sum(isinstance(e, classes) for e in store.read(STREAM))


def test_named_spec_puts_the_orchestrator_s_run_id_into_the_spec():
    fields = {"gpu_class": "H100", "worker_image": "team/trainer:3"}
    assert named_spec(fields, RUN_ID) == RunSpec(run_id=RUN_ID, **fields)
    assert named_spec(RunSpec(run_id="placeholder", **fields), RUN_ID).run_id == RUN_ID
    with pytest.raises(ValueError, match="gpu_class"):
        named_spec({"worker_image": "team/trainer:3"}, RUN_ID)


def test_a_run_no_one_cancels_returns_its_result_as_plain_json(make_sim, tmp_path):
    sim, store = make_sim(), MemoryStore()
    asked: list[float] = []

    def cancel_requested() -> None:
        asked.append(sim.clock.now())

    result = drive(sim, store, tmp_path, cancel_requested=cancel_requested, check_every_s=30.0)
    assert RunResult.from_dict(result).to_dict() == result and result["ok"]
    assert result["stream"] == STREAM and result["metrics"]["reward"] == 0.82
    assert len(asked) >= 2  # asked during the waits, at most every 30 s of the run's clock
    assert all(b - a >= 30.0 for a, b in itertools.pairwise(asked))


def test_a_cancel_the_orchestrator_asks_for_mid_watch_is_recorded_by_it_and_carried_out(
    make_sim, tmp_path
):
    sim, store = make_sim(), MemoryStore()

    def cancel_requested() -> str | None:
        return "flow run cancelled" if count(store, JobQueued) else None

    result = drive(sim, store, tmp_path, cancel_requested=cancel_requested, check_every_s=5.0)
    assert (result["ok"], result["failure"], result["attempts"]) == (False, "cancelled", 1)
    [cancel] = [e for e in store.read(STREAM) if isinstance(e, CancelRequested)]
    assert (cancel.by, cancel.reason) == ("prefect", "flow run cancelled")
    assert count(store, JobCancelled) == 1 and count(store, EndpointDeleted) == 1
    assert sim.endpoints() == [] and [j.status for j in sim.world.jobs.values()] == ["CANCELLED"]


def stop_at(sim: Any, nth: int) -> Any:
    """A sleep on the simulator's clock whose `nth` call raises `Stopped`."""
    calls: list[float] = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == nth:
            raise Stopped
        sim.clock.sleep(seconds)

    return sleep


def test_a_stop_that_is_a_cancel_cancels_the_run_before_it_goes_on(make_sim, tmp_path):
    sim, store = make_sim(), MemoryStore()
    cancelling = {"now": False}

    def cancel_requested() -> str | None:
        return "terminated by the UI" if cancelling["now"] else None

    sleeps = stop_at(sim, 4)

    def sleep(seconds: float) -> None:
        if count(store, JobQueued):
            cancelling["now"] = True  # the orchestrator marks the run, then stops it
        sleeps(seconds)

    with pytest.raises(Stopped):
        drive(
            sim,
            store,
            tmp_path,
            sleep=sleep,
            cancel_requested=cancel_requested,
            stopped_by=(Stopped,),
            check_every_s=1000.0,  # (not asked between waits: the stop brings the cancel)
        )
    run = store.read(STREAM)
    assert [e.by for e in run if isinstance(e, CancelRequested)] == ["prefect"]
    assert isinstance(run[-1], RunConcluded) and run[-1].failure == "cancelled"
    assert sim.endpoints() == [] and [j.status for j in sim.world.jobs.values()] == ["CANCELLED"]


def test_a_stop_that_is_not_a_cancel_records_nothing_and_calling_again_resumes(make_sim, tmp_path):
    sim, store = make_sim(), MemoryStore()
    with pytest.raises(Stopped):
        drive(
            sim,
            store,
            tmp_path,
            sleep=stop_at(sim, 4),
            cancel_requested=lambda: None,
            stopped_by=(Stopped,),
        )
    assert count(store, JobQueued) == 1 and count(store, RunConcluded, CancelRequested) == 0
    assert len(sim.endpoints()) == 1  # left running, as a retry will find it

    result = drive(sim, store, tmp_path, cancel_requested=lambda: None, stopped_by=(Stopped,))
    assert result["ok"] and count(store, EndpointDeployed) == 1 and count(store, JobQueued) == 1
    [queued] = [e for e in store.read(STREAM) if isinstance(e, JobQueued)]
    watches = [e for e in store.read(queued.job_stream) if isinstance(e, WatchStarted)]
    assert [w.reattach for w in watches] == [False, True]
    assert len(sim.requests_for("run")) == 1  # one submit


def test_watching_sleep_asks_at_most_every_check_and_cancels_once():
    now = {"t": 0.0}
    answers = iter([None, None, "stop", "stop"])
    asked: list[float] = []
    cancels: list[str] = []

    def cancel_requested() -> str | None:
        asked.append(now["t"])
        return next(answers)

    def sleep(seconds: float) -> None:
        now["t"] += seconds

    wait = watching_sleep(
        cancel_requested, cancels.append, check_every_s=5.0, sleep=sleep, clock=lambda: now["t"]
    )
    wait(12.0)
    wait(12.0)
    assert asked == [0.0, 5.0, 10.0] and cancels == ["stop"] and now["t"] == 24.0


@pytest.mark.parametrize(("module", "extra"), [("prefect", "prefect"), ("dagster", "dagster")])
def test_an_integration_without_its_orchestrator_names_the_extra(monkeypatch, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, f"flashfsm.integrations.{module}", raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'flashfsm\[{extra}\]'"):
        importlib.import_module(f"flashfsm.integrations.{module}")


def test_candidates_default_to_the_spec_s_gpu_class():
    from flashfsm.integrations import candidates_for

    assert candidates_for(spec(), None) == [Candidate(gpu_class="H100")]
    walk = [Candidate(gpu_class="L4", price_per_hour=0.4)]
    assert candidates_for(spec(), walk) == walk


def test_installing_flashfsm_alone_pulls_no_orchestrator():
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    required = {Requirement(r).name for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    for orchestrator in ("prefect", "dagster"):
        assert orchestrator not in required
        assert [Requirement(r).name for r in extras[orchestrator]] == [orchestrator]
        dev = {Requirement(r).name for r in extras["dev"]}
        assert orchestrator not in dev  # `pip install -e '.[dev]' && pytest` skips its tests
