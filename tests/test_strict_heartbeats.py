"""Strict heartbeats (D3, issue 14): only a fresh, plainly-`true` flag makes a failure retriable.

A FAILED (or COMPLETED-with-error) job is retried when the worker's forced heartbeat flags it
`retriable`. These tests drive the real watch (`poll_job` on a virtual clock, a scripted
RunPod client, a scripted Hub reader) with every bad shape the adversarial tests found —
`retriable` "yes"/1/"true", a `ts` missing, NaN, infinite or far in the future — and check
the strict outcome: FAILED / `job_failed`, not PREEMPTED, with `explain` saying why.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from flashfsm import JobHandle, MemoryStore, PollResult, poll_job, verify
from flashfsm.events.models import HeartbeatObserved
from flashfsm.fsm.rules import HEARTBEAT_FUTURE_TOLERANCE_S, untrusted_heartbeat_ts
from flashfsm.postmortem.explain import explain
from tests.conftest import ScriptedClient, VirtualClock

RUNNING = {"status": "IN_PROGRESS"}
FAILED = {"status": "FAILED", "error": "worker died"}
COMPLETED_WITH_ERROR = {"status": "COMPLETED", "output": {"error": "worker died"}}
FAIL_AT = 30.0  # the job reports its failure at the fourth poll
STREAM = "job-strict"


def watch_failure(
    clock: VirtualClock, beat: dict[str, Any], *, ending: dict[str, Any] = FAILED
) -> tuple[PollResult, list[Any]]:
    """Watch a job that runs, then ends with `ending`; every heartbeat read returns `beat`
    (a callable value is called with the read's time first)."""
    submitted = clock.now
    handle = JobHandle("ep-1", "trainer", "job-1", submitted_at=submitted)

    def status(t: float, i: int) -> dict[str, Any]:
        return ending if t >= FAIL_AT else RUNNING

    def reader(force: bool = False) -> dict[str, Any]:
        return {k: (v(clock.now) if callable(v) else v) for k, v in beat.items()}

    store = MemoryStore()
    result = poll_job(
        handle,
        client=ScriptedClient(clock, status=status),
        heartbeat_reader=reader,
        clock=clock,
        sleep=clock.sleep,
        store=store,
        stream=STREAM,
    )
    return result, store.read(STREAM)


def fresh(now: float) -> float:
    return now - 1.0


def beat(**fields: Any) -> dict[str, Any]:
    return {"stage": "rl_train", "step": 7, **fields}


# --- the control: a plain `true` on a fresh heartbeat is retried ---------------------------


@pytest.mark.parametrize("ending", [FAILED, COMPLETED_WITH_ERROR], ids=["failed", "completed"])
def test_a_fresh_heartbeat_flagged_true_is_preempted(clock: VirtualClock, ending: Any) -> None:
    result, events = watch_failure(clock, beat(ts=fresh, retriable=True), ending=ending)
    assert (result.state, result.failure) == ("PREEMPTED", "job_preempted"), result
    assert verify(events).ok


# --- retriable: JSON true only ---------------------------------------------------------------


@pytest.mark.parametrize("flag", ["yes", "true", "True", "1", 1, 1.0, [True], {"x": 1}])
@pytest.mark.parametrize("ending", [FAILED, COMPLETED_WITH_ERROR], ids=["failed", "completed"])
def test_a_retriable_flag_that_is_not_json_true_leaves_the_failure_the_job_s_own(
    clock: VirtualClock, flag: Any, ending: Any
) -> None:
    result, events = watch_failure(clock, beat(ts=fresh, retriable=flag), ending=ending)
    assert (result.state, result.failure) == ("FAILED", "job_failed"), result
    forced = [e for e in events if isinstance(e, HeartbeatObserved) and e.forced]
    assert forced and not forced[-1].retriable  # recorded as not retriable
    assert "did not flag it retriable" in explain(events).because
    assert verify(events).ok


# --- ts: missing, non-finite or from the future never counts as fresh ------------------------


BAD_TS: dict[str, Any] = {
    "missing": None,
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "a string": "1700000000",
    "a bool": True,
    "an hour ahead": lambda now: now + 3600.0,
    "just past the tolerance": lambda now: now + HEARTBEAT_FUTURE_TOLERANCE_S + 1.0,
    "a year ahead": lambda now: now + 365 * 86400.0,
}


@pytest.mark.parametrize("ts", list(BAD_TS.values()), ids=list(BAD_TS))
@pytest.mark.parametrize("ending", [FAILED, COMPLETED_WITH_ERROR], ids=["failed", "completed"])
def test_a_retriable_heartbeat_without_a_trustworthy_ts_concludes_job_failed(
    clock: VirtualClock, ts: Any, ending: Any
) -> None:
    fields = beat(retriable=True) if ts is None else beat(ts=ts, retriable=True)
    result, events = watch_failure(clock, fields, ending=ending)
    assert (result.state, result.failure) == ("FAILED", "job_failed"), result
    assert result.rule == ("worker_failed" if ending is FAILED else "completed_with_error")
    assert result.detail is not None and "retriable" not in result.detail
    because = explain(events).because
    assert "flagged it retriable but" in because and "cannot be dated" in because, because
    assert verify(events).ok


def test_a_heartbeat_within_the_clock_skew_tolerance_still_counts(clock: VirtualClock) -> None:
    ahead = beat(ts=lambda now: now + HEARTBEAT_FUTURE_TOLERANCE_S, retriable=True)
    result, _ = watch_failure(clock, ahead)
    assert (result.state, result.failure) == ("PREEMPTED", "job_preempted"), result


def test_the_tolerance_is_measured_from_when_the_heartbeat_was_read() -> None:
    envelope = {"stream": "s", "seq": 1, "id": "01X", "at": 1000.0}

    def hb(ts: float | None) -> HeartbeatObserved:
        return HeartbeatObserved(**envelope, stage="rl_train", ts=ts, retriable=True, forced=True)

    assert untrusted_heartbeat_ts(hb(1000.0 + HEARTBEAT_FUTURE_TOLERANCE_S)) is None
    assert untrusted_heartbeat_ts(hb(10.0)) is None  # an old ts is D3's leftover check
    assert "after it was read" in (untrusted_heartbeat_ts(hb(1061.0)) or "")
    assert untrusted_heartbeat_ts(hb(None)) == "has no usable `ts`"
    with pytest.raises(ValidationError):  # nor can a log hold a NaN or infinite one
        hb(math.nan)


# --- progress is unchanged: a worker without a clock still trains ----------------------------


def test_a_heartbeat_without_ts_whose_step_moves_is_still_progress(clock: VirtualClock) -> None:
    """Strictness is for the retry decision only: a ts-less worker whose step moves is not
    stalled (the setup grace, 3000 s, and the stall window, 1200 s, both pass unfired)."""
    start = clock.now

    def status(t: float, i: int) -> dict[str, Any]:
        return {"status": "COMPLETED", "output": {"loss": 0.1}} if t >= 4000 else RUNNING

    result = poll_job(
        JobHandle("ep-1", "trainer", "job-1", submitted_at=start),
        client=ScriptedClient(clock, status=status),
        heartbeat_reader=lambda force=False: beat(step=int(clock.now - start) // 600),
        clock=clock,
        sleep=clock.sleep,
        store=MemoryStore(),
    )
    assert (result.ok, result.rule) == (True, "completed"), result
