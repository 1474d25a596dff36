"""Interrupts are a choice: `supervise_run(on_interrupt=...)`.

"cancel" (the default, the CLI's) makes a Ctrl-C cancel the run and wind it down; "detach"
makes it record, cancel and delete nothing, so calling again resumes the run with no second
deploy or submit; anything else is refused before anything is opened or recorded. And what
each signal really does to a `supervise_run` or `poll_job` process (docs/guarantees.md's
table): SIGINT under either choice, SIGTERM (Python's default handler: the process ends at
once) and SIGKILL, each followed by calling again.
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Any

import pytest

from flashfsm import Candidate, MemoryStore, open_store, request_cancel, supervise_run
from flashfsm.events.models import (
    CancelRequested,
    Concluded,
    EndpointDeployed,
    JobCancelled,
    JobQueued,
    RunConcluded,
    WatchStarted,
)
from flashfsm.fsm.job import replay
from flashfsm.sigint import EXIT_INTERRUPTED
from flashfsm.submit import supervise_spec
from tests import test_cancel_closes
from tests.reattach_support import (
    JOB_STREAM,
    RUN_STREAM,
    WATCH_STREAM,
    calls_made,
    resumed_clock,
    supervise_in_child,
    watch_in_child,
)
from tests.store_support import read_stream, run_in_child
from tests.test_cancel_closes import JOB, RUN, STREAM, adapters, assert_closed, on_sleep
from tests.test_deploy import sim_factory
from tests.test_submit import run as submit
from tests.test_submit import scripted, spec

world = test_cancel_closes.world  # the simulator, a client on it, a SQLite store


def kinds(events: list[Any], *classes: type) -> int:
    return sum(isinstance(e, classes) for e in events)


def shapes(url: str) -> dict[str, list[tuple[str, float]]]:
    """Each stream of the store at `url` as (kind, time) pairs: what was recorded, and when."""
    store = open_store(url)
    try:
        return {s: [(e.kind, e.at) for e in store.read(s)] for s in store.streams()}
    finally:
        store.close()


def killed_at_the_same_moment(
    monkeypatch: pytest.MonkeyPatch, default_store: str, target: Any, *args: Any
) -> dict[str, list[tuple[str, float]]]:
    """What `target(*args, SIGKILL)` leaves in a default store of its own (`args` ending with
    the status fetches before the signal): the log a SIGKILL at that moment leaves."""
    url = default_store.replace("events.db", "killed.db")
    monkeypatch.setenv("FLASHFSM_STORE", url)
    assert run_in_child(target, *args, signal.SIGKILL) == -signal.SIGKILL
    monkeypatch.setenv("FLASHFSM_STORE", default_store)
    return shapes(url)


def ctrl_c_mid_watch(monkeypatch: pytest.MonkeyPatch, nth: int, store: Any, job: str) -> dict:
    """A Ctrl-C in the simulator clock's `nth` sleep, which must come while `job` is being
    watched; returns the length of each stream of `store` at that moment."""
    seen: dict[str, int] = {}

    def ctrl_c() -> None:
        seen.update({s: len(store.read(s)) for s in store.streams()})
        assert seen.get(job), f"sleep {nth} is not mid-watch"
        raise KeyboardInterrupt

    on_sleep(monkeypatch, nth, ctrl_c)
    return seen


def supervise(sim: Any, client: Any, store: Any, **options: Any) -> Any:
    """test_cancel_closes' run, its deploys counted in `options["deploys"]`."""
    deploys: list[int] = options.pop("deploys", [])
    runs = adapters(sim, client)
    inner = runs.deployer

    def deploy(run: Any, attempt: Any, record: Any) -> Any:
        deploys.append(attempt.started.attempt)
        return inner(run, attempt, record)

    return supervise_run(
        RUN,
        [Candidate(gpu_class="L40S")],
        dataclasses.replace(runs, deployer=deploy),
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        capacity_memory=False,
        **options,
    )


def test_detach_a_ctrl_c_records_cancels_and_deletes_nothing_and_calling_again_finishes_the_run(
    world, monkeypatch
):
    sim, client, store = world
    deploys: list[int] = []
    seen = ctrl_c_mid_watch(monkeypatch, 4, store, JOB)
    with pytest.raises(KeyboardInterrupt):
        supervise(sim, client, store, on_interrupt="detach", deploys=deploys)
    assert {s: len(store.read(s)) for s in store.streams()} == seen  # nothing recorded
    [job] = sim.world.jobs.values()
    assert job.status == "IN_PROGRESS"  # not cancelled: it runs (and bills) on
    [deployed] = [e for e in store.read(STREAM) if isinstance(e, EndpointDeployed)]
    assert deployed.endpoint_id in sim.world.endpoints  # not deleted

    result = supervise(sim, client, store, on_interrupt="detach", deploys=deploys)
    assert result.ok and deploys == [0] and len(sim.world.jobs) == 1  # one deploy, one submit
    run = store.read(STREAM)
    assert kinds(run, CancelRequested, JobCancelled) == 0
    watches = [e for e in store.read(JOB) if isinstance(e, WatchStarted)]
    assert [w.reattach for w in watches] == [False, True]
    assert store.open_streams() == []


def test_cancel_a_ctrl_c_cancels_the_run_and_winds_it_down(world, monkeypatch):
    sim, client, store = world
    ctrl_c_mid_watch(monkeypatch, 4, store, JOB)
    with pytest.raises(KeyboardInterrupt):
        supervise(sim, client, store, on_interrupt="cancel")
    assert_closed(store)
    cancel = next(e for e in store.read(STREAM) if isinstance(e, CancelRequested))
    assert cancel.by == "Ctrl-C"
    [job] = sim.world.jobs.values()
    assert job.status == "CANCELLED" and sim.world.endpoints == {}


@pytest.mark.parametrize("value", ["ignore", "Detach", None, True])
def test_an_unknown_on_interrupt_is_refused_before_anything_is_opened_or_recorded(
    world, tmp_path, value
):
    sim, client, store = world
    with pytest.raises(ValueError, match="on_interrupt must be one of"):
        supervise(sim, client, store, on_interrupt=value)
    url = f"sqlite:///{tmp_path}/never.db"
    with pytest.raises(ValueError, match="on_interrupt must be one of"):
        supervise(sim, client, url, on_interrupt=value)
    assert store.streams() == [] and sim.world.endpoints == {}
    assert not (tmp_path / "never.db").exists()


# --- passed through by supervise_spec and submit_run ----------------------------------------------


@pytest.fixture
def make_sim(monkeypatch):
    yield from sim_factory(monkeypatch)


def walk(sim: Any, store: Any, tmp_path: Any, **options: Any) -> Any:
    return supervise_spec(
        spec(),
        0,
        [Candidate(gpu_class="H100")],
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        deployer=scripted(sim, "success"),
        hub_options={"cache_dir": tmp_path / "hf"},
        **options,
    )


@pytest.mark.parametrize("entry", [walk, submit], ids=["supervise_spec", "submit_run"])
def test_supervise_spec_and_submit_run_pass_on_interrupt_through(
    make_sim, tmp_path, monkeypatch, entry
):
    sim, store = make_sim(), MemoryStore()
    with pytest.raises(ValueError, match="on_interrupt must be one of"):
        entry(sim, store, tmp_path, on_interrupt="ignore")
    assert store.streams() == [] and sim.endpoints() == []

    ctrl_c_mid_watch(monkeypatch, 3, store, "job-run-42-s0-a0")
    with pytest.raises(KeyboardInterrupt):
        entry(sim, store, tmp_path, on_interrupt="detach")
    for stream in store.streams():
        assert kinds(store.read(stream), CancelRequested, JobCancelled) == 0
    assert len(sim.endpoints()) == 1  # left running

    # calling again (an orchestrator's retry) resumes the run: no second deploy or submit
    assert entry(sim, store, tmp_path, on_interrupt="detach").ok
    run = store.read("run-run-42-s0" if entry is walk else "run-run-42-s0-a0")
    assert kinds(run, EndpointDeployed) == 1 and kinds(run, JobQueued) == 1
    assert len(sim.requests_for("run")) == 1


# --- what each signal does, and what calling again does -----------------------------------------


@pytest.mark.parametrize(
    ("signum", "on_interrupt", "exit_code"),
    [
        (signal.SIGINT, "cancel", EXIT_INTERRUPTED),
        (signal.SIGINT, "detach", EXIT_INTERRUPTED),
        (signal.SIGTERM, "cancel", -signal.SIGTERM),
        (signal.SIGTERM, "detach", -signal.SIGTERM),
        (signal.SIGKILL, "cancel", -signal.SIGKILL),
    ],
    ids=["SIGINT-cancel", "SIGINT-detach", "SIGTERM-cancel", "SIGTERM-detach", "SIGKILL"],
)
def test_what_a_signal_does_to_a_supervised_run_and_what_calling_again_does(
    tmp_path, monkeypatch, default_store, signum, on_interrupt, exit_code
):
    calls = tmp_path / "calls"
    killed = killed_at_the_same_moment(
        monkeypatch, default_store, supervise_in_child, tmp_path / "killed-calls", 2
    )
    assert run_in_child(supervise_in_child, calls, 2, signum, on_interrupt) == exit_code
    run = read_stream(default_store, RUN_STREAM)
    cancelled = signum == signal.SIGINT and on_interrupt == "cancel"
    if cancelled:  # the job cancelled and watched to its end, the endpoint deleted
        assert calls_made(calls) == ["deploy", "submit", "cancel", "delete"]
        assert isinstance(run[-1], RunConcluded) and run[-1].failure == "cancelled"
        assert next(e for e in run if isinstance(e, CancelRequested)).by == "Ctrl-C"
    else:  # nothing recorded (no more than a SIGKILL leaves), cancelled or deleted
        assert calls_made(calls) == ["deploy", "submit"]
        assert shapes(default_store) == killed

    assert run_in_child(supervise_in_child, calls, None, signum, on_interrupt) == 0
    run = read_stream(default_store, RUN_STREAM)
    assert kinds(run, RunConcluded) == 1 and kinds(run, EndpointDeployed, JobQueued) == 2
    if cancelled:  # calling again returns the cancelled result, and does nothing
        assert run[-1].failure == "cancelled" and len(calls_made(calls)) == 4
    else:  # calling again resumes the run: no second deploy or submit
        assert run[-1].ok and calls_made(calls) == ["deploy", "submit", "delete"]
        job = read_stream(default_store, JOB_STREAM)
        assert [e.reattach for e in job if isinstance(e, WatchStarted)] == [False, True]


@pytest.mark.parametrize(
    ("signum", "exit_code"),
    [
        (signal.SIGINT, EXIT_INTERRUPTED),
        (signal.SIGTERM, -signal.SIGTERM),
        (signal.SIGKILL, -signal.SIGKILL),
    ],
    ids=["SIGINT", "SIGTERM", "SIGKILL"],
)
def test_a_signal_to_poll_job_records_nothing_and_calling_again_reattaches(
    monkeypatch, default_store, signum, exit_code
):
    killed = killed_at_the_same_moment(monkeypatch, default_store, watch_in_child, 2)
    assert run_in_child(watch_in_child, 2, signum) == exit_code
    assert shapes(default_store) == killed  # no more than a SIGKILL leaves: no verdict
    cut = read_stream(default_store, WATCH_STREAM)
    assert run_in_child(watch_in_child) == 0
    events = read_stream(default_store, WATCH_STREAM)
    assert events[: len(cut)] == cut and kinds(events, Concluded) == 1
    assert [e.reattach for e in events if isinstance(e, WatchStarted)] == [False, True]


def test_an_orchestrators_cancel_of_a_killed_run_is_carried_out_by_the_next_call(
    tmp_path, default_store
):
    calls = tmp_path / "calls"
    assert run_in_child(supervise_in_child, calls, 2) == -signal.SIGKILL
    request_cancel(default_store, RUN_STREAM, by="airflow", clock=resumed_clock(default_store))
    assert calls_made(calls) == ["deploy", "submit"]  # the cancel waits in the log

    assert run_in_child(supervise_in_child, calls) == 0
    run = read_stream(default_store, RUN_STREAM)
    assert isinstance(run[-1], RunConcluded) and run[-1].failure == "cancelled"
    assert next(e for e in run if isinstance(e, CancelRequested)).by == "airflow"
    assert calls_made(calls) == ["deploy", "submit", "cancel", "delete"]
    assert replay(read_stream(default_store, JOB_STREAM)).verdict is not None  # closed
