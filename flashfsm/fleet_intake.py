"""A fleet's intake: what a hand-off may say, checked before anything is opened, and
`hand_off_job`, which records a job's hand-off in the store.

Work reaches a fleet (`flashfsm.fleet`) through the store: `hand_off_job` records a job's
`JobSubmitted` as a hand-off (`flashfsm.events.store.HANDOFF`), and `flashfsm runs add`
reads an intake document (`load_intake`) and checks it as a job (`job_intake`) or a run
(`run_intake`) before anything is written. This module holds those checks and their
bounds; it was part of `flashfsm.fleet`, which re-exports its public names, and it
imports nothing of the fleet's (the replica takes its `require_leases` from here).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from flashfsm.events.models import NAME_CAP, Candidate, HubLocation, JobSubmitted
from flashfsm.events.policy import GracePolicy
from flashfsm.events.store import HANDOFF, EventStore, FencedStore, LeaseStore, capabilities
from flashfsm.naming import (
    attempt_stream,
    character_name,
    check_stream,
    control_character,
    job_stream,
    run_stream,
)
from flashfsm.shell import resolve_store
from flashfsm.watch import JobHandle, recorded_handle, submission
from flashfsm.writer import JOB, NEWER_WATCH_WINS, StreamWriter

M = TypeVar("M", bound=BaseModel)

#: The largest intake document `flashfsm runs add` reads (a handle or a run is a few hundred
#: bytes), and how deep it may nest (a run's candidates are two levels down).
MAX_INTAKE_BYTES = 1 << 20
MAX_INTAKE_DEPTH = 8
#: The most digits an integer of an intake document may have (a 64-bit integer's 19): a
#: longer one is refused before Python converts it.
MAX_INTAKE_DIGITS = 19
#: The longest number (its JSON text) an intake document may hold.
MAX_NUMBER_CHARS = 64
#: Bounds of a hand-off's numbers: the poll interval, a policy's windows and a run's budget
#: (seconds), a submission time (Unix seconds), an attempt's index, a run's retries and
#: candidates.
MAX_INTERVAL_S = 86_400.0
MAX_WINDOW_S = 10 * 365 * 86_400.0
MAX_SUBMITTED_AT = 1e11
MAX_ATTEMPT = 1000
MAX_RETRIES = 100
MAX_CANDIDATES = 100


def _plain(value: str) -> str:
    bad = control_character(value)
    if bad is not None:
        raise ValueError(f"holds a control character ({character_name(bad)})")
    return value


#: An id or name of a hand-off: a string of 1 to `NAME_CAP` characters, none a control one
#: (`flashfsm.naming.control_character`).
IntakeName = Annotated[str, Field(min_length=1, max_length=NAME_CAP), AfterValidator(_plain)]
_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class JobIntake(BaseModel):
    """A job handed to the fleet: a `JobHandle`'s fields (what `JobHandle.to_dict` writes)
    and what its watch needs besides — where its heartbeat is (`hub`), its `policy` and
    `interval_s` — and the `stream` to record it in. `trusted_output` is taken and never
    recorded: the fleet reads every handed-off job's output as JSON only."""

    model_config = _STRICT

    provider: Literal["runpod"] = "runpod"
    endpoint_id: IntakeName
    endpoint_name: Annotated[str, Field(max_length=NAME_CAP), AfterValidator(_plain)] = ""
    job_id: IntakeName
    gpu_class: IntakeName | None = None
    attempt: int = Field(0, ge=0, le=MAX_ATTEMPT)
    on_last_gpu: bool = False
    submitted_at: float | None = Field(None, ge=0, le=MAX_SUBMITTED_AT)
    trusted_output: bool = False
    stream: IntakeName | None = None
    hub: HubLocation | None = None
    policy: GracePolicy | None = None
    interval_s: float | None = Field(None, gt=0, le=MAX_INTERVAL_S)

    @model_validator(mode="after")
    def _bounded(self) -> JobIntake:
        if self.hub is not None:
            for name in ("hf_repo", "phase", "run_id"):
                if not getattr(self.hub, name):
                    raise ValueError(f"hub.{name} is empty")
                _plain(getattr(self.hub, name))
        if self.policy is not None:
            for name, value in self.policy.model_dump().items():
                if value is not None and not 0 <= value <= MAX_WINDOW_S:
                    raise ValueError(
                        f"policy.{name} {value!r} is out of range (0 to {MAX_WINDOW_S:,.0f})"
                    )
        check_stream(self.stream_name, "stream" if self.stream else "job_id")
        return self

    @property
    def stream_name(self) -> str:
        """The stream the job is recorded in: `stream`, else `job-<job_id>`."""
        return self.stream or job_stream(self.job_id)

    def handle(self) -> JobHandle:
        """The job's handle (JSON-only: `trusted_output` is never handed over)."""
        return recorded_handle(self)


class RunIntake(BaseModel):
    """A run handed to the fleet by `flashfsm runs add`: `supervise_run`'s arguments."""

    model_config = _STRICT

    run_id: IntakeName
    candidates: list[Candidate] = Field(min_length=1, max_length=MAX_CANDIDATES)
    max_retries: int = Field(2, ge=0, le=MAX_RETRIES)
    budget_s: float | None = Field(None, gt=0, le=MAX_WINDOW_S)
    phase: IntakeName | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)
    stream: IntakeName | None = None

    @model_validator(mode="after")
    def _bounded(self) -> RunIntake:
        check_stream(self.stream or run_stream(self.run_id), "stream" if self.stream else "run_id")
        last = attempt_stream(self.run_id, self.max_retries + 1, self.seed)  # (+1: a bonus)
        check_stream(last, "run_id (its last attempt's job stream)")
        return self


def job_intake(data: Mapping[str, Any]) -> JobIntake:
    """A job hand-off from plain data, checked (`ValueError`: what is wrong, in one line)."""
    return _validated(JobIntake, data)


def run_intake(data: Mapping[str, Any]) -> RunIntake:
    """A run hand-off from plain data, checked (`ValueError`: what is wrong, in one line)."""
    return _validated(RunIntake, data)


def _validated(model: type[M], data: Mapping[str, Any]) -> M:
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    check_plain_json(data)
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        parts = []
        for err in exc.errors(include_url=False, include_input=False):
            where = ".".join(str(part) for part in err["loc"])
            what = str(err["msg"]).removeprefix("Value error, ")  # (a validator's own words)
            parts.append(f"{where}: {what}" if where else what)
        raise ValueError("; ".join(parts)) from None


def check_plain_json(value: Any) -> None:
    """Refuse (`ValueError`) a value nested deeper than `MAX_INTAKE_DEPTH`, a string or key
    holding a NUL character, or a float that is not finite (the walk is iterative)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > MAX_INTAKE_DEPTH:
                raise ValueError(f"nested deeper than {MAX_INTAKE_DEPTH} levels")
            if isinstance(item, Mapping):
                pending.extend((key, depth) for key in item)
                pending.extend((inner, depth + 1) for inner in item.values())
            else:
                pending.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str) and "\x00" in item:
            raise ValueError(f"a NUL character in {item[:40]!r}")
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{item!r} is not a finite number")


def load_intake(raw: bytes) -> dict[str, Any]:
    """An intake document (what `flashfsm runs add FILE` reads) as a dict, or a one-line
    `ValueError`: over `MAX_INTAKE_BYTES`, not UTF-8 JSON, not an object, a key given twice,
    `NaN` or `Infinity`, a number out of a float's range or longer than `MAX_NUMBER_CHARS`, an
    integer of more than `MAX_INTAKE_DIGITS` digits, deeper than `MAX_INTAKE_DEPTH`, a NUL
    character."""
    if len(raw) > MAX_INTAKE_BYTES:
        raise ValueError(f"larger than {MAX_INTAKE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(
            text,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            object_pairs_hook=_object,
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_INTAKE_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got a JSON {type(data).__name__}")
    check_plain_json(data)
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTAKE_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_INTAKE_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {key[:40]!r} given twice")
        data[key] = value
    return data


def hand_off_job(
    handle: JobHandle | Mapping[str, Any],
    store: EventStore | str,
    *,
    policy: GracePolicy | None = None,
    stream: str | None = None,
    hub: HubLocation | Mapping[str, Any] | None = None,
    interval_s: float | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """Hand a submitted job to the fleet: record its `JobSubmitted` and return at once.

    Returns the job's stream (default `job-<job_id>`); whichever replica is alive claims it
    and watches it to its verdict. The hand-off carries the whole watch: `hub` (where the
    worker writes its heartbeat and failure artifacts: the replica reads them as
    `poll_job`'s Hub readers would), `policy` and `interval_s` (None: the replica's own).
    Without `hub` the job is watched without heartbeat readers, and `flashfsm ls` and
    `explain` say so. A dict `handle` may carry all of these (`JobIntake`'s fields).

    Everything is checked before the store is opened (a `ValueError` naming what is
    wrong, and nothing written). A stream that already records this job is left as it is
    (handing off twice is harmless), but for its failed mark, if a replica marked it
    (`MAX_CLAIM_FAILURES`): handing it off again clears it, and replicas claim it again.
    One that records another job, or this job id on another endpoint, is a `ValueError`
    naming both. A stream name, an id or a name holding a control character is refused
    (`flashfsm.naming.check_stream`). The handle is JSON-only there (`trusted_output` is
    not recorded).
    """
    fields = dict(handle.to_dict() if isinstance(handle, JobHandle) else handle)
    given = {"policy": policy, "stream": stream, "hub": hub, "interval_s": interval_s}
    fields.update({k: v for k, v in given.items() if v is not None})
    if isinstance(fields.get("hub"), HubLocation):
        fields["hub"] = fields["hub"].model_dump()
    if isinstance(fields.get("policy"), GracePolicy):
        fields["policy"] = fields["policy"].model_dump()
    intake = job_intake(fields)
    opened = resolve_store(store)
    try:
        _record_hand_off(opened, intake, clock)
    finally:
        if isinstance(store, str):  # opened here: closed here
            opened.close()
    return intake.stream_name


def _record_hand_off(store: EventStore, intake: JobIntake, clock: Callable[[], float]) -> None:
    leases = require_leases(store)
    job, name = intake.handle(), intake.stream_name
    writer = StreamWriter(FencedStore(store, lambda _s: HANDOFF), name, JOB, NEWER_WATCH_WINS)
    writer.open()
    recorded = writer.state.submitted
    if recorded is not None:
        if recorded.job_id != job.job_id:
            raise ValueError(f"stream {name!r} records job {recorded.job_id!r}, not {job.job_id!r}")
        if recorded.endpoint_id != job.endpoint_id:
            raise ValueError(
                f"stream {name!r} records job {job.job_id!r} on endpoint "
                f"{recorded.endpoint_id!r}, not on {job.endpoint_id!r}: a job id names one job "
                "(hand the other off with its own stream)"
            )
        if not writer.state.done:
            leases.unmark(name)  # (a stream marked failed to start is claimed again)
        return
    if writer.next_seq:
        raise ValueError(f"stream {name!r} holds events but no submitted job: not a job stream")
    writer.record(
        JobSubmitted,
        clock(),
        **submission(job, intake.policy or GracePolicy()),  # (its hub with it)
        interval_s=intake.interval_s,
    )


def require_leases(store: EventStore) -> LeaseStore:
    """The store's `LeaseStore` (that of the store a wrapper such as `FencedStore` wraps),
    or `ValueError`."""
    inner = getattr(store, "inner", store)
    leases = capabilities(inner).leases
    if leases is None:
        raise ValueError(
            f"{inner!r} cannot host a fleet: it keeps no open-streams index or leases "
            "(use an SQLite or PostgreSQL store)"
        )
    return leases
