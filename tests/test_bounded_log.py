"""Every event a watch records has a bounded size, whatever the remote side sends.

A week-long watch records ~60,000 routine observations; if any field of any of them could
grow with what RunPod, a worker or the Hub returned, a hostile or broken worker could make
the log (and every replay of it) arbitrarily large. The caps live in the event models and
the observation builders; these tests feed each builder answers far beyond every cap —
megabytes of four-byte characters, huge integers, deep nesting — and measure the encoded
events.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashfsm.errors import RunpodApiError, TransientReadError
from flashfsm.events.codec import encode
from flashfsm.fsm.job import JobState
from flashfsm.ids import new_id
from flashfsm.reads import (
    failure_detail_observation,
    health_observation,
    heartbeat_observation,
    status_observation,
)

#: The largest encoded event of a routine poll (non-terminal status, fetch error, health,
#: heartbeat): what a week of polling multiplies.
ROUTINE_BYTES = 4 * 1024
#: The largest encoded event at all (a terminal status with error, stdout tail, output text
#: and metrics, or the failure artifacts): recorded a handful of times per job.
ANY_BYTES = 128 * 1024

HUGE = "😀" * 300_000  # 1.2 MB of UTF-8, 4 bytes a character
HUGE_INT = 10**4000
DEEP: Any = "x"
for _ in range(3000):
    DEEP = {"k": [DEEP]}


def _size(built: tuple[Any, dict[str, Any]]) -> int:
    cls, fields = built
    assert cls is not None
    event = cls(stream="job-bounded", seq=7, id=new_id(1.0), at=1.0, **fields)
    return len(encode(event))


NON_TERMINAL = [
    {"status": HUGE},
    {"status": "IN_PROGRESS", "error": HUGE, "output": {HUGE: HUGE}, "id": HUGE},
    {"status": "IN_QUEUE", "delayTime": HUGE_INT, "executionTime": DEEP},
    {"status": HUGE_INT},
    DEEP,
    HUGE,
]
TERMINAL = [
    {"status": "FAILED", "error": HUGE, "output": {"stdout": HUGE, "error": HUGE}},
    {"status": "COMPLETED", "output": {HUGE: HUGE, "n": HUGE_INT, "deep": DEEP}},
    {"status": "COMPLETED", "output": {"success": False, "error": HUGE, "stdout": HUGE}},
    {"status": "COMPLETED", "output": HUGE},
    {"status": "TIMED_OUT", "error": DEEP, "output": [HUGE] * 5},
]
HEALTH = [
    {"workers": {"idle": HUGE_INT, "running": HUGE, HUGE: 1}, "jobs": {"inQueue": DEEP}},
    {"workers": {k: HUGE_INT for k in ("idle", "running", "throttled", "unhealthy")}},
    DEEP,
    HUGE,
]
HEARTBEATS = [
    {"stage": HUGE, "step": HUGE_INT, "ts": HUGE, "retriable": HUGE},
    {"stage": "train", "step": HUGE, "ts": 1.0, HUGE: HUGE},
    DEEP,
    HUGE,
]
ERRORS = [
    RunpodApiError(HUGE, status_code=503),
    RuntimeError(HUGE),
    TransientReadError(HUGE, status_code=503),
    ValueError(DEEP),
]


@pytest.mark.parametrize("payload", NON_TERMINAL, ids=range(len(NON_TERMINAL)))
def test_a_routine_status_answer_of_any_size_records_a_small_event(payload: Any) -> None:
    assert _size(status_observation(payload)) <= ROUTINE_BYTES


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_a_failed_fetch_or_probe_of_any_size_records_a_small_event(error: Exception) -> None:
    assert _size(status_observation(None, error)) <= ROUTINE_BYTES
    assert _size(health_observation(None, error)) <= ROUTINE_BYTES


@pytest.mark.parametrize("payload", HEALTH, ids=range(len(HEALTH)))
def test_a_health_answer_of_any_size_records_a_small_event(payload: Any) -> None:
    assert _size(health_observation(payload)) <= ROUTINE_BYTES


@pytest.mark.parametrize("payload", HEARTBEATS, ids=range(len(HEARTBEATS)))
@pytest.mark.parametrize("force", [False, True])
def test_a_heartbeat_file_of_any_size_records_a_small_event(payload: Any, force: bool) -> None:
    built = heartbeat_observation(JobState(), payload, force=force, stream="job-b", at=1.0)
    if built[0] is not None:  # a regular read that brought nothing new records nothing
        assert _size(built) <= ROUTINE_BYTES


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_a_failed_forced_heartbeat_read_of_any_size_records_a_small_event(
    error: Exception,
) -> None:
    built = heartbeat_observation(JobState(), None, force=True, stream="job-b", at=1.0, error=error)
    assert _size(built) <= ROUTINE_BYTES


@pytest.mark.parametrize("payload", TERMINAL, ids=range(len(TERMINAL)))
@pytest.mark.parametrize("allow_pickle", [False, True])
def test_a_terminal_answer_of_any_size_records_a_bounded_event(
    payload: Any, allow_pickle: bool
) -> None:
    assert _size(status_observation(payload, allow_pickle=allow_pickle)) <= ANY_BYTES


@pytest.mark.parametrize("raw", [HUGE, HUGE * 3, DEEP, None])
def test_failure_artifacts_of_any_size_record_a_bounded_event(raw: Any) -> None:
    assert _size(failure_detail_observation(raw)) <= ANY_BYTES


_text = st.text(st.characters(), max_size=2000)
_answers = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=40,
)


@given(
    status=st.sampled_from(["IN_QUEUE", "IN_PROGRESS", "RUNNING", "THROTTLED"]) | _text,
    extra=st.dictionaries(_text, _answers, max_size=6),
)
def test_any_non_terminal_status_answer_records_at_most_the_routine_bound(
    status: str, extra: dict[str, Any]
) -> None:
    if status in {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}:
        return
    assert _size(status_observation({**extra, "status": status})) <= ROUTINE_BYTES
