"""A watcher killed mid-training and resumed after RunPod forgot the job: the helpers of
tests/test_late_resume.py.

The driver is the real thing: `supervise_run` with `RunpodRunAdapters` over loopback HTTP
to a `Simulator` in the test's process (deploys are the simulator's GraphQL
`saveEndpoint`, as runpod-flash makes them; submits and status reads the REST client's;
the worker's heartbeat is read from the simulator's Hub with the real Hub readers), on the
simulator's manual clock, and a SQLite store file. The first driver runs in a forked
process and SIGKILLs itself before a given status fetch (`KillAtPoll`), mid-training; the
test then moves the simulator's clock past the training's end and the result's 30-minute
retention, and drives the same run again in its own process, to the end.

The jobs' scenarios: attempt 0 plays the case's (`Case.scenario`), every later attempt
`success`. Custom scenarios (`SCENARIOS`) are registered on the simulator by the test.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from typing import Any

from flashfsm import Candidate, supervise_run
from flashfsm.adapters.hub import hub_readers
from flashfsm.adapters.runpod import RunpodClient
from flashfsm.adapters.simulator import Scenario, Simulator, Step, heartbeat, training
from flashfsm.events.models import HubLocation
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import RunpodRunAdapters, RunResult
from tests.sim_run_support import graphql_deployer, sim_client
from tests.test_crash_simulator import RemoteSimClock

T0 = 1_700_000_000.0
RUN = "late"
STREAM = f"run-{RUN}"
HF_REPO = "flashfsm-late/runs"
PHASE, SEED = "train", 0
HUB = HubLocation(hf_repo=HF_REPO, phase=PHASE, run_id=RUN, seed=SEED)
ARTIFACTS = f"hf://datasets/{HF_REPO}/{PHASE}/{RUN}/seed{SEED}/"
INTERVAL_S = 60.0  # the watch's poll interval (simulated seconds)
KILL_AT_POLL = 5  # the first driver dies before this status fetch (1-based): mid-training
TRAINING_ENDS_S = 1920.0  # the `training` scenario's COMPLETED, after its submission
RETENTION_S = 1800.0  # RunPod keeps a finished job's result this long, then answers 404
RESUME_AFTER_S = TRAINING_ENDS_S + RETENTION_S + 120.0  # past the retention, after submission
_STARTING, _RUNNING = {"initializing": 1}, {"running": 1}

#: The worker's host dies mid-training: its last heartbeat is at a training stage, the job
#: FAILED at 960 s and RunPod forgot it 30 minutes later.
HOST_DIED = Scenario(
    "host_died",
    (
        Step(0, status="IN_QUEUE", workers=_STARTING),
        Step(20, status="IN_PROGRESS", workers=_RUNNING, heartbeat=heartbeat("boot")),
        Step(60, heartbeat=heartbeat("rl_train_start", 0)),
        *training(120, 900, 60),
        Step(960, status="FAILED", error=json.dumps({"error_message": "the host went away"})),
    ),
    "the host dies mid-training: last heartbeat at stage train, FAILED at 960 s",
)
#: The `training` scenario's life, with a worker that writes nothing to the Hub.
SILENT = Scenario(
    "training_silent",
    (
        Step(0, status="IN_QUEUE", workers=_STARTING),
        Step(20, status="IN_PROGRESS", workers=_RUNNING),
        Step(TRAINING_ENDS_S, status="COMPLETED", output={"reward": 0.82}),
    ),
    "a 30-minute training whose worker writes no heartbeat, then COMPLETED",
)
SCENARIOS = (HOST_DIED, SILENT)


@dataclass(frozen=True)
class Case:
    """One late resume: attempt 0's scenario, whether the run reads the worker's Hub
    heartbeat, and whether it retries `lost_unverified`."""

    scenario: str
    readers: bool = True
    retry_lost_unverified: bool = False


@dataclass(frozen=True)
class Platform:
    """What a driving process needs to reach the simulator (picklable, fork-safe)."""

    url: str
    key: str
    cache_dir: str  # the Hub readers' download cache


class KillAtPoll:
    """A RunPod client that SIGKILLs its own process before its `poll`-th status fetch
    (1-based; None: never); every other call is the wrapped client's."""

    def __init__(self, client: RunpodClient, poll: int | None):
        self.client, self.poll, self.fetches = client, poll, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        """The status, unless this is the fetch the process dies before."""
        self.fetches += 1
        if self.fetches == self.poll:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.client.job_status(endpoint_id, job_id)


def sim_adapters(case: Case, platform: Platform, clock: Any) -> RunpodRunAdapters:
    """`RunpodRunAdapters` on the simulator: deploys by GraphQL `saveEndpoint` (one worker,
    idle timeout 5 s), attempt 0's job plays `case.scenario` (later ones `success`), every
    worker writes to `HUB`, which the run records and (`case.readers`) reads."""
    client = sim_client(platform.url, platform.key, clock.sleep)
    deploy = graphql_deployer(platform.url, platform.key)

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        scenario = case.scenario if attempt.started.attempt == 0 else "success"
        return {"scenario": scenario, **HUB.model_dump()}

    def readers(run: RunState, attempt: Attempt) -> tuple[Any, Any]:
        options = {"endpoint": platform.url, "clock": clock, "cache_dir": platform.cache_dir}
        return hub_readers(HUB, **options)

    return RunpodRunAdapters(
        client,
        deploy,
        job_input,
        readers if case.readers else None,
        interval_s=INTERVAL_S,
        clock=clock,
        sleep=clock.sleep,
        hub=lambda run, attempt: HUB,
    )


def drive(
    case: Case, platform: Platform, store_url: str, clock: Any, kill_at_poll: int | None = None
) -> RunResult:
    """`supervise_run` of the run to its end (or to the kill), in this process."""
    adapters = sim_adapters(case, platform, clock)
    adapters.client = KillAtPoll(adapters.client, kill_at_poll)
    try:
        return supervise_run(
            RUN,
            [Candidate(gpu_class="L40S", price_per_hour=1.0)],
            adapters,
            max_retries=2,
            phase=PHASE,
            store=store_url,
            clock=clock,
            sleep=clock.sleep,
            capacity_memory=False,
            retry_lost_unverified=case.retry_lost_unverified,
        )
    finally:
        adapters.client.close()


def drive_and_die(case: Case, platform: Platform, store_url: str) -> None:
    """The first driver, in a forked process: on the simulator's clock over HTTP, killed
    before its `KILL_AT_POLL`-th status fetch."""
    clock = RemoteSimClock(platform.url)
    try:
        drive(case, platform, store_url, clock, KILL_AT_POLL)
    finally:
        clock.close()


@dataclass
class Paid:
    """What the simulator's own records (`Simulator.usage()`) say the run paid for."""

    deploys: int  # endpoints created
    submits: int  # jobs submitted
    trainings: int  # jobs a worker was started for
    completed: int  # jobs that trained to COMPLETED
    alive: list[str]  # endpoints alive now, by name
    worker_s: float = 0.0  # worker-seconds billed

    @property
    def counts(self) -> tuple[int, int, int, int]:
        """(deploys, submits, trainings, completed)."""
        return self.deploys, self.submits, self.trainings, self.completed


def paid(sim: Simulator) -> Paid:
    """The run's usage, from the simulator's records."""
    usage = sim.usage()
    jobs = [job for endpoint in usage.endpoints for job in endpoint.jobs]
    trained = {w.job_id for w in usage.workers if w.job_id is not None}
    completed = sum(sim.job(job).status == "COMPLETED" for job in jobs)
    alive = [e.name for e in usage.alive]
    return Paid(
        len(usage.endpoints), len(jobs), len(trained), completed, alive, usage.worker_seconds
    )
