"""`flashfsm ui` without a browser: what each page says, what the guards refuse, what it writes.

The pages must tell the story the CLI tells (the same states as `ls`, the same money as
`cost`), read the store without changing it, serve only streams the store lists, keep
outside text inert, refuse a bind that other machines reach without a token, and make its
one write (a cancel) only when started with `--allow-cancel`, naming who asked. The
browser-driven checks (live updates, layout) are in tests/test_ui_browser.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from flashfsm import open_store, replay
from flashfsm.cli import app as cli
from flashfsm.events.models import (
    CancelRequested,
    Candidate,
    RunStarted,
    StatusObserved,
    WatchStarted,
)
from flashfsm.events.store import HANDOFF
from flashfsm.ids import new_id
from flashfsm.ui.app import UiConfig, create_app
from flashfsm.ui.index import StoreIndex
from flashfsm.ui.pages import Frame, row_html, stream_url
from flashfsm.ui.store_pages import fleet_page
from tests.test_cli_escaping import Answers as EscapingAnswers
from tests.test_cli_escaping import watch_scripted_job
from tests.test_explain_view import section_text, unspoken

runner = CliRunner()
TOKEN = "t0ken-" + "x" * 26
EVIL_STREAM = 'job-<script>alert("s")</script>-\x1b[31m\u202e'
EVIL_ERROR = "<img src=x onerror=alert(1)> \x1b[2J CUDA </pre><b>owned</b>"


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store the demo wrote: five finished runs and their jobs."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ui')}/demo.db"
    result = runner.invoke(cli, ["demo", "--store", url, "--tag", "abc123"])
    assert result.exit_code == 0, result.output
    return url


class Answers(EscapingAnswers):
    """RunPod, scripted: one poll in progress, then FAILED with a hostile error text."""

    error = EVIL_ERROR


def open_run(url: str, name: str, at: float = 1_700_000_000.0, *, handoff: bool = False) -> None:
    """A run that started and has not concluded (nothing drives it; with `handoff`, handed
    to the fleet)."""
    store = open_store(url)
    try:
        started = RunStarted(
            stream=name,
            seq=0,
            id=new_id(at),
            at=at,
            run_id=name,
            candidates=(Candidate(gpu_class="L40S", price_per_hour=0.99),),
        )
        store.append(name, [started], 0, **({"lease": HANDOFF} if handoff else {}))
    finally:
        store.close()


@pytest.fixture
def mixed_store(tmp_path: Path) -> str:
    """A hostile job stream (its name and error text hold HTML and escapes) and an open run."""
    url = f"sqlite:///{tmp_path}/events.db"
    watch_scripted_job(url, EVIL_STREAM, Answers())
    open_run(url, "run-open")
    return url


def store_digest(url: str) -> str:
    path = Path(url.removeprefix("sqlite://"))
    return "".join(
        hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.glob(path.name + "*"))
    )


def cells(html: str) -> dict[str, str]:
    """Each row's state cell of the runs page, by the row's stream."""
    rows = re.findall(
        r'<tr data-stream="([^"]*)">.*?<td class="state[^"]*">([^<]*)</td>', html, re.S
    )
    return dict(rows)


# --- what the pages say --------------------------------------------------------------------


def test_the_runs_page_lists_every_stream_with_the_state_ls_gives(demo_store, client_for):
    page = client_for(demo_store).get("/")
    assert page.status_code == 200
    listed = json.loads(runner.invoke(cli, ["ls", "--json", "--store", demo_store]).output)
    shown = cells(page.text)
    assert shown == {row["stream"]: row["state"] for row in listed["streams"]}
    assert len(shown) == 15


def test_the_costs_page_totals_what_cost_bills(demo_store, client_for):
    page = client_for(demo_store).get("/costs")
    billed = json.loads(runner.invoke(cli, ["cost", "--json", "--store", demo_store]).output)
    total = billed["total"]
    assert f"billed ${total['money']:.2f}" in page.text, page.text
    assert f"wasted\n${total['waste_money']:.2f}" in page.text or (
        f"wasted ${total['waste_money']:.2f}" in page.text
    )


def test_filters_keep_only_the_matching_streams(demo_store, client_for):
    client = client_for(demo_store)
    stalled = cells(client.get("/", params={"state": "STALLED"}).text)
    assert stalled and set(stalled.values()) == {"STALLED"}
    runs = client.get("/rows.json", params={"kind": "run", "sort": "cost", "desc": "1"}).json()
    costs = [r["cost"] for r in runs["streams"]]
    assert [r["kind"] for r in runs["streams"]] == ["run"] * 6
    assert costs == sorted(costs, reverse=True)
    named = cells(client.get("/", params={"q": "walk"}).text)
    assert named and all("walk" in name for name in named)


def test_a_bad_filter_is_said_on_the_page_not_a_crash(demo_store, client_for):
    page = client_for(demo_store).get("/", params={"since": "soon"})
    assert page.status_code == 200
    assert "active within &#39;soon&#39;" in page.text


def test_a_run_page_shows_its_picture_attempts_explain_and_why_not(demo_store, client_for):
    client = client_for(demo_store)
    page = client.get("/s/run-demo-abc123-stall-s3")
    assert page.status_code == 200
    for part in ("Attempts", "Explain", "Why not", "/picture/run-demo-abc123-stall-s3"):
        assert part in page.text
    explained = section_text(page.text)
    assert "attempt 0 (job-demo-abc123-stall-s3-a0): STALLED (stalled)" in explained
    printed = runner.invoke(cli, ["explain", "run-demo-abc123-stall-s3", "--store", demo_store])
    first = printed.output.splitlines()[1]
    assert first in explained
    assert unspoken(printed.output, page.text, "run-demo-abc123-stall-s3") == []
    picture = client.get("/picture/run-demo-abc123-stall-s3")
    assert picture.headers["content-type"].startswith("image/svg+xml")
    assert picture.text.lstrip().startswith("<svg")


def test_a_verdicts_evidence_is_marked_and_linked(demo_store, client_for):
    page = client_for(demo_store).get("/s/job-demo-abc123-codeerror-s4-a0").text
    linked = re.findall(r'href="#ev-(\d+)"', page)
    assert linked
    for seq in linked:
        assert f'<tr id="ev-{seq}" class="evidence">' in page


# --- guards ------------------------------------------------------------------------------------


def test_pages_never_write_to_the_store(demo_store, client_for):
    before = store_digest(demo_store)
    client = client_for(demo_store)
    for path in ("/", "/costs", "/fleet", "/s/run-demo-abc123-walk-s1", "/rows.json"):
        assert client.get(path).status_code == 200
    client.get("/picture/run-demo-abc123-walk-s1")
    assert client.post("/cancel/run-demo-abc123-walk-s1").status_code == 403
    assert store_digest(demo_store) == before


def test_a_stream_the_store_does_not_list_is_not_found_and_never_read(demo_store, client_for):
    client = client_for(demo_store)
    for name in ("nope", "../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "x.jsonl"):
        assert client.get(f"/s/{name}").status_code == 404
        assert client.get(f"/picture/{name}").status_code == 404


def test_outside_text_renders_inert(mixed_store, client_for):
    client = client_for(mixed_store)
    assert client.get("/rows.json").headers["content-type"] == "application/json"
    for path in ("/", stream_url(EVIL_STREAM)):
        text = client.get(path).text
        assert "<script>alert" not in text
        assert "<img src=x" not in text
        assert "<b>owned</b>" not in text
        assert "\x1b" not in text and "\u202e" not in text
    page = client.get(stream_url(EVIL_STREAM)).text
    assert "&lt;script&gt;alert(&#34;s&#34;)&lt;/script&gt;-\\x1b[31m\\u202e" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "script-src 'self'" in client.get("/").headers["content-security-policy"]


class PasswordAnswers(Answers):
    """RunPod, scripted: the job fails with a URL holding a password in its error text."""

    error = "pull from https://bob:hunter2pw@registry.example/x failed"


def test_a_urls_password_in_outside_text_never_reaches_a_page(tmp_path: Path, client_for):
    url = f"sqlite:///{tmp_path}/events.db"
    watch_scripted_job(url, "job-url", PasswordAnswers())
    client = client_for(url)
    stream = client.get(stream_url("job-url")).text
    # (the verdict, its evidence, the detail and the timeline row all quote the error)
    assert stream.count("https://bob:***@registry.example/x") >= 4
    for path in ("/", stream_url("job-url"), "/rows.json", "/costs"):
        response = client.get(path)
        assert response.status_code == 200 and "hunter2pw" not in response.text


def test_a_page_answers_only_a_loopback_host_name(demo_store, client_for):
    client = client_for(demo_store)
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/", headers={"host": "127.0.0.1:8765"}).status_code == 200


def test_a_bind_beyond_loopback_without_a_token_refuses_to_start(demo_store):
    with pytest.raises(ValueError, match="give a token"):
        create_app(UiConfig(demo_store, host="0.0.0.0"))
    result = runner.invoke(cli, ["ui", "--store", demo_store, "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "serves other machines: give a token" in result.output


def test_a_missing_store_is_one_line_and_is_not_created(tmp_path: Path):
    missing = tmp_path / "none.db"
    result = runner.invoke(cli, ["ui", "--store", f"sqlite:///{missing}", "--port", "0"])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert not missing.exists()


def test_with_a_token_every_request_carries_it(demo_store, client_for):
    client = client_for(demo_store, host="0.0.0.0", token=TOKEN)
    denied = client.get("/")
    assert denied.status_code == 401 and TOKEN not in denied.text
    assert client.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    opened = client.get("/costs", params={"token": TOKEN}, follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/costs"
    assert TOKEN not in opened.headers["location"]
    page = client.get("/costs")  # the cookie the redirect set
    assert page.status_code == 200 and TOKEN not in page.text


def test_a_short_token_is_refused(demo_store):
    result = runner.invoke(cli, ["ui", "--store", demo_store, "--token", "short"])
    assert result.exit_code == 1 and "too short" in result.output
    assert "short" not in result.output.replace("too short", "")


# --- cancel --------------------------------------------------------------------------------------


def cancels(url: str, stream: str) -> list[CancelRequested]:
    store = open_store(url, read_only=True)
    try:
        return [e for e in store.read(stream) if isinstance(e, CancelRequested)]
    finally:
        store.close()


def test_cancel_is_refused_without_the_flag(mixed_store, client_for):
    client = client_for(mixed_store)
    page = client.get("/s/run-open").text
    assert "/cancel/run-open" not in page and "--allow-cancel" in page
    assert client.get("/cancel/run-open").status_code == 403
    assert client.post("/cancel/run-open", data={"by": "ann", "csrf": "x"}).status_code == 403
    assert cancels(mixed_store, "run-open") == []


def test_cancel_with_the_flag_asks_then_records_who_asked(mixed_store, client_for):
    client = client_for(mixed_store, allow_cancel=True)
    assert 'href="/cancel/run-open"' in client.get("/s/run-open").text
    form = client.get("/cancel/run-open").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
    here = {"origin": "http://127.0.0.1"}  # a browser's, posting this site's form
    stale = client.post("/cancel/run-open", data={"by": "ann", "csrf": "forged"}, headers=here)
    assert stale.status_code == 403 and cancels(mixed_store, "run-open") == []
    done = client.post(
        "/cancel/run-open",
        data={"by": "ann", "reason": "wrong data set", "csrf": csrf},
        headers=here,
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/s/run-open"
    [cancel] = cancels(mixed_store, "run-open")
    assert cancel.by.startswith("ann (flashfsm ui, from ")
    assert cancel.reason == "wrong data set"
    assert cancel.at >= 1_700_000_000.0


def test_cancel_is_only_for_runs(mixed_store, client_for):
    client = client_for(mixed_store, allow_cancel=True)
    assert client.get(stream_url(EVIL_STREAM, "cancel")).status_code == 409


# --- the index -----------------------------------------------------------------------------------


def test_a_refresh_reads_only_what_was_appended(mixed_store):
    index = StoreIndex(mixed_store)
    try:
        assert {c.stream for c in index.refresh()} == {EVIL_STREAM, "run-open"}
        assert index.refresh() == []
        store = open_store(mixed_store)
        try:
            at = 1_700_000_100.0
            status = StatusObserved(
                stream="run-open", seq=1, id=new_id(at), at=at, status="IN_QUEUE"
            )
            store.append("run-open", [status], 1)
        finally:
            store.close()
        [change] = index.refresh()
        assert change.stream == "run-open" and [e.seq for e in change.events] == [1]
        assert change.row["events"] == 2
    finally:
        index.close()


# --- the fleet ---------------------------------------------------------------------------------


def test_the_fleet_page_shows_replicas_leases_what_nobody_watches_and_watch_gaps(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    at = 1_700_000_000.0
    for name in ("run-held", "run-orphan"):
        open_run(url, name, at, handoff=True)
    store = open_store(url)
    try:
        store.join("replica-a", 60.0, ("job", "run"))
        [lease] = store.claim("replica-a", 60.0, 1, ("run",))
        assert lease.stream == "run-held"
        resumed = WatchStarted(
            stream="job-resumed",
            seq=1,
            id=new_id(at + 95),
            at=at + 95,
            watcher="replica-b",
            reattach=True,
        )
        first = StatusObserved(
            stream="job-resumed", seq=0, id=new_id(at + 5), at=at + 5, status="IN_PROGRESS"
        )
        store.append("job-resumed", [first, resumed], 0)
    finally:
        store.close()
    index = StoreIndex(url)
    try:
        index.refresh()
        page = fleet_page(Frame(url, True), index, at + 200).replace("\n", " ")
    finally:
        index.close()
    assert "<td>replica-a</td>" in page
    held = re.search(r'href="/s/run-held">run-held</a></td><td>run</td> <td>replica-a</td>', page)
    assert held, page
    assert "run-orphan</a>: waiting for a replica, nothing appended for 3 min 20 s" in page
    assert "run-held</a>:" not in page  # held: watched
    assert re.search(r"job-resumed</a></td> <td[^>]*>[^<]+</td><td[^>]*>1 min 30 s</td>", page)
    assert "<td>replica-b</td>" in page


def test_the_ui_serves_the_stores_metrics_equal_to_ls(demo_store, client_for):
    from prometheus_client.parser import text_string_to_metric_families

    scrape = client_for(demo_store).get("/metrics")
    assert scrape.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
    streams = {
        (s.labels["kind"], s.labels["state"]): s.value for s in families["flashfsm_streams"].samples
    }
    listed = json.loads(runner.invoke(cli, ["ls", "--json", "--store", demo_store]).output)
    expected: dict[tuple[str, str], float] = {}
    for row in listed["streams"]:
        key = (row["kind"], row["state"])
        expected[key] = expected.get(key, 0) + 1
    assert streams == expected


def test_a_refresh_folds_only_the_new_events_of_an_open_job(tmp_path: Path, monkeypatch):
    import flashfsm.ui.index as index_module

    url = f"sqlite:///{tmp_path}/open.db"
    at = 1_700_000_000.0
    store = open_store(url)
    try:
        first = [
            StatusObserved(
                stream="job-open", seq=n, id=new_id(at + n), at=at + n, status="IN_QUEUE"
            )
            for n in range(50)
        ]
        store.append("job-open", first, 0)
        index = StoreIndex(url)
        try:
            index.refresh()
            folded: list[int] = []
            real = index_module.replay

            def counting(events, state=None):
                events = list(events)
                folded.append(len(events))
                return real(events, state)

            monkeypatch.setattr(index_module, "replay", counting)
            more = [
                StatusObserved(
                    stream="job-open", seq=n, id=new_id(at + n), at=at + n, status="IN_PROGRESS"
                )
                for n in range(50, 60)
            ]
            store.append("job-open", more, 50)
            [change] = index.refresh()
            assert folded == [10]  # the 50 it had folded are not folded again
            assert change.row["state"] == replay([*first, *more]).state
            assert change.row["events"] == 60
            # priced a moment ago, it is not priced again yet: its row keeps its money cells
            assert "cost" in change.row and "billing_open" in change.row
            assert 'data-stream="job-open"' in row_html(change.row)
        finally:
            index.close()
    finally:
        store.close()


def test_a_store_that_cannot_be_read_is_said_on_every_page_until_it_reads_again(
    mixed_store, monkeypatch
):
    secret = "rpa_TroubleKey0123456789abcdef"
    monkeypatch.setenv("RUNPOD_API_KEY", secret)

    class Flaky(StoreIndex):
        """An index whose refreshes fail (with a secret in the error) while `broken`."""

        broken = False

        def refresh(self, *args: Any, **kwargs: Any) -> Any:
            if self.broken:
                raise OSError(f"disk I/O error (key {secret})")
            return super().refresh(*args, **kwargs)

    index = Flaky(mixed_store)
    app = create_app(UiConfig(mixed_store, poll_s=0.02), index=index)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert 'id="trouble"' not in client.get("/").text
        index.broken = True
        deadline = time.monotonic() + 10
        while 'id="trouble"' not in client.get("/").text and time.monotonic() < deadline:
            time.sleep(0.02)
        for path in ("/", "/costs", "/fleet", "/s/run-open"):
            text = client.get(path).text
            assert "the store cannot be read now: OSError: disk I/O error" in text, path
            assert secret not in text
        index.broken = False
        deadline = time.monotonic() + 10
        while 'id="trouble"' in client.get("/").text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert 'id="trouble"' not in client.get("/fleet").text
    index.close()
