"""The replay's fast path (light events) is equivalent to the validating path.

`flashfsm.events.light` decodes a checksummed line of the current version straight into a
light event; everything else takes the validating path. These tests hold the two paths to
the same answers: the same field values for every event of every kind, the same folded state
for real job logs (with lines of older versions mixed in) on every durable store, and the
same refusal, at the same seq, of every corrupted line. They also pin where the fast path
must not run at all: strict reads, unsealed lines, and outside a fold that settles.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import annotated_types
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from flashfsm import JsonlStore, SqliteStore, replay_job
from flashfsm.events import codec
from flashfsm.events.codec import (
    decode,
    decode_prefix,
    encode,
    encode_sealed,
    register_upcaster,
    require_checksums,
    seal,
)
from flashfsm.events.errors import CorruptLogError, EventDecodeError, UnknownEventError
from flashfsm.events.light import (
    LIGHT_TYPES,
    is_light,
    light_decode,
    light_mode,
    light_reads,
    model_of,
    settle_fields,
)
from flashfsm.events.models import EVENT_TYPES, HeartbeatObserved, StatusObserved, WatchStarted
from flashfsm.fsm.job import replay
from tests.store_support import PG_ENV, make_backend, make_events, postgres_dsn, run_cleanups
from tests.test_events import any_event, minimal
from tests.test_fuzz import mutated
from tests.test_properties import run_poll_job, scripts

STREAM = "job-prop"  # the stream `run_poll_job` writes


#: Values a rewritten field takes: every JSON type, and strings about as long as a bound.
FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.integers(190, 210).map(lambda n: "x" * n),
    st.integers(1490, 1510).map(lambda n: "é" * n),
    st.dictionaries(st.text(max_size=3), st.integers() | st.floats(allow_nan=False), max_size=2),
    st.lists(st.integers(), max_size=2),
)
#: JSON numbers spelled as no encoder writes them: beyond a double, negative zero, ints past
#: 64 bits, exponents.
NUMBER_LITERALS = st.sampled_from(
    ["1e400", "-1e400", "1e-400", "-0", "-0.0", "1.0", "1", "0.1", "1E2", "18446744073709551616"]
)


def light_or_none(line: bytes) -> Any:
    """The light event the fast path makes of `line`, or None when it leaves it alone."""
    try:
        return light_decode(line)
    except msgspec.DecodeError:
        return None


def outcome(read: Any) -> Any:
    """What a read gives: its value, or the type of error and the seq it names."""
    try:
        return read()
    except (CorruptLogError, EventDecodeError) as exc:
        return type(exc), getattr(exc, "seq", None)


# --- one line --------------------------------------------------------------------------------


def test_the_hot_kinds_have_light_classes_that_mirror_their_models() -> None:
    """A model change that silently took the fast path away from a replay's bulk fails here."""
    for kind in ("StatusObserved", "HeartbeatObserved", "StatusFetchFailed", "HealthProbeFailed"):
        light, model = LIGHT_TYPES[kind], EVENT_TYPES[kind]
        assert set(light.__struct_fields__) == set(model.model_fields) - {"kind"}
        assert light.kind == kind
    assert set(LIGHT_TYPES) < set(EVENT_TYPES)
    # a model validator, a nested model or a tuple keeps a kind on the validating path
    assert not {"WatchStarted", "JobSubmitted", "HealthObserved", "Concluded"} & set(LIGHT_TYPES)


@given(any_event)
def test_a_light_event_carries_exactly_the_values_and_types_of_its_validated_model(
    event: Any,
) -> None:
    line = encode(event)
    light = light_or_none(line)
    if event.kind not in LIGHT_TYPES:
        assert light is None
        return
    assert light is not None and light.kind == event.kind
    for name in type(event).model_fields:
        mine, theirs = getattr(light, name), getattr(event, name)
        assert mine == theirs and type(mine) is type(theirs), name
    assert model_of(light) == decode(line) == event


@given(any_event, st.data())
def test_every_line_is_decoded_alike_by_both_paths_or_refused_alike(
    event: Any, data: st.DataObject
) -> None:
    """Mutated, rewritten or foreign lines: the fast path accepts only what validates to the
    same event, and a line it does not accept gets the validating path's answer."""
    line = encode(event)
    how = data.draw(st.sampled_from(["valid", "bytes", "field", "number", "version", "kind"]))
    if how == "bytes":
        line = data.draw(mutated(line))
    elif how != "valid":
        raw = json.loads(line)
        key = data.draw(st.sampled_from(sorted(raw)) | st.sampled_from(["extra", "_c"]))
        if how == "field":
            raw[key] = data.draw(FIELD_VALUES)
        elif how == "number":
            raw[key] = "<number>"
        elif how == "version":
            raw["v"] = data.draw(st.integers(-1, 3) | st.sampled_from([1.0, True, "1"]))
        else:
            raw["kind"] = data.draw(st.sampled_from(sorted(EVENT_TYPES)))
        text = json.dumps(raw, allow_nan=True)
        line = text.replace('"<number>"', data.draw(NUMBER_LITERALS)).encode()
    fast_events, fast_error = decode_prefix([line], light=True)
    slow_events, slow_error = decode_prefix([line])
    assert [model_of(e) if is_light(e) else e for e in fast_events] == slow_events
    assert type(fast_error) is type(slow_error) and str(fast_error) == str(slow_error)


def _edges(annotation: Any, metadata: list[Any]) -> list[str]:
    """JSON literals at and just past every bound a field declares (its own and nested)."""
    found: list[str] = []
    for item in metadata:
        if isinstance(item, FieldInfo):
            found += _edges(annotation, list(item.metadata))
        elif isinstance(item, annotated_types.MaxLen):
            found += [json.dumps("x" * item.max_length), json.dumps("x" * (item.max_length + 1))]
        elif isinstance(item, annotated_types.Ge):
            found += [str(item.ge), str(item.ge - 1)]
        elif isinstance(item, annotated_types.Le):
            found += [str(item.le), str(item.le + 1)]
        elif isinstance(item, annotated_types.Gt):
            found += [str(item.gt), repr(item.gt + 0.5)]
    for arg in get_args(annotation):
        if get_origin(arg) is Annotated:
            base, *extra = get_args(arg)
            found += _edges(base, extra)
    if annotation is float or float in get_args(annotation):
        found += ["1e400", "-1e400", "1e308"]
    return found


@given(any_event.filter(lambda e: e.kind in LIGHT_TYPES), st.data())
def test_both_paths_draw_every_bound_of_every_light_field_at_the_same_place(
    event: Any, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(set(type(event).model_fields) - {"kind"})))
    info = type(event).model_fields[name]
    edges = _edges(info.annotation, list(info.metadata))
    if not edges:
        return
    raw = json.loads(encode(event))
    raw[name] = "<edge>"
    line = json.dumps(raw).replace('"<edge>"', data.draw(st.sampled_from(edges))).encode()
    fast_events, fast_error = decode_prefix([line], light=True)
    slow_events, slow_error = decode_prefix([line])
    assert [model_of(e) if is_light(e) else e for e in fast_events] == slow_events
    assert type(fast_error) is type(slow_error)


def test_a_line_of_an_older_version_is_upcast_on_the_validating_path() -> None:
    key = ("HeartbeatObserved", 0)
    try:

        @register_upcaster(*key)
        def rename_beat_stage(raw: dict[str, Any]) -> dict[str, Any]:
            return {**{k: v for k, v in raw.items() if k != "beat_stage"}, "stage": "boot", "v": 1}

        old = json.dumps(minimal("HeartbeatObserved", v=0, beat_stage="boot", step=3)).encode()
        assert light_or_none(old) is None
        [event], error = decode_prefix([old], light=True)
        assert error is None and type(event) is HeartbeatObserved and event.stage == "boot"
    finally:
        codec.UPCASTERS.pop(key, None)
    future = json.dumps(minimal("StatusObserved", v=2, status="IN_QUEUE")).encode()
    assert light_or_none(future) is None
    events, error = decode_prefix([future], light=True)
    assert events == [] and isinstance(error, UnknownEventError)


# --- whole logs, through the stores ----------------------------------------------------------


def _older_versions(lines: list[bytes]) -> list[bytes]:
    """The log as an older writer would have left it: its `JobSubmitted` at v1."""
    out = []
    for line in lines:
        raw = json.loads(line)
        if raw["kind"] == "JobSubmitted":  # (read back with the v1 policy's every-poll pace)
            del raw["policy"]["heartbeat_every_s"]
            raw["v"] = 1
            line = json.dumps(raw, separators=(",", ":")).encode()
        out.append(line)
    return out


def _stores(root: Path, events: list[Any]) -> dict[str, Any]:
    """The log in a JSONL store (written line by line, older versions mixed in, sealed) and
    in a SQLite store (appended)."""
    (root / "jsonl").mkdir()
    lines = _older_versions([encode(e) for e in events])
    (root / "jsonl" / f"{STREAM}.jsonl").write_bytes(b"".join(seal(x) + b"\n" for x in lines))
    sqlite = SqliteStore(root / "events.db", durable=False)
    sqlite.append(STREAM, events, 0)
    return {"jsonl": JsonlStore(root / "jsonl", fsync=False), "sqlite": sqlite}


@given(scripts())
def test_the_fast_path_and_the_validating_path_fold_every_job_log_to_equal_states(
    script: Any,
) -> None:
    _result, events, _world = run_poll_job(script)
    with tempfile.TemporaryDirectory() as tmp:
        for name, store in _stores(Path(tmp), events).items():
            validating = replay(store.read(STREAM))
            if name == "jsonl":  # the older version was read, and upcast
                assert validating.submitted is not None
                assert validating.submitted.policy.heartbeat_every_s is None
            fast = replay_job(store, STREAM)
            assert fast == validating, name
            assert not any(is_light(value) for value in vars_of(fast)), name
            with light_reads():
                read = store.read(STREAM)
            assert [model_of(e) if is_light(e) else e for e in read] == store.read(STREAM)
            if any(e.kind in LIGHT_TYPES for e in events):  # the fast path did run
                assert any(is_light(e) for e in read), name
            store.close()


def vars_of(state: Any) -> list[Any]:
    return list(state.snapshot().values())


@given(st.lists(any_event, min_size=1, max_size=8), st.data())
def test_every_corrupted_line_is_rejected_by_both_paths_at_the_same_seq(
    events: list[Any], data: st.DataObject
) -> None:
    """A damaged byte anywhere fails the checksum on both paths; a line rewritten and sealed
    again (a forged or foreign line) gets the validating path's answer on both."""
    events = [e.model_copy(update={"stream": STREAM, "seq": i}) for i, e in enumerate(events)]
    lines = [encode_sealed(e) for e in events]
    bad = data.draw(st.integers(0, len(lines) - 1))
    if data.draw(st.booleans()):
        damaged = data.draw(mutated(lines[bad]))
        if damaged == lines[bad] or b"\n" in damaged:
            return
        lines[bad] = damaged
    else:
        raw = json.loads(encode(events[bad]))
        raw[data.draw(st.sampled_from(sorted(raw)))] = data.draw(
            st.none() | st.integers(-2, 2) | st.text(max_size=5)
        )
        lines[bad] = seal(json.dumps(raw).encode())
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{STREAM}.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
        store = JsonlStore(tmp, fsync=False)

        def read_fast() -> list[Any]:
            with light_reads():
                return [model_of(e) if is_light(e) else e for e in store.read(STREAM)]

        assert outcome(read_fast) == outcome(lambda: store.read(STREAM))
        store.close()


def test_a_damaged_sqlite_row_is_refused_by_both_paths_at_its_seq(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "events.db", durable=False)
    store.append(STREAM, make_events(STREAM, 0, 6), 0)
    db = sqlite3.connect(tmp_path / "events.db")
    with db:
        db.execute(
            "UPDATE events SET body = replace(body, 'IN_QUEUE', 'IN_QUEUF') "
            "WHERE stream = ? AND seq = 4",
            (STREAM,),
        )
    db.close()
    for read in (lambda: replay_job(store, STREAM), lambda: replay(store.read(STREAM))):
        with pytest.raises(CorruptLogError, match="checksum mismatch") as caught:
            read()
        assert caught.value.seq == 4
    store.close()


# --- where the fast path never runs ----------------------------------------------------------


def test_a_strict_read_and_a_read_outside_a_fold_decode_only_models(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "events.db", durable=False)
    store.append(STREAM, make_events(STREAM, 0, 6), 0)
    assert not light_mode()
    assert not any(is_light(e) for e in store.read(STREAM))
    with light_reads():
        assert all(is_light(e) for e in store.read(STREAM))
        with require_checksums():
            assert not any(is_light(e) for e in store.read(STREAM))
    assert not light_mode()
    with require_checksums():
        assert replay_job(store, STREAM) == replay(store.read(STREAM))
    store.close()


def test_unsealed_lines_of_an_old_log_are_validated_in_full(tmp_path: Path) -> None:
    events = make_events(STREAM, 0, 6)
    lines = [encode(e) for e in events]  # as written before lines carried a checksum
    (tmp_path / f"{STREAM}.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    store = JsonlStore(tmp_path, fsync=False)
    with light_reads():
        read = store.read(STREAM)
    assert read == events and not any(is_light(e) for e in read)
    store.close()


def test_settling_swaps_every_light_event_a_state_holds_for_its_model() -> None:
    beat = HeartbeatObserved(stream=STREAM, seq=1, id="b", at=2.0, stage="train", step=3, ts=1.0)
    status = StatusObserved(stream=STREAM, seq=0, id="s", at=1.0, status="IN_PROGRESS")
    with light_reads():
        [light_status, light_beat], error = decode_prefix(
            [encode(status), encode(beat)], light=True
        )
    assert error is None and is_light(light_status) and is_light(light_beat)
    state = replay([])
    state.status, state.last_heartbeat = light_status, light_beat
    settle_fields(state)
    assert (state.status, state.last_heartbeat) == (status, beat)
    assert type(state.status) is StatusObserved and type(state.last_heartbeat) is HeartbeatObserved


@pytest.mark.parametrize("as_iterator", [False, True])
def test_a_chunk_with_a_kind_that_has_no_light_class_decodes_every_line_in_order(
    as_iterator: bool,
) -> None:
    first = StatusObserved(stream=STREAM, seq=0, id="s0", at=1.0, status="IN_QUEUE")
    watch = WatchStarted(stream=STREAM, seq=1, id="w", at=1.5, watcher="t")
    after = [
        StatusObserved(stream=STREAM, seq=n, id=f"s{n}", at=float(n), status="IN_PROGRESS")
        for n in range(2, 6)
    ]
    lines = [encode(e) for e in (first, watch, *after)]
    assert "WatchStarted" not in LIGHT_TYPES  # (so the chunk leaves the one-map path)
    with light_reads():
        events, error = decode_prefix(iter(lines) if as_iterator else lines, light=True)
    assert error is None and [e.seq for e in events] == list(range(6))
    assert [model_of(e) if is_light(e) else e for e in events] == [first, watch, *after]


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        "jsonl",
        pytest.param(
            "postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(postgres_dsn() is None, reason=f"{PG_ENV} not set"),
            ],
        ),
    ],
)
def test_replay_job_equals_the_validating_replay_on_every_durable_store(
    kind: str, tmp_path: Path
) -> None:
    cleanups: list[Any] = []
    try:
        store = make_backend(kind, tmp_path, cleanups).open()
        store.append(STREAM, make_events(STREAM, 0, 40), 0)
        with light_reads():
            assert any(is_light(e) for e in store.read(STREAM))
        assert replay_job(store, STREAM) == replay(store.read(STREAM))
    finally:
        run_cleanups(cleanups)
