"""`verify` checks the whole verdict: a recorded `Concluded` must hold, field by field, what
recording the verdict today's rules reach would store (state, ok, failure, detail, rule,
evidence and metrics).

The logs are real: the example job logs (`flashfsm.example_logs()`), one uninterrupted
watch of every built-in simulator scenario (`tests/test_verify_conversation.py` makes them
once per process), and the finished `poll_job` watches of `tests/test_verify.py`. A forged copy
changes one field of the recorded verdict the way a forger edits a file: in the event's
JSON line, decoded again, so the forged event is a valid one.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from flashfsm.cli import EXIT_DISAGREES, app
from flashfsm.events.codec import decode, encode
from flashfsm.events.models import Concluded, Event, EventBase
from flashfsm.events.text import MASK
from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.job import VERDICT_FIELDS, VerifyReport, concluded_fields, verify
from flashfsm.fsm.table import JobPhase
from flashfsm.watch import conclusion
from tests.test_crash_simulator import SCENARIOS
from tests.test_properties import Script, run_poll_job, scripts
from tests.test_verify import FINISHED_WATCHES, watch
from tests.test_verify_conversation import EXAMPLES, example_logs, simulator_logs

#: The verdict fields a forger may change without changing the state or the rule.
FORGED_FIELDS = ("ok", "failure", "detail", "evidence", "metrics")

LOG_NAMES = (
    [f"example:{path.stem}" for path in sorted(EXAMPLES.glob("job-*.jsonl"))]
    + [f"sim:{name}" for name in sorted(SCENARIOS)]
    + [f"poll_job:{name}" for name in sorted(FINISHED_WATCHES)]
)


@functools.cache
def poll_job_logs() -> dict[str, tuple[Event, ...]]:
    return {f"poll_job:{name}": tuple(run()[1]) for name, (run, _) in FINISHED_WATCHES.items()}


def real_log(name: str) -> list[Event]:
    """One real log that ends with its verdict."""
    source = (
        example_logs()
        if name.startswith("example:")
        else simulator_logs()
        if name.startswith("sim:")
        else poll_job_logs()
    )
    log = list(source[name])
    assert isinstance(log[-1], Concluded), f"{name} has no verdict"
    return log


def forged_value(field: str, event: Concluded) -> Any:
    """A value of `field` that differs from `event`'s and still decodes."""
    match field:
        case "ok":
            return not event.ok
        case "failure":
            return "job_failed" if event.failure != "job_failed" else "stalled"
        case "detail":
            # one character changed mid-text: the length (and so the cap) stays the same
            middle = len(event.detail) // 2
            if not event.detail:
                return "edited"
            swap = "X" if event.detail[middle] != "X" else "Y"
            return event.detail[:middle] + swap + event.detail[middle + 1 :]
        case "evidence":
            return list(event.evidence[:-1]) if event.evidence else [0]
        case "metrics":
            if event.metrics is None:
                return {"loss": 0.1}
            metrics = dict(event.metrics)
            floats = [k for k, v in metrics.items() if isinstance(v, float)]
            if floats:  # the smallest change a float can take, which JSON keeps
                metrics[floats[0]] = math.nextafter(metrics[floats[0]], math.inf)
            else:
                metrics["forged"] = 1
            return metrics
    raise AssertionError(field)


def forged(event: Concluded, **changes: Any) -> Concluded:
    """`event` with `changes` made in its JSON line (what editing a log file does)."""
    raw = json.loads(encode(event))
    raw.update(changes)
    result = decode(json.dumps(raw))
    assert isinstance(result, Concluded)
    return result


def rejected(report: VerifyReport, seq: int) -> Any:
    assert not report.ok, "verify accepted a forged verdict"
    found = report.first_disagreement
    assert found is not None and found.seq == seq, str(report)
    assert "\n" not in str(report)
    return found


# --- every genuine log verifies -------------------------------------------------------------


@pytest.mark.parametrize("name", LOG_NAMES)
def test_every_real_log_verifies_in_memory_and_as_stored(name: str) -> None:
    log = real_log(name)
    report = verify(log)
    assert report.ok, str(report)
    assert report.verdict == log[-1]
    stored = [decode(encode(event)) for event in log]
    assert verify(stored).ok, str(verify(stored))


# --- one forged field -----------------------------------------------------------------------


@pytest.mark.parametrize("field", FORGED_FIELDS)
@pytest.mark.parametrize("name", LOG_NAMES)
def test_a_forged_verdict_field_is_rejected_at_the_verdict_naming_the_field(
    name: str, field: str
) -> None:
    log = real_log(name)
    verdict = log[-1]
    doctored = [*log[:-1], forged(verdict, **{field: forged_value(field, verdict)})]
    report = verify(doctored)
    found = rejected(report, verdict.seq)
    assert found.fields == (field,)
    assert found.reason == f"a verdict whose {field} differs"
    assert found.recorded.startswith(f"{field}=") and found.expected.startswith(f"{field}=")
    assert found.recorded != found.expected
    assert str(report).startswith(f"seq {verdict.seq}: a verdict whose {field} differs (recorded: ")


def test_a_forged_ok_and_failure_are_both_named() -> None:
    log = real_log("example:job-stall-s0-a0")
    verdict = log[-1]
    assert (verdict.state, verdict.ok, verdict.failure) == ("STALLED", False, "stalled")
    doctored = [*log[:-1], forged(verdict, ok=True, failure=None)]
    found = rejected(verify(doctored), verdict.seq)
    assert found.fields == ("ok", "failure")
    assert found.reason == "a verdict whose ok and failure differ"
    assert found.recorded == "ok=True, failure=None"
    assert found.expected == "ok=False, failure='stalled'"


def test_a_forged_state_is_a_different_verdict_naming_every_field_that_differs() -> None:
    log = real_log("example:job-walk-s0-a1")
    verdict = log[-1]
    assert verdict.state == "SUCCEEDED"
    doctored = [*log[:-1], forged(verdict, state="FAILED", ok=False, failure="job_failed")]
    found = rejected(verify(doctored), verdict.seq)
    assert (found.reason, found.recorded, found.expected) == (
        "a different verdict",
        "FAILED by completed",
        "SUCCEEDED by completed",
    )
    assert found.fields == ("state", "ok", "failure")


def test_a_metric_one_ulp_off_is_rejected_and_an_int_is_not_a_float() -> None:
    log = real_log("example:job-crashloop-s0-a1")
    verdict = log[-1]
    assert verdict.metrics == {"reward": 0.82, "loss": 0.117, "steps": 300}
    for metrics in (
        {**verdict.metrics, "loss": math.nextafter(0.117, 0.0)},
        {**verdict.metrics, "steps": 300.0},
        {**verdict.metrics, "steps": True},
        {"reward": 0.82, "loss": 0.117},
    ):
        found = rejected(verify([*log[:-1], forged(verdict, metrics=metrics)]), verdict.seq)
        assert found.fields == ("metrics",), metrics
    # the same metrics in another key order are the same metrics
    reordered = dict(reversed(verdict.metrics.items()))
    assert verify([*log[:-1], forged(verdict, metrics=reordered)]).ok


def test_a_long_detail_is_shown_escaped_and_capped_from_where_it_differs() -> None:
    log = real_log("example:job-codeerror-s0-a0")
    verdict = log[-1]
    assert len(verdict.detail) > 300 and "\n" in verdict.detail
    at = verdict.detail.index("trainer.train()", 200) + 2  # deep in a multi-line text
    edited = verdict.detail[:at] + "X" + verdict.detail[at + 1 :]
    found = rejected(verify([*log[:-1], forged(verdict, detail=edited)]), verdict.seq)
    assert found.recorded.startswith("detail=…'") and "trXiner" in found.recorded
    assert found.expected.startswith("detail=…'") and "trainer" in found.expected
    for shown in (found.recorded, found.expected):
        assert len(shown) <= len("detail=") + 60 and "\n" not in shown


# --- secrets: masked alike on both sides, never shown ---------------------------------------

#: (random hex: no 8-character piece of it can be one of a secret another test made known)
SECRET = "hf_verifyverdict" + uuid.uuid4().hex


def _log_with_a_secret_in_its_detail() -> list[Event]:
    result, log = watch(
        [{"status": "RUNNING"}] * 3 + [{"status": "FAILED", "error": f"auth {SECRET} refused"}],
    )
    assert result.state == "FAILED"
    return log


def test_a_log_recorded_before_its_secret_was_known_still_verifies_once_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _log_with_a_secret_in_its_detail()
    assert SECRET in log[-1].detail  # nobody knew it was a secret when it was recorded
    monkeypatch.setenv("HF_TOKEN", SECRET)
    assert verify(log).ok, str(verify(log))
    # a forged detail is reported without the secret: both sides are shown masked
    verdict = log[-1]
    edited = verdict.detail.replace("refused", "granted")
    report = verify([*log[:-1], verdict.model_copy(update={"detail": edited})])
    found = rejected(report, verdict.seq)
    assert found.fields == ("detail",)
    assert SECRET not in str(report) and SECRET[:8] not in str(report)
    assert MASK in found.recorded and "granted" in found.recorded
    assert MASK in found.expected and "refused" in found.expected


def test_a_log_recorded_while_its_secret_was_known_still_verifies_once_it_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as known:
        known.setenv("HF_TOKEN", SECRET)
        log = _log_with_a_secret_in_its_detail()
    assert SECRET not in log[-1].detail and MASK in log[-1].detail
    assert verify(log).ok, str(verify(log))


# --- the core's verdict fields are the watch's ----------------------------------------------


def test_the_verdict_fields_are_the_concluded_payload_and_what_the_watch_records() -> None:
    payload = [
        name
        for name in Concluded.model_fields
        if name not in {*EventBase.model_fields, "kind", "v"}
    ]
    assert list(VERDICT_FIELDS) == payload
    verdict = Verdict(JobPhase.FAILED, "worker_failed", "boom", (3, 4), {"loss": 1.5})
    event_type, fields = conclusion(verdict)
    assert event_type is Concluded
    assert fields == concluded_fields(verdict)
    assert list(fields) == list(VERDICT_FIELDS)


# --- the CLI ----------------------------------------------------------------------------------


@pytest.mark.parametrize("field", FORGED_FIELDS)
def test_replay_verify_reports_a_forged_field_as_text_and_json(field: str, tmp_path: Path) -> None:
    log = real_log("example:job-codeerror-s0-a0")
    verdict = log[-1]
    doctored = [*log[:-1], forged(verdict, **{field: forged_value(field, verdict)})]
    path = tmp_path / "forged.jsonl"
    path.write_bytes(b"".join(encode(event) + b"\n" for event in doctored))
    runner = CliRunner()
    out = runner.invoke(app, ["replay", str(path), "--verify", "--json"])
    assert out.exit_code == EXIT_DISAGREES, out.output
    report = json.loads(out.stdout)["verify"]
    assert (report["ok"], report["seq"]) == (False, verdict.seq)
    assert report["reason"] == f"a verdict whose {field} differs"
    assert report["text"] == str(verify(doctored))
    text = runner.invoke(app, ["replay", str(path), "--verify"], terminal_width=400)
    assert text.exit_code == EXIT_DISAGREES
    assert f"verify: seq {verdict.seq}: a verdict whose {field} differs (recorded: " in text.stdout


# --- the property -----------------------------------------------------------------------------


@given(scripts(), st.sampled_from(FORGED_FIELDS))
def test_forging_any_one_verdict_field_of_a_poll_job_log_is_rejected_at_its_verdict_seq(
    script: Script, field: str
) -> None:
    _, log, _ = run_poll_job(script)
    verdict = log[-1]
    assert isinstance(verdict, Concluded) and verify(log).ok
    found = rejected(
        verify([*log[:-1], forged(verdict, **{field: forged_value(field, verdict)})]), verdict.seq
    )
    assert found.fields == (field,)
