"""The job's states and legal transitions, as data.

This table is the single source of the state machine: the shared `transitions.Machine`
(`flashfsm.fsm.machine`), the state diagram and the README are all built from it, and a
test checks they agree. The machine state is the visible phase of the job; the rules'
timers live beside it in `JobState` as absolute timestamps.
"""

from __future__ import annotations

from enum import StrEnum


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
    STALLED = "STALLED"
    POLL_ERROR = "POLL_ERROR"
    LOST = "LOST"  # the job no longer exists on RunPod (404)


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
FAILURE_KIND: dict[JobPhase, str | None] = {
    JobPhase.SUCCEEDED: None,
    JobPhase.FAILED: "job_failed",
    JobPhase.PREEMPTED: "job_preempted",
    JobPhase.NO_CAPACITY: "no_capacity",
    JobPhase.STALLED: "stalled",
    JobPhase.POLL_ERROR: "poll_error",
    JobPhase.LOST: "lost",
}

#: (trigger, sources, destination). Only events that change the phase fire a trigger.
TRANSITIONS: tuple[tuple[str, tuple[JobPhase, ...], JobPhase], ...] = (
    ("throttle", (JobPhase.QUEUED, JobPhase.UNHEALTHY), JobPhase.THROTTLED),
    ("sicken", (JobPhase.QUEUED, JobPhase.THROTTLED), JobPhase.UNHEALTHY),
    ("recover", (JobPhase.THROTTLED, JobPhase.UNHEALTHY), JobPhase.QUEUED),
    ("start_setup", WAITING, JobPhase.SETUP),
    ("start_training", (*WAITING, JobPhase.SETUP), JobPhase.TRAINING),
    ("requeue", RUNNING, JobPhase.QUEUED),
    ("succeed", ACTIVE, JobPhase.SUCCEEDED),
    ("fail", ACTIVE, JobPhase.FAILED),
    ("preempt", ACTIVE, JobPhase.PREEMPTED),
    ("starve", ACTIVE, JobPhase.NO_CAPACITY),
    ("stall", ACTIVE, JobPhase.STALLED),
    ("give_up", ACTIVE, JobPhase.POLL_ERROR),
    ("lose", ACTIVE, JobPhase.LOST),
)

#: The trigger that reaches each terminal state.
CONCLUDE_TRIGGER: dict[JobPhase, str] = {
    dest: trigger for trigger, _, dest in TRANSITIONS if dest in TERMINAL
}


def trigger_for(source: JobPhase, dest: JobPhase) -> str | None:
    """The trigger that moves `source` to `dest`, or None when the table has no such edge."""
    for trigger, sources, target in TRANSITIONS:
        if target == dest and source in sources:
            return trigger
    return None
