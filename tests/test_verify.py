"""Replay and verification of recorded logs (flashfsm.fsm.job.replay / verify)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from flashfsm import (
    JobHandle,
    MemoryStore,
    PollResult,
    RunpodApiError,
    TransientReadError,
    poll_job,
    replay,
    verify,
)
from flashfsm.events.codec import decode, encode
from flashfsm.events.models import Concluded, HealthObserved, HeartbeatObserved, StatusObserved
from flashfsm.fsm.job import VerifyReport
from tests.conftest import ScriptedClient, VirtualClock

STREAM = "job-verify"
IDLE = {"workers": {"idle": 1}}


def watch(
    statuses: list[Any],
    *,
    heartbeats: Callable[[VirtualClock, bool], Any] | None = None,
    failure_detail: str | None = None,
    **graces: float,
) -> tuple[PollResult, list[Any]]:
    """Run `poll_job` to its verdict over `statuses` (the last one repeats); the result and
    the log it wrote to a fresh `MemoryStore`."""
    clock = VirtualClock()
    runaway = 20_000.0  # virtual seconds: a script that runs longer never ends

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        assert clock.elapsed < runaway, "the watch does not end"

    client = ScriptedClient(
        clock,
        lambda elapsed, i: statuses[min(i, len(statuses) - 1)],
        health=lambda elapsed, i: IDLE,
    )
    store = MemoryStore()
    result = poll_job(
        JobHandle("ep-1", "ep-name", "job-1", submitted_at=clock.now),
        interval_s=10.0,
        heartbeat_reader=None
        if heartbeats is None
        else lambda force=False: heartbeats(clock, force),
        failure_detail_reader=None
        if failure_detail is None
        else lambda force=False: failure_detail,
        client=client,
        clock=clock,
        sleep=sleep,
        store=store,
        stream=STREAM,
        **graces,
    )
    return result, store.read(STREAM)


def renumbered(events: list[Any]) -> list[Any]:
    """The events with seqs 0, 1, 2 … again (what a careless edit of a log would leave)."""
    return [event.model_copy(update={"seq": seq}) for seq, event in enumerate(events)]


def seq_of(log: list[Any], predicate: Callable[[Any], bool]) -> int:
    return next(event.seq for event in log if predicate(event))


def queued(status: str = "IN_QUEUE") -> dict[str, Any]:
    return {"status": status}


def no_capacity_log() -> list[Any]:
    """A job that never leaves IN_QUEUE: polled every 10 s from t=0, probed at 0, 100, 200
    and 300, concluded NO_CAPACITY at t=310 (queue grace 300 s)."""
    result, log = watch([queued()])
    assert (result.state, result.rule) == ("NO_CAPACITY", "queue_grace")
    return log


def success_log() -> list[Any]:
    """IN_QUEUE at 0 and 10, IN_PROGRESS from 20 to 60, COMPLETED at 70."""
    statuses = [queued()] * 2 + [queued("IN_PROGRESS")] * 5
    result, log = watch([*statuses, {"status": "COMPLETED", "output": {"loss": 0.25}}])
    assert result.ok and result.metrics == {"loss": 0.25}
    return log


def _training_heartbeat(clock: VirtualClock, force: bool) -> dict[str, Any]:
    """Boots, then trains for a few beats 30 s apart, then beats no more."""
    step = min(int(clock.elapsed // 30), 6)
    stage = "boot" if step < 2 else "sft_train"
    return {"stage": stage, "step": step, "ts": clock.start + 30 * step, "retriable": force}


def _hub_hiccup(failures: int) -> Callable[[VirtualClock, bool], Any]:
    """`_training_heartbeat`, whose first `failures` forced reads fail on a Hub 503."""
    failed = [0]

    def read(clock: VirtualClock, force: bool) -> Any:
        if force and failed[0] < failures:
            failed[0] += 1
            raise TransientReadError("hub read failed", status_code=503)
        return _training_heartbeat(clock, force)

    return read


def failed_log(failures: int) -> list[Any]:
    """RUNNING from 0 to 30, FAILED at 40; the first `failures` forced reads fail."""
    failed = {"status": "FAILED", "error": "NCCL timeout"}
    _, log = watch([queued("RUNNING")] * 4 + [failed], heartbeats=_hub_hiccup(failures))
    return log


#: name -> (how to run the watch, the verdict it must reach: state, rule)
FINISHED_WATCHES: dict[str, tuple[Callable[[], tuple[PollResult, list[Any]]], tuple[str, str]]] = {
    "succeeded": (
        lambda: watch([queued("IN_PROGRESS"), {"status": "COMPLETED", "output": {}}]),
        ("SUCCEEDED", "completed"),
    ),
    "no_capacity": (lambda: watch([queued()]), ("NO_CAPACITY", "queue_grace")),
    "stalled_after_training": (
        lambda: watch([queued("IN_PROGRESS")], heartbeats=_training_heartbeat, stall_after_s=100.0),
        ("STALLED", "stall"),
    ),
    "preempted_by_a_retriable_failure": (
        lambda: watch(
            [queued("RUNNING")] * 4 + [{"status": "FAILED", "error": "NCCL timeout"}],
            heartbeats=_training_heartbeat,
            failure_detail="Traceback: NCCL",
        ),
        ("PREEMPTED", "worker_failed"),
    ),
    "preempted_after_a_hub_hiccup_on_the_forced_read": (
        lambda: watch(
            [queued("RUNNING")] * 4 + [{"status": "FAILED", "error": "NCCL timeout"}],
            heartbeats=_hub_hiccup(2),
            failure_detail="Traceback: NCCL",
        ),
        ("PREEMPTED", "worker_failed"),
    ),
    "failed_when_no_forced_read_succeeds": (
        lambda: watch(
            [queued("RUNNING")] * 4 + [{"status": "COMPLETED", "output": None}],
            heartbeats=_hub_hiccup(100),
        ),
        ("FAILED", "completed_with_error"),
    ),
    "poll_errors": (
        lambda: watch([RunpodApiError("bad gateway", status_code=502)]),
        ("POLL_ERROR", "poll_errors"),
    ),
    "lost": (
        lambda: watch([queued(), RunpodApiError("gone", status_code=404)]),
        ("LOST", "job_lost"),
    ),
    "cancelled": (
        lambda: watch([queued(), {"status": "CANCELLED"}]),
        ("PREEMPTED", "platform_termination"),
    ),
}


# --- a finished watch -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FINISHED_WATCHES))
def test_a_finished_watch_replays_to_its_verdict_and_verifies(name: str) -> None:
    run, expected = FINISHED_WATCHES[name]
    result, log = run()
    assert (result.state, result.rule) == expected
    verdict = log[-1]
    assert isinstance(verdict, Concluded)
    assert (verdict.state, verdict.rule, verdict.ok) == (result.state, result.rule, result.ok)

    state = replay(log)
    assert state.done and state.verdict == verdict
    assert state.phase.value == result.state

    report = verify(log)
    assert report.ok, str(report)
    assert (report.events, report.verdict, report.first_disagreement) == (len(log), verdict, None)
    assert str(report).startswith(f"ok: {len(log)} events")

    stored = [decode(encode(event)) for event in log]  # what a durable store gives back
    assert verify(stored).ok and replay(stored).snapshot() == state.snapshot()


def test_a_log_without_a_verdict_yet_verifies() -> None:
    log = no_capacity_log()[:-1]
    report = verify(log)
    assert report.ok and report.verdict is None and report.events == len(log)
    assert not replay(log).done


# --- doctored logs --------------------------------------------------------------------------


def _disagreement(report: VerifyReport) -> Any:
    assert not report.ok, "verify accepted a doctored log"
    assert report.first_disagreement is not None
    return report.first_disagreement


@pytest.mark.parametrize("removed", [1, 2, 7, 14])
def test_an_event_removed_without_renumbering_is_reported_at_its_missing_seq(removed: int) -> None:
    log = success_log() if removed != 14 else no_capacity_log()
    doctored = [event for event in log if event.seq != removed]
    found = _disagreement(verify(doctored))
    assert found.seq == removed
    assert found.reason == "seq missing from the log"


def test_an_event_removed_and_the_rest_renumbered_is_reported_where_the_conversation_breaks() -> (
    None
):
    log = no_capacity_log()
    first_queued = seq_of(log, lambda e: isinstance(e, StatusObserved))
    assert (first_queued, log[first_queued].at - log[0].at) == (2, 0.0)
    assert isinstance(log[first_queued + 1], HealthObserved)
    # Without the t=0 fetch its probe answers nothing the rules asked: they wanted a fetch.
    doctored = renumbered([event for event in log if event.seq != first_queued])
    found = _disagreement(verify(doctored))
    assert (found.seq, found.reason) == (first_queued, "a health probe the rules did not ask for")
    assert (found.recorded, found.expected) == ("HealthObserved", "a status fetch")


def test_a_fetch_with_no_read_removed_is_a_late_fetch_and_verifies() -> None:
    """Not every removal is detectable: without the IN_QUEUE at t=10 the log is one whose
    fetch at 10 came late, at 20 (a slow call), which a real watch can write — once the
    verdict's evidence names the renumbered seqs, as that watch's would."""
    log = no_capacity_log()
    at_10 = seq_of(log, lambda e: isinstance(e, StatusObserved) and e.at - log[0].at == 10)
    assert isinstance(log[at_10 + 1], StatusObserved)
    doctored = renumbered([event for event in log if event.seq != at_10])
    verdict = doctored[-1]
    assert verdict.evidence == (2, 37)  # the queue's first IN_QUEUE and its last, as recorded
    found = _disagreement(verify(doctored))
    assert (found.seq, found.reason, found.fields) == (
        37,
        "a verdict whose evidence differs",
        ("evidence",),
    )
    assert (found.recorded, found.expected) == ("evidence=[2, 37]", "evidence=[2, 36]")
    careful = [*doctored[:-1], verdict.model_copy(update={"evidence": (2, 36)})]
    assert verify(careful).ok


def test_a_queued_status_changed_to_in_progress_is_reported_at_the_verdict() -> None:
    log = no_capacity_log()
    # the IN_QUEUE seen at t=160 (seq 20): not followed by a probe
    target = seq_of(log, lambda e: isinstance(e, StatusObserved) and e.at - log[0].at == 160)
    assert target == 20 and not isinstance(log[target + 1], HealthObserved)
    doctored = list(log)
    doctored[target] = log[target].model_copy(update={"status": "IN_PROGRESS"})
    # leaving the queue resets its timer: at t=310 the job has been queued 140 s only
    found = _disagreement(verify(doctored))
    assert found.seq == log[-1].seq == 38
    assert found.reason == "verdict the rules do not reach"


def test_an_in_progress_changed_to_cancelled_is_reported_at_the_next_seq() -> None:
    log = success_log()
    target = seq_of(log, lambda e: isinstance(e, StatusObserved) and e.status == "IN_PROGRESS")
    target += 2  # the third IN_PROGRESS, mid-log
    assert target == 7 and log[target].status == "IN_PROGRESS"
    doctored = list(log)
    doctored[target] = log[target].model_copy(update={"status": "CANCELLED"})
    # the rules conclude PREEMPTED right after a CANCELLED: nothing may follow it but that
    found = _disagreement(verify(doctored))
    assert found.seq == target + 1 == 8
    assert found.reason == "the rules had already concluded"
    assert found.recorded == "StatusObserved"
    assert found.expected == "PREEMPTED by platform_termination"
    assert str(verify(doctored)).startswith("seq 8: the rules had already concluded")


def test_a_verdict_with_another_rule_is_reported_at_the_verdict() -> None:
    log = no_capacity_log()
    doctored = [*log[:-1], log[-1].model_copy(update={"rule": "throttled_worker"})]
    found = _disagreement(verify(doctored))
    assert found.seq == log[-1].seq
    assert found.reason == "a different verdict"
    assert (found.recorded, found.expected) == (
        "NO_CAPACITY by throttled_worker",
        "NO_CAPACITY by queue_grace",
    )


def test_a_verdict_with_another_state_is_reported_at_the_verdict() -> None:
    log = success_log()
    doctored = [*log[:-1], log[-1].model_copy(update={"state": "FAILED", "ok": False})]
    found = _disagreement(verify(doctored))
    assert (found.seq, found.reason) == (log[-1].seq, "a different verdict")


def test_an_event_after_the_verdict_is_reported_at_its_seq() -> None:
    log = success_log()
    late = log[-2].model_copy(update={"seq": len(log), "id": "late"})
    found = _disagreement(verify([*log, late]))
    assert (found.seq, found.reason) == (len(log), "event after the verdict")


def test_a_repeated_event_is_reported_at_the_seq_it_repeats() -> None:
    log = success_log()
    doctored = [*log[:6], log[5], *log[6:]]
    found = _disagreement(verify(doctored))
    assert (found.seq, found.reason) == (6, "seq repeated")


# --- the forced heartbeat read's retries ----------------------------------------------------


def _as_written_before_read_error(event: Any) -> Any:
    """An event as a library without the forced-read retry wrote it (no such fields)."""
    raw = json.loads(encode(event))
    if raw["kind"] == "HeartbeatObserved":
        assert raw.pop("read_error") is None
    if raw["kind"] == "JobSubmitted":
        del raw["policy"]["forced_read_tries"], raw["policy"]["forced_read_backoff_s"]
    return decode(json.dumps(raw))


#: The finished watches with no failed forced read: each has a form an older library wrote.
WATCHES_WITH_AN_OLDER_FORM = sorted(
    set(FINISHED_WATCHES)
    - {"preempted_after_a_hub_hiccup_on_the_forced_read", "failed_when_no_forced_read_succeeds"}
)


@pytest.mark.parametrize("name", WATCHES_WITH_AN_OLDER_FORM)
def test_a_log_written_before_the_forced_read_retry_replays_to_the_same_verdict(
    name: str,
) -> None:
    run, _ = FINISHED_WATCHES[name]
    _, log = run()
    assert not any(isinstance(e, HeartbeatObserved) and e.read_error for e in log)
    old = [_as_written_before_read_error(event) for event in log]
    assert verify(old).ok and replay(old).verdict == log[-1]
    assert replay(old).snapshot() == replay(log).snapshot()


def test_a_verdict_before_the_forced_read_tries_are_spent_is_reported_at_the_verdict() -> None:
    log = failed_log(failures=100)
    assert (log[-1].state, log[-1].rule) == ("FAILED", "worker_failed")
    failed = [e.seq for e in log if isinstance(e, HeartbeatObserved) and e.read_error]
    assert len(failed) == 4 and failed[-1] == log[-1].seq - 1
    # Drop the last try: the verdict now follows a failed read whose retry is still due.
    doctored = renumbered([e for e in log if e.seq != failed[-1]])
    found = _disagreement(verify(doctored))
    assert (found.seq, found.reason) == (doctored[-1].seq, "verdict the rules do not reach")
