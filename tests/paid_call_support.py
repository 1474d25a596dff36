"""A run killed between a paid call and its record, on the simulator: the helpers of
tests/test_paid_call_crashes.py.

The driver is the real thing: `supervise_run` in a forked process, with `RunpodRunAdapters`
over loopback HTTP to a `Simulator` in the test's process (deploys are the simulator's
GraphQL `saveEndpoint`, as runpod-flash makes them; submits, cancels, deletes and lookups
the REST client's), on the simulator's manual clock over its control route, and a SQLite
store file. `Crashing` wraps those adapters: right after the paid call named by its
`CrashPoint` returns (or, `before=True`, right before it is made: the intent is recorded,
the call not made) the process SIGKILLs itself, so the driver never records the answer.
Then a new process calls `supervise_run` again, same run id, same store, to the end.

What was paid is read from the simulator's own records (`Bill`), not from the log.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashfsm import Candidate, request_cancel, supervise_run
from flashfsm.adapters.runpod import RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.events.models import CancelRequested, JobQueued
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, Recorder, RunpodRunAdapters
from tests.sim_run_support import graphql_deployer, sim_client
from tests.store_support import read_stream
from tests.test_crash_simulator import RemoteSimClock

RUN = "paid"
STREAM = f"run-{RUN}"
INTERVAL_S = 10.0  # the watch's poll interval (simulated seconds)


@dataclass(frozen=True)
class Walk:
    """A run's shape: its candidates (GPU classes, in price order) and the scenario each
    candidate's jobs play on the simulator; `cancel_after_s`: the run is cancelled
    (`request_cancel`, from the driving process) mid-watch, that long after its first
    submit."""

    name: str
    scenarios: tuple[tuple[str, str], ...]  # (gpu class, scenario), cheapest first
    cancel_after_s: float | None = None

    @property
    def candidates(self) -> list[Candidate]:
        """The run's candidates, each a dollar an hour more than the one before."""
        return [
            Candidate(gpu_class=gpu, price_per_hour=1.0 + n)
            for n, (gpu, _) in enumerate(self.scenarios)
        ]

    def scenario(self, gpu_class: str) -> str:
        """The scenario a job on `gpu_class` plays."""
        return dict(self.scenarios)[gpu_class]


@dataclass(frozen=True)
class CrashPoint:
    """Where the driver is killed: right after (or just before) its `call` ("deploy",
    "submit", "cancel" or "delete") for attempt `attempt` (a delete's attempt: the one
    whose endpoint it deletes). `call="new"`: after the first paid call no process was
    killed after before (one a line in the file `ledger`: a call is its kind, its
    attempt's GPU class, and the endpoint it deletes), so processes killed in turn each die
    one step further, the steps of a recovery included (a redo's calls, on the GPU class
    of the attempt it redoes, are not new: each redo is not killed again)."""

    call: str
    attempt: int = -1
    before: bool = False
    ledger: str | None = None

    def __str__(self) -> str:
        attempt = "" if self.attempt < 0 else f"-a{self.attempt}"
        return f"{'before' if self.before else 'after'}-{self.call}{attempt}"

    def hits(self, call: str, attempt: int, key: str) -> bool:
        """Whether the paid `call` of `attempt` (`key`: the call itself) is this crash
        point's (a `new` one notes it in its ledger)."""
        if self.call != "new":
            return (self.call, self.attempt) == (call, attempt)
        assert self.ledger is not None
        ledger = Path(self.ledger)
        if key in (ledger.read_text().split() if ledger.exists() else []):
            return False
        with ledger.open("a") as lines:
            lines.write(key + "\n")
        return True


@dataclass(frozen=True)
class Platform:
    """What a driving process needs to reach the simulator (picklable, fork-safe)."""

    url: str
    key: str


class Crashing:
    """Run adapters that SIGKILL their process around one paid call (see `CrashPoint`);
    everything else (the watch, the lookup) is the wrapped adapters'."""

    def __init__(self, inner: RunpodRunAdapters, crash: CrashPoint | None):
        self.inner, self.crash = inner, crash

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _paid(self, call: str, attempt: Attempt | None, make: Any, target: str = "") -> Any:
        """`make()` (the paid call), with the kill before or after it when it is the one."""
        number = -1 if attempt is None else attempt.started.attempt
        gpu = "" if attempt is None else attempt.started.gpu_class
        crash = self.crash
        hit = crash is not None and crash.hits(call, number, f"{call}:{gpu}:{target}")
        if hit and crash is not None and crash.before:
            os.kill(os.getpid(), signal.SIGKILL)
        answer = make()
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        return answer

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        """The inner deploy (the platform creates the endpoint), then maybe the kill."""
        return self._paid("deploy", attempt, lambda: self.inner.deploy(run, attempt, record))

    def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
        """The inner submit (`/run`), then maybe the kill."""
        return self._paid("submit", attempt, lambda: self.inner.submit(run, attempt))

    def cancel_job(self, run: RunState, attempt: Attempt) -> bool:
        """The inner cancel, then maybe the kill."""
        return self._paid("cancel", attempt, lambda: self.inner.cancel_job(run, attempt))

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        """The inner delete, then maybe the kill (its attempt: the endpoint's)."""
        owner = next((a for a in run.attempts if a.endpoint_id == endpoint_id), None)
        delete = lambda: self.inner.delete_endpoint(run, endpoint_id)  # noqa: E731
        return self._paid("delete", owner, delete, endpoint_id)


class CancelMidWatch:
    """A RunPod client that, at a status fetch `after_s` or more after the run's first
    submit, asks the run to stop (`request_cancel` on the store) unless it has been asked
    already: the cancel lands mid-watch, whichever process watches then."""

    def __init__(self, client: RunpodClient, after_s: float, store_url: str, clock: Any):
        self.client, self.after_s, self.store_url, self.clock = client, after_s, store_url, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        """The status, after the cancel request when it is due."""
        log = read_stream(self.store_url, STREAM)
        queued = [e.submitted_at for e in log if isinstance(e, JobQueued)]
        asked = any(isinstance(e, CancelRequested) for e in log)
        if queued and not asked and self.clock() >= queued[0] + self.after_s:
            request_cancel(self.store_url, STREAM, by="test", clock=self.clock)
        return self.client.job_status(endpoint_id, job_id)


def sim_adapters(walk: Walk, platform: Platform, clock: RemoteSimClock) -> RunpodRunAdapters:
    """`RunpodRunAdapters` on the simulator: deploys by GraphQL `saveEndpoint` (idle timeout
    5 s, one worker), each job's scenario by its attempt's GPU class, no Hub readers."""
    client = sim_client(platform.url, platform.key, clock.sleep)
    deploy = graphql_deployer(platform.url, platform.key)

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        return {"scenario": walk.scenario(attempt.started.gpu_class)}

    return RunpodRunAdapters(
        client,
        deploy,
        job_input,
        interval_s=INTERVAL_S,
        clock=clock,
        sleep=clock.sleep,
    )


def drive(walk: Walk, platform: Platform, store_url: str, crash: CrashPoint | None) -> None:
    """`supervise_run` of `walk` to its end (or to the crash), in this process."""
    clock = RemoteSimClock(platform.url)
    adapters = sim_adapters(walk, platform, clock)
    try:
        if walk.cancel_after_s is not None:
            adapters.client = CancelMidWatch(adapters.client, walk.cancel_after_s, store_url, clock)
        supervise_run(
            RUN,
            walk.candidates,
            Crashing(adapters, crash),
            max_retries=2,
            store=store_url,
            clock=clock,
            sleep=clock.sleep,
            capacity_memory=False,
        )
    finally:
        adapters.client.close()
        clock.close()


@dataclass
class Bill:
    """What the simulator's own records say the run paid for and left behind."""

    created: Counter[str] = field(default_factory=Counter)  # endpoints created, by name
    jobs: Counter[str] = field(default_factory=Counter)  # jobs submitted, by endpoint name
    alive: list[str] = field(default_factory=list)  # endpoints alive now, by name
    worker_s: float = 0.0  # worker-seconds billed
    cold_start_s: float = 0.0  # the longest start-up of a worker that took a job
    completed: int = 0  # jobs that trained to COMPLETED


def bill(sim: Simulator) -> Bill:
    """The run's bill, from the simulator's own records: its usage (every endpoint ever
    created, with its jobs; every worker's billed seconds), each job's status, and each
    worker's pickup (for the cold start)."""
    usage = sim.usage()
    got = Bill(worker_s=usage.worker_seconds)
    for endpoint in usage.endpoints:
        got.created[endpoint.name] += 1
        got.jobs[endpoint.name] += endpoint.submitted
        got.completed += sum(sim.job(job).status == "COMPLETED" for job in endpoint.jobs)
    got.alive = [endpoint.name for endpoint in usage.alive]
    for worker in sim.workers():
        if worker["picked_up_at"] is not None:
            start = worker["picked_up_at"] - worker["started_at"]
            got.cold_start_s = max(got.cold_start_s, start)
    return got
