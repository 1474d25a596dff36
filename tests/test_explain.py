"""Post-mortem explanations: explain, why-not, what-if and the live view, on simulated logs."""

from __future__ import annotations

import re

import pytest

from flashfsm.adapters.stores import open_store
from flashfsm.demo import DEMO_JOBS, watch_scenarios
from flashfsm.events.models import (
    Concluded,
    Event,
    HealthObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    WorkerCounts,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm import rules
from flashfsm.fsm.job import replay
from flashfsm.postmortem.explain import (
    WHATIF_OUTCOMES,
    explain,
    rule_why,
    running_timers,
    secs,
    watch_view,
    what_if,
    why_not,
    why_not_report,
)

EXTRA_JOBS = (("throttled", "a throttled worker"), ("timed_out", "the platform times it out"))


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, list[Event]]:
    """One simulated log per scenario: the demo's five, plus a throttled and a timed-out job."""
    out: dict[str, list[Event]] = {}
    for n, jobs in enumerate((DEMO_JOBS, EXTRA_JOBS)):
        url = f"sqlite:///{tmp_path_factory.mktemp(f'explain{n}')}/events.db"
        streams = watch_scenarios(url, say=lambda line: None, jobs=jobs)
        store = open_store(url)
        try:
            for (scenario, _), stream in zip(jobs, streams, strict=True):
                out[scenario] = store.read(stream)
        finally:
            store.close()
    return out


def _queued_statuses(events: list[Event]) -> list[StatusObserved]:
    return [e for e in events if isinstance(e, StatusObserved) and e.status == "IN_QUEUE"]


# --- explain --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "rule", "pattern"),
    [
        ("no_capacity", "queue_grace", r"^IN_QUEUE (\d+) s > queue grace 300 s$"),
        (
            "crash_loop",
            "unhealthy_worker",
            r"^worker unhealthy for (\d+) s > unhealthy grace 240 s$",
        ),
        (
            "training_stall",
            "stall",
            r"^no progress for (\d+) s > stall window 1200 s \(training\)$",
        ),
    ],
)
def test_explain_quotes_the_numbers_that_made_the_rule_fire(logs, scenario, rule, pattern):
    e = explain(logs[scenario])
    assert e.rule == rule
    assert e.verdict is not None and e.state == e.verdict.state
    assert e.step == rules.RULES_BY_NAME[rule].step
    assert e.why == rule_why(rule) and e.why and not e.why.startswith("Step")
    [number] = e.numbers
    match = re.match(pattern, number)
    assert match, number
    measure = e.measures[0]
    assert measure.fired and measure.value > measure.limit
    assert int(match.group(1)) == round(measure.value)
    assert [item.seq for item in e.evidence] == list(e.verdict.evidence)
    first = logs[scenario][0].at
    assert all(item.offset == item.at - first for item in e.evidence)


def test_explain_of_the_queue_grace_measures_from_the_first_queued_observation(logs):
    events = logs["no_capacity"]
    queued = _queued_statuses(events)
    e = explain(events)
    assert e.measures[0].value == queued[-1].at - queued[0].at
    assert e.offset == events[-1].at - events[0].at


@pytest.mark.parametrize(
    ("scenario", "rule", "fact"),
    [
        ("success", "completed", "status COMPLETED at t+"),
        ("failed", "worker_failed", "did not flag it retriable"),
        ("timed_out", "platform_termination", "status TIMED_OUT at t+"),
    ],
)
def test_explain_of_a_status_rule_names_the_status_and_the_retriable_flag(
    logs, scenario, rule, fact
):
    e = explain(logs[scenario])
    assert e.rule == rule and not e.measures
    assert any(fact in f for f in e.facts), e.facts


def test_explain_of_an_open_log_reports_no_verdict_and_the_running_timers(logs):
    events = logs["no_capacity"][:20]
    e = explain(events)
    assert e.verdict is None and e.rule is None
    assert e.facts[0].startswith("no verdict yet: QUEUED")
    assert e.timers[0].rule == "queue_grace"
    assert e.timers[0].left == pytest.approx(300 - (events[-1].at - events[2].at))


def test_rule_why_is_each_rule_s_declared_one_line_why():
    for name in rules.RULE_NAMES:
        why = rule_why(name)
        assert why and not re.match(r"^(Step \d+|D\d+):", why)
    assert rule_why("queue_grace").startswith("IN_QUEUE for longer than the queue grace")
    assert rule_why("nope") == "a rule today's rules do not know"


# --- why-not --------------------------------------------------------------------------------


def test_why_not_quotes_the_numbers_of_a_rule_that_did_not_fire(logs):
    text = why_not(logs["no_capacity"], "stall")
    assert re.search(r"no progress for \d+ s < setup grace 3000 s", text), text
    assert why_not(logs["no_capacity"], "throttled_worker").endswith(
        "never saw a throttled worker in 4 health probe(s)"
    )
    text = why_not(logs["training_stall"], "queue_grace")
    assert re.search(r"IN_QUEUE \d+ s < queue grace 300 s \(longest wait\)", text), text
    assert re.search(r"the job left IN_QUEUE at t\+\d+ s \(seq \d+, status IN_PROGRESS\)", text)
    # The records list the crash-looping worker (D10): the queue grace stopped measuring.
    text = why_not(logs["crash_loop"], "queue_grace")
    assert re.search(r"a worker record \(seq \d+\) listed a worker crash-looping", text), text
    assert text.endswith("so the queue grace stopped measuring and `crash_loop` judges")


def test_why_not_a_throttled_worker_quotes_the_last_probe(logs):
    report = why_not_report(logs["throttled"], "throttled_worker")
    assert not report.fired and report.verdict_rule == "queue_grace"
    [m] = report.measures
    assert m.quantity == "worker THROTTLED for" and m.limit == 300 and m.value <= 300
    assert "at the last probe" in m.note
    assert why_not(logs["throttled"], "unhealthy_worker").endswith(
        "never saw an unhealthy worker in 4 health probe(s)"
    )


def test_why_not_the_rule_that_fired_says_it_fired(logs):
    report = why_not_report(logs["no_capacity"], "queue_grace")
    assert report.fired and report.held
    assert report.text.startswith("queue_grace did fire, at t+")


@pytest.mark.parametrize("scenario", [name for name, _ in DEMO_JOBS])
def test_why_not_answers_for_every_rule_with_the_verdict_time(logs, scenario):
    events = logs[scenario]
    verdict = events[-1]
    assert isinstance(verdict, Concluded)
    when = f"t+{secs(verdict.at - events[0].at)} s"
    for rule in rules.RULE_NAMES:
        report = why_not_report(events, rule)
        assert report.fired is (rule == verdict.rule)
        assert when in report.text and report.text.startswith(rule)
        if not report.fired:
            assert report.text.startswith(f"{rule} did not fire at the verdict") or (
                report.held and "comes first in the rule order" in report.text
            )


def test_why_not_an_unknown_rule_is_an_error(logs):
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        why_not(logs["success"], "nope")


def test_why_not_on_a_log_without_a_verdict_judges_the_end_of_the_log(logs):
    text = why_not(logs["no_capacity"][:20], "queue_grace")
    assert "by the end of the log" in text
    assert re.search(r"IN_QUEUE \d+ s < queue grace 300 s", text)


# --- what-if --------------------------------------------------------------------------------


def test_whatif_with_a_longer_queue_grace_says_the_observations_end_first(logs):
    events = logs["no_capacity"]
    w = what_if(events, queue_grace_s=600)
    assert w.outcome == "observations_end"
    assert w.verdict is None and w.at is None
    assert (
        "the recorded observations end" in w.text and "before the new policy would decide" in w.text
    )
    queued = _queued_statuses(events)
    assert w.timers[0].rule == "queue_grace"
    assert w.timers[0].left == pytest.approx(600 - (queued[-1].at - queued[0].at))
    assert w.policy.queue_grace_s == 600 and w.recorded_policy.queue_grace_s == 300
    assert w.recorded is not None and w.recorded.rule == "queue_grace"


def test_whatif_with_a_shorter_queue_grace_names_the_earlier_time(logs):
    events = logs["no_capacity"]
    queued = _queued_statuses(events)
    first_late = next(e for e in queued if e.at - queued[0].at > 200)
    w = what_if(events, queue_grace_s=200)
    assert w.outcome == "earlier"
    assert w.verdict is not None and w.verdict.rule == "queue_grace"
    assert w.verdict.state.value == "NO_CAPACITY"
    assert w.at == first_late.at and w.after_seq == first_late.seq
    assert w.instead_of_seq == first_late.seq + 1
    assert w.offset == first_late.at - events[0].at
    assert f"at t+{secs(w.offset)} s, after seq {first_late.seq}" in w.text
    recorded = events[-1]
    assert f"{secs(recorded.at - first_late.at)} s before the recorded NO_CAPACITY" in w.text


@pytest.mark.parametrize("scenario", [name for name, _ in DEMO_JOBS + EXTRA_JOBS])
def test_whatif_under_the_recorded_policy_reaches_the_same_verdict(logs, scenario):
    events = logs[scenario]
    w = what_if(events)
    assert w.outcome == "same", w.text
    assert w.verdict is not None and w.recorded is not None
    assert (w.verdict.rule, w.verdict.state.value) == (w.recorded.rule, w.recorded.state)
    assert w.instead_of_seq == w.recorded.seq
    assert w.outcome in WHATIF_OUTCOMES


def test_whatif_a_shorter_stall_window_ends_a_stalled_job_earlier(logs):
    w = what_if(logs["training_stall"], stall_after_s=300)
    assert w.outcome == "earlier" and w.verdict is not None and w.verdict.rule == "stall"
    assert w.recorded is not None and w.at is not None and w.at < w.recorded.at


def test_whatif_a_shorter_queue_grace_leaves_a_crash_loop_its_verdict_by_its_records(logs):
    # The records list the worker unhealthy while the job waits: a crash loop, never a
    # capacity gap, however short the queue grace (D10)...
    assert what_if(logs["crash_loop"], queue_grace_s=120).outcome == "same"
    # ...which the reference, without them, took it for.
    w = what_if(logs["crash_loop"], queue_grace_s=120, queue_by_workers=False)
    assert w.outcome == "earlier"
    assert w.verdict is not None and w.verdict.rule == "queue_grace"
    assert w.verdict.failure == "no_capacity"


def test_whatif_on_a_log_without_a_verdict(logs):
    open_log = logs["no_capacity"][:28]  # up to about t+210 s
    w = what_if(open_log, queue_grace_s=150)
    assert w.outcome == "earlier" and "the log has no verdict" in w.text
    w = what_if(open_log)
    assert w.outcome == "observations_end"


def test_whatif_rejects_unknown_fields_and_bad_values(logs):
    with pytest.raises(ValueError, match="unknown policy field"):
        what_if(logs["success"], queue_grace=600)
    with pytest.raises(ValueError):
        what_if(logs["success"], queue_grace_s=-1)


# --- hand-made logs: poll errors and a reattach ----------------------------------------------


def _log(*specs: tuple[type, float, dict]) -> list[Event]:
    return [
        cls(stream="hand", seq=i, id=f"id-{i:04d}", at=1000.0 + at, **fields)
        for i, (cls, at, fields) in enumerate(specs)
    ]


def _with_verdict(events: list[Event]) -> list[Event]:
    verdict = rules.judge(replay(events))
    assert verdict is not None
    last = events[-1]
    return [
        *events,
        Concluded(
            stream="hand",
            seq=last.seq + 1,
            id="id-end",
            at=last.at,
            state=verdict.state.value,
            ok=verdict.ok,
            failure=verdict.failure,
            rule=verdict.rule,
            evidence=verdict.evidence,
            detail=verdict.detail,
        ),
    ]


def test_explain_poll_errors_counts_the_consecutive_errors():
    specs = [
        (JobSubmitted, 0.0, {"endpoint_id": "ep", "job_id": "j", "submitted_at": 1000.0}),
        (WatchStarted, 0.0, {"watcher": "t"}),
        (StatusObserved, 0.0, {"status": "IN_QUEUE"}),
    ]
    specs += [(StatusFetchFailed, 10.0 * n, {"error_class": "HTTP 503"}) for n in range(1, 9)]
    events = _with_verdict(_log(*specs))
    e = explain(events)
    assert e.rule == "poll_errors"
    assert e.numbers == ("consecutive status errors 8 ≥ max_poll_errors 8",)
    text = why_not(events[:-3], "poll_errors")
    assert "consecutive status errors 6 < max_poll_errors 8 (longest run" in text


def test_the_live_view_counts_time_in_state_and_the_next_timer():
    events = _log(
        (JobSubmitted, 0.0, {"endpoint_id": "ep", "job_id": "j", "submitted_at": 1000.0}),
        (WatchStarted, 0.0, {"watcher": "t"}),
        (StatusObserved, 0.0, {"status": "IN_QUEUE"}),
        (HealthObserved, 0.0, {"workers": WorkerCounts(throttled=1)}),
        (StatusObserved, 10.0, {"status": "IN_QUEUE"}),
    )
    view = watch_view(events, now=1100.0)
    assert view.state == "THROTTLED" and view.since == 1000.0 and view.in_state_s == 100.0
    assert view.status == "IN_QUEUE" and view.events == 5 and view.verdict is None
    names = [(t.rule, t.left) for t in view.timers]
    assert names[:2] == [("queue_grace", 200.0), ("throttled_worker", 200.0)]
    assert ("stall", 2900.0) not in names  # no heartbeat reader: the stall window applies
    assert ("stall", 1100.0) in names
    policy = GracePolicy(queue_grace_s=150)
    state = replay(events)
    state.policy = policy
    assert running_timers(state, 1100.0)[0].left == 50.0
