"""Capacity memory: the evidence recent job logs hold, the ranking rule, its record in the
run's stream, replay, the knob, and `explain`."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from flashfsm import MemoryStore
from flashfsm.adapters.stores import open_store
from flashfsm.capacity import recent_waits
from flashfsm.cli import app
from flashfsm.events.errors import CorruptLogError
from flashfsm.events.models import (
    AttemptStarted,
    CandidatesRanked,
    CapacityEvidence,
    Concluded,
    HealthObserved,
    JobSubmitted,
    RunStarted,
    StatusObserved,
    WorkerCounts,
)
from flashfsm.fsm.capacity import (
    CapacityPolicy,
    JobWait,
    job_wait,
    rank,
    ranking_reasons,
    static_order,
    summarize,
)
from flashfsm.fsm.run import plan_attempt, replay_run
from flashfsm.ids import new_id
from tests.test_run import Clock, Script, cand

L4, A10, L40S = cand("L4", 0.39), cand("A10", 0.60), cand("L40S", 0.90)
WALK = [L4, A10, L40S]
POLICY = CapacityPolicy()


def _event(cls: type, stream: str, seq: int, at: float, **fields: Any) -> Any:
    return cls(stream=stream, seq=seq, id=new_id(at), at=at, **fields)


def job_log(stream: str, start: float, outcome: str) -> list[Any]:
    """A job's log: queued at `start`, then picked up at +20 s, or throttled to no_capacity."""
    events = [
        _event(JobSubmitted, stream, 0, start, endpoint_id="ep", job_id=stream, submitted_at=start),
        _event(StatusObserved, stream, 1, start, status="IN_QUEUE"),
    ]
    if outcome == "no_capacity":
        throttled = WorkerCounts(throttled=1)
        events += [
            _event(HealthObserved, stream, 2, start + 10, workers=throttled),
            _event(StatusObserved, stream, 3, start + 310, status="IN_QUEUE"),
            _event(
                Concluded,
                stream,
                4,
                start + 310,
                state="NO_CAPACITY",
                ok=False,
                failure="no_capacity",
                rule="throttled_grace",
            ),
        ]
    else:
        events += [
            _event(StatusObserved, stream, 2, start + 20, status="IN_PROGRESS"),
            _event(Concluded, stream, 3, start + 90, state="SUCCEEDED", ok=True, rule="completed"),
        ]
    return events


@dataclasses.dataclass
class LoggedScript(Script):
    """`Script`, whose watch also writes the attempt's job log (what `poll_job` would)."""

    def watch(self, run, attempt, store, stop):
        outcome = self.outcome(attempt.started.attempt)
        start = self.clock()
        result = super().watch(run, attempt, store, stop)
        log = job_log(attempt.job_stream, start, "no_capacity" if outcome != "ok" else "ok")
        store.append(attempt.job_stream, log, 0)
        self.clock.now = max(self.clock.now, log[-1].at)
        return result


def supervise(store, run_id: str, outcomes: dict[int, Any], clock: Clock, **kw: Any):
    from flashfsm.runs import supervise_run

    script = LoggedScript(outcomes, clock, store, f"run-{run_id}")
    result = supervise_run(run_id, WALK, script, store=store, clock=clock, sleep=clock.sleep, **kw)
    events = store.read(f"run-{run_id}")
    return result, [e for e in events if isinstance(e, AttemptStarted)], events


def gpus(attempts: list[AttemptStarted]) -> list[str]:
    return [a.gpu_class for a in attempts]


# --- the evidence -------------------------------------------------------------------------


def test_a_job_wait_is_its_queue_time_before_pickup_and_the_throttled_part_of_it():
    log = job_log("job-a", 100.0, "no_capacity")
    w = job_wait("runpod", "L4", log)
    assert w == JobWait("runpod", "L4", 410.0, 310.0, 300.0, False, True)
    w = job_wait("runpod", "A10", job_log("job-b", 100.0, "ok"), ended_at=200.0)
    assert (w.waited_s, w.throttled_s, w.picked_up, w.no_capacity, w.at) == (
        20.0,
        0.0,
        True,
        False,
        200.0,
    )
    assert job_wait("runpod", "L4", []) is None


def test_evidence_is_per_provider_and_class_within_the_window_and_about_capacity():
    waits = [
        JobWait("runpod", "L4", 1000.0, 310.0, 300.0, False, True),
        JobWait("lambda", "L4", 1000.0, 20.0, 0.0, True, False),
        JobWait("runpod", "A10", 1000.0 - 3601, 900.0, 0.0, False, True),  # too old
        JobWait("runpod", "H100", 1000.0, 1.0, 0.0, True, False),  # not a candidate
        JobWait("runpod", "A10", 990.0, 600.0, 0.0, False, False),  # a crash loop: no evidence
    ]
    candidates = [L4, cand("L4", 0.45, provider="lambda"), A10]
    still_waiting = JobWait("runpod", "A10", 995.0, 400.0, 0.0, False, False, ended=False)
    assert still_waiting.about_capacity and not waits[-1].about_capacity
    evidence = summarize(waits, candidates, 1000.0, POLICY)
    assert [(e.provider, e.gpu_class, e.jobs, e.starved) for e in evidence] == [
        ("lambda", "L4", 1, False),
        ("runpod", "L4", 1, True),
    ]


def test_a_starved_candidate_goes_after_the_others_and_price_breaks_ties():
    evidence = (
        CapacityEvidence(gpu_class="L4", jobs=2, no_capacity=1, waited_s=620.0, starved=True),
        CapacityEvidence(gpu_class="L40S", jobs=1, waited_s=400.0, longest_wait_s=400.0),
        CapacityEvidence(gpu_class="A10", jobs=3, waited_s=60.0, longest_wait_s=20.0),
    )
    # A10 is not starved; L4 (a no_capacity) and L40S (a 400 s wait) are: after A10, the
    # shorter mean wait first, L4's 310 s before L40S's 400 s.
    assert rank(WALK, evidence, POLICY) == (1, 0, 2)
    assert rank(WALK, evidence[2:], POLICY) == (0, 1, 2)
    assert rank(WALK, (), POLICY) == static_order(WALK) == (0, 1, 2)


@given(
    prices=st.lists(st.sampled_from([0.2, 0.4, 0.8]), min_size=1, max_size=5),
    starved=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_the_ranking_is_a_permutation_with_every_starved_candidate_after_every_other(
    prices, starved
):
    candidates = [cand(f"G{i}", p) for i, p in enumerate(prices)]
    evidence = tuple(
        CapacityEvidence(gpu_class=c.gpu_class, jobs=1, no_capacity=1, waited_s=300.0)
        for c, s in zip(candidates, starved, strict=False)
        if s
    )
    order = rank(candidates, evidence, POLICY)
    assert sorted(order) == list(range(len(candidates)))
    flags = [candidates[i].gpu_class in {e.gpu_class for e in evidence} for i in order]
    assert flags == sorted(flags)
    fresh = [candidates[i].price_per_hour for i in order if not flags[order.index(i)]]
    assert fresh == sorted(fresh)


# --- in a run -----------------------------------------------------------------------------


def test_a_run_after_a_starved_one_ranks_the_starved_class_last_and_records_why():
    store, clock = MemoryStore(), Clock()
    first, first_walk, events = supervise(store, "first", {0: "no_capacity"}, clock)
    assert first.ok and gpus(first_walk) == ["L4", "A10"]
    ranked = next(e for e in events if isinstance(e, CandidatesRanked))
    assert ranked.order == (0, 1, 2) and ranked.evidence == () and ranked.seq == 1

    clock.now += 600
    second, second_walk, events = supervise(store, "second", {}, clock)
    assert second.ok and gpus(second_walk) == ["A10"]
    ranked = next(e for e in events if isinstance(e, CandidatesRanked))
    assert ranked.order == (1, 2, 0) and ranked.jobs_read == 2
    [l4] = [e for e in ranked.evidence if e.gpu_class == "L4"]
    assert (l4.starved, l4.no_capacity, l4.throttled_s) == (True, 1, 300.0)
    reasons = ranking_reasons(WALK, ranked)
    assert [r.gpu_class for r in reasons] == ["A10", "L40S", "L4"]
    assert "starved in the last 1 h (1 no_capacity" in reasons[2].text
    assert replay_run(events).ranking == ranked


def test_the_memory_forgets_what_is_older_than_its_window():
    store, clock = MemoryStore(), Clock()
    supervise(store, "first", {0: "no_capacity"}, clock)
    clock.now += 3700
    _, attempts, _ = supervise(store, "later", {}, clock)
    assert gpus(attempts) == ["L4"]


def test_the_knob_turns_it_off_walking_in_price_order_with_nothing_recorded():
    store, clock = MemoryStore(), Clock()
    supervise(store, "first", {0: "no_capacity"}, clock)
    for knob in (False, CapacityPolicy(enabled=False)):
        _, attempts, events = supervise(store, f"off-{knob}", {}, clock, capacity_memory=knob)
        assert gpus(attempts) == ["L4"]
        assert not any(isinstance(e, CandidatesRanked) for e in events)


def test_a_one_attempt_run_records_no_ranking():
    store, clock = MemoryStore(), Clock()
    _, _, events = supervise(store, "one", {}, clock, single_attempt=0)
    assert [e.kind for e in events][:2] == ["RunStarted", "AttemptStarted"]


def test_replaying_a_ranked_run_re_plans_every_attempt_as_recorded():
    store, clock = MemoryStore(), Clock()
    supervise(store, "first", {0: "no_capacity", 1: "no_capacity"}, clock)
    clock.now += 60
    _, attempts, events = supervise(store, "second", {0: "stalled"}, clock)
    assert gpus(attempts) == ["L40S", "L4"]  # A10 and L4 starved; L4 re-rolls last
    for i, e in enumerate(events):
        if isinstance(e, AttemptStarted):
            plan = plan_attempt(replay_run(events[:i]))
            assert (plan.candidate, plan.on_last_gpu) == (e.candidate, e.on_last_gpu)


def test_the_store_is_only_read():
    store, clock = MemoryStore(), Clock()
    supervise(store, "first", {0: "no_capacity"}, clock)
    before = {s: list(store.read(s)) for s in store.streams()}
    waits, read = recent_waits(store, clock(), POLICY)
    assert read == 2 and len(waits) == 2
    assert {s: list(store.read(s)) for s in store.streams()} == before


def _started(stream: str = "run-x") -> RunStarted:
    return _event(RunStarted, stream, 0, 1.0, run_id="x", candidates=tuple(WALK))


def test_a_ranking_that_is_not_a_permutation_or_comes_late_is_a_corrupt_log():
    bad = _event(CandidatesRanked, "run-x", 1, 2.0, order=(0, 0, 1), window_s=1, starve_after_s=1)
    with pytest.raises(CorruptLogError, match="permutation"):
        replay_run([_started(), bad])
    attempt = _event(
        AttemptStarted,
        "run-x",
        1,
        2.0,
        attempt=0,
        candidate=0,
        provider="runpod",
        gpu_class="L4",
    )
    late = _event(CandidatesRanked, "run-x", 2, 3.0, order=(0, 1, 2), window_s=1, starve_after_s=1)
    with pytest.raises(CorruptLogError, match="once"):
        replay_run([_started(), attempt, late])


def test_a_log_without_a_ranking_walks_in_price_order_as_before():
    state = replay_run([_started()])
    assert state.ranking is None and plan_attempt(state).gpu_class == "L4"
    reasons = ranking_reasons(WALK, None)
    assert [r.gpu_class for r in reasons] == ["L4", "A10", "L40S"]
    assert "price order" in reasons[0].reason


def test_explain_on_a_run_says_why_each_candidate_came_in_its_place(tmp_path):
    url = f"sqlite:///{tmp_path}/e.db"
    store, clock = open_store(url), Clock()
    try:
        supervise(store, "first", {0: "no_capacity"}, clock)
        clock.now += 60
        supervise(store, "second", {}, clock)
    finally:
        store.close()
    runner = CliRunner()
    result = runner.invoke(app, ["explain", "run-second", "--store", url])
    assert result.exit_code == 0, result.output
    assert "run run-second: the walk's order of its candidates" in result.output
    assert "1. runpod/A10 $0.60/h: not starved" in result.output
    assert "3. runpod/L4 $0.39/h: starved in the last 1 h" in result.output
    result = runner.invoke(app, ["explain", "run-second", "--store", url, "--json"])
    walk = json.loads(result.output)["walk"]
    assert [(w["gpu_class"], w["starved"]) for w in walk] == [
        ("A10", False),
        ("L40S", False),
        ("L4", True),
    ]


def test_in_a_fleet_with_a_class_out_for_six_hours_memory_reaches_training_sooner():
    """The bench's two fleets, small: the same runs with and without capacity memory."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "capacity.py"
    spec = importlib.util.spec_from_file_location("bench_capacity", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    runs, gap_s = 14, 1800.0  # 7 hours: the outage, and an hour after it
    with_memory = bench.fleet(runs, gap_s, memory=True)
    without = bench.fleet(runs, gap_s, memory=False)
    assert with_memory["to_training_s"] < without["to_training_s"]
    assert with_memory["wasted_min"] < without["wasted_min"]
    assert with_memory["starved_attempts"] < without["starved_attempts"]
    assert bench.check_replay(with_memory["store"], runs) == with_memory["attempts"]


@pytest.mark.parametrize("name", ["run-walk", "run-stall", "run-crashloop", "run-codeerror"])
def test_an_example_log_re_plans_its_recorded_walk(name):
    """The docs' example run logs (old ones without a ranking, or newer ones with one)
    replay, and every attempt re-plans as recorded."""
    from flashfsm import example_logs, read_jsonl_file

    path = example_logs() / f"{name}.jsonl"
    events = read_jsonl_file(path)
    assert replay_run(events).result is not None
    for i, e in enumerate(events):
        if isinstance(e, AttemptStarted):
            plan = plan_attempt(replay_run(events[:i]))
            assert (plan.candidate, plan.on_last_gpu, plan.bonus) == (
                e.candidate,
                e.on_last_gpu,
                e.bonus,
            )
