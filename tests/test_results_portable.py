"""The public results cross an orchestrator's boundary as plain JSON and come back equal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashfsm import PollResult, RunResult

text = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
metrics = st.none() | st.dictionaries(text, json_values, max_size=5)

run_results = st.builds(
    RunResult,
    ok=st.booleans(),
    failure=st.none() | text,
    detail=text,
    attempts=st.integers(0, 50),
    metrics=metrics,
    stream=text,
)
poll_results = st.builds(
    PollResult,
    ok=st.booleans(),
    metrics=metrics,
    failure=st.none() | text,
    detail=st.none() | text,
    state=st.none() | text,
    rule=st.none() | text,
)


@given(st.one_of(run_results, poll_results))
def test_a_result_through_json_comes_back_equal(result: RunResult | PollResult) -> None:
    stored = json.dumps(result.to_dict())  # what an orchestrator's result store keeps
    assert type(result).from_dict(json.loads(stored)) == result


def test_to_dict_is_a_copy() -> None:
    result = RunResult(True, None, "", 1, {"loss": [0.5]}, "run-a")
    result.to_dict()["metrics"]["loss"].append(0.1)
    assert result.metrics == {"loss": [0.5]}


GOOD: dict[str, Any] = RunResult(False, "stalled", "no heartbeat", 2, None, "run-a").to_dict()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({**GOOD, "ok": "false"}, "RunResult.ok"),  # nothing coerced: "false" would be truthy
        ({**GOOD, "attempts": "2"}, "RunResult.attempts"),
        ({**GOOD, "extra": 1}, "no field extra"),
        ({k: v for k, v in GOOD.items() if k != "stream"}, "needs stream"),
        (["ok"], "takes a mapping"),
    ],
)
def test_a_damaged_stored_result_is_refused_by_field(data: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        RunResult.from_dict(data)


def test_a_poll_result_keeps_its_defaults() -> None:
    assert PollResult.from_dict({"ok": True}) == PollResult(ok=True)
