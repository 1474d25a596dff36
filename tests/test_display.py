"""One display layer: a stream's page and the command tell one story.

`flashfsm.display` is what the CLI and the web view both show. A stream's page shows
`explain` and the ledger from the same views and functions the commands print them with
(`flashfsm.display.explain`, `flashfsm.display.ledger`), never by running a command: every
line `flashfsm explain STREAM` prints (piped: no line wrapped) is said in the page's explain
section, in its markup, and so is every line of the bill `flashfsm cost STREAM` prints in
the page's bill, for every kind of stream the library writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm import open_store
from flashfsm.cli import app
from flashfsm.display import text
from flashfsm.ui.index import StoreIndex
from flashfsm.ui.pages import live_html
from tests.test_cli_streams import STREAM_WRITERS
from tests.test_explain_view import unspoken
from tests.test_ledger_view import unspoken as unsaid_bill

runner = CliRunner()
WALL = 2_000_000_000.0


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding a stream of every kind the library writes (jobs, runs, a sweeper)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('display')}/events.db"
    store = open_store(url)
    try:
        for writer in STREAM_WRITERS:
            writer.write(store)
    finally:
        store.close()
    return url


@pytest.fixture(scope="module")
def index(store_url: str) -> Iterator[StoreIndex]:
    ix = StoreIndex(store_url, wall=lambda: WALL)
    ix.refresh()
    yield ix
    ix.close()


def test_the_store_holds_every_kind_of_stream(index: StoreIndex):
    assert {row["kind"] for row in index.rows()} == {"job", "run", "sweeper"}
    assert "run-undeployed" in {row["stream"] for row in index.rows()}  # no job: the run


def test_every_streams_page_explains_as_the_command_does(store_url, index, piped):
    for row in index.rows():
        entry = index.entry(row["stream"])
        assert entry is not None
        page = live_html(index, entry, index.read(row["stream"]), WALL)
        printed = runner.invoke(app, ["explain", row["stream"], "--store", store_url])
        assert printed.stdout.strip(), printed.output
        assert unspoken(printed.stdout, page, row["stream"]) == [], row["stream"]


def test_a_pages_bill_is_what_cost_prints_for_the_stream(store_url, index, piped):
    billed = 0
    for row in index.rows():
        entry = index.entry(row["stream"])
        assert entry is not None
        if row["kind"] == "sweeper" or entry.run is not None:
            continue  # (a run's job shows its attempt's share of the run's bill)
        page = live_html(index, entry, index.read(row["stream"]), WALL)
        if '<section id="ledger"' not in page:
            continue  # nothing billed to show
        printed = runner.invoke(app, ["cost", row["stream"], "--store", store_url])
        assert printed.stdout.strip(), printed.output
        assert unsaid_bill(printed.stdout, page) == [], row["stream"]
        billed += 1
    assert billed >= 3


def test_the_display_layer_imports_no_front_end():
    for path in sorted(Path(text.__file__).parent.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) flashfsm\.(cli|ui|metrics)\b", source, re.M), path
