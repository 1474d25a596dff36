"""`flashfsm cost`, `explain` and the timeline picture agree with the ledger.

The example runs (`flashfsm.example_logs()`, simulator runs priced by their candidates) are
costed by the CLI (text and JSON) and drawn; the picture is laid out in headless Chromium, and the
cost each lane and the header show is read back from the browser and compared with the
ledger's numbers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import render
from flashfsm.adapters.jsonl import read_jsonl_file
from flashfsm.cli import app
from flashfsm.postmortem.ledger import ledger
from tests.test_ledger import EXAMPLES, load
from tests.test_render import CHROMIUM
from tests.test_render_chromium import REPORT_JS, SVG_BOX_JS, chromium_measure

RUNS = ("run-stall", "run-walk", "run-crashloop", "run-codeerror")


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(app, args, env={"COLUMNS": "80"})


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    for path in EXAMPLES.glob("*.jsonl"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def test_cost_json_is_the_ledger(examples: Path) -> None:
    files = [str(examples / f"{name}.jsonl") for name in RUNS]
    result = invoke(["cost", *files, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for led_json, name in zip(out["ledgers"], RUNS, strict=True):
        led = ledger(read_jsonl_file(EXAMPLES / f"{name}.jsonl"), load)
        assert led_json["money"] == pytest.approx(led.money())
        assert led_json["waste_money"] == pytest.approx(led.waste_money)
        assert led_json["billed_s"] == pytest.approx(led.billed_s)
        for a_json, a in zip(led_json["attempts"], led.attempts, strict=True):
            pieces = [(p.cause.value, p.start, p.end, p.billed) for p in a.pieces]
            assert [(p["cause"], p["start"], p["end"], p["billed"]) for p in a_json["pieces"]] == (
                pieces
            )
    total = sum(ledger(read_jsonl_file(EXAMPLES / f"{n}.jsonl"), load).money() or 0 for n in RUNS)
    assert out["total"]["money"] == pytest.approx(total)
    assert sum(g["money"] or 0 for g in out["groups"]) == pytest.approx(total)


@pytest.mark.parametrize("by", ["cause", "gpu", "rule"])
def test_cost_text_fits_80_columns_and_names_the_total(examples: Path, by: str) -> None:
    files = [str(examples / f"{name}.jsonl") for name in RUNS]
    result = invoke(["cost", *files, "--by", by])
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output
    assert "total: 4 stream(s), 7 attempt(s)" in result.output


def test_a_bare_job_has_no_money_without_a_price(examples: Path) -> None:
    job = str(examples / "job-stall-s0-a0.jsonl")
    unknown = json.loads(invoke(["cost", job, "--json"]).output)
    assert unknown["ledgers"][0]["money"] is None
    assert "unpriced" in invoke(["cost", job]).output
    priced = json.loads(invoke(["cost", job, "--price", "3.6", "--json"]).output)
    assert priced["ledgers"][0]["money"] == pytest.approx(priced["ledgers"][0]["billed_s"] / 1000)


@pytest.mark.parametrize(
    "args", [["--by", "colour"], ["--since", "soon"], ["--since", "1d", "run-x"], ["run-x"]]
)
def test_bad_cost_input_is_one_line_and_exit_1(tmp_path: Path, args: list[str]) -> None:
    store = f"sqlite:///{tmp_path}/missing.db"
    result = CliRunner().invoke(app, ["cost", *args, "--store", store], env={"COLUMNS": "1000"})
    assert result.exit_code == 1 and result.output.startswith("error:"), result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "missing.db").exists()


def test_explain_on_a_run_says_what_its_failures_cost(examples: Path) -> None:
    result = invoke(["explain", str(examples / "run-stall.jsonl")])
    led = ledger(read_jsonl_file(EXAMPLES / "run-stall.jsonl"), load)
    text = " ".join(result.output.split())  # wrapped at 80 columns
    assert f"its failures threw away 25 min 10 s ${led.waste_money:.2f}" in text
    data = json.loads(invoke(["explain", str(examples / "run-stall.jsonl"), "--json"]).output)
    assert data["cost"]["waste_money"] == pytest.approx(led.waste_money)
    assert [f["verdict"] for f in data["cost"]["failures"]] == ["STALLED (stall)"]


READ_COST = (
    SVG_BOX_JS
    + """
  const out = {
    lanes: [...svg.querySelectorAll("g.cost")].map((g) => ({
      lane: g.dataset.lane,
      label: g.querySelector("g.label").dataset.label,
      shown: [...g.querySelectorAll("text.lane-cost")].map((t) => t.textContent).join(" "),
      pieces: [...g.querySelectorAll("rect.cost-piece")].map((r) => ({
        cause: r.dataset.cause, box: box(r)})),
    })),
    total: [...svg.querySelectorAll("text.total-cost")].map((t) => t.textContent).join(" "),
    cells: [...document.querySelectorAll("td.cost")].map((td) => td.innerText.trim()),
  };
"""
    + REPORT_JS
)


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing")
@pytest.mark.parametrize("name", ["run-stall", "run-codeerror"])
def test_the_picture_shows_the_ledgers_numbers_in_chromium(tmp_path: Path, name: str) -> None:
    events = read_jsonl_file(EXAMPLES / f"{name}.jsonl")
    led = ledger(events, load)
    pic = render.picture(events, load)
    got = chromium_measure(render.html(pic), tmp_path, name, READ_COST)
    assert got["total"] == render.total_text(led)
    assert f"${led.money():.2f}" in got["total"]
    assert got["cells"] == [render.cost_text(a) for a in led.attempts] + [render.total_text(led)]
    for lane, a in zip(got["lanes"], led.attempts, strict=True):
        assert lane["label"] == lane["shown"] == render.cost_text(a)  # shown whole
        billed = [p for p in a.pieces if p.billed]
        assert [p["cause"] for p in lane["pieces"]] == [p.cause.value for p in billed]
        widths = [p["box"][2] for p in lane["pieces"]]
        if billed and len(billed) > 1:  # the strip's pieces are drawn in proportion
            longest = max(range(len(billed)), key=lambda i: billed[i].seconds)
            assert widths[longest] == max(widths)
