"""Turn RunPod and worker payloads into event fields.

Each parser accepts whatever arrived (a dict, anything else, keys missing or of the wrong
type) and returns plain values or raises `MalformedAnswer`; none of them lets a surprise
escape as a crash. Text goes out as it came (valid UTF-8): the event fields it fills are
`Outside` text, which masks secrets and then caps, whoever builds the event. The strings
inside a success's metrics are masked here, one by one, as they are no text field.
"""

from __future__ import annotations

import json
import math
from typing import Any

from flashfsm.adapters.flash_wire import decode_output, safe_text
from flashfsm.errors import OutputDecodeError, TransientReadError
from flashfsm.events.models import (
    ERROR_CAP,
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
    return {
        "found": True,
        "stage": safe_text(stage) if stage is not None else None,
        "step": _integer(payload.get("step")),
        "ts": _finite(payload.get("ts")),
        "retriable": _flag(payload.get("retriable")),
    }


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
