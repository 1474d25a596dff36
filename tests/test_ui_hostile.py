"""`flashfsm ui` against hostile requests: each hole issue 38 found in the web view, closed.

A host name is loopback only by its address (`127.evil.example` is a name anyone can point
anywhere); the token's redirect stays on this site whatever the path says (`//evil.example/`,
`/\\evil.example/`); a cancel form's nonce is one per form, for its run, good once, and a
cancel must come from this site's own page (Origin, else Referer); the address a cancel
records is the connection's, never a forwarded header's unless it came through the proxy the
view was told to trust; and a damaged stream is named where the runs page counts it.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from flashfsm import open_store
from flashfsm.cli import app as cli
from flashfsm.events.models import StatusObserved
from flashfsm.ids import new_id
from flashfsm.ui.app import UiConfig, create_app, is_loopback
from tests.test_damage import damage
from tests.test_ui import cancels, open_run
from tests.ui_browser import UiServer

runner = CliRunner()
TOKEN = "t0ken-" + "h" * 26
SITE = "http://127.0.0.1"
HOSTILE_NAME = "job-<b>damaged</b>-\x1b[31m\u202e"


@pytest.fixture
def runs_store(tmp_path: Path) -> str:
    """A store of two open runs nothing drives."""
    url = f"sqlite:///{tmp_path}/events.db"
    open_run(url, "run-a")
    open_run(url, "run-b")
    return url


def form_nonce(client: TestClient, run: str) -> str:
    """The nonce of a newly opened cancel form of `run`."""
    form = client.get(f"/cancel/{run}")
    assert form.status_code == 200, form.text
    return re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)


def reason_of(page: str) -> str:
    """The one line a refusal page gives as its reason."""
    return re.search(r'<p class="error">([^<]*)</p>', page).group(1)


# --- a) loopback is an address --------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("127.evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("", False),
    ],
)
def test_loopback_is_judged_by_address(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_host_name_that_starts_with_127_needs_a_token(runs_store: str, client_for) -> None:
    with pytest.raises(ValueError, match="give a token"):
        create_app(UiConfig(runs_store, host="127.evil.example"))
    result = runner.invoke(
        cli, ["ui", "--store", runs_store, "--host", "127.evil.example", "--port", "0"]
    )
    assert result.exit_code == 1
    assert "--host 127.evil.example serves other machines: give a token" in result.output
    # with the token it serves, and the name it was bound to is still only half the guard
    client = client_for(runs_store, host="127.evil.example", token=TOKEN)
    assert client.get("/", headers={"host": "127.evil.example"}).status_code == 401
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert client.get("/", headers={"host": "127.evil.example", **bearer}).status_code == 200
    # bound to loopback, a rebinding name is not this view's host, token or not
    loopback = client_for(runs_store)
    assert loopback.get("/", headers={"host": "127.evil.example"}).status_code == 400
    assert loopback.get("/", headers={"host": "127.0.0.1.evil.example"}).status_code == 400
    assert loopback.get("/", headers={"host": "localhost:8765"}).status_code == 200


# --- b) redirects stay on this site ---------------------------------------------------------


def followed(location: str, base: str = "http://127.0.0.1:8765/x") -> str | None:
    """The host a browser goes to for a redirect to `location` (as the URL standard reads it
    for http: a backslash is a slash, tabs and line breaks are dropped, and after two
    slashes any more are skipped before the host)."""
    cleaned = re.sub(r"[\t\n\r]", "", location).replace("\\", "/")
    if cleaned.startswith("//"):
        cleaned = "//" + cleaned.lstrip("/")
    return urlsplit(urljoin(base, cleaned)).hostname


@pytest.mark.parametrize(
    "path",
    [
        "//evil.example/",
        "///evil.example/x",
        "/\\evil.example/",
        "/\\/evil.example",
        "/%2F%2Fevil.example/",
        "/%5Cevil.example",
    ],
)
def test_the_token_redirect_never_leaves_this_site(runs_store: str, client_for, path: str) -> None:
    client = client_for(runs_store, host="0.0.0.0", token=TOKEN)
    answer = client.get(f"{SITE}{path}?token={TOKEN}&q=run", follow_redirects=False)
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert followed(location) == "127.0.0.1", location
    assert location.startswith("/") and location[1:2] not in ("/", "\\")
    assert TOKEN not in location and location.endswith("?q=run")


def test_the_token_redirect_keeps_an_encoded_name(runs_store: str, client_for) -> None:
    client = client_for(runs_store, host="0.0.0.0", token=TOKEN)
    answer = client.get(f"/s/run%2Fa?token={TOKEN}", follow_redirects=False)
    assert answer.headers["location"] == "/s/run%2Fa"


# --- c) a cancel's nonce: per form, per run, once; and from this site ------------------------


def post_cancel(client: TestClient, run: str, nonce: str, **headers: str) -> httpx.Response:
    data = {"by": "ann", "reason": "r", "csrf": nonce}
    return client.post(f"/cancel/{run}", data=data, headers=headers, follow_redirects=False)


def test_each_cancel_form_has_its_own_nonce_good_once(runs_store: str, client_for) -> None:
    client = client_for(runs_store, allow_cancel=True)
    first, second = form_nonce(client, "run-a"), form_nonce(client, "run-a")
    assert first != second
    assert post_cancel(client, "run-a", first, origin=SITE).status_code == 303
    assert len(cancels(runs_store, "run-a")) == 1
    replay = post_cancel(client, "run-a", first, origin=SITE)
    assert replay.status_code == 403
    assert "stale" in reason_of(replay.text)
    assert len(cancels(runs_store, "run-a")) == 1  # the replay recorded nothing
    assert post_cancel(client, "run-a", second, origin=SITE).status_code == 303


def test_a_cancel_nonce_is_good_only_for_its_run(runs_store: str, client_for) -> None:
    client = client_for(runs_store, allow_cancel=True)
    nonce = form_nonce(client, "run-a")
    answer = post_cancel(client, "run-b", nonce, origin=SITE)
    assert answer.status_code == 403
    assert cancels(runs_store, "run-b") == []
    assert post_cancel(client, "run-a", nonce, origin=SITE).status_code == 403  # spent
    assert cancels(runs_store, "run-a") == []


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"origin": "http://127.0.0.1:9999"},
        {"origin": "https://127.0.0.1"},
        {"origin": "null", "referer": f"{SITE}/cancel/run-a"},
        {"referer": "http://evil.example/cancel/run-a"},
        {"referer": "http://127.0.0.1.evil.example/"},
        {},
    ],
    ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()) or "neither",
)
def test_a_cancel_from_another_site_is_refused_and_records_nothing(
    runs_store: str, client_for, headers: dict[str, str]
) -> None:
    client = client_for(runs_store, allow_cancel=True)
    nonce = form_nonce(client, "run-a")
    answer = post_cancel(client, "run-a", nonce, **headers)
    assert answer.status_code == 403
    reason = reason_of(answer.text)
    assert "\n" not in reason and "another site" in reason
    assert cancels(runs_store, "run-a") == []
    # the refusal did not spend the nonce: from this site's page it is good
    assert post_cancel(client, "run-a", nonce, referer=f"{SITE}/cancel/run-a").status_code == 303
    assert len(cancels(runs_store, "run-a")) == 1


# --- d) forwarded headers -------------------------------------------------------------------


def test_a_forwarded_header_does_not_forge_the_address_a_cancel_records(
    runs_store: str, tmp_path: Path
) -> None:
    server = UiServer(runs_store, "--allow-cancel", cwd=tmp_path)
    try:
        with httpx.Client(base_url=server.base, timeout=10) as client:
            form = client.get("/cancel/run-a").text
            nonce = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
            forged = {
                "origin": server.base,
                "x-forwarded-for": "203.0.113.9",
                "x-forwarded-proto": "https",
                "forwarded": "for=203.0.113.9",
            }
            data = {"by": "ann", "csrf": nonce}
            answer = client.post("/cancel/run-a", data=data, headers=forged)
            assert answer.status_code == 303, answer.text
    finally:
        server.stop()
    [cancel] = cancels(runs_store, "run-a")
    assert cancel.by == "ann (flashfsm ui, from 127.0.0.1)"


def test_only_the_trusted_proxy_names_the_address_behind_it(runs_store: str, client_for) -> None:
    forwarded = {"x-forwarded-for": "198.51.100.1, 203.0.113.9"}
    stranger = client_for(
        runs_store, client=("10.0.0.9", 4000), allow_cancel=True, trusted_proxy="10.0.0.7"
    )
    nonce = form_nonce(stranger, "run-a")
    assert post_cancel(stranger, "run-a", nonce, origin=SITE, **forwarded).status_code == 303
    proxy = client_for(
        runs_store, client=("10.0.0.7", 4000), allow_cancel=True, trusted_proxy="10.0.0.7"
    )
    nonce = form_nonce(proxy, "run-b")
    behind = {**forwarded, "x-forwarded-proto": "https", "x-forwarded-host": "view.example"}
    refused = post_cancel(proxy, "run-b", nonce, origin=SITE, **behind)
    assert refused.status_code == 403  # the site is the proxy's: https://view.example
    answer = post_cancel(proxy, "run-b", nonce, origin="https://view.example", **behind)
    assert answer.status_code == 303
    [ignored] = cancels(runs_store, "run-a")
    assert ignored.by == "ann (flashfsm ui, from 10.0.0.9)"
    [proxied] = cancels(runs_store, "run-b")
    assert proxied.by == "ann (flashfsm ui, from 203.0.113.9 via 10.0.0.7)"
    with pytest.raises(ValueError, match="trusted proxy"):
        create_app(UiConfig(runs_store, trusted_proxy="proxy.example"))
    result = runner.invoke(cli, ["ui", "--store", runs_store, "--trusted-proxy", "nope"])
    assert result.exit_code == 1 and "--trusted-proxy nope" in result.output


# --- e) damaged streams are named ------------------------------------------------------------


def test_the_runs_page_names_the_damaged_stream(tmp_path: Path, client_for) -> None:
    db = tmp_path / "events.db"
    url = f"sqlite:///{db}"
    open_run(url, "run-healthy")
    at = 1_700_000_000.0
    store = open_store(url)
    try:
        events = [
            StatusObserved(
                stream=HOSTILE_NAME, seq=n, id=new_id(at + n), at=at + n, status="IN_QUEUE"
            )
            for n in range(3)
        ]
        store.append(HOSTILE_NAME, events, 0)
    finally:
        store.close()
    conn = sqlite3.connect(db)
    with conn:
        (body,) = conn.execute(
            "SELECT body FROM events WHERE stream = ? AND seq = 1", (HOSTILE_NAME,)
        ).fetchone()
        broken = damage(body if isinstance(body, bytes) else body.encode())
        conn.execute(
            "UPDATE events SET body = ? WHERE stream = ? AND seq = 1",
            (broken if isinstance(body, bytes) else broken.decode(), HOSTILE_NAME),
        )
    conn.close()
    page = client_for(url).get("/").text
    count = re.search(r'<p class="count">(.*?)</p>', page, re.S).group(1)
    assert "1 damaged (skipped)" in count
    assert "job-&lt;b&gt;damaged&lt;/b&gt;-\\x1b[31m\\u202e" in count
    assert "<b>damaged</b>" not in page and "\x1b" not in page and "\u202e" not in page
