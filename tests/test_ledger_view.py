"""A stream's bill is one view, rendered as text and as the web view's HTML.

`flashfsm.display.ledger.ledger_view` gathers a run's or job's bill once; `flashfsm cost
STREAM` prints it and a stream's page renders it through its template (`cost.html`). Here,
for every example log, both renderings name the same attempts, states, billed time and
money (the ones `cost --json` writes), every line the command prints is said on the page,
and outside text in a bill (a stream's name, a GPU's, a rule) is escaped in the markup.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm import example_logs
from flashfsm.adapters.jsonl import read_jsonl_file
from flashfsm.cli import app
from flashfsm.cli.common import open_source
from flashfsm.display.ledger import LedgerView, ledger_view, print_ledger_view
from flashfsm.display.sources import source_ledger
from flashfsm.display.text import captured
from flashfsm.events.models import JobSubmitted
from flashfsm.postmortem.ledger import (
    AttemptLedger,
    Cause,
    Ledger,
    Outcome,
    Piece,
    money_text,
)
from flashfsm.render import duration_text
from flashfsm.ui.index import StoreIndex
from flashfsm.ui.pages import ledger_html, live_html
from tests.store_support import write_stream

runner = CliRunner()
EXAMPLES = sorted(example_logs().rglob("*.jsonl"))
#: The labels a line of a bill starts with (the page says them as its own markup).
LABELS = ("billed ", "unbilled: ", "open bill: ", "not recorded: ")
HOSTILE = "<script>alert(1)</script>"
WALL = 2_000_000_000.0

#: An attempt's line and its billed line, as printed and as marked up.
TEXT_ATTEMPT = re.compile(r"^  (attempt \d+|job) on (.*) (at \$\S+/h|\(unpriced\)): (.*)$", re.M)
TEXT_BILLED = re.compile(r"^    billed (.+?) (\$[\d.,]+|unpriced)(?::|$)", re.M)
HTML_ATTEMPT = re.compile(
    r'<p class="attempt"><b>(?:<a href="[^"]*">)?(.*?)(?:</a>)?</b> on (.*?) '
    r'(at \$\S+/h|\(unpriced\)): <span class="(?:ok|bad|open)">(.*?)</span></p>'
)
HTML_BILLED = re.compile(r"<dt>billed</dt><dd>(.+?) (\$[\d.,]+|unpriced)(?::|</dd>)")


def section_text(page: str) -> str:
    """The text of a page's bill: its tags dropped, entities read, white space collapsed."""
    found = re.search(r'<section id="ledger" class="ledger">(.*?)</section>', page, re.S)
    assert found is not None, "no bill on the page"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).split())


def said_phrases(printed: str) -> list[str]:
    """What each line of a printed bill says: its indent and its label dropped, white space
    collapsed (the total after it is not a stream's bill)."""
    phrases = []
    for line in printed.split("\ntotal:")[0].splitlines():
        said = line.strip()
        for label in LABELS:
            said = said.removeprefix(label)
        phrases.append(" ".join(said.split()))
    return [p for p in phrases if p]


def unspoken(printed: str, page: str) -> list[str]:
    """The phrases of a printed bill a page's bill does not say."""
    shown = section_text(page)
    return [p for p in said_phrases(printed) if p not in shown]


def example_ledger(path: Path) -> Ledger:
    return source_ledger(open_source(str(path), None), None, lambda: None)


def test_the_examples_bill_jobs_and_runs_with_and_without_a_price():
    ledgers = [example_ledger(p) for p in EXAMPLES]
    assert {led.kind for led in ledgers} == {"job", "run"}
    assert {led.priced for led in ledgers if led.billed_s} == {True, False}
    assert any(led.open_attempts for led in ledgers)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(example_logs())))
def test_text_and_html_name_the_same_attempts_states_time_and_money(path: Path, piped):
    led = example_ledger(path)
    view = ledger_view(led)
    assert view.attempts, "an example with nothing to bill"
    page = ledger_html(view)
    result = runner.invoke(app, ["cost", str(path)])
    assert result.exit_code == 0, result.output
    printed = result.stdout
    with captured() as text:
        print_ledger_view(view)
    assert printed.split("\ntotal:")[0] + "\n" == text.get()  # the command prints the view

    said = [(m[0], m[3]) for m in TEXT_ATTEMPT.findall(printed)]
    shown = [(html.unescape(m[0]), html.unescape(m[3])) for m in HTML_ATTEMPT.findall(page)]
    assert said == shown == [(a.name, a.label) for a in view.attempts]
    assert [a.label for a in view.attempts] == [a.label for a in led.attempts]
    billed = [(duration_text(a.billed_s), money_text(a.money())) for a in led.attempts]
    assert TEXT_BILLED.findall(printed) == HTML_BILLED.findall(page) == billed
    head = f"{led.stream}: {led.state or 'open'}, {len(led.attempts)} attempt(s), billed "
    head += f"{duration_text(led.billed_s)} {money_text(led.money())}"
    assert printed.startswith(head) and section_text(page).startswith(head)
    assert unspoken(printed, page) == []

    # `cost --json` writes the ledger the view was gathered from
    data = json.loads(runner.invoke(app, ["cost", str(path), "--json"]).stdout)
    (bill,) = data["ledgers"]
    assert bill["billed_s"] == view.billed_s and bill["money"] == view.money
    assert [(a["billed_s"], a["money"]) for a in bill["attempts"]] == [
        (a.billed_s, a.money) for a in view.attempts
    ]
    states = [a["outcome"]["state"] if a["outcome"] else "open" for a in bill["attempts"]]
    assert states == [a.state for a in view.attempts]


def hostile_ledger() -> LedgerView:
    """A run's bill whose stream, job stream, GPU and rule are markup and a terminal escape."""
    evil = f"{HOSTILE}\x1b[31m"
    attempt = AttemptLedger(
        attempt=0,
        stream=f"job-{evil}",
        gpu_class=f"gpu-{evil}",
        provider="runpod",
        price_per_hour=0.99,
        start=1_700_000_000.0,
        end=1_700_000_060.0,
        pieces=(Piece(Cause.FAILED, 1_700_000_000.0, 1_700_000_060.0, True),),
        outcome=Outcome(1_700_000_060.0, f"FAILED-{evil}", False, "worker_failed", evil),
    )
    return ledger_view(Ledger(f"run-{evil}", "run", (attempt,), f"job_failed-{evil}"))


def test_hostile_text_in_a_bill_is_escaped_in_the_markup():
    view = hostile_ledger()
    page = ledger_html(view)
    assert "<script>" not in page and "\x1b" not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m"
    for said in ("run-", "job_failed-", "gpu-", "FAILED-"):
        assert f"{said}{escaped}" in page, said
    assert 'href="/s/job-%3Cscript%3Ealert%281%29%3C%2Fscript%3E%1B%5B31m"' in page
    with captured() as text:
        print_ledger_view(view)
    assert unspoken(text.get(), page) == []


def test_a_hostile_streams_page_escapes_its_bill(tmp_path: Path, piped):
    events = read_jsonl_file(example_logs() / "worker" / "job-oom-s0-a1.jsonl")
    stream = f"job-{HOSTILE}"
    evil = []
    for e in events:
        e = e.model_copy(update={"stream": stream})
        if isinstance(e, JobSubmitted):
            e = e.model_copy(update={"gpu_class": f"{HOSTILE}\x1b[31m"})
        evil.append(e)
    url = f"sqlite:///{tmp_path}/events.db"
    write_stream(url, stream, evil)
    index = StoreIndex(url, wall=lambda: WALL)
    try:
        index.refresh()
        entry = index.entry(stream)
        assert entry is not None
        page = live_html(index, entry, index.read(stream), WALL)
    finally:
        index.close()
    assert "<script>" not in page and "\x1b" not in page
    bill = re.search(r'<section id="ledger".*?</section>', page, re.S)
    assert bill is not None
    assert "<b>job-&lt;script&gt;alert(1)&lt;/script&gt;</b>" in bill.group(0)
    assert " on &lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m (unpriced): " in bill.group(0)
    printed = runner.invoke(app, ["cost", stream, "--store", url])
    assert printed.exit_code == 0, printed.output
    assert unspoken(printed.stdout, page) == []
