"""Text from outside: secrets masked first, then the length capped, by one validated type.

Theory of operation. Every event field that can carry text from the outside world (an API
error, a worker's stdout tail, a failure artifact, a verdict's detail) is declared
`Outside[limit]` (or `OutsideTail[limit]` to keep the end of the text). Building an event
in Python runs the field's validator, which always does the same three things in the same
order, so no call site can get them wrong:

1. make the text valid UTF-8 (a lone surrogate from the wire is replaced);
2. mask every known secret (`mask`): each whole secret, any bearer token, and then any
   `FRAGMENT`-character piece of a secret that is left (a secret the outside world had
   already cut in two still loses both halves);
3. cap the result at `limit` characters (its head, or its tail).

Masking before cutting is the point: a cut through a secret would leave a piece that no
longer matches the whole. A very long text is first cut to a generous bound (`limit`
twice over plus a margin) so that masking costs what the event keeps, not what arrived.

Decoding a stored event (`validate_json`) does not run the mask again: the event was
masked when it was made, and replay stays at decode cost. The field's `max_length` still
bounds what a decoded line may hold.

Where the secrets come from is the shell's business: this module keeps the values callers
register (`register_secrets`) and asks every *secret source* the shell adds
(`add_secret_source`, e.g. one reading `RUNPOD_API_KEY` and `HF_TOKEN` from the
environment); it reads nothing itself.
"""

from __future__ import annotations

import operator
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler
from pydantic_core import core_schema

MASK = "[REDACTED]"
#: Values shorter than this are not treated as secrets: they would mask ordinary words.
MIN_SECRET_LEN = 6
#: A piece of a secret this long is masked on its own.
FRAGMENT = 8
#: Extra characters kept before masking a long text, beyond twice the field's limit.
PRECUT_MARGIN = 1024

SecretSource = Callable[[], Iterable[str]]

_lock = threading.Lock()
_registered: set[str] = set()
_sources: list[SecretSource] = []
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_BEARER_MIN = len("bearer ") + 8
#: What the secrets were when `_known` was computed, and what was computed from them:
#: (key, secrets longest first, their pieces, masked short texts).
_known: tuple[Any, tuple[str, ...], frozenset[str], dict[str, str]] = (None, (), frozenset(), {})
_SHORT = 64  # texts this short (statuses, stages, class names) are masked once per secret set
_SHORT_CACHE_MAX = 4096


def register_secrets(*values: str | None) -> None:
    """Add runtime secret values (a worker's secret env, an API key) to the masked set."""
    with _lock:
        _registered.update(v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LEN)


def add_secret_source(source: SecretSource) -> None:
    """Ask `source()` for secret values on every mask (the shell adds the environment's).

    A source is called for every outside text: it must be cheap, and return a tuple of
    strings that compares equal while its secrets are unchanged (the very same tuple
    object is cheapest: it is checked first).
    """
    with _lock:
        if source not in _sources:
            _sources.append(source)


def _current() -> tuple[Any, tuple[str, ...], frozenset[str], dict[str, str]]:
    """What is known of the secrets now: (key, the secrets longest first, their pieces, the
    short-text cache). Every outside text asks, so the unchanged case costs one call and
    an identity check."""
    global _known
    known = _known
    last, sources = known[0], _sources
    # The usual case first: one source (the environment's) handing back the very tuple it
    # gave last time, and no value registered since (the registered set only grows).
    if (
        last is not None
        and len(sources) == 1
        and last[0] == len(_registered)
        and sources[0]() is last[1][0]
    ):
        return known
    key = (len(_registered), tuple(map(operator.call, sources)))
    if last != key:
        with _lock:
            found = set(_registered)
        for values in key[1]:
            found.update(v for v in values if isinstance(v, str))
        secrets = tuple(
            sorted((v for v in found if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)
        )
        pieces = frozenset(
            v[i : i + FRAGMENT] for v in secrets for i in range(len(v) - FRAGMENT + 1)
        )
        known = _known = (key, secrets, pieces, {})
    return known


def secret_values() -> list[str]:
    """The secret values known now, longest first (a prefix never hides a longer one)."""
    return list(_current()[1])


def _fragment_spans(text: str, pieces: frozenset[str]) -> list[tuple[int, int]]:
    """Where a piece of a secret stands in `text`, as merged (start, end) spans."""
    hits: list[int] = []
    if len(text) <= 256:
        hits = [i for i in range(len(text) - FRAGMENT + 1) if text[i : i + FRAGMENT] in pieces]
    else:  # str.find runs in C: a few hundred searches beat a Python loop over the text
        for piece in pieces:
            at = text.find(piece)
            while at != -1:
                hits.append(at)
                at = text.find(piece, at + 1)
        hits.sort()
    spans: list[tuple[int, int]] = []
    for at in hits:
        if spans and at <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], at + FRAGMENT))
        else:
            spans.append((at, at + FRAGMENT))
    return spans


def mask(text: str, secrets: Sequence[str], pieces: frozenset[str] | None = None) -> str:
    """`text` with each secret, any bearer token and any long piece of a secret masked.

    `pieces` are the secrets' `FRAGMENT`-character pieces (computed when not given).
    """
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    if len(text) >= _BEARER_MIN:
        text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    if secrets and len(text) >= FRAGMENT:
        if pieces is None:
            pieces = frozenset(
                v[i : i + FRAGMENT] for v in secrets for i in range(len(v) - FRAGMENT + 1)
            )
        spans = _fragment_spans(text, pieces)
        if spans:
            out, last = [], 0
            for start, end in spans:
                out.append(text[last:start])
                out.append(MASK)
                last = end
            out.append(text[last:])
            text = "".join(out)
    return text


def redact(text: str | None) -> str | None:
    """`text` with every known secret masked (None and "" pass through)."""
    if not text:
        return text
    _, secrets, pieces, short = _current()
    if len(text) <= _SHORT:
        done = short.get(text)
        if done is None:
            done = mask(text, secrets, pieces)
            if len(short) >= _SHORT_CACHE_MAX:
                short.clear()
            short[text] = done
        return done
    return mask(text, secrets, pieces)


def valid_utf8(text: str) -> str:
    """`text` as valid UTF-8 (a lone surrogate becomes '?')."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def redact_then_cap(text: str, limit: int, *, tail: bool = False) -> str:
    """Valid UTF-8, secrets masked, then at most `limit` characters (head, or tail)."""
    bound = 2 * limit + PRECUT_MARGIN
    if len(text) > bound:
        text = text[-bound:] if tail else text[:bound]
    text = redact(valid_utf8(text)) or ""
    if len(text) > limit:
        text = text[-limit:] if tail else text[:limit]
    return text


class _Masked:
    """Field metadata: mask-then-cap for values built in Python; nothing more for JSON.

    The schema is pydantic-core's `json_or_python_schema`: a stored line is validated by
    the plain length-bounded str schema alone (no Python call on a replay), while a value
    given in Python goes through `_mask_and_cap` first.
    """

    def __init__(self, limit: int, tail: bool):
        self.limit, self.tail = limit, tail
        self.short_ok = limit >= _SHORT

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        plain = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=plain,
            python_schema=core_schema.no_info_before_validator_function(self._mask_and_cap, plain),
        )

    def _mask_and_cap(self, value: Any) -> Any:
        if type(value) is not str:
            return value  # let the str schema say what is wrong with it
        if self.short_ok and len(value) <= _SHORT:  # statuses, stages, class names: memoised
            _, secrets, pieces, short = _current()
            done = short.get(value)
            if done is None:
                done = mask(valid_utf8(value), secrets, pieces)[: self.limit]
                if len(short) >= _SHORT_CACHE_MAX:
                    short.clear()
                short[value] = done
            return done
        return redact_then_cap(value, self.limit, tail=self.tail)


class _OutsideFactory:
    """`Outside[limit]`: a str field filled from outside text (see the module notes)."""

    def __init__(self, tail: bool):
        self.tail = tail

    def __getitem__(self, limit: int) -> Any:
        return Annotated[str, Field(max_length=limit), _Masked(limit, self.tail)]


#: `Outside[n]`: outside text, masked then cut to its first n characters.
Outside = _OutsideFactory(tail=False)
#: `OutsideTail[n]`: outside text, masked then cut to its last n characters (a log tail).
OutsideTail = _OutsideFactory(tail=True)
