"""`decode_output`: the two output shapes, their JSON-string forms, and every way to fail."""

from __future__ import annotations

import base64
import json
from typing import Any

import cloudpickle
import pytest

from flashfsm import OutputDecodeError, decode_output
from flashfsm.adapters import flash_wire

METRICS = {"loss": 0.125, "reward": [1, 2, 3], "tag": "rl"}


def b64pickle(value: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode()


def trusted(output: Any, **kwargs: Any) -> dict[str, Any]:
    """`decode_output` as a watch of an endpoint the run deployed calls it."""
    return decode_output(output, allow_pickle=True, **kwargs)


def envelope(value: Any, **extra: Any) -> dict[str, Any]:
    return {"success": True, "result": b64pickle(value), **extra}


def pickle_of_size(size: int) -> bytes:
    """A cloudpickled metrics dict exactly `size` bytes long."""
    for n in range(size):
        raw = cloudpickle.dumps({"k": "x" * n})
        if len(raw) == size:
            return raw
    raise AssertionError(f"no pickle of {size} bytes")


# --- the two shapes -----------------------------------------------------------------------


def test_a_plain_metrics_dict_is_returned_as_is() -> None:
    assert decode_output(dict(METRICS)) == METRICS


def test_an_empty_dict_is_an_empty_metrics_dict() -> None:
    assert decode_output({}) == {}


def test_a_flash_envelope_is_unpickled() -> None:
    assert trusted(envelope(METRICS)) == METRICS


def test_an_envelope_with_stdout_still_decodes() -> None:
    assert trusted(envelope(METRICS, stdout="training done")) == METRICS


@pytest.mark.parametrize(
    "output",
    [json.dumps(METRICS), json.dumps(METRICS).encode(), json.dumps(envelope(METRICS))],
    ids=["json-dict", "json-bytes", "json-envelope"],
)
def test_json_strings_are_decoded(output: str | bytes) -> None:
    assert trusted(output) == METRICS


# --- not a metrics dict -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "words"),
    [
        (None, "NoneType, not an object"),
        (3, "int, not an object"),
        ([METRICS], "list, not an object"),
        ("[1, 2]", "list, not an object"),
        ('"just text"', "str, not an object"),
        ("not json at all", "not JSON: 'not json at all'"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_anything_but_an_object_is_a_decode_error(output: Any, words: str) -> None:
    with pytest.raises(OutputDecodeError) as info:
        decode_output(output)
    assert words in str(info.value)


def test_a_long_non_json_string_is_quoted_short() -> None:
    with pytest.raises(OutputDecodeError) as info:
        decode_output("z" * 10_000)
    assert len(str(info.value)) < 300


def test_decode_errors_are_runtime_errors_like_the_reference() -> None:
    with pytest.raises(RuntimeError):
        decode_output(None)


def test_a_plain_dict_with_an_error_is_a_failure_with_stdout_tail() -> None:
    stdout = "HEAD-" + "y" * 3000 + "-TAIL"
    with pytest.raises(OutputDecodeError) as info:
        decode_output({"error": "CUDA out of memory", "stdout": stdout})
    message = str(info.value)
    assert message.startswith("Remote execution failed: CUDA out of memory")
    assert "--- worker stdout tail ---" in message
    assert message.endswith("-TAIL")
    assert "HEAD-" not in message  # only the tail of the stdout is kept
    assert message.split("--- worker stdout tail ---\n", 1)[1] == stdout[-1500:]


def test_a_plain_dict_with_an_empty_error_is_metrics() -> None:
    assert decode_output({"error": "", "loss": 1.0}) == {"error": "", "loss": 1.0}


def test_an_error_without_stdout_has_no_stdout_section() -> None:
    with pytest.raises(OutputDecodeError) as info:
        decode_output({"error": "bad config"})
    assert str(info.value) == "Remote execution failed: bad config"


# --- envelope failures --------------------------------------------------------------------


def test_an_envelope_with_success_false_carries_error_and_stdout_tail() -> None:
    stdout = "start\n" + "." * 2000 + "\nTraceback: ZeroDivisionError"
    with pytest.raises(OutputDecodeError) as info:
        decode_output(
            {"success": False, "error": "ZeroDivisionError: division by zero", "stdout": stdout}
        )
    message = str(info.value)
    assert "Remote execution failed: ZeroDivisionError: division by zero" in message
    assert "--- worker stdout tail ---" in message
    assert message.endswith("Traceback: ZeroDivisionError")
    assert "start\n" not in message


def test_an_envelope_with_success_false_and_no_error_says_so() -> None:
    with pytest.raises(OutputDecodeError, match="no error text"):
        decode_output({"success": False, "result": b64pickle(METRICS)})


def test_a_long_error_is_capped() -> None:
    with pytest.raises(OutputDecodeError) as info:
        decode_output({"success": False, "error": "e" * 5000})
    assert len(str(info.value)) <= len("Remote execution failed: ") + 1500


def test_a_successful_envelope_without_result_is_an_error() -> None:
    with pytest.raises(OutputDecodeError, match="no result"):
        decode_output({"success": True})


@pytest.mark.parametrize("result", ["not base64!!", "abc", "YWJj\nZGVm"])
def test_broken_base64_is_a_decode_error(result: str) -> None:
    with pytest.raises(OutputDecodeError, match="not valid base64"):
        trusted({"success": True, "result": result})


@pytest.mark.parametrize("raw", [b"garbage", b"\x80\x05\x95", b""])
def test_a_broken_pickle_is_a_decode_error(raw: bytes) -> None:
    with pytest.raises(OutputDecodeError, match="does not unpickle"):
        trusted({"success": True, "result": base64.b64encode(raw).decode()})


def test_a_pickle_that_raises_while_loading_is_a_decode_error() -> None:
    class Boom:
        def __reduce__(self) -> Any:
            return (int, ("not a number",))

    with pytest.raises(OutputDecodeError, match=r"does not unpickle \(ValueError\)"):
        trusted(envelope(Boom()))


@pytest.mark.parametrize("value", [[1, 2], 3.5, None, "metrics"])
def test_a_pickled_non_dict_is_a_decode_error(value: Any) -> None:
    with pytest.raises(OutputDecodeError, match="not a metrics dict"):
        trusted(envelope(value))


@pytest.mark.parametrize("result", [5, ["YWJj"], {"b64": "YWJj"}])
def test_a_result_that_is_not_a_string_is_a_decode_error(result: Any) -> None:
    with pytest.raises(OutputDecodeError, match="not a base64 string"):
        trusted({"success": True, "result": result})


# --- allow_pickle=False -------------------------------------------------------------------


@pytest.fixture
def unpickles(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Records every call of `cloudpickle.loads` (and still performs it)."""
    calls: list[bytes] = []
    real = cloudpickle.loads

    def spy(data: bytes, *args: Any, **kwargs: Any) -> Any:
        calls.append(data)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(cloudpickle, "loads", spy)
    return calls


def test_without_pickle_the_json_result_is_used(unpickles: list[bytes]) -> None:
    output = envelope({"loss": 9.0}, json_result=METRICS)
    assert decode_output(output, allow_pickle=False) == METRICS
    assert unpickles == []


def test_without_pickle_an_envelope_without_json_result_is_an_error(
    unpickles: list[bytes],
) -> None:
    with pytest.raises(OutputDecodeError, match="unpickling is off"):
        decode_output(envelope(METRICS), allow_pickle=False)
    assert unpickles == []


def test_without_pickle_a_non_dict_json_result_is_ignored(unpickles: list[bytes]) -> None:
    with pytest.raises(OutputDecodeError, match="unpickling is off"):
        decode_output(envelope(METRICS, json_result=[1, 2]), allow_pickle=False)
    assert unpickles == []


def test_without_pickle_a_plain_dict_still_decodes() -> None:
    assert decode_output(dict(METRICS), allow_pickle=False) == METRICS


def test_with_pickle_a_flash_envelope_is_unpickled_once(unpickles: list[bytes]) -> None:
    assert trusted(envelope(METRICS)) == METRICS
    assert len(unpickles) == 1


# --- size bound ---------------------------------------------------------------------------


def test_an_oversize_pickle_is_rejected_before_unpickling(unpickles: list[bytes]) -> None:
    output = envelope({"blob": "x" * 5000})
    with pytest.raises(OutputDecodeError, match="at most 1000 bytes"):
        trusted(output, max_pickle_bytes=1000)
    assert unpickles == []


def test_the_default_bound_is_16_mib() -> None:
    assert flash_wire.MAX_PICKLE_BYTES == 16 * 1024 * 1024
    oversize = "A" * (flash_wire.MAX_PICKLE_BYTES * 4 // 3 + 8)
    with pytest.raises(OutputDecodeError, match="at most 16777216 bytes"):
        trusted({"success": True, "result": oversize})


@pytest.mark.parametrize("limit", [99, 100, 101, 300])
def test_a_pickle_of_exactly_the_limit_is_accepted(limit: int) -> None:
    raw = pickle_of_size(limit)
    output = {"success": True, "result": base64.b64encode(raw).decode()}
    assert trusted(output, max_pickle_bytes=limit) == cloudpickle.loads(raw)


@pytest.mark.parametrize("limit", [100, 300])
def test_a_pickle_one_byte_over_the_limit_is_rejected(limit: int, unpickles: list[bytes]) -> None:
    raw = pickle_of_size(limit + 1)
    output = {"success": True, "result": base64.b64encode(raw).decode()}
    with pytest.raises(OutputDecodeError, match=f"at most {limit} bytes"):
        trusted(output, max_pickle_bytes=limit)
    assert unpickles == []


def test_a_metrics_dict_with_a_result_key_is_metrics_not_an_envelope() -> None:
    metrics = {"result": 0.93, "loss": 0.1}
    assert decode_output(metrics) == metrics


def test_an_envelope_without_a_success_flag_but_only_envelope_keys_is_an_envelope() -> None:
    with pytest.raises(OutputDecodeError, match="boom"):
        decode_output({"result": None, "error": "boom"})
