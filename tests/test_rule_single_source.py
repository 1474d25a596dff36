"""A rule is one implementation: its measure. The check and the explanation both come from it.

- every number `explain`, `why-not` and `whatif` quote for a rule is one the rule's measure
  found in the log (at the decision point or at an earlier point the rule saw), and a rule
  holds in its explanation exactly when its check fires there;
- a check fires exactly when its measure, asked to explain, says the rule holds, with the
  same verdict and numbers; a recorded verdict's explanation quotes its check's numbers;
- changing one rule's measure (its threshold) moves its verdict and its explanation
  together, and through the whole watch;
- the rules' vocabulary is typed: a misspelt trigger, read or signal raises where it is
  written, never a silent no-op;
- every default lives in `GracePolicy` alone: nothing restates one.

The logs are those `poll_job` writes for Hypothesis's scripts (tests/test_properties.py),
one log per rule on which it fires (tests/test_rule_declarations.py) and the recorded
example logs (`flashfsm.example_logs()`), each judged at every prefix.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashfsm
from flashfsm import JobHandle, MemoryStore, poll_job
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import Concluded, Event
from flashfsm.events.policy import DEFAULT_POLICY, GracePolicy
from flashfsm.fsm import rules
from flashfsm.fsm.findings import Finding, Measure, Point
from flashfsm.fsm.job import READ_COMMANDS, Trigger, check_triggers, evolve, skip_read, verify
from flashfsm.fsm.machine import IllegalTransition, fire
from flashfsm.fsm.rules import RULES, RULES_BY_NAME, Read, Rule, Signal, TimerSpec, judge
from flashfsm.fsm.state import JobState
from flashfsm.postmortem.explain import decision_point, explain, why_not_report
from tests.conftest import VirtualClock
from tests.test_properties import run_poll_job, scripts
from tests.test_rule_declarations import FIRING, _firing_log

ROOT = Path(__file__).resolve().parents[1]


@cache
def firing_logs() -> dict[str, list[Event]]:
    """One log per rule, on which it fires (tests/test_rule_declarations.py's scripts)."""
    return {rule: _firing_log(rule) for rule in FIRING}


@cache
def example_logs() -> dict[str, list[Event]]:
    """The recorded example job logs (`flashfsm.example_logs()`)."""
    store = open_store(f"jsonl://{flashfsm.example_logs()}")
    try:
        return {name: store.read(name) for name in store.streams() if name.startswith("job-")}
    finally:
        store.close()


def prefixes(events: list[Event]) -> Iterator[list[Event]]:
    """Every prefix of a log, the whole log (with its verdict) included."""
    for end in range(1, len(events) + 1):
        yield events[:end]


def key(m: Measure) -> tuple[Any, ...]:
    """What a measure says: the quantity, its value, the limit's name and value, the unit."""
    return (m.quantity, m.value, m.limit_name, m.limit, m.unit)


def measured(rule: Rule, p: Point) -> set[tuple[Any, ...]]:
    """Every measure `rule`'s measure found at the log's decision point and at the point
    the rules judged after each event (asked directly, not through the explanation)."""
    found: set[tuple[Any, ...]] = set()
    points = [(p.state, p.at), *((s, e.at) for (e, _, _), s in zip(p.steps, p.judged, strict=True))]
    for s, at in points:
        finding = rule.measure(s, at, p.t)
        if finding is not None:
            found.update(key(m) for m in finding.measures)
    return found


def assert_explained_from_measures(events: list[Event]) -> None:
    p = decision_point(events)
    for rule in RULES:
        said = rule.explain(p)
        assert said.held == (rule.check(p.state, p.at) is not None), rule.name
        assert said.measures or said.facts, f"{rule.name} says nothing"
        quoted = {key(m) for m in said.measures}
        assert quoted <= measured(rule, p), (rule.name, quoted - measured(rule, p))
        for m in said.measures:  # the comparison printed is the rule's at the decision point
            assert not m.fired or said.held, (rule.name, m)


def assert_check_is_the_measure(events: list[Event]) -> None:
    s = JobState()
    for event in events:
        if isinstance(event, Concluded):
            break
        evolve(s, event)
        views = [s] if "heartbeat" not in s.pending else [s, skip_read(s.copy())]
        for state in views:
            assert set(state.pending) <= set(Read), state.pending
            for rule in RULES:
                for now in (event.at, event.at + 1e4):
                    fired = rule.check(state, now)
                    seen = rule.see(state, now, lambda at: f"t{at}")
                    assert (fired is not None) == (seen is not None and seen.held), rule.name
                    if fired is not None:
                        assert seen is not None
                        assert dataclasses.replace(seen, facts=()) == fired, rule.name


# --- every number an explanation quotes is its measure's ------------------------------------


@pytest.mark.parametrize("rule", sorted(FIRING))
def test_every_rule_s_explanation_is_its_measure_s_finding_on_its_firing_log(rule: str) -> None:
    events = firing_logs()[rule]
    for prefix in prefixes(events):
        assert_explained_from_measures(prefix)
    # the verdict's explanation quotes exactly the numbers its check fired with
    p = decision_point(events)
    fired = RULES_BY_NAME[rule].check(p.state, p.at)
    assert fired is not None
    assert explain(events).measures == fired.measures


@pytest.mark.parametrize("name", sorted(example_logs()))
def test_every_rule_s_explanation_is_its_measure_s_finding_on_the_example_logs(name: str) -> None:
    events = example_logs()[name]
    for prefix in prefixes(events):
        assert_explained_from_measures(prefix)
        assert_check_is_the_measure(prefix)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scripts(), st.data())
def test_every_number_an_explanation_quotes_is_one_its_measure_found(
    script: Any, data: st.DataObject
) -> None:
    _, log, _ = run_poll_job(script)
    assert_check_is_the_measure(log)
    cuts = data.draw(st.lists(st.integers(1, len(log)), min_size=1, max_size=4), label="cuts")
    for end in {*cuts, len(log)}:
        assert_explained_from_measures(log[:end])
    verdict = log[-1]
    if isinstance(verdict, Concluded):
        p = decision_point(log)
        fired = RULES_BY_NAME[verdict.rule].check(p.state, p.at)
        assert fired is not None and explain(log).measures == fired.measures


# --- changing one measure moves the verdict and the explanation together --------------------

#: The policy knob each rule with a limit compares with.
KNOBS = {
    "client_deadline": "deadline_s",
    "poll_errors": "max_poll_errors",
    "queue_grace": "queue_grace_s",
    "unhealthy_worker": "unhealthy_grace_s",
    "throttled_worker": "throttled_grace_s",
    "stall": "stall_after_s",
}


def scaled(rule: Rule, knob: str, factor: float) -> Rule:
    """`rule` with a measure that compares with its limit times `factor`: one function
    changed, and nothing else."""

    def measure(s: JobState, now: float, t: Any = None) -> Finding | None:
        twin = s.copy()
        value = getattr(s.policy, knob)
        twin.policy = s.policy.model_copy(update={knob: type(value)(value * factor)})
        return rule.measure(twin, now, t)

    return dataclasses.replace(rule, measure=measure)


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_changed_measure_moves_the_rule_s_verdict_and_its_explanation(name: str) -> None:
    rule, knob = RULES_BY_NAME[name], KNOBS[name]
    moved = {}
    for factor in (0.5, 4.0):
        changed = scaled(rule, knob, factor)
        moved[factor] = 0
        for prefix in prefixes(firing_logs()[name]):
            p = decision_point(prefix)
            before, after = rule.explain(p), changed.explain(p)
            verdict = judge(p.state, (changed,), p.at)
            # both faces of the changed rule follow its one measure
            assert after.held == (verdict is not None) == (changed.check(p.state, p.at) is not None)
            assert {key(m) for m in after.measures} <= measured(changed, p)
            if after.held != before.held:  # the verdict moved here, and the words with it
                moved[factor] += 1
                assert after.held == (factor < 1)
                limit = getattr(p.state.policy, knob)
                assert [m.limit for m in before.measures] == [limit]
                assert [m.limit for m in after.measures] == [type(limit)(limit * factor)]
    # a looser limit no longer fires where the rule fired (a tighter one may fire sooner,
    # when the log has a point between the two limits)
    assert moved[4.0], f"scaling {knob} moved neither the verdict nor the words of {name}"


def test_changing_the_stall_limit_moves_the_watch_s_verdict_and_its_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def watch(stream: str) -> list[Event]:
        clock, store = VirtualClock(), MemoryStore()
        poll_job(
            JobHandle("ep", "flash-ep", stream, submitted_at=clock.now),
            interval_s=10.0,
            client=_Running(),
            clock=clock,
            sleep=clock.sleep,
            store=store,
            stream=stream,
            stall_after_s=120.0,
        )
        return store.read(stream)

    def words(log: list[Event]) -> tuple[Measure, str]:
        [m] = explain(log).measures
        return m, why_not_report(log[:-1], "stall").text

    as_is = watch("as-is")
    said = (*words(as_is), verify(as_is).ok)
    original = rules.stall_limit  # the stall rule's threshold: one function, changed here
    monkeypatch.setattr(rules, "stall_limit", lambda s: (original(s)[0] / 2, original(s)[1]))
    halved = watch("halved")
    now_said = (*words(halved), verify(halved).ok)
    for log, (m, text, verified), limit in ((as_is, said, 120.0), (halved, now_said, 60.0)):
        assert isinstance(log[-1], Concluded) and log[-1].rule == "stall" and verified
        assert f"limit {limit:.0f}s" in log[-1].detail
        assert (m.limit, m.fired) == (limit, True) and m.value > limit
        assert f"stall window {limit:.0f} s" in text
    assert halved[-1].at < as_is[-1].at
    # (the recorded log is judged by today's rules: its explanation moved with the measure)
    assert words(as_is)[0].limit == 60.0 and not verify(as_is).ok


class _Running:
    """A RunPod client whose job runs forever, without progress."""

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        return {"status": "IN_PROGRESS"}

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return {"workers": {"running": 1}}


# --- the vocabulary is typed: a typo raises -----------------------------------------------------


def test_a_misspelt_trigger_raises_where_it_is_written() -> None:
    with pytest.raises(AttributeError):
        _ = Trigger.REQUEUD  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        Trigger("requeud")
    with pytest.raises(ValueError, match="unknown to the table"):
        check_triggers([*Trigger, "requeud"])
    with pytest.raises(ValueError, match="never fired by the fold"):
        check_triggers(t for t in Trigger if t is not Trigger.RESUMED)
    check_triggers(Trigger)  # the fold's set is the table's
    model = type("Model", (), {"state": "QUEUED"})()
    with pytest.raises(IllegalTransition, match="unknown trigger"):
        fire(model, "requeud")


def _rule(**fields: Any) -> Rule:
    return dataclasses.replace(RULES_BY_NAME["queue_grace"], **fields)


def test_a_misspelt_read_or_signal_raises_at_the_declaration() -> None:
    with pytest.raises(ValueError, match=r"rule queue_grace waits_for: 'prob' is not a read"):
        _rule(waits_for={"status", "prob"})
    with pytest.raises(ValueError, match="forces only reads it waits for"):
        _rule(waits_for={Read.HEARTBEAT}, forces={Read.HEARTBEAT})  # the heartbeat keeps its pace
    with pytest.raises(ValueError, match="forces only reads it waits for"):
        _rule(forces={Read.PROBE})  # a probe it does not wait for
    with pytest.raises(ValueError, match="judged before a fetch"):
        _rule(before_fetch=True)
    assert _rule(waits_for=["status", "probe"]).waits_for == {Read.STATUS, Read.PROBE}
    limit = rules.QUEUE_TIMER.limit
    with pytest.raises(TypeError, match="not a Signal"):
        TimerSpec("queue", limit, arms=("queued",))  # type: ignore[arg-type]
    assert TimerSpec("queue", limit, arms=(Signal.QUEUED,)).arms == (Signal.QUEUED,)


def test_every_read_a_rule_waits_for_is_one_the_fold_can_have_pending() -> None:
    assert set(READ_COMMANDS) == set(Read) - {Read.STATUS}
    for rule in RULES:
        assert rule.waits_for <= set(Read) and rule.forces <= rule.waits_for
        judges_a_failed_fetch = rule.name in {
            "job_lost",
            "unauthorized",
            "poll_errors",
            "result_expired",  # D9: a 404 after a blind gap
            "lost_unverified",
        }
        assert rule.before_fetch or Read.STATUS in rule.waits_for or judges_a_failed_fetch


# --- every default lives in the policy --------------------------------------------------------


def _is_number(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    )


def _literal_defaults(tree: ast.AST) -> Iterator[tuple[str, str, object]]:
    names = set(GracePolicy.model_fields) | {"starve_after_s"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.args[len(a.args) - len(a.defaults) :]
            pairs = [
                *zip(positional, a.defaults, strict=True),
                *zip(a.kwonlyargs, a.kw_defaults, strict=True),
            ]
            for arg, default in pairs:
                if arg.arg in names and _is_number(default):
                    yield node.name, arg.arg, default.value  # type: ignore[union-attr]
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in names
            and _is_number(node.value)
        ):
            yield "(a field)", node.target.id, node.value.value  # type: ignore[union-attr]


def test_no_default_of_a_rule_s_limit_is_restated_outside_the_policy() -> None:
    found = []
    for path in sorted((ROOT / "flashfsm").rglob("*.py")):
        if path.name == "policy.py":
            continue  # the policy itself
        for where, name, value in _literal_defaults(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(ROOT)}: {where} {name}={value}")
    assert not found, found


def test_poll_job_s_defaults_are_the_policy_s() -> None:
    signature = inspect.signature(poll_job)
    for name, parameter in signature.parameters.items():
        if name in GracePolicy.model_fields:
            assert parameter.default == getattr(DEFAULT_POLICY, name), name
    fires = RULES_BY_NAME["poll_errors"].fires
    assert fires.startswith(f"the {DEFAULT_POLICY.max_poll_errors}th consecutive")
    assert f"min({DEFAULT_POLICY.max_backoff_s:g}, interval × n)" in fires
