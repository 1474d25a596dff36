"""The payload parsers of `flashfsm.adapters.observations`: shape checks, caps, redaction,
coercion of junk, and the JSON-safety of recorded metrics."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import cloudpickle
import pytest

from flashfsm import RunpodApiError
from flashfsm.adapters.observations import (
    METRICS_CAP,
    MalformedAnswer,
    error_fields,
    health_fields,
    heartbeat_fields,
    json_safe,
    status_fields,
)
from flashfsm.events.models import (
    ERROR_CAP,
    MESSAGE_CAP,
    NAME_CAP,
    STDOUT_CAP,
    HealthObserved,
    HeartbeatObserved,
    JobCounts,
    StatusFetchFailed,
    StatusObserved,
    WorkerCounts,
)

SECRET = "rpa_PLANTEDSECRET0123456789"
MASK = "[REDACTED]"
ENVELOPE = {"stream": "s", "seq": 0, "id": "e-0", "at": 1.0}


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A RunPod API key in the environment, which every parser must keep out of its fields."""
    monkeypatch.setenv("RUNPOD_API_KEY", SECRET)
    return SECRET


# --- status_fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [None, "IN_QUEUE", ["IN_QUEUE"], 3, {}, {"status": None}, {"status": ""}, {"status": 7}],
)
def test_status_without_a_status_string_is_malformed(payload: Any) -> None:
    with pytest.raises(MalformedAnswer):
        status_fields(payload)


def test_malformed_answer_is_a_value_error() -> None:
    assert issubclass(MalformedAnswer, ValueError)


@pytest.mark.parametrize("status", ["IN_QUEUE", "IN_PROGRESS", "PAUSED"])
def test_non_terminal_status_keeps_only_the_status(status: str) -> None:
    payload = {
        "status": status,
        "error": "transient",
        "output": {"stdout": "partial", "loss": 1.0},
        "delayTime": 12,
    }
    assert status_fields(payload) == {"status": status}


def test_a_long_status_is_capped() -> None:
    fields = status_fields({"status": "S" * 1000})
    assert fields == {"status": "S" * NAME_CAP}
    StatusObserved(**ENVELOPE, **fields)  # the capped fields make a valid event


def test_completed_with_metrics_keeps_metrics_only() -> None:
    fields = status_fields({"status": "COMPLETED", "output": {"loss": 0.5}, "error": "ignored"})
    assert fields == {"status": "COMPLETED", "metrics": {"loss": 0.5}}


def test_completed_with_an_envelope_decodes_it_when_unpickling_is_allowed() -> None:
    result = base64.b64encode(cloudpickle.dumps({"reward": 2.0})).decode()
    payload = {"status": "COMPLETED", "output": {"success": True, "result": result}}
    fields = status_fields(payload, allow_pickle=True)
    assert fields["metrics"] == {"reward": 2.0}


@pytest.mark.parametrize("options", [{}, {"allow_pickle": False}], ids=["default", "off"])
def test_completed_with_a_pickle_and_pickling_off_is_an_output_error(
    options: dict[str, Any],
) -> None:
    result = base64.b64encode(cloudpickle.dumps({"reward": 2.0})).decode()
    payload = {"status": "COMPLETED", "output": {"success": True, "result": result}}
    fields = status_fields(payload, **options)
    assert "metrics" not in fields
    assert "unpickling is off" in fields["output_error"]


def test_completed_with_an_error_output_records_the_error_capped() -> None:
    payload = {"status": "COMPLETED", "output": {"error": "E" * 9000, "stdout": "S" * 9000}}
    fields = status_fields(payload)
    assert "metrics" not in fields
    assert fields["output_error"].startswith("Remote execution failed: EEE")
    assert "--- worker stdout tail ---" in fields["output_error"]
    assert len(fields["output_error"]) <= ERROR_CAP + STDOUT_CAP
    StatusObserved(**ENVELOPE, **fields)


def test_completed_without_output_is_an_output_error() -> None:
    fields = status_fields({"status": "COMPLETED"})
    assert fields == {
        "status": "COMPLETED",
        "output_error": "job output is a NoneType, not an object",
    }


def test_failed_keeps_error_and_stdout_tail() -> None:
    stdout = "first line\n" + "x" * 5000 + "\nlast line"
    fields = status_fields({"status": "FAILED", "error": "E" * 4000, "output": {"stdout": stdout}})
    assert "output_text" not in fields
    event = StatusObserved(**ENVELOPE, **fields)  # the event caps: the error's head, the tail
    assert event.error == "E" * ERROR_CAP
    assert event.stdout_tail == stdout[-STDOUT_CAP:]
    assert event.stdout_tail.endswith("last line")


def test_failed_with_a_structured_error_keeps_it_as_json() -> None:
    error = {"error_type": "RuntimeError", "error_message": "EngineCore died"}
    fields = status_fields({"status": "FAILED", "error": error})
    assert json.loads(fields["error"]) == error


@pytest.mark.parametrize(
    ("output", "text"), [([1, 2], "[1, 2]"), ({"a": 1}, '{"a": 1}'), ("oops", '"oops"')]
)
def test_failed_without_error_keeps_the_output_as_text(output: Any, text: str) -> None:
    fields = status_fields({"status": "FAILED", "output": output})
    assert fields == {"status": "FAILED", "output_text": text}


def test_failed_with_error_and_plain_output_keeps_only_the_error() -> None:
    fields = status_fields({"status": "FAILED", "error": "boom", "output": {"a": 1}})
    assert fields == {"status": "FAILED", "error": "boom"}


def test_failed_with_nothing_keeps_only_the_status() -> None:
    assert status_fields({"status": "TIMED_OUT", "error": "", "output": None}) == {
        "status": "TIMED_OUT"
    }


def test_a_long_output_text_is_capped() -> None:
    fields = status_fields({"status": "CANCELLED", "output": ["z" * 5000]})
    assert len(StatusObserved(**ENVELOPE, **fields).output_text) == ERROR_CAP


def test_a_planted_api_key_is_redacted_from_every_status_field(secret: str) -> None:
    failed = status_fields(
        {
            "status": "FAILED",
            "error": f"401 with key {secret}",
            "output": {"stdout": f"env: RUNPOD_API_KEY={secret}\n"},
        }
    )
    structured = status_fields({"status": "FAILED", "error": {"key": secret}})
    as_text = status_fields({"status": "CANCELLED", "output": [secret]})
    completed = status_fields({"status": "COMPLETED", "output": {"note": f"k={secret}"}})
    broken = status_fields({"status": "COMPLETED", "output": {"error": secret, "stdout": secret}})
    for fields in (failed, structured, as_text, completed, broken):
        text = StatusObserved(**ENVELOPE, **fields).model_dump_json()  # what gets recorded
        assert secret not in text, fields
        assert MASK in text, fields
    assert completed["metrics"] == {"note": f"k={MASK}"}


def test_metrics_with_nan_and_objects_are_made_json_safe() -> None:
    output = {
        "loss": math.nan,
        "best": math.inf,
        "worst": -math.inf,
        "curve": [1.0, math.nan],
        "when": object(),
        "nested": {"ok": (1, 2)},
        3: "int key",
    }
    metrics = status_fields({"status": "COMPLETED", "output": output})["metrics"]
    json.dumps(metrics, allow_nan=False)  # would raise on a NaN or an infinity
    assert metrics["loss"] == "nan"
    assert metrics["best"] == "inf" and metrics["worst"] == "-inf"
    assert metrics["curve"] == [1.0, "nan"]
    assert isinstance(metrics["when"], str) and "object" in metrics["when"]
    assert metrics["nested"] == {"ok": [1, 2]}
    assert metrics["3"] == "int key"
    StatusObserved(**ENVELOPE, status="COMPLETED", metrics=metrics)


def test_oversize_metrics_are_replaced_by_a_marker() -> None:
    metrics = status_fields({"status": "COMPLETED", "output": {"blob": "x" * METRICS_CAP}})[
        "metrics"
    ]
    assert metrics["_truncated"] is True
    assert metrics["_bytes"] > METRICS_CAP
    assert "blob" not in metrics


def test_json_safe_keeps_plain_values_and_wraps_non_dicts() -> None:
    plain = {"a": 1, "b": [True, None, "s", 2.5]}
    assert json_safe(plain) == plain
    assert json_safe([1, 2]) == {"value": [1, 2]}


def test_json_safe_survives_deep_nesting() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["n"] = {}
        node = node["n"]
    text = json.dumps(json_safe(deep), ensure_ascii=False)
    assert "…" in text


# --- health_fields ------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [None, "healthy", [1], 5])
def test_health_that_is_not_an_object_is_malformed(payload: Any) -> None:
    with pytest.raises(MalformedAnswer):
        health_fields(payload)


def test_missing_health_keys_count_zero() -> None:
    assert health_fields({}) == {"workers": WorkerCounts(), "jobs": JobCounts()}
    fields = health_fields({"workers": {"throttled": 2}})
    assert fields["workers"] == WorkerCounts(throttled=2)
    assert fields["workers"].idle == 0 and fields["workers"].unhealthy == 0


def test_every_worker_count_is_read() -> None:
    names = ("idle", "initializing", "ready", "running", "throttled", "unhealthy")
    counts = {name: n for n, name in enumerate(names, start=1)}
    assert health_fields({"workers": counts})["workers"] == WorkerCounts(**counts)


@pytest.mark.parametrize(
    "junk", ["3", None, True, False, -2, math.nan, math.inf, -math.inf, [1], {"n": 1}]
)
def test_junk_counts_count_zero(junk: Any) -> None:
    fields = health_fields({"workers": {"unhealthy": junk}, "jobs": {"inQueue": junk}})
    assert fields["workers"].unhealthy == 0
    assert fields["jobs"].in_queue == 0


def test_fractional_counts_are_truncated() -> None:
    assert health_fields({"workers": {"running": 2.7}})["workers"].running == 2


@pytest.mark.parametrize("workers", [None, [], "busy", 3])
def test_workers_that_are_not_an_object_count_zero(workers: Any) -> None:
    assert health_fields({"workers": workers, "jobs": workers}) == {
        "workers": WorkerCounts(),
        "jobs": JobCounts(),
    }


def test_unknown_worker_keys_are_ignored() -> None:
    fields = health_fields({"workers": {"idle": 1, "zombie": 9}})
    assert fields["workers"] == WorkerCounts(idle=1)
    HealthObserved(**ENVELOPE, **fields)


def test_job_counts_are_read_from_camel_case_keys() -> None:
    jobs = {"completed": 7, "failed": 1, "inProgress": 2, "inQueue": 5, "retried": 3}
    assert health_fields({"jobs": jobs})["jobs"] == JobCounts(
        completed=7, failed=1, in_progress=2, in_queue=5, retried=3
    )


def test_snake_case_job_keys_are_not_runpods_and_count_zero() -> None:
    jobs = health_fields({"jobs": {"in_progress": 2, "in_queue": 5}})["jobs"]
    assert jobs.in_progress == 0 and jobs.in_queue == 0


# --- heartbeat_fields ---------------------------------------------------------------------


@pytest.mark.parametrize("payload", [None, "", "boot", [1, 2], 3, b"{}"])
def test_a_heartbeat_that_is_not_an_object_is_not_found(payload: Any) -> None:
    assert heartbeat_fields(payload) == {"found": False}


def test_an_empty_heartbeat_is_found_with_nothing_in_it() -> None:
    assert heartbeat_fields({}) == {
        "found": True,
        "stage": None,
        "step": None,
        "ts": None,
        "retriable": False,
    }


def test_heartbeat_fields_keep_well_typed_values() -> None:
    fields = heartbeat_fields({"stage": "rl_train", "step": 40, "ts": 1_700_000_000.25})
    assert fields == {
        "found": True,
        "stage": "rl_train",
        "step": 40,
        "ts": 1_700_000_000.25,
        "retriable": False,
    }
    HeartbeatObserved(**ENVELOPE, **fields)


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (12, 12),
        (12.0, 12),
        ("12", 12),
        (" 7 ", 7),
        ("-3", -3),
        (12.5, None),
        (math.nan, None),
        (math.inf, None),
        (True, None),
        ("twelve", None),
        ("1" * 40, None),
        ([12], None),
    ],
)
def test_heartbeat_step_is_coerced_to_an_int_or_none(step: Any, expected: int | None) -> None:
    assert heartbeat_fields({"step": step})["step"] == expected


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (1_700_000_000, 1_700_000_000.0),
        (1.5, 1.5),
        ("1700000000", None),
        (math.nan, None),
        (math.inf, None),
        (True, None),
        (10**400, None),
        (None, None),
    ],
)
def test_heartbeat_ts_is_a_finite_number_or_none(ts: Any, expected: float | None) -> None:
    value = heartbeat_fields({"ts": ts})["ts"]
    assert value == expected
    assert value is None or isinstance(value, float)


def test_heartbeat_stage_is_a_capped_redacted_string(secret: str) -> None:
    def stage(raw: Any) -> Any:  # as recorded: the event masks and caps
        return HeartbeatObserved(**ENVELOPE, **heartbeat_fields({"stage": raw})).stage

    assert stage(5) == "5"
    assert stage("s" * 1000) == "s" * NAME_CAP
    assert stage(f"boot {secret}") == f"boot {MASK}"


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        (True, True),
        (1, False),  # only JSON `true` counts: anything else is a worker that did not say so
        (1.0, False),
        ("true", False),
        ("True", False),
        (" TRUE ", False),
        ("yes", False),
        ("1", False),
        (False, False),
        (0, False),
        (2, False),
        ("false", False),
        ("False", False),
        ("no", False),
        ("0", False),
        ("", False),
        (None, False),
        ([True], False),
        ({"retriable": True}, False),
    ],
)
def test_retriable_flag_is_json_true_only(flag: Any, expected: bool) -> None:
    assert heartbeat_fields({"retriable": flag})["retriable"] is expected


# --- error_fields -------------------------------------------------------------------------


def test_error_fields_of_an_api_error() -> None:
    exc = RunpodApiError("job not found", status_code=404, route="status")
    assert error_fields(exc) == {
        "error_class": "RunpodApiError",
        "http_status": 404,
        "message": "job not found",
    }


def test_error_fields_of_an_api_error_without_status() -> None:
    assert error_fields(RunpodApiError("connection reset"))["http_status"] is None


@pytest.mark.parametrize("code", [True, "404", 404.0, None])
def test_only_an_int_status_code_is_an_http_status(code: Any) -> None:
    class Odd(Exception):
        status_code = code

    assert error_fields(Odd("x"))["http_status"] is None


def test_error_fields_of_any_exception() -> None:
    assert error_fields(KeyError("status")) == {
        "error_class": "KeyError",
        "http_status": None,
        "message": "'status'",
    }
    assert error_fields(ValueError())["message"] == ""


def test_error_message_is_capped_and_redacted(secret: str) -> None:
    raw = error_fields(RunpodApiError(f"Bearer abcdefghijklmnop {secret} " + "m" * 2000))
    fields = StatusFetchFailed(**ENVELOPE, **raw).model_dump()  # as recorded
    assert len(fields["message"]) == MESSAGE_CAP
    assert secret not in fields["message"]
    assert "abcdefghijklmnop" not in fields["message"]
    assert fields["message"].startswith(f"Bearer {MASK} {MASK}")


@pytest.mark.parametrize(
    "secret",
    ["1234567890123", 'pa"ss\\wörd-secret-xyz'],
    ids=["digits", "json-escaped"],
)
def test_a_registered_secret_is_masked_in_metrics_and_output_without_corrupting_them(
    secret: str,
) -> None:
    from flashfsm.redact import register_secrets

    register_secrets(secret)
    metrics = status_fields(
        {"status": "COMPLETED", "output": {"n": 912345678901234, "token": secret, secret: 1}}
    )["metrics"]
    assert metrics["n"] == 912345678901234  # a number that only looks like a secret stays
    assert secret not in metrics["token"] and secret not in metrics
    assert len(metrics) == 3
    failed = status_fields({"status": "FAILED", "error": {"detail": secret}, "output": [secret]})
    for text in (failed["error"], json.dumps(failed, ensure_ascii=False)):
        assert secret not in text and json.dumps(secret)[1:-1] not in text
