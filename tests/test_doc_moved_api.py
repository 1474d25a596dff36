"""What docs/api.md showed by example before it was shortened, checked here.

The corpus what-if from Python (`flashfsm.postmortem.explain.what_if_corpus` over the
example logs, and the CI gate `parse_gate`), which no other test runs outside the CLI.
"""

from __future__ import annotations

from flashfsm import example_logs, read_jsonl_file
from flashfsm.postmortem.explain import corpus, parse_gate, what_if_corpus


def test_a_shorter_stall_window_over_the_example_logs_judges_the_stall_sooner_and_saves():
    logs = {path.stem: read_jsonl_file(path) for path in example_logs().glob("*.jsonl")}
    result = what_if_corpus(corpus(logs), stall_after_s=600)
    [shift] = result.shifts  # the stalled attempt is judged 15 minutes sooner
    assert (shift.before, shift.after, shift.count) == ("STALLED (stall)", "STALLED (stall)", 1)
    # its run cancelled the job and deleted the endpoint at the verdict: 15 minutes sooner
    assert round(result.metrics()["saved"], 4) == round(900 * 0.99 / 3600, 4)
    assert not parse_gate("success_lost>0").crossed(result)
    assert not parse_gate("saved<0").crossed(result)
    assert parse_gate("saved>0").crossed(result)


def test_the_recorded_policy_changes_nothing_over_the_example_logs():
    logs = {path.stem: read_jsonl_file(path) for path in example_logs().glob("*.jsonl")}
    result = what_if_corpus(corpus(logs))
    assert not result.shifts
    assert result.metrics()["saved"] == 0
    assert not parse_gate("saved>0").crossed(result)
