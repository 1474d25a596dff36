"""Snapshots of a job's folded state: `JobState` as bytes and back (pure: no I/O, no clock).

A snapshot lets a reattach start from the state at seq N and fold only the events after it,
instead of replaying the whole stream. It is a cache, never the record: the log stays the
truth, and a snapshot that cannot be trusted is ignored and the stream replayed in full.

The format is JSON (no pickle: a store shared by many hosts must never be able to run code
in a reader). The body is one JSON object,

    {"fold":"job","v":<FOLD_VERSION>,"stream":…,"seq":N,"state":{…},"_c":"xxxxxxxx"}

sealed like a JSONL event line: its last member is the CRC-32 of the bytes without it
(`flashfsm.events.codec.seal`). Each field of the state is tagged by its type, so every
value comes back as the type it was: an event as the codec's exact JSON line
(`{"e": "<line>"}`, decoded by `flashfsm.events.codec.decode`), the policy as its fields
(`{"p": {…}}`), a tuple as `{"t": […]}`, a dict (the timers) as `{"d": {…}}`; `None`,
booleans, ints, floats (in their shortest exact form, so they round-trip exactly) and
strings as themselves. A value of any other type, or a float JSON has no number for (a NaN,
an infinity), cannot be encoded (`SnapshotError`). An event held in two fields (a job's
first watch and its latest) and the submission's policy held again are decoded once.

`FOLD_VERSION` is the version of the fold's code. **Bump it on any change to `evolve`
(`flashfsm.fsm.job`), to `JobState`'s fields, or to the rules' timer declarations
(`flashfsm.fsm.rules`)**: a state folded by older code may differ from what today's fold
gives, so a snapshot of another version is ignored (the stream is replayed in full and a
new snapshot written). `decode_snapshot` also refuses a body whose checksum fails, that
does not decode, that names another stream or seq than the one it was stored under, or
whose fields are not `JobState`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

import msgspec

from flashfsm.events.codec import decode, encode, seal, unseal
from flashfsm.events.models import EventBase, JobSubmitted
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.state import JobState

S = TypeVar("S")

#: The version of the job fold's code. Bump on any change to `evolve`, `JobState`'s fields
#: or the rules' timers: snapshots of another version are ignored and rebuilt.
FOLD_VERSION = 7

#: Events between two snapshots of a watched job stream, on the stores that keep them by
#: default (SQLite, Postgres): a reattach then folds at most this many events past one.
#: (`bench/snapshots.py`: writing them costs a write loop about 3.5 % of its CPU.)
DEFAULT_SNAPSHOT_EVERY = 100


def checked_interval(every: int | None) -> int | None:
    """A store's `snapshot_every`, refused (`ValueError`) unless None or at least 1."""
    if every is not None and every < 1:
        raise ValueError(f"snapshot_every must be at least 1 (or None), not {every}")
    return every


_FIELDS = tuple(f.name for f in fields(JobState))
_FIELD_SET = frozenset(_FIELDS)
_PLAIN = frozenset({type(None), bool, int, float, str})


class SnapshotError(ValueError):
    """A snapshot that cannot be used (another version, a failed checksum, a bad body)."""


@dataclass(frozen=True, slots=True)
class SnapshotCodec(Generic[S]):
    """How a kind of stream's state is snapshotted: its fold's version, and the codec.

    `copy(state)` is an independent copy, taken where the state lives so the encoding can
    run elsewhere (a worker thread) while the fold goes on.
    """

    version: int
    encode: Callable[[S, str], bytes]
    decode: Callable[[bytes, str, int, int], S]
    copy: Callable[[S], S]


_encode_json = msgspec.json.Encoder().encode
_decode_json = msgspec.json.Decoder().decode


def _value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):  # (JSON has no such number: no snapshot, a full replay)
            raise SnapshotError(f"a snapshot cannot hold the float {value!r}")
        return value
    if isinstance(value, EventBase):
        return {"e": encode(value).decode("utf-8")}  # type: ignore[arg-type]
    if isinstance(value, GracePolicy):
        return {"p": value.model_dump()}
    if isinstance(value, tuple):
        return {"t": [_value(item) for item in value]}
    if isinstance(value, dict):
        return {"d": {str(key): _value(item) for key, item in value.items()}}
    raise SnapshotError(f"a snapshot cannot hold a {type(value).__name__}")


def _unvalue(raw: Any, seen: dict[str, Any]) -> Any:
    """The value `raw` encodes. `seen` holds the events and policies already decoded
    from this body, by their JSON: a state keeps the same event in two fields (its first
    watch and its watch) and its submission's policy again, each decoded once."""
    if type(raw) in _PLAIN:
        return raw
    if type(raw) is dict and len(raw) == 1:
        [(tag, inner)] = raw.items()
        if tag == "e" and type(inner) is str:
            event = seen.get(inner)
            if event is None:
                event = seen[inner] = decode(inner)
                if type(event) is JobSubmitted:  # (its policy, keyed as a "p" value is)
                    seen["p" + repr(_decode_json(inner).get("policy"))] = event.policy
            return event
        if tag == "p" and type(inner) is dict:
            key = "p" + repr(inner)  # (an event's key is its JSON: never starts with p)
            policy = seen.get(key)
            if policy is None:
                policy = seen[key] = GracePolicy.model_validate(inner)
            return policy
        if tag == "t" and type(inner) is list:
            return tuple([item if type(item) in _PLAIN else _unvalue(item, seen) for item in inner])
        if tag == "d" and type(inner) is dict:
            return {
                key: item if type(item) in _PLAIN else _unvalue(item, seen)
                for key, item in inner.items()
            }
    raise SnapshotError(f"not a snapshot value: {str(raw)[:80]!r}")


def encode_snapshot(state: JobState, stream: str) -> bytes:
    """`state` as a sealed snapshot body of `stream` at its last seq (`next_seq - 1`)."""
    body = {
        "fold": "job",
        "v": FOLD_VERSION,
        "stream": stream,
        "seq": state.next_seq - 1,
        "state": {name: _value(getattr(state, name)) for name in _FIELDS},
    }
    return seal(_encode_json(body))


def decode_snapshot(body: bytes, stream: str, seq: int, version: int) -> JobState:
    """The state a snapshot body holds, stored for `stream` at `seq` by fold `version`.

    Raises `SnapshotError` when the snapshot is of another fold version, fails its
    checksum, does not decode, or does not match `stream` and `seq`.
    """
    if version != FOLD_VERSION:
        raise SnapshotError(f"fold version {version}, not this library's {FOLD_VERSION}")
    try:
        text = unseal(bytes(body), strict=True)
        try:
            raw = _decode_json(text)
        except msgspec.DecodeError:  # (what msgspec does not read, such as `NaN`: json may)
            raw = json.loads(text)
    except ValueError as exc:  # ChecksumError, JSONDecodeError, UnicodeDecodeError
        raise SnapshotError(f"unreadable snapshot: {exc}") from None
    if not isinstance(raw, dict):
        raise SnapshotError("a snapshot body is a JSON object")
    head = (raw.get("fold"), raw.get("v"), raw.get("stream"), raw.get("seq"))
    if head != ("job", version, stream, seq):
        raise SnapshotError(f"the body says {head!r}, not ('job', {version}, {stream!r}, {seq})")
    values = raw.get("state")
    if not isinstance(values, dict) or values.keys() != _FIELD_SET:
        raise SnapshotError("the body's fields are not JobState's")
    state = JobState()
    seen: dict[str, Any] = {}
    try:
        for name, value in values.items():
            # (most fields are plain scalars: set as they are, without a call)
            setattr(state, name, value if type(value) in _PLAIN else _unvalue(value, seen))
    except SnapshotError:
        raise
    except ValueError as exc:  # an event or a policy that does not validate
        raise SnapshotError(f"a value does not decode: {exc}") from None
    if state.next_seq != seq + 1 or state.stream not in (None, stream):
        raise SnapshotError(f"the state is at seq {state.next_seq - 1}, not {seq}")
    return state


#: The job fold's snapshots (`flashfsm.writer.JOB` uses it).
JOB_SNAPSHOTS: SnapshotCodec[JobState] = SnapshotCodec(
    FOLD_VERSION, encode_snapshot, decode_snapshot, JobState.copy
)
