"""Text from outside: secrets masked first, then the length capped, by one validated type.

Theory of operation. Every event field that can carry text from the outside world (an API
error, a worker's stdout tail, a failure artifact, a verdict's detail) is declared
`Outside[limit]` (or `OutsideTail[limit]` to keep the end of the text). Building an event
in Python runs the field's validator, which always does the same three things in the same
order, so no call site can get them wrong:

1. make the text valid UTF-8 (a lone surrogate from the wire is replaced);
2. mask every known secret (`mask`): each secret percent-encoded in any way, then each
   whole secret, any bearer token, and then any `FRAGMENT`-character piece of a secret or
   of one of its encoded forms that is left (a secret the outside world had already cut in
   two still loses both halves);
3. cap the result at `limit` characters (its head, or its tail).

Masking before cutting is the point: a cut through a secret would leave a piece that no
longer matches the whole. A very long text is first cut to a generous bound (`limit`
twice over plus a margin) so that masking costs what the event keeps, not what arrived.

Encoded forms (`encoded_forms`). A secret also travels encoded: in base64 (an HTTP Basic
header, a Kubernetes secret, a blob of JSON) and percent-encoded (a URL, a form body). Each
secret's forms are derived once, when the set of secrets changes, and masked like the plain
secret (any `FRAGMENT`-character piece): its standard and URL-safe base64 with padding
(without padding is a prefix of it), and the *stable core* of its base64 at the two other
alignments a longer blob can give it (the secret starting 1 or 2 bytes into a 3-byte group:
the characters that depend on the secret's bytes alone, so whatever surrounds it); and its
percent-encodings (`quote(s, safe="")`, `quote(s)`, `quote_plus(s)`, with upper- or
lower-case hex). A core shorter than `FRAGMENT` (a secret of 6 or 7 bytes) is masked whole.
Limits: a form split by a line break or other inserted characters keeps its pieces shorter
than `FRAGMENT` (at most 5 bytes of the secret each); other encodings (hex, base32,
double encodings, base64 of a percent-encoding) are not derived.

Percent-encoding in general (`_percent_spans`). Any character of a URL may be escaped, not
only those `quote` escapes: `%68%66%5F…` (every byte), a mix of escapes and literal
characters, either hex case. No list of forms can hold them all, so a text holding an
escape is also read decoded around each run of escapes (`FRAGMENT - 1` characters either
side), the run turned back into its UTF-8 characters; when a secret holds a space, it is
read once more with `+` for a space (a form body's). The secrets, and any `FRAGMENT`
characters of one, are looked for in the decoded text as in the plain one, and whatever
they stand on in the text is masked, together with the plain hits of the same text (so a
secret partly escaped goes whole). A piece of a form that decodes to fewer than `FRAGMENT`
characters of a secret is left (unless it is a piece of a derived form). A text with no
`%` pays one substring test for this.

Finding the pieces costs what the text is long, not how many pieces there are: every
`FRAGMENT`-character window holds one of the text's `_BLOCK`-aligned `_BLOCK`-character
blocks whole, so only the blocks are looked up (one set lookup per `_BLOCK` characters) and
the few windows around a block of a secret are checked.

Decoding a stored event (`validate_json`) does not run the mask again: the event was
masked when it was made, and replay stays at decode cost. The field's `max_length` still
bounds what a decoded line may hold.

Where the secrets come from is the shell's business: this module keeps the values callers
register (`register_secrets`) and asks every *secret source* the shell adds
(`add_secret_source`, e.g. one reading `RUNPOD_API_KEY` and `HF_TOKEN` from the
environment); it reads nothing itself.
"""

from __future__ import annotations

import base64
import operator
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, NamedTuple
from urllib.parse import quote, quote_plus

from pydantic import Field, GetCoreSchemaHandler
from pydantic_core import core_schema

MASK = "[REDACTED]"
#: Values shorter than this are not treated as secrets: they would mask ordinary words.
MIN_SECRET_LEN = 6
#: A piece of a secret this long is masked on its own.
FRAGMENT = 8
#: The blocks the piece search looks up: every `FRAGMENT` window holds an aligned one whole.
_BLOCK = FRAGMENT // 2
#: Extra characters kept before masking a long text, beyond twice the field's limit.
PRECUT_MARGIN = 1024

SecretSource = Callable[[], Iterable[str]]

_lock = threading.Lock()
_registered: set[str] = set()
_sources: list[SecretSource] = []
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_BEARER_MIN = len("bearer ") + 8


class SecretIndex(NamedTuple):
    """What masking needs of a set of secrets, derived once per set (`index_secrets`)."""

    #: Replaced whole, longest first: the secrets, and their encoded forms too short to
    #: hold a `FRAGMENT`-character piece.
    wholes: tuple[str, ...]
    #: Every `FRAGMENT`-character piece of every secret and of every encoded form.
    pieces: frozenset[str]
    #: Every `_BLOCK`-character piece of those pieces (what the search looks up).
    blocks: frozenset[str]
    #: Whether a secret holds a space (a form body may carry it as `+`).
    spaced: bool = False


_NO_INDEX = SecretIndex((), frozenset(), frozenset())
#: What the secrets were when `_known` was computed, and what was computed from them:
#: (key, secrets longest first, their index, masked short texts).
_known: tuple[Any, tuple[str, ...], SecretIndex, dict[str, str]] = (None, (), _NO_INDEX, {})
_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")
#: A run of percent escapes (either hex case; the leading `%` lets the search skip ahead),
#: and the same or a `+` (a space, in a form body).
_ESCAPES = re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*")
_ESCAPES_OR_PLUS = re.compile(r"\+|%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*")
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


def _base64_forms(raw: bytes) -> list[str]:
    """`raw` in standard and URL-safe base64: whole and padded, and the stable core of each
    other alignment (the characters that depend on `raw`'s bytes alone when it starts 1 or 2
    bytes into a 3-byte group of a longer blob)."""
    forms = []
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        forms.append(encode(raw).decode("ascii"))
        for lead in (1, 2):
            encoded = encode(bytes(lead) + raw).decode("ascii")
            # A base64 character holds 6 bits: the first one after the lead's 8 * lead
            # bits, up to the last one that ends within the secret's bytes.
            forms.append(encoded[-(-8 * lead // 6) : 8 * (lead + len(raw)) // 6])
    return forms


def _percent_forms(secret: str) -> list[str]:
    """`secret` percent-encoded as URLs and form bodies carry it (upper- and lower-case hex)."""
    forms = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    forms |= {_PERCENT_HEX.sub(lambda m: m.group(0).lower(), form) for form in forms}
    return sorted(forms)


def encoded_forms(secret: str) -> tuple[str, ...]:
    """The encoded forms of `secret` that are masked like the secret itself (see the module
    notes): base64 (standard and URL-safe, at every alignment) and percent-encodings. The
    secret itself is not among them."""
    forms = dict.fromkeys(_base64_forms(secret.encode("utf-8", "replace")))
    forms.update(dict.fromkeys(_percent_forms(secret)))
    forms.pop(secret, None)
    return tuple(forms)


def index_secrets(secrets: Iterable[str]) -> SecretIndex:
    """What `mask` needs to mask `secrets` and their encoded forms (see `SecretIndex`)."""
    wholes = {s for s in secrets if len(s) >= MIN_SECRET_LEN}
    sources = list(wholes)
    for secret in list(wholes):
        for form in encoded_forms(secret):
            if len(form) >= FRAGMENT:
                sources.append(form)
            elif len(form) >= MIN_SECRET_LEN:
                wholes.add(form)
    pieces = frozenset(v[i : i + FRAGMENT] for v in sources for i in range(len(v) - FRAGMENT + 1))
    blocks = frozenset(p[i : i + _BLOCK] for p in pieces for i in range(FRAGMENT - _BLOCK + 1))
    spaced = any(" " in value for value in wholes)
    return SecretIndex(tuple(sorted(wholes, key=len, reverse=True)), pieces, blocks, spaced)


def _current() -> tuple[Any, tuple[str, ...], SecretIndex, dict[str, str]]:
    """What is known of the secrets now: (key, the secrets longest first, their index, the
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
        known = _known = (key, secrets, index_secrets(secrets), {})
    return known


def secret_values() -> list[str]:
    """The secret values known now, longest first (a prefix never hides a longer one)."""
    return list(_current()[1])


def _fragment_spans(text: str, index: SecretIndex) -> list[tuple[int, int]]:
    """Where a piece of a secret (or of an encoded form) stands in `text`, as merged
    (start, end) spans.

    A piece starting at `p` holds the block at the first multiple `b` of `_BLOCK` from `p`
    whole (`b + _BLOCK <= p + FRAGMENT`), so only the blocks at those offsets are looked up,
    and a block of a secret's has its `_BLOCK` possible starts `b - _BLOCK + 1 .. b` checked.
    """
    pieces, blocks = index.pieces, index.blocks
    spans: list[tuple[int, int]] = []
    last = len(text) - FRAGMENT
    for b in range(0, len(text) - _BLOCK + 1, _BLOCK):
        if text[b : b + _BLOCK] in blocks:
            for at in range(max(0, b - _BLOCK + 1), min(b, last) + 1):
                if text[at : at + FRAGMENT] in pieces:
                    if spans and at <= spans[-1][1]:
                        spans[-1] = (spans[-1][0], at + FRAGMENT)
                    else:
                        spans.append((at, at + FRAGMENT))
    return spans


def _unescape(run: re.Match[str]) -> str:
    """A run of `%XX` escapes decoded as UTF-8; a byte that is no part of a character
    becomes a lone surrogate (`surrogateescape`, as `os.environ` reads such a byte)."""
    return bytes.fromhex(run.group(0).replace("%", "")).decode("utf-8", "surrogateescape")


def _decoded_starts(text: str) -> list[int]:
    """Where each character of `_ESCAPES.sub(_unescape, text)` starts in `text`, and then
    `len(text)` (so a decoded span `[s, e)` stands on `text[starts[s] : starts[e]]`)."""
    starts: list[int] = []
    done = 0
    for run in _ESCAPES.finditer(text):
        starts.extend(range(done, run.start()))
        at = run.start()
        for char in _unescape(run):
            starts.append(at)
            at += 3 * len(char.encode("utf-8", "surrogateescape"))  # `%XX` per byte
        done = run.end()
    starts.extend(range(done, len(text) + 1))
    return starts


def _spans(text: str, index: SecretIndex) -> list[tuple[int, int]]:
    """Where a whole secret (or short form) or a `FRAGMENT`-character piece stands in `text`
    (a whole of `FRAGMENT` characters or more is found as its pieces)."""
    spans: list[tuple[int, int]] = []
    for value in reversed(index.wholes):  # shortest first
        if len(value) >= FRAGMENT:
            break
        at = text.find(value)
        while at >= 0:
            spans.append((at, at + len(value)))
            at = text.find(value, at + len(value))
    if index.pieces and len(text) >= FRAGMENT:
        spans += _fragment_spans(text, index)
    return spans


def _escaped_spans(text: str, index: SecretIndex, plus: bool) -> list[tuple[int, int]]:
    """Where a whole secret (or short form) or a `FRAGMENT`-character piece stands in `text`
    once its escapes are decoded (and once more with `+` read as a space, when `plus`).

    Only the regions around the runs of escapes (and the `+`s, when `plus`) are decoded,
    `FRAGMENT - 1` characters either side of each (regions that meet are joined, so none
    cuts a run): every `FRAGMENT`-character window, and every shorter whole, that holds an
    escaped character (or a `+`) lies within one.
    """
    reach = FRAGMENT - 1
    regions: list[tuple[int, int]] = []
    for run in (_ESCAPES_OR_PLUS if plus else _ESCAPES).finditer(text):
        low, high = max(0, run.start() - reach), run.end() + reach
        if regions and low <= regions[-1][1]:
            regions[-1] = (regions[-1][0], high)
        else:
            regions.append((low, high))
    spans: list[tuple[int, int]] = []
    for low, high in regions:
        region = text[low:high]
        found = _spans(_ESCAPES.sub(_unescape, region), index)
        if plus and "+" in region:  # as long as `region`: its spans stand alike on both
            found += _spans(_ESCAPES.sub(_unescape, region.replace("+", " ")), index)
        if found:
            starts = _decoded_starts(region)
            spans += [(low + starts[start], low + starts[end]) for start, end in found]
    return spans


def _percent_spans(text: str, index: SecretIndex) -> list[tuple[int, int]]:
    """Where `text` holds a secret (or a `FRAGMENT`-character piece of one) percent-encoded
    in any way: every byte escaped or some, in either hex case, and with `+` for a space
    (a form body's) when a secret holds a space (see the module notes).

    The windows found are those that hold an escaped character (or a `+` read as a space);
    the ones that hold none are plain ones, which `mask` finds in `text` itself, so that a
    secret partly escaped is masked whole.
    """
    return _escaped_spans(text, index, index.spaced and "+" in text)


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each of `spans` (in any order, overlapping or not) replaced by `MASK`."""
    out: list[str] = []
    last = 0
    for start, end in sorted(spans):
        if start > last or not out:
            out.append(text[last:start])
            out.append(MASK)
        last = max(last, end)
    out.append(text[last:])
    return "".join(out)


def mask(text: str, secrets: Sequence[str], index: SecretIndex | None = None) -> str:
    """`text` with each secret (percent-encoded in any way too), any bearer token and any
    long piece of a secret or of one of its encoded forms (`encoded_forms`) masked.

    `index` is `index_secrets(secrets)` (computed when not given).
    """
    if index is None:
        index = index_secrets(secrets)
    if index.wholes and "%" in text:
        spans = _percent_spans(text, index)
        if spans:  # and the plain hits of the same text: a secret partly escaped goes whole
            text = _masked(text, spans + _spans(text, index))
    for value in index.wholes:
        if value in text:
            text = text.replace(value, MASK)
    if len(text) >= _BEARER_MIN:
        text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    if index.pieces and len(text) >= FRAGMENT:
        spans = _fragment_spans(text, index)
        if spans:
            text = _masked(text, spans)
    return text


def redact(text: str | None) -> str | None:
    """`text` with every known secret masked (None and "" pass through)."""
    if not text:
        return text
    _, secrets, index, short = _current()
    if len(text) <= _SHORT:
        done = short.get(text)
        if done is None:
            done = mask(text, secrets, index)
            if len(short) >= _SHORT_CACHE_MAX:
                short.clear()
            short[text] = done
        return done
    return mask(text, secrets, index)


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
            _, secrets, index, short = _current()
            done = short.get(value)
            if done is None:
                done = mask(valid_utf8(value), secrets, index)[: self.limit]
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
