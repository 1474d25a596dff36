"""A watcher that dies mid-training and resumes after RunPod forgot the job (D9).

RunPod keeps a `/run` result 30 minutes after the job ends, then answers 404. A run's
driver (`supervise_run`, in a forked process, over loopback HTTP to the simulator, on its
manual clock) is SIGKILLed mid-training; the test moves the simulator's clock past the
training's end and the result's retention and calls `supervise_run` again on the same run
id and store. The first status read answers 404, after a blind gap: what outlives the job
on RunPod (the worker's Hub heartbeat) decides before the walk retries anything:

- the worker wrote its end record (a last heartbeat at stage `done`, with its metrics):
  SUCCEEDED by `result_expired`, with those metrics; the verdict names the expired result
  and where the artifacts are; one deploy, one submit, one training (no second);
- the worker's last heartbeat, read now, is at a training stage (its host died
  mid-training, the job failed and was forgotten): the attempt is `lost` and the walk
  retries it, as for any lost job;
- nothing says (no heartbeat reader, or no heartbeat at all): `lost_unverified`, which the
  walk does not retry (one deploy, one submit) unless the run says so
  (`retry_lost_unverified=True`).

What was paid for is read from the simulator's own records (`Simulator.usage()`).
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.simulator.scenarios import METRICS
from flashfsm.adapters.urls import path_url
from flashfsm.cli import app
from flashfsm.events.models import (
    AttemptStarted,
    Concluded,
    Event,
    HeartbeatObserved,
    RunConcluded,
    StatusFetchFailed,
    WatchStarted,
)
from flashfsm.runs import RunResult
from tests.late_resume_support import (
    ARTIFACTS,
    RESUME_AFTER_S,
    SCENARIOS,
    STREAM,
    T0,
    TRAINING_ENDS_S,
    Case,
    Paid,
    Platform,
    drive,
    drive_and_die,
    paid,
)
from tests.store_support import read_stream, run_in_child


@dataclass
class Late:
    """A run killed mid-training and resumed past the result's retention."""

    result: RunResult
    paid: Paid
    store_url: str
    run: list[Event]
    jobs: list[list[Event]]  # each attempt's job stream, in attempt order


def late_resume(case: Case, tmp_path: Path) -> Late:
    """Drive `case` in a child killed mid-training, move the clock past the training's end
    and the result's retention, and drive it again here to the end."""
    store_url = path_url("sqlite", tmp_path / "events.db")
    with Simulator(clock=SimClock(speed=0, start=T0)) as sim:
        for scenario in SCENARIOS:
            sim.register_scenario(scenario)
        platform = Platform(sim.url, sim.accounts[0].key, str(tmp_path / "hf-cache"))

        assert run_in_child(drive_and_die, case, platform, store_url) == -signal.SIGKILL
        [job] = sim.world.jobs.values()
        assert sim.clock.now() < job.created_at + TRAINING_ENDS_S, "killed after the training"
        assert job.status == "IN_PROGRESS"  # killed mid-training
        assert not [e for e in read_stream(store_url, STREAM) if isinstance(e, RunConcluded)]

        sim.clock.advance(job.created_at + RESUME_AFTER_S - sim.clock.now())
        result = drive(case, platform, store_url, sim.clock)
        assert sim.errors == [], sim.errors[0]
        spent = paid(sim)

    run = read_stream(store_url, STREAM)
    streams = [e.job_stream for e in run if isinstance(e, AttemptStarted)]
    return Late(result, spent, store_url, run, [read_stream(store_url, s) for s in streams])


def _verdict(events: list[Event]) -> Concluded:
    last = events[-1]
    assert isinstance(last, Concluded), f"the job stream ends with {last.kind}"
    return last


def _resumed_blind(events: list[Event]) -> StatusFetchFailed:
    """The job stream was watched twice (a reattach), and the reattached watch's first
    status read answered 404."""
    watches = [e for e in events if isinstance(e, WatchStarted)]
    assert [w.reattach for w in watches] == [False, True]
    after = [e for e in events if e.seq > watches[1].seq]
    first = next(e for e in after if isinstance(e, StatusFetchFailed))
    assert first.http_status == 404
    return first


def test_the_worker_s_end_record_concludes_success_and_nothing_is_trained_again(tmp_path):
    late = late_resume(Case("training"), tmp_path)

    assert late.paid.counts == (1, 1, 1, 1) and late.paid.alive == []
    assert late.paid.worker_s < TRAINING_ENDS_S + 60  # one training (and its idle timeout)
    assert late.result.ok and late.result.failure is None and late.result.attempts == 1
    assert late.result.metrics == METRICS  # the end record's
    [job] = late.jobs
    gone = _resumed_blind(job)
    verdict = _verdict(job)
    assert (verdict.state, verdict.rule, verdict.ok) == ("SUCCEEDED", "result_expired", True)
    assert verdict.metrics == METRICS
    assert "result expired" in verdict.detail and ARTIFACTS in verdict.detail, verdict.detail
    [end] = [e for e in job if isinstance(e, HeartbeatObserved) and e.seq in verdict.evidence]
    assert end.stage == "done" and end.forced and end.metrics == METRICS
    assert gone.seq in verdict.evidence

    explained = CliRunner().invoke(app, ["explain", STREAM, "--store", late.store_url, "--json"])
    assert explained.exit_code == 0, explained.output
    out = json.loads(explained.stdout)
    assert (out["state"], out["rule"], out["step"]) == ("SUCCEEDED", "result_expired", "D9")
    assert "end record" in out["why"] and "never trained again" in out["why"]
    assert [e["seq"] for e in out["evidence"]] == list(verdict.evidence)
    kinds = {e["kind"] for e in out["evidence"]}
    assert {"StatusFetchFailed", "HeartbeatObserved"} <= kinds, out["evidence"]
    assert any("404" in fact for fact in out["facts"]), out["facts"]
    assert ARTIFACTS in out["verdict"]["detail"] and out["verdict"]["metrics"] == METRICS


def test_a_last_heartbeat_mid_training_says_it_did_not_finish_and_the_walk_retries(tmp_path):
    late = late_resume(Case("host_died"), tmp_path)

    first, second = late.jobs
    _resumed_blind(first)
    lost = _verdict(first)
    assert (lost.state, lost.rule, lost.failure) == ("LOST", "job_lost", "lost")
    assert "not its end record" in lost.detail, lost.detail
    [hb] = [e for e in first if isinstance(e, HeartbeatObserved) and e.seq in lost.evidence]
    assert hb.forced and hb.stage == "train"
    assert _verdict(second).rule == "completed"  # the retry, on the `success` scenario
    assert late.result.ok and late.result.attempts == 2
    assert late.paid.counts == (2, 2, 2, 1) and late.paid.alive == []


NO_EVIDENCE = {
    "no-reader": Case("training", readers=False),
    "no-heartbeat": Case("training_silent"),
}


@pytest.mark.parametrize("case", list(NO_EVIDENCE.values()), ids=list(NO_EVIDENCE))
def test_with_no_evidence_the_attempt_is_lost_unverified_and_not_retried(tmp_path, case):
    late = late_resume(case, tmp_path)

    [job] = late.jobs
    _resumed_blind(job)
    verdict = _verdict(job)
    assert (verdict.state, verdict.rule, verdict.failure) == (
        "LOST_UNVERIFIED",
        "lost_unverified",
        "lost_unverified",
    )
    assert "nothing says whether it finished" in verdict.detail, verdict.detail
    assert not late.result.ok and late.result.failure == "lost_unverified"
    assert late.result.attempts == 1
    [concluded] = [e for e in late.run if isinstance(e, RunConcluded)]
    assert concluded.failure == "lost_unverified"
    assert late.paid.counts == (1, 1, 1, 1) and late.paid.alive == []


def test_a_run_that_says_so_retries_an_attempt_with_no_evidence(tmp_path):
    late = late_resume(Case("training_silent", retry_lost_unverified=True), tmp_path)

    first, second = late.jobs
    assert _verdict(first).rule == "lost_unverified"
    assert _verdict(second).rule == "completed"
    assert late.result.ok and late.result.attempts == 2
    assert late.paid.counts == (2, 2, 2, 2) and late.paid.alive == []
