"""The Flash wire format: the job input a worker expects, and its output back to metrics.

In: `build_function_input(payload, baked_image=...)`. A baked worker image (client mode)
takes the payload itself as its job input. The Flash runtime image instead runs a live
function: it gets the function's source, its arguments as base64 cloudpickle (runpod-flash's
`serialize_args` encoding, produced here with cloudpickle directly so runpod-flash stays
inside `flash_deploy`), and the pip and apt dependencies to install at boot.

Out: two shapes reach us. A Flash live-function worker answers with an envelope
`{success, result, json_result?, error?, stdout?}` whose `result` is a base64 cloudpickle
of the return value. A baked-image worker (client mode) returns its metrics dict directly.
Either may arrive as a JSON string. Anything else, and any worker-reported error, is an
`OutputDecodeError` whose message carries the error and the tail of the worker's stdout
(secrets masked: the exception may be logged or shown).

Unpickling runs code chosen by whoever wrote the bytes, so it is opt-in and bounded: by
default (`allow_pickle=False`) only JSON is read (a plain dict, or an envelope's
`json_result`) and an envelope that holds nothing but a pickle is `UntrustedOutputError`.
The shell passes `allow_pickle=True` only for a job on an endpoint the run itself deployed
(`JobHandle.trusted_output`), and even then only envelopes are unpickled, and only up to
`max_pickle_bytes`.
"""

from __future__ import annotations

import ast
import base64
import binascii
import inspect
import json
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from flashfsm.errors import OutputDecodeError, UntrustedOutputError
from flashfsm.redact import redact_then_cap

MAX_PICKLE_BYTES = 16 * 1024 * 1024
_ERROR_CAP = 1500
_STDOUT_TAIL = 1500
ENVELOPE_KEYS = frozenset({"success", "result", "json_result", "error", "stdout"})


def decode_output(
    output: Any, *, allow_pickle: bool = False, max_pickle_bytes: int = MAX_PICKLE_BYTES
) -> dict[str, Any]:
    """The metrics dict a finished job returned, or `OutputDecodeError`.

    JSON-only unless `allow_pickle=True`: pass it only for output of an endpoint you
    deployed yourself. A pickled Flash result is then loaded if it is at most
    `max_pickle_bytes`; without it, an envelope with no `json_result` raises
    `UntrustedOutputError` (an `OutputDecodeError`) and nothing is unpickled.
    """
    if isinstance(output, (str, bytes)):
        try:
            output = json.loads(output)
        except (ValueError, RecursionError):
            text = output if isinstance(output, str) else output.decode("utf-8", "replace")
            quoted = redact_then_cap(text, 200)
            raise OutputDecodeError(f"job output is not JSON: {quoted!r}") from None
    if not isinstance(output, dict):
        raise OutputDecodeError(f"job output is a {type(output).__name__}, not an object")
    if _is_envelope(output):
        return _decode_envelope(output, allow_pickle, max_pickle_bytes)
    if output.get("error"):
        raise OutputDecodeError(_failure_message(output["error"], output.get("stdout")))
    return output


def _is_envelope(output: dict[str, Any]) -> bool:
    """A Flash envelope carries a boolean `success`, or nothing but envelope keys.

    A metrics dict that merely has a `result` key (`{"result": 0.93, "loss": 0.1}`) is
    metrics, not an envelope.
    """
    if isinstance(output.get("success"), bool):
        return True
    return "result" in output and set(output) <= ENVELOPE_KEYS


def _decode_envelope(envelope: dict[str, Any], allow_pickle: bool, limit: int) -> dict[str, Any]:
    if not envelope.get("success"):
        error = envelope.get("error") or "the worker reported no error text"
        raise OutputDecodeError(_failure_message(error, envelope.get("stdout")))
    json_result = envelope.get("json_result")
    if isinstance(json_result, dict):
        return json_result
    result = envelope.get("result")
    if result is None:
        raise OutputDecodeError("Flash envelope reports success but carries no result")
    if not allow_pickle:
        raise UntrustedOutputError(
            "Flash envelope holds only a pickled result and unpickling is off (JSON-only: "
            "the output of an endpoint this run did not deploy is never unpickled)"
        )
    if not isinstance(result, str) or len(result) > limit * 4 // 3 + 4:
        raise OutputDecodeError(f"Flash result is not a base64 string of at most {limit} bytes")
    try:
        raw = base64.b64decode(result, validate=True)
    except (binascii.Error, ValueError):
        raise OutputDecodeError("Flash result is not valid base64") from None
    if len(raw) > limit:
        raise OutputDecodeError(
            f"Flash result is {len(raw)} bytes; the cap is at most {limit} bytes"
        )
    import cloudpickle  # imported late: only envelopes ever need it

    try:
        value = cloudpickle.loads(raw)
    except Exception as exc:  # a broken pickle can raise nearly anything
        raise OutputDecodeError(f"Flash result does not unpickle ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise OutputDecodeError(f"Flash job returned a {type(value).__name__}, not a metrics dict")
    return value


def _failure_message(error: Any, stdout: Any) -> str:
    """What the worker reported, masked then cut (the exception may be logged or shown)."""
    message = f"Remote execution failed: {redact_then_cap(safe_text(error), _ERROR_CAP)}"
    if stdout:
        tail = redact_then_cap(safe_text(stdout), _STDOUT_TAIL, tail=True)
        message += "\n--- worker stdout tail ---\n" + tail
    return message


def safe_text(value: Any) -> str:
    """`str(value)` that never raises (a 5,000-digit int, a 5,000-deep list) and is valid
    UTF-8 (a lone surrogate from the wire is replaced)."""
    try:
        text = value if isinstance(value, str) else str(value)
    except (ValueError, RecursionError):
        text = f"<unprintable {type(value).__name__}>"
    return text.encode("utf-8", "replace").decode("utf-8")


def build_function_input(
    payload: dict[str, Any],
    *,
    baked_image: bool,
    function: Callable[..., Any] | None = None,
    dependencies: Iterable[str] = (),
    system_dependencies: Iterable[str] = (),
) -> dict[str, Any]:
    """The job input that makes a worker run `function(payload)`.

    With a baked image the payload is the input. Otherwise the input is the request the
    Flash runtime's generic handler executes: `function_name`, `function_code` (the
    function's source without decorators), `args` (`[base64 cloudpickle of payload]`),
    `accelerate_downloads`, and the `dependencies` / `system_dependencies` it installs
    first. `function` must then be a plain named function whose source is available.
    """
    if baked_image:
        return payload
    if function is None:
        raise ValueError("a job without a baked image needs the function the worker runs")
    name = getattr(function, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{function!r} is not a named function")
    return {
        "function_name": name,
        "function_code": function_source(function),
        "args": [encode_arg(payload)],
        "accelerate_downloads": True,
        "dependencies": list(dependencies),
        "system_dependencies": list(system_dependencies),
    }


def function_source(function: Callable[..., Any]) -> str:
    """The source of `function` from its `def` line on (decorators dropped), dedented."""
    target = inspect.unwrap(function)
    try:
        source = textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError) as exc:
        raise ValueError(f"the source of {target!r} is not available: {exc}") from None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.name == target.__name__
        ):
            lines = source.splitlines()[node.lineno - 1 :]
            return textwrap.dedent("\n".join(lines)).rstrip() + "\n"
    raise ValueError(f"no definition of {target.__name__!r} in its source")


def encode_arg(value: Any) -> str:
    """One argument as the Flash runtime reads it: base64 of its cloudpickle."""
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")
