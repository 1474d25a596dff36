"""What docs/cost.md showed before it was shortened, still asserted.

The page's python block checked more of the example run-stall's ledger than it keeps (the
billed intervals, the waste, the worker billed from the platform's records, the idle
timeout's source, the bare job's open bill, the crash loop's unpicked worker), and its
`flashfsm cost examples/run-stall.jsonl` transcript now stops at the total line: the
by-cause table under it is held here.
"""

from __future__ import annotations

from typer.testing import CliRunner

from flashfsm import example_logs, read_jsonl_file
from flashfsm.cli import app
from flashfsm.postmortem.ledger import Cause, ledger

LOGS = example_logs()


def load(stream: str) -> list:
    return read_jsonl_file(LOGS / f"{stream}.jsonl")


def test_the_stalled_attempt_is_billed_from_the_platforms_records_to_the_teardown():
    run = ledger(load("run-stall"), load)
    first = run.attempts[0]
    assert first.billed_s == sum(end - start for start, end in first.billed_intervals)
    assert round(run.waste_money, 4) == round(1510 * 0.99 / 3600, 4)
    [worker] = first.workers
    assert worker.start_source == "platform" and worker.picked_up_at - worker.start == 20
    assert first.idle_timeout_source == "recorded" and not first.started_at_pickup
    assert first.stopped_by == "teardown" and not first.billing_open


def test_the_same_job_as_a_bare_log_has_its_bill_open_since_the_verdict():
    [attempt] = ledger(load("job-stall-s0-a0"), price_per_hour=0.99).attempts
    assert attempt.billing_open and attempt.open_since == attempt.outcome.at
    assert attempt.idle_timeout_source == "platform"  # no deploy record: the platform's value


def test_a_crash_loop_worker_never_took_the_job_and_its_time_is_the_attempts_stall():
    looping = ledger(load("run-crashloop"), load).attempts[0]
    [worker] = looping.workers
    assert worker.picked_up_at is None and worker.status == "unhealthy"
    assert worker.start_source == "platform" and worker.stop_reason == "teardown"
    assert looping.billed_s == worker.seconds == looping.seconds(Cause.STALL) > 0
    assert looping.waste_money == looping.money() > 0


def test_cost_of_run_stall_ends_with_its_table_by_cause(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["cost", str(LOGS / "run-stall.jsonl")], env={"COLUMNS": "80", "TZ": "UTC"}
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    assert [r.split("│")[1:-1] for r in rows] == [
        [" cold start ", "        2 ", "       2 min ", "       2 min ", " $0.05 ", "     - "],
        [" training   ", "        2 ", "  3 min 30 s ", "  3 min 30 s ", " $0.07 ", "     - "],
        [" stall      ", "        1 ", " 25 min 10 s ", " 25 min 10 s ", " $0.42 ", " $0.42 "],
    ]
