"""Each verdict rule is one declaration, and everything else is derived from it.

For every rule of `rules.RULES` these tests check the declaration is whole (name, step,
why, what fires it, its verdict, its check and its explanation, and its timer when it has
one), then derive from it: the docs' rule table (docs/rules.md), a real log on which the rule fires
(driven through `poll_job` on a virtual clock), `explain` of that log, `why-not` of every
rule on every such log, and `whatif` under the recorded policy. A new rule that lacks any
part, or has no log here on which it fires, fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from flashfsm import JobHandle, MemoryStore, RunpodApiError, poll_job
from flashfsm.events.models import Concluded, Event
from flashfsm.fsm.job import verify
from flashfsm.fsm.rules import RULE_NAMES, RULES, RULES_BY_NAME, TIMER_RULES, TIMERS, Rule
from flashfsm.fsm.table import JobPhase
from flashfsm.postmortem.docs import rules_table
from flashfsm.postmortem.explain import explain, what_if, why_not_report
from tests.conftest import VirtualClock

START = 1_700_000_000.0


# --- the declarations are whole ---------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_declares_every_part(rule: Rule):
    assert re.fullmatch(r"[a-z_]+", rule.name)
    assert re.fullmatch(r"\d+|D\d+", rule.step), rule.step
    assert rule.why and "\n" not in rule.why and not re.match(r"^(Step \d+|D\d+):", rule.why)
    assert rule.fires and rule.verdict and "|" not in rule.fires + rule.verdict + rule.why
    assert callable(rule.check) and callable(rule.explain)
    phases = {p.value for p in JobPhase}
    assert any(word in phases for word in re.findall(r"[A-Z_]+", rule.verdict)), rule.verdict


def test_rule_names_are_unique_and_every_timer_belongs_to_one_rule():
    assert len(RULE_NAMES) == len(RULES) == len(set(RULE_NAMES))
    assert set(TIMER_RULES) == {spec.name for spec in TIMERS}
    for spec in TIMERS:
        assert spec.arms or spec.restarts, f"timer {spec.name} is never started"
        assert not set(spec.clears) & set(spec.arms + spec.restarts), spec.name


def test_the_rule_table_draws_one_row_per_declaration_in_order():
    cells = [line.split(" | ")[1] for line in rules_table().splitlines()[2:]]
    assert [cell.strip("`") for cell in cells if cell != "—"] == list(RULE_NAMES)
    for rule in RULES:
        assert f"| {rule.step} | `{rule.name}` |" in rules_table()


# --- a log on which each rule fires, through the real watch -----------------------------------


class Script:
    """A RunPod client that answers from scripts: status by fetch number, health always."""

    def __init__(self, status: Callable[[int], Any], health: Any = None):
        self.status, self.health, self.fetches = status, health, 0

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.fetches += 1
        answer = self.status(self.fetches)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        if self.health is None:
            raise RunpodApiError("no health", status_code=500, route="health")
        return self.health


class RecordScript(Script):
    """The same, with the endpoint's worker records: the list names one worker in `state`
    (None: it lists none)."""

    def __init__(self, status: Callable[[int], Any], health: Any, state: str | None):
        super().__init__(status, health)
        self.state = state

    def endpoint_workers(self, endpoint_id: str) -> dict[str, Any]:
        if self.state is None:
            return {"workers": []}
        return {"workers": [{"id": "w-1", "status": self.state}]}

    def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        return {"id": endpoint_id, "idleTimeout": 5}

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int = 100) -> dict[str, Any]:
        return {"lines": ["starting"], "truncated": False}


def _after(n: int, first: Any, then: Any) -> Callable[[int], Any]:
    return lambda fetch: first if fetch <= n else then


QUEUED = {"status": "IN_QUEUE"}
RUNNING = {"status": "IN_PROGRESS"}
HUGE = 10_000.0
#: rule -> (status script, health answer, poll_job keyword arguments)
FIRING: dict[str, tuple[Callable[[int], Any], Any, dict[str, Any]]] = {
    "client_deadline": (lambda _: RUNNING, None, {"deadline_s": 35.0, "stall_after_s": HUGE}),
    "job_lost": (
        _after(2, RUNNING, RunpodApiError("gone", status_code=404, route="status")),
        None,
        {},
    ),
    # D9: the first watch comes an hour after the submission, and RunPod has forgotten the
    # job: the worker's end record says it finished, or nothing says anything
    "result_expired": (
        lambda _: RunpodApiError("gone", status_code=404, route="status"),
        None,
        {
            "late_s": 3600.0,
            "heartbeat_reader": lambda force=False: {
                "stage": "done",
                "step": 300,
                "ts": START + 1800.0,
                "metrics": {"loss": 0.1},
            },
        },
    ),
    "lost_unverified": (
        lambda _: RunpodApiError("gone", status_code=404, route="status"),
        None,
        {"late_s": 3600.0},
    ),
    "unauthorized": (
        _after(2, RUNNING, RunpodApiError("revoked", status_code=401, route="status")),
        None,
        {},
    ),
    "poll_errors": (
        _after(1, QUEUED, RunpodApiError("down", status_code=503, route="status")),
        {"workers": {"idle": 1}},
        {},
    ),
    "completed": (_after(2, RUNNING, {"status": "COMPLETED", "output": {"loss": 0.1}}), None, {}),
    "completed_with_error": (
        _after(2, RUNNING, {"status": "COMPLETED", "output": {"error": "boom"}}),
        None,
        {},
    ),
    "platform_termination": (_after(2, RUNNING, {"status": "CANCELLED"}), None, {}),
    "worker_failed": (_after(2, RUNNING, {"status": "FAILED", "error": "boom"}), None, {}),
    "queue_grace": (lambda _: QUEUED, {"workers": {"idle": 1}}, {"queue_grace_s": 60.0}),
    "unhealthy_worker": (
        lambda _: QUEUED,
        {"workers": {"unhealthy": 1}},
        {"unhealthy_grace_s": 30.0, "queue_grace_s": HUGE},
    ),
    "throttled_worker": (
        lambda _: QUEUED,
        {"workers": {"throttled": 1}},
        {"throttled_grace_s": 30.0, "queue_grace_s": HUGE},
    ),
    "stall": (lambda _: RUNNING, None, {"stall_after_s": 60.0}),
    # with worker records (`listed`: the state the endpoint's list gives its worker)
    "expired_in_queue": (_after(2, QUEUED, {"status": "TIMED_OUT"}), {}, {"listed": None}),
    "crash_loop": (
        lambda _: QUEUED,
        {"workers": {"initializing": 1}},  # (restarting: the probe's rule does not arm)
        {"listed": "unhealthy", "unhealthy_grace_s": 30.0, "queue_grace_s": HUGE},
    ),
    "slow_start": (
        lambda _: QUEUED,
        {"workers": {"initializing": 1}},
        {"listed": "initializing", "start_grace_s": 60.0, "queue_grace_s": 30.0},
    ),
}


def _firing_log(rule: str) -> list[Event]:
    status, health, options = FIRING[rule]
    options = dict(options)
    clock, store = VirtualClock(START + options.pop("late_s", 0.0)), MemoryStore()
    client = Script(status, health)
    if "listed" in options:
        client = RecordScript(status, health, options.pop("listed"))
    poll_job(
        JobHandle("ep", "flash-ep", f"job-{rule}", submitted_at=START),
        interval_s=10.0,
        client=client,
        clock=clock,
        sleep=clock.sleep,
        store=store,
        stream=rule,
        **options,
    )
    return store.read(rule)


@pytest.fixture(scope="module")
def logs() -> dict[str, list[Event]]:
    return {rule: _firing_log(rule) for rule in FIRING}


def test_every_rule_has_a_log_on_which_it_fires():
    assert set(FIRING) == set(RULE_NAMES)


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_each_rule_fires_on_its_log_and_explain_reads_its_declaration(logs, rule):
    events = logs[rule]
    verdict = events[-1]
    assert isinstance(verdict, Concluded) and verdict.rule == rule, verdict
    assert verify(events).ok
    declared = RULES_BY_NAME[rule]
    e = explain(events)
    assert (e.rule, e.step, e.why) == (rule, declared.step, declared.why)
    assert e.because, f"explain says nothing about {rule}"
    assert [item.seq for item in e.evidence] == list(verdict.evidence)
    assert what_if(events).outcome == "same"


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_why_not_answers_for_each_rule_on_every_rule_s_log(logs, rule):
    for fired, events in logs.items():
        report = why_not_report(events, rule)
        assert report.fired is (rule == fired)
        assert report.text.startswith(rule) and (report.facts or report.measures), report.text
