"""The GPU walk by candidate identity (provider, GPU class), provider capabilities, the pure
outcome API and the shell's hooks.

The walks mirror the reference runner's attempt loop case by case; the two cases where the
run machine used to key the walk by GPU class alone are here as they should go.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashfsm import MemoryStore
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    CancelRequested,
    Candidate,
    DeployFailed,
    RunStarted,
    SubmitFailed,
)
from flashfsm.fsm.run import (
    DeployFailure,
    IllegalOutcome,
    JobVerdict,
    RunState,
    SubmitFailure,
    UserCancel,
    apply_outcome,
    attempt_has_cache,
    evolve_run,
    replay_run,
    supports,
)
from flashfsm.runs import RunpodRunAdapters, UnsupportedProvider, request_cancel, supervise_run
from flashfsm.submit import RunSpec, WorkerDependencies, deploy_request
from tests.test_run import OUTCOMES, Clock, Script, cand, run

# --- the reference's walks ----------------------------------------------------------------


def walk(attempts: list[AttemptStarted]) -> list[str]:
    return [f"{a.provider}/{a.gpu_class}" for a in attempts]


def test_a_class_on_two_providers_is_two_candidates_and_the_walk_tries_both():
    candidates = [
        cand("L4", 0.39, provider="runpod"),
        cand("L4", 0.45, provider="lambda"),
        cand("A10", 0.60, provider="lambda"),
    ]
    result, attempts, _, _, _ = run(candidates, {0: "stalled", 1: "stalled"}, max_retries=2)
    assert walk(attempts) == ["runpod/L4", "lambda/L4", "lambda/A10"]
    assert [a.on_last_gpu for a in attempts] == [False, False, True]
    assert result.ok and result.attempts == 3


def test_the_first_of_two_providers_of_one_class_is_not_the_last_gpu():
    _, attempts, _, _, _ = run(
        [cand("L4", 0.39, provider="runpod"), cand("L4", 0.45, provider="lambda")],
        {0: "no_capacity", 1: "no_capacity", 2: "no_capacity"},
    )
    assert walk(attempts) == ["runpod/L4", "lambda/L4", "runpod/L4"]
    assert [a.on_last_gpu for a in attempts] == [False, True, True]


def test_a_two_provider_same_class_walk_prefers_the_fresh_provider_then_re_rolls():
    candidates = [
        cand("H100", 2.0, provider="lambda"),
        cand("H100", 2.5, provider="runpod"),
        cand("A100", 1.5, provider="runpod"),
    ]
    _, attempts, _, _, _ = run(candidates, {n: "job_preempted" for n in range(4)}, max_retries=3)
    # runpod/A100 (cheapest), lambda/H100 (fresh provider), runpod/H100 (untried), then
    # every pair tried: the cheapest again.
    assert walk(attempts) == ["runpod/A100", "lambda/H100", "runpod/H100", "runpod/A100"]
    assert [a.on_last_gpu for a in attempts] == [False, False, True, True]


def test_the_weight_cache_is_not_attached_on_a_provider_without_it_and_earns_no_bonus():
    _, attempts, _, _, _ = run(
        [cand("A10", 0.75, provider="lambda"), cand("L4", 0.79, provider="runpod")],
        {0: "no_capacity", 1: "ok"},
        max_retries=1,
        weight_cache=True,
    )
    assert [(walk([a])[0], a.weight_cache, a.bonus, a.cache_dropped) for a in attempts] == [
        ("lambda/A10", False, False, False),
        ("runpod/L4", True, False, False),
    ]


def test_the_bonus_follows_a_runpod_attempt_with_the_cache():
    _, attempts, _, _, _ = run(
        [cand("L4", 0.39, provider="runpod"), cand("A10", 0.75, provider="lambda")],
        {0: "no_capacity", 1: "no_capacity", 2: "ok"},
        max_retries=1,
        weight_cache=True,
    )
    assert [(walk([a])[0], a.weight_cache, a.bonus) for a in attempts] == [
        ("runpod/L4", True, False),
        ("runpod/L4", False, True),
        ("lambda/A10", False, False),
    ]


@pytest.mark.parametrize(("provider", "last"), [("runpod", False), ("lambda", True)])
def test_a_spent_budget_is_the_last_gpu_unless_a_cache_bonus_is_pending(provider, last):
    _, attempts, _, _, _ = run(
        [cand("L4", 0.39, provider=provider), cand("A10", 0.75, provider=provider)],
        {0: "no_capacity"},
        max_retries=0,
        weight_cache=True,
    )
    assert attempts[0].on_last_gpu is last


# --- properties ---------------------------------------------------------------------------

CANDIDATES = st.lists(
    st.builds(
        cand,
        st.sampled_from(["L4", "A10", "H100"]),
        st.sampled_from([0.5, 1.0, 2.0]),
        st.sampled_from([24.0, 80.0]),
        provider=st.sampled_from(["runpod", "lambda", "vast"]),
    ),
    min_size=1,
    max_size=5,
)
WALKS = {
    "candidates": CANDIDATES,
    "outcomes": st.lists(OUTCOMES, max_size=7),
    "max_retries": st.integers(0, 4),
    "weight_cache": st.booleans(),
}


def _walked(candidates, outcomes, max_retries, weight_cache):
    _, attempts, _, events, _ = run(
        candidates, dict(enumerate(outcomes)), max_retries=max_retries, weight_cache=weight_cache
    )
    return attempts, events


@settings(max_examples=150)
@given(**WALKS)
def test_identity_keyed_walks_never_repeat_a_provider_class_pair_while_an_untried_one_remains(
    candidates, outcomes, max_retries, weight_cache
):
    attempts, _ = _walked(candidates, outcomes, max_retries, weight_cache)
    identities = {(c.provider, c.gpu_class) for c in candidates}
    tried: set[tuple[str, str]] = set()
    for a in attempts:
        pair = (a.provider, a.gpu_class)
        assert pair == (candidates[a.candidate].provider, candidates[a.candidate].gpu_class)
        if pair in tried and not a.bonus:
            assert identities <= tried, f"{pair} again while {identities - tried} untried"
        tried.add(pair)


@settings(max_examples=150)
@given(**WALKS)
def test_the_weight_cache_is_attached_only_where_its_provider_supports_it(
    candidates, outcomes, max_retries, weight_cache
):
    attempts, events = _walked(candidates, outcomes, max_retries, weight_cache)
    state = replay_run(events)
    spec = RunSpec(
        run_id="r", gpu_class="L4", weight_cache="flash-weights" if weight_cache else None
    )
    deps = WorkerDependencies(image="img")
    for a in attempts:
        assert a.weight_cache == attempt_has_cache(state, a)
        if a.weight_cache:
            assert weight_cache and supports(a.provider, "weight_cache") and not a.cache_dropped
        if a.bonus:  # the bonus follows an attempt that had the cache
            before = next(b for b in attempts if b.attempt == a.attempt - 1)
            assert before.weight_cache and before.provider == a.provider
        request = deploy_request(spec, deps, a)
        assert (request.weight_cache is not None) == bool(a.weight_cache)


@settings(max_examples=150)
@given(**WALKS)
def test_on_last_gpu_is_true_exactly_when_at_most_one_untried_candidate_remains_or_the_budget_is_spent_with_no_bonus_left(  # noqa: E501
    candidates, outcomes, max_retries, weight_cache
):
    attempts, _ = _walked(candidates, outcomes, max_retries, weight_cache)
    identities = {(c.provider, c.gpu_class) for c in candidates}
    tried: set[tuple[str, str]] = set()
    walked = 0  # attempts counted against the budget before this one
    bonus_used = False
    for a in attempts:
        untried = identities - tried
        if a.bonus:
            # no walk attempt is left once the budget's attempts are all made
            budget_spent = walked > max_retries
            expected = len(untried) == 0 or budget_spent
        else:
            bonus_left = bool(a.weight_cache) and not bonus_used
            budget_spent = walked >= max_retries
            expected = len(untried) <= 1 or (budget_spent and not bonus_left)
        assert a.on_last_gpu is expected, (a, untried, walked)
        tried.add((a.provider, a.gpu_class))
        walked += not a.bonus
        bonus_used = bonus_used or a.bonus


# --- providers ----------------------------------------------------------------------------


def test_adapters_refuse_a_provider_they_do_not_deploy_to_before_anything_is_recorded():
    store, clock = MemoryStore(), Clock()
    adapters = RunpodRunAdapters(client=None, deployer=None, job_input=None)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedProvider, match="lambda/A10"):
        supervise_run(
            "r1",
            [cand("L4", 0.39), cand("A10", 0.6, provider="lambda")],
            adapters,
            store=store,
            clock=clock,
            sleep=clock.sleep,
        )
    assert store.read("run-r1") == []


def test_adapters_without_a_provider_list_deploy_what_they_are_asked():
    result, attempts, _, _, _ = run([cand("A10", 0.6, provider="lambda")], {})
    assert result.ok and walk(attempts) == ["lambda/A10"]


# --- the pure outcome API -----------------------------------------------------------------


def _fold(state: RunState, drafts, at: float) -> list[Any]:
    built = []
    for d in drafts:
        event = d.build("run-p", state.next_seq, f"id{state.next_seq}", at)
        evolve_run(state, event)
        built.append(event)
    return built


TWO = (cand("L4", 1.0), cand("A10", 2.0))


def _started(candidates: tuple[Candidate, ...] = TWO, **fields: Any) -> RunState:
    state = RunState()
    evolve_run(
        state,
        RunStarted(
            stream="run-p",
            seq=0,
            id="id0",
            at=1.0,
            run_id="p",
            candidates=tuple(candidates),
            **fields,
        ),
    )
    evolve_run(
        state,
        AttemptStarted(
            stream="run-p",
            seq=1,
            id="id1",
            at=2.0,
            attempt=0,
            candidate=0,
            provider="runpod",
            gpu_class="L4",
        ),
    )
    return state


def test_a_deploy_error_records_the_failed_step_and_ends_the_attempt_as_a_poll_error():
    state = _started()
    events = _fold(state, apply_outcome(state, DeployFailure(0, "DeployError", "quota")), 3.0)
    assert [type(e) for e in events] == [DeployFailed, AttemptEnded]
    assert events[1].failure == FailureKind.POLL_ERROR
    assert events[1].detail == "deploy failed: DeployError: quota"
    assert state.current.ended is not None and state.phase == "BETWEEN"


def test_a_submit_error_needs_an_endpoint_and_ends_the_attempt():
    state = _started()
    with pytest.raises(IllegalOutcome):
        apply_outcome(state, SubmitFailure(0, "HTTPError", "500"))
    state.current.endpoint_id = "ep"  # as EndpointDeployed would fold it
    events = _fold(state, apply_outcome(state, SubmitFailure(0, "HTTPError", "500")), 3.0)
    assert [type(e) for e in events] == [SubmitFailed, AttemptEnded]


def test_a_job_verdict_ends_the_attempt_and_only_the_current_one():
    state = _started()
    with pytest.raises(IllegalOutcome):
        apply_outcome(state, JobVerdict(1, ok=True))
    [ended] = _fold(state, apply_outcome(state, JobVerdict(0, ok=False, failure="stalled")), 3.0)
    assert isinstance(ended, AttemptEnded) and ended.failure == "stalled"
    with pytest.raises(IllegalOutcome):  # already ended
        apply_outcome(state, JobVerdict(0, ok=True))


def test_a_cancel_is_one_event_and_nothing_once_the_run_concluded():
    state = _started()
    [cancel] = _fold(state, apply_outcome(state, UserCancel(by="me", reason="why")), 3.0)
    assert isinstance(cancel, CancelRequested) and state.cancel_requested
    state.result = object()
    assert apply_outcome(state, UserCancel()) == ()


def test_request_cancel_stamps_the_injected_clock():
    store = MemoryStore()
    request_cancel(store, "run-x", by="t", clock=lambda: 42.5)
    [event] = store.read("run-x")
    assert isinstance(event, CancelRequested) and event.at == 42.5


def test_on_attempt_end_is_called_once_per_attempt_that_ends():
    seen: list[tuple[int, str | None, int]] = []

    def hook(state: RunState, attempt) -> None:
        seen.append((attempt.started.attempt, attempt.ended.failure, len(state.attempts)))

    result, *_ = run(
        [cand("L4", 1.0), cand("A10", 2.0)],
        {0: "deploy_error", 1: "stalled"},
        on_attempt_end=hook,
    )
    assert result.ok
    assert seen == [(0, "poll_error", 1), (1, "stalled", 2), (2, None, 3)]


def test_a_resumed_run_does_not_call_the_hook_again_for_attempts_ended_before():
    store = MemoryStore()
    first: list[int] = []
    run(
        [cand("L4", 1.0)],
        {0: "job_failed"},
        store=store,
        on_attempt_end=lambda s, a: first.append(1),
    )
    again: list[int] = []
    run([cand("L4", 1.0)], {}, store=store, on_attempt_end=lambda s, a: again.append(1))
    assert first == [1] and again == []


def test_the_shell_records_what_apply_outcome_makes():
    clock = Clock()
    store = MemoryStore()
    script = Script({0: "deploy_error"}, clock, store, "run-r1")
    supervise_run(
        "r1", [cand("L4", 1.0)], script, max_retries=0, store=store, clock=clock, sleep=clock.sleep
    )
    kinds = [e.kind for e in store.read("run-r1")]
    assert kinds[kinds.index("DeployFailed") + 1] == "AttemptEnded"


def test_candidate_identity_keeps_its_default_provider():
    assert Candidate(gpu_class="L4").provider == "runpod"
