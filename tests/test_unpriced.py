"""Unpriced never looks free (issue 38, point 5).

A run handed off by spec (`runs add SPEC.json`, `hand_off_spec`) carries the prices its
candidates were given; a candidate given none (the default candidate, the spec's GPU class
alone, is one) has `price_per_hour` None, and its attempts' money is "unpriced" in every
surface: `flashfsm cost` (text and JSON), the ledger, the store's metrics facts and the web
view — never $0. A priced candidate still prices. Its `RunStarted` is v2 (a library that
knows only v1 refuses it by version rather than read $0); a v1 log reads as it always did.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from flashfsm import open_store
from flashfsm.cli import app
from flashfsm.cli.cost import rate_text, store_ledgers
from flashfsm.events.codec import decode, encode
from flashfsm.events.errors import EventDecodeError
from flashfsm.events.models import (
    Candidate,
    CapacityEvidence,
    EndpointDeleted,
    RunConcluded,
    RunStarted,
    StatusObserved,
)
from flashfsm.fsm.capacity import CapacityPolicy, rank, ranking_reasons, static_order
from flashfsm.metrics import read_store_facts
from flashfsm.postmortem.ledger import money_text
from flashfsm.submit import hand_off_spec, spec_intake
from flashfsm.ui.index import StoreIndex
from flashfsm.ui.pages import Frame, row_html
from flashfsm.ui.store_pages import costs_page
from tests.billing_logs import CENT_A_SECOND, COMPLETED, Job, Stream, T, attempt, ended

SPEC = {"run_id": "r-u", "gpu_class": "L40S", "worker_image": "team/t:1"}
RUN = "run-r-u-s0"
JOB = "job-r-u-s0-a0"
#: The attempt's worker is billed from its start (15 s in) to the endpoint's delete (132 s).
BILLED_S = 117.0

runner = CliRunner()


def hand_off_and_bill(url: str, data: dict[str, Any]) -> None:
    """`hand_off_spec(data)` into the store at `url`, then what a replica that claimed the
    run records of one attempt that trained and billed: the run's attempt events and its
    job's log (as `tests/billing_logs.py`'s `clean` scenario, after the hand-off)."""
    result = hand_off_spec(data, url)
    assert result.stream == RUN and result.detail == "handed to the fleet"
    store = open_store(url)
    try:
        recorded = store.read(RUN)
        b = recorded[-1].at - T + 1  # (every time below: seconds after the hand-off)
        run = Stream(RUN, list(recorded))
        job = Job(JOB, endpoint="ep-u", job_id="j-u")
        attempt(run, job, b, 0, deployed=b + 5, queued=b + 10)
        job.submit(b + 10).queued(b + 10, probe=True).queued(b + 20)
        job.picked_up(b + 30, "w1", started=b + 15).beat(b + 30, "boot", None, b + 25)
        job.polls(b + 40, b + 60).beat(b + 70, "train", 0, b + 65).polls(b + 70, b + 120)
        job.add(StatusObserved, b + 130, **COMPLETED).verdict(b + 130, "SUCCEEDED", "completed")
        ended(run, b + 130, 0, rule="completed")
        run.add(EndpointDeleted, b + 132, endpoint_id="ep-u", reason="run succeeded")
        run.add(RunConcluded, b + 132, ok=True, attempts=1)
        store.join("replica-a", 60.0, ("job", "run"))
        [lease] = store.claim("replica-a", 60.0, 1, ("run",))
        assert lease.stream == RUN
        store.append(JOB, job.events, 0, lease=lease)
        store.append(RUN, run.events[len(recorded) :], len(recorded), lease=lease)
    finally:
        store.close()


def cost(url: str, *args: str) -> str:
    result = runner.invoke(app, ["cost", "--store", url, *args], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


def web(url: str) -> tuple[str, dict[str, str]]:
    """The web view's costs page, and the runs list's row of each of the two streams."""
    index = StoreIndex(url)
    try:
        index.refresh()
        page = costs_page(Frame(url, True), index)
        rows = {}
        for name in (RUN, JOB):
            entry = index.entry(name)
            assert entry is not None
            rows[name] = row_html(entry.row)
    finally:
        index.close()
    return page, rows


def table_rows(page: str, title: str) -> dict[str, tuple[str, ...]]:
    """The costs page's table "By `title`": each row's key to its time, billed time, money
    and waste cells."""
    table = page.split(f"<h2>By {title}</h2>")[1].split("</table>")[0]
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], re.S):
        key, _attempts, *rest = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        out[key] = tuple(rest)
    return out


def cost_cell(row: str) -> str:
    """The runs list's cost cell of a row (the ninth column)."""
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return re.sub(r"<[^>]+>", "", cells[8]).strip()


# --- a spec hand-off without a price -------------------------------------------------------


def test_a_spec_hand_off_without_a_price_is_unpriced_in_cost_ledger_metrics_and_view(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/events.db"
    hand_off_and_bill(url, SPEC)

    store = open_store(url, read_only=True)
    try:
        started = store.read(RUN)[0]
        logs = {name: store.read(name) for name in store.streams()}
    finally:
        store.close()
    assert isinstance(started, RunStarted)
    assert started.candidates == (Candidate(gpu_class="L40S"),) and started.v == 2
    assert started.candidates[0].price_per_hour is None

    [led] = store_ledgers(logs, None)  # (the run; its job stream counts through it)
    assert led.billed_s == pytest.approx(BILLED_S)
    assert led.money() is None and led.waste_money is None and not led.priced
    assert [a.price_per_hour for a in led.attempts] == [None]

    text = cost(url)
    assert re.search(rf"{RUN}: SUCCEEDED, 1 attempt\(s\), billed 1 min 57 s unpriced", text)
    assert "billed 1 min 57 s unpriced" in text.split("total:")[1]
    assert "$0" not in text
    detail = cost(url, RUN)
    assert "attempt 0 on L40S (unpriced): SUCCEEDED" in detail
    assert "billed 1 min 57 s unpriced" in detail and "$0" not in detail
    as_json = json.loads(cost(url, "--json"))
    [run_json] = as_json["ledgers"]
    assert run_json["money"] is None and run_json["priced"] is False
    assert run_json["attempts"][0]["price_per_hour"] is None
    assert as_json["total"]["money"] is None

    facts = read_store_facts(url)
    assert facts.unpriced_attempts == 1
    assert sum(facts.billed_dollars.values()) == 0.0  # (its money is in no dollar figure)

    page, rows = web(url)
    summary = re.search(r'<p class="count">(.*?)</p>', page, re.S)
    assert summary is not None
    assert re.sub(r"\s+", " ", summary.group(1)) == (
        "1 run(s) and lone job(s) · billed unpriced · wasted unpriced"
    )
    causes = table_rows(page, "cause")
    billed = {k for k, (_, billed_s, _, _) in causes.items() if billed_s != "0 s"}
    assert billed == {"cold_start", "training", "idle"}
    for key in billed:  # (unbilled time, deploy and queue, is $0: nobody paid for it)
        assert causes[key][2] == "unpriced", causes
    [(_, _, gpu_money, _)] = table_rows(page, "GPU").values()
    assert gpu_money == "unpriced"
    assert cost_cell(rows[RUN]) == cost_cell(rows[JOB]) == "unpriced"


def test_a_priced_candidate_still_prices_everywhere(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/events.db"
    priced = {"gpu_class": "L40S", "price_per_hour": CENT_A_SECOND, "vram_gb": 48}
    hand_off_and_bill(url, {**SPEC, "candidates": [priced]})
    money = BILLED_S * CENT_A_SECOND / 3600  # $1.17

    store = open_store(url, read_only=True)
    try:
        started = store.read(RUN)[0]
    finally:
        store.close()
    assert isinstance(started, RunStarted) and started.v == 1  # as before unpriced existed
    assert started.candidates[0].price_per_hour == CENT_A_SECOND

    text = cost(url)
    assert f"billed 1 min 57 s ${money:.2f}" in text and "unpriced" not in text
    as_json = json.loads(cost(url, "--json"))
    assert as_json["total"]["money"] == pytest.approx(money)
    facts = read_store_facts(url)
    assert facts.unpriced_attempts == 0
    assert sum(facts.billed_dollars.values()) == pytest.approx(money)
    page, rows = web(url)
    assert f"billed ${money:.2f}" in page and "unpriced" not in page
    assert cost_cell(rows[RUN]) == f"${money:.2f}"


def test_spec_intake_carries_each_candidates_price_and_none_where_none_was_given() -> None:
    assert spec_intake(SPEC)[2] == [Candidate(gpu_class="L40S", price_per_hour=None)]
    given = [{"gpu_class": "L40S", "price_per_hour": 0.99}, {"gpu_class": "H100"}]
    assert [c.price_per_hour for c in spec_intake({**SPEC, "candidates": given})[2]] == [
        0.99,
        None,
    ]
    zero = spec_intake({**SPEC, "candidates": [{"gpu_class": "L4", "price_per_hour": 0}]})
    assert zero[2][0].price_per_hour == 0.0  # a price of 0 given is a price


# --- the event ------------------------------------------------------------------------------


def started(*candidates: Candidate, **fields: Any) -> RunStarted:
    return RunStarted(
        stream="run-a", seq=0, id="e-0", at=T, run_id="a", candidates=candidates, **fields
    )


def test_an_unpriced_candidate_writes_run_started_v2_and_reads_back_unpriced() -> None:
    event = started(Candidate(gpu_class="L4", price_per_hour=0.4), Candidate(gpu_class="A10"))
    assert event.v == 2
    line = encode(event)
    assert json.loads(line)["candidates"][1]["price_per_hour"] is None
    assert decode(line) == event
    with pytest.raises(ValueError, match="RunStarted v2"):
        started(Candidate(gpu_class="A10"), v=1)


def test_a_v1_log_reads_as_it_always_did() -> None:
    event = started(Candidate(gpu_class="L4", price_per_hour=0.0))
    assert event.v == 1
    raw = json.loads(encode(event))
    assert decode(json.dumps(raw)).candidates[0].price_per_hour == 0.0  # 0.0 stays a price
    del raw["candidates"][0]["price_per_hour"]  # a v1 line without one: v1's default, 0.0
    assert decode(json.dumps(raw)).candidates[0].price_per_hour == 0.0
    raw["candidates"][0]["price_per_hour"] = None  # null is no v1 value
    with pytest.raises(EventDecodeError, match="RunStarted v2"):
        decode(json.dumps(raw))


# --- the walk's order -----------------------------------------------------------------------


def test_an_unpriced_candidate_ranks_after_the_priced_and_says_unpriced() -> None:
    walk = [
        Candidate(gpu_class="H100"),
        Candidate(gpu_class="A10", price_per_hour=0.6),
        Candidate(gpu_class="L4", price_per_hour=0.39),
    ]
    assert static_order(walk) == rank(walk, [], CapacityPolicy()) == (2, 1, 0)
    reasons = ranking_reasons(walk, None)
    assert [r.text.split(":")[0] for r in reasons] == [
        "1. runpod/L4 $0.39/h",
        "2. runpod/A10 $0.60/h",
        "3. runpod/H100 unpriced",
    ]
    assert all("None" not in r.text for r in reasons)
    starved = CapacityEvidence(gpu_class="L4", jobs=1, no_capacity=1, waited_s=310.0)
    assert rank(walk, [starved], CapacityPolicy()) == (1, 0, 2)  # starved still go last


@given(
    prices=st.lists(st.sampled_from([None, 0.0, 0.2, 0.4]), min_size=1, max_size=6),
    vram=st.lists(st.sampled_from([0.0, 24.0, 80.0]), min_size=6, max_size=6),
)
def test_the_static_order_puts_every_priced_candidate_first_cheapest_first(
    prices: list[float | None], vram: list[float]
) -> None:
    walk = [
        Candidate(gpu_class=f"G{i}", price_per_hour=p, vram_gb=v)
        for i, (p, v) in enumerate(zip(prices, vram, strict=False))
    ]
    order = static_order(walk)
    assert sorted(order) == list(range(len(walk)))
    ranked = [walk[i].price_per_hour for i in order]
    priced = [p for p in ranked if p is not None]
    assert ranked == priced + [None] * (len(ranked) - len(priced))
    assert priced == sorted(priced)
    unpriced = [i for i in order if walk[i].price_per_hour is None]
    assert unpriced == sorted(unpriced, key=lambda i: (walk[i].vram_gb, i))


# --- one word ---------------------------------------------------------------------------------


def test_every_surface_says_unpriced_the_same_way() -> None:
    assert money_text(None) == "unpriced"
    assert money_text(0.0) == "$0"  # a price of 0 is a price
    assert rate_text(None) == "an unpriced rate" and rate_text(0.99) == "$0.99/h"
