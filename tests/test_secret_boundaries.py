"""No secret survives any cut: every capped outside field, every boundary, every exit.

The acceptance item: a secret planted in `RUNPOD_API_KEY` (a pool of two accounts),
`HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN` and a runtime secret, placed across every cut
boundary of every capped field (wholly before the cut, straddling it at every offset, and
wholly after it), never appears — whole or as any 8-character piece — in an event, CLI
output, a log line or an exception.

How it is shown:

- the capped outside fields are found from the models (`EVENT_TYPES`: every field whose
  metadata carries the masking marker, with its `max_length`), so a new `Outside[...]`
  field is covered without touching this file. Each one is built in Python with texts that
  put a secret (and pieces of it the outside world had already cut: a prefix or a suffix
  of at least 8 characters) at every offset around its cap — the head for `Outside`, the
  tail for `OutsideTail` — and around the pre-cut bound long texts are first trimmed to;
  then with texts of megabytes; then with texts Hypothesis draws. `encode(event)` and
  `event.model_dump_json()` are scanned.
- `poll_job` is driven end to end by a fake RunPod client and fake Hub readers whose every
  text (status errors, stdout, undecodable output, metrics, API errors, heartbeat stages,
  read errors, failure artifacts) carries a secret at its cut; every stored event, every
  progress line, every log record and the `PollResult` are scanned.
- the CLI (`replay`, `explain`, `why-not`, `whatif`, `watch`, `ls`, `timeline`) is run on
  such logs, job, run and sweeper streams alike, and its output is scanned.
- exceptions raised from outside text (`RunpodApiError` on an error answer of the loopback
  simulator, `OutputDecodeError` from `decode_output`, `DeployError`, `EventDecodeError`
  on an over-long stored field) are scanned: `str`, `repr` and the cause chain.

The environment secrets are never registered here: they are masked only because the
environment holds them (`test_the_scanner_sees_what_no_source_masks` shows the difference).

Leaks this module found, each fixed and kept as a regression test: `decode_output` raised
`OutputDecodeError` quoting the worker's text unmasked (`flashfsm.adapters.flash_wire`); a
caller's reader or client was logged by its `repr`, which can hold a token
(`flashfsm.watch.call` now logs the callable's name); and the CLI printed outside text as
rich markup, so tags inside a worker's text could rejoin the pieces of a masked secret (the
CLI's console prints literally, `flashfsm.cli.common.console`).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import string
import traceback
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from annotated_types import MaxLen
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from typer.main import get_command

from flashfsm import (
    DeployError,
    JobHandle,
    MemoryStore,
    OutputDecodeError,
    PollResult,
    RunpodApiError,
    TransientReadError,
    decode_output,
    open_store,
    poll_job,
)
from flashfsm.adapters.runpod import RetryPolicy, RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.cli import app
from flashfsm.events import encode
from flashfsm.events.codec import decode
from flashfsm.events.errors import EventDecodeError
from flashfsm.events.models import (
    ARTIFACT_CAP,
    DETAIL_CAP,
    ERROR_CAP,
    EVENT_TYPES,
    MESSAGE_CAP,
    NAME_CAP,
    STDOUT_CAP,
    Candidate,
    EventBase,
)
from flashfsm.events.text import MASK, PRECUT_MARGIN, _Masked, register_secrets, secret_values
from flashfsm.fsm.rules import RULE_NAMES
from tests.conftest import VirtualClock

# --- the planted secrets ------------------------------------------------------------------

_RNG = random.Random(0x5EC12E7)
_BASE32 = string.ascii_uppercase + "234567"
_ALNUM = string.ascii_letters + string.digits


def _token(prefix: str, alphabet: str, length: int) -> str:
    """A realistic credential: a vendor prefix and `length` random characters."""
    return prefix + "".join(_RNG.choice(alphabet) for _ in range(length))


#: Two RunPod accounts (a key pool), two Hugging Face tokens and a runtime secret (the
#: kind `submit_run(runtime_secrets=...)` registers), each of a realistic shape and length.
RUNPOD_POOL = (_token("rpa_", _BASE32, 40), _token("rpa_", _BASE32, 40))
HF_TOKEN = _token("hf_", string.ascii_letters, 34)
HUB_TOKEN = _token("hf_", string.ascii_letters, 34)
RUNTIME_SECRET = _token("wandb_", _ALNUM, 24)
SECRETS: dict[str, str] = {
    "RUNPOD_API_KEY[0]": RUNPOD_POOL[0],
    "RUNPOD_API_KEY[1]": RUNPOD_POOL[1],
    "HF_TOKEN": HF_TOKEN,
    "HUGGING_FACE_HUB_TOKEN": HUB_TOKEN,
    "runtime": RUNTIME_SECRET,
}
#: A piece of a secret this long must never be seen (what `flashfsm.events.text` masks).
PIECE = 8
_PIECES: dict[str, frozenset[str]] = {
    name: frozenset(s[i : i + PIECE] for i in range(len(s) - PIECE + 1))
    for name, s in SECRETS.items()
}
#: Every 8-character piece of a secret holds one of its aligned 4-character blocks whole,
#: so the scanner looks for those few blocks and checks the windows around each hit.
_BLOCK = PIECE // 2
_BLOCKS: dict[str, tuple[str, ...]] = {
    name: tuple(s[i : i + _BLOCK] for i in range(0, len(s) - _BLOCK + 1, _BLOCK))
    for name, s in SECRETS.items()
}
#: Ordinary text around the secrets: every 8-character window holds a space, `=`, `.` or
#: `|`, none of which any secret holds, so the filler never looks like a piece of one.
FILLER = "step 41 loss=0.1234 | "


def leaks(text: str | bytes) -> list[str]:
    """Each planted secret found in `text`, whole or as an 8-character piece (and which)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    found = []
    for name, secret in SECRETS.items():
        if secret in text:
            found.append(f"{name}: whole")
            continue
        piece = _first_piece(text, name)
        if piece is not None:
            at = secret.index(piece)
            found.append(f"{name}: piece {piece!r} (characters {at}-{at + PIECE})")
    return found


def _first_piece(text: str, name: str) -> str | None:
    """An 8-character piece of secret `name` in `text`, or None."""
    pieces = _PIECES[name]
    for block in _BLOCKS[name]:
        at = text.find(block)
        while at != -1:
            for start in range(max(0, at - PIECE + _BLOCK), at + 1):
                if text[start : start + PIECE] in pieces:
                    return text[start : start + PIECE]
            at = text.find(block, at + 1)
    return None


def assert_clean(texts: dict[str, str | bytes] | Sequence[str | bytes], what: str) -> None:
    """Fail naming every text (and the secret piece) that leaks."""
    items = texts.items() if isinstance(texts, dict) else enumerate(texts)
    bad = {where: found for where, text in items if (found := leaks(text))}
    assert not bad, f"{what}: secrets leak: {bad}"


@pytest.fixture(autouse=True)
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment holds the keys; the runtime secret is registered (as `submit_run` does)."""
    _plant(monkeypatch)


def _plant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", f"{RUNPOD_POOL[0]}, {RUNPOD_POOL[1]}")
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", HUB_TOKEN)
    register_secrets(RUNTIME_SECRET)


# --- texts with a secret at a cut -----------------------------------------------------------


def filler(n: int) -> str:
    """`n` characters of ordinary text."""
    if n <= 0:
        return ""
    return (FILLER * (n // len(FILLER) + 1))[:n]


def plant(piece: str, at: int, total: int) -> str:
    """`total` characters of filler with `piece` starting at `at` (clamped to fit)."""
    at = max(0, min(at, total - len(piece)))
    return filler(at) + piece + filler(total - at - len(piece))


def boundary_offsets(length: int, *, every: bool = True) -> list[int]:
    """Where a `length`-character piece starts, relative to a cut at 0.

    Wholly before the cut (ending at it, and one character earlier), straddling it (every
    offset, or the telling ones: those that leave 1, 7, 8 or 9 characters on either side,
    and half), and wholly after it (starting at it, and one character later).
    """
    if every:
        straddling = list(range(-length + 1, 0))
    else:
        picks = {1, 7, 8, 9, length // 2, length - 9, length - 8, length - 7, length - 1}
        straddling = sorted(-k for k in picks if 0 < k < length)
    return [-length - 1, -length, *straddling, 0, 1]


def cut_pieces(secret: str) -> dict[str, str]:
    """The secret whole, and as the outside world may already have cut it (>= 8 chars)."""
    half = len(secret) // 2
    return {
        "whole": secret,
        "prefix8": secret[:PIECE],
        "prefix-half": secret[:half],
        "prefix-all-but-1": secret[:-1],
        "suffix8": secret[-PIECE:],
        "suffix-half": secret[half:],
        "suffix-all-but-1": secret[1:],
    }


# --- every capped outside field, from the models --------------------------------------------


@dataclass(frozen=True)
class OutsideField:
    """One capped outside text field of one event model."""

    model: type[EventBase]
    name: str
    cap: int
    tail: bool

    def __str__(self) -> str:
        return f"{self.model.__name__}.{self.name}[{'tail' if self.tail else 'head'} {self.cap}]"

    def build(self, text: str) -> EventBase:
        """The event built in Python with `text` in this field (the rest minimal)."""
        return self.model(**{**minimal_fields(self.model), self.name: text})

    def cut(self, total: int) -> int:
        """Where the cap cuts a `total`-character text that it masks first."""
        return total - self.cap if self.tail else self.cap

    def precut(self, total: int) -> int:
        """Where a long text is trimmed before masking (twice the cap and a margin)."""
        bound = 2 * self.cap + PRECUT_MARGIN
        return total - bound if self.tail else bound


def _metadata(annotation: Any, meta: Sequence[Any] = ()) -> list[Any]:
    """Every metadata item of a field: its own, and those inside `Annotated` / unions."""
    found: list[Any] = []
    for item in meta:
        found.append(item)
        if isinstance(item, FieldInfo):
            found += _metadata(item.annotation, item.metadata)
    if typing.get_origin(annotation) is Annotated:
        found += _metadata(typing.get_args(annotation)[0], annotation.__metadata__)
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found += _metadata(arg)
    return found


def outside_fields(model: type[BaseModel]) -> list[tuple[str, int, bool]]:
    """(name, cap, tail) of each field of `model` that masks then caps outside text."""
    out = []
    for name, info in model.model_fields.items():
        meta = _metadata(info.annotation, info.metadata)
        marks = [m for m in meta if isinstance(m, _Masked)]
        if not marks:
            continue
        caps = {m.max_length for m in meta if isinstance(m, MaxLen)}
        assert caps == {marks[0].limit}, f"{model.__name__}.{name}: max_length {caps}"
        out.append((name, marks[0].limit, marks[0].tail))
    return out


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        for info in annotation.model_fields.values():
            yield from _nested_models(info.annotation)
    for arg in typing.get_args(annotation):
        yield from _nested_models(arg)


def minimal_value(annotation: Any) -> Any:
    """A valid value of a required field's type (for a field this test does not vary)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return minimal_value(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return minimal_value(next(a for a in typing.get_args(annotation) if a is not type(None)))
    if origin is Literal:
        return typing.get_args(annotation)[0]
    if origin is tuple:
        return ()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation(**minimal_fields(annotation))
    simple = {str: "x", bool: False, int: 0, float: 1.0}
    if annotation in simple:
        return simple[annotation]
    raise TypeError(f"no minimal value for {annotation!r}: teach minimal_value this type")


def minimal_fields(model: type[BaseModel]) -> dict[str, Any]:
    """A value for every required field of `model`."""
    return {
        name: minimal_value(info.annotation)
        for name, info in model.model_fields.items()
        if info.is_required()
    }


OUTSIDE_FIELDS: tuple[OutsideField, ...] = tuple(
    OutsideField(model, name, cap, tail)
    for model in EVENT_TYPES.values()
    for name, cap, tail in outside_fields(model)
)


def built_texts(event: EventBase) -> dict[str, str]:
    """What a built event is written and shown as."""
    encoded = encode(event).decode()
    dumped = event.model_dump_json()
    return {"encode": encoded} if dumped == encoded else {"encode": encoded, "dump": dumped}


def check_field(f: OutsideField, text: str, what: str) -> EventBase:
    """Build `f` from `text`; fail if a secret piece survives, or the cap is not kept."""
    event = f.build(text)
    kept = getattr(event, f.name)
    assert len(kept) <= f.cap, f"{f} {what}: {len(kept)} characters kept"
    texts = built_texts(event)
    bad = {where: found for where, t in texts.items() if (found := leaks(t))}
    assert not bad, f"{f} {what}: {bad}"
    return event


def test_the_models_declare_the_capped_outside_fields_this_module_walks() -> None:
    """The walk finds every kind of outside field, top-level only (nested ones would be missed)."""
    names = {str(f).split("[")[0] for f in OUTSIDE_FIELDS}
    assert len(OUTSIDE_FIELDS) >= 20
    assert {
        "StatusObserved.error",
        "StatusObserved.stdout_tail",
        "StatusFetchFailed.message",
        "HeartbeatObserved.stage",
        "FailureDetailObserved.text",
        "Concluded.detail",
        "IdleSeen.endpoint_name",
    } <= names
    assert {f.tail for f in OUTSIDE_FIELDS} == {True, False}
    for model in EVENT_TYPES.values():
        for info in model.model_fields.values():
            for nested in _nested_models(info.annotation):
                assert not outside_fields(nested), f"{nested.__name__} nests an outside field"


def test_the_scanner_sees_what_no_source_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the environment, an environment secret stays (the scanner finds it); with it,
    the same event is masked: the masking in this module comes from the environment."""
    text = plant(HF_TOKEN, 100, 300)
    for name in ("RUNPOD_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name)
    assert HF_TOKEN not in secret_values()
    error = next(f for f in OUTSIDE_FIELDS if str(f).startswith("StatusObserved.error"))
    assert leaks(encode(error.build(text))) == ["HF_TOKEN: whole"]
    assert leaks(HF_TOKEN[5:13]) == [f"HF_TOKEN: piece {HF_TOKEN[5:13]!r} (characters 5-13)"]
    _plant(monkeypatch)
    assert {*RUNPOD_POOL, HF_TOKEN, HUB_TOKEN, RUNTIME_SECRET} <= set(secret_values())
    assert MASK in check_field(error, text, "env set").error


@pytest.mark.parametrize("f", OUTSIDE_FIELDS, ids=str)
def test_no_secret_survives_any_offset_across_the_cap_of_an_outside_field(
    f: OutsideField,
) -> None:
    """Each secret, whole, at every offset across the cap, and cut pieces at the telling ones."""
    for name, secret in SECRETS.items():
        for kind, piece in cut_pieces(secret).items():
            total = f.cap + 2 * len(piece) + 40
            if kind == "whole":
                offsets = boundary_offsets(len(piece))
            else:  # a cut piece: wholly out, one character in, half in, all but one in
                offsets = [-len(piece), -len(piece) + 1, -(len(piece) // 2), -1, 0]
            for offset in offsets:
                at = f.cut(total) + offset
                check_field(f, plant(piece, at, total), f"{name} {kind} at cut{offset:+d}")


@pytest.mark.parametrize("f", OUTSIDE_FIELDS, ids=str)
def test_no_secret_survives_the_precut_of_a_long_text_even_when_masking_shrinks_it(
    f: OutsideField,
) -> None:
    """Texts longer than the pre-cut bound: a secret across that bound, alone in filler, or
    after secrets packed back to back (masking shrinks them, so what was beyond the cap
    moves into the kept part)."""
    for name, secret in SECRETS.items():
        length = len(secret)
        total = 2 * f.cap + PRECUT_MARGIN + 4 * length
        for offset in boundary_offsets(length, every=False):
            at = f.precut(total) + offset
            check_field(f, plant(secret, at, total), f"{name} alone at precut{offset:+d}")
            packed = filler(at % length) + secret * (total // length + 1)
            check_field(f, packed[:total], f"{name} packed, one across precut{offset:+d}")


@pytest.mark.parametrize("f", OUTSIDE_FIELDS, ids=str)
def test_no_secret_survives_an_outside_text_of_megabytes(f: OutsideField) -> None:
    """Two megabytes with each secret sprinkled through it and on both of its cuts."""
    total = 2_000_000
    for name, secret in SECRETS.items():
        length = len(secret)
        chunks = [filler(997 - length) + secret for _ in range(total // 997)]
        text = "".join(chunks)
        for cut in (f.cut(len(text)), f.precut(len(text))):
            at = max(0, cut - length // 2)
            text = text[:at] + secret + text[at + length :]
        text = secret[-PIECE - 3 :] + text + secret[: PIECE + 3]  # halves cut by the world
        event = check_field(f, text, f"{name} in {len(text)} characters")
        assert MASK in getattr(event, f.name)


_SECRET_OR_PIECE = st.sampled_from(list(SECRETS.values())).flatmap(
    lambda s: st.tuples(st.integers(0, len(s) - PIECE), st.integers(PIECE, len(s))).map(
        lambda ij: s[ij[0] : max(ij[1], ij[0] + PIECE)]
    )
)


@given(
    f=st.sampled_from(OUTSIDE_FIELDS),
    piece=_SECRET_OR_PIECE,
    offset=st.integers(-60, 60),
    extra=st.integers(0, 3 * DETAIL_CAP),
    lead=st.text(max_size=40),
    copies=st.integers(0, 3),
)
def test_no_secret_piece_survives_any_cut_of_any_outside_field(
    f: OutsideField, piece: str, offset: int, extra: int, lead: str, copies: int
) -> None:
    """Any piece (>= 8 characters) of any secret, at any offset near the cap of any outside
    field, after any text and after more copies of it (which masking shrinks), is masked."""
    prefix = lead + piece * copies
    total = len(prefix) + f.cap + len(piece) + extra
    body = plant(piece, f.cut(total) + offset - len(prefix), total - len(prefix))
    check_field(f, prefix + body, f"{piece!r} at cut{offset:+d} of {total} characters")


# --- end to end: poll_job --------------------------------------------------------------------

ENDINGS = (
    "failed",
    "failed_output_only",
    "timed_out_error_object",
    "completed_with_error",
    "completed_envelope_failure",
    "completed_not_json",
    "completed_metrics",
    "poll_errors",
    "lost",
)
#: Where a secret stands relative to each cut in the end-to-end runs.
OFFSETS = ("before", "across_first", "across_mid", "across_last", "after")


def offset_for(kind: str, length: int) -> int:
    """The start of a `length`-character secret relative to a cut, for an offset kind."""
    return {
        "before": -length,
        "across_first": -length + 1,
        "across_mid": -(length // 2),
        "across_last": -1,
        "after": 0,
    }[kind]


@dataclass(repr=False)
class PlantedJob:
    """A RunPod job and its worker whose every outside text carries `secret` at a cut.

    `job_status` answers IN_QUEUE, fails once, answers a status nobody documented, then
    IN_PROGRESS twice, then the `ending`; `endpoint_health` always raises; the heartbeat
    reader reports stages, and its forced read fails twice (two error classes) before it
    answers; the failure-detail reader returns an artifact of several thousand characters.
    """

    ending: str
    secret: str
    offset: int
    megabytes: bool = False
    statuses: int = 0
    probes: int = 0
    forced: int = 0
    steps: int = 0
    extra_at: tuple[int, ...] = ()

    def __repr__(self) -> str:
        """Like a real client's: what it is, never what it holds (a repr that holds a
        secret is the known leak `test_a_failing_reader_or_client_is_logged_...` shows)."""
        return f"PlantedJob({self.ending!r})"

    def text(self, cap: int, *, tail: bool = False, shift: int = 0, big: bool = False) -> str:
        """Filler with the secret at `offset` from the cut `cap` makes (`shift`: characters
        the pipeline puts before this text), long enough for the cut to be made; with
        `megabytes`, a `big` text is two megabytes with the secret every 50,000 characters."""
        if big and self.megabytes:
            step, length = 50_000, len(self.secret)
            total = 40 * step
            text = "".join(filler(step - length) + self.secret for _ in range(total // step))
        else:
            total = cap + 2 * len(self.secret) + 64
            text = filler(total)
        cut = total - cap if tail else cap - shift
        for at in (cut + self.offset, *self.extra_at):  # extra: where the CLI cuts its lines
            at = max(0, min(at, total - len(self.secret)))
            text = text[:at] + self.secret + text[at + len(self.secret) :]
        return text

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.statuses += 1
        n = self.statuses
        if self.ending in ("poll_errors", "lost") and n >= 4:
            code = 404 if self.ending == "lost" else 500
            raise RunpodApiError(self.text(MESSAGE_CAP), status_code=code, route="status")
        if n == 1:
            return {"status": "IN_QUEUE"}
        if n == 2:
            raise RunpodApiError(self.text(MESSAGE_CAP), status_code=502, route="status")
        if n == 3:
            return {"status": self.text(NAME_CAP)}
        if n <= 5:
            return {"status": "IN_PROGRESS"}
        return self.final()

    def final(self) -> dict[str, Any]:
        """The terminal answer of the job's `ending`."""
        match self.ending:
            case "failed":
                stdout = self.text(STDOUT_CAP, tail=True, big=True)
                return {
                    "status": "FAILED",
                    "error": self.text(ERROR_CAP, big=True),
                    "output": {"stdout": stdout},
                }
            case "failed_output_only":  # recorded as the output's JSON text, after a quote
                return {"status": "FAILED", "output": self.text(ERROR_CAP, shift=1)}
            case "timed_out_error_object":  # an error that is an object: its JSON text
                error = {"message": self.text(ERROR_CAP, shift=len('{"message": "'))}
                return {"status": "TIMED_OUT", "error": error}
            case "completed_with_error":  # a worker error in the output (flash_wire's caps)
                output = {
                    "error": self.text(1500, big=True),
                    "stdout": self.text(1500, tail=True, big=True),
                }
                return {"status": "COMPLETED", "output": output}
            case "completed_envelope_failure":
                output = {
                    "success": False,
                    "error": self.text(1500),
                    "stdout": self.text(1500, tail=True),
                }
                return {"status": "COMPLETED", "output": output}
            case "completed_not_json":  # the message quotes its first 200 characters
                return {"status": "COMPLETED", "output": self.text(200)}
            case "completed_metrics":
                output = {
                    "loss": 0.25,
                    "note": self.text(NAME_CAP),
                    self.text(NAME_CAP): 1,
                    "nested": {"log": [self.text(ERROR_CAP)], "ok": True},
                }
                return {"status": "COMPLETED", "output": output}
        raise AssertionError(self.ending)

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        self.probes += 1
        if self.probes % 2:
            raise RunpodApiError(self.text(MESSAGE_CAP), status_code=503, route="health")
        raise ConnectionError(self.text(MESSAGE_CAP))

    def heartbeat(self, force: bool = False) -> dict[str, Any]:
        if force:
            self.forced += 1
            if self.forced == 1:  # recorded as "TransientReadError HTTP 503: <message>"
                raise TransientReadError(self.text(MESSAGE_CAP), status_code=503)
            if self.forced == 2:  # "TimeoutError: <message>", cut at MESSAGE_CAP in all
                raise TimeoutError(self.text(MESSAGE_CAP, shift=len("TimeoutError: ")))
        self.steps += 1
        return {"stage": self.text(NAME_CAP), "step": self.steps, "retriable": False}

    def failure_detail(self, force: bool = False) -> str:
        return self.text(ARTIFACT_CAP, tail=True, big=True)


EXPECTED = {
    "failed": ("FAILED", "worker_failed"),
    "failed_output_only": ("FAILED", "worker_failed"),
    "timed_out_error_object": ("PREEMPTED", "platform_termination"),
    "completed_with_error": ("FAILED", "completed_with_error"),
    "completed_envelope_failure": ("FAILED", "completed_with_error"),
    "completed_not_json": ("FAILED", "completed_with_error"),
    "completed_metrics": ("SUCCEEDED", "completed"),
    "poll_errors": ("POLL_ERROR", "poll_errors"),
    "lost": ("LOST", "job_lost"),
}


@dataclass
class Watched:
    """What one planted watch produced, to scan."""

    result: PollResult
    events: list[EventBase]
    lines: list[str] = field(default_factory=list)


def watch_planted(job: PlantedJob, store: Any, stream: str) -> Watched:
    """Run `poll_job` over a planted job to its verdict."""
    clock = VirtualClock()
    lines: list[str] = []
    result = poll_job(
        JobHandle("ep-planted", "flash-planted", stream.removeprefix("job-"), submitted_at=clock()),
        log=lines.append,
        interval_s=10.0,
        heartbeat_reader=job.heartbeat,
        failure_detail_reader=job.failure_detail,
        heartbeat_every_s=None,
        client=job,
        clock=clock,
        sleep=clock.sleep,
        store=store,
        stream=stream,
    )
    return Watched(result, store.read(stream), lines)


def scan_watch(watched: Watched, caplog: pytest.LogCaptureFixture, what: str) -> None:
    """Every stored event (as written and re-encoded), progress line, log record and the
    result of one watch: no secret piece in any of them."""
    texts: dict[str, str | bytes] = {}
    for event in watched.events:
        for how, text in built_texts(event).items():
            texts[f"event {event.seq} {event.kind} {how}"] = text
    texts |= {f"progress line {i}": line for i, line in enumerate(watched.lines)}
    for i, record in enumerate(caplog.records):
        rendered = caplog.handler.format(record) + (record.exc_text or "")
        texts[f"log record {i} ({record.name})"] = rendered + str(record.args) + str(record.msg)
    result = watched.result
    texts["result.detail"] = result.detail or ""
    texts["result"] = repr(result) + json.dumps(result.metrics)
    assert_clean(texts, what)


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("secret_name", list(SECRETS))
def test_poll_job_records_logs_and_returns_no_secret_from_any_outside_text(
    ending: str, secret_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A watch whose every outside text carries a secret before, across or after its cut."""
    caplog.set_level(logging.DEBUG)
    secret = SECRETS[secret_name]
    for kind in OFFSETS:
        caplog.clear()
        job = PlantedJob(ending, secret, offset_for(kind, len(secret)))
        watched = watch_planted(job, MemoryStore(), "job-planted")
        assert (watched.result.state, watched.result.rule) == EXPECTED[ending], watched.result
        kinds = {e.kind for e in watched.events}
        assert {"HealthProbeFailed", "StatusFetchFailed", "HeartbeatObserved"} <= kinds
        assert watched.events[-1].kind == "Concluded"
        if kind in ("before", "across_first", "across_mid"):  # the mask is kept whole
            assert any(MASK in encode(e).decode() for e in watched.events)
        scan_watch(watched, caplog, f"{ending} with {secret_name} {kind} the cut")


@pytest.mark.parametrize(
    ("secret_name", "ending"),
    [
        ("RUNPOD_API_KEY[1]", "failed"),
        ("HF_TOKEN", "completed_with_error"),
        ("runtime", "failed"),
    ],
)
def test_poll_job_masks_secrets_all_through_megabytes_of_worker_output(
    secret_name: str, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two-megabyte errors, stdout and artifacts, the secret all through them and at the cut."""
    caplog.set_level(logging.DEBUG)
    secret = SECRETS[secret_name]
    job = PlantedJob(ending, secret, -len(secret) // 2, megabytes=True)
    watched = watch_planted(job, MemoryStore(), "job-megabytes")
    assert any(MASK in encode(e).decode() for e in watched.events)
    scan_watch(watched, caplog, f"{ending} with megabytes of {secret_name}")


# --- the CLI ---------------------------------------------------------------------------------

#: The CLI as typer builds it, built once: typer's own `CliRunner` rebuilds the click command
#: on every call (~50 ms), and this module runs the CLI a few hundred times.
COMMAND = get_command(app)
#: Wide enough that rich never wraps or folds a table cell: a secret split across lines
#: would slip past the scanner.
runner = CliRunner(env={"COLUMNS": "100000"})
#: Where the CLI cuts a line of its own (a summary's first 80 characters): a copy of the
#: secret straddles it as well.
CLI_CUTS = (3, 80 - 20)


def _event(cls: type[EventBase], stream: str, seq: int, **fields: Any) -> EventBase:
    base = {"stream": stream, "seq": seq, "id": f"{stream}-{seq}", "at": 1_000_000.0 + seq}
    return cls(**{**base, **fields})


def run_and_sweeper_events(job_stream: str, secret: str, offset: int) -> dict[str, list[Any]]:
    """A run stream (a deploy refused, a failover, a failed submit, an attempt ended, a
    cancel, the run's result) and a sweeper stream, every outside text planted."""

    def text(cap: int) -> str:
        total = cap + 2 * len(secret) + 64
        body = plant(secret, cap + offset, total)
        for at in CLI_CUTS:
            body = body[:at] + secret + body[at + len(secret) :]
        return body

    e = EVENT_TYPES
    run = "run-planted"
    gpu = {"candidate": 0, "provider": "runpod", "gpu_class": "L40S"}
    rows: list[tuple[str, dict[str, Any]]] = [
        ("RunStarted", {"run_id": "planted", "candidates": (Candidate(gpu_class="L40S"),)}),
        # attempt 0: the quota refuses the deploy on one account, then the deploy fails
        ("AttemptStarted", {"attempt": 0, **gpu}),
        ("DeployAttempted", {"attempt": 0, "account": 0, "endpoint_name": "flash-0"}),
        ("QuotaExhausted", {"attempt": 0, "account": 0, "message": text(MESSAGE_CAP)}),
        ("AccountFailedOver", {"attempt": 0, "from_account": 0, "to_account": 1}),
        (
            "DeployFailed",
            {"attempt": 0, "error_class": text(NAME_CAP), "message": text(MESSAGE_CAP)},
        ),
        (
            "AttemptEnded",
            {"attempt": 0, "ok": False, "failure": "poll_error", "detail": text(DETAIL_CAP)},
        ),
        # attempt 1: deployed, the submit fails
        ("AttemptStarted", {"attempt": 1, **gpu}),
        ("EndpointDeployed", {"attempt": 1, "endpoint_id": "ep-1", "endpoint_name": "flash-1"}),
        (
            "SubmitFailed",
            {"attempt": 1, "error_class": text(NAME_CAP), "message": text(MESSAGE_CAP)},
        ),
        ("EndpointDeleted", {"endpoint_id": "ep-1", "reason": "submit failed"}),
        (
            "AttemptEnded",
            {"attempt": 1, "ok": False, "failure": "poll_error", "detail": text(DETAIL_CAP)},
        ),
        # attempt 2: the job is watched in `job_stream`; the user cancels the run
        ("AttemptStarted", {"attempt": 2, **gpu}),
        ("EndpointDeployed", {"attempt": 2, "endpoint_id": "ep-2", "endpoint_name": "flash-2"}),
        (
            "JobQueued",
            {
                "attempt": 2,
                "endpoint_id": "ep-2",
                "job_id": job_stream.removeprefix("job-"),
                "job_stream": job_stream,
                "submitted_at": 1_000_000.0,
            },
        ),
        ("CancelRequested", {"by": text(NAME_CAP), "reason": text(MESSAGE_CAP)}),
        (
            "AttemptEnded",
            {"attempt": 2, "ok": False, "failure": "cancelled", "detail": text(DETAIL_CAP)},
        ),
        (
            "RunConcluded",
            {"ok": False, "failure": "cancelled", "attempts": 3, "detail": text(DETAIL_CAP)},
        ),
    ]
    sweeper = "sweeper-planted"
    sweeps: list[tuple[str, dict[str, Any]]] = [
        ("IdleSeen", {"endpoint_id": "ep-idle", "endpoint_name": text(NAME_CAP), "since": 1.0}),
        ("EndpointReaped", {"endpoint_id": "ep-idle", "endpoint_name": text(NAME_CAP)}),
    ]
    return {
        run: [_event(e[kind], run, i, **fields) for i, (kind, fields) in enumerate(rows)],
        sweeper: [_event(e[kind], sweeper, i, **fields) for i, (kind, fields) in enumerate(sweeps)],
    }


@pytest.fixture(scope="module")
def planted_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], list[str]]:
    """A SQLite store of planted logs: a job stream per ending (each with another secret
    and offset, and copies across the CLI's own cuts), a run and a sweeper stream."""
    url = f"sqlite:///{tmp_path_factory.mktemp('planted')}/events.db"
    store = open_store(url)
    jobs: list[str] = []
    names = list(SECRETS)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _plant(monkeypatch)
        for i, ending in enumerate(ENDINGS):
            secret = SECRETS[names[i % len(names)]]
            offset = offset_for(OFFSETS[i % len(OFFSETS)], len(secret))
            job = PlantedJob(ending, secret, offset, extra_at=CLI_CUTS)
            jobs.append(f"job-{ending.replace('_', '-')}")
            watch_planted(job, store, jobs[-1])
        others = run_and_sweeper_events(jobs[0], HF_TOKEN, -len(HF_TOKEN) // 2)
        for stream, events in others.items():
            store.append(stream, events, 0)
    store.close()
    return url, jobs, list(others)


def cli(*args: str, out: list[str]) -> None:
    """Run one CLI command; keep its output (it may exit non-zero, never crash)."""
    result = runner.invoke(COMMAND, list(args), prog_name="flashfsm")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        "".join(traceback.format_exception(result.exception)),
    )
    out.append(f"$ flashfsm {' '.join(args)}\n{result.output}")


def test_the_cli_prints_no_secret_from_any_planted_log(
    planted_store: tuple[str, list[str], list[str]], tmp_path: Path
) -> None:
    """`replay`, `explain`, `why-not` (every rule), `whatif`, `watch`, `timeline` and `ls`,
    plain and `--json`, on job, run and sweeper streams."""
    url, jobs, others = planted_store
    printed: list[str] = []
    store = ["--store", url]
    for stream in [*jobs, *others]:
        for command in (
            ["replay", stream],
            ["replay", stream, "--full"],
            ["replay", stream, "--json", "--verify"],
            ["explain", stream],
            ["explain", stream, "--json"],
            ["whatif", stream, "--set", "queue_grace_s=100"],
            ["whatif", stream, "--set", "queue_grace_s=100", "--json"],
            ["watch", stream, "--json"],
            ["watch", stream],
        ):
            cli(*command, *store, out=printed)
        for suffix in (".svg", ".html"):
            picture = tmp_path / f"{stream}{suffix}"
            cli("timeline", stream, "--out", str(picture), "--json", *store, out=printed)
            if picture.exists():
                printed.append(picture.read_text(encoding="utf-8"))
    for stream in jobs:
        for rule in RULE_NAMES:
            cli("why-not", stream, rule, *store, out=printed)
        cli("why-not", stream, RULE_NAMES[-1], "--json", *store, out=printed)
    cli("ls", *store, out=printed)
    cli("ls", "--json", *store, out=printed)
    shown = "\n".join(printed)
    assert MASK in shown and "detail" in shown  # the planted texts were printed, masked
    assert_clean({text.split("\n", 1)[0]: text for text in printed}, "CLI output")


def test_a_jsonl_file_given_to_the_cli_prints_no_secret(
    planted_store: tuple[str, list[str], list[str]], tmp_path: Path
) -> None:
    """The same logs exported to JSONL files, read by path."""
    url, jobs, _ = planted_store
    printed: list[str] = []
    cli("export", *jobs, "--to", f"jsonl:///{tmp_path}", "--store", url, out=printed)
    for path in sorted(tmp_path.glob("*.jsonl")):
        printed.append(path.read_text(encoding="utf-8"))
        cli("replay", str(path), "--full", out=printed)
        cli("explain", str(path), "--json", out=printed)
    assert len(printed) > 2 * len(jobs)
    assert_clean({text.split("\n", 1)[0]: text for text in printed}, "JSONL files and CLI output")


# --- exceptions ------------------------------------------------------------------------------


def exception_texts(exc: BaseException) -> dict[str, str]:
    """`str`, `repr`, args and traceback of an exception and of every exception it chains."""
    texts = {"traceback": "".join(traceback.format_exception(exc))}
    seen: BaseException | None = exc
    depth = 0
    while seen is not None and depth < 10:
        texts[f"{depth} str"] = str(seen)
        texts[f"{depth} repr"] = repr(seen)
        texts[f"{depth} args"] = repr(seen.args)
        # the chain Python shows: a cause, else a context not suppressed by `from None`
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
        depth += 1
    return texts


SIM_KEY = "sim-key-not-a-planted-secret"


def test_runpod_api_errors_from_answers_carrying_secrets_hold_none() -> None:
    """Error answers of the loopback simulator whose bodies carry a secret across the
    client's detail cut (300 characters), as JSON `error` / `detail` or plain text."""
    from flashfsm.adapters import runpod_protocol

    cap = runpod_protocol._DETAIL_CAP
    errors: list[BaseException] = []
    with Simulator(speed=0, api_keys=(SIM_KEY,)) as sim:
        client = RunpodClient(
            SIM_KEY,
            endpoint_base_url=f"{sim.url}/v2",
            api_base_url=sim.url,
            retry=RetryPolicy(attempts=1),
        )
        with client:
            for secret in SECRETS.values():
                for offset in boundary_offsets(len(secret), every=False):
                    text = plant(secret, cap + offset, cap + 2 * len(secret) + 40)
                    for status, body in (
                        (400, {"error": text}),
                        (422, {"detail": text, "title": "Unprocessable"}),
                        (500, text),
                        (401, {"message": f"Authorization: Bearer {text}"}),
                    ):
                        sim.add_fault("health", status, body=body)
                        with pytest.raises(RunpodApiError) as caught:
                            client.endpoint_health("ep-planted")
                        errors.append(caught.value)
                        sim.clear_faults()
    assert len(errors) > 100 and any(MASK in str(e) for e in errors)
    for exc in errors:
        assert_clean(exception_texts(exc), f"RunpodApiError {exc.status_code}")  # type: ignore[attr-defined]


@pytest.mark.parametrize("secret_name", list(SECRETS))
def test_decode_output_errors_quote_worker_text_without_its_secrets(secret_name: str) -> None:
    """`decode_output` (public) raises `OutputDecodeError` quoting what the worker wrote: its
    error (cut at 1500), its stdout tail (1500) or its non-JSON output (200 quoted)."""
    secret = SECRETS[secret_name]
    errors: list[OutputDecodeError] = []
    for offset in boundary_offsets(len(secret), every=False):
        total = 1500 + 2 * len(secret) + 40
        head = plant(secret, 1500 + offset, total)
        tail = plant(secret, total - 1500 + offset, total)
        for output in (
            {"error": head, "stdout": tail},
            {"success": False, "error": head, "stdout": tail},
            plant(secret, 200 + offset, 400),
            {"error": plant(secret, 3 + max(offset, 0), 100)},
        ):
            with pytest.raises(OutputDecodeError) as caught:
                decode_output(output)
            errors.append(caught.value)
    for exc in errors:
        assert_clean(exception_texts(exc), "OutputDecodeError")


def test_a_deploy_error_built_from_outside_text_holds_no_secret() -> None:
    """`DeployError` (what `submit_run` raises) masks the message it is given."""
    for secret in SECRETS.values():
        exc = DeployError(f"deploy flash-x: GraphQL said: {plant(secret, 20, 400)}")
        assert MASK in str(exc)
        assert_clean(exception_texts(exc), "DeployError")


def test_a_stored_field_over_its_cap_is_refused_without_echoing_it() -> None:
    """A stored line whose outside field is one character over its cap (a secret across
    the cut) is an `EventDecodeError` that names the field, not its text."""
    for f in OUTSIDE_FIELDS:
        event = f.build("ok")
        raw = json.loads(encode(event))
        for secret in SECRETS.values():
            raw[f.name] = plant(secret, f.cap - len(secret) // 2, f.cap + 1)
            with pytest.raises(EventDecodeError) as caught:
                decode(json.dumps(raw))
            assert f.name in str(caught.value)
            assert_clean(exception_texts(caught.value), f"decoding {f}")


# --- known leaks, outside the files this change may touch ---------------------------------


@dataclass
class KeyedClient:
    """A caller's own RunPod client holding its key, with a dataclass's default repr: the
    job runs for a while, then every status fetch fails."""

    api_key: str
    calls: int = 0

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= 3:
            return {"status": "IN_PROGRESS"}
        raise RunpodApiError("status route answered 502", status_code=502, route="status")

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return {}


HEARTBEAT_READS: list[bool] = []


def read_heartbeat(force: bool = False, *, token: str) -> dict[str, Any]:
    """A heartbeat reader a caller binds its Hub token to, that fails like the Hub may."""
    HEARTBEAT_READS.append(force)
    raise TransientReadError("hub read failed: HTTPError", status_code=503)


def test_a_failing_reader_or_client_is_logged_without_the_secrets_its_repr_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The log line for a raising heartbeat reader or client names it, never its token."""
    caplog.set_level(logging.DEBUG)
    clock = VirtualClock()
    client = KeyedClient(RUNPOD_POOL[1])
    HEARTBEAT_READS.clear()
    result = poll_job(
        JobHandle("ep-keyed", "flash-keyed", "job-keyed"),
        heartbeat_reader=functools.partial(read_heartbeat, token=HF_TOKEN),
        heartbeat_every_s=None,
        client=client,
        clock=clock,
        sleep=clock.sleep,
        store=MemoryStore(),
    )
    assert result.failure == "poll_error" and client.calls > 3 and HEARTBEAT_READS
    records = {
        f"{i} {r.name}": caplog.handler.format(r) + str(r.args)
        for i, r in enumerate(caplog.records)
        if r.name.startswith("flashfsm")
    }
    assert_clean(records, "flashfsm log records")


def disguised(secret: str, tag: str = "[i]") -> str:
    """`secret` with a markup tag after every 7 characters: no 8-character piece is left."""
    return tag.join(secret[i : i + PIECE - 1] for i in range(0, len(secret), PIECE - 1))


def test_the_cli_does_not_join_secret_pieces_that_text_disguised_as_markup(
    tmp_path: Path,
) -> None:
    """A worker error holding a secret interleaved with markup-like tags is stored masked
    (no piece is long enough to be a secret's) and must be printed that way too."""
    secret = RUNPOD_POOL[1]
    error = f"auth failed for key {disguised(secret)} on account 1"
    assert not leaks(error)

    class Failing(PlantedJob):
        def final(self) -> dict[str, Any]:
            return {"status": "FAILED", "error": error}

    url = f"sqlite:///{tmp_path}/events.db"
    store = open_store(url)
    watch_planted(Failing("failed", "x" * 10, 0), store, "job-disguised")
    stored = [encode(e).decode() for e in store.read("job-disguised")]
    store.close()
    assert not [text for text in stored if leaks(text)]
    printed: list[str] = []
    cli("replay", "job-disguised", "--store", url, out=printed)
    cli("explain", "job-disguised", "--store", url, out=printed)
    assert_clean(printed, "CLI output")
