"""What docs/cli.md's transcripts showed before the page kept one per command.

docs/cli.md keeps one short transcript per command (tests/test_docs_transcripts.py runs
them); the others it showed are held here: over the example logs the package ships
(`flashfsm.example_logs()`), each command prints the facts below and exits with its code.
The output is read as a wide terminal shows it (no cell or line wrapped) with runs of
spaces and table rules collapsed, so what is checked is what the command says, not its
layout.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm import example_logs
from flashfsm.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


def output(*args: str, code: int) -> str:
    """What a command prints over the examples (`EX/`: their directory), on a wide terminal."""
    argv = [a.replace("EX/", f"{example_logs()}/") for a in args]
    result = runner.invoke(app, argv, env={"COLUMNS": "250"})
    assert result.exit_code == code, result.output
    return result.output


def collapse(text: str) -> tuple[str, list[str]]:
    """(the whole text, its lines), each with table rules and runs of spaces collapsed."""
    lines = [" ".join(re.sub(r"[│┃]", " ", line).split()) for line in text.splitlines()]
    return " ".join(" ".join(lines).split()), lines


def run(*args: str, code: int) -> tuple[str, list[str]]:
    return collapse(output(*args, code=code))


def has_row(lines: list[str], row: str) -> bool:
    return any(line.startswith(row) for line in lines)


def says(said: str, *facts: str) -> None:
    """Every fact is in what the command said."""
    missing = [fact for fact in facts if fact not in said]
    assert not missing, missing


def test_replay_of_a_run_shows_its_attempts_then_its_last_job() -> None:
    said, _ = run("replay", "EX/run-walk.jsonl", code=0)
    says(
        said,
        "run run-walk.jsonl: SUCCEEDED, 2 attempt(s)",
        "attempt 0 on RTX4090: no_capacity (queue_grace) job stream: job-walk-s0-a0",
        "no capacity for this GPU class; retry on the next-best GPU",
        "attempt 1 on L40S (last GPU): ok job stream: job-walk-s0-a1 result: job COMPLETED",
        "run run-walk.jsonl: its last attempt's job stream is job-walk-s0-a1",
        "job-walk-s0-a1: 18 events",
        "(8 routine observations not shown; --full shows all)",
        "SUCCEEDED (success) by rule completed evidence: seqs [16] detail: job COMPLETED",
    )


def test_replay_verify_of_a_failed_job_exits_with_its_code_and_agrees() -> None:
    said, _ = run("replay", "EX/job-codeerror-s0-a0.jsonl", "--verify", code=10)
    says(
        said,
        "job-codeerror-s0-a0.jsonl: 19 events",
        "worker w-6b7102f1 log: 15 line(s)",
        "FAILED (job_failed) by rule worker_failed evidence: seqs [14, 15, 16]",
        "reward model returned NaN",
        "verify: ok: 19 events agree with today's rules (verdict FAILED by worker_failed)",
    )


def test_replay_lists_the_worker_evidence() -> None:
    said, _ = run("replay", "EX/worker/job-oom-s0-a1.jsonl", code=10)
    says(
        said,
        "job-oom-s0-a1.jsonl: 26 events",
        "watch started by docs-example every 10s",
        "worker wkr-a100-7f3k took the job: NVIDIA A100 80GB PCIe in EU-RO-1, up 16 s",
        "worker wkr-a100-7f3k log: 30 line(s); last: torch.OutOfMemoryError",
        "(17 routine observations not shown; --full shows all)",
        "FAILED (job_failed) by rule worker_failed evidence: seqs [23]",
    )


def test_why_not_says_when_the_job_left_the_queue() -> None:
    said, _ = run("why-not", "EX/job-walk-s0-a1.jsonl", "queue_grace", code=0)
    assert said == (
        "job-walk-s0-a1.jsonl: queue_grace did not fire at the verdict (t+90 s): IN_QUEUE 0 s "
        "< queue grace 900 s (longest wait); the job left IN_QUEUE at t+20 s (seq 6, status "
        "IN_PROGRESS)"
    )


def test_explain_of_a_run_explains_its_failed_attempts_walk_and_cost() -> None:
    printed = output("explain", "EX/run-crashloop.jsonl", code=0)
    said, _ = collapse(printed)
    says(
        said,
        "run run-crashloop.jsonl: its last attempt's job stream is job-crashloop-s0-a1",
        "job-crashloop-s0-a1: SUCCEEDED (success) at t+90 s by rule completed (step 4)",
        "why: COMPLETED with an output that decodes to metrics is a success.",
        "worker: w-aad9d06b on NVIDIA L40S in EU-RO-1, started 2023-11-14 22:25:00 UTC "
        "(0 s after submission, t+0 s); took the job by t+20 s (seq 7)",
        "attempt 0 (job-crashloop-s0-a0): STALLED (stalled) by unhealthy_worker",
        "listed unhealthy while the job was IN_QUEUE, t+200 s (seq 28)",
        "worker log: w-e84fee36, the endpoint's unhealthy worker (no worker took the job), "
        "read at t+300 s (seq 40): the last 20 of 84 lines recorded",
        "(64 earlier line(s) not shown)",
        "ModuleNotFoundError: No module named 'flash_attn'",
        "run run-crashloop.jsonl: the walk's order of its candidates 1. runpod/L40S $0.99/h: "
        "not starved in the last 1 h (1 job(s), mean wait 0 s); by price",
        "billed 6 min 30 s $0.11; its failures threw away 5 min $0.08",
        "attempt 0 STALLED (unhealthy_worker) cost $0.08: stall 5 min $0.08",
    )
    # its last 20 lines, each on a `│` line: the crash loop's latest, not its earlier ones
    quoted = [line for line in printed.splitlines() if line.lstrip().startswith("│")]
    assert len(quoted) == 1 + 20  # the "(64 earlier line(s) not shown)" line, then 20
    assert quoted[-1].endswith("starting container (attempt 11)")
    assert "(attempt 7 crashed)" not in said


def test_explain_of_a_failed_run_with_worker_logs() -> None:
    said, _ = run("explain", "EX/worker/run-oom.jsonl", code=10)
    says(
        said,
        "run run-oom.jsonl: its last attempt's job stream is job-oom-s0-a1",
        "job-oom-s0-a1: FAILED (job_failed) at t+180 s by rule worker_failed (step 6)",
        "because: no heartbeat reader to flag it retriable",
        "worker log: wkr-a100-7f3k, the job's worker, read at t+180 s (seq 24): the last 20 "
        "of 30 lines recorded (10 earlier line(s) not shown)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.25 GiB of which 1.12 GiB is free.",
        "run run-oom.jsonl: attempt 0 (job-oom-s0-a0): STALLED (stalled) by unhealthy_worker",
        "worker log: wkr-l40s-q2m9, the endpoint's UNHEALTHY worker (no worker took the job), "
        "read at t+300 s (seq 40): 7 lines",
        "ImportError: libcudnn_cnn.so.9: cannot open shared object file",
        "1. runpod/L40S $0.99/h: not starved: no job in the last 1 h; by price",
        "2. runpod/A100-80GB $1.89/h: not starved: no job in the last 1 h; by price",
        "billed 7 min 56 s $0.17; its failures threw away 7 min 56 s $0.17",
        "attempt 0 STALLED (unhealthy_worker) cost $0.08: stall 5 min $0.08",
        "attempt 1 FAILED (worker_failed) cost $0.09: failed 2 min 56 s $0.09",
    )
    assert "2023-11-16 02:08:00 step 100" in said and "02:07:54 step 90" not in said


def test_whatif_says_when_the_observations_end_before_the_new_policy_decides() -> None:
    said, _ = run("whatif", "EX/job-walk-s0-a0.jsonl", "--set", "queue_grace_s=600", code=0)
    assert said == (
        "job-walk-s0-a0.jsonl: observations_end with queue_grace_s=600, the recorded "
        "observations end at t+310 s (seq 41) before the new policy would decide; the next "
        "timer: queue grace 600 s: 310 s elapsed, 290 s left (the log records NO_CAPACITY by "
        "queue_grace at t+310 s)"
    )


@pytest.mark.parametrize(
    ("by", "rows"),
    [
        (
            "cause",
            [
                "queue 1 5 min 10 s 0 s - -",
                "cold start 1 1 min 1 min $0.02 -",
                "training 1 30 s 30 s $0.0083 -",
            ],
        ),
        ("gpu", ["L40S 1 1 min 30 s 1 min 30 s $0.02 -", "RTX4090 1 5 min 10 s 0 s - -"]),
    ],
)
def test_cost_of_a_run_by_attempt_and_broken_down(by: str, rows: list[str]) -> None:
    said, lines = run("cost", "EX/run-walk.jsonl", "--by", by, code=0)
    says(
        said,
        "run-walk.jsonl: SUCCEEDED, 2 attempt(s), billed 1 min 30 s $0.02, waste $0",
        "attempt 0 on RTX4090 at $0.69/h: NO_CAPACITY (queue_grace) billed 0 s $0 "
        "unbilled: queue 5 min 10 s",
        "attempt 1 on L40S at $0.99/h: SUCCEEDED billed 1 min 30 s $0.02: cold start 1 min "
        "$0.02, training 30 s $0.0083",
        "total: 1 stream(s), 2 attempt(s), billed 1 min 30 s $0.02, waste $0",
    )
    assert has_row(lines, f"{by} attempts time billed money waste")
    for row in rows:
        assert has_row(lines, row), row


def test_logs_of_a_run_shows_each_attempts_worker_log() -> None:
    said, _ = run("logs", "EX/worker/run-oom.jsonl", "--lines", "4", code=0)
    says(
        said,
        "attempt 0 (job-oom-s0-a0): STALLED (stalled) by unhealthy_worker",
        "worker: wkr-l40s-q2m9 on NVIDIA L40S in US-TX-3, started 2023-11-16 02:00:48 UTC "
        "(3 s after submission, t+3 s); listed unhealthy while the job was IN_QUEUE, t+200 s "
        "(seq 28)",
        "read at t+300 s (seq 40): the last 4 of 7 lines recorded (3 earlier line(s) not shown)",
        "2023-11-16 02:01:12 worker exited with code 1; restarting (attempt 6)",
        "attempt 1 (job-oom-s0-a1): FAILED (job_failed) by worker_failed",
        "read at t+180 s (seq 24): the last 4 of 30 lines recorded (26 earlier line(s) not shown)",
    )


def test_logs_of_a_run_without_worker_logs_says_so() -> None:
    said, _ = run("logs", "EX/run-walk.jsonl", code=0)
    assert said == "run run-walk.jsonl: no worker log recorded by any of its 2 job(s)"


def test_ls_lists_every_example_stream() -> None:
    _, lines = run("ls", "--store", f"jsonl:{example_logs()}", code=0)
    assert lines[0].endswith(": 11 stream(s)")
    for row in (
        "job-codeerror-s0-a0 job FAILED job_failed by worker_failed 1 min 10 s",
        "job-crashloop-s0-a0 job STALLED stalled by unhealthy_worker 5 min",
        "job-crashloop-s0-a1 job SUCCEEDED success 1 min 30 s",
        "job-stall-s0-a0 job STALLED stalled by stall 29 min 10 s",
        "job-stall-s0-a1 job SUCCEEDED success 1 min 30 s",
        "job-walk-s0-a0 job NO_CAPACITY no_capacity by queue_grace 5 min 10 s",
        "job-walk-s0-a1 job SUCCEEDED success 1 min 30 s",
        "run-codeerror run FAILED job_failed 1 min 10 s",
        "run-crashloop run SUCCEEDED success 6 min 30 s",
        "run-stall run SUCCEEDED success 30 min 40 s",
        "run-walk run SUCCEEDED success 6 min 40 s",
    ):
        assert has_row(lines, row), row


def test_the_examples_are_where_the_cli_page_says(tmp_path: Path) -> None:
    result = runner.invoke(app, ["examples"])
    assert result.exit_code == 0 and Path(result.output.strip()) == example_logs()
    result = runner.invoke(app, ["examples", str(tmp_path / "examples")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "examples" / "worker" / "run-oom.jsonl").is_file()
