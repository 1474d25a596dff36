"""The grace policy: every tunable number the job rules use, as one frozen value.

A policy is part of the recorded format: it is stored in the job's `JobSubmitted` event,
so a replay, a reattach and a post-mortem all judge the job by the numbers that were in
force when it was submitted. That is why it lives with the events, below the rules.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Grace windows while another GPU class can still be tried, and on the last one (seconds).
CAPACITY_GRACE_S = 300.0
LAST_GPU_CAPACITY_GRACE_S = 900.0
#: How long a worker the platform lists as starting (an image pull, a model load) may keep
#: the job IN_QUEUE once capacity was found, before the start counts as slow (seconds).
START_GRACE_S = 1200.0


class GracePolicy(BaseModel):
    """How long each rule waits before it concludes (seconds), and the poll-error budget.

    The defaults are the reference behaviour's; `GracePolicy.for_attempt(on_last_gpu)` gives the
    tuning the run machine uses for an attempt. A forced heartbeat read (after a terminal
    failure) that fails on a transient error is tried again after 10, 20 and 30 s by default,
    so a Hub hiccup does not decide whether the failure is retried.

    Regular heartbeat reads are paced by the core, from the log: a poll asks for one only
    when `heartbeat_every_s` has passed since the last poll that asked (the first poll of a
    watch, and the first after a blind gap, always asks). `None` asks on every poll: what a
    policy recorded before this knob existed (`JobSubmitted` v1) means.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stall_after_s: float = Field(1200.0, gt=0, description="no progress once training")
    setup_grace_s: float = Field(3000.0, gt=0, description="no progress during cold start")
    unhealthy_grace_s: float = Field(240.0, ge=0, description="worker stuck unhealthy")
    throttled_grace_s: float = Field(CAPACITY_GRACE_S, ge=0, description="worker throttled")
    queue_grace_s: float = Field(CAPACITY_GRACE_S, ge=0, description="job stuck IN_QUEUE")
    deadline_s: float | None = Field(None, gt=0, description="client deadline from submission")
    probe_every_s: float = Field(90.0, ge=0, description="health probe spacing while queued")
    max_poll_errors: int = Field(8, ge=1, description="consecutive status errors tolerated")
    max_backoff_s: float = Field(60.0, gt=0, description="cap of the status-error backoff")
    forced_read_tries: int = Field(
        4, ge=1, description="forced heartbeat reads tried when each fails on a transient error"
    )
    forced_read_backoff_s: float = Field(
        10.0, ge=0, description="wait before the n-th retry of a forced read: n times this"
    )
    heartbeat_every_s: float | None = Field(
        30.0, ge=0, description="spacing of regular heartbeat reads; None: every poll"
    )
    # The queue verdicts told apart by the worker records (a watch with a worker reader);
    # a policy recorded before them has neither, and means these defaults.
    start_grace_s: float = Field(
        START_GRACE_S,
        gt=0,
        exclude_if=lambda v: v == START_GRACE_S,
        description="a worker initializing while IN_QUEUE (worker records)",
    )
    queue_by_workers: bool = Field(
        True,
        exclude_if=lambda v: v is True,
        description="tell queue verdicts apart by the worker records; false: the reference's",
    )

    @model_validator(mode="after")
    def _finite(self) -> GracePolicy:
        for name, value in self.__dict__.items():  # (its fields: no extras are allowed)
            if value != value:  # NaN compares unequal to itself
                raise ValueError(f"{name} must be a number, not NaN")
        return self

    @classmethod
    def for_attempt(cls, on_last_gpu: bool = False, **overrides: float | None) -> GracePolicy:
        """The policy for one attempt of a run: `stall_kwargs(on_last_gpu)` plus overrides."""
        return cls(**{**stall_kwargs(on_last_gpu), **overrides})


#: The policy of a job whose log records none: every default. Every default of a rule's limit
#: lives in `GracePolicy` alone; anything that needs one reads it here.
DEFAULT_POLICY = GracePolicy()
#: The stall window of an attempt of a run (longer than a lone watch's default).
ATTEMPT_STALL_AFTER_S = 1500.0


def stall_kwargs(on_last_gpu: bool = False) -> dict[str, float]:
    """The `poll_job` keyword arguments for an attempt of a run.

    Capacity backstops (queue and throttled grace) wait `CAPACITY_GRACE_S` while a further
    GPU class can still be tried, and `LAST_GPU_CAPACITY_GRACE_S` when this attempt is the
    last one: with nowhere left to walk, waiting out a long queue beats giving up. The stall
    window is `ATTEMPT_STALL_AFTER_S` and the setup grace the default; neither depends on it.
    """
    grace = LAST_GPU_CAPACITY_GRACE_S if on_last_gpu else CAPACITY_GRACE_S
    return {
        "stall_after_s": ATTEMPT_STALL_AFTER_S,
        "setup_grace_s": DEFAULT_POLICY.setup_grace_s,
        "queue_grace_s": grace,
        "throttled_grace_s": grace,
    }
