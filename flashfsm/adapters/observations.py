"""Turn RunPod and worker payloads into event fields.

Each parser accepts whatever arrived (a dict, anything else, keys missing or of the wrong
type) and returns plain values or raises `MalformedAnswer`; none of them lets a surprise
escape as a crash. Text goes out as it came (valid UTF-8): the event fields it fills are
`Outside` text, which masks secrets and then caps, whoever builds the event. The strings
inside a success's metrics are masked here, one by one, as they are no text field.

The platform's own records (issue 28) never raise at all, not even `MalformedAnswer`: a
worker read is evidence, never a reason, so an odd answer becomes None fields.

- `status_worker_id(status)`: the worker a status answer names (`workerId`), or None.
- `worker_fields(workers, endpoint, worker_id)`: a `WorkerObserved`'s fields from the
  endpoint's worker list (`GET /v2/serverless/{id}/workers`) and, when read, the
  endpoint's record (`GET /v2/serverless/{id}`, its `idleTimeout`); `started_at` is the
  worker's `startedAt` (RFC 3339 with an offset) as epoch seconds.
  `worker_error_fields(error, worker_id)` for a failed read.
- `pick_worker(workers, worker_id)`: whose log to read: the job's worker (listed or not),
  else the first `unhealthy` one (a crash loop: no status named a worker), else the first
  `running`, else the first listed; `(id, status)` or None.
- `worker_log_fields(log, worker_id, worker_status)`: a `WorkerLogObserved`'s fields from a
  `worker_log` answer (the last `LOG_LINES_MAX` lines; each is masked and cut to
  `LOG_LINE_CAP` when the event is built). `worker_log_error_fields` for a failed read.

Ids longer than `NAME_CAP` (or empty, or not strings) are no ids: they name no worker.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from flashfsm.adapters.flash_wire import decode_output, safe_text
from flashfsm.errors import OutputDecodeError, TransientReadError
from flashfsm.events.models import (
    END_STAGE,
    ERROR_CAP,
    LOG_LINES_MAX,
    MESSAGE_CAP,
    NAME_CAP,
    JobCounts,
    WorkerCounts,
)
from flashfsm.fsm.rules import TERMINAL_STATUSES
from flashfsm.redact import redact, redact_then_cap

METRICS_CAP = 64 * 1024  # bytes of JSON kept for a success's metrics
_JSON_INT_MAX = 2**53  # larger integers are not exact in every JSON reader


class MalformedAnswer(ValueError):
    """A payload without the shape the route promises (no `status`, not an object, …)."""


def status_fields(payload: Any, *, allow_pickle: bool = False) -> dict[str, Any]:
    """The `StatusObserved` fields of one status answer, or `MalformedAnswer`.

    A COMPLETED output is decoded JSON-only unless `allow_pickle` (see `decode_output`);
    an output that does not decode, an untrusted pickle included, becomes `output_error`.
    """
    if not isinstance(payload, dict):
        raise MalformedAnswer(f"status answer is a {type(payload).__name__}, not an object")
    status = payload.get("status")
    if not isinstance(status, str) or not status:
        raise MalformedAnswer("status answer has no status string")
    fields: dict[str, Any] = {"status": safe_text(status)[:NAME_CAP]}
    if status not in TERMINAL_STATUSES:
        return fields
    output = payload.get("output")
    if status == "COMPLETED":
        try:
            fields["metrics"] = json_safe(decode_output(output, allow_pickle=allow_pickle))
        except OutputDecodeError as exc:
            fields["output_error"] = safe_text(exc)
        return fields
    error = payload.get("error")
    if error is not None and error != "":
        text = safe_text(error) if isinstance(error, str) else _dumps(_plain(error, 0))
        fields["error"] = text
    if isinstance(output, dict) and output.get("stdout"):
        fields["stdout_tail"] = safe_text(output["stdout"])
    elif output is not None and "error" not in fields:
        fields["output_text"] = _dumps(_plain(output, 0))
    return fields


def health_fields(payload: Any) -> dict[str, Any]:
    """The `HealthObserved` fields of one `/health` answer (missing or odd counts are 0)."""
    if not isinstance(payload, dict):
        raise MalformedAnswer(f"health answer is a {type(payload).__name__}, not an object")
    workers = payload.get("workers")
    jobs = payload.get("jobs")
    workers = workers if isinstance(workers, dict) else {}
    jobs = jobs if isinstance(jobs, dict) else {}
    return {
        "workers": WorkerCounts(**{k: _count(workers.get(k)) for k in WorkerCounts.model_fields}),
        "jobs": JobCounts(
            completed=_count(jobs.get("completed")),
            failed=_count(jobs.get("failed")),
            in_progress=_count(jobs.get("inProgress")),
            in_queue=_count(jobs.get("inQueue")),
            retried=_count(jobs.get("retried")),
        ),
    }


def heartbeat_fields(payload: Any) -> dict[str, Any]:
    """The `HeartbeatObserved` fields of a heartbeat read (`found=False` for nothing usable)."""
    if not isinstance(payload, dict):
        return {"found": False}
    stage = payload.get("stage")
    fields = {
        "found": True,
        "stage": safe_text(stage) if stage is not None else None,
        "step": _integer(payload.get("step")),
        "ts": _finite(payload.get("ts")),
        "retriable": _flag(payload.get("retriable")),
    }
    metrics = payload.get("metrics")
    if fields["stage"] == END_STAGE and isinstance(metrics, dict):
        fields["metrics"] = json_safe(metrics)  # the end record's: masked and capped
    return fields


def error_fields(exc: BaseException) -> dict[str, Any]:
    """`error_class`, `http_status` and `message` for a failed call (the event masks and
    caps the text)."""
    status = getattr(exc, "status_code", None)
    return {
        "error_class": type(exc).__name__,
        "http_status": status if isinstance(status, int) and not isinstance(status, bool) else None,
        "message": safe_text(exc),
    }


#: Reader exceptions that mean "try again" rather than "nothing there".
TRANSIENT_READ_ERRORS = (TransientReadError, TimeoutError, ConnectionError)


def read_error_text(exc: BaseException) -> str | None:
    """A failed read's `read_error` ("class HTTP code: message"), or None when the exception
    is not a transient failure (`TRANSIENT_READ_ERRORS`): then the read counts as no data."""
    if not isinstance(exc, TRANSIENT_READ_ERRORS):
        return None
    fields = error_fields(exc)
    code = fields["http_status"]
    text = fields["error_class"] + ("" if code is None else f" HTTP {code}")
    if fields["message"]:
        text += f": {fields['message']}"
    return text


# --------------------------------------------------------------------------- platform records

#: Worker states `pick_worker` prefers, in order, when no status named the job's worker.
PICK_ORDER = ("unhealthy", "running")
#: The order a worker-record read picks the endpoint's worker in while the job is queued:
#: a crash loop first (it keeps the job IN_QUEUE), then a full host, then a start under way.
QUEUE_ORDER = ("unhealthy", "throttled", "initializing", "running", "idle", "ready")
_TIME_TEXT_MAX = 64  # an RFC 3339 time longer than this is not one


def status_worker_id(payload: Any) -> str | None:
    """The worker a status answer names (`workerId`), or None (none, or not an id)."""
    return _ident(payload.get("workerId")) if isinstance(payload, dict) else None


def worker_fields(workers_payload: Any, endpoint_payload: Any, worker_id: Any) -> dict[str, Any]:
    """The `WorkerObserved` fields: whether the endpoint's worker list names `worker_id`,
    its GPU type, data centre and start (epoch seconds), and the endpoint's idle timeout.

    Anything missing or odd is None (`found=False` for a worker not listed); never raises.
    """
    wid = _ident(worker_id)
    listed = _workers(workers_payload)
    entry = None
    if wid is not None:
        entry = next((w for w in listed if _ident(w.get("id")) == wid), None)
    else:  # no status names one (the job is queued): the endpoint's worker, by QUEUE_ORDER
        entry = _first_by_state(listed, QUEUE_ORDER)
        wid = None if entry is None else _ident(entry.get("id"))
    idle = endpoint_payload.get("idleTimeout") if isinstance(endpoint_payload, dict) else None
    idle_s = _finite(idle)
    return {
        "worker_id": wid,
        "found": entry is not None,
        "gpu_type": None if entry is None else _name(entry.get("gpuTypeId")),
        "datacenter": None if entry is None else _name(entry.get("dataCenterId")),
        "started_at": None if entry is None else rfc3339_epoch(entry.get("startedAt")),
        "idle_timeout_s": idle_s if idle_s is not None and idle_s >= 0 else None,
        "read_error": None,
        "status": None if entry is None else _state(entry),
    }


def _state(entry: dict[str, Any]) -> str | None:
    """A listed worker's state, lower case (None: missing or not a name)."""
    name = _name(entry.get("status"))
    return None if name is None else name.strip().lower()


def _first_by_state(listed: list[dict[str, Any]], order: tuple[str, ...]) -> dict[str, Any] | None:
    """The first listed worker (with an id) in the first state of `order` any is in, else
    the first listed; None when none has an id."""
    named = [w for w in listed if _ident(w.get("id")) is not None]
    for wanted in order:
        for w in named:
            if _state(w) == wanted:
                return w
    return named[0] if named else None


def worker_error_fields(error: BaseException, worker_id: Any) -> dict[str, Any]:
    """The `WorkerObserved` fields of a worker-record read that failed (`found=False`,
    `read_error` a short masked text)."""
    return {
        "worker_id": _ident(worker_id),
        "found": False,
        "gpu_type": None,
        "datacenter": None,
        "started_at": None,
        "idle_timeout_s": None,
        "read_error": failed_read_text(error),
    }


def pick_worker(workers_payload: Any, worker_id: Any) -> tuple[str, str | None] | None:
    """Whose log to read, as `(id, status)`: the job's worker when given (its listed
    status, or None when the list lacks it); else the first `unhealthy` worker listed (a
    crash loop keeps the job queued, so no status named one), else the first `running`,
    else the first listed; None when the list names no worker."""
    listed = [
        (wid, _name(w.get("status")))
        for w in _workers(workers_payload)
        if (wid := _ident(w.get("id"))) is not None
    ]
    wid = _ident(worker_id)
    if wid is not None:
        return next(((i, st) for i, st in listed if i == wid), (wid, None))
    for wanted in PICK_ORDER:
        for i, st in listed:
            if st is not None and st.strip().lower() == wanted:
                return i, st
    return listed[0] if listed else None


def worker_log_fields(log_answer: Any, worker_id: Any, worker_status: Any) -> dict[str, Any]:
    """The `WorkerLogObserved` fields of a `worker_log` answer: its last `LOG_LINES_MAX`
    string lines (others are skipped) and `truncated` (the read's own, or lines dropped
    here). The event masks each line and cuts it to `LOG_LINE_CAP`; never raises."""
    raw = log_answer.get("lines") if isinstance(log_answer, dict) else None
    lines: list[str] = []
    dropped = False
    if isinstance(raw, (list, tuple)):
        for line in reversed(raw):
            if len(lines) == LOG_LINES_MAX:
                dropped = True
                break
            if isinstance(line, str):
                lines.append(safe_text(line))
        lines.reverse()
    truncated = dropped or (isinstance(log_answer, dict) and log_answer.get("truncated") is True)
    return {
        "worker_id": _ident(worker_id),
        "worker_status": _name(worker_status),
        "lines": tuple(lines),
        "truncated": truncated,
        "read_error": None,
    }


def worker_log_error_fields(
    error: BaseException, worker_id: Any, worker_status: Any
) -> dict[str, Any]:
    """The `WorkerLogObserved` fields of a worker-log read that failed (no lines)."""
    return {
        "worker_id": _ident(worker_id),
        "worker_status": _name(worker_status),
        "lines": (),
        "truncated": False,
        "read_error": failed_read_text(error),
    }


def failed_read_text(error: Any) -> str:
    """A failed platform read's `read_error`: "class HTTP code: message", masked, short.
    Unlike `read_error_text`, every exception counts (a 404 or a 401 says something)."""
    try:
        fields = error_fields(error)
        code = fields["http_status"]
        text = fields["error_class"] + ("" if code is None else f" HTTP {code}")
        if fields["message"]:
            text += f": {fields['message']}"
    except Exception:  # an exception whose str() raises something odd
        text = safe_text(type(error).__name__)
    return redact_then_cap(text, MESSAGE_CAP)


def rfc3339_epoch(value: Any) -> float | None:
    """An RFC 3339 time (`2024-05-01T12:00:00.5Z`, with `Z` or an offset) as epoch
    seconds; None for anything else (no offset, not a date, not a string)."""
    if not isinstance(value, str) or not 10 <= len(value) <= _TIME_TEXT_MAX:
        return None
    text = value.strip()
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    if len(text) > 10 and text[10] in "tT ":
        text = text[:10] + "T" + text[11:]
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None or moment.utcoffset() is None:
            return None
        epoch = moment.timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    return epoch if math.isfinite(epoch) else None


def _workers(payload: Any) -> list[dict[str, Any]]:
    """The worker records of a worker list (dict entries of its `workers` list)."""
    workers = payload.get("workers") if isinstance(payload, dict) else None
    if not isinstance(workers, list):
        return []
    return [w for w in workers if isinstance(w, dict)]


def _ident(value: Any) -> str | None:
    """An id: a non-blank string of at most `NAME_CAP` characters, else None."""
    if not isinstance(value, str) or not value.strip() or len(value) > NAME_CAP:
        return None
    return safe_text(value)


def _name(value: Any) -> str | None:
    """A short text field (status, GPU type, data centre): a non-blank string, else None."""
    if not isinstance(value, str) or not value.strip():
        return None
    return safe_text(value[: 4 * NAME_CAP])


def json_safe(value: Any, *, cap: int = METRICS_CAP) -> dict[str, Any]:
    """A metrics dict reduced to plain JSON (no NaN, no objects), redacted and size-capped.

    Each string (keys too) is redacted before the dump, not the dumped text: a secret that
    JSON escapes would slip past a text search, and one that looks like part of a number
    would turn the text into something that no longer parses.
    """
    text = _dumps(_plain(value, 0)) or "{}"
    if len(text) > cap:
        return {"_truncated": True, "_bytes": len(text)}
    result = json.loads(text)
    return result if isinstance(result, dict) else {"value": result}


def _plain(value: Any, depth: int) -> Any:
    if depth > 32:
        return "…"
    if isinstance(value, dict):
        return {_text(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _JSON_INT_MAX:
        return redact_then_cap(safe_text(value), 200)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    try:
        return redact_then_cap(safe_text(repr(value)), 200)
    except (ValueError, RecursionError):
        return f"<unprintable {type(value).__name__}>"


def _text(value: Any) -> str:
    """One string of a metrics value: valid Unicode, secrets masked."""
    return redact(safe_text(value)) or ""


def _dumps(value: Any) -> str:
    try:
        text = json.dumps(value, default=repr, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        try:
            text = repr(value)[:ERROR_CAP]
        except (ValueError, RecursionError):
            text = f"<unprintable {type(value).__name__}>"
    return safe_text(text)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return min(_JSON_INT_MAX, max(0, int(value)))


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and len(value) < 30:
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, int) and abs(value) <= _JSON_INT_MAX:
        return value
    return None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _flag(value: Any) -> bool:
    """The worker's `retriable` flag: JSON `true` only.

    A retriable failure is retried on fresh hardware, so a flag that is not plainly `true`
    ("yes", "true", 1) is a worker that did not say so: the failure stays its own.
    """
    return value is True
