"""The events: frozen pydantic models in one discriminated union.

Every event shares an envelope (`stream`, `seq`, `id`, `at`, `kind`, `v`) and adds the
payload of one observation or decision. Events record what was observed, never what was
derived from it: a job's state is a fold of them (`flashfsm.fsm.job.replay`), a run's too
(`flashfsm.fsm.run.replay_run`), and the idle sweeper's (`flashfsm.fsm.sweep`).

Text fields that can carry outside content (API error messages, worker output, failure
artifacts, verdict details) are `Outside[cap]` / `OutsideTail[cap]`
(`flashfsm.events.text`): building an event masks every known secret in them first and
caps them second, so a week-long log stays bounded and no secret, whole or in pieces,
reaches the log. The caps are the `*_CAP` constants below.

Why it is long: it is the event format, one class per kind (job, run and sweeper streams)
and the union that decodes them; each class is a flat list of documented fields, and the
docs' event reference is generated from it, so splitting it would only scatter one format.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from flashfsm.events.failures import FailureKind
from flashfsm.events.policy import GracePolicy
from flashfsm.events.text import Outside, OutsideTail

ERROR_CAP = 1500  # a status's error string, as the reference kept it
STDOUT_CAP = 2000  # the tail of the worker's stdout
MESSAGE_CAP = 500  # an API error message
ARTIFACT_CAP = 8000  # failure artifacts read from the Hub
DETAIL_CAP = 12000  # a verdict's detail
NAME_CAP = 200  # ids, names, stages, status strings
SPEC_CAP = 16000  # a run's RunSpec, as JSON
OUTPUT_ERROR_CAP = ERROR_CAP + STDOUT_CAP + 64  # an output that did not decode, and why
LOG_LINE_CAP = 1000  # one line of a worker's log
LOG_LINES_MAX = 200  # lines of a worker's log one event keeps (the last ones)

Text = Annotated[str, Field(max_length=NAME_CAP)]
#: The stage of a worker's end record: the last heartbeat it writes, as its training ends.
END_STAGE = "done"


def _unset(value: Any) -> bool:
    """Whether an optional field holds its "not said" value (None, or False for a flag):
    such a field is left out of the written event, which reads as it did before the field
    existed (a field's `exclude_if`; no serializer, so the kind keeps its light form)."""
    return value is None or value is False


#: The type of `v` at schema version 1: exactly the JSON integer 1. A strict int bounded to
#: 1, not `Literal[1]`, which would take `true` and `1.0` (they hash like 1); the check runs
#: inside pydantic-core, so a replay pays no Python call per event for it. A kind that moves
#: to version 2 declares `Annotated[int, Field(strict=True, ge=2, le=2)]`.
V1 = Annotated[int, Field(strict=True, ge=1, le=1)]
V2 = Annotated[int, Field(strict=True, ge=2, le=2)]
#: Version 1 or 2, for a kind whose v2 adds a field a writer sets only when it has a value
#: (`WatchStarted.skew_s`): it keeps writing v1 otherwise, so a log without that value stays
#: readable by a library that knows only v1, and one with it is refused there by version.
V1or2 = Annotated[int, Field(strict=True, ge=1, le=2)]
#: Version 2 or 3, the same way: `JobSubmitted` v3 adds the fields a fleet's hand-off sets
#: only when it has them (`hub`, `interval_s`).
V2or3 = Annotated[int, Field(strict=True, ge=2, le=3)]
#: Versions 1 to 4: `WatchStarted` v3 adds `has_worker_reader`, set only by a watch that
#: reads the platform's worker records (v2 its `skew_s`; v4 reads them while queued too).
V1to4 = Annotated[int, Field(strict=True, ge=1, le=4)]
#: The first `WatchStarted` version whose worker reader also reads the endpoint's workers
#: while the job is IN_QUEUE (a v3 watch read them only at a pickup).
QUEUE_RECORDS_V = 4


class EventBase(BaseModel):
    """The envelope every event carries.

    The envelope is strict — a JSON `true` is not a seq, `"1.5"` is not a time, `1.0` is
    not a version — so the fast path (`validate_json`) and the upcasting path judge an
    event alike.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    stream: Annotated[str, Field(max_length=NAME_CAP, strict=True)]
    seq: Annotated[int, Field(ge=0, strict=True)]
    id: Annotated[str, Field(max_length=NAME_CAP, strict=True)]
    at: Annotated[float, Field(strict=True)]


class HubLocation(BaseModel):
    """Where a job's worker writes its heartbeat and failure artifacts on the Hugging Face
    Hub: `{phase}/{run_id}/seed{seed}/` of the dataset repo `hf_repo`. Names only: the Hub's
    URL and token come from each watcher's environment (`HF_ENDPOINT`, `HF_TOKEN`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    hf_repo: Annotated[str, Field(max_length=NAME_CAP)] = Field(
        description="the dataset repo the worker writes to"
    )
    phase: Annotated[str, Field(max_length=NAME_CAP)] = Field(
        "train", description="the training phase (`error_{phase}.txt` is its failure artifact)"
    )
    run_id: Annotated[str, Field(max_length=NAME_CAP)] = Field(
        description="the run the worker writes under"
    )
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] = Field(
        description="the run's seed (`seed{seed}` in the path)"
    )


class JobSubmitted(EventBase):
    """The job exists on RunPod: its handle, where it runs, and the policy that judges it.

    v2 added `policy.heartbeat_every_s`; a v1 event is upcast with it None (a regular
    heartbeat read on every poll, as v1 watches made them), see `flashfsm.events.codec`.
    v3 adds what a fleet's hand-off carries besides (`hub`, `interval_s`): a submission
    without them keeps writing v2, so a library that knows only v2 reads it, and refuses
    one with them by its version. Built with either and no `v`, the event is v3.
    """

    kind: Literal["JobSubmitted"] = "JobSubmitted"
    v: V2or3 = 2
    endpoint_id: Text
    endpoint_name: Text = ""
    job_id: Text
    gpu_class: Text | None = None
    attempt: NonNegativeInt = 0
    on_last_gpu: bool = False
    policy: GracePolicy = GracePolicy()
    submitted_at: float | None = None  # None when the watcher does not know it
    hub: HubLocation | None = Field(
        None,
        description="v3: where the worker's heartbeat and failure artifacts are on the Hub; "
        "a fleet replica builds its readers from it (None: the hand-off gave no reader)",
    )
    interval_s: float | None = Field(
        None,
        gt=0,
        description="v3: the poll interval a fleet replica watches the job at "
        "(None: the replica's own)",
    )

    @model_validator(mode="before")
    @classmethod
    def _hand_off_writes_v3(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "v" not in data
            and (data.get("hub") is not None or data.get("interval_s") is not None)
        ):
            return {**data, "v": 3}  # a hand-off's fields given, no version: a v3 event
        return data

    @model_validator(mode="after")
    def _hand_off_is_v3(self) -> JobSubmitted:
        if (self.hub is not None or self.interval_s is not None) and self.v < 3:
            raise ValueError("hub and interval_s are JobSubmitted v3 fields: write v=3")
        return self

    @model_serializer(mode="wrap")
    def _v2_has_no_hand_off(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.v == 2:  # v2 has no such fields: written exactly as before they existed
            del data["hub"], data["interval_s"]
        return data


class WatchStarted(EventBase):
    """A supervisor began watching the job (`reattach` when an earlier watch exists).

    `skew_s` (v2) is how far the watcher's clock was behind the log when it started: its
    clock read `skew_s` seconds before the log's last event (a reattach from another
    host). The watch then stamps every event it writes at its own clock plus `skew_s`
    (and never before the log's last event), so the log's times do not go backwards. A
    watch with no skew writes v1, without the field, as watches always did; a v1 event
    means no skew. Built with a skew and no `v`, the event is v2. v3 adds
    `has_worker_reader` (the watch asks the platform which worker took the job and, before a
    failing verdict, for that worker's log), written only by a watch that has one. A v4
    watch's worker reader also reads the endpoint's workers while the job is IN_QUEUE, at
    the probe's pace (D10); built with a worker reader and no `v`, the event is v4, and a
    v3 log keeps the conversation it had.
    """

    kind: Literal["WatchStarted"] = "WatchStarted"
    v: V1to4 = 1
    watcher: Text
    reattach: bool = False
    interval_s: float = Field(10.0, gt=0)
    has_heartbeat_reader: bool = False
    has_failure_detail_reader: bool = False
    skew_s: float = Field(
        0.0,
        ge=0,
        description="v2: how far the watcher's clock was behind the log's last event; the "
        "watch stamps its events at its clock plus this",
    )
    has_worker_reader: bool = Field(
        False,
        description="v3: the watch reads the platform's worker records and the worker's log "
        "(`WorkerObserved`, `WorkerLogObserved`)",
    )

    @model_validator(mode="before")
    @classmethod
    def _newer_fields_write_newer_v(cls, data: Any) -> Any:
        if isinstance(data, dict) and "v" not in data:
            if data.get("has_worker_reader"):
                return {**data, "v": QUEUE_RECORDS_V}  # a worker reader, no version: today's
            if data.get("skew_s"):
                return {**data, "v": 2}  # a skew given, no version: a v2 event
        return data

    @model_validator(mode="after")
    def _newer_fields_need_newer_v(self) -> WatchStarted:
        if self.skew_s and self.v < 2:
            raise ValueError("skew_s is a WatchStarted v2 field: a skewed watch writes v=2")
        if self.has_worker_reader and self.v < 3:
            raise ValueError("has_worker_reader is a WatchStarted v3 field: write v=3")
        return self

    @property
    def reads_queue_records(self) -> bool:
        """Whether this watch reads the endpoint's workers while the job is IN_QUEUE (v4)."""
        return self.has_worker_reader and self.v >= QUEUE_RECORDS_V

    @model_serializer(mode="wrap")
    def _older_v_has_no_newer_fields(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.v < 3:  # written exactly as before the newer fields existed
            del data["has_worker_reader"]
            if self.v == 1:
                del data["skew_s"]
        return data


class StatusObserved(EventBase):
    """One good answer of the job-status route.

    `error`, `stdout_tail` and `output_text` are kept only for terminal failure statuses;
    `metrics` / `output_error` only for COMPLETED (the output decoded by the shell).
    """

    kind: Literal["StatusObserved"] = "StatusObserved"
    v: V1 = 1
    status: Outside[NAME_CAP]
    error: Outside[ERROR_CAP] | None = None
    stdout_tail: OutsideTail[STDOUT_CAP] | None = None
    output_text: Outside[ERROR_CAP] | None = None
    metrics: dict[str, Any] | None = None
    output_error: Outside[OUTPUT_ERROR_CAP] | None = None


class StatusFetchFailed(EventBase):
    """The job-status route failed: an HTTP error, a transport error or an unusable body."""

    kind: Literal["StatusFetchFailed"] = "StatusFetchFailed"
    v: V1 = 1
    error_class: Outside[NAME_CAP]
    http_status: int | None = None
    message: Outside[MESSAGE_CAP] = ""


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
    v: V1 = 1
    workers: WorkerCounts = WorkerCounts()
    jobs: JobCounts = JobCounts()


class HealthProbeFailed(EventBase):
    """The endpoint-health route failed; diagnostic only, it changes no timer."""

    kind: Literal["HealthProbeFailed"] = "HealthProbeFailed"
    v: V1 = 1
    error_class: Outside[NAME_CAP]
    http_status: int | None = None
    message: Outside[MESSAGE_CAP] = ""


class HeartbeatObserved(EventBase):
    """The worker's heartbeat as read from the Hub.

    A regular read is recorded only when it returns a heartbeat different from the last one;
    a forced read (after a terminal failure) is always recorded, `found=False` when it
    returned nothing. A forced read that failed on a transient error (a Hub 5xx or 429, a
    timeout, a reset) carries the error in `read_error` (with `found=False`): it tells
    nothing about the heartbeat, and the core reads again. Logs written before `read_error`
    existed decode with it None, a read that did not fail.

    A worker's *end record* is its last heartbeat, written as its training ends: stage
    `done` (`END_STAGE`) and the `metrics` it returns. `metrics` is written only when the
    heartbeat has them, so every other heartbeat is written as before the field existed.
    """

    kind: Literal["HeartbeatObserved"] = "HeartbeatObserved"
    v: V1 = 1
    found: bool = True
    stage: Outside[NAME_CAP] | None = None
    step: int | None = None
    ts: float | None = None
    retriable: bool = False
    forced: bool = False
    read_error: Outside[MESSAGE_CAP] | None = None
    metrics: dict[str, Any] | None = Field(
        None,
        exclude_if=_unset,
        description="the metrics of the worker's end record (stage `done`): what its training "
        "returned, as the worker wrote them (masked and capped like a result's)",
    )


class FailureDetailObserved(EventBase):
    """The worker's failure artifacts (error and console tails), read after a failure."""

    kind: Literal["FailureDetailObserved"] = "FailureDetailObserved"
    v: V1 = 1
    text: OutsideTail[ARTIFACT_CAP] | None = None


class WorkerObserved(EventBase):
    """A worker of the job's endpoint, as the platform lists it (RunPod REST v2
    `GET /v2/serverless/{id}/workers`), read by a watch with a worker reader: once per
    pickup (the worker that took the job), and while the job is IN_QUEUE at the probe pace
    and on every poll until a queue spell's first record (no status names a worker then:
    the endpoint's worker, an unhealthy one first, then throttled, initializing, running,
    idle, ready).

    `started_at` is when the platform started the worker: its bill starts there, before
    the job was picked up (the ledger's cold start). `status` is the worker's state in the
    list. `idle_timeout_s` is the endpoint's idle timeout as the platform records it
    (`GET /v2/serverless/{id}`). `found` is False when the list did not name the job's
    worker (it stopped, or the status named none) or, while queued, listed no worker.
    """

    kind: Literal["WorkerObserved"] = "WorkerObserved"
    v: V1 = 1
    worker_id: Outside[NAME_CAP] | None = None
    found: bool = True
    gpu_type: Outside[NAME_CAP] | None = None
    datacenter: Outside[NAME_CAP] | None = None
    started_at: float | None = None
    idle_timeout_s: float | None = Field(None, ge=0)
    read_error: Outside[MESSAGE_CAP] | None = None
    status: Outside[NAME_CAP] | None = Field(
        None,
        exclude_if=_unset,
        description="the worker's state as the platform lists it (initializing, running, "
        "idle, ready, throttled, unhealthy); unset when not listed",
    )


class WorkerLogObserved(EventBase):
    """The last lines of the worker's own log, read before a failing verdict (or on demand).

    Read from RunPod REST v2 (`GET /v2/serverless/{id}/workers/{worker}/logs?tail=N`),
    bounded in lines, bytes and time (`truncated` says a bound cut it), every line masked
    for secrets and capped. `worker_id` is the job's worker, or, when no status named one
    (a crash loop keeps the job IN_QUEUE), the endpoint's worker the read chose
    (`worker_status` says which: an unhealthy one first).
    """

    kind: Literal["WorkerLogObserved"] = "WorkerLogObserved"
    v: V1 = 1
    worker_id: Outside[NAME_CAP] | None = None
    worker_status: Outside[NAME_CAP] | None = None
    lines: tuple[Outside[LOG_LINE_CAP], ...] = Field((), max_length=LOG_LINES_MAX)
    truncated: bool = False
    read_error: Outside[MESSAGE_CAP] | None = None


class Concluded(EventBase):
    """The verdict: the terminal state, the rule that fired and the events it rests on."""

    kind: Literal["Concluded"] = "Concluded"
    v: V1 = 1
    state: Text
    ok: bool
    failure: FailureKind | None = None
    detail: Outside[DETAIL_CAP] = ""
    rule: Text
    evidence: tuple[NonNegativeInt, ...] = ()
    metrics: dict[str, Any] | None = None


# --- the run's stream: attempts, deploys, submissions ------------------------------------


class Candidate(BaseModel):
    """A GPU option for a run: where, what, and what it costs.

    `price_per_hour` None: nobody gave a price, and the money of its attempts is unpriced
    everywhere (`cost`, the web view, the metrics), never $0. A recorded 0.0 (what a
    candidate built without a price got before None existed) stays a price of 0.0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    provider: Text = "runpod"
    gpu_class: Text
    price_per_hour: float | None = Field(
        None,
        ge=0,
        description="USD per hour of a worker; null: nobody gave a price (unpriced, never "
        "$0; a `RunStarted` v2 field)",
    )
    vram_gb: float = Field(0.0, ge=0)


def _unpriced(candidates: Any) -> bool:
    """Whether raw `RunStarted.candidates` (models or dicts) hold one without a price."""
    if not isinstance(candidates, list | tuple):
        return False
    for c in candidates:
        if isinstance(c, Candidate) and c.price_per_hour is None:
            return True
        if isinstance(c, dict) and c.get("price_per_hour") is None:
            return True
    return False


class RunStarted(EventBase):
    """A run (one training job to a result, over one or more attempts) began.

    `single_attempt` makes it a run of exactly that one attempt, on the first candidate,
    with no walk, retry or bonus (what `submit_run` records: its caller walks); its
    `on_last_gpu` is then the caller's word. Logs from before these fields were added
    decode with them unset: a walk, as then.

    v2 lets a candidate have no price (`Candidate.price_per_hour` null): a run whose
    candidates all have one keeps writing v1, so a library that knows only v1 reads it,
    and refuses one with an unpriced candidate by its version (rather than read it as
    $0, the v1 default). Built with an unpriced candidate and no `v`, the event is v2; a
    v1 candidate without a price reads 0.0, as v1 did.
    """

    kind: Literal["RunStarted"] = "RunStarted"
    v: V1or2 = 1
    run_id: Text
    candidates: tuple[Candidate, ...]
    max_retries: NonNegativeInt = 2
    weight_cache: bool = False
    budget_s: float | None = Field(None, gt=0)
    phase: Text | None = None
    seed: int | None = None
    single_attempt: NonNegativeInt | None = None
    on_last_gpu: bool = False
    spec: Outside[SPEC_CAP] | None = Field(
        None,
        description="the run's `RunSpec` as JSON (it holds no secret), recorded when the run "
        "is handed to a fleet with one: what a replica deploys and submits (unset: the "
        "adapters driving the run know what it runs)",
    )
    retry_lost_unverified: bool = Field(
        False,
        exclude_if=_unset,
        description="the walk retries an attempt whose job RunPod forgot while nobody "
        "watched and no evidence says whether it finished (`lost_unverified`); unset: not "
        "retried, as a retry may train it a second time",
    )

    @model_validator(mode="before")
    @classmethod
    def _unpriced_writes_v2(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        candidates = data.get("candidates")
        if "v" not in data:
            return {**data, "v": 2} if _unpriced(candidates) else data
        if data["v"] == 1 and isinstance(candidates, list | tuple):
            # (v1 had no unpriced candidate: a price left out was the v1 default, 0.0)
            filled = [
                {"price_per_hour": 0.0, **c} if isinstance(c, dict) else c for c in candidates
            ]
            return {**data, "candidates": filled}
        return data

    @model_validator(mode="after")
    def _unpriced_is_v2(self) -> RunStarted:
        if self.v < 2 and any(c.price_per_hour is None for c in self.candidates):
            raise ValueError("a candidate without a price is a RunStarted v2 field: write v=2")
        return self

    @model_serializer(mode="wrap")
    def _unset_spec_unwritten(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.spec is None:
            del data["spec"]  # a run without one is written exactly as before the field existed
        return data


class AttemptStarted(EventBase):
    """The run picked a GPU for its next attempt."""

    kind: Literal["AttemptStarted"] = "AttemptStarted"
    v: V1 = 1
    attempt: NonNegativeInt
    candidate: NonNegativeInt  # index into RunStarted.candidates
    provider: Text
    gpu_class: Text
    on_last_gpu: bool = False
    cache_dropped: bool = False
    bonus: bool = False  # the one cache-drop retry, outside the walk's budget
    endpoint_name: Text = ""
    job_stream: Text = ""
    weight_cache: bool | None = Field(
        None,
        description="the weight cache is attached to this attempt's endpoint (unset in logs "
        "from before it was recorded: the run's `weight_cache` and not `cache_dropped`)",
    )
    redo: bool = Field(
        False,
        exclude_if=_unset,
        description="a redo of the attempt before it, on the same candidate and outside the "
        "walk's budget: that attempt's submit was answered to a process that stopped before "
        "recording it, so its endpoint was torn down with the unknown job",
    )


class CapacityEvidence(BaseModel):
    """What recent job logs say about one (provider, GPU class): how its jobs waited."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    provider: Text = Field("runpod", description="where the attempts deployed")
    gpu_class: Text = Field(description="the GPU class they asked for")
    jobs: NonNegativeInt = Field(0, description="attempts of this candidate in the window")
    no_capacity: NonNegativeInt = Field(0, description="of them, how many ended `no_capacity`")
    waited_s: float = Field(
        0.0, ge=0, description="their time in IN_QUEUE before a worker took them, summed"
    )
    throttled_s: float = Field(
        0.0, ge=0, description="of that wait, the time the endpoint's workers were throttled"
    )
    longest_wait_s: float = Field(0.0, ge=0, description="the longest of those waits")
    last_starved_at: float | None = Field(
        None, description="when its latest starved job ended (None: none starved)"
    )
    starved: bool = Field(False, description="the ranking rule judged it starved within the window")


class CandidatesRanked(EventBase):
    """The order the walk prefers the run's candidates in, and the evidence behind it.

    Recorded once, before the first attempt, when capacity memory is on: the recent job
    logs of the store, per (provider, GPU class), and the order the ranking rule made of
    them (`flashfsm.fsm.capacity`). A run without it walks in price order.
    """

    kind: Literal["CandidatesRanked"] = "CandidatesRanked"
    v: V1 = 1
    order: tuple[NonNegativeInt, ...] = Field(
        description="indexes into `RunStarted.candidates`, the preferred first"
    )
    rule: Text = Field("starved_last", description="the ranking rule that made the order")
    window_s: float = Field(gt=0, description="how far back the evidence looks")
    starve_after_s: float = Field(
        ge=0, description="a wait longer than this in the window makes a candidate starved"
    )
    evidence: tuple[CapacityEvidence, ...] = Field(
        (), description="per (provider, GPU class) among the candidates, what the window holds"
    )
    jobs_read: NonNegativeInt = Field(0, description="job logs read to gather the evidence")


class DeployAttempted(EventBase):
    """One try to deploy the attempt's endpoint on one account."""

    kind: Literal["DeployAttempted"] = "DeployAttempted"
    v: V1 = 1
    attempt: NonNegativeInt
    account: NonNegativeInt
    endpoint_name: Text
    try_no: NonNegativeInt = 0


class QuotaExhausted(EventBase):
    """The account's worker quota refused the deploy; idle endpoints were swept."""

    kind: Literal["QuotaExhausted"] = "QuotaExhausted"
    v: V1 = 1
    attempt: NonNegativeInt
    account: NonNegativeInt
    swept: NonNegativeInt = 0
    wait_s: float = Field(0.0, ge=0)
    message: Outside[MESSAGE_CAP] = ""


class AccountFailedOver(EventBase):
    """The deploy moved to the next account of the key pool (keys are never recorded)."""

    kind: Literal["AccountFailedOver"] = "AccountFailedOver"
    v: V1 = 1
    attempt: NonNegativeInt
    from_account: NonNegativeInt
    to_account: NonNegativeInt


class DeployIntended(EventBase):
    """The run is about to deploy the attempt's endpoint under its recorded name: the intent,
    recorded before the call. A resume that finds it without the deploy's outcome looks the
    endpoint up by that name before anything else (`EndpointsLookedUp`), so a restart never
    deploys a second endpoint for one attempt."""

    kind: Literal["DeployIntended"] = "DeployIntended"
    v: V1 = 1
    attempt: NonNegativeInt
    endpoint_name: Text


class FoundEndpoint(BaseModel):
    """An endpoint a lookup found under an attempt's name, as the platform's record has it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint_id: Text = Field(description="the endpoint's id")
    account: NonNegativeInt = Field(0, description="the key pool's account it is on")
    idle_timeout_s: float | None = Field(
        None, ge=0, description="its idle timeout, as the platform's record says"
    )


class EndpointsLookedUp(EventBase):
    """The platform asked which endpoints carry the name of an attempt whose deploy was
    intended but never recorded (the process stopped between the call and its record):
    what it found (adopted, or deleted), or the error that kept it from answering."""

    kind: Literal["EndpointsLookedUp"] = "EndpointsLookedUp"
    v: V1 = 1
    attempt: NonNegativeInt
    endpoint_name: Text
    found: tuple[FoundEndpoint, ...] = ()
    error_class: Outside[NAME_CAP] | None = None
    message: Outside[MESSAGE_CAP] = ""


class EndpointDeployed(EventBase):
    """The attempt's endpoint exists.

    v2 adds `idle_timeout_s`, the idle timeout flashfsm set on the endpoint (how long an
    idle worker stays up, billed, after its job): the ledger bills by it. A v1 event (a
    deploy that left the SDK's default in place) has none.
    """

    kind: Literal["EndpointDeployed"] = "EndpointDeployed"
    v: V1or2 = 1
    attempt: NonNegativeInt
    endpoint_id: Text
    endpoint_name: Text
    account: NonNegativeInt = 0
    volumes: tuple[Text, ...] = ()
    disk_gb: NonNegativeInt | None = None
    idle_timeout_s: float | None = Field(
        None, ge=0, description="v2: the idle timeout flashfsm set on the endpoint, in seconds"
    )

    @model_validator(mode="before")
    @classmethod
    def _idle_timeout_writes_v2(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("idle_timeout_s") is not None and "v" not in data:
            return {**data, "v": 2}
        return data

    @model_validator(mode="after")
    def _idle_timeout_is_v2(self) -> EndpointDeployed:
        if self.idle_timeout_s is not None and self.v < 2:
            raise ValueError("idle_timeout_s is an EndpointDeployed v2 field: write v=2")
        return self

    @model_serializer(mode="wrap")
    def _v1_has_no_idle_timeout(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.v == 1:
            del data["idle_timeout_s"]  # v1 has no such field: written as before it existed
        return data


class DeployFailed(EventBase):
    """The deploy gave up (quota on every account, or another error)."""

    kind: Literal["DeployFailed"] = "DeployFailed"
    v: V1 = 1
    attempt: NonNegativeInt
    error_class: Outside[NAME_CAP]
    message: Outside[MESSAGE_CAP] = ""


class JobQueued(EventBase):
    """The attempt's job was submitted; its watch lives in `job_stream`."""

    kind: Literal["JobQueued"] = "JobQueued"
    v: V1 = 1
    attempt: NonNegativeInt
    endpoint_id: Text
    job_id: Text
    job_stream: Text
    submitted_at: float


class SubmitIntended(EventBase):
    """The run is about to submit the attempt's job to its endpoint: the intent, recorded
    before `/run` (which has no idempotency key). A resume that finds it without a
    `JobQueued` or `SubmitFailed` cannot know the job's id, so it tears the endpoint down
    (the unknown job with it) before anything is submitted again."""

    kind: Literal["SubmitIntended"] = "SubmitIntended"
    v: V1 = 1
    attempt: NonNegativeInt
    endpoint_id: Text


class SubmitFailed(EventBase):
    """The submit call failed; the endpoint it was meant for is deleted."""

    kind: Literal["SubmitFailed"] = "SubmitFailed"
    v: V1 = 1
    attempt: NonNegativeInt
    error_class: Outside[NAME_CAP]
    message: Outside[MESSAGE_CAP] = ""


class JobCancelled(EventBase):
    """A job of the run was cancelled on RunPod (before a retry, or on a user cancel)."""

    kind: Literal["JobCancelled"] = "JobCancelled"
    v: V1 = 1
    attempt: NonNegativeInt
    job_id: Text
    ok: bool = True


class EndpointDeleted(EventBase):
    """An endpoint the run created was deleted (`ok=False`: the delete failed)."""

    kind: Literal["EndpointDeleted"] = "EndpointDeleted"
    v: V1 = 1
    endpoint_id: Text
    reason: Text = ""
    ok: bool = True


class AttemptEnded(EventBase):
    """An attempt's outcome: its job's verdict, or the deploy or submit error."""

    kind: Literal["AttemptEnded"] = "AttemptEnded"
    v: V1 = 1
    attempt: NonNegativeInt
    ok: bool
    failure: FailureKind | None = None
    rule: Text | None = None
    detail: Outside[DETAIL_CAP] = ""
    metrics: dict[str, Any] | None = None


class CancelRequested(EventBase):
    """The user asked the run to stop; it wins over everything that follows."""

    kind: Literal["CancelRequested"] = "CancelRequested"
    v: V1 = 1
    by: Outside[NAME_CAP] = ""
    reason: Outside[MESSAGE_CAP] = ""


class RunConcluded(EventBase):
    """The run's result."""

    kind: Literal["RunConcluded"] = "RunConcluded"
    v: V1 = 1
    ok: bool
    failure: FailureKind | None = None
    attempts: NonNegativeInt = 0
    detail: Outside[DETAIL_CAP] = ""
    metrics: dict[str, Any] | None = None


# --- the sweeper's stream: idle endpoints --------------------------------------------------


class IdleSeen(EventBase):
    """A sweep found an endpoint idle for the first time (its grace starts at `since`)."""

    kind: Literal["IdleSeen"] = "IdleSeen"
    v: V1 = 1
    endpoint_id: Text
    endpoint_name: Outside[NAME_CAP] = ""
    since: float


class IdleCleared(EventBase):
    """An endpoint seen idle is busy again, protected, or gone: its grace timer clears."""

    kind: Literal["IdleCleared"] = "IdleCleared"
    v: V1 = 1
    endpoint_id: Text
    reason: Text = ""


class EndpointReaped(EventBase):
    """The sweeper deleted an endpoint that stayed idle past its grace."""

    kind: Literal["EndpointReaped"] = "EndpointReaped"
    v: V1 = 1
    endpoint_id: Text
    endpoint_name: Outside[NAME_CAP] = ""
    idle_s: float = Field(0.0, ge=0)


JOB_EVENTS = (
    JobSubmitted,
    WatchStarted,
    StatusObserved,
    StatusFetchFailed,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    FailureDetailObserved,
    WorkerObserved,
    WorkerLogObserved,
    Concluded,
)
RUN_EVENTS = (
    RunStarted,
    CandidatesRanked,
    AttemptStarted,
    DeployIntended,
    DeployAttempted,
    QuotaExhausted,
    AccountFailedOver,
    EndpointsLookedUp,
    EndpointDeployed,
    DeployFailed,
    SubmitIntended,
    JobQueued,
    SubmitFailed,
    JobCancelled,
    EndpointDeleted,
    AttemptEnded,
    CancelRequested,
    RunConcluded,
)
SWEEPER_EVENTS = (IdleSeen, IdleCleared, EndpointReaped)

Event = Annotated[
    JobSubmitted
    | WatchStarted
    | StatusObserved
    | StatusFetchFailed
    | HealthObserved
    | HealthProbeFailed
    | HeartbeatObserved
    | FailureDetailObserved
    | WorkerObserved
    | WorkerLogObserved
    | Concluded
    | RunStarted
    | CandidatesRanked
    | AttemptStarted
    | DeployIntended
    | DeployAttempted
    | QuotaExhausted
    | AccountFailedOver
    | EndpointsLookedUp
    | EndpointDeployed
    | DeployFailed
    | SubmitIntended
    | JobQueued
    | SubmitFailed
    | JobCancelled
    | EndpointDeleted
    | AttemptEnded
    | CancelRequested
    | RunConcluded
    | IdleSeen
    | IdleCleared
    | EndpointReaped,
    Field(discriminator="kind"),
]
"""Any event: a job watch's, a run's or the sweeper's."""

EVENT_TYPES: dict[str, type[EventBase]] = {
    cls.model_fields["kind"].default: cls for cls in (*JOB_EVENTS, *RUN_EVENTS, *SWEEPER_EVENTS)
}
"""Every event kind and its model (the declared reads' kinds too: `register_event`)."""

#: The event kinds declared outside this module (a read's, `flashfsm.reads.declare_read`):
#: decoded by their own model, not by `EVENT_ADAPTER`'s union.
DECLARED_EVENTS: dict[str, type[EventBase]] = {}


def register_event(model: type[EventBase]) -> type[EventBase]:
    """Make `model` a kind the log can hold: encoded as any event, decoded by its model.

    Its `kind` must be a new one (`ValueError` otherwise). `unregister_event` takes it
    back (a test's read, say). Pure: it changes only these tables.
    """
    field = model.model_fields.get("kind")
    kind = None if field is None else field.default
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"{model.__name__}: an event model declares its kind as a default")
    if kind in EVENT_TYPES:
        raise ValueError(f"event kind {kind!r} is already known")
    EVENT_TYPES[kind] = DECLARED_EVENTS[kind] = model
    return model


def unregister_event(kind: str) -> None:
    """Forget a kind `register_event` declared (a built-in kind is a `ValueError`)."""
    if kind not in DECLARED_EVENTS:
        raise ValueError(f"event kind {kind!r} was not declared by register_event")
    del DECLARED_EVENTS[kind], EVENT_TYPES[kind]


#: The versions of a kind its model validates as they are, without an upcaster, where that
#: is more than its current one: `WatchStarted` is v1 without a skew, v2 with one, v3 with
#: a worker reader and v4 with one that reads the queue's records too, `JobSubmitted` v2
#: without a hand-off's fields and v3 with them, `EndpointDeployed` v1 without an idle
#: timeout and v2 with one, `RunStarted` v1 with every candidate priced and v2 with one
#: that is not.
VERSIONS_READ_AS_IS: dict[str, frozenset[int]] = {
    "WatchStarted": frozenset({1, 2, 3, 4}),
    "JobSubmitted": frozenset({2, 3}),
    "EndpointDeployed": frozenset({1, 2}),
    "RunStarted": frozenset({1, 2}),
}

#: Decodes any event. Only keys are cached while parsing: ids, times and most values differ
#: on every line, so caching string values costs a replay more than it saves.
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(cache_strings="keys"))
