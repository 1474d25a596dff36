"""A control plane SIGKILLed in the middle of attempt 2 resumes that attempt's watch by replay.

The run's adapters are scripted but real where it matters: each attempt's job is watched
by `poll_job` in its own stream, answers depend only on virtual time, and the restarted
process resumes its clock at the log's last event, so an interrupted run and an
uninterrupted one must end alike.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import pytest

from flashfsm import JobHandle, poll_job, stall_kwargs, verify
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Candidate,
    RunConcluded,
    WatchStarted,
)
from flashfsm.fsm.run import replay_run
from flashfsm.runs import Deployed, supervise_run
from tests.conftest import VirtualClock

FORK = multiprocessing.get_context("fork")
T0 = 5_000_000.0
CANDIDATES = [
    Candidate(gpu_class="A", price_per_hour=1.0),
    Candidate(gpu_class="B", price_per_hour=2.0),
    Candidate(gpu_class="C", price_per_hour=3.0),
]
#: attempt -> the job's status by seconds since its submission
SCRIPTS = {
    0: lambda t: {"status": "IN_QUEUE"},  # no capacity: the queue grace ends it
    1: lambda t: {"status": "IN_PROGRESS"} if t < 40 else {"status": "TIMED_OUT"},
    2: lambda t: (
        {"status": "IN_QUEUE"}
        if t < 30
        else {"status": "IN_PROGRESS"}
        if t < 200
        else {"status": "COMPLETED", "output": {"loss": 0.3}}
    ),
}


class Adapters:
    def __init__(self, clock: VirtualClock):
        self.clock = clock

    def deploy(self, run, attempt, record) -> Deployed:
        return Deployed(f"ep-{attempt.started.attempt}", attempt.started.endpoint_name)

    def submit(self, run, attempt) -> tuple[str, float]:
        return f"job-{attempt.started.attempt}", self.clock()

    def watch(self, run, attempt, store, stop):
        script, submitted = SCRIPTS[attempt.started.attempt], attempt.submitted_at
        clock = self.clock

        class Client:
            def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
                return script(clock() - submitted)

            def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
                return {}

        handle = JobHandle(
            attempt.endpoint_id,
            attempt.started.endpoint_name,
            attempt.job_id,
            on_last_gpu=attempt.started.on_last_gpu,
            submitted_at=submitted,
        )
        return poll_job(
            handle,
            client=Client(),
            clock=clock,
            sleep=clock.sleep,
            store=store,
            stream=attempt.job_stream,
            stop=stop,
            **stall_kwargs(attempt.started.on_last_gpu),
        )

    def cancel_job(self, run, attempt) -> bool:
        return True

    def delete_endpoint(self, run, endpoint_id: str) -> bool:
        return True


class KillInAttempt2:
    """A store proxy that SIGKILLs the process once attempt 2's job stream holds `k` events."""

    def __init__(self, store: Any, k: int | None):
        self._store, self._k = store, k

    def append(self, stream: str, events: Any, expected_seq: int) -> None:
        self._store.append(stream, events, expected_seq)
        if self._k is not None and stream.endswith("-a2") and expected_seq + len(events) >= self._k:
            os.kill(os.getpid(), signal.SIGKILL)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def control_plane(url: str, kill_at: int | None) -> None:
    store = open_store(url)
    last = max((e.at for s in store.streams() for e in store.read(s)), default=T0)
    clock = VirtualClock(last)
    try:
        supervise_run(
            "r",
            CANDIDATES,
            Adapters(clock),
            max_retries=2,
            store=KillInAttempt2(store, kill_at),
            clock=clock,
            sleep=clock.sleep,
        )
    finally:
        store.close()


def _run(url: str, kill_at: int | None) -> int:
    proc = FORK.Process(target=control_plane, args=(url, kill_at))
    proc.start()
    proc.join(60)
    assert not proc.is_alive()
    return proc.exitcode


def _outcome(url: str):
    store = open_store(url)
    try:
        run = store.read("run-r")
        jobs = {s: store.read(s) for s in store.streams() if s.startswith("job-")}
    finally:
        store.close()
    concluded = run[-1]
    assert isinstance(concluded, RunConcluded)
    attempts = [
        (e.attempt, e.gpu_class, e.on_last_gpu) for e in run if isinstance(e, AttemptStarted)
    ]
    ended = [(e.attempt, e.ok, e.failure, e.rule) for e in run if isinstance(e, AttemptEnded)]
    verdict_times = {s: events[-1].at for s, events in jobs.items()}
    return (
        (concluded.ok, concluded.failure, concluded.attempts, attempts, ended, verdict_times),
        run,
        jobs,
    )


@pytest.mark.parametrize("kill_at", [3, 5, 9])
def test_a_control_plane_killed_mid_attempt_2_resumes_its_watch_and_ends_alike(tmp_path, kill_at):
    reference_url = f"sqlite:///{tmp_path}/reference.db"
    assert _run(reference_url, None) == 0
    expected, _, _ = _outcome(reference_url)
    assert expected[0] is True and [a[1] for a in expected[3]] == ["A", "B", "C"]

    url = f"sqlite:///{tmp_path}/killed.db"
    assert _run(url, kill_at) == -signal.SIGKILL
    store = open_store(url)
    try:
        state = replay_run(store.read("run-r"))
    finally:
        store.close()
    assert state.current is not None and state.current.started.attempt == 2
    assert state.current.ended is None  # killed while attempt 2 was being watched

    assert _run(url, None) == 0
    got, run, jobs = _outcome(url)
    assert got == expected
    assert sum(isinstance(e, AttemptStarted) for e in run) == 3  # the walk did not start over
    resumed = jobs["job-r-a2"]
    assert sum(isinstance(e, WatchStarted) and e.reattach for e in resumed) == 1
    for events in jobs.values():
        assert verify(events).ok
