"""JSON-lines codec with upcasting.

Theory of operation: an event is one JSON object on one line. Decoding takes the fast
path first, `TypeAdapter.validate_json` straight on the bytes (pydantic-core parses and
validates in one pass, no intermediate dict). Only when that fails do we parse to a dict,
look at `(kind, v)` and run the registered upcasters, which rewrite an old schema version
into the next one until the current version is reached. A kind or version with no model
and no upcaster is an `UnknownEventError` naming the stream and seq; anything else that
fails validation is an `EventDecodeError` naming them too. The upcasters this library
ships (`JobSubmitted` v1 → v2) are registered at the end of this module.

Bulk decoding (`decode_lines`, `decode_many`) is the replay hot path, and most of its cost is
pydantic-core building one frozen model per line. Two things keep it at that cost:

- the cyclic garbage collector is paused while a batch is decoded. Events hold no reference
  cycles, but every model allocated counts toward the collector's thresholds, so decoding a
  100k-event log into a list would run dozens of collections, each walking every event
  decoded so far (it doubles the cost of a large read);
- each line is validated by its own `validate_json` call. Validating a whole batch as one
  JSON array (`list[Event]`) was measured too: the join costs more than the calls it saves,
  and a line that is not one JSON value could merge with its neighbour.

A stream replay does not pay even that for most lines: with `light=True` (what the stores pass
inside `light_reads()`), a line whose checksum was verified is first offered to
`flashfsm.events.light`'s msgspec decoder, which turns a line of the current version into a
light event without building a model; a line it refuses is validated here as above.

Checksums. A stored event carries a CRC-32 (`zlib.crc32`, C speed) of its body, the exact
bytes `encode` gives. SQLite and Postgres keep it in a `checksum` column; a JSONL line keeps
it inside the line as its last member, so the line stays one JSON object:

    <body without its closing brace>,"_c":"<8 lowercase hex digits>"}

`seal` makes such a line and `unseal` takes it apart: the line ends with the 17-byte seal,
and the body is the bytes before it plus `}`. No model field starts with `_`, and inside a
JSON string a quote is escaped, so the seal's bytes occur nowhere else in a line. A line
without a seal is an old, unchecked one (read as before, refused in strict mode); a line
whose seal does not match its bytes is a `ChecksumError`. Every single-byte change of a
sealed line is caught: in the body by the CRC (it detects every burst of up to 32 bits),
in the hex digits by comparing bytes (so `A` is not `a`), and in the rest of the seal
because the line then is no valid unsealed event either (an unknown member, or not JSON).
Strict mode is a store's `strict=True`, or `require_checksums()` around the reads.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import itertools
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from flashfsm.events.errors import ChecksumError, EventDecodeError, UnknownEventError
from flashfsm.events.light import NOT_LIGHT, light_decode
from flashfsm.events.models import (
    DECLARED_EVENTS,
    EVENT_ADAPTER,
    EVENT_TYPES,
    VERSIONS_READ_AS_IS,
    Event,
)

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

#: (kind, v) -> function that returns the dict at version v + 1.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}

_MAX_UPCASTS = 64


def register_upcaster(kind: str, v: int) -> Callable[[Upcaster], Upcaster]:
    """Register `fn(dict) -> dict` rewriting a `(kind, v)` event into version `v + 1`.

    Upcasters chain: a v1 event is upcast to v2, then v3, until the model's version.
    """

    def register(fn: Upcaster) -> Upcaster:
        if (kind, v) in UPCASTERS:
            raise ValueError(f"an upcaster for ({kind!r}, {v}) is already registered")
        UPCASTERS[(kind, v)] = fn
        return fn

    return register


def current_version(kind: str) -> int | None:
    """The schema version this library writes for `kind`, or None for an unknown kind."""
    cls = EVENT_TYPES.get(kind)
    return None if cls is None else cls.model_fields["v"].default


def encode(event: Event) -> bytes:
    """One event as one JSON line (no trailing newline)."""
    return event.__pydantic_serializer__.to_json(event)


#: pydantic-core's validator itself: `TypeAdapter.validate_json` only forwards its default
#: options to it, and the forwarding is a Python call per event on the replay path.
_validate_json: Callable[[bytes | str], Event] = EVENT_ADAPTER.validator.validate_json


def decode(line: bytes | str) -> Event:
    """One JSON line back into its event, upcasting an older schema version."""
    try:
        return _validate_json(line)
    except ValidationError as fast_error:
        return _decode_slow(line, fast_error)


#: Lines `decode_many` decodes at a time (with the collector paused) before yielding them.
#: Small enough that a chunk's events stay in the CPU cache while a replay folds them and
#: drops them (measured: 256 lines decode ~1.5x faster than 4096 at a time).
CHUNK = 256


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a burst of allocations that form no cycles.

    Only a collector that was enabled is re-enabled, so a program that turned it off
    keeps it off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def decode_prefix(
    lines: Iterable[bytes | str], *, light: bool = False
) -> tuple[list[Event], Exception | None]:
    """Decode lines up to the first bad one: the events before it, and its error (or None).

    The error is an `EventDecodeError` (or `UnknownEventError`); it belongs to the line at
    index `len(events)`, so a caller can name that line. With `light`, a line the light
    decoder accepts becomes a light event (`flashfsm.events.light`; only for lines whose
    checksum was verified, read for a fold that settles them), any other is validated.
    """
    fast = light_decode if light else None
    if fast is not None:
        if not isinstance(lines, Sequence):  # (the loop below starts again from the first)
            lines = list(lines)
        with gc_paused():  # (the usual case, every line light, without a loop of our own)
            try:
                return list(map(fast, lines)), None
            except NOT_LIGHT:
                pass
    events: list[Event] = []
    append = events.append
    validate = _validate_json
    with gc_paused():
        for line in lines:
            if fast is not None:
                try:
                    append(fast(line))
                    continue
                except NOT_LIGHT:
                    pass
            try:
                append(validate(line))
            except ValidationError as fast_error:
                try:
                    append(_decode_slow(line, fast_error))
                except EventDecodeError as exc:
                    return events, exc
    return events, None


# -- checksums ------------------------------------------------------------------------------

#: The member a JSONL line's checksum is kept in (the seal is `,"_c":"xxxxxxxx"}`).
CHECKSUM_MEMBER = "_c"
_SEAL_HEAD = b',"_c":"'
_SEAL_LEN = len(_SEAL_HEAD) + 8 + 2
_SEAL = re.compile(rb',"_c":"[0-9a-f]{8}"}')
_STRICT: contextvars.ContextVar[bool] = contextvars.ContextVar("flashfsm_strict", default=False)

#: The checksum of an event's body (the bytes `encode` gives): CRC-32, an unsigned int.
checksum: Callable[[bytes], int] = zlib.crc32


def seal(body: bytes) -> bytes:
    """A body (`encode`'s JSON object) as a sealed JSONL line carrying its checksum."""
    return b'%s,"_c":"%08x"}' % (body[:-1], zlib.crc32(body))


def encode_sealed(event: Event) -> bytes:
    """One event as one sealed JSONL line (no trailing newline)."""
    return seal(event.__pydantic_serializer__.to_json(event))


def is_sealed(line: bytes) -> bool:
    """Whether a line ends with a well-formed seal (its checksum is not checked here)."""
    return line[-_SEAL_LEN : -_SEAL_LEN + len(_SEAL_HEAD)] == _SEAL_HEAD and line[-2:] == b'"}'


def holds_seal(data: bytes) -> bool:
    """Whether a well-formed seal occurs anywhere in `data` (a whole event was written)."""
    return _SEAL.search(data) is not None


def unseal(line: bytes, *, strict: bool = False) -> bytes:
    """The body of a JSONL line, its checksum verified; an unsealed line is returned as is.

    Raises `ChecksumError` when the seal does not match the bytes, or, `strict`, when the
    line has no seal.
    """
    if line[-_SEAL_LEN : -_SEAL_LEN + len(_SEAL_HEAD)] == _SEAL_HEAD and line[-2:] == b'"}':
        body = line[:-_SEAL_LEN] + b"}"
        if b"%08x" % zlib.crc32(body) != line[-10:-2]:
            raise ChecksumError("checksum mismatch: the line is not the bytes that were written")
        return body
    if strict:
        raise ChecksumError("the line carries no checksum (strict mode requires one)")
    return line


def strict_mode() -> bool:
    """Whether `require_checksums()` is in force in this context."""
    return _STRICT.get()


@contextlib.contextmanager
def require_checksums(strict: bool = True) -> Iterator[None]:
    """Within the block, every store read refuses an event without a checksum.

    For callers that did not open the store themselves (the CLI's `replay --verify
    --strict`); a store opened with `strict=True` always refuses them.
    """
    token = _STRICT.set(strict)
    try:
        yield
    finally:
        _STRICT.reset(token)


def decode_sealed_prefix(
    lines: Sequence[bytes], *, strict: bool = False, light: bool = False
) -> tuple[list[Event], Exception | None]:
    """`decode_prefix` over sealed (or old, unsealed) JSONL lines, checksums verified.

    With `light`, the lines are decoded on the fast path when every one of them is sealed
    (an old, unsealed line is trusted by no checksum: its batch is validated in full).
    """
    size = _SEAL_LEN
    # The common case, every line sealed and sound, checked a list at a time: the seal
    # each body should carry, made from its checksum, against the seal the line carries
    # (its shape and its digits at once). Any difference and the lines are gone through
    # one by one below, which names the first bad one.
    bodies = [line[:-size] + b"}" for line in lines]
    if [b'%s%08x"}' % (_SEAL_HEAD, crc) for crc in map(zlib.crc32, bodies)] == [
        line[-size:] for line in lines
    ]:
        events, error = decode_prefix(bodies, light=light and not strict)
        return events, error
    bodies = []
    keep = bodies.append
    failure: ChecksumError | None = None
    head = _SEAL_HEAD
    all_sealed = True
    for line in lines:
        if line[-size : -size + 7] == head and line[-2:] == b'"}':
            body = line[:-size] + b"}"
            if b"%08x" % zlib.crc32(body) != line[-10:-2]:
                failure = _mismatch(line)
                break
            keep(body)
        elif strict:
            failure = _unchecked(line)
            break
        else:
            all_sealed = False
            keep(line)
    events, error = decode_prefix(bodies, light=light and all_sealed and not strict)
    return events, failure if error is None else error


def verify_bodies(
    bodies: Sequence[bytes], checksums: Sequence[int | None], *, strict: bool = False
) -> int | None:
    """The index of the first body whose checksum does not match (None when all do).

    A None checksum is an old, unchecked row: it passes, unless `strict`.
    """
    try:
        if None not in checksums and list(map(zlib.crc32, bodies)) == list(checksums):
            return None
    except TypeError:  # a body edited into TEXT (str): its bytes are its UTF-8
        pass
    for index, (body, expected) in enumerate(zip(bodies, checksums, strict=True)):
        if expected is None:
            if strict:
                return index
        elif not isinstance(body, bytes | bytearray | memoryview) or zlib.crc32(body) != expected:
            return index
    return None


def _mismatch(line: bytes) -> ChecksumError:
    stream, seq = _where_bytes(line)
    return ChecksumError(
        "checksum mismatch: the line is not the bytes that were written", stream=stream, seq=seq
    )


def _unchecked(line: bytes) -> ChecksumError:
    stream, seq = _where_bytes(line)
    return ChecksumError(
        "the line carries no checksum (strict mode requires one)", stream=stream, seq=seq
    )


def _where_bytes(line: bytes) -> tuple[str | None, int | None]:
    """Best-effort stream and seq of a line that failed its check (it may be garbage)."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None, None
    return _where(raw) if isinstance(raw, dict) else (None, None)


def decode_lines(lines: Iterable[bytes | str]) -> list[Event]:
    """Decode JSON lines into a list of events (raises the first line's error)."""
    events, error = decode_prefix(lines)
    if error is not None:
        raise error
    return events


def decode_many(lines: Iterable[bytes | str], *, light: bool = False) -> Iterator[Event]:
    """Decode a sequence of JSON lines lazily, `CHUNK` lines at a time.

    Every event before a bad line is yielded before its error is raised. `light` is
    `decode_prefix`'s.
    """
    iterator = iter(lines)
    while True:
        events, error = decode_prefix(itertools.islice(iterator, CHUNK), light=light)
        yield from events
        if error is not None:
            raise error
        if len(events) < CHUNK:
            return


def upcast(raw: dict[str, Any]) -> Event:
    """Validate an event dict, upcasting it first if its `(kind, v)` is older than ours."""
    stream, seq = _where(raw)
    kind, v = raw.get("kind"), raw.get("v")
    target = current_version(kind) if isinstance(kind, str) else None
    if target is None:
        raise UnknownEventError(f"unknown event kind {kind!r}", stream=stream, seq=seq)
    if not isinstance(v, int) or isinstance(v, bool):
        raise EventDecodeError(f"event version {v!r} is not an integer", stream=stream, seq=seq)
    for _ in range(_MAX_UPCASTS):
        if v == target:
            break
        step = UPCASTERS.get((kind, v))
        if step is None:
            raise UnknownEventError(
                f"no upcaster for {kind} v{v} (this library reads {kind} v{target})",
                stream=stream,
                seq=seq,
            )
        raw = step(dict(raw))
        v = raw.get("v")
    declared = DECLARED_EVENTS.get(kind)  # (a declared read's kind: not in the union)
    try:
        if declared is not None:
            return declared.model_validate(raw)  # type: ignore[return-value]
        return EVENT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise EventDecodeError(_summary(exc), stream=stream, seq=seq) from None


def _decode_slow(line: bytes | str, fast_error: ValidationError) -> Event:
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise EventDecodeError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise EventDecodeError(f"a JSON {type(raw).__name__}, not an object") from None
    kind = raw.get("kind")
    if (
        isinstance(kind, str)
        and kind in EVENT_TYPES
        and kind not in DECLARED_EVENTS
        and any(raw.get("v") == v for v in VERSIONS_READ_AS_IS.get(kind, (current_version(kind),)))
    ):
        stream, seq = _where(raw)
        raise EventDecodeError(_summary(fast_error), stream=stream, seq=seq) from None
    return upcast(raw)


@register_upcaster("JobSubmitted", 1)
def _job_submitted_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """v2 records `policy.heartbeat_every_s`; a v1 watch read the heartbeat on every poll.

    The new field's model default (30 s) is the pace of new policies, not what an old log
    was watched with, so an old policy gets None (every poll) and replays as it did. A
    policy that is not an object is left alone for validation to reject.
    """
    policy = raw.get("policy", {})
    if isinstance(policy, dict):
        raw["policy"] = {**policy, "heartbeat_every_s": policy.get("heartbeat_every_s")}
    raw["v"] = 2
    return raw


def _where(raw: dict[str, Any]) -> tuple[str | None, int | None]:
    stream, seq = raw.get("stream"), raw.get("seq")
    return (
        stream[:200] if isinstance(stream, str) else None,
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
    )


def _summary(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    location = ".".join(str(part) for part in first["loc"])
    return f"{location}: {first['msg']}" if location else first["msg"]
