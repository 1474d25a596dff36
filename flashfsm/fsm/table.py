"""The job's states and legal transitions, as data.

This table is the single source of the state machine: the shared `transitions.Machine`
(`flashfsm.fsm.machine`), the state diagram and the docs are all built from it, and a test
checks they agree. The machine state is the visible phase of the job; the rules' timers
live beside it in `JobState`.

The table is read forwards. A trigger is something the fold observed ("a worker picked the
job up", "a probe found the worker throttled"); the fold names the trigger, and the table
says where it leads from the current phase. An observation with no edge from the current
phase leaves the phase as it is (a second throttled probe while THROTTLED, a running
status while TRAINING); `NEXT` answers that question without asking the Machine, so the
Machine is only called when the phase really moves.
"""

from __future__ import annotations

from enum import StrEnum

from flashfsm.events.failures import FailureKind


class JobPhase(StrEnum):
    """Every state a watched job can be in."""

    QUEUED = "QUEUED"  # IN_QUEUE, no worker trouble seen
    THROTTLED = "THROTTLED"  # IN_QUEUE, a worker waits for a host with capacity
    UNHEALTHY = "UNHEALTHY"  # IN_QUEUE, a worker crash-loops
    SETUP = "SETUP"  # a worker has the job; cold start, no training heartbeat yet
    TRAINING = "TRAINING"  # a training heartbeat has been seen
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the job's own failure: job_failed, not retried
    PREEMPTED = "PREEMPTED"  # the platform or the worker's infra ended it: retried
    NO_CAPACITY = "NO_CAPACITY"
    SLOW_START = "SLOW_START"  # a worker was found but kept starting past the start grace
    STALLED = "STALLED"
    POLL_ERROR = "POLL_ERROR"
    LOST = "LOST"  # the job no longer exists on RunPod (404)
    LOST_UNVERIFIED = "LOST_UNVERIFIED"  # gone while unwatched, and nothing says it finished
    UNAUTHORIZED = "UNAUTHORIZED"  # RunPod refused the key (401/403): not retried


ACTIVE: tuple[JobPhase, ...] = (
    JobPhase.QUEUED,
    JobPhase.THROTTLED,
    JobPhase.UNHEALTHY,
    JobPhase.SETUP,
    JobPhase.TRAINING,
)
TERMINAL: tuple[JobPhase, ...] = tuple(p for p in JobPhase if p not in ACTIVE)
WAITING: tuple[JobPhase, ...] = (JobPhase.QUEUED, JobPhase.THROTTLED, JobPhase.UNHEALTHY)
RUNNING: tuple[JobPhase, ...] = (JobPhase.SETUP, JobPhase.TRAINING)
INITIAL = JobPhase.QUEUED

#: The failure kind an orchestrator sees for each terminal state (None: success).
FAILURE_KIND: dict[JobPhase, FailureKind | None] = {
    JobPhase.SUCCEEDED: None,
    JobPhase.FAILED: FailureKind.JOB_FAILED,
    JobPhase.PREEMPTED: FailureKind.JOB_PREEMPTED,
    JobPhase.NO_CAPACITY: FailureKind.NO_CAPACITY,
    JobPhase.SLOW_START: FailureKind.SLOW_START,
    JobPhase.STALLED: FailureKind.STALLED,
    JobPhase.POLL_ERROR: FailureKind.POLL_ERROR,
    JobPhase.LOST: FailureKind.LOST,
    JobPhase.LOST_UNVERIFIED: FailureKind.LOST_UNVERIFIED,
    JobPhase.UNAUTHORIZED: FailureKind.UNAUTHORIZED,
}

#: The trigger a verdict fires, by the terminal state it records (`Concluded.state`).
VERDICT_TRIGGERS: dict[JobPhase, str] = {
    JobPhase.SUCCEEDED: "succeed",
    JobPhase.FAILED: "fail",
    JobPhase.PREEMPTED: "preempt",
    JobPhase.NO_CAPACITY: "starve",
    JobPhase.SLOW_START: "start_slowly",
    JobPhase.STALLED: "stall",
    JobPhase.POLL_ERROR: "give_up",
    JobPhase.LOST: "lose",
    JobPhase.LOST_UNVERIFIED: "lose_unverified",
    JobPhase.UNAUTHORIZED: "deny",
}

#: (trigger, sources, destination): what each observation does to the phase.
TRANSITIONS: tuple[tuple[str, tuple[JobPhase, ...], JobPhase], ...] = (
    # a health probe while IN_QUEUE
    ("worker_throttled", (JobPhase.QUEUED, JobPhase.UNHEALTHY), JobPhase.THROTTLED),
    ("worker_unhealthy", (JobPhase.QUEUED, JobPhase.THROTTLED), JobPhase.UNHEALTHY),
    ("workers_recovered", (JobPhase.THROTTLED, JobPhase.UNHEALTHY), JobPhase.QUEUED),
    # the job's status
    ("picked_up", WAITING, JobPhase.SETUP),
    ("resumed", WAITING, JobPhase.TRAINING),  # picked up again after training was seen
    ("requeued", RUNNING, JobPhase.QUEUED),
    # a heartbeat from the training loop
    ("training_started", (JobPhase.SETUP,), JobPhase.TRAINING),
    # the verdict
    *((trigger, ACTIVE, dest) for dest, trigger in VERDICT_TRIGGERS.items()),
)

#: (phase, trigger) -> the phase it leads to; a pair missing here leaves the phase as it is.
NEXT: dict[tuple[str, str], str] = {
    (source.value, trigger): dest.value
    for trigger, sources, dest in TRANSITIONS
    for source in sources
}
