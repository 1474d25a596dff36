"""The failure kinds an orchestrator routes on: part of the recorded format.

A job's verdict (`Concluded.failure`), an attempt's end (`AttemptEnded.failure`) and a
run's result (`RunConcluded.failure`) each carry one of these, or None for a success.
Which of them a run retries is the run walk's decision (`flashfsm.fsm.run`).
"""

from __future__ import annotations

from enum import StrEnum


class FailureKind(StrEnum):
    """Why a job, an attempt or a run did not succeed."""

    JOB_FAILED = "job_failed"  # the job's own failure (its code raised): not retried
    JOB_PREEMPTED = "job_preempted"  # the platform or the worker's infra ended it
    NO_CAPACITY = "no_capacity"  # never scheduled: no capacity for the GPU class
    # capacity was found, but the worker the platform lists as starting (an image pull, a
    # model load) kept the job queued past the start grace: retried, not against the class
    SLOW_START = "slow_start"
    STALLED = "stalled"  # no progress, a crash-looping worker, or the client deadline
    POLL_ERROR = "poll_error"  # the status route kept failing, or a deploy or submit failed
    LOST = "lost"  # the job no longer exists on RunPod (its TTL or retention passed)
    # RunPod forgot the job while nobody watched, and no evidence says whether it finished:
    # not retried unless the run's policy says so (a retry may train it a second time)
    LOST_UNVERIFIED = "lost_unverified"
    UNAUTHORIZED = "unauthorized"  # RunPod refused the key (HTTP 401/403): never retried
    CANCELLED = "cancelled"  # a run the user cancelled
    NO_CANDIDATES = "no_candidates"  # a run with no GPU candidate to try
