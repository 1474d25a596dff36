"""`explain` is one view, rendered three ways: text, JSON and the web view's HTML.

`flashfsm.display.explain.explain_view` gathers an explanation once; `flashfsm explain`
prints it, `explain --json` writes it and a stream's page renders it through its template.
Here, for every example log, the three renderings name the same rule, state, evidence and
worker, every line the text says is said on the page too, a log is read and priced once
per rendering, and outside text from a log is escaped in the markup.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from flashfsm import example_logs
from flashfsm.adapters.jsonl import read_jsonl_file
from flashfsm.cli.common import open_source
from flashfsm.cli.logs import explain_json
from flashfsm.display import explain as explain_module
from flashfsm.display.explain import ExplainView, explain_view, print_explain_view
from flashfsm.display.text import captured
from flashfsm.events.models import Concluded, StatusObserved, WorkerLogObserved
from flashfsm.postmortem import explain as ex
from flashfsm.ui.index import StoreIndex
from flashfsm.ui.pages import explain_html, live_html
from tests.store_support import write_stream

EXAMPLES = sorted(example_logs().rglob("*.jsonl"))
#: The labels a text line of `explain` starts with (the page says them as its own markup).
LABELS = ("why: ", "because: ", "evidence: ", "detail: ", "worker: ", "worker log: ", "timer ")
HOSTILE = "<script>alert(1)</script>"


def section_text(page: str) -> str:
    """The text of a page's explain section: its tags dropped, entities read, white space
    collapsed."""
    found = re.search(r'<section id="explain" class="explain">(.*?)</section>', page, re.S)
    assert found is not None, "no explain section"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).split())


def said_phrases(printed: str, name: str) -> list[str]:
    """What each line `explain` prints says: its indent, its label, its log gutter and a
    leading "run NAME: " dropped, white space collapsed."""
    phrases = []
    for line in printed.splitlines():
        said = line.strip().removeprefix("│ ").removeprefix(f"run {name}: ")
        for label in LABELS:
            said = said.removeprefix(label)
        phrases.append(" ".join(said.split()))
    return [p for p in phrases if p]


def unspoken(printed: str, page: str, name: str) -> list[str]:
    """The phrases of the printed text a page's explain section does not say."""
    text = section_text(page)
    return [p for p in said_phrases(printed, name) if p not in text]


def rendered(path: Path) -> tuple[ExplainView, str, dict, str]:
    """An example log's view, and it printed, as JSON and as markup."""
    view = explain_view(open_source(str(path), None), lambda: None)
    with captured() as text:
        print_explain_view(view)
    return view, text.get(), explain_json(view), explain_html(view, view.name)


def test_the_examples_are_jobs_and_runs():
    assert {explain_view(open_source(str(p), None), lambda: None).kind for p in EXAMPLES} == {
        "job",
        "run",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_text_json_and_html_name_the_same_rule_state_evidence_and_worker(path: Path):
    view, printed, data, page = rendered(path)
    e = view.explanation
    assert e is not None and e.verdict is not None
    seqs = [i["seq"] for i in data["evidence"]]
    assert data["rule"] == e.rule and data["state"] == e.state and seqs
    assert f" by rule {e.rule} (step " in printed and f": {e.state} (" in printed
    assert f'<b class="rule">{e.rule}</b>' in page
    assert f'<span class="{"ok" if e.verdict.ok else "bad"}">{e.state}</span>' in page
    for seq in seqs:
        assert f"  evidence: seq {seq} at " in printed
        assert re.search(rf'<a href="[^"#]*#ev-{seq}">seq {seq}</a>', page), seq
    worker = data["worker"]
    if worker is not None:
        assert f"  worker: {worker['text']}" in printed and worker["text"] in section_text(page)
    assert data["stream"] == view.stream and f"{view.stream}: " in printed
    assert unspoken(printed, page, view.name) == []


def test_a_runs_walk_cost_and_failed_attempts_are_in_all_three():
    path = example_logs() / "worker" / "run-oom.jsonl"
    view, printed, data, page = rendered(path)
    assert view.kind == "run" and view.run is not None and view.ledger is not None
    failed = [j["stream"] for j in data["failed_attempts"]]
    assert failed == [j.stream for j in view.failed] == ["job-oom-s0-a0"]
    assert f"run {view.name}: attempt 0 (job-oom-s0-a0): " in printed
    assert "attempt 0 (job-oom-s0-a0): " in section_text(page)
    walk = [w["reason"] for w in data["walk"]]
    assert walk and all(r in printed and r in page for r in walk)
    assert data["cost"]["billed_s"] == view.ledger.billed_s
    attempts = [f["attempt"] for f in data["cost"]["failures"]]
    assert attempts == [a.attempt for a in view.ledger.failed] == [0, 1]
    for a in attempts:
        assert f"  attempt {a} " in printed and f"attempt {a} " in section_text(page)
    # the job page links its evidence to the job stream's rows, not the run's
    assert f'href="/s/{view.stream}#ev-' in page


def test_a_log_is_read_explained_and_priced_once_per_rendering(monkeypatch):
    from typer.testing import CliRunner

    from flashfsm.cli import app

    calls: dict[str, int] = {"explain": 0, "ledger": 0}
    real_explain, real_ledger = ex.explain, explain_module.source_ledger

    def counted_explain(*args, **kwargs):
        calls["explain"] += 1
        return real_explain(*args, **kwargs)

    def counted_ledger(*args, **kwargs):
        calls["ledger"] += 1
        return real_ledger(*args, **kwargs)

    monkeypatch.setattr(ex, "explain", counted_explain)
    monkeypatch.setattr(explain_module, "source_ledger", counted_ledger)
    run = str(example_logs() / "run-stall.jsonl")
    for args in (["explain", run], ["explain", run, "--json"]):
        calls.update(explain=0, ledger=0)
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert calls == {"explain": 1, "ledger": 1}, args


def hostile_store(tmp_path: Path) -> tuple[str, str]:
    """A store holding one example failed job whose status error, verdict detail and worker
    log hold HTML, a script and a terminal escape."""
    events = read_jsonl_file(example_logs() / "worker" / "job-oom-s0-a1.jsonl")
    evil = []
    for e in events:
        if isinstance(e, StatusObserved) and e.status == "FAILED":
            e = e.model_copy(update={"error": f"{HOSTILE} \x1b[31mred"})
        elif isinstance(e, WorkerLogObserved):
            e = e.model_copy(
                update={"lines": (*e.lines, f"<img src=x onerror=alert(2)> {HOSTILE}")}
            )
        elif isinstance(e, Concluded):
            e = e.model_copy(update={"detail": f"[FAILED] {HOSTILE}"})
        evil.append(e)
    url = f"sqlite:///{tmp_path}/events.db"
    write_stream(url, events[0].stream, evil)
    return url, events[0].stream


def test_hostile_text_from_a_log_is_escaped_in_the_markup(tmp_path: Path):
    url, stream = hostile_store(tmp_path)
    index = StoreIndex(url, wall=lambda: 2_000_000_000.0)
    try:
        index.refresh()
        entry = index.entry(stream)
        assert entry is not None
        page = live_html(index, entry, index.read(stream), 2_000_000_000.0)
    finally:
        index.close()
    assert "<script>" not in page and "<img" not in page
    section = re.search(r'<section id="explain".*?</section>', page, re.S)
    assert section is not None
    markup = section.group(0)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markup
    assert "&lt;img src=x onerror=alert(2)&gt;" in markup  # the worker's log line, as text
    assert "\x1b" not in markup and "\\x1b[31mred" in markup  # the escape, written out
    assert f"detail[FAILED] {HOSTILE}" in section_text(page)
