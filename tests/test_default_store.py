"""Without `store=`, `poll_job` and `supervise_run` keep their streams in the durable default
store (`default_store_url()`), so a process SIGKILLed mid-watch and called again resumes the
same stream; what a call opens (the default store, a URL) it closes, a store object stays the
caller's, and `memory://` asks for a store with nothing to resume."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from flashfsm import Candidate, MemoryStore, poll_job, supervise_run, verify
from flashfsm.adapters.stores import SCHEMES, default_store_url
from flashfsm.adapters.urls import url_path
from flashfsm.events.models import Concluded, EndpointDeployed, JobQueued, RunConcluded
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import replay_run
from flashfsm.shell import opened_store
from tests.conftest import VirtualClock
from tests.crash_scenarios import HANDLE, SCENARIOS, T0
from tests.reattach_support import (
    JOB_STREAM,
    RUN,
    RUN_STREAM,
    WATCH_STREAM,
    OneAttempt,
    SignalAfterPolls,
    calls_made,
    supervise_in_child,
    watch_in_child,
)
from tests.store_support import Verdict, check_reattached, read_stream, run_in_child, verdict_of


def reference() -> tuple[Verdict, int]:
    """The success job's verdict and log length, watched once without a crash."""
    clock, store = VirtualClock(T0), MemoryStore()
    poll_job(
        HANDLE,
        client=SignalAfterPolls(clock, None),
        clock=clock,
        sleep=clock.sleep,
        store=store,
        **SCENARIOS["success"].policy,
    )
    events = store.read(WATCH_STREAM)
    return verdict_of(events), len(events)


def test_each_test_has_a_default_store_of_its_own_never_the_users(default_store, tmp_path_factory):
    assert default_store_url() == default_store
    assert Path(url_path(default_store)).is_relative_to(tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("polls", [1, 4])
def test_poll_job_without_a_store_sigkilled_mid_watch_and_called_again_resumes_its_stream(polls):
    expected, length = reference()
    assert run_in_child(watch_in_child, polls) == -signal.SIGKILL
    cut = read_stream(default_store_url(), WATCH_STREAM)
    assert cut and not isinstance(cut[-1], Concluded)  # killed mid-watch

    assert run_in_child(watch_in_child) == 0
    events = read_stream(default_store_url(), WATCH_STREAM)
    assert events[: len(cut)] == cut
    check_reattached(events, expected, len(cut), length)  # one reattach, the same verdict


@pytest.mark.parametrize("polls", [1, 4])
def test_supervise_run_without_a_store_sigkilled_mid_watch_and_called_again_resumes_its_run(
    polls, tmp_path
):
    calls = tmp_path / "calls"
    assert run_in_child(supervise_in_child, calls, polls) == -signal.SIGKILL
    state = replay_run(read_stream(default_store_url(), RUN_STREAM))
    assert state.current is not None and state.current.ended is None  # killed mid-watch
    assert replay(read_stream(default_store_url(), JOB_STREAM)).verdict is None
    assert calls_made(calls) == ["deploy", "submit"]

    assert run_in_child(supervise_in_child, calls) == 0
    run = read_stream(default_store_url(), RUN_STREAM)
    assert isinstance(run[-1], RunConcluded) and run[-1].ok
    assert calls_made(calls) == ["deploy", "submit", "delete"]  # one deploy, one submit
    assert [type(e) for e in run].count(EndpointDeployed) == 1
    assert [type(e) for e in run].count(JobQueued) == 1
    job = read_stream(default_store_url(), JOB_STREAM)
    expected, length = reference()
    check_reattached(job, expected, 0, length)  # one reattach, one verdict, the same one
    assert [type(e) for e in job].count(Concluded) == 1 and verify(job).ok


# --- who closes the store ------------------------------------------------------------------------


class TrackedStore(MemoryStore):
    """A memory store that says whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.fixture
def tracked(monkeypatch: pytest.MonkeyPatch) -> list[TrackedStore]:
    """Every store opened from a `tracked://` URL, in order (a scheme of the test's own)."""
    opened: list[TrackedStore] = []

    def factory(url: str, read_only: bool) -> TrackedStore:
        opened.append(TrackedStore())
        return opened[-1]

    monkeypatch.setitem(SCHEMES, "tracked", factory)
    return opened


def watch(**store: Any) -> None:
    clock = VirtualClock(T0)
    poll_job(HANDLE, client=SignalAfterPolls(clock, None), clock=clock, sleep=clock.sleep, **store)


def supervise(tmp_path: Path, **store: Any) -> None:
    clock = VirtualClock(T0)
    adapters = OneAttempt(clock, tmp_path / "calls", None, signal.SIGKILL)
    result = supervise_run(
        RUN, [Candidate(gpu_class="A")], adapters, clock=clock, sleep=clock.sleep, **store
    )
    assert result.ok


def test_a_store_the_call_opens_it_closes_and_a_store_object_stays_open(
    tracked, monkeypatch, tmp_path
):
    monkeypatch.setenv("FLASHFSM_STORE", "tracked://default")
    watch()
    watch(store="tracked://url")
    supervise(tmp_path)
    supervise(tmp_path, store="tracked://url")
    assert len(tracked) == 4 and all(store.closed for store in tracked)

    mine = TrackedStore()
    watch(store=mine)
    supervise(tmp_path, store=mine)
    assert not mine.closed and replay_run(mine.read(RUN_STREAM)).done


def test_a_store_opened_for_a_call_is_closed_when_the_call_is_interrupted(tracked):
    with pytest.raises(KeyboardInterrupt), opened_store("tracked://url"):
        raise KeyboardInterrupt
    assert tracked[0].closed


def test_memory_asks_for_a_fresh_store_and_the_default_keeps_the_verdict():
    def fetches(**store: Any) -> int:
        clock = VirtualClock(T0)
        client = SignalAfterPolls(clock, None)
        poll_job(HANDLE, client=client, clock=clock, sleep=clock.sleep, **store)
        return client.made

    assert fetches(store="memory://") > 0
    assert fetches(store="memory://") > 0  # nothing kept: watched again from the start
    assert fetches() > 0
    assert fetches() == 0  # the durable default store holds the verdict: no call
