"""The job-watch events: frozen pydantic models in one discriminated union.

Every event shares an envelope (`stream`, `seq`, `id`, `at`, `kind`, `v`) and adds the
payload of one observation or decision. Events record what was observed, never what was
derived from it: the job state is a fold of them (`flashfsm.fsm.job.replay`).

Text fields that come from the outside world (API error messages, worker output, failure
artifacts) are capped at construction by `cap_text` so a week-long log stays bounded; the
caps are the `*_CAP` constants below. Secrets are redacted by the shell before an event is
built (`flashfsm.redact`), so nothing here ever sees them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter

from flashfsm.fsm.policy import GracePolicy

ERROR_CAP = 1500  # a status's error string, as the reference kept it
STDOUT_CAP = 2000  # the tail of the worker's stdout
MESSAGE_CAP = 500  # an API error message
ARTIFACT_CAP = 8000  # failure artifacts read from the Hub
DETAIL_CAP = 12000  # a verdict's detail
NAME_CAP = 200  # ids, names, stages, status strings

Text = Annotated[str, Field(max_length=NAME_CAP)]


def cap_text(text: str | None, limit: int, *, tail: bool = False) -> str | None:
    """`text` cut to `limit` characters (its head, or its tail when `tail`), None stays None."""
    if text is None or len(text) <= limit:
        return text
    return text[-limit:] if tail else text[:limit]


class EventBase(BaseModel):
    """The envelope every event carries."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    stream: Text
    seq: NonNegativeInt
    id: Text
    at: float


class JobSubmitted(EventBase):
    """The job exists on RunPod: its handle, where it runs, and the policy that judges it."""

    kind: Literal["JobSubmitted"] = "JobSubmitted"
    v: Literal[1] = 1
    endpoint_id: Text
    endpoint_name: Text = ""
    job_id: Text
    gpu_class: Text | None = None
    attempt: NonNegativeInt = 0
    on_last_gpu: bool = False
    policy: GracePolicy = GracePolicy()
    submitted_at: float | None = None  # None when the watcher does not know it


class WatchStarted(EventBase):
    """A supervisor began watching the job (`reattach` when an earlier watch exists)."""

    kind: Literal["WatchStarted"] = "WatchStarted"
    v: Literal[1] = 1
    watcher: Text
    reattach: bool = False
    interval_s: float = Field(10.0, gt=0)
    has_heartbeat_reader: bool = False
    has_failure_detail_reader: bool = False


class StatusObserved(EventBase):
    """One good answer of the job-status route.

    `error`, `stdout_tail` and `output_text` are kept only for terminal failure statuses;
    `metrics` / `output_error` only for COMPLETED (the output decoded by the shell).
    """

    kind: Literal["StatusObserved"] = "StatusObserved"
    v: Literal[1] = 1
    status: Text
    error: Annotated[str, Field(max_length=ERROR_CAP)] | None = None
    stdout_tail: Annotated[str, Field(max_length=STDOUT_CAP)] | None = None
    output_text: Annotated[str, Field(max_length=ERROR_CAP)] | None = None
    metrics: dict[str, Any] | None = None
    output_error: Annotated[str, Field(max_length=ERROR_CAP + STDOUT_CAP + 64)] | None = None


class StatusFetchFailed(EventBase):
    """The job-status route failed: an HTTP error, a transport error or an unusable body."""

    kind: Literal["StatusFetchFailed"] = "StatusFetchFailed"
    v: Literal[1] = 1
    error_class: Text
    http_status: int | None = None
    message: Annotated[str, Field(max_length=MESSAGE_CAP)] = ""


class WorkerCounts(BaseModel):
    """Worker counts of an endpoint's `/health` answer (missing keys count 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    idle: NonNegativeInt = 0
    initializing: NonNegativeInt = 0
    ready: NonNegativeInt = 0
    running: NonNegativeInt = 0
    throttled: NonNegativeInt = 0
    unhealthy: NonNegativeInt = 0


class JobCounts(BaseModel):
    """Job counts of an endpoint's `/health` answer (missing keys count 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    completed: NonNegativeInt = 0
    failed: NonNegativeInt = 0
    in_progress: NonNegativeInt = 0
    in_queue: NonNegativeInt = 0
    retried: NonNegativeInt = 0


class HealthObserved(EventBase):
    """One good answer of the endpoint-health route."""

    kind: Literal["HealthObserved"] = "HealthObserved"
    v: Literal[1] = 1
    workers: WorkerCounts = WorkerCounts()
    jobs: JobCounts = JobCounts()


class HealthProbeFailed(EventBase):
    """The endpoint-health route failed; diagnostic only, it changes no timer."""

    kind: Literal["HealthProbeFailed"] = "HealthProbeFailed"
    v: Literal[1] = 1
    error_class: Text
    http_status: int | None = None
    message: Annotated[str, Field(max_length=MESSAGE_CAP)] = ""


class HeartbeatObserved(EventBase):
    """The worker's heartbeat as read from the Hub.

    A regular read is recorded only when it returns a heartbeat different from the last one;
    a forced read (after a terminal failure) is always recorded, `found=False` when it
    returned nothing.
    """

    kind: Literal["HeartbeatObserved"] = "HeartbeatObserved"
    v: Literal[1] = 1
    found: bool = True
    stage: Text | None = None
    step: int | None = None
    ts: float | None = None
    retriable: bool = False
    forced: bool = False


class FailureDetailObserved(EventBase):
    """The worker's failure artifacts (error and console tails), read after a failure."""

    kind: Literal["FailureDetailObserved"] = "FailureDetailObserved"
    v: Literal[1] = 1
    text: Annotated[str, Field(max_length=ARTIFACT_CAP)] | None = None


class Concluded(EventBase):
    """The verdict: the terminal state, the rule that fired and the events it rests on."""

    kind: Literal["Concluded"] = "Concluded"
    v: Literal[1] = 1
    state: Text
    ok: bool
    failure: Text | None = None
    detail: Annotated[str, Field(max_length=DETAIL_CAP)] = ""
    rule: Text
    evidence: tuple[NonNegativeInt, ...] = ()
    metrics: dict[str, Any] | None = None


Event = Annotated[
    JobSubmitted
    | WatchStarted
    | StatusObserved
    | StatusFetchFailed
    | HealthObserved
    | HealthProbeFailed
    | HeartbeatObserved
    | FailureDetailObserved
    | Concluded,
    Field(discriminator="kind"),
]
"""Any job-watch event."""

EVENT_TYPES: dict[str, type[EventBase]] = {
    cls.model_fields["kind"].default: cls
    for cls in (
        JobSubmitted,
        WatchStarted,
        StatusObserved,
        StatusFetchFailed,
        HealthObserved,
        HealthProbeFailed,
        HeartbeatObserved,
        FailureDetailObserved,
        Concluded,
    )
}
"""Every event kind and its model."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
