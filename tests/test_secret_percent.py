"""A secret percent-encoded in any way is masked, not only as `quote` encodes it (issue 38).

A URL may escape any byte, unreserved letters too: `%68%66%5F…` (every byte), in upper- or
lower-case hex, or a mix of escapes and literal characters. Whatever mix decodes to a
registered secret is masked — through `mask`, `redact`, an `Outside` field and a stored
event — wherever it stands (a URL, a JSON body); a form one byte off is left alone (when no
`FRAGMENT` characters of the secret are left in it, the rule for any text).
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from urllib.parse import unquote, unquote_plus, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flashfsm.redact  # noqa: F401  (adds the environment as a secret source)
from flashfsm import open_store
from flashfsm.events import StatusFetchFailed
from flashfsm.events.text import FRAGMENT, MASK, MIN_SECRET_LEN, encoded_forms, mask, redact

HF = "hf_qTzXwKvLpBnRjMhGfDsYcAeU"
#: Characters `quote` leaves alone (letters, digits, `-._~/`) and ones it escapes.
MIXED_SECRET = "Zq8-+/r&t%9K d!x@L2w=._~é€"
#: What separates a planted form from the rest of a text (never in a secret here).
SEP = "\t"


def escape(char: str, upper: bool = True) -> str:
    """`char` as the `%XX` escapes of its UTF-8 bytes."""
    return "".join(("%{:02X}" if upper else "%{:02x}").format(b) for b in char.encode())


def bytewise(secret: str, upper: bool = True) -> str:
    """`secret` with every byte escaped."""
    return "".join(escape(c, upper) for c in secret)


def leaked(secret: str, text: str) -> list[str]:
    """The secret, or any `FRAGMENT`-character piece of it, that `text` still holds once its
    escapes are decoded (with `+` read as a space or not)."""
    found = []
    for decoded in {unquote(text), unquote_plus(text)}:
        decoded = decoded.replace(MASK, SEP)
        if secret in decoded:
            found.append(secret)
        found += [
            secret[i : i + FRAGMENT]
            for i in range(len(secret) - FRAGMENT + 1)
            if secret[i : i + FRAGMENT] in decoded
        ]
    return found


@pytest.mark.parametrize("upper", [True, False], ids=["upper-hex", "lower-hex"])
@pytest.mark.parametrize("secret", [HF, MIXED_SECRET, "pw7Kq!"], ids=["token", "mixed", "short"])
def test_a_secret_with_every_byte_escaped_is_masked_in_either_hex_case(
    secret: str, upper: bool
) -> None:
    form = bytewise(secret, upper)
    assert mask(f"token={form}&next=1", [secret]) == f"token={MASK}&next=1"


def test_a_mix_of_literal_characters_and_escapes_in_both_cases_is_masked() -> None:
    escaped = {i for i in range(len(HF)) if i % 3 != 1}  # two of every three characters
    form = "".join(escape(c, upper=i % 2 == 0) if i in escaped else c for i, c in enumerate(HF))
    assert re.search("%[0-9]?[A-F]", form) and re.search("%[0-9]?[a-f]", form)  # both cases
    assert mask(f"a {form} b", [HF]) == f"a {MASK} b"


def test_the_characters_quote_leaves_alone_escaped_and_those_it_escapes_left_literal() -> None:
    """The inverse of `quote`'s choice, the byte-wise form with `+` for a space (a form
    body's) and a query string's (`urlencode` keeping `/`), for a secret holding both kinds
    of character and multi-byte ones."""
    unreserved = set(string.ascii_letters + string.digits + "-._~/")
    inverse = "".join(escape(c) if c in unreserved or c == "%" else c for c in MIXED_SECRET)
    plus = bytewise(MIXED_SECRET).replace("%20", "+")
    query = urlencode({"pw": MIXED_SECRET}, safe="/").removeprefix("pw=")
    assert unquote(inverse) == MIXED_SECRET
    assert unquote_plus(plus) == MIXED_SECRET == unquote_plus(query)
    for form in (inverse, plus, query):
        assert form not in encoded_forms(MIXED_SECRET)
        assert mask(f"x={form}&y", [MIXED_SECRET]) == f"x={MASK}&y", form


@settings(max_examples=120, deadline=None)
@given(
    secret=st.text(
        alphabet=string.ascii_letters + string.digits + "-_.~+/=&%@!:# é€",
        min_size=MIN_SECRET_LEN,
        max_size=40,
    ).filter(lambda s: s.strip() == s),
    data=st.data(),
)
def test_any_mix_of_escapes_and_literal_characters_that_decodes_to_the_secret_is_masked(
    secret: str, data: st.DataObject
) -> None:
    form = ""
    for char in secret:
        # A literal `%` would read as the start of an escape: such a mix does not decode
        # to the secret, so `%` is always escaped.
        if char == "%" or data.draw(st.booleans()):
            form += escape(char, upper=data.draw(st.booleans()))
        else:
            form += char
    assert unquote(form) == secret
    out = mask(f"GET /v2/run?k={form}{SEP}end", [secret])
    assert leaked(secret, out) == [], (form, out)
    assert out.endswith(f"{SEP}end")


def test_a_byte_wise_secret_inside_a_url_and_a_json_body_is_masked_and_the_rest_kept() -> None:
    form = bytewise(HF, upper=False)
    url = f"https://huggingface.co/api/datasets/x/upload?token={form}&revision=main%2Fv2"
    assert mask(url, [HF]) == (
        f"https://huggingface.co/api/datasets/x/upload?token={MASK}&revision=main%2Fv2"
    )
    body = json.dumps({"error": "unauthorized", "request": {"url": url, "retry": True}})
    out = mask(body, [HF])
    assert form not in out and leaked(HF, out) == []
    assert json.loads(out)["request"]["url"].endswith(f"token={MASK}&revision=main%2Fv2")


def test_a_form_one_byte_off_is_left_while_the_true_one_beside_it_is_masked() -> None:
    """One wrong byte in the middle of a 12-character secret leaves 6 and 5 characters of it
    on either side: fewer than `FRAGMENT`, so that text is no secret and is kept whole."""
    secret = "Kq7Lp2Vz9Xw4"
    wrong = secret[:6] + "Y" + secret[7:]
    for upper in (True, False):
        near, true = bytewise(wrong, upper), bytewise(secret, upper)
        text = f"old={near}&new={true}&mixed={near[:9]}{wrong[3:]}"
        out = mask(text, [secret])
        assert out == f"old={near}&new={MASK}&mixed={near[:9]}{wrong[3:]}"


def test_redact_and_a_stored_event_mask_the_byte_wise_form(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The issue's case: an answer quoting the key escaped byte by byte is recorded in an
    event; neither the store's files nor the event read back, nor a log line, hold it."""
    key = "rpa_K7Q2XM9T4ZHB3W8JN5DC6VPL"
    monkeypatch.setenv("RUNPOD_API_KEY", key)
    form = bytewise(key)
    url = f"https://api.runpod.ai/v2/ep/status/j1?api_key={form}"
    assert (
        redact(f"GET {url}: 401")
        == f"GET https://api.runpod.ai/v2/ep/status/j1?api_key={MASK}: 401"
    )

    event = StatusFetchFailed(
        stream="job-j1",
        seq=0,
        id="e-1",
        at=1.0,
        error_class="RunpodApiError",
        http_status=401,
        message=f"401 Unauthorized: GET {url}",
    )
    assert event.message.endswith(f"api_key={MASK}")
    store = open_store(f"sqlite:///{tmp_path / 'events.db'}")
    try:
        store.append("job-j1", [event], 0)
        (stored,) = store.read("job-j1")
    finally:
        store.close()
    assert isinstance(stored, StatusFetchFailed) and stored.message == event.message
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"api_key=" + MASK.encode() in raw  # the event is in these bytes, masked
    for held in (key, form, form.lower(), form[: 3 * FRAGMENT], key[:FRAGMENT]):
        assert held.encode() not in raw, held
