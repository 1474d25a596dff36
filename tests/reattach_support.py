"""A run and a watch on the durable default store (no `store=`), stopped by a signal mid-watch
in a child process and called again: the helpers of tests/test_default_store.py and
tests/test_interrupts.py.

The job is crash_scenarios' `success` (its answers a pure function of virtual time); each
process resumes its virtual clock at the store's last event, as tests/test_run_crash.py does.
The signal comes from the scripted client: `SignalAfterPolls` sends it to its own process
when a status fetch is made after `polls` of them, so it lands mid-watch. Deploys, submits,
cancels and deletions go to a file, one line each: the count survives the process.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from flashfsm import Candidate, JobHandle, PollResult, open_store, poll_job, supervise_run
from flashfsm.adapters.stores import default_store_url
from flashfsm.events.store import EventStore
from flashfsm.runs import Deployed, OnInterrupt
from flashfsm.sigint import EXIT_INTERRUPTED
from tests.conftest import VirtualClock
from tests.crash_scenarios import HANDLE, SCENARIOS, T0, _Client

SCENARIO = SCENARIOS["success"]
RUN, RUN_STREAM, JOB_STREAM = "r", "run-r", "job-r-a0"
WATCH_STREAM = f"job-{HANDLE.job_id}"  # poll_job's default stream for HANDLE


class SignalAfterPolls:
    """The scenario's client; the status fetch after `polls` of them first sends `signum`
    to this process (None: never)."""

    def __init__(self, clock: VirtualClock, polls: int | None, signum: int = signal.SIGKILL):
        self.client, self.polls, self.signum, self.made = _Client(SCENARIO, clock), polls, signum, 0

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.made += 1
        if self.made - 1 == self.polls:  # (counted first: SIGINT raises out of the kill)
            os.kill(os.getpid(), self.signum)
        return self.client.job_status(endpoint_id, job_id)

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return self.client.endpoint_health(endpoint_id)


def resumed_clock(url: str) -> VirtualClock:
    """A virtual clock at the last event the store holds (T0 for an empty one)."""
    store = open_store(url)
    try:
        last = max((e.at for s in store.streams() for e in store.read(s)), default=T0)
    finally:
        store.close()
    return VirtualClock(last)


class OneAttempt:
    """Run adapters: each deploy, submit, cancel and deletion is a line in `calls`; the
    attempt's job is watched by `poll_job` with one `SignalAfterPolls` client (a cancelled
    job's last watch included: the signal comes once)."""

    def __init__(self, clock: VirtualClock, calls: Path, polls: int | None, signum: int):
        self.clock, self.calls = clock, calls
        self.client = SignalAfterPolls(clock, polls, signum)  # one signal, whatever watches

    def note(self, what: str) -> None:
        with self.calls.open("a") as calls:
            calls.write(what + "\n")

    def deploy(self, run: Any, attempt: Any, record: Any) -> Deployed:
        self.note("deploy")
        return Deployed("ep-0", attempt.started.endpoint_name)

    def submit(self, run: Any, attempt: Any) -> tuple[str, float]:
        self.note("submit")
        return "job-0", self.clock()

    def watch(self, run: Any, attempt: Any, store: EventStore, stop: Any) -> PollResult:
        handle = JobHandle(
            attempt.endpoint_id,
            attempt.started.endpoint_name,
            attempt.job_id,
            submitted_at=attempt.submitted_at,
        )
        return poll_job(
            handle,
            client=self.client,
            clock=self.clock,
            sleep=self.clock.sleep,
            store=store,
            stream=attempt.job_stream,
            stop=stop,
        )

    def cancel_job(self, run: Any, attempt: Any) -> bool:
        self.note("cancel")
        return True

    def delete_endpoint(self, run: Any, endpoint_id: str) -> bool:
        self.note("delete")
        return True


def supervise_in_child(
    calls: Path,
    polls: int | None = None,
    signum: int = signal.SIGKILL,
    on_interrupt: OnInterrupt = "cancel",
) -> None:
    """`supervise_run` of one attempt with no `store=`: the durable default store. A
    `KeyboardInterrupt` it raises again exits `EXIT_INTERRUPTED` (130)."""
    clock = resumed_clock(default_store_url())
    try:
        supervise_run(
            RUN,
            [Candidate(gpu_class="A")],
            OneAttempt(clock, calls, polls, signum),
            clock=clock,
            sleep=clock.sleep,
            capacity_memory=False,
            on_interrupt=on_interrupt,
        )
    except KeyboardInterrupt:
        os._exit(EXIT_INTERRUPTED)


def watch_in_child(polls: int | None = None, signum: int = signal.SIGKILL) -> None:
    """`poll_job` of HANDLE with no `store=` (the durable default store) nor `stream=`."""
    clock = resumed_clock(default_store_url())
    try:
        poll_job(
            HANDLE,
            client=SignalAfterPolls(clock, polls, signum),
            clock=clock,
            sleep=clock.sleep,
            **SCENARIO.policy,
        )
    except KeyboardInterrupt:
        os._exit(EXIT_INTERRUPTED)


def calls_made(calls: Path) -> list[str]:
    """The deploys, submits, cancels and deletions made so far, in order."""
    return calls.read_text().split() if calls.exists() else []
