"""Encoded secrets are masked like plain ones; store URLs are printed without their secrets.

The encoded forms (`flashfsm.events.text.encoded_forms`): standard and URL-safe base64 at
every alignment inside a longer blob, and percent-encodings. Each property test draws
secrets (printable, some with characters percent-encoding changes), plants a form in a
text, and checks the secret's stable part — computed here from the blob the text holds, not
from the module's derivation — survives neither whole nor as any 8-character piece, through
`mask`, `redact` and an `Outside` field whose cap cuts through it. Ordinary texts (the
simulator's messages, tracebacks, the docs) are left unchanged.
"""

from __future__ import annotations

import base64
import string
import traceback
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from flashfsm.adapters.urls import HIDDEN, display_url, hide_url_secrets, scrub_urls, url_secrets
from flashfsm.events.text import (
    FRAGMENT,
    MASK,
    MIN_SECRET_LEN,
    Outside,
    OutsideTail,
    encoded_forms,
    index_secrets,
    mask,
    redact,
)

ROOT = Path(__file__).resolve().parent.parent
#: What separates a planted form from the rest of a text: never in a secret or in base64.
SEP = "\t"
_PRINTABLE = "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c,")
secrets_st = st.one_of(
    st.text(alphabet=_PRINTABLE, min_size=MIN_SECRET_LEN, max_size=48),
    st.text(alphabet=" /?&=%+@:#!$'\"é€" + string.ascii_letters, min_size=MIN_SECRET_LEN),
).filter(lambda s: s.strip() == s and len(s.encode()) <= 96)


def stable_part(blob: str, lead: int, size: int) -> str:
    """The characters of base64 `blob` that depend only on the `size` bytes at `lead`."""
    return blob[-(-8 * lead // 6) : 8 * (lead + size) // 6]


def survivors(form: str, text: str) -> list[str]:
    """`form` whole (when short) or its 8-character pieces found in `text`."""
    plain = text.replace(MASK, SEP)
    if len(form) < FRAGMENT:
        return [form] if len(form) >= MIN_SECRET_LEN and form in plain else []
    return [
        form[i : i + FRAGMENT]
        for i in range(len(form) - FRAGMENT + 1)
        if form[i : i + FRAGMENT] in plain
    ]


@settings(max_examples=150, deadline=None)
@given(
    secret=secrets_st,
    lead=st.binary(max_size=5),
    trail=st.binary(max_size=5),
    urlsafe=st.booleans(),
)
def test_no_piece_of_a_secrets_base64_survives_mask_at_any_alignment_in_a_blob(
    secret: str, lead: bytes, trail: bytes, urlsafe: bool
) -> None:
    raw = secret.encode()
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    blob = encode(lead + raw + trail).decode()
    core = stable_part(blob, len(lead), len(raw))
    out = mask(f"token{SEP}{blob}{SEP}end", [secret])
    assert survivors(core, out) == [], (core, out)


@settings(max_examples=150, deadline=None)
@given(secret=secrets_st, padded=st.booleans(), urlsafe=st.booleans())
def test_no_piece_of_a_whole_base64_or_percent_encoding_survives_mask(
    secret: str, padded: bool, urlsafe: bool
) -> None:
    raw = secret.encode()
    b64 = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    b64 = b64 if padded else b64.rstrip("=")
    for form in (b64, quote(secret, safe=""), quote_plus(secret), quote(secret)):
        out = mask(f"x{SEP}{form}{SEP}y", [secret])
        assert survivors(stable_part(form, 0, len(raw)) if form == b64 else form, out) == []


@settings(max_examples=100, deadline=None)
@given(secret=secrets_st, start=st.integers(0, 200), size=st.integers(FRAGMENT, 40), data=st.data())
def test_no_8_character_piece_of_any_encoded_form_survives_mask(
    secret: str, start: int, size: int, data: st.DataObject
) -> None:
    forms = [f for f in encoded_forms(secret) if len(f) >= FRAGMENT]
    assume(forms)
    form = data.draw(st.sampled_from(forms))
    piece = form[start % max(1, len(form) - FRAGMENT + 1) :][:size]
    assume(len(piece) >= FRAGMENT)
    out = mask(f"a{SEP}{piece}{SEP}b", [secret])
    assert survivors(piece, out) == []


class Probe(BaseModel):
    """Two outside fields, as events declare them."""

    head: Outside[120]
    tail: OutsideTail[120]


@settings(max_examples=60, deadline=None)
@given(secret=secrets_st, cut=st.integers(0, 160), lead=st.integers(0, 2))
def test_no_encoded_secret_survives_redact_or_an_outside_field_cut_through_it(
    secret: str, cut: int, lead: int
) -> None:
    raw = secret.encode()
    blob = base64.b64encode(b"u" * lead + raw + b"!").decode()
    core = stable_part(blob, lead, len(raw))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNPOD_API_KEY", secret)
        for form in (blob, quote(secret, safe="")):
            text = "." * cut + SEP + form + SEP + "." * cut
            wanted = core if form == blob else form
            assert survivors(wanted, redact(text) or "") == []
            probe = Probe(head=text, tail=text)
            assert survivors(wanted, probe.head) == [] and survivors(wanted, probe.tail) == []


def corpus() -> list[str]:
    """Ordinary texts: the docs, the simulator's and the library's source lines (their error
    messages), and real tracebacks."""
    texts = [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    texts += [
        p.read_text() for p in sorted((ROOT / "flashfsm" / "adapters" / "simulator").glob("*.py"))
    ]
    for exc in (ValueError("bad literal"), KeyError("status"), ZeroDivisionError()):
        try:
            raise RuntimeError("worker failed: CUDA out of memory") from exc
        except RuntimeError as err:
            texts.append("".join(traceback.format_exception(err)))
    return [line for text in texts for line in text.splitlines() if line.strip()]


CORPUS = corpus()
CORPUS_TEXT = "\n".join(CORPUS)
_TOKEN = string.ascii_letters + string.digits


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.lists(
        st.tuples(
            st.sampled_from(["rpa_", "hf_", "sk-proj-", "", "wandb_"]),
            st.text(_TOKEN, min_size=16, max_size=48),
        ),
        min_size=1,
        max_size=4,
    ),
    odd=st.text(alphabet=_PRINTABLE, min_size=12, max_size=40),
)
def test_an_ordinary_text_holding_no_piece_of_a_secret_or_its_forms_is_left_unchanged(
    tokens: list[tuple[str, str]], odd: str
) -> None:
    """No false positives beyond the rule itself: masking touches a text only where it holds
    a secret, one of its encoded forms, or a `FRAGMENT`-character piece of either. (A secret
    that happens to contain an ordinary word's piece, say `…ncyError`, does mask that piece
    wherever it stands: that is the rule, so such secrets are set aside here.)"""
    secrets = [prefix + body for prefix, body in tokens] + [odd]
    index = index_secrets(secrets)
    assume(not any(v in CORPUS_TEXT for v in (*index.wholes, *index.pieces)))
    changed = [line for line in CORPUS if mask(line, secrets, index) != line]
    assert changed == []


def test_the_encoded_forms_are_derived_once_per_secret_set() -> None:
    forms = encoded_forms("pa ss/wo+rd%")
    assert "pa%20ss%2Fwo%2Brd%25" in forms and "pa+ss%2Fwo%2Brd%25" in forms
    assert "pa%20ss%2fwo%2brd%25" in forms  # lower-case hex too
    assert base64.b64encode(b"pa ss/wo+rd%").decode() in forms
    assert base64.urlsafe_b64encode(b"pa ss/wo+rd%").decode() in forms
    assert "pa ss/wo+rd%" not in forms
    short = index_secrets(["abcdef"])  # a 6-byte secret: its shifted cores are 7 characters
    assert any(len(w) == 7 for w in short.wholes)


# --- store URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://postgres:s3cretPassw0rd@127.0.0.1:1/test",
            "postgresql://postgres:***@127.0.0.1:1/test",
        ),
        (
            "postgres://u:p%40ss@db:5432/x?sslmode=require",
            "postgres://u:***@db:5432/x?sslmode=require",
        ),
        (
            "postgresql://u@db/x?password=hunter22&table=t",
            "postgresql://u@db/x?password=***&table=t",
        ),
        ("postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"),
        ("postgresql://u:p@ss@[::1/db", "postgresql://u:***@[::1/db"),
        ("host=db user=u password=hunter22 dbname=x", "host=db user=u password=*** dbname=x"),
        ("host=db password='a b c' dbname=x", "host=db password=*** dbname=x"),
        ("sqlite:///tmp/events.db?durable=false", "sqlite:///tmp/events.db?durable=false"),
        ("jsonl:~/logs", "jsonl:~/logs"),
        ("memory://", "memory://"),
        ("postgresql://u@db/x", "postgresql://u@db/x"),
    ],
)
def test_display_url_masks_every_secret_of_a_store_url_and_keeps_the_rest(
    url: str, shown: str
) -> None:
    assert display_url(url) == shown
    for value in url_secrets(url):
        assert value not in display_url(url).replace(HIDDEN, "")


def test_hide_url_secrets_masks_the_password_wherever_a_message_quotes_it() -> None:
    url = "postgresql://u:s3cretPassw0rd@db/x"
    text = f'cannot open {url}: invalid percent-encoded token: "s3cretPassw0rd"'
    hidden = hide_url_secrets(text, url)
    assert "s3cretPassw0rd" not in hidden and "postgresql://u:***@db/x" in hidden
    assert hide_url_secrets("the pw is pwned", "postgresql://u:pw@db/x") == "the *** is pwned"


def test_scrub_urls_masks_passwords_in_running_text_only_in_urls() -> None:
    line = "waiting in postgresql://u:hunter22@db/x?password=zz (Ctrl-C); see https://a.b/c@d"
    assert (
        scrub_urls(line)
        == "waiting in postgresql://u:***@db/x?password=*** (Ctrl-C); see https://a.b/c@d"
    )
    assert scrub_urls("loss=0.1 password=plain text") == "loss=0.1 password=plain text"


def test_a_postgres_store_repr_and_connect_error_never_hold_the_password() -> None:
    psycopg = pytest.importorskip("psycopg")
    from flashfsm.adapters.postgres import PostgresStore
    from flashfsm.events.errors import StoreError

    dsn = "postgresql://postgres:s3cretPassw0rd@127.0.0.1:1/test"
    with pytest.raises(StoreError) as caught:
        PostgresStore(dsn, read_only=True, connect_timeout_s=1)
    assert "s3cretPassw0rd" not in str(caught.value) and "127.0.0.1" in str(caught.value)
    store = PostgresStore.__new__(PostgresStore)
    store.dsn, store.table = dsn, "t"
    assert "s3cretPassw0rd" not in repr(store) and "s3cretPassw0rd" not in store.where
    assert psycopg is not None
