"""The web view's live list and its count line, without a browser: the bill a filtered
list shows is the bill of the streams it lists (each run's once, a job a run queued inside
its run's), and the part a live page fetches again carries the same rows and counts as the
page (the browser tests in test_ui_browser.py show them joining without a reload)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from flashfsm.cli import app as cli
from flashfsm.cli.cost import total_json
from flashfsm.ui import pages
from flashfsm.ui.app import UiConfig, create_app
from flashfsm.ui.index import StoreIndex

runner = CliRunner()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreIndex]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-live')}/demo.db"
    result = runner.invoke(cli, ["demo", "--store", url, "--tag", "1ea42"])
    assert result.exit_code == 0, result.output
    ix = StoreIndex(url)
    ix.refresh()
    yield ix
    ix.close()


def test_the_whole_lists_bill_is_the_stores_counting_each_run_once(index: StoreIndex) -> None:
    rows = index.rows()
    assert any(index.entry(r["stream"]).run for r in rows)  # jobs inside runs are listed
    whole = total_json(index.ledgers())["money"]
    assert whole and pages.shown_bill(index, rows) == pytest.approx(whole)


def test_a_filtered_lists_bill_is_what_it_lists(index: StoreIndex) -> None:
    rows = index.rows()
    run = next(r for r in rows if r["kind"] == "run" and "stall" in r["stream"])
    jobs = [r for r in rows if index.entry(r["stream"]).run == run["stream"]]
    assert jobs
    assert pages.shown_bill(index, [run]) == pytest.approx(run["cost"])
    assert pages.shown_bill(index, [run, *jobs]) == pytest.approx(run["cost"])  # not twice
    alone = sum(j["cost"] for j in jobs)
    assert pages.shown_bill(index, jobs) == pytest.approx(alone)
    assert 0 < pages.shown_bill(index, [run]) < total_json(index.ledgers())["money"]


def test_a_billed_row_without_a_price_makes_the_bill_unpriced(index: StoreIndex) -> None:
    row = next(r for r in index.rows() if r["kind"] == "run")
    unpriced = {**row, "stream": "run-unpriced", "cost": None, "billed_s": 60.0}
    assert pages.shown_bill(index, [row, unpriced]) is None
    assert pages.shown_bill(index, [{**unpriced, "billed_s": 0.0}]) == 0.0


def test_the_live_part_carries_the_pages_rows_and_counts(index: StoreIndex) -> None:
    app = create_app(UiConfig(index.url, poll_s=0.05), index=index)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        query = "kind=run&sort=stream"
        answer = client.get(f"/?{query}&part=rows")
        page = client.get(f"/?{query}").text
        counts = json.loads(answer.headers["X-Flashfsm-Counts"])
        runs = [r for r in index.rows() if r["kind"] == "run"]
        assert counts["shown"] == str(len(runs)) and counts["total"] == str(len(index.rows()))
        assert counts["bill"] == pages._money(pages.shown_bill(index, runs))
        assert f'<span id="shown-bill">{counts["bill"]}</span>' in page
        assert answer.text.count("<tr") == len(runs) and answer.text.split("<tr")[1] in page
        for name in ("costs", "fleet"):
            body = client.get(f"/{name}?part=body").text
            assert "<html" not in body and body.lstrip().startswith("<h1>")
            assert body.strip() in client.get(f"/{name}").text


def test_a_run_whose_cancel_waits_reads_cancel_pending_until_it_ends(tmp_path) -> None:
    from flashfsm import open_store
    from flashfsm.cli.store import state_text, stream_row
    from flashfsm.events.models import CancelRequested, Candidate, RunConcluded, RunStarted
    from flashfsm.ids import new_id

    at = 1_700_000_000.0
    head = RunStarted(
        stream="run-x", seq=0, id=new_id(at), at=at, run_id="x",
        candidates=(Candidate(gpu_class="L40S", price_per_hour=0.5),),
    )  # fmt: skip
    asked = CancelRequested(stream="run-x", seq=1, id=new_id(at + 1), at=at + 1, by="ann")
    ended = RunConcluded(
        stream="run-x", seq=2, id=new_id(at + 2), at=at + 2, ok=False, failure="cancelled"
    )
    assert "cancel_pending" not in stream_row("run-x", [head])
    row = stream_row("run-x", [head, asked])
    assert row["cancel_pending"] is True and state_text(row) == "cancel pending"
    waiting = state_text({**row, "waiting": "no live replica"})
    assert waiting == "cancel pending (waiting: no live replica)"
    done = stream_row("run-x", [head, asked, ended])
    assert "cancel_pending" not in done and state_text(done) != "cancel pending"
    url = f"sqlite:///{tmp_path}/events.db"
    store = open_store(url)
    try:
        store.append("run-x", [head, asked], 0)
    finally:
        store.close()
    listed = runner.invoke(cli, ["ls", "--store", url, "--json"])
    assert listed.exit_code == 0, listed.output
    (only,) = json.loads(listed.output)["streams"]
    assert only["cancel_pending"] is True
    assert "cancel pending" in runner.invoke(cli, ["ls", "--store", url]).output
