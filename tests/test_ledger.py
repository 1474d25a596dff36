"""The waste ledger: every second of an attempt goes to exactly one cause, and the money adds up.

The example runs (`flashfsm.example_logs()`: simulator runs, priced by their candidates) are
checked to the second; a Hypothesis property checks the partition on random job logs
written by the real watch over scripted RunPod answers (`tests.test_properties.scripts`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashfsm import example_logs
from flashfsm.adapters.jsonl import read_jsonl_file, stream_file_name
from flashfsm.events.models import Event
from flashfsm.postmortem.billing import MODEL
from flashfsm.postmortem.ledger import (
    CAUSES,
    WASTE_CAUSES,
    AttemptLedger,
    Cause,
    group,
    job_ledger,
    ledger,
)
from tests.test_properties import Script, run_poll_job, scripts

EXAMPLES = example_logs()


def load(stream: str) -> list[Event]:
    path = EXAMPLES / stream_file_name(stream)
    return read_jsonl_file(path) if path.exists() else []


def check_partition(a: AttemptLedger) -> None:
    """The pieces tile [start, end] without gap or overlap, one cause each, and add up."""
    assert a.pieces or a.end == a.start
    at = a.start
    for p in a.pieces:
        assert p.start == pytest.approx(at) and p.end > p.start
        assert p.cause in CAUSES
        at = p.end
    assert at == pytest.approx(a.end)
    assert a.seconds() == pytest.approx(a.end - a.start)
    assert sum(a.seconds(c) for c in CAUSES) == pytest.approx(a.end - a.start)
    assert a.billed_s + a.unbilled_s == pytest.approx(a.end - a.start)
    assert not any(p.billed for p in a.pieces if p.cause in (Cause.QUEUE, Cause.DEPLOY))
    if a.price_per_hour is not None:
        money = a.money()
        assert money is not None
        assert money == pytest.approx(a.billed_s * a.price_per_hour / 3600)
        assert sum(a.money(c) or 0.0 for c in CAUSES) == pytest.approx(money)
        assert a.waste_money == pytest.approx(
            sum(a.money(c) or 0.0 for c in WASTE_CAUSES), abs=1e-12
        )
    else:
        assert a.money() is None


def seconds(a: AttemptLedger) -> dict[str, float]:
    return {c.value: round(a.seconds(c), 6) for c in CAUSES if a.seconds(c)}


# --- the example runs, to the second -------------------------------------------------------


def test_a_stalled_attempt_pays_for_its_stall_from_the_last_progress() -> None:
    led = ledger(read_jsonl_file(EXAMPLES / "run-stall.jsonl"), load)
    first, second = led.attempts
    for a in led.attempts:
        check_partition(a)
    assert (first.gpu_class, first.price_per_hour) == ("L40S", 0.99)
    # the worker started 20 s before its pickup (its recorded start): billed as cold start
    assert seconds(first) == {"cold_start": 60, "training": 180, "stall": 1510}
    assert first.waste_s == 1510
    assert first.money() == pytest.approx(1750 * 0.99 / 3600)
    assert first.money(Cause.STALL) == pytest.approx(1510 * 0.99 / 3600)
    assert (second.gpu_class, second.price_per_hour) == ("A100-80GB", 1.89)
    assert seconds(second) == {"cold_start": 60, "training": 30}
    assert led.money() == pytest.approx(1750 * 0.99 / 3600 + 90 * 1.89 / 3600)
    assert led.waste_money == pytest.approx(1510 * 0.99 / 3600)
    assert led.state == "SUCCEEDED" and len(led.failed) == 1


def test_an_attempt_that_never_got_a_worker_costs_nothing() -> None:
    led = ledger(read_jsonl_file(EXAMPLES / "run-walk.jsonl"), load)
    starved = led.attempts[0]
    check_partition(starved)
    assert starved.billed_s == 0 and starved.money() == 0
    assert seconds(starved) == {"queue": 310}


def test_the_jobs_own_failure_throws_away_its_billed_time() -> None:
    led = ledger(read_jsonl_file(EXAMPLES / "run-codeerror.jsonl"), load)
    [a] = led.attempts
    check_partition(a)
    assert seconds(a) == {"failed": 70}  # billed from the worker's start, 20 s before pickup
    assert a.waste_s == a.billed_s == 70


def test_a_bare_job_log_has_no_price_unless_given_one_and_idles_after_its_verdict() -> None:
    events = load("job-stall-s0-a1")
    unknown = job_ledger(events)
    assert unknown.money() is None and unknown.waste_money is None
    priced = job_ledger(events, 2.0)
    [a] = priced.attempts
    check_partition(a)
    # no endpoint teardown is recorded: the worker idles for the idle timeout, which no record
    # gives for a bare job log from before the watch read the platform's: RunPod's default
    assert a.seconds(Cause.IDLE) == MODEL.idle_timeout_s == 5
    assert a.idle_timeout_source == "platform" and not a.started_at_pickup  # its records
    assert priced.money() == pytest.approx((20 + 40 + 30 + MODEL.idle_timeout_s) * 2.0 / 3600)


def test_a_bare_stalled_job_nobody_cancelled_is_an_open_bill_not_an_idle_timeout() -> None:
    # The watch concluded STALLED while RunPod still ran the job (IN_PROGRESS) and nothing
    # cancelled it: the worker bills on. The earlier model stopped the bill 5 s after the
    # verdict (an idle timeout the worker never started); the bill is now open since the
    # verdict and counted up to `as_of`.
    events = load("job-stall-s0-a0")
    [a] = job_ledger(events, 0.99).attempts
    check_partition(a)
    assert a.billing_open and a.open_since == a.outcome.at == events[-1].at
    assert a.seconds(Cause.IDLE) == 0 and a.billed_s == 60 + 180 + 1510
    [later] = job_ledger(events, 0.99, as_of=events[-1].at + 600).attempts
    assert later.billed_s == a.billed_s + 600 and later.seconds(Cause.STALL) == 1510 + 600


def test_totals_by_cause_gpu_and_rule_agree_with_the_ledgers() -> None:
    ledgers = [
        ledger(read_jsonl_file(EXAMPLES / f"{name}.jsonl"), load)
        for name in ("run-stall", "run-walk", "run-crashloop", "run-codeerror")
    ]
    total = sum(led.money() or 0.0 for led in ledgers)
    for by in ("cause", "gpu", "rule"):
        groups = group(ledgers, by)
        assert sum(g.money or 0.0 for g in groups) == pytest.approx(total)
    by_gpu = {g.key: g for g in group(ledgers, "gpu")}
    assert set(by_gpu) == {"L40S", "A100-80GB", "RTX4090"}
    with pytest.raises(ValueError):
        group(ledgers, "colour")


# --- the property ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts(), st.sampled_from([None, 0.0, 0.69, 1.89]))
def test_every_second_of_an_attempt_belongs_to_exactly_one_cause(
    script: Script, price: float | None
) -> None:
    _, events, _ = run_poll_job(script)
    led = job_ledger(events, price)
    [a] = led.attempts
    check_partition(a)
    assert a.start == events[0].at
    verdict = a.outcome
    if verdict is None or verdict.ok:
        assert a.waste_s == 0
    elif verdict.failure in ("job_preempted", "lost"):
        assert a.billed_seconds(Cause.PREEMPTED) + a.seconds(Cause.IDLE) == pytest.approx(
            a.billed_s
        )
    if math.isclose(a.billed_s, 0.0):
        assert a.seconds(Cause.IDLE) == 0


def _copy(events: Sequence[Event], shift: float) -> list[Event]:
    return [e.model_copy(update={"at": e.at + shift}) for e in events]


def test_the_ledger_does_not_depend_on_when_the_log_was_written() -> None:
    events = load("job-stall-s0-a0")
    a = job_ledger(events, 1.0).attempts[0]
    b = job_ledger(_copy(events, 12345.0), 1.0).attempts[0]
    assert seconds(a) == seconds(b) and a.money() == pytest.approx(b.money() or 0.0)
