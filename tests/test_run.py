"""The run machine: the GPU walk, retries, the cache-drop bonus, cancels, resume by replay."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashfsm import MemoryStore, PollResult
from flashfsm.errors import WatchStopped
from flashfsm.events.models import AttemptStarted, Candidate, RunConcluded
from flashfsm.fsm.run import RunState, evolve_run, plan_attempt, replay_run
from flashfsm.runs import Deployed, request_cancel, supervise_run

RULE = {
    "no_capacity": "queue_grace",
    "slow_start": "slow_start",
    "stalled": "stall",
    "poll_error": "poll_errors",
    "job_preempted": "platform_termination",
    "lost": "job_lost",
    "job_failed": "worker_failed",
    "unauthorized": "unauthorized",
}


def cand(gpu: str, price: float, vram: float = 24.0, provider: str = "runpod") -> Candidate:
    return Candidate(provider=provider, gpu_class=gpu, price_per_hour=price, vram_gb=vram)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Crash(BaseException):
    """The control plane dies."""


@dataclasses.dataclass
class Script:
    """Fake adapters: each attempt's outcome is scripted by its number.

    An outcome is "ok", a failure kind, "deploy_error", "submit_error", or a callable
    (attempt number, adapters) -> one of those, run inside `watch`.
    """

    outcomes: dict[int, Any]
    clock: Clock
    store: Any = None
    stream: str = ""
    calls: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def outcome(self, number: int) -> Any:
        return self.outcomes.get(number, "ok")

    def deploy(self, run: RunState, attempt, record) -> Deployed:
        number = attempt.started.attempt
        self.calls.append(("deploy", number))
        if self.outcome(number) == "deploy_error":
            raise RuntimeError("saveEndpoint failed")
        return Deployed(f"ep-{number}", attempt.started.endpoint_name)

    def submit(self, run: RunState, attempt) -> tuple[str, float]:
        number = attempt.started.attempt
        self.calls.append(("submit", number))
        if self.outcome(number) == "submit_error":
            raise RuntimeError("run failed")
        return f"job-{number}", self.clock()

    def watch(self, run: RunState, attempt, store, stop: Callable[[], bool]) -> PollResult:
        number = attempt.started.attempt
        self.calls.append(("watch", number))
        outcome = self.outcome(number)
        if callable(outcome):
            outcome = outcome(number, self, stop)
        self.clock.now += 100
        if outcome == "ok":
            return PollResult(
                True, metrics={"attempt": number}, state="SUCCEEDED", rule="completed"
            )
        return PollResult(
            False, failure=outcome, detail=f"{outcome} on attempt {number}", rule=RULE[outcome]
        )

    def cancel_job(self, run: RunState, attempt) -> bool:
        self.calls.append(("cancel", attempt.job_id))
        return True

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        self.calls.append(("delete", endpoint_id))
        return True


def run(candidates, outcomes, *, max_retries=2, weight_cache=False, store=None, **kw):
    clock = Clock()
    store = store or MemoryStore()
    script = Script(outcomes, clock, store, "run-r1")
    result = supervise_run(
        "r1",
        candidates,
        script,
        max_retries=max_retries,
        weight_cache=weight_cache,
        store=store,
        clock=clock,
        sleep=clock.sleep,
        **kw,
    )
    events = store.read("run-r1")
    attempts = [e for e in events if isinstance(e, AttemptStarted)]
    return result, attempts, script, events, clock


FOUR = [cand("A", 3.0), cand("B", 1.0), cand("C", 2.0), cand("D", 4.0)]


def test_three_infra_failures_step_through_three_classes_in_price_order():
    result, attempts, _, _, _ = run(
        FOUR, {0: "no_capacity", 1: "stalled", 2: "job_preempted"}, max_retries=3
    )
    assert [a.gpu_class for a in attempts] == ["B", "C", "A", "D"]
    assert result.ok and result.attempts == 4 and result.metrics == {"attempt": 3}


def test_with_two_candidates_the_walk_goes_cheaper_pricier_cheaper():
    result, attempts, _, _, _ = run(
        [cand("pricey", 2.0), cand("cheap", 1.0)],
        {0: "no_capacity", 1: "no_capacity", 2: "no_capacity"},
    )
    assert [a.gpu_class for a in attempts] == ["cheap", "pricey", "cheap"]
    assert not result.ok and result.failure == "no_capacity" and result.attempts == 3


def test_equal_prices_prefer_the_smaller_card_and_a_provider_that_has_not_failed():
    candidates = [
        cand("big", 1.0, vram=80, provider="runpod"),
        cand("small", 1.0, vram=24, provider="runpod"),
        cand("other", 5.0, vram=24, provider="elsewhere"),
    ]
    _, attempts, _, _, _ = run(candidates, {0: "no_capacity", 1: "no_capacity"})
    assert [a.gpu_class for a in attempts] == ["small", "other", "big"]


def test_on_last_gpu_is_false_while_a_next_class_remains_and_true_on_the_last():
    _, attempts, _, _, _ = run(
        [cand("A", 1.0), cand("B", 2.0), cand("C", 3.0)],
        {0: "no_capacity", 1: "no_capacity", 2: "no_capacity"},
        max_retries=3,
    )
    assert [(a.gpu_class, a.on_last_gpu) for a in attempts] == [
        ("A", False),
        ("B", False),
        ("C", True),
        ("A", True),  # every class tried: the cheapest again, still the last
    ]


def test_on_last_gpu_is_true_when_the_retry_budget_is_spent():
    _, attempts, _, _, _ = run(FOUR, {0: "stalled", 1: "stalled", 2: "stalled"}, max_retries=2)
    assert [a.on_last_gpu for a in attempts] == [False, False, True]


def test_job_failed_stops_after_one_attempt():
    result, attempts, script, _, _ = run(FOUR, {0: "job_failed"})
    assert len(attempts) == 1
    assert not result.ok and result.failure == "job_failed" and "not retried" in result.detail
    assert ("delete", "ep-0") in script.calls
    assert not any(call[0] == "cancel" for call in script.calls)


def test_a_deploy_error_is_a_poll_error_that_consumes_a_retry_after_a_growing_wait():
    result, attempts, script, _, clock = run(
        FOUR, {0: "deploy_error", 1: "submit_error"}, max_retries=2
    )
    assert len(attempts) == 3 and result.ok
    assert clock.sleeps == [30.0, 60.0]
    assert ("submit", 0) not in script.calls  # nothing submitted without an endpoint
    assert ("delete", "ep-1") in script.calls  # the endpoint of the failed submit


def test_a_deploy_error_with_no_retry_left_fails_the_run_as_a_poll_error():
    result, attempts, _, _, _ = run(FOUR, {0: "deploy_error"}, max_retries=0)
    assert len(attempts) == 1
    assert result.failure == "poll_error" and "deploy failed" in result.detail


def test_the_cache_drop_bonus_happens_once_on_the_same_class_and_the_walk_keeps_its_budget():
    result, attempts, _, _, _ = run(
        [cand("cheap", 1.0), cand("pricey", 2.0)],
        {0: "no_capacity", 1: "no_capacity", 2: "no_capacity", 3: "no_capacity"},
        max_retries=1,
        weight_cache=True,
    )
    assert [(a.gpu_class, a.cache_dropped, a.bonus) for a in attempts] == [
        ("cheap", False, False),
        ("cheap", True, True),  # the bonus: same class, no cache
        ("pricey", True, False),  # the walk's full budget still follows; the drop is sticky
    ]
    assert result.attempts == 3 and result.failure == "no_capacity"


def test_no_bonus_for_a_failure_that_is_not_capacity_or_poll_error():
    _, attempts, _, _, _ = run(
        [cand("cheap", 1.0), cand("pricey", 2.0)],
        {0: "stalled", 1: "stalled"},
        max_retries=1,
        weight_cache=True,
    )
    assert [a.bonus for a in attempts] == [False, False]


def test_before_a_retry_the_previous_job_is_cancelled_and_its_endpoint_deleted():
    result, _, script, _, _ = run(FOUR, {0: "stalled"})
    assert result.ok
    order = [c for c in script.calls if c[0] in ("cancel", "delete", "deploy")]
    assert order == [
        ("deploy", 0),
        ("cancel", "job-0"),
        ("delete", "ep-0"),
        ("deploy", 1),
        ("delete", "ep-1"),  # at the end every endpoint the run created is deleted
    ]


def _cancel_during(phase: str):
    def outcomes(number: int, script: Script, stop) -> str:
        if ("cancel", f"job-{number}") in script.calls:
            # The job, cancelled on the platform, watched on to the platform's answer
            # (CANCELLED: `platform_termination`); this watch is not stopped by the cancel.
            assert stop() is False
            return "job_preempted"
        request_cancel(script.store, script.stream, by="test", reason="enough")
        if phase == "watch":
            assert stop() is True
            raise WatchStopped("stopped")
        return "ok"  # a success that arrives after the cancel

    return outcomes


@pytest.mark.parametrize("phase", ["watch", "success_after_cancel"])
def test_a_cancel_while_watching_stops_the_run_and_cleans_up(phase):
    result, attempts, script, events, _ = run(FOUR, {0: "stalled", 1: _cancel_during(phase)})
    assert not result.ok and result.failure == "cancelled"
    assert len(attempts) == 2
    assert ("cancel", "job-1") in script.calls or phase == "success_after_cancel"
    # a cancelled job is watched again, to the platform's answer; a finished one is not
    assert script.calls.count(("watch", 1)) == (2 if phase == "watch" else 1)
    assert ("delete", "ep-1") in script.calls
    assert isinstance(events[-1], RunConcluded) and events[-1].failure == "cancelled"


def test_a_cancel_before_the_run_starts_provisions_nothing():
    store = MemoryStore()
    request_cancel(store, "run-r1", reason="changed my mind")
    result, attempts, script, _, _ = run(FOUR, {}, store=store)
    assert result.failure == "cancelled" and attempts == [] and script.calls == []


def test_a_cancel_during_deploy_starts_no_further_provisioning():
    clock = Clock()
    store = MemoryStore()

    class CancelInDeploy(Script):
        def deploy(self, run, attempt, record):
            request_cancel(self.store, self.stream)
            return super().deploy(run, attempt, record)

    script = CancelInDeploy({}, clock, store, "run-r1")
    result = supervise_run("r1", FOUR, script, store=store, clock=clock, sleep=clock.sleep)
    assert result.failure == "cancelled"
    assert [c for c in script.calls if c[0] in ("submit", "watch")] == []
    assert ("delete", "ep-0") in script.calls


def test_a_cancel_between_attempts_stops_the_walk():
    def cancel_then_fail(number, script, stop):
        request_cancel(script.store, script.stream)
        return "no_capacity"

    result, attempts, script, _, _ = run(FOUR, {0: cancel_then_fail})
    assert result.failure == "cancelled" and len(attempts) == 1
    assert ("cancel", "job-0") in script.calls and ("delete", "ep-0") in script.calls


def test_a_control_plane_killed_mid_attempt_resumes_that_attempt_by_replay():
    store = MemoryStore()

    def crash(number, script, stop):
        raise Crash()

    with pytest.raises(Crash):
        run(FOUR, {0: "stalled", 1: crash}, store=store)
    result, attempts, script, _, _ = run(FOUR, {0: "stalled", 1: "ok"}, store=store)
    assert result.ok and len(attempts) == 2
    assert script.calls[0] == ("watch", 1)  # no new deploy: attempt 1's watch is resumed
    reference, *_ = run(FOUR, {0: "stalled", 1: "ok"})
    assert (result.ok, result.failure, result.attempts) == (
        reference.ok,
        reference.failure,
        reference.attempts,
    )


def test_a_finished_run_returns_its_result_without_any_call():
    store = MemoryStore()
    first, *_ = run(FOUR, {0: "job_failed"}, store=store)
    again, _, script, _, _ = run(FOUR, {}, store=store)
    assert script.calls == [] and again == first


# --- properties ---------------------------------------------------------------------------

OUTCOMES = st.sampled_from(
    [
        "ok",
        "no_capacity",
        "stalled",
        "poll_error",
        "job_preempted",
        "lost",
        "job_failed",
        "unauthorized",
        "deploy_error",
        "submit_error",
    ]
)
CANDIDATES = st.lists(
    st.builds(
        cand,
        st.sampled_from(["A", "B", "C", "D", "E"]),
        st.floats(0, 10, allow_nan=False),
        st.floats(8, 80, allow_nan=False),
        provider=st.sampled_from(["runpod", "other"]),
    ),
    min_size=1,
    max_size=5,
)


@given(
    candidates=CANDIDATES,
    outcomes=st.lists(OUTCOMES, max_size=8),
    max_retries=st.integers(0, 4),
    weight_cache=st.booleans(),
)
def test_the_walk_stays_in_the_list_and_within_budget_and_never_retries_job_failed_or_unauthorized(
    candidates, outcomes, max_retries, weight_cache
):
    _, attempts, _, events, _ = run(
        candidates, dict(enumerate(outcomes)), max_retries=max_retries, weight_cache=weight_cache
    )
    assert all(0 <= a.candidate < len(candidates) for a in attempts)
    assert all(a.gpu_class == candidates[a.candidate].gpu_class for a in attempts)
    assert len(attempts) <= max_retries + 1 + (1 if weight_cache else 0)
    assert sum(a.bonus for a in attempts) <= 1
    for number, _ in enumerate(attempts[:-1]):
        assert dict(enumerate(outcomes)).get(number, "ok") not in (
            "job_failed",
            "unauthorized",
            "ok",
        )
    assert isinstance(events[-1], RunConcluded)


@given(
    candidates=CANDIDATES,
    outcomes=st.lists(OUTCOMES, max_size=6),
    max_retries=st.integers(0, 3),
    weight_cache=st.booleans(),
)
def test_the_run_log_replays_to_the_live_run_state_after_every_prefix(
    candidates, outcomes, max_retries, weight_cache
):
    snapshots: list[tuple[int, dict]] = []
    original = evolve_run

    def spy(state, event):
        out = original(state, event)
        snapshots.append((event.seq, _snapshot(out)))
        return out

    import flashfsm.runs as runs_module
    from flashfsm.writer import Fold

    fold = runs_module.RUN
    runs_module.RUN = Fold(fold.name, fold.new, spy)  # the run writer folds through the spy
    try:
        _, _, _, events, _ = run(
            candidates,
            dict(enumerate(outcomes)),
            max_retries=max_retries,
            weight_cache=weight_cache,
        )
    finally:
        runs_module.RUN = fold
    live = {seq: snap for seq, snap in snapshots}
    for seq in range(len(events)):
        assert _snapshot(replay_run(events[: seq + 1])) == live[seq]


def _snapshot(state: RunState) -> dict:
    return {
        "state": state.state,
        "next_seq": state.next_seq,
        "attempts": [dataclasses.asdict(a) for a in state.attempts],
        "endpoints": list(state.endpoints),
        "deleted": set(state.deleted),
        "cancel": state.cancel_requested,
        "result": state.result,
    }


def test_plan_attempt_without_candidates_is_none():
    state = RunState()
    assert plan_attempt(state) is None
