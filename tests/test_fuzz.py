"""Fuzzed input: every parser of outside data raises only its typed errors, never crashes or hangs.

The targets, and the only outcomes each may have:

- `status_fields`, `health_fields`, `heartbeat_fields` (a payload from RunPod or the Hub):
  fields that build an event the codec round-trips, or `MalformedAnswer`;
- the shell's `status_observation` / `health_observation` / `heartbeat_observation`, on any
  Python value at all: an event the codec round-trips;
- `decode_output` (a job's output): a dict, or `OutputDecodeError`;
- the codec's `decode`, `decode_many` and `upcast`: events, or `EventDecodeError` (of which
  `UnknownEventError` is one);
- `read_jsonl_file` on any file: events, or `CorruptLogError` / `EventDecodeError`; a log cut
  at any byte reads as the events of its complete lines (the torn last line is recovered);
- the CLI's `flashfsm replay FILE.jsonl` on fuzzed logs: an exit code from 0 to 15, never a
  traceback.

Inputs are JSON-shaped values (deep nesting, huge integers, NaN and infinities, lone UTF-16
surrogates, wrong types in every field), Python values no JSON parser returns (integers of
more than the 4300 digits `str()` converts, nesting deeper than `repr()` goes), heartbeat
steps of digits `str.isdigit` accepts and `int` refuses ("²"), random bytes, and valid event
lines and logs that are truncated, byte-flipped, reordered or rewritten field by field.
Each of those once crashed a parser; the `test_regression_*` tests at the end pin one input
of each, and the strategies keep drawing them.

Each target is a `check_*` function of one input plus a strategy, gathered in `TARGETS`, so
`tests/long/fuzz_long.py` runs the very same checks for 100,000 inputs each. A hang guard
(`hang_guard`, a SIGALRM per input) turns a parser that never returns into a failure, and
every test has a finite Hypothesis deadline.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import math
import signal
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from typer.testing import CliRunner

from flashfsm.adapters import observations as obs
from flashfsm.adapters.flash_wire import decode_output
from flashfsm.adapters.jsonl import TornLineWarning, read_jsonl_file
from flashfsm.cli import app
from flashfsm.cli.common import EXIT_CODE_TABLE
from flashfsm.errors import OutputDecodeError
from flashfsm.events.codec import decode, decode_many, encode, upcast
from flashfsm.events.errors import CorruptLogError, EventDecodeError
from flashfsm.events.models import (
    EVENT_TYPES,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    StatusFetchFailed,
    StatusObserved,
)
from flashfsm.fsm.job import JobState
from flashfsm.reads import health_observation, heartbeat_observation, status_observation
from tests.test_events import any_event

HANG_S = 30.0  # an input that takes longer than this is a hang
DEADLINE = timedelta(seconds=10)  # an input that takes longer than this is a failure


class Hang(BaseException):
    """An input the code under test did not finish with in `HANG_S` seconds."""


@contextlib.contextmanager
def hang_guard(seconds: float = HANG_S) -> Iterator[None]:
    """Raise `Hang` in the main thread when the block runs longer than `seconds`."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- strategies

#: Lone UTF-16 surrogates: JSON's `"\ud800"` escape decodes to one (json.loads accepts it),
#: and a worker's output cut between the two halves of an emoji carries one.
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts_with_surrogates = st.lists(st.characters() | SURROGATES, max_size=40).map("".join)
#: Text as JSON can carry it, lone surrogates included: `st.characters()` draws them now and
#: then, `texts_with_surrogates` in every other string. (They once crashed the watch; see
#: the `test_regression_*_lone_surrogate_*` tests below.)
texts = st.text(st.characters(), max_size=40) | texts_with_surrogates


def _nines(digits: int, negative: bool) -> int:
    return (-1 if negative else 1) * (10**digits - 1)


#: Integers the wire can carry: beyond 64 bits, up to the 4300 digits json.loads reads.
wire_ints = (
    st.integers()
    | st.sampled_from([2**63, -(2**63) - 1, 2**64])
    | st.builds(_nines, st.integers(19, 4300), st.booleans())
)
any_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308]
)
wire_scalars = st.none() | st.booleans() | wire_ints | any_floats | texts


def _nest(depth: int, leaf: Any, shape: str) -> Any:
    value = leaf
    for level in range(depth):
        in_list = shape == "list" or (shape == "mixed" and level % 2 == 1)
        value = [value] if in_list else {"k": value}
    return value


def deep(scalars: st.SearchStrategy[Any], max_depth: int) -> st.SearchStrategy[Any]:
    """One value nested `depth` levels deep in lists, objects, or both."""
    return st.builds(
        _nest,
        st.integers(1, max_depth),
        scalars,
        st.sampled_from(["list", "dict", "mixed"]),
    )


#: Any value `json.loads` can return (deep nesting up to what it parses, ~900 levels).
wire_values = st.one_of(
    st.recursive(
        wire_scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
        max_leaves=24,
    ),
    deep(wire_scalars, 900),
)
#: Integers of more than the 4300 digits `str()` and `json.dumps` convert (json.loads never
#: returns one; a custom client or reader might). They once escaped the parsers as a bare
#: ValueError: see `test_regression_python_values_beyond_json_raise_only_typed_errors`.
huge_ints = st.builds(_nines, st.integers(4301, 20_000), st.booleans())
#: Python values that no JSON parser returns: what a custom client or reader might hand over.
python_only = st.one_of(
    huge_ints,
    deep(huge_ints, 3),  # inside a list or object
    deep(wire_scalars, 5000),  # deeper than repr() or json.dumps go
    st.binary(max_size=40),
    st.tuples(wire_scalars, wire_scalars),
    st.frozensets(st.integers(), max_size=3),
    st.complex_numbers(),
    st.decimals(allow_nan=True),
    st.builds(object),
    st.dictionaries(st.integers() | st.none(), wire_scalars, max_size=3),  # non-string keys
)
any_values = wire_values | python_only

STATUSES = ["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT", "IN_QUEUE", "IN_PROGRESS", ""]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@functools.cache
def _pickled_metrics() -> bytes:
    return cloudpickle.dumps({"reward": 0.8, "loss": 0.1, "steps": 300})


@st.composite
def mutated(draw: st.DrawFn, data: bytes, max_edits: int = 3) -> bytes:
    """`data` cut short and/or with a few bytes changed."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, max_edits))):
        if not buf:
            break
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        buf = buf[: draw(st.integers(0, len(buf)))]
    return bytes(buf)


pickled_results = st.one_of(
    st.binary(max_size=200).map(_b64),  # random bytes
    st.deferred(lambda: mutated(_pickled_metrics()).map(_b64)),  # a real pickle, damaged
    st.just(_b64(cloudpickle.dumps([1, 2]))),  # a pickle of the wrong type
    texts,  # not base64
)
envelopes = st.fixed_dictionaries(
    {"success": st.booleans() | wire_scalars},
    optional={
        "result": pickled_results | wire_values,
        "json_result": wire_values,
        "error": wire_values,
        "stdout": wire_values,
    },
)
json_texts = st.one_of(
    wire_values.map(lambda v: json.dumps(v, allow_nan=True, default=str)),
    st.deferred(
        lambda: wire_values.map(lambda v: json.dumps(v, default=str)).flatmap(
            lambda text: st.integers(0, len(text)).map(lambda n: text[:n])  # truncated JSON
        )
    ),
    st.integers(1, 200_000).map(lambda n: "[" * n),  # deeper than any parser goes
    st.just("1" * 5000),  # more digits than json.loads reads
    st.just('{"a": NaN, "b": Infinity, "c": -Infinity}'),
)
outputs = st.one_of(
    wire_values, envelopes, json_texts, json_texts.map(str.encode), st.binary(max_size=100)
)
status_answers = st.one_of(
    wire_values,
    st.fixed_dictionaries(
        {"status": st.sampled_from(STATUSES) | wire_scalars},
        optional={"output": outputs, "error": wire_values, "id": wire_scalars},
    ),
)
COUNT_KEYS = ["idle", "initializing", "ready", "running", "throttled", "unhealthy"]
JOB_KEYS = ["completed", "failed", "inProgress", "inQueue", "retried"]
health_answers = st.one_of(
    wire_values,
    st.fixed_dictionaries(
        {},
        optional={
            "workers": st.dictionaries(st.sampled_from(COUNT_KEYS) | texts, wire_scalars)
            | wire_values,
            "jobs": st.dictionaries(st.sampled_from(JOB_KEYS) | texts, wire_scalars) | wire_values,
        },
    ),
)


def int_refuses(step: Any) -> bool:
    """A step string `str.isdigit` accepts and `int` refuses ("²", "①", "0\\x1f"): these once
    escaped `heartbeat_fields` as a ValueError (see `test_regression_*_odd_digits_*`)."""
    if not isinstance(step, str) or not step.strip().lstrip("-").isdigit():
        return False
    try:
        int(step)
    except ValueError:
        return True
    return False


#: Step strings of digits of every kind: decimal ones `int` reads ("4", "٣"), others only
#: `str.isdigit` accepts ("²", "①"), with a sign and the odd whitespace `int` refuses.
step_strings = st.builds(
    "{}{}{}".format,
    st.sampled_from(["", "-", "+", " "]),
    st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=6),
    st.sampled_from(["", " ", "\t", "\x1c", "\x1f", "_0"]),
)
HEARTBEAT_STAGES = st.sampled_from(["boot", "sft_start", "train", ""])
#: Heartbeat files, and what a custom heartbeat reader might return in their fields
#: (integers beyond JSON's 4300 digits).
heartbeat_answers = st.one_of(
    wire_values,
    st.fixed_dictionaries(
        {},
        optional={
            "stage": HEARTBEAT_STAGES | wire_values | huge_ints,
            "step": wire_scalars | wire_values | huge_ints,
            "ts": wire_scalars | huge_ints,
            "retriable": wire_scalars,
        },
    ),
    # A branch of its own: among the many of `wire_scalars`, a step string is rarely drawn.
    st.fixed_dictionaries(
        {"step": step_strings}, optional={"stage": HEARTBEAT_STAGES, "ts": wire_scalars}
    ),
)


#: Status and health answers whose every field is any Python value (what a custom client
#: might return): the shell must still record something.
python_answers = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(STATUSES) | any_values,
        "output": any_values,
        "error": any_values,
        "workers": st.dictionaries(st.sampled_from(COUNT_KEYS), any_values) | any_values,
        "jobs": st.dictionaries(st.sampled_from(JOB_KEYS), any_values) | any_values,
    },
)


# --------------------------------------------------------------------------- event-shaped input


def _valid_events() -> st.SearchStrategy[Any]:
    return any_event


@st.composite
def event_lines(draw: st.DrawFn) -> bytes:
    """One line: a valid event, possibly truncated, byte-flipped or with a field rewritten."""
    line = encode(draw(_valid_events()))
    how = draw(st.sampled_from(["valid", "mutated", "field"]))
    if how == "mutated":
        return draw(mutated(line))
    if how == "field":
        raw = json.loads(line)
        key = draw(st.sampled_from(sorted(raw)) | texts)
        raw[key] = draw(wire_values | texts_with_surrogates)
        with contextlib.suppress(RecursionError):  # too deep to write: keep the original
            return json.dumps(raw, allow_nan=True).encode()
    return line


codec_inputs = st.one_of(
    event_lines(),
    texts_with_surrogates,
    event_lines().map(lambda b: b.decode("utf-8", "replace")),
    st.binary(max_size=300),
    json_texts,
    json_texts.map(str.encode),
    wire_values.map(lambda v: json.dumps(v, allow_nan=True, default=str).encode()),
)


@st.composite
def event_dicts(draw: st.DrawFn) -> Any:
    """Dicts for `upcast`: a valid event's, with fields changed, dropped or added."""
    raw = json.loads(encode(draw(_valid_events())))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(raw) or ["kind"]) | texts)
        if draw(st.booleans()):
            raw[key] = draw(wire_values)
        else:
            raw.pop(key, None)
    if draw(st.booleans()):
        raw["v"] = draw(st.integers(-3, 5) | wire_scalars)
    if draw(st.booleans()):
        raw["kind"] = draw(st.sampled_from(sorted(EVENT_TYPES)) | texts)
    return raw


@st.composite
def valid_logs(draw: st.DrawFn) -> list[Any]:
    """Events of one stream with seqs 0, 1, 2, …"""
    events = draw(st.lists(_valid_events(), max_size=6))
    return [e.model_copy(update={"stream": "job-fuzz", "seq": i}) for i, e in enumerate(events)]


def log_bytes(events: list[Any]) -> bytes:
    return b"".join(encode(e) + b"\n" for e in events)


@functools.cache
def seed_logs() -> tuple[tuple[bytes, ...], ...]:
    """Real job logs (lines) from whole simulated lifecycles, for the CLI fuzz to damage."""
    from flashfsm import JobHandle, MemoryStore, poll_job
    from flashfsm.adapters.simulator import Simulator

    logs = []
    with Simulator(speed=0) as sim:
        for scenario in ("success", "failed_retriable", "crash_loop", "ttl_expired"):
            endpoint = sim.add_endpoint(f"flash-fuzz-{scenario}", hf_repo="team/runs")
            job = sim.submit(
                endpoint, {"scenario": scenario, "phase": "t", "run_id": scenario, "seed": 1}
            )

            def heartbeat(force: bool = False, scenario: str = scenario) -> Any:
                text = sim.hub.text("team/runs", f"t/{scenario}/seed1/heartbeat.json")
                return json.loads(text) if text else None

            store = MemoryStore()
            with sim.client() as client:
                poll_job(
                    JobHandle(endpoint, "x", job, submitted_at=sim.clock.now()),
                    client=client,
                    clock=sim.clock.now,
                    sleep=sim.clock.sleep,
                    heartbeat_reader=heartbeat,
                    store=store,
                )
            logs.append(tuple(encode(e) for e in store.read(f"job-{job}")))
    return tuple(logs)


@st.composite
def damaged_logs(draw: st.DrawFn) -> bytes:
    """A real job log with lines cut, flipped, dropped, repeated, swapped, added or rewritten."""
    lines = list(draw(st.sampled_from(seed_logs())))
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["mutate", "drop", "repeat", "swap", "insert", "field", "cut"]))
        if op == "mutate":
            lines[i] = draw(mutated(lines[i]))
        elif op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "repeat":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(
                i,
                draw(
                    codec_inputs.map(
                        lambda x: x if isinstance(x, bytes) else x.encode("utf-8", "replace")
                    )
                ),
            )
        elif op == "field":
            try:
                raw = json.loads(lines[i])
            except (ValueError, RecursionError):
                continue  # damaged by an earlier edit
            if isinstance(raw, dict) and raw:
                raw[draw(st.sampled_from(sorted(raw)))] = draw(wire_scalars | wire_values)
                with contextlib.suppress(RecursionError):
                    lines[i] = json.dumps(raw, allow_nan=True).encode()
        elif op == "cut":
            lines = lines[: i + 1]
    content = b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")
    return content


# --------------------------------------------------------------------------- checks


def assert_recordable(cls: type, fields: dict[str, Any]) -> None:
    """The fields build an event of `cls` that the codec writes and reads back unchanged."""
    event = cls(stream="job-fuzz", seq=0, id="id-0", at=1_800_000_000.0, **fields)
    assert decode(encode(event)) == event


def recordable_or_refused(cls: type, read: Callable[[], dict[str, Any]]) -> None:
    """`read` (an answer's fields) refuses the answer as malformed, or gives fields that
    build a recordable `cls` event; either way without hanging."""
    with hang_guard():
        try:
            fields = read()
        except obs.MalformedAnswer:
            return
    assert_recordable(cls, fields)


def check_status_fields(case: tuple[Any, bool]) -> None:
    payload, allow_pickle = case
    recordable_or_refused(
        StatusObserved, lambda: obs.status_fields(payload, allow_pickle=allow_pickle)
    )


def check_health_fields(payload: Any) -> None:
    recordable_or_refused(HealthObserved, lambda: obs.health_fields(payload))


def check_heartbeat_fields(payload: Any) -> None:
    recordable_or_refused(HeartbeatObserved, lambda: obs.heartbeat_fields(payload))


def check_observations(payload: Any) -> None:
    """The shell turns any status or health answer at all into an event it can record."""
    with hang_guard():
        status = status_observation(payload)
        health = health_observation(payload)
    assert status[0] in (StatusObserved, StatusFetchFailed)
    assert health[0] in (HealthObserved, HealthProbeFailed)
    for cls, fields in (status, health):
        assert_recordable(cls, fields)


def check_heartbeat_observation(payload: Any) -> None:
    """A forced heartbeat read of anything a heartbeat file (or reader) holds is recorded."""
    with hang_guard():
        cls, fields = heartbeat_observation(
            JobState(), payload, force=True, stream="job-fuzz", at=1_800_000_000.0
        )
    assert cls is HeartbeatObserved
    assert_recordable(cls, fields)


def check_decode_output(case: tuple[Any, bool, int]) -> None:
    output, allow_pickle, cap = case
    with hang_guard():
        try:
            metrics = decode_output(output, allow_pickle=allow_pickle, max_pickle_bytes=cap)
        except OutputDecodeError:
            return
    assert isinstance(metrics, dict)


def check_decode(line: bytes | str) -> None:
    with hang_guard():
        try:
            event = decode(line)
        except EventDecodeError:
            return
    assert decode(encode(event)) == event  # what decodes is an event the codec writes back


def check_decode_many(lines: list[bytes | str]) -> None:
    decoded: list[Any] = []
    with hang_guard():
        try:
            for event in decode_many(lines):
                decoded.append(event)
        except EventDecodeError:
            with pytest.raises(EventDecodeError):  # the line after the last event is bad
                decode(lines[len(decoded)])
    # Every event before the first bad line is that line's event, in order.
    assert decoded == [decode(line) for line in lines[: len(decoded)]]


def check_upcast(raw: dict[str, Any]) -> None:
    with hang_guard():
        try:
            event = upcast(raw)
        except EventDecodeError:
            return
    assert event.kind in EVENT_TYPES


def _read_file(content: bytes) -> list[Any]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "job-fuzz.jsonl"
        path.write_bytes(content)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TornLineWarning)
            return read_jsonl_file(path)


def check_read_jsonl_file(content: bytes) -> None:
    with hang_guard():
        try:
            events = _read_file(content)
        except (CorruptLogError, EventDecodeError):
            return
    assert all(e.seq == i for i, e in enumerate(events))


def check_torn_tail(case: tuple[list[Any], int]) -> None:
    events, cut = case
    data = log_bytes(events)
    cut = min(cut, len(data))
    whole = data[:cut].count(b"\n")  # lines that end before the cut
    with hang_guard():
        assert _read_file(data[:cut]) == events[:whole]


runner = CliRunner()
DOCUMENTED_EXIT_CODES = {e.code for e in EXIT_CODE_TABLE}
CLI_FLAGS = [[], ["--json"], ["--verify"], ["--full"], ["--verify", "--json"]]


def check_cli_replay(case: tuple[bytes, list[str]]) -> None:
    content, flags = case
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "job-fuzz.jsonl"
        path.write_bytes(content)
        with hang_guard(), warnings.catch_warnings():
            warnings.simplefilter("ignore", TornLineWarning)
            result = runner.invoke(app, ["replay", str(path), *flags])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"flashfsm replay raised {result.exception!r}"
    )
    assert result.exit_code in DOCUMENTED_EXIT_CODES, (result.exit_code, result.output[-2000:])
    if b"Traceback" not in content:  # a worker's traceback in the log is shown as data
        assert "Traceback" not in result.output


@dataclass(frozen=True)
class Target:
    """One fuzz target: what it is fed, and what must hold for every input."""

    inputs: st.SearchStrategy[Any]
    check: Callable[[Any], None]


TARGETS: dict[str, Target] = {
    "status_fields": Target(st.tuples(status_answers, st.booleans()), check_status_fields),
    "health_fields": Target(health_answers, check_health_fields),
    "heartbeat_fields": Target(heartbeat_answers, check_heartbeat_fields),
    "observations": Target(any_values | python_answers | status_answers, check_observations),
    "heartbeat_observation": Target(heartbeat_answers, check_heartbeat_observation),
    "decode_output": Target(
        st.tuples(outputs | python_only, st.booleans(), st.sampled_from([16, 1024, 2**24])),
        check_decode_output,
    ),
    "codec_decode": Target(codec_inputs, check_decode),
    "codec_decode_many": Target(st.lists(codec_inputs, max_size=6), check_decode_many),
    "codec_upcast": Target(event_dicts(), check_upcast),
    "read_jsonl_file": Target(
        st.one_of(st.binary(max_size=400), damaged_logs(), valid_logs().map(log_bytes)),
        check_read_jsonl_file,
    ),
    "torn_tail": Target(st.tuples(valid_logs(), st.integers(0, 10_000)), check_torn_tail),
    "cli_replay": Target(
        st.tuples(damaged_logs() | st.binary(max_size=200), st.sampled_from(CLI_FLAGS)),
        check_cli_replay,
    ),
}


# --------------------------------------------------------------------------- the tests

fuzz = settings(
    deadline=DEADLINE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@fuzz
@given(TARGETS["status_fields"].inputs)
def test_status_fields_give_a_recordable_event_or_malformed_answer(case: Any) -> None:
    check_status_fields(case)


@fuzz
@given(TARGETS["health_fields"].inputs)
def test_health_fields_give_a_recordable_event_or_malformed_answer(payload: Any) -> None:
    check_health_fields(payload)


@fuzz
@given(TARGETS["heartbeat_fields"].inputs)
def test_heartbeat_fields_give_a_recordable_event_or_malformed_answer(payload: Any) -> None:
    check_heartbeat_fields(payload)


@fuzz
@given(TARGETS["observations"].inputs)
def test_the_shell_records_any_status_or_health_answer_as_an_event(payload: Any) -> None:
    check_observations(payload)


@fuzz
@given(TARGETS["heartbeat_observation"].inputs)
def test_the_shell_records_any_heartbeat_file_as_an_event(payload: Any) -> None:
    check_heartbeat_observation(payload)


@fuzz
@given(TARGETS["decode_output"].inputs)
def test_decode_output_gives_a_dict_or_output_decode_error(case: Any) -> None:
    check_decode_output(case)


@fuzz
@given(TARGETS["codec_decode"].inputs)
def test_decode_gives_an_event_or_event_decode_error(line: Any) -> None:
    check_decode(line)


@fuzz
@given(TARGETS["codec_decode_many"].inputs)
def test_decode_many_yields_each_good_line_then_raises_event_decode_error(lines: Any) -> None:
    check_decode_many(lines)


@fuzz
@given(TARGETS["codec_upcast"].inputs)
def test_upcast_gives_an_event_or_event_decode_error(raw: Any) -> None:
    check_upcast(raw)


@fuzz
@given(TARGETS["read_jsonl_file"].inputs)
def test_read_jsonl_file_gives_events_or_corrupt_log_error(content: bytes) -> None:
    check_read_jsonl_file(content)


@fuzz
@given(TARGETS["torn_tail"].inputs)
def test_a_log_cut_at_any_byte_reads_as_its_complete_lines(case: Any) -> None:
    check_torn_tail(case)


@settings(fuzz, max_examples=max(10, settings.default.max_examples // 2))  # ~10 ms each
@given(TARGETS["cli_replay"].inputs)
def test_flashfsm_replay_of_a_fuzzed_log_exits_0_to_15_without_a_traceback(case: Any) -> None:
    check_cli_replay(case)


def test_every_target_has_a_test():
    tested = {name.removeprefix("check_") for name in globals() if name.startswith("check_")}
    assert {t.check.__name__.removeprefix("check_") for t in TARGETS.values()} == tested


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the hang guard needs SIGALRM")
def test_the_hang_guard_interrupts_a_hang():
    with pytest.raises(Hang), hang_guard(0.05):
        threading.Event().wait(5)  # a C-level wait, interrupted by the signal
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


# --------------------------------------------------------------------------- regressions
# Inputs that broke an invariant above, found by these fuzzers and fixed since: each test
# asserts the invariant on one such input, so the bug cannot come back unnoticed, and the
# strategies above still draw inputs of each kind (`test_the_fuzz_draws_*` below).

HALF_EMOJI = "step 10 \ud83d"  # what json.loads makes of "step 10 \\ud83d": half of an emoji
TOO_MANY_DIGITS = 10**4301  # one digit more than str() converts
TOO_DEEP = _nest(5000, 0, "list")  # deeper than repr() and json.dumps go


def _bug(reason: str, raises: type[BaseException] | tuple[type[BaseException], ...]) -> Any:
    """The regression an input once exposed (fixed: the test now simply asserts the invariant)."""
    return pytest.mark.regression(reason)


SURROGATE_BUG = "a lone surrogate from the wire builds an event pydantic refuses"
REFUSED = _bug(SURROGATE_BUG, ValidationError)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"status": "FAILED", "error": HALF_EMOJI}, id="failed-error", marks=REFUSED),
        pytest.param(
            {"status": "FAILED", "output": {"stdout": HALF_EMOJI}},
            id="failed-stdout",
            marks=REFUSED,
        ),
        pytest.param(
            {"status": "COMPLETED", "output": {"error": HALF_EMOJI}},
            id="output-error",
            marks=REFUSED,
        ),
        pytest.param({"status": HALF_EMOJI}, id="status", marks=REFUSED),
        pytest.param(  # this one builds, and then cannot be written
            {"status": "COMPLETED", "output": {"note": HALF_EMOJI}},
            id="metrics",
            marks=_bug(SURROGATE_BUG, PydanticSerializationError),
        ),
        pytest.param(  # a key of the metrics: written as "\ufffd" x3, read back unequal
            {"status": "COMPLETED", "output": {HALF_EMOJI: 1}},
            id="metrics-key",
            marks=_bug(SURROGATE_BUG, AssertionError),
        ),
        pytest.param(
            {"status": "COMPLETED", "output": {"loss": {HALF_EMOJI: 1}}},
            id="metrics-nested-key",
            marks=_bug(SURROGATE_BUG, PydanticSerializationError),
        ),
    ],
)
def test_regression_a_lone_surrogate_in_a_status_answer_is_recordable(payload: Any) -> None:
    check_status_fields((payload, True))


@_bug(SURROGATE_BUG, ValidationError)
def test_regression_a_lone_surrogate_in_a_heartbeat_is_recordable() -> None:
    check_heartbeat_observation({"stage": HALF_EMOJI, "step": 1})


@_bug(SURROGATE_BUG, ValidationError)
def test_regression_a_lone_surrogate_in_an_api_error_message_is_recordable() -> None:
    from flashfsm import RunpodApiError

    error = RunpodApiError(f"RunPod status: HTTP 500: {HALF_EMOJI}", status_code=500)
    assert_recordable(*status_observation(None, error))


@pytest.mark.parametrize("step", ["\u00b2", "\u2460", "1\u00b3", "-\u2075", "0\x1f"])
@_bug("str.isdigit() says yes, int() says no: the ValueError escapes", ValueError)
def test_regression_a_heartbeat_step_of_odd_digits_reads_as_no_step(step: str) -> None:
    check_heartbeat_fields({"stage": "train", "step": step})


PYTHON_ONLY = "a value no JSON parser returns escapes the parser as a bare exception"


@pytest.mark.parametrize(
    ("check", "value"),
    [
        pytest.param(
            check_status_fields,
            ({"status": "FAILED", "error": {"n": TOO_MANY_DIGITS}}, True),
            id="status-failed-huge-int",
            marks=_bug(PYTHON_ONLY, ValueError),
        ),
        pytest.param(
            check_status_fields,
            ({"status": "FAILED", "error": TOO_DEEP}, True),
            id="status-failed-deep",
            marks=_bug(PYTHON_ONLY, RecursionError),
        ),
        pytest.param(
            check_decode_output,
            ({"error": TOO_MANY_DIGITS}, True, 1024),
            id="decode-output-huge-error",
            marks=_bug(PYTHON_ONLY, ValueError),
        ),
        pytest.param(
            check_heartbeat_fields,
            {"stage": TOO_MANY_DIGITS},
            id="heartbeat-huge-stage",
            marks=_bug(PYTHON_ONLY, ValueError),
        ),
        pytest.param(
            check_heartbeat_fields,
            {"step": TOO_MANY_DIGITS},
            id="heartbeat-huge-step-unreadable",
            marks=_bug("the event is written but cannot be read back", EventDecodeError),
        ),
        pytest.param(
            check_health_fields,
            {"workers": {"running": TOO_MANY_DIGITS}},
            id="health-huge-count-unreadable",
            marks=_bug("the event is written but cannot be read back", EventDecodeError),
        ),
    ],
)
def test_regression_python_values_beyond_json_raise_only_typed_errors(
    check: Callable[[Any], None], value: Any
) -> None:
    check(value)


#: A log line nested too deep for json.loads: it recurses before it sees that the line never
#: closes, and raises RecursionError where a shorter one raises ValueError.
TOO_DEEP_LINE = b"[" * 5000
DEEP_LINE = "the torn-line check lets json.loads' RecursionError escape (found by cli_replay)"


def _log_with_a_deep_line(where: str) -> tuple[str, list[Any], bytes]:
    """A real log's stream, its first two events, and those lines with `TOO_DEEP_LINE`
    after them ("last") or between them ("middle")."""
    lines = list(seed_logs()[0][:2])
    events = [decode(line) for line in lines]
    lines.insert(len(lines) if where == "last" else 1, TOO_DEEP_LINE)
    return events[0].stream, events, b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize("flags", CLI_FLAGS)
@_bug(DEEP_LINE, RecursionError)
def test_regression_flashfsm_replay_of_a_log_too_deep_to_parse(flags: list[str]) -> None:
    check_cli_replay((TOO_DEEP_LINE + b"\n", flags))
    check_cli_replay((_log_with_a_deep_line("last")[2], flags))
    check_cli_replay((_log_with_a_deep_line("middle")[2], flags))


def _corrupt_when_read(directory: Path, stream: str, content: bytes) -> Any:
    """`content` is a corrupt log read as a file and as `stream` of a JSONL store in
    `directory`; the store."""
    from flashfsm.adapters.jsonl import JsonlStore

    with pytest.raises(CorruptLogError):
        _read_file(content)
    store = JsonlStore(directory, fsync=False)
    store.path_for(stream).write_bytes(content)
    with pytest.raises(CorruptLogError):
        store.read(stream)
    return store


@_bug(DEEP_LINE, RecursionError)
def test_regression_a_complete_last_line_too_deep_to_parse_is_corruption_not_cut(
    tmp_path: Path,
) -> None:
    """A newline-terminated line was acknowledged: a reader never takes it for torn."""
    stream, _, content = _log_with_a_deep_line("last")
    store = _corrupt_when_read(tmp_path, stream, content)
    assert store.path_for(stream).read_bytes() == content  # nothing cut


@_bug(DEEP_LINE, RecursionError)
def test_regression_a_line_too_deep_to_parse_amid_a_log_is_corruption(tmp_path: Path) -> None:
    stream, events, content = _log_with_a_deep_line("middle")
    store = _corrupt_when_read(tmp_path, stream, content)
    with pytest.raises(CorruptLogError):  # the envelope scan of an append
        store.append(stream, [events[1].model_copy(update={"seq": 2, "id": "id-new"})], 2)


# --------------------------------------------------------------------------- the fuzz draws them
# The inputs of the regressions above are not left out of the fuzz: the very strategies of
# `TARGETS` draw each kind.


def _leaves(value: Any) -> Iterator[Any]:
    """Every key and leaf of a nested value, walked without recursion (it may be 5,000 deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            yield item


def has_lone_surrogate(value: Any) -> bool:
    return any(
        isinstance(leaf, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in leaf)
        for leaf in _leaves(value)
    )


def has_huge_int(value: Any) -> bool:
    """An integer of more than the 4300 digits `str()` converts."""
    return any(
        isinstance(leaf, int) and not isinstance(leaf, bool) and abs(leaf) >= 10**4300
        for leaf in _leaves(value)
    )


def has_refused_step(payload: Any) -> bool:
    return isinstance(payload, dict) and int_refuses(payload.get("step"))


class Drawn(BaseException):
    """The input sought: a BaseException, so Hypothesis stops at once without shrinking or
    printing it (`find` would, and its printer recurses through a 900-deep value)."""


def drawn(target: str, condition: Callable[[Any], bool]) -> Any:
    """An input of `target`'s strategy that meets `condition`, within 5,000 draws."""

    @settings(
        max_examples=5000,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(TARGETS[target].inputs)
    def search(value: Any) -> None:
        if condition(value):
            raise Drawn(value)

    try:
        search()
    except Drawn as found:
        return found.args[0]
    pytest.fail(f"5,000 inputs of {target} and none meets {condition.__name__}")


@pytest.mark.parametrize(
    "target",
    [
        "status_fields",
        "health_fields",
        "heartbeat_fields",
        "observations",
        "heartbeat_observation",
        "decode_output",
        "codec_decode",
        "codec_decode_many",
        "codec_upcast",
    ],
)
def test_the_fuzz_draws_lone_surrogates(target: str) -> None:
    assert has_lone_surrogate(drawn(target, has_lone_surrogate))


@pytest.mark.parametrize("target", ["heartbeat_fields", "heartbeat_observation"])
def test_the_fuzz_draws_step_strings_int_refuses(target: str) -> None:
    assert int_refuses("\u00b2") and int_refuses("0\x1f") and int_refuses("-\u2460")
    assert not int_refuses("\u0663")  # Arabic-Indic 3: int reads it
    assert not int_refuses(" 42 ") and not int_refuses("x") and not int_refuses(2)
    assert has_refused_step(drawn(target, has_refused_step))


@pytest.mark.parametrize(
    "target", ["observations", "decode_output", "heartbeat_fields", "heartbeat_observation"]
)
def test_the_fuzz_draws_integers_of_more_than_4300_digits(target: str) -> None:
    assert has_huge_int(drawn(target, has_huge_int))
