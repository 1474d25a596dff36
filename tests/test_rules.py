"""The job rules (steps 1–10 of the rule table in docs/rules.md) and the divergences D1–D4, end to
end.

Every test runs `poll_job` on a virtual clock against a scripted RunPod client and checks
the verdict (ok, failure kind, rule, the key words of its detail) and the exact virtual
time it was reached. Times below are seconds since the watch started; the default poll
interval is 10 s, so fetches happen at 0, 10, 20, … unless a backoff says otherwise.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
from collections.abc import Callable
from typing import Any

import cloudpickle
import pytest

from flashfsm import (
    JobHandle,
    MemoryStore,
    PollResult,
    RunpodApiError,
    TransientReadError,
    poll_job,
    replay,
    stall_kwargs,
    verify,
)
from flashfsm.events.models import Concluded, HeartbeatObserved, HubLocation, JobSubmitted
from flashfsm.fsm.commands import ReadHeartbeat, Wait
from flashfsm.fsm.job import decide
from flashfsm.postmortem.explain import explain, why_not
from tests.conftest import ScriptedClient, VirtualClock

JOB = JobHandle(endpoint_id="ep-1", endpoint_name="trainer", job_id="job-1")
QUEUED = {"status": "IN_QUEUE"}
RUNNING = {"status": "IN_PROGRESS"}
THROTTLED = {"workers": {"throttled": 1}}
UNHEALTHY = {"workers": {"unhealthy": 1}}
NOTHING = {"workers": {}}
METRICS = {"loss": 0.25, "reward": 1.5, "steps": 40}


#: No test needs more virtual time than this; a watch running longer is a regression, not a wait.
HORIZON_S = 50_000.0


class Crash(BaseException):
    """Simulates the supervisor process dying mid-watch (not an Exception: nothing catches it)."""


class RanAway(BaseException):
    """A watch that should have concluded kept polling past `HORIZON_S`."""


# --- helpers ------------------------------------------------------------------------------


def timeline(*steps: tuple[float, Any]) -> Callable[[float, int], Any]:
    """A script giving, at elapsed time t, the answer of the last step that started by t."""

    def script(t: float, i: int) -> Any:
        answer = steps[0][1]
        for start, value in steps:
            if t >= start:
                answer = value
        return answer

    return script


def guarded_sleep(clock: VirtualClock) -> Callable[[float], None]:
    """`clock.sleep`, but a watch that outlives `HORIZON_S` fails instead of looping forever."""

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.elapsed > HORIZON_S:
            raise RanAway(f"no verdict after {clock.elapsed:.0f} virtual seconds")

    return sleep


def by_call(answers: list[Any], then: Any) -> Callable[[float, int], Any]:
    """A script answering by call index: answers[i], then `then` forever."""
    return lambda t, i: answers[i] if i < len(answers) else then


class Reader:
    """A heartbeat (or failure-detail) reader scripted by (elapsed time, force); records calls."""

    def __init__(self, clock: VirtualClock, script: Callable[[float, bool], Any]):
        self.clock = clock
        self.script = script
        self.calls: list[tuple[float, bool]] = []

    def __call__(self, force: bool = False) -> Any:
        self.calls.append((self.clock.elapsed, force))
        value = self.script(self.clock.elapsed, force)
        if isinstance(value, BaseException):
            raise value
        return value

    @property
    def forced(self) -> list[float]:
        return [t for t, force in self.calls if force]


def watch(
    clock: VirtualClock,
    status: Callable[[float, int], Any],
    *,
    health: Callable[[float, int], Any] | None = None,
    handle: JobHandle | dict[str, Any] = JOB,
    store: MemoryStore | None = None,
    **kwargs: Any,
) -> tuple[PollResult, ScriptedClient]:
    client = ScriptedClient(clock, status=status, health=health)
    result = poll_job(
        handle,
        client=client,
        clock=clock,
        sleep=guarded_sleep(clock),
        store=MemoryStore() if store is None else store,
        **kwargs,
    )
    return result, client


def assert_verdict(
    result: PollResult,
    clock: VirtualClock,
    *,
    failure: str | None,
    rule: str,
    at: float,
) -> None:
    assert result.ok is (failure is None), result
    assert result.failure == failure, result
    assert result.rule == rule, result
    assert clock.elapsed == pytest.approx(at), (clock.elapsed, result)


def assert_words(result: PollResult, *words: str) -> None:
    """Each of `words` stands in the verdict's detail."""
    for word in words:
        assert word in (result.detail or ""), (word, result.detail)


def envelope(value: Any) -> dict[str, Any]:
    return {"success": True, "result": base64.b64encode(cloudpickle.dumps(value)).decode()}


def training_beat(step: int, ts: float, **extra: Any) -> dict[str, Any]:
    return {"stage": "rl_train", "step": step, "ts": ts, **extra}


# --- step 1: client deadline --------------------------------------------------------------


def test_client_deadline_counts_from_submission(clock: VirtualClock) -> None:
    handle = JobHandle("ep-1", "trainer", "job-1", submitted_at=clock.now - 100)
    result, client = watch(clock, timeline((0, RUNNING)), handle=handle, deadline_s=500)
    # 100 s before the watch + 410 s of watch > 500; the fetch at 410 is never made.
    assert_verdict(result, clock, failure="stalled", rule="client_deadline", at=410)
    assert_words(result, "client-side deadline exceeded")
    assert client.status_calls[-1] == 400


def test_client_deadline_without_submission_time_counts_from_the_watch(
    clock: VirtualClock,
) -> None:
    result, _ = watch(clock, timeline((0, RUNNING)), deadline_s=500)
    assert_verdict(result, clock, failure="stalled", rule="client_deadline", at=510)
    assert_words(result, "client-side deadline exceeded")


def test_client_deadline_is_checked_before_the_queue_grace(clock: VirtualClock) -> None:
    # Both would fire at 310; the deadline is step 1, checked before the fetch.
    result, client = watch(clock, timeline((0, QUEUED)), deadline_s=300)
    assert_verdict(result, clock, failure="stalled", rule="client_deadline", at=310)
    assert 310 not in client.status_calls


# --- step 2: status-fetch errors ----------------------------------------------------------


def test_eight_consecutive_status_errors_end_the_watch_with_backoff(clock: VirtualClock) -> None:
    error = RunpodApiError("service unavailable", status_code=503, route="status")
    result, client = watch(clock, timeline((0, error)))
    assert_verdict(result, clock, failure="poll_error", rule="poll_errors", at=270)
    assert_words(result, "8 consecutive status errors", "RunpodApiError", "503")
    assert clock.sleeps == [10, 20, 30, 40, 50, 60, 60]
    assert client.status_calls == [0, 10, 30, 60, 100, 150, 210, 270]


def test_backoff_grows_with_interval_times_streak(clock: VirtualClock) -> None:
    error = RunpodApiError("bad gateway", status_code=502)
    result, _ = watch(clock, timeline((0, error)), interval_s=5)
    assert clock.sleeps == [5, 10, 15, 20, 25, 30, 35]
    assert_verdict(result, clock, failure="poll_error", rule="poll_errors", at=140)


def test_a_good_fetch_resets_the_error_count(clock: VirtualClock) -> None:
    error = RunpodApiError("timeout")
    answers = [error] * 7 + [RUNNING] + [error] * 7
    done = {"status": "COMPLETED", "output": METRICS}
    result, _ = watch(clock, by_call(answers, done))
    assert clock.sleeps == [*[10, 20, 30, 40, 50, 60, 60], 10, *[10, 20, 30, 40, 50, 60, 60]]
    assert_verdict(result, clock, failure=None, rule="completed", at=550)
    assert result.metrics == METRICS


def test_a_client_raising_a_non_api_exception_counts_as_a_status_error(
    clock: VirtualClock,
) -> None:
    result, _ = watch(clock, timeline((0, KeyError("status"))))
    assert_verdict(result, clock, failure="poll_error", rule="poll_errors", at=270)
    assert_words(result, "KeyError")
    assert clock.sleeps == [10, 20, 30, 40, 50, 60, 60]


@pytest.mark.parametrize("answer", [["IN_QUEUE"], "IN_QUEUE", None, {}, {"state": "IN_QUEUE"}])
def test_an_unusable_status_answer_counts_as_a_status_error(
    clock: VirtualClock, answer: Any
) -> None:
    result, _ = watch(clock, timeline((0, answer)))
    assert_verdict(result, clock, failure="poll_error", rule="poll_errors", at=270)
    assert_words(result, "MalformedAnswer")


# --- step 3: a status change is progress --------------------------------------------------


def test_a_status_change_resets_the_stall_clock(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, RUNNING), (600, {"status": "RUNNING"})))
    assert_verdict(result, clock, failure="stalled", rule="stall", at=600 + 1210)
    assert_words(result, "no worker progress for 1210s", "job status RUNNING")


# --- step 4: COMPLETED --------------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    [METRICS, envelope(METRICS), json.dumps(METRICS), json.dumps(envelope(METRICS))],
    ids=["plain-dict", "flash-envelope", "json-string", "json-envelope"],
)
def test_completed_with_metrics_succeeds(clock: VirtualClock, output: Any) -> None:
    hb = Reader(clock, lambda t, force: None)
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (50, {"status": "COMPLETED", "output": output})),
        heartbeat_reader=hb,
        handle=dataclasses.replace(JOB, trusted_output=True),  # an endpoint the run deployed
    )
    assert_verdict(result, clock, failure=None, rule="completed", at=50)
    assert_words(result, "COMPLETED")
    assert result.metrics == METRICS
    assert result.state == "SUCCEEDED"
    assert hb.forced == []


def test_completed_with_an_error_output_fails_after_a_forced_heartbeat_read(
    clock: VirtualClock,
) -> None:
    output = {"error": "CUDA out of memory", "stdout": "epoch 1\nepoch 2\nOOM at step 7"}
    hb = Reader(clock, lambda t, force: training_beat(7, clock.now, retriable=False))
    artifacts = Reader(clock, lambda t, force: "error_train.txt: Traceback (most recent call)")
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (40, {"status": "COMPLETED", "output": output})),
        heartbeat_reader=hb,
        failure_detail_reader=artifacts,
    )
    assert_verdict(result, clock, failure="job_failed", rule="completed_with_error", at=40)
    assert_words(result, "CUDA out of memory", "OOM at step 7", "error_train.txt: Traceback")
    assert hb.forced == [40]
    assert artifacts.calls == [(40, True)]


def test_completed_with_an_error_output_and_a_retriable_worker_is_preempted(
    clock: VirtualClock,
) -> None:
    output = {"success": False, "error": "NCCL watchdog timeout"}
    hb = Reader(clock, lambda t, force: training_beat(3, clock.now, retriable=force))
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (30, {"status": "COMPLETED", "output": output})),
        heartbeat_reader=hb,
    )
    assert_verdict(result, clock, failure="job_preempted", rule="completed_with_error", at=30)
    assert_words(result, "NCCL watchdog timeout", "retriable")
    assert hb.forced == [30]


def test_completed_without_output_fails(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, RUNNING), (20, {"status": "COMPLETED"})))
    assert_verdict(result, clock, failure="job_failed", rule="completed_with_error", at=20)
    assert_words(result, "not an object")
    assert result.metrics is None


# --- step 5: CANCELLED and TIMED_OUT ------------------------------------------------------


@pytest.mark.parametrize("status", ["CANCELLED", "TIMED_OUT"])
def test_platform_termination_is_preempted_without_a_forced_read(
    clock: VirtualClock, status: str
) -> None:
    hb = Reader(clock, lambda t, force: training_beat(1, clock.now, retriable=False))
    artifacts = Reader(clock, lambda t, force: "should not be read")
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (60, {"status": status, "error": "execution timeout"})),
        heartbeat_reader=hb,
        failure_detail_reader=artifacts,
    )
    assert_verdict(result, clock, failure="job_preempted", rule="platform_termination", at=60)
    assert_words(result, f"[{status}]", "execution timeout")
    assert result.detail is not None and result.detail.startswith(f"[{status}]")
    assert hb.forced == []
    assert artifacts.calls == []


# --- step 6: FAILED -----------------------------------------------------------------------


def test_failed_with_a_json_error_carries_stdout_tail_and_artifacts(clock: VirtualClock) -> None:
    error = json.dumps({"error_type": "RuntimeError", "error_message": "EngineCore died"})
    output = {"stdout": "loading model\nvLLM EngineCore exited with code 1"}
    hb = Reader(clock, lambda t, force: training_beat(9, clock.now))
    artifacts = Reader(clock, lambda t, force: "console_rl.txt: killed by signal 9")
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (70, {"status": "FAILED", "error": error, "output": output})),
        heartbeat_reader=hb,
        failure_detail_reader=artifacts,
    )
    assert_verdict(result, clock, failure="job_failed", rule="worker_failed", at=70)
    assert_words(
        result,
        "EngineCore died",
        "--- worker stdout tail ---",
        "vLLM EngineCore exited with code 1",
        "console_rl.txt: killed by signal 9",
    )
    assert result.detail is not None and result.detail.startswith("[FAILED] ")
    assert hb.forced == [70]
    assert artifacts.calls == [(70, True)]


def test_failed_without_stdout_has_no_stdout_section(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, {"status": "FAILED", "error": "handler raised"})))
    assert_verdict(result, clock, failure="job_failed", rule="worker_failed", at=0)
    assert_words(result, "handler raised")
    assert result.detail == "[FAILED] handler raised"


def test_failed_with_a_retriable_worker_is_preempted(clock: VirtualClock) -> None:
    hb = Reader(clock, lambda t, force: training_beat(2, clock.now, retriable=True))
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (30, {"status": "FAILED", "error": "host lost"})),
        heartbeat_reader=hb,
    )
    assert_verdict(result, clock, failure="job_preempted", rule="worker_failed", at=30)
    assert_words(result, "[FAILED] host lost")
    assert hb.forced == [30]


# --- step 7: queue grace ------------------------------------------------------------------


def test_queued_forever_with_failing_probes_has_no_capacity(clock: VirtualClock) -> None:
    result, client = watch(clock, timeline((0, QUEUED)))
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=310)
    assert_words(result, "never scheduled", "IN_QUEUE", "next-best GPU")
    assert client.health_calls == [0, 100, 200, 300]


def test_queued_forever_on_the_last_gpu_waits_longer(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, QUEUED)), **stall_kwargs(on_last_gpu=True))
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=910)
    assert_words(result, "never scheduled", "IN_QUEUE", "next-best GPU")


def test_queued_forever_not_on_the_last_gpu_uses_the_short_grace(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, QUEUED)), **stall_kwargs(on_last_gpu=False))
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=310)


def test_the_queue_timer_restarts_when_the_job_leaves_the_queue(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, QUEUED), (200, RUNNING), (250, QUEUED)))
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=250 + 310)
    assert_words(result, "IN_QUEUE for 310s")


# --- step 8: health probes ----------------------------------------------------------------


def test_probes_are_spaced_more_than_90_seconds_apart(clock: VirtualClock) -> None:
    result, client = watch(
        clock, timeline((0, QUEUED)), health=timeline((0, NOTHING)), interval_s=30
    )
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=330)
    assert client.health_calls == [0, 120, 240]


def test_no_probe_while_in_progress(clock: VirtualClock) -> None:
    result, client = watch(
        clock, timeline((0, QUEUED), (30, RUNNING), (300, QUEUED)), health=timeline((0, NOTHING))
    )
    assert client.health_calls == [0, 300, 400, 500, 600]
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=610)


def test_an_unhealthy_worker_is_a_stall_after_the_unhealthy_grace(clock: VirtualClock) -> None:
    result, client = watch(clock, timeline((0, QUEUED)), health=timeline((0, UNHEALTHY)))
    # Unhealthy since the probe at 0; the probe at 300 is the first more than 240 s later.
    assert_verdict(result, clock, failure="stalled", rule="unhealthy_worker", at=300)
    assert_words(result, "unhealthy for 300s", "IN_QUEUE", "fresh endpoint")
    assert client.health_calls == [0, 100, 200, 300]


def test_unhealthy_grace_is_tunable(clock: VirtualClock) -> None:
    result, _ = watch(
        clock, timeline((0, QUEUED)), health=timeline((0, UNHEALTHY)), unhealthy_grace_s=150
    )
    assert_verdict(result, clock, failure="stalled", rule="unhealthy_worker", at=200)


@pytest.mark.parametrize("other", ["running", "ready", "idle", "initializing"])
def test_a_usable_or_initializing_worker_prevents_the_unhealthy_verdict(
    clock: VirtualClock, other: str
) -> None:
    health = {"workers": {"unhealthy": 2, other: 1}}
    result, _ = watch(clock, timeline((0, QUEUED)), health=timeline((0, health)))
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=310)


def test_a_throttled_worker_has_no_capacity_after_the_throttled_grace(
    clock: VirtualClock,
) -> None:
    result, client = watch(
        clock, timeline((0, QUEUED)), health=timeline((0, THROTTLED)), queue_grace_s=10_000
    )
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=400)
    assert_words(result, "THROTTLED for 400s", "IN_QUEUE", "next-best GPU")
    assert client.health_calls == [0, 100, 200, 300, 400]


@pytest.mark.parametrize("other", ["running", "ready", "idle", "initializing"])
def test_a_usable_or_initializing_worker_prevents_the_throttled_verdict(
    clock: VirtualClock, other: str
) -> None:
    health = {"workers": {"throttled": 3, other: 1}}
    result, _ = watch(clock, timeline((0, QUEUED)), health=timeline((0, health)), queue_grace_s=600)
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=610)


def test_a_probe_without_the_condition_clears_the_throttled_timer(clock: VirtualClock) -> None:
    result, _ = watch(
        clock,
        timeline((0, QUEUED)),
        health=by_call([THROTTLED, THROTTLED, {"workers": {"idle": 1}}], THROTTLED),
        queue_grace_s=10_000,
    )
    # Throttled again from the probe at 300; 700 is the first probe more than 300 s later.
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=700)
    assert_words(result, "400s")


def test_a_probe_without_the_condition_clears_the_unhealthy_timer(clock: VirtualClock) -> None:
    result, _ = watch(
        clock,
        timeline((0, QUEUED)),
        health=by_call([UNHEALTHY, UNHEALTHY, NOTHING], UNHEALTHY),
        queue_grace_s=10_000,
    )
    assert_verdict(result, clock, failure="stalled", rule="unhealthy_worker", at=600)


def test_a_failed_probe_does_not_clear_a_timer(clock: VirtualClock) -> None:
    failure = RunpodApiError("health down", status_code=500)
    result, client = watch(
        clock,
        timeline((0, QUEUED)),
        health=by_call([THROTTLED, THROTTLED, failure], THROTTLED),
        queue_grace_s=10_000,
    )
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=400)
    assert client.health_calls == [0, 100, 200, 300, 400]


def test_a_failed_probe_does_not_start_a_timer(clock: VirtualClock) -> None:
    failure = RunpodApiError("health down", status_code=500)
    result, _ = watch(
        clock, timeline((0, QUEUED)), health=by_call([failure], THROTTLED), queue_grace_s=10_000
    )
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=500)


def test_a_health_answer_that_is_not_an_object_is_a_failed_probe(clock: VirtualClock) -> None:
    result, client = watch(
        clock,
        timeline((0, QUEUED)),
        health=by_call([THROTTLED, "junk"], THROTTLED),
        queue_grace_s=10_000,
    )
    # The junk answer at 100 neither clears nor restarts the timer armed at 0.
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=400)
    assert client.health_calls == [0, 100, 200, 300, 400]


# --- step 9: heartbeats -------------------------------------------------------------------


def test_a_new_heartbeat_key_resets_the_stall_clock(clock: VirtualClock) -> None:
    start = clock.now
    hb = Reader(clock, lambda t, force: training_beat(int(min(t, 500) // 50), start + min(t, 500)))
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=510 + 1210)
    assert_words(result, "no worker progress for 1210s", "during training", "limit 1200s")
    assert all(force is False for _, force in hb.calls)


@pytest.mark.parametrize("part", ["stage", "step", "ts"])
def test_each_part_of_the_heartbeat_key_counts(clock: VirtualClock, part: str) -> None:
    start = clock.now

    def beat(t: float, force: bool) -> dict[str, Any]:
        k = int(min(t, 300))  # changes every poll until 300, then holds
        fields: dict[str, Any] = {"stage": "rl_train", "step": 1, "ts": start}
        fields[part] = {"stage": f"train_{k}", "step": k, "ts": start + k}[part]
        return fields

    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=Reader(clock, beat))
    assert_verdict(result, clock, failure="stalled", rule="stall", at=300 + 1210)
    assert_words(result, "during training")


def test_a_flipping_retriable_flag_alone_is_not_progress(clock: VirtualClock) -> None:
    start = clock.now
    hb = Reader(clock, lambda t, force: training_beat(5, start, retriable=int(t) % 20 == 0))
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=1210)
    assert_words(result, "during training")


def test_a_repeated_heartbeat_key_is_not_progress(clock: VirtualClock) -> None:
    beat = training_beat(5, clock.now)
    hb = Reader(clock, lambda t, force: dict(beat))
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=1210)
    assert_words(result, "during training")


def regular_reads(reader: Reader) -> list[float]:
    return [t for t, force in reader.calls if not force]


def test_regular_heartbeat_reads_come_every_heartbeat_every_s_at_a_10s_poll(
    clock: VirtualClock,
) -> None:
    hb = Reader(clock, lambda t, force: None)
    status = timeline((0, RUNNING), (200, {"status": "COMPLETED", "output": METRICS}))
    result, client = watch(clock, status, heartbeat_reader=hb)
    assert result.ok and client.status_calls == [10.0 * k for k in range(21)]
    # polls at 0, 10, 20, 30, …: the first poll reads, then every poll 30 s after the last read
    assert regular_reads(hb) == [0, 30, 60, 90, 120, 150, 180]


@pytest.mark.parametrize(
    ("every", "reads"),
    [
        (30.0, [0, 40, 80, 120, 160]),  # a 20 s poll: the first poll at least 30 s on
        (20.0, [20.0 * k for k in range(10)]),
        (0.0, [20.0 * k for k in range(10)]),
        (None, [20.0 * k for k in range(10)]),  # None: every poll (a v1 log's policy)
        (75.0, [0, 80, 160]),
    ],
)
def test_the_heartbeat_pace_is_the_policys(
    clock: VirtualClock, every: float | None, reads: list[float]
) -> None:
    hb = Reader(clock, lambda t, force: None)
    status = timeline((0, RUNNING), (190, {"status": "COMPLETED", "output": METRICS}))
    result, _ = watch(clock, status, interval_s=20, heartbeat_reader=hb, heartbeat_every_s=every)
    assert result.ok
    assert regular_reads(hb) == reads


def _crashing_training_watch(clock: VirtualClock) -> tuple[Reader, dict[str, Any]]:
    """A training job whose status fetch at 50 s dies, and a heartbeat reader that never
    finds anything: (the reader, the `poll_job` arguments)."""
    hb = Reader(clock, lambda t, force: None)
    return hb, {
        "client": ScriptedClient(clock, status=crash_at(5, RUNNING)),
        "clock": clock,
        "sleep": guarded_sleep(clock),
        "heartbeat_reader": hb,
        "stall_after_s": 100,
        "setup_grace_s": 100,
    }


def test_the_first_poll_after_a_blind_gap_reads_the_heartbeat_and_the_pace_moves_by_the_gap(
    clock: VirtualClock,
) -> None:
    store = MemoryStore()
    hb, kwargs = _crashing_training_watch(clock)
    with pytest.raises(Crash):
        poll_job(JOB, store=store, stream="job-g", **kwargs)
    assert regular_reads(hb) == [0, 30]  # polls at 0..40; the fetch at 50 died
    clock.now += 5  # a gap shorter than the pace: the first poll reads all the same
    reattach = clock.elapsed
    gap = reattach - 40  # since the last event
    result = poll_job(JOB, store=store, stream="job-g", **kwargs)
    assert result.rule == "stall"
    # then the reads an unbroken watch made at 60 and 90, moved by the gap (polls every 10 s
    # from the reattach: the first on or after each)
    assert regular_reads(hb)[2:5] == [reattach, 30 + gap + 30, 30 + gap + 60]


def test_a_reattach_without_a_gap_keeps_the_heartbeat_pace(clock: VirtualClock) -> None:
    store = MemoryStore()
    hb, kwargs = _crashing_training_watch(clock)
    with pytest.raises(Crash):
        poll_job(JOB, store=store, stream="job-p", **kwargs)
    clock.now -= 10  # the fetch at 50 died unrecorded: reattach at the last event's time, 40
    result = poll_job(JOB, store=store, stream="job-p", **kwargs)
    assert result.rule == "stall" and clock.elapsed == 110  # as a watch never killed
    # the fresh reader does not read at once: the log says the poll at 30 asked last
    assert regular_reads(hb) == [0, 30, 60, 90]


SETUP_STAGES = ["boot", "sft_start", "rl_start", "sft_model_load", "rl_train_start"]


@pytest.mark.parametrize("stage", SETUP_STAGES)
def test_setup_stages_keep_the_setup_grace(clock: VirtualClock, stage: str) -> None:
    start = clock.now
    hb = Reader(clock, lambda t, force: {"stage": stage, "step": None, "ts": start + min(t, 100)})
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=120 + 3010)
    assert_words(result, "during setup (pre-training)", "job status IN_PROGRESS", "limit 3000s")


def test_a_training_stage_switches_to_the_stall_window_for_good(clock: VirtualClock) -> None:
    start = clock.now

    def beat(t: float, force: bool) -> dict[str, Any]:
        if t < 100:
            return {"stage": "sft_model_load", "ts": start + 1}
        if t < 200:
            return {"stage": "sft", "step": 1, "ts": start + 2}
        return {"stage": "boot", "ts": start + 3}  # a setup stage after training: still training

    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=Reader(clock, beat))
    assert_verdict(result, clock, failure="stalled", rule="stall", at=210 + 1210)
    assert_words(result, "during training", "limit 1200s")


def test_training_uses_the_stall_kwargs_window(clock: VirtualClock) -> None:
    beat = training_beat(1, clock.now)
    result, _ = watch(
        clock,
        timeline((0, RUNNING)),
        heartbeat_reader=Reader(clock, lambda t, force: beat),
        **stall_kwargs(on_last_gpu=True),
    )
    assert_verdict(result, clock, failure="stalled", rule="stall", at=1510)
    assert_words(result, "limit 1500s")


# --- step 10: stall -----------------------------------------------------------------------


def test_in_progress_with_a_silent_heartbeat_reader_stalls_after_the_setup_grace(
    clock: VirtualClock,
) -> None:
    hb = Reader(clock, lambda t, force: None)
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=3010)
    assert_words(
        result,
        "no worker progress for 3010s",
        "setup (pre-training)",
        "job status IN_PROGRESS",
        "limit 3000s",
    )
    assert hb.calls and all(force is False for _, force in hb.calls)


def test_in_progress_without_a_heartbeat_reader_stalls_after_the_stall_window(
    clock: VirtualClock,
) -> None:
    result, _ = watch(clock, timeline((0, RUNNING)))
    assert_verdict(result, clock, failure="stalled", rule="stall", at=1210)
    assert_words(
        result, "no worker progress for 1210s", "training", "job status IN_PROGRESS", "limit 1200s"
    )
    assert result.state == "STALLED"


def test_readers_that_raise_are_no_data(clock: VirtualClock) -> None:
    hb = Reader(clock, lambda t, force: RuntimeError("hub unreachable"))
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=3010)
    assert_words(result, "setup (pre-training)")


def test_raising_readers_after_a_failure_give_a_plain_job_failure(clock: VirtualClock) -> None:
    hb = Reader(clock, lambda t, force: OSError("hub unreachable"))
    artifacts = Reader(clock, lambda t, force: ValueError("no artifacts"))
    result, _ = watch(
        clock,
        timeline((0, {"status": "FAILED", "error": "boom"})),
        heartbeat_reader=hb,
        failure_detail_reader=artifacts,
    )
    assert_verdict(result, clock, failure="job_failed", rule="worker_failed", at=0)
    assert result.detail == "[FAILED] boom"
    assert hb.forced == [0]
    assert artifacts.calls == [(0, True)]


# --- steps 4 and 6: a transient error on the forced heartbeat read is read again ------------

#: What a reader raises for a failure a retry may fix: each is a failed read, tried again.
TRANSIENT_READ_ERRORS: dict[str, BaseException] = {
    "hub-503": TransientReadError("hub read failed: HTTPStatusError", status_code=503),
    "timeout": TimeoutError("read timed out"),
    "reset": ConnectionResetError("connection reset by peer"),
}
FAILURE_ENDS: dict[str, tuple[dict[str, Any], str]] = {
    "failed": ({"status": "FAILED", "error": "host lost"}, "worker_failed"),
    "completed-error": (
        {"status": "COMPLETED", "output": {"error": "NCCL watchdog timeout"}},
        "completed_with_error",
    ),
}


def flaky(clock: VirtualClock, failures: int, error: BaseException) -> Reader:
    """A heartbeat reader whose first `failures` forced reads raise `error`; every other read
    returns a fresh beat flagged retriable on a forced read (a preempted host)."""

    def script(t: float, force: bool) -> Any:
        if force and len(reader.forced) <= failures:
            return error
        return training_beat(2, clock.now, retriable=force)

    reader = Reader(clock, script)
    return reader


def heartbeat_events(store: MemoryStore) -> list[HeartbeatObserved]:
    return [e for e in store.read("job-job-1") if isinstance(e, HeartbeatObserved)]


@pytest.mark.parametrize("error", sorted(TRANSIENT_READ_ERRORS))
@pytest.mark.parametrize("end", sorted(FAILURE_ENDS))
def test_a_transient_error_on_the_forced_read_is_read_again_and_the_job_preempted(
    clock: VirtualClock, error: str, end: str
) -> None:
    status, rule = FAILURE_ENDS[end]
    hb = flaky(clock, 1, TRANSIENT_READ_ERRORS[error])
    artifacts = Reader(clock, lambda t, force: "--- error_rl.txt ---\nhost went away")
    store = MemoryStore()
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (30, status)),
        heartbeat_reader=hb,
        failure_detail_reader=artifacts,
        store=store,
    )
    # The read at 30 fails; the one 10 s later finds the worker's `retriable` flag.
    assert_verdict(result, clock, failure="job_preempted", rule=rule, at=40)
    assert_words(result, "retriable")
    assert hb.forced == [30, 40]
    assert artifacts.calls == [(30, True)]  # the artifacts are read during the backoff
    assert "host went away" in (result.detail or "")
    forced = [e for e in heartbeat_events(store) if e.forced]
    assert [e.read_error is not None for e in forced] == [True, False]
    assert not forced[0].found and forced[1].found and forced[1].retriable
    events = store.read("job-job-1")
    assert verify(events).ok, verify(events)
    assert forced[0].seq in events[-1].evidence and forced[1].seq in events[-1].evidence
    assert "flagged it retriable, after 1 failed forced read" in explain(events).because


def test_a_forced_read_failing_every_try_concludes_job_failed_after_the_last_try(
    clock: VirtualClock,
) -> None:
    hb = flaky(clock, 1_000, TRANSIENT_READ_ERRORS["hub-503"])
    store = MemoryStore()
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (30, {"status": "FAILED", "error": "host lost"})),
        heartbeat_reader=hb,
        store=store,
    )
    # 4 tries (the default `forced_read_tries`), 10, 20 and 30 s apart: the verdict at 90.
    assert_verdict(result, clock, failure="job_failed", rule="worker_failed", at=90)
    assert_words(
        result,
        "[FAILED] host lost",
        "the worker's heartbeat could not be read: 4 forced reads failed",
        "TransientReadError HTTP 503",
    )
    assert hb.forced == [30, 40, 60, 90]
    events = store.read("job-job-1")
    verdict = events[-1]
    assert isinstance(verdict, Concluded) and verdict.at == clock.start + 90
    failed = [e for e in heartbeat_events(store) if e.read_error is not None]
    assert [e.at - clock.start for e in failed] == [30, 40, 60, 90]
    assert {e.seq for e in failed} <= set(verdict.evidence)
    # The retry schedule and the verdict follow from the log alone.
    assert verify(events).ok, verify(events)
    assert replay(events).verdict == verdict
    after_third = replay(events[: failed[2].seq + 1])
    assert decide(after_third, failed[2].at) == Wait(30.0)
    assert decide(after_third, failed[2].at + 30) == ReadHeartbeat(force=True)
    because = explain(events).because
    assert "the heartbeat could not be read: 4 forced reads failed" in because
    assert "(limit forced_read_tries 4)" in because and "t+90 s" in because
    assert "could not be read" in why_not(events, "worker_failed")
    # A watch attached to the concluded stream returns the recorded verdict, no call made.
    again = poll_job(JOB, client=ScriptedClient(clock, status=timeline((0, RUNNING))), store=store)
    assert (again.failure, again.rule, again.detail) == (
        "job_failed",
        "worker_failed",
        result.detail,
    )


def test_a_forced_read_that_raises_no_transient_error_is_not_read_again(
    clock: VirtualClock,
) -> None:
    # A 404 or a bad token (the reader returns None) or any other raise is no data: at once.
    hb = flaky(clock, 1_000, PermissionError("bad token"))
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (30, {"status": "FAILED", "error": "boom"})),
        heartbeat_reader=hb,
    )
    assert_verdict(result, clock, failure="job_failed", rule="worker_failed", at=30)
    assert result.detail == "[FAILED] boom"
    assert hb.forced == [30]


def test_regular_reads_that_fail_transiently_are_no_data(clock: VirtualClock) -> None:
    hb = Reader(clock, lambda t, force: TransientReadError("hub 503", status_code=503))
    store = MemoryStore()
    result, _ = watch(clock, timeline((0, RUNNING)), heartbeat_reader=hb, store=store)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=3010)
    assert_words(result, "setup (pre-training)")
    assert heartbeat_events(store) == []  # nothing recorded, as for a read that found nothing


# --- D1: capacity timers clear when the job leaves the queue -------------------------------


def test_throttled_timer_clears_when_the_job_leaves_the_queue(clock: VirtualClock) -> None:
    # Throttled from 0 to 250, in progress 260–390, queued and throttled again from 400.
    result, client = watch(
        clock,
        timeline((0, QUEUED), (260, RUNNING), (400, QUEUED)),
        health=timeline((0, THROTTLED)),
        queue_grace_s=10_000,
    )
    assert client.health_calls[:4] == [0, 100, 200, 400]
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=800)
    assert_words(result, "400s")


def test_unhealthy_timer_clears_when_the_job_leaves_the_queue(clock: VirtualClock) -> None:
    result, _ = watch(
        clock,
        timeline((0, QUEUED), (210, RUNNING), (400, QUEUED)),
        health=timeline((0, UNHEALTHY)),
        queue_grace_s=10_000,
    )
    assert_verdict(result, clock, failure="stalled", rule="unhealthy_worker", at=700)


# --- D2: blind gaps are charged to no timer; the deadline is wall-clock --------------------


def crash_at(index: int, answer: Any) -> Callable[[float, int], Any]:
    """Answer `answer`, except that the status call number `index` kills the supervisor."""
    return lambda t, i: Crash() if i == index else answer


def test_a_queued_job_reattached_after_an_hour_keeps_its_queue_time(clock: VirtualClock) -> None:
    store = MemoryStore()
    client = ScriptedClient(clock, status=crash_at(26, QUEUED))
    kwargs: dict[str, Any] = {"client": client, "clock": clock, "sleep": guarded_sleep(clock)}
    with pytest.raises(Crash):
        poll_job(JOB, store=store, stream="job-s", **kwargs)
    assert clock.elapsed == 260  # the fetch at 260 died; the last one recorded was at 250
    clock.now += 3600
    reattach = clock.elapsed
    result = poll_job(JOB, store=store, stream="job-s", **kwargs)
    # 250 s queued before the crash: 50 s more and at most one interval to notice.
    assert_verdict(result, clock, failure="no_capacity", rule="queue_grace", at=reattach + 60)
    assert_words(result, "IN_QUEUE for 310s")
    assert client.status_calls[27:] == [reattach + 10 * k for k in range(7)]


def test_a_training_job_reattached_after_two_hours_is_not_stalled_by_the_gap(
    clock: VirtualClock,
) -> None:
    store = MemoryStore()
    beat = training_beat(12, clock.now)
    hb = Reader(clock, lambda t, force: beat)
    client = ScriptedClient(clock, status=crash_at(50, RUNNING))
    kwargs: dict[str, Any] = {
        "client": client,
        "clock": clock,
        "sleep": guarded_sleep(clock),
        "heartbeat_reader": hb,
    }
    with pytest.raises(Crash):
        poll_job(JOB, store=store, stream="job-t", **kwargs)
    assert clock.elapsed == 500
    clock.now += 7200
    reattach = clock.elapsed
    result = poll_job(JOB, store=store, stream="job-t", **kwargs)
    # Progress at 0, watched until 490: 710 s of the 1200 s window remain after the reattach.
    assert_verdict(result, clock, failure="stalled", rule="stall", at=reattach + 720)
    assert_words(result, "no worker progress for 1210s", "during training")


def test_a_throttled_job_reattached_after_an_hour_keeps_its_throttled_time(
    clock: VirtualClock,
) -> None:
    store = MemoryStore()
    client = ScriptedClient(clock, status=crash_at(26, QUEUED), health=timeline((0, THROTTLED)))
    kwargs: dict[str, Any] = {
        "client": client,
        "clock": clock,
        "sleep": guarded_sleep(clock),
        "queue_grace_s": 10_000,
    }
    with pytest.raises(Crash):
        poll_job(JOB, store=store, stream="job-th", **kwargs)
    assert client.health_calls == [0, 100, 200]
    clock.now += 3600
    reattach = clock.elapsed
    result = poll_job(JOB, store=store, stream="job-th", **kwargs)
    # Watched time resumes at 250: probes at watched 300 (not yet > 300 s) and 400.
    assert client.health_calls[3:] == [reattach + 50, reattach + 150]
    assert_verdict(result, clock, failure="no_capacity", rule="throttled_worker", at=reattach + 150)
    assert_words(result, "THROTTLED for 400s")


def test_the_deadline_counts_the_blind_gap(clock: VirtualClock) -> None:
    store = MemoryStore()
    handle = JobHandle("ep-1", "trainer", "job-1", submitted_at=clock.now)
    client = ScriptedClient(clock, status=crash_at(20, RUNNING))
    kwargs: dict[str, Any] = {"client": client, "clock": clock, "sleep": guarded_sleep(clock)}
    with pytest.raises(Crash):
        poll_job(handle, store=store, stream="job-d", deadline_s=1000, **kwargs)
    clock.now += 3600
    calls = len(client.status_calls)
    result = poll_job(handle, store=store, stream="job-d", deadline_s=1000, **kwargs)
    assert_verdict(result, clock, failure="stalled", rule="client_deadline", at=200 + 3600)
    assert_words(result, "client-side deadline exceeded")
    assert len(client.status_calls) == calls  # judged at once, without a fetch


# --- D3: heartbeats older than the submission are leftovers --------------------------------


def test_a_heartbeat_older_than_the_submission_is_not_progress(clock: VirtualClock) -> None:
    handle = JobHandle("ep-1", "trainer", "job-1", submitted_at=clock.now)
    old = clock.now - 600
    # A new key each read, all stamped before the submission: an earlier attempt's beats.
    hb = Reader(clock, lambda t, force: training_beat(int(t), old + t / 1000))
    result, _ = watch(clock, timeline((0, RUNNING)), handle=handle, heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=3010)
    assert_words(result, "setup (pre-training)", "limit 3000s")


def test_a_heartbeat_after_the_submission_is_progress(clock: VirtualClock) -> None:
    handle = JobHandle("ep-1", "trainer", "job-1", submitted_at=clock.now - 5)
    start = clock.now
    hb = Reader(clock, lambda t, force: training_beat(int(min(t, 300)), start + min(t, 300)))
    result, _ = watch(clock, timeline((0, RUNNING)), handle=handle, heartbeat_reader=hb)
    assert_verdict(result, clock, failure="stalled", rule="stall", at=300 + 1210)
    assert_words(result, "during training")


@pytest.mark.parametrize(("age", "failure"), [(-60, "job_failed"), (60, "job_preempted")])
def test_a_retriable_flag_counts_only_from_this_attempt(
    clock: VirtualClock, age: float, failure: str
) -> None:
    submitted = clock.now
    handle = JobHandle("ep-1", "trainer", "job-1", submitted_at=submitted)
    hb = Reader(clock, lambda t, force: training_beat(4, submitted + age, retriable=True))
    result, _ = watch(
        clock,
        timeline((0, RUNNING), (20, {"status": "FAILED", "error": "worker died"})),
        handle=handle,
        heartbeat_reader=hb,
    )
    assert_verdict(result, clock, failure=failure, rule="worker_failed", at=20)
    assert_words(result, "[FAILED] worker died")
    assert hb.forced == [20]


# --- D4: 404 means the job is gone ---------------------------------------------------------


def test_a_404_on_status_means_the_job_is_lost_at_once(clock: VirtualClock) -> None:
    gone = RunpodApiError("job not found", status_code=404, route="status")
    result, client = watch(clock, timeline((0, RUNNING), (100, gone)))
    assert_verdict(result, clock, failure="lost", rule="job_lost", at=100)
    assert_words(result, "no longer exists", "404", "job not found")
    assert result.state == "LOST"
    assert client.status_calls[-1] == 100


def test_a_404_after_other_errors_is_still_lost(clock: VirtualClock) -> None:
    answers = [RunpodApiError("flaky", status_code=503)] * 3
    result, _ = watch(clock, by_call(answers, RunpodApiError("gone", status_code=404)))
    assert_verdict(result, clock, failure="lost", rule="job_lost", at=60)


# --- robustness and plumbing --------------------------------------------------------------


def test_an_unknown_status_is_watched_like_a_running_job(clock: VirtualClock) -> None:
    result, client = watch(
        clock, timeline((0, {"status": "PAUSED"})), health=timeline((0, NOTHING))
    )
    assert_verdict(result, clock, failure="stalled", rule="stall", at=1210)
    assert_words(result, "job status PAUSED")
    assert client.health_calls == []


def test_an_empty_status_string_is_a_status_error(clock: VirtualClock) -> None:
    result, _ = watch(clock, timeline((0, {"status": ""})))
    assert_verdict(result, clock, failure="poll_error", rule="poll_errors", at=270)


def test_log_lines_reach_a_callable(clock: VirtualClock) -> None:
    lines: list[str] = []
    hb = Reader(clock, lambda t, force: training_beat(3, 1.0) if t >= 20 else None)
    result, _ = watch(
        clock,
        timeline((0, QUEUED), (20, RUNNING), (40, {"status": "COMPLETED", "output": METRICS})),
        heartbeat_reader=hb,
        log=lines.append,
    )
    assert result.ok
    assert "job job-1: IN_QUEUE" in lines
    assert "job job-1: IN_PROGRESS" in lines
    assert "heartbeat: rl_train step 3" in lines
    assert any("job job-1: COMPLETED" in line for line in lines)
    assert lines[-1].startswith("job job-1: SUCCEEDED")


def test_log_lines_reach_a_file(clock: VirtualClock) -> None:
    sink = io.StringIO()
    result, _ = watch(clock, timeline((0, QUEUED)), log=sink)
    assert result.failure == "no_capacity"
    text = sink.getvalue().splitlines()
    assert text[0] == "job job-1: IN_QUEUE"
    assert not any("workers" in line for line in text)  # every probe failed: no counts
    assert "no_capacity (queue_grace)" in text[-1]


def test_log_lines_are_redacted(clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "rpa_SECRETSECRET1234"
    monkeypatch.setenv("RUNPOD_API_KEY", secret)
    lines: list[str] = []
    result, _ = watch(
        clock, timeline((0, {"status": "FAILED", "error": f"bad key {secret}"})), log=lines.append
    )
    assert result.detail is not None and secret not in result.detail
    assert "[REDACTED]" in result.detail
    assert lines and all(secret not in line for line in lines)


def test_a_concluded_stream_returns_its_verdict_without_a_call(clock: VirtualClock) -> None:
    store = MemoryStore()
    first, _ = watch(clock, timeline((0, {"status": "COMPLETED", "output": METRICS})), store=store)
    sleeps = list(clock.sleeps)
    clock.now += 5000
    again, client = watch(clock, timeline((0, RuntimeError("must not be called"))), store=store)
    assert again == first
    assert again.ok and again.metrics == METRICS
    assert client.status_calls == [] and client.health_calls == []
    assert clock.sleeps == sleeps


def test_poll_job_accepts_a_handle_dict(clock: VirtualClock) -> None:
    result, _ = watch(
        clock, timeline((0, {"status": "COMPLETED", "output": METRICS})), handle=JOB.to_dict()
    )
    assert_verdict(result, clock, failure=None, rule="completed", at=0)


def test_handle_dict_round_trip() -> None:
    handle = JobHandle(
        endpoint_id="ep-9",
        endpoint_name="trainer-r1",
        job_id="job-9",
        on_last_gpu=True,
        submitted_at=1_700_000_000.5,
        gpu_class="H100",
        attempt=2,
    )
    data = handle.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert JobHandle.from_dict(data) == handle


def test_a_handle_with_its_hub_round_trips_and_records_it_on_the_job() -> None:
    hub = HubLocation(hf_repo="my-org/runs", phase="sft", run_id="r", seed=0)
    handle = JobHandle("ep", "flash-ep", "j", submitted_at=1_700_000_000.0, hub=hub)
    data = handle.to_dict()
    assert json.loads(json.dumps(data)) == data and JobHandle.from_dict(data) == handle
    assert "hub" not in JobHandle("ep", "flash-ep", "j").to_dict()  # as before, when unknown
    store = MemoryStore()
    watch(
        VirtualClock(),
        lambda t, i: {"status": "COMPLETED", "output": {}},
        handle=handle,
        store=store,
    )
    submitted = store.read("job-j")[0]
    assert isinstance(submitted, JobSubmitted) and submitted.hub == hub and submitted.v == 3
    with pytest.raises(ValueError, match="hub is not a Hub location"):
        JobHandle.from_dict({**data, "hub": {"hf_repo": "my-org/runs"}})


def test_handle_from_dict_tolerates_extra_and_missing_optional_keys() -> None:
    handle = JobHandle.from_dict({"endpoint_id": "ep", "job_id": "j", "surprise": [1, 2]})
    assert handle == JobHandle(endpoint_id="ep", endpoint_name="", job_id="j")
    odd = JobHandle.from_dict(
        {"endpoint_id": "ep", "job_id": "j", "submitted_at": "yesterday", "attempt": -3}
    )
    assert odd.submitted_at is None and odd.attempt == 0


@pytest.mark.parametrize(
    ("data", "missing"),
    [
        ({"job_id": "j"}, "endpoint_id"),
        ({"endpoint_id": "ep"}, "job_id"),
        ({"endpoint_id": "", "job_id": "j"}, "endpoint_id"),
        ({}, "endpoint_id and job_id"),
    ],
)
def test_handle_from_dict_needs_endpoint_and_job(data: dict[str, Any], missing: str) -> None:
    with pytest.raises(ValueError, match=missing):
        JobHandle.from_dict(data)
