"""Synthetic logs for the billing tests, built from the event models.

Each scenario is a small store (stream name to events) of one run (or one bare job) and,
where it says so, a sweeper's stream, with every time given in seconds after `T`. The job
logs are what a watch with heartbeat and worker readers records (10 s polls, a probe while
queued, the worker read after each pickup, the forced heartbeat and worker-log reads before
a failing verdict), so `what_if` under the recorded policy reaches the recorded verdicts:
`tests/test_billing_platform.py` checks that, then prices each one by hand.

Prices are chosen so a second is a round sum: $36/h is one cent a second, $72/h two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    CancelRequested,
    Candidate,
    Concluded,
    EndpointDeleted,
    EndpointDeployed,
    EndpointReaped,
    Event,
    HealthObserved,
    HeartbeatObserved,
    IdleSeen,
    JobCancelled,
    JobQueued,
    JobSubmitted,
    RunConcluded,
    RunStarted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    WorkerCounts,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.commands import Conclude
from flashfsm.fsm.job import concluded_fields, decide_before, replay

T = 1_700_000_000.0
CENT_A_SECOND = 36.0  # $/h
TWO_CENTS_A_SECOND = 72.0
POLICY = GracePolicy(stall_after_s=300.0, queue_grace_s=300.0, heartbeat_every_s=None)


@dataclass
class Stream:
    """One stream being written: events appended in order, at T + seconds."""

    name: str
    events: list[Event] = field(default_factory=list)

    def add(self, model: type, at: float, **fields: Any) -> Stream:
        seq = len(self.events)
        self.events.append(
            model(stream=self.name, seq=seq, id=f"{self.name}-{seq:04d}", at=T + at, **fields)
        )
        return self


@dataclass
class Job(Stream):
    """A job log as a watch with heartbeat and worker readers writes it."""

    endpoint: str = "ep"
    job_id: str = "job"
    worker: str | None = None  # the worker the statuses name

    def submit(self, at: float, *, policy: GracePolicy = POLICY, worker_reader: bool = True) -> Job:
        self.add(
            JobSubmitted,
            at,
            endpoint_id=self.endpoint,
            job_id=self.job_id,
            gpu_class="L40S",
            policy=policy,
            submitted_at=T + at,
        )
        if worker_reader:
            return self.add(
                WatchStarted, at, v=3, watcher="test", has_heartbeat_reader=True,
                has_worker_reader=True,
            )  # fmt: skip
        return self.add(WatchStarted, at, watcher="test", has_heartbeat_reader=True)

    def queued(self, at: float, *, probe: bool = False) -> Job:
        self.add(StatusObserved, at, status="IN_QUEUE")
        if probe:
            self.add(HealthObserved, at, workers=WorkerCounts(initializing=1))
        return self

    def running(self, at: float) -> Job:
        return self.add(StatusObserved, at, status="IN_PROGRESS")

    def picked_up(
        self, at: float, worker: str, started: float | None, idle: float | None = 5.0
    ) -> Job:
        """The pickup's status, then the worker read (`started`: when the platform started
        the worker, seconds after T; None: a record without it)."""
        self.worker = worker
        self.running(at)
        return self.add(
            WorkerObserved,
            at,
            worker_id=worker,
            gpu_type="NVIDIA L40S",
            started_at=None if started is None else T + started,
            idle_timeout_s=idle,
        )

    def beat(self, at: float, stage: str, step: int | None, ts: float) -> Job:
        return self.add(HeartbeatObserved, at, stage=stage, step=step, ts=T + ts)

    def polls(self, start: float, stop: float, status: str = "IN_PROGRESS") -> Job:
        """A status every 10 s from `start` to `stop`, both included."""
        at = start
        while at <= stop:
            self.add(StatusObserved, at, status=status)
            at += 10
        return self

    def worker_log(self, at: float) -> Job:
        return self.add(WorkerLogObserved, at, worker_id=self.worker, lines=("boom",))

    def verdict(self, at: float, state: str, rule: str, failure: str | None = None) -> Job:
        """The verdict today's rules reach at `at` on the log so far, which must be `state`
        by `rule` (its failure kind `failure`): recorded as the watch records it."""
        s = replay(self.events)
        command = decide_before(s, None, T + at)
        assert isinstance(command, Conclude), (self.name, at, command)
        fields = concluded_fields(command.verdict)
        assert (fields["state"], fields["rule"], fields["failure"]) == (state, rule, failure)
        return self.add(Concluded, at, **fields)


def run_stream(name: str, *candidates: tuple[str, float]) -> Stream:
    run = Stream(name)
    return run.add(
        RunStarted,
        0,
        run_id=name,
        candidates=tuple(Candidate(gpu_class=g, price_per_hour=p) for g, p in candidates),
    )


def attempt(
    run: Stream,
    job: Job,
    at: float,
    n: int,
    *,
    candidate: int = 0,
    deployed: float,
    queued: float,
    idle: float | None = 5.0,
    gpu: str = "L40S",
) -> None:
    """AttemptStarted at `at`, EndpointDeployed (v2 with `idle`; None: v1) and JobQueued."""
    run.add(
        AttemptStarted, at, attempt=n, candidate=candidate, provider="runpod", gpu_class=gpu,
        job_stream=job.name,
    )  # fmt: skip
    extra: dict[str, Any] = {} if idle is None else {"idle_timeout_s": idle}
    run.add(
        EndpointDeployed, deployed, attempt=n, endpoint_id=job.endpoint,
        endpoint_name=f"flash-{job.endpoint}", **extra,
    )  # fmt: skip
    run.add(
        JobQueued, queued, attempt=n, endpoint_id=job.endpoint, job_id=job.job_id,
        job_stream=job.name, submitted_at=T + queued,
    )  # fmt: skip


def ended(run: Stream, at: float, n: int, failure: str | None = None, rule: str = "") -> None:
    run.add(AttemptEnded, at, attempt=n, ok=failure is None, failure=failure, rule=rule or None)


def store(*streams: Stream) -> dict[str, list[Event]]:
    return {s.name: list(s.events) for s in streams}


COMPLETED = {"status": "COMPLETED", "metrics": {"loss": 0.1}}


# --- the scenarios ------------------------------------------------------------------------------


def clean() -> dict[str, list[Event]]:
    """One attempt: deployed in 5 s, submitted at 10, the worker started at 15 and picked
    the job up at 30, trained from 70 (first training heartbeat), completed at 130; the run
    deleted the endpoint at 132 (inside the 5 s idle timeout it recorded)."""
    run = run_stream("run-clean", ("L40S", CENT_A_SECOND))
    job = Job("job-clean", endpoint="ep-clean", job_id="j-clean")
    attempt(run, job, 0, 0, deployed=5, queued=10)
    job.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w1", started=15)
    job.beat(30, "boot", None, 25).polls(40, 60).beat(70, "train", 0, 65).polls(70, 120)
    job.add(StatusObserved, 130, **COMPLETED).verdict(130, "SUCCEEDED", "completed")
    ended(run, 130, 0, rule="completed")
    run.add(EndpointDeleted, 132, endpoint_id="ep-clean", reason="run succeeded")
    run.add(RunConcluded, 132, ok=True, attempts=1)
    return store(run, job)


def walk() -> dict[str, list[Event]]:
    """Two candidates: attempt 0 on the L40S never gets a worker (no capacity at 320, the
    run cancels the job and deletes the endpoint then); attempt 1 on the A100 (two cents a
    second) is deployed by 325, submitted at 330, its worker started at 335 and picked the
    job up at 340, trains from 370, completes at 400, endpoint deleted at once."""
    run = run_stream("run-walk", ("L40S", CENT_A_SECOND), ("A100-80GB", TWO_CENTS_A_SECOND))
    a0 = Job("job-walk-a0", endpoint="ep-walk-0", job_id="j-walk-0")
    attempt(run, a0, 0, 0, deployed=5, queued=10)
    a0.submit(10).queued(10, probe=True).polls(20, 100, "IN_QUEUE").queued(110, probe=True)
    a0.polls(120, 200, "IN_QUEUE").queued(210, probe=True).polls(220, 300, "IN_QUEUE")
    a0.queued(310, probe=True).polls(320, 320, "IN_QUEUE")
    a0.verdict(320, "NO_CAPACITY", "queue_grace", "no_capacity")
    ended(run, 320, 0, "no_capacity", "queue_grace")
    run.add(JobCancelled, 320, attempt=0, job_id="j-walk-0")
    run.add(EndpointDeleted, 320, endpoint_id="ep-walk-0", reason="retrying after no_capacity")
    a1 = Job("job-walk-a1", endpoint="ep-walk-1", job_id="j-walk-1")
    attempt(run, a1, 320, 1, candidate=1, deployed=325, queued=330, gpu="A100-80GB")
    a1.submit(330).queued(330, probe=True).picked_up(340, "w2", started=335)
    a1.polls(350, 360).beat(370, "train", 0, 365).polls(370, 390)
    a1.add(StatusObserved, 400, **COMPLETED).verdict(400, "SUCCEEDED", "completed")
    ended(run, 400, 1, rule="completed")
    run.add(EndpointDeleted, 400, endpoint_id="ep-walk-1", reason="run succeeded")
    run.add(RunConcluded, 400, ok=True, attempts=2)
    return store(run, a0, a1)


def _stalling(job: Job) -> Job:
    """Submitted at 10, the worker started at 20 and picked the job up at 30, trains from
    60, its last heartbeat read at 120; no progress after: the stall (300 s) fires at 430."""
    job.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w-stall", started=20)
    job.beat(30, "boot", None, 25).polls(40, 50).beat(60, "train", 0, 55).polls(60, 110)
    job.beat(120, "train", 10, 115).polls(120, 430).worker_log(430)
    return job.verdict(430, "STALLED", "stall", "stalled")


def stall_left_running(*, reaped_at: float | None = None) -> dict[str, list[Event]]:
    """A stall the run could not clean up: nothing cancelled the job (a supervisor that
    concluded and stopped) and the endpoint's delete failed, so the worker runs on. The
    sweeper's stream holds the store's newest event (another endpoint seen idle at 1000);
    with `reaped_at`, the sweeper reaps the stalled job's endpoint then."""
    run = run_stream("run-stall-open", ("L40S", CENT_A_SECOND))
    job = _stalling(Job("job-stall-open", endpoint="ep-stall-open", job_id="j-stall-open"))
    attempt(run, job, 0, 0, deployed=5, queued=10)
    ended(run, 430, 0, "stalled", "stall")
    run.add(EndpointDeleted, 431, endpoint_id="ep-stall-open", reason="run ended", ok=False)
    run.add(RunConcluded, 431, ok=False, failure="stalled", attempts=1)
    sweeper = Stream("sweeper")
    if reaped_at is not None:
        seen = reaped_at - 120
        sweeper.add(IdleSeen, seen, endpoint_id="ep-stall-open", since=T + seen)
        sweeper.add(EndpointReaped, reaped_at, endpoint_id="ep-stall-open", idle_s=120.0)
    sweeper.add(IdleSeen, 1000, endpoint_id="ep-other", since=T + 1000)
    return store(run, job, sweeper)


def stall_cancelled() -> dict[str, list[Event]]:
    """The same stall, cleaned up by its run at the verdict: cancelled and deleted at 430."""
    run = run_stream("run-stall-cancelled", ("L40S", CENT_A_SECOND))
    job = _stalling(Job("job-stall-cancelled", endpoint="ep-stall-c", job_id="j-stall-c"))
    attempt(run, job, 0, 0, deployed=5, queued=10)
    ended(run, 430, 0, "stalled", "stall")
    run.add(JobCancelled, 430, attempt=0, job_id="j-stall-c")
    run.add(EndpointDeleted, 430, endpoint_id="ep-stall-c", reason="run ended")
    run.add(RunConcluded, 430, ok=False, failure="stalled", attempts=1)
    return store(run, job)


def retry() -> dict[str, list[Event]]:
    """Attempt 0: the worker started at 25, picked up at 30, trained from 60 and FAILED at
    100 with a retriable heartbeat (preempted); the run deleted the endpoint at 103 (3 s
    of the idle timeout). Attempt 1 on the same GPU: deployed at 108, submitted at 110, the
    worker started at 112, picked up at 120, trains from 150, completes at 180, endpoint
    deleted at once."""
    run = run_stream("run-retry", ("L40S", CENT_A_SECOND))
    a0 = Job("job-retry-a0", endpoint="ep-retry-0", job_id="j-retry-0")
    attempt(run, a0, 0, 0, deployed=5, queued=10)
    a0.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w-r0", started=25)
    a0.polls(40, 50).beat(60, "train", 0, 55).polls(60, 90)
    a0.add(StatusObserved, 100, status="FAILED", error="host went away")
    a0.add(
        HeartbeatObserved, 100, stage="train", step=3, ts=T + 95, retriable=True, forced=True
    ).worker_log(100)
    a0.verdict(100, "PREEMPTED", "worker_failed", "job_preempted")
    ended(run, 100, 0, "job_preempted", "worker_failed")
    run.add(EndpointDeleted, 103, endpoint_id="ep-retry-0", reason="retrying after preempted")
    a1 = Job("job-retry-a1", endpoint="ep-retry-1", job_id="j-retry-1")
    attempt(run, a1, 103, 1, deployed=108, queued=110)
    a1.submit(110).queued(110, probe=True).picked_up(120, "w-r1", started=112)
    a1.polls(130, 140).beat(150, "train", 0, 145).polls(150, 170)
    a1.add(StatusObserved, 180, **COMPLETED).verdict(180, "SUCCEEDED", "completed")
    ended(run, 180, 1, rule="completed")
    run.add(EndpointDeleted, 180, endpoint_id="ep-retry-1", reason="run succeeded")
    run.add(RunConcluded, 180, ok=True, attempts=2)
    return store(run, a0, a1)


def cancel() -> dict[str, list[Event]]:
    """The user cancels the run at 200 while it trains: the run cancels the job then; the
    watch sees CANCELLED at 210 (preempted); the endpoint is deleted at 215. The worker
    started at 20 and picked up at 30; its release is the cancel (200), so it idles 5 s to
    205, and nothing is billed from 205 to the verdict."""
    run = run_stream("run-cancel", ("L40S", CENT_A_SECOND))
    job = Job("job-cancel", endpoint="ep-cancel", job_id="j-cancel")
    attempt(run, job, 0, 0, deployed=5, queued=10)
    job.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w-c", started=20)
    job.polls(40, 50).beat(60, "train", 0, 55).polls(60, 200)
    run.add(CancelRequested, 200, by="someone", reason="wrong data")
    run.add(JobCancelled, 200, attempt=0, job_id="j-cancel")
    job.add(StatusObserved, 210, status="CANCELLED").worker_log(210)
    job.verdict(210, "PREEMPTED", "platform_termination", "job_preempted")
    ended(run, 210, 0, "job_preempted", "platform_termination")
    run.add(EndpointDeleted, 215, endpoint_id="ep-cancel", reason="run cancelled")
    run.add(RunConcluded, 215, ok=False, failure="cancelled", attempts=1)
    return store(run, job)


def lost() -> dict[str, list[Event]]:
    """The job's status answers 404 at 150 (lost): the job is gone, its worker released
    then; the run deleted the endpoint at 160, after the 5 s idle timeout ran out (155)."""
    run = run_stream("run-lost", ("L40S", CENT_A_SECOND))
    job = Job("job-lost", endpoint="ep-lost", job_id="j-lost")
    attempt(run, job, 0, 0, deployed=5, queued=10)
    job.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w-l", started=20)
    job.polls(40, 50).beat(60, "train", 0, 55).polls(60, 140)
    job.add(StatusFetchFailed, 150, error_class="HTTPStatusError", http_status=404)
    job.verdict(150, "LOST", "job_lost", "lost")
    ended(run, 150, 0, "lost", "job_lost")
    run.add(EndpointDeleted, 160, endpoint_id="ep-lost", reason="run ended")
    run.add(RunConcluded, 160, ok=False, failure="lost", attempts=1)
    return store(run, job)


def requeue() -> dict[str, list[Event]]:
    """The platform requeues the job at 100 (its first worker, started at 20, picked up at
    30, trained from 60, is gone); a second worker starts at 105, picks the job up at 120,
    boots (heartbeat "boot" at 130) and trains from 160; completed at 200, the endpoint
    deleted at 201."""
    run = run_stream("run-requeue", ("L40S", CENT_A_SECOND))
    job = Job("job-requeue", endpoint="ep-requeue", job_id="j-requeue")
    attempt(run, job, 0, 0, deployed=5, queued=10)
    job.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w-q1", started=20)
    job.polls(40, 50).beat(60, "train", 0, 55).polls(60, 90)
    job.queued(100).queued(110, probe=True).picked_up(120, "w-q2", started=105)
    job.beat(130, "boot", None, 125).polls(130, 150).beat(160, "train", 0, 155).polls(160, 190)
    job.add(StatusObserved, 200, **COMPLETED).verdict(200, "SUCCEEDED", "completed")
    ended(run, 200, 0, rule="completed")
    run.add(EndpointDeleted, 201, endpoint_id="ep-requeue", reason="run succeeded")
    run.add(RunConcluded, 201, ok=True, attempts=1)
    return store(run, job)


def bare_failed() -> dict[str, list[Event]]:
    """A bare job (no run: no teardown ever) whose worker started at 12, picked up at 20,
    trained from 50 and FAILED at 100 (its own code): released then, billed for the idle
    timeout the platform records for the endpoint (30 s) after."""
    job = Job("job-bare-failed", endpoint="ep-bare", job_id="j-bare")
    job.submit(0).queued(0, probe=True).queued(10).picked_up(20, "w-b", started=12, idle=30)
    job.polls(30, 40).beat(50, "train", 0, 45).polls(50, 90)
    job.add(StatusObserved, 100, status="FAILED", error="ValueError: NaN")
    job.add(HeartbeatObserved, 100, stage="train", step=4, ts=T + 95, forced=True)
    job.worker_log(100).verdict(100, "FAILED", "worker_failed", "job_failed")
    return store(job)


def idle_reaped() -> dict[str, list[Event]]:
    """A success whose endpoint the run failed to delete, with a long idle timeout (600 s,
    recorded at deploy): the sweeper reaps the idle endpoint at 250, 120 s after the
    release at 130, which ends the worker's bill before its idle timeout would."""
    run = run_stream("run-idle-reaped", ("L40S", CENT_A_SECOND))
    job = Job("job-idle-reaped", endpoint="ep-idle", job_id="j-idle")
    attempt(run, job, 0, 0, deployed=5, queued=10, idle=600)
    job.submit(10).queued(10, probe=True).queued(20).picked_up(30, "w-i", started=15, idle=600)
    job.beat(30, "boot", None, 25).polls(40, 60).beat(70, "train", 0, 65).polls(70, 120)
    job.add(StatusObserved, 130, **COMPLETED).verdict(130, "SUCCEEDED", "completed")
    ended(run, 130, 0, rule="completed")
    run.add(EndpointDeleted, 130, endpoint_id="ep-idle", reason="run succeeded", ok=False)
    run.add(RunConcluded, 130, ok=True, attempts=1)
    sweeper = Stream("sweeper-0")
    sweeper.add(IdleSeen, 140, endpoint_id="ep-idle", since=T + 130)
    sweeper.add(EndpointReaped, 250, endpoint_id="ep-idle", idle_s=120.0)
    return store(run, job, sweeper)


def v1_run() -> dict[str, list[Event]]:
    """A log from before the platform's records: EndpointDeployed v1 (runpod-flash's 60 s
    idle timeout applied), no worker reads (billed from the pickup at 30), completed at 90,
    the endpoint's delete failed: the worker idles the whole 60 s, to 150."""
    run = run_stream("run-v1", ("L40S", CENT_A_SECOND))
    job = Job("job-v1", endpoint="ep-v1", job_id="j-v1")
    attempt(run, job, 0, 0, deployed=5, queued=10, idle=None)
    job.submit(10, worker_reader=False).queued(10, probe=True).queued(20).running(30)
    job.polls(40, 50).beat(60, "train", 0, 55).polls(60, 80)
    job.add(StatusObserved, 90, **COMPLETED).verdict(90, "SUCCEEDED", "completed")
    ended(run, 90, 0, rule="completed")
    run.add(EndpointDeleted, 90, endpoint_id="ep-v1", reason="run succeeded", ok=False)
    run.add(RunConcluded, 90, ok=True, attempts=1)
    return store(run, job)


def v1_bare() -> dict[str, list[Event]]:
    """A bare job log from before the platform's records: no run, no worker read; picked up
    at 20, trained from 50, completed at 80: billed from the pickup, and for RunPod's
    default idle timeout (5 s, assumed) after."""
    job = Job("job-v1-bare", endpoint="ep-v1-bare", job_id="j-v1-bare")
    job.submit(0, worker_reader=False).queued(0, probe=True).queued(10).running(20)
    job.polls(30, 40).beat(50, "train", 0, 45).polls(50, 70)
    job.add(StatusObserved, 80, **COMPLETED).verdict(80, "SUCCEEDED", "completed")
    return store(job)
