"""The event models and their codec (flashfsm.events.models, flashfsm.events.codec)."""

from __future__ import annotations

import contextlib
import json
import math
import types
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from flashfsm.events import codec
from flashfsm.events.codec import decode, decode_many, encode, register_upcaster, upcast
from flashfsm.events.errors import EventDecodeError, UnknownEventError
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    ERROR_CAP,
    EVENT_TYPES,
    MESSAGE_CAP,
    NAME_CAP,
    Concluded,
    FailureDetailObserved,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    JobCounts,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    WorkerCounts,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.events.text import redact_then_cap
from flashfsm.fsm.table import JobPhase

# --- strategies: one per event kind ---------------------------------------------------------

names = st.text(max_size=30)
finite = st.floats(allow_nan=False, allow_infinity=False)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
counts = st.integers(0, 10**6)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | names
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
metrics = st.dictionaries(names, json_values, max_size=4)


def envelope(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "stream": draw(names),
        "seq": draw(st.integers(0, 10**9)),
        "id": draw(names),
        "at": draw(times),
    }


policies = st.builds(
    GracePolicy,
    stall_after_s=st.floats(1, 1e5),
    setup_grace_s=st.floats(1, 1e5),
    queue_grace_s=st.floats(0, 1e5),
    deadline_s=st.none() | st.floats(1, 1e6),
    max_poll_errors=st.integers(1, 20),
)


@st.composite
def job_submitted(draw: st.DrawFn) -> JobSubmitted:
    return JobSubmitted(
        **envelope(draw),
        endpoint_id=draw(names),
        endpoint_name=draw(names),
        job_id=draw(names),
        gpu_class=draw(st.none() | names),
        attempt=draw(st.integers(0, 9)),
        on_last_gpu=draw(st.booleans()),
        policy=draw(policies),
        submitted_at=draw(st.none() | times),
    )


@st.composite
def watch_started(draw: st.DrawFn) -> WatchStarted:
    return WatchStarted(
        **envelope(draw),
        watcher=draw(names),
        reattach=draw(st.booleans()),
        interval_s=draw(st.floats(0.001, 1e4)),
        has_heartbeat_reader=draw(st.booleans()),
        has_failure_detail_reader=draw(st.booleans()),
    )


@st.composite
def status_observed(draw: st.DrawFn) -> StatusObserved:
    long_text = st.none() | st.text(max_size=ERROR_CAP)
    return StatusObserved(
        **envelope(draw),
        status=draw(st.text(max_size=NAME_CAP)),
        error=draw(long_text),
        stdout_tail=draw(long_text),
        output_text=draw(long_text),
        metrics=draw(st.none() | metrics),
        output_error=draw(long_text),
    )


@st.composite
def call_failed(
    draw: st.DrawFn, kind: type[StatusFetchFailed | HealthProbeFailed]
) -> StatusFetchFailed | HealthProbeFailed:
    """A failed status fetch or health probe (`kind`): the same fields."""
    return kind(
        **envelope(draw),
        error_class=draw(names),
        http_status=draw(st.none() | st.integers(100, 599)),
        message=draw(names),
    )


@st.composite
def health_observed(draw: st.DrawFn) -> HealthObserved:
    return HealthObserved(
        **envelope(draw),
        workers=draw(st.builds(WorkerCounts, **{k: counts for k in WorkerCounts.model_fields})),
        jobs=draw(st.builds(JobCounts, **{k: counts for k in JobCounts.model_fields})),
    )


@st.composite
def heartbeat_observed(draw: st.DrawFn) -> HeartbeatObserved:
    return HeartbeatObserved(
        **envelope(draw),
        found=draw(st.booleans()),
        stage=draw(st.none() | names),
        step=draw(st.none() | st.integers(-(2**40), 2**40)),
        ts=draw(st.none() | finite),
        retriable=draw(st.booleans()),
        forced=draw(st.booleans()),
        read_error=draw(st.none() | st.text(max_size=MESSAGE_CAP)),
    )


@st.composite
def failure_detail_observed(draw: st.DrawFn) -> FailureDetailObserved:
    return FailureDetailObserved(**envelope(draw), text=draw(st.none() | st.text(max_size=500)))


@st.composite
def concluded(draw: st.DrawFn) -> Concluded:
    phase = draw(st.sampled_from(JobPhase))
    return Concluded(
        **envelope(draw),
        state=phase.value,
        ok=phase is JobPhase.SUCCEEDED,
        failure=draw(st.none() | st.sampled_from(list(FailureKind))),
        detail=draw(st.text(max_size=300)),
        rule=draw(names),
        evidence=tuple(draw(st.lists(st.integers(0, 10**6), max_size=4))),
        metrics=draw(st.none() | metrics),
    )


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    """The annotated-types constraints pydantic keeps for a field, as keyword arguments."""
    found: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found.update(_bounds(item.metadata))
        elif isinstance(item, annotated_types.MaxLen):
            found["max_length"] = item.max_length
        elif isinstance(item, annotated_types.Ge):
            found["ge"] = item.ge
        elif isinstance(item, annotated_types.Gt):
            found["gt"] = item.gt
    return found


def strategy_for(annotation: Any, metadata: list[Any] = ()) -> st.SearchStrategy[Any]:
    """Values of a field's type that satisfy its constraints, derived from the annotation."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return strategy_for(args[0], [*metadata, *args[1:]])
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy_for(arg, metadata) for arg in args))
    if annotation is type(None):
        return st.none()
    if origin is Literal:
        return st.sampled_from(args)
    bounds = _bounds(list(metadata))
    if annotation is str:
        cap = bounds.get("max_length", 10_000)
        return st.text(max_size=min(cap, 30)) | st.just("x" * cap)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        low = bounds.get("ge", bounds["gt"] + 1 if "gt" in bounds else -(2**40))
        return st.integers(min_value=low, max_value=2**40)
    if annotation is float:
        low = bounds.get("ge", bounds.get("gt"))
        return st.floats(
            min_value=low, exclude_min="gt" in bounds, allow_nan=False, allow_infinity=False
        )
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin is dict:
        return metrics
    if annotation is Any:
        return json_values
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_strategy(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return st.sampled_from(list(annotation))
    raise NotImplementedError(f"no strategy for {annotation!r}: teach strategy_for about it")


def model_strategy(cls: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Instances of `cls`: every required field drawn, each optional one drawn or defaulted."""
    required, optional = {}, {}
    for name, field in cls.model_fields.items():
        if name in ("kind", "v"):
            continue
        strategy = strategy_for(field.annotation, field.metadata)
        (required if field.is_required() else optional)[name] = strategy
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


#: Every kind: derived from its model, plus a hand-written strategy for the job-watch kinds.
HAND_WRITTEN: dict[str, st.SearchStrategy[Any]] = {
    "JobSubmitted": job_submitted(),
    "WatchStarted": watch_started(),
    "StatusObserved": status_observed(),
    "StatusFetchFailed": call_failed(StatusFetchFailed),
    "HealthObserved": health_observed(),
    "HealthProbeFailed": call_failed(HealthProbeFailed),
    "HeartbeatObserved": heartbeat_observed(),
    "FailureDetailObserved": failure_detail_observed(),
    "Concluded": concluded(),
}
EVENT_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    kind: model_strategy(cls) | HAND_WRITTEN[kind] if kind in HAND_WRITTEN else model_strategy(cls)
    for kind, cls in EVENT_TYPES.items()
}
any_event = st.one_of(*EVENT_STRATEGIES.values())


def minimal(kind: str, **fields: Any) -> dict[str, Any]:
    """The smallest valid JSON object of `kind` (as a dict), with `fields` on top."""
    required: dict[str, dict[str, Any]] = {
        "JobSubmitted": {"endpoint_id": "ep", "job_id": "j"},
        "WatchStarted": {"watcher": "w"},
        "StatusObserved": {"status": "IN_QUEUE"},
        "StatusFetchFailed": {"error_class": "E"},
        "HealthProbeFailed": {"error_class": "E"},
        "Concluded": {"state": "STALLED", "ok": False, "rule": "stall"},
    }
    base = {"stream": "job-7", "seq": 3, "id": "id-3", "at": 1.5, "kind": kind, "v": 1}
    return {**base, **required.get(kind, {}), **fields}


# --- round trips ----------------------------------------------------------------------------


def test_the_job_watch_kinds_have_hand_written_strategies() -> None:
    assert set(HAND_WRITTEN) <= set(EVENT_TYPES)
    assert {"JobSubmitted", "StatusObserved", "HeartbeatObserved", "Concluded"} <= set(HAND_WRITTEN)


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
@settings(max_examples=max(10, settings.default.max_examples // 5))  # times 26 kinds
@given(data=st.data())
def test_every_event_kind_round_trips_through_the_codec(kind: str, data: st.DataObject) -> None:
    event = data.draw(EVENT_STRATEGIES[kind])
    assert event.kind == kind and isinstance(event, EVENT_TYPES[kind])
    line = encode(event)
    assert isinstance(line, bytes) and b"\n" not in line
    assert decode(line) == event  # bytes
    assert decode(line.decode("utf-8")) == event  # str
    assert type(decode(line)) is type(event)


@given(st.lists(any_event, max_size=4))
def test_decode_many_decodes_a_sequence_of_lines_in_order(events: list[Any]) -> None:
    assert list(decode_many(encode(e) for e in events)) == events


def test_decode_of_hand_written_bytes() -> None:
    line = json.dumps(minimal("HeartbeatObserved", stage="sft_train", step=4)).encode()
    event = decode(line)
    assert isinstance(event, HeartbeatObserved)
    assert (event.stream, event.seq, event.stage, event.step, event.found) == (
        "job-7",
        3,
        "sft_train",
        4,
        True,
    )


def test_events_written_before_the_forced_read_retry_decode_as_reads_that_did_not_fail() -> None:
    # A log line from before `read_error` (and a policy from before the forced-read knobs).
    old = minimal("HeartbeatObserved", found=False, forced=True)
    assert "read_error" not in old
    event = decode(json.dumps(old))
    assert isinstance(event, HeartbeatObserved) and event.read_error is None
    old_policy = {"stall_after_s": 1500.0, "max_poll_errors": 8, "max_backoff_s": 60.0}
    submitted = decode(json.dumps(minimal("JobSubmitted", policy=old_policy)))
    assert isinstance(submitted, JobSubmitted)
    assert submitted.policy.forced_read_tries == GracePolicy().forced_read_tries
    assert submitted.policy.forced_read_backoff_s == GracePolicy().forced_read_backoff_s


def test_a_failed_forced_read_round_trips_with_its_error() -> None:
    line = minimal("HeartbeatObserved", found=False, forced=True, read_error="TimeoutError")
    event = decode(json.dumps(line))
    assert isinstance(event, HeartbeatObserved) and event.read_error == "TimeoutError"
    assert decode(encode(event)) == event
    with pytest.raises(EventDecodeError):
        decode(json.dumps({**line, "read_error": "x" * (MESSAGE_CAP + 1)}))


# --- unknown kinds and versions -------------------------------------------------------------


def test_an_unknown_kind_is_an_error_naming_the_stream_and_seq() -> None:
    line = json.dumps(minimal("WorkerExploded", stream="job-42", seq=17))
    with pytest.raises(UnknownEventError) as info:
        decode(line)
    assert info.value.stream == "job-42" and info.value.seq == 17
    assert "'job-42'" in str(info.value) and "seq 17" in str(info.value)
    assert "WorkerExploded" in str(info.value)


@pytest.mark.parametrize("version", [0, 2, 99])
def test_an_unknown_version_without_an_upcaster_is_an_error_naming_the_stream_and_seq(
    version: int,
) -> None:
    line = json.dumps(minimal("HeartbeatObserved", stream="job-9", seq=5, v=version))
    with pytest.raises(UnknownEventError) as info:
        decode(line)
    assert info.value.stream == "job-9" and info.value.seq == 5
    message = str(info.value)
    assert "'job-9'" in message and "seq 5" in message
    assert f"v{version}" in message and "HeartbeatObserved" in message


@pytest.mark.parametrize("version", ["1", "one", None, 1.5, [1]])
def test_a_version_that_is_not_an_integer_is_a_decode_error(version: Any) -> None:
    with pytest.raises(EventDecodeError) as info:
        decode(json.dumps(minimal("HeartbeatObserved", v=version)))
    assert info.value.stream == "job-7" and info.value.seq == 3


@pytest.mark.parametrize("version", [1, 0, 2, True, False, 1.0, 0.0, "1", None])
def test_decode_and_upcast_judge_a_version_alike(version: Any) -> None:
    """The fast path (`decode`) and the slow path (`upcast`) read the same record the same way."""
    raw = minimal("HeartbeatObserved", v=version)
    outcomes = []
    for read in (lambda: decode(json.dumps(raw)), lambda: upcast(dict(raw))):
        try:
            outcomes.append(read())
        except EventDecodeError as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]


def test_a_registered_upcaster_upgrades_an_old_event() -> None:
    key = ("HeartbeatObserved", 0)
    assert key not in codec.UPCASTERS
    try:

        @register_upcaster("HeartbeatObserved", 0)
        def rename_beat_stage(raw: dict[str, Any]) -> dict[str, Any]:
            raw["stage"] = raw.pop("beat_stage", None)
            raw["v"] = 1
            return raw

        old = minimal("HeartbeatObserved", v=0, beat_stage="rl_train_start", step=12)
        event = decode(json.dumps(old).encode())
        assert isinstance(event, HeartbeatObserved)
        assert (event.v, event.stage, event.step, event.seq) == (1, "rl_train_start", 12, 3)
        assert upcast(old) == event
        assert list(decode_many([json.dumps(old)])) == [event]
        # an upcaster is registered once
        with pytest.raises(ValueError, match="already registered"):
            register_upcaster("HeartbeatObserved", 0)(rename_beat_stage)
    finally:
        codec.UPCASTERS.pop(key, None)
    with pytest.raises(UnknownEventError):
        decode(json.dumps(minimal("HeartbeatObserved", v=0, beat_stage="boot")))


def test_upcasters_chain_from_an_older_version_to_the_current_one() -> None:
    keys = [("StatusObserved", -1), ("StatusObserved", 0)]
    seen: list[int] = []

    def rename(old: str, new: str, to_version: int) -> Any:
        def step(raw: dict[str, Any]) -> dict[str, Any]:
            seen.append(raw["v"])
            raw[new] = raw.pop(old)
            raw["v"] = to_version
            return raw

        return step

    try:
        register_upcaster(*keys[0])(rename("phase", "state", 0))
        register_upcaster(*keys[1])(rename("state", "status", 1))
        raw = minimal("StatusObserved", v=-1, phase="RUNNING")
        del raw["status"]
        event = decode(json.dumps(raw))
        assert isinstance(event, StatusObserved) and event.status == "RUNNING"
        assert seen == [-1, 0]
    finally:
        for key in keys:
            codec.UPCASTERS.pop(key, None)


def test_an_upcaster_that_produces_an_invalid_event_is_a_decode_error() -> None:
    key = ("WatchStarted", 0)
    try:
        register_upcaster(*key)(lambda raw: {**raw, "v": 1, "interval_s": -5})
        with pytest.raises(EventDecodeError) as info:
            decode(json.dumps(minimal("WatchStarted", v=0)))
        assert info.value.seq == 3 and "interval_s" in str(info.value)
    finally:
        codec.UPCASTERS.pop(key, None)


# --- what is not an event -------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"{",
        b"not json",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b"null",
        b'"HeartbeatObserved"',
        b"42",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"kind": "HeartbeatObserved", "v": 1}',
        b"{}",
    ],
)
def test_bytes_that_are_not_an_event_object_are_a_decode_error(line: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode(line)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seq", "three"),
        ("seq", -1),
        ("seq", 1.5),
        ("at", "yesterday"),
        ("at", None),
        ("stream", 7),
        ("stream", "s" * (NAME_CAP + 1)),
        ("found", "perhaps"),
        ("step", "x"),
        ("ts", [1]),
        ("stage", {"a": 1}),
    ],
)
def test_a_field_of_the_wrong_type_is_a_decode_error(field: str, value: Any) -> None:
    raw = minimal("HeartbeatObserved", **{field: value})
    with pytest.raises(EventDecodeError) as info:
        decode(json.dumps(raw))
    assert not isinstance(info.value, UnknownEventError)
    assert field in str(info.value)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_decoding_arbitrary_bytes_raises_nothing_but_event_decode_error(line: bytes) -> None:
    with contextlib.suppress(EventDecodeError):
        decode(line)


@given(event=any_event, data=st.data())
def test_any_json_in_any_field_decodes_or_raises_event_decode_error(
    event: Any, data: st.DataObject
) -> None:
    raw = event.model_dump(mode="json")
    field = data.draw(st.sampled_from(sorted(raw)) | names, label="field")
    raw[field] = data.draw(json_values | names, label="value")
    try:
        decoded = decode(json.dumps(raw))
    except EventDecodeError as exc:
        if isinstance(raw.get("stream"), str):
            # whatever is wrong, the error says where
            assert exc.stream == raw["stream"][:NAME_CAP]
    else:
        assert decoded.kind == raw["kind"] and decoded.stream == raw["stream"]


# --- models ---------------------------------------------------------------------------------


@given(any_event)
def test_events_are_frozen(event: Any) -> None:
    with pytest.raises(ValidationError):
        event.seq = event.seq + 1
    with pytest.raises(ValidationError):
        event.at = 0.0


@given(any_event, st.sampled_from(["api_key", "token", "Status", "extra"]))
def test_extra_fields_are_forbidden(event: Any, extra: str) -> None:
    raw = event.model_dump(mode="json")
    assert type(event).model_validate(raw) == event  # the event itself is valid
    with pytest.raises(ValidationError):
        type(event).model_validate({**raw, extra: "rp_secret"})
    with pytest.raises(EventDecodeError) as info:
        decode(json.dumps({**raw, extra: "rp_secret"}))
    assert extra in str(info.value)


def test_nested_values_forbid_extra_fields_and_are_frozen() -> None:
    with pytest.raises(ValidationError):
        WorkerCounts(running=1, zombie=2)
    with pytest.raises(ValidationError):
        GracePolicy(stall_after_s=10, stall_s=20)
    with pytest.raises(ValidationError):
        WorkerCounts().running = 3


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_at_is_rejected(bad: float) -> None:
    with pytest.raises(ValidationError):
        HeartbeatObserved(stream="s", seq=0, id="i", at=bad)
    raw = json.dumps(minimal("HeartbeatObserved", at=bad))  # Python writes NaN / Infinity
    assert "NaN" in raw or "Infinity" in raw
    with pytest.raises(EventDecodeError) as info:
        decode(raw)
    assert "at" in str(info.value)


@pytest.mark.parametrize(
    "name",
    [name for name, info in GracePolicy.model_fields.items() if info.annotation not in (int, bool)],
)
def test_a_policy_refuses_a_nan_in_every_number_field(name: str) -> None:
    with pytest.raises(ValidationError):
        GracePolicy(**{name: math.nan})
    GracePolicy(**{name: 5.0})  # (a number is taken: the NaN is what is refused)


def test_redact_then_cap_keeps_the_head_or_the_tail() -> None:
    assert redact_then_cap("abcdef", 10) == "abcdef"
    assert redact_then_cap("abcdef", 3) == "abc"
    assert redact_then_cap("abcdef", 3, tail=True) == "def"


# --- the upcasters this library ships -------------------------------------------------------


def test_a_v1_job_submitted_upcasts_to_a_policy_that_reads_the_heartbeat_every_poll() -> None:
    policy = GracePolicy().model_dump()
    del policy["heartbeat_every_s"]  # what a v1 writer recorded
    old = minimal("JobSubmitted", v=1, policy={**policy, "stall_after_s": 99.0})
    event = decode(json.dumps(old))
    assert isinstance(event, JobSubmitted) and event.v == 2
    assert event.policy.heartbeat_every_s is None and event.policy.stall_after_s == 99.0
    assert upcast(old) == event and list(decode_many([json.dumps(old)])) == [event]
    # a v1 line without a policy had the defaults of its day: every poll reads too
    assert decode(json.dumps(minimal("JobSubmitted", v=1))).policy == GracePolicy(
        heartbeat_every_s=None
    )
    # a new event keeps its pace through the fast path
    new = JobSubmitted(stream="job-7", seq=0, id="n", at=1.0, endpoint_id="ep", job_id="j")
    assert new.v == 2 and new.policy.heartbeat_every_s == 30.0 and decode(encode(new)) == new


def test_a_v1_log_still_asks_for_a_heartbeat_read_on_every_poll() -> None:
    from flashfsm.fsm.job import replay

    policy = GracePolicy().model_dump()
    del policy["heartbeat_every_s"]
    lines = [
        minimal("JobSubmitted", v=1, seq=0, at=0.0, policy=policy),
        minimal("WatchStarted", seq=1, at=0.0, has_heartbeat_reader=True),
        minimal("StatusObserved", seq=2, at=0.0, status="IN_PROGRESS"),
        minimal("StatusObserved", seq=3, at=10.0, status="IN_PROGRESS"),
    ]
    events = [decode(json.dumps(line)) for line in lines]
    assert replay(events).pending == ("heartbeat",)  # v1: every poll; v2's default: not at 10
    new = [events[0].model_copy(update={"policy": GracePolicy()}), *events[1:]]
    assert replay(new).pending == ()


def test_a_v4_watch_started_is_read_as_it_is_and_an_extra_field_is_named() -> None:
    # (v4: a worker reader that reads the queue's records too; CI's property found the slow
    # path asking for an upcaster for it)
    raw = minimal("WatchStarted", seq=1, v=4, has_worker_reader=True)
    event = decode(json.dumps(raw))
    assert isinstance(event, WatchStarted) and event.reads_queue_records
    with pytest.raises(EventDecodeError) as info:
        decode(json.dumps({**raw, "Status": "rp_secret"}))
    assert "Status" in str(info.value) and "upcaster" not in str(info.value)
