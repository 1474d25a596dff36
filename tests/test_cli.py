"""The `flashfsm` command, run on logs the simulator makes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flashfsm.adapters.jsonl import JsonlStore
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.cli import EXIT_CODES, EXIT_DISAGREES, app
from flashfsm.demo import DEMO_JOBS, run_demo
from flashfsm.fsm.diagram import mermaid

runner = CliRunner()
EXPECTED = {
    "success": ("SUCCEEDED", None, "completed"),
    "no_capacity": ("NO_CAPACITY", "no_capacity", "queue_grace"),
    "crash_loop": ("STALLED", "stalled", "unhealthy_worker"),
    "training_stall": ("STALLED", "stalled", "stall"),
    "failed": ("FAILED", "job_failed", "worker_failed"),
}


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('demo')}/events.db"
    streams = run_demo(url, say=lambda line: None)
    return url, dict(zip([name for name, _ in DEMO_JOBS], streams, strict=True))


def test_the_demo_runs_every_scenario_to_its_expected_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHFSM_STORE", f"sqlite:///{tmp_path}/events.db")
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    for scenario, (state, _failure, rule) in EXPECTED.items():
        assert scenario in result.output
        assert f"{state}" in result.output and rule in result.output
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    try:
        assert len(store.streams()) == len(DEMO_JOBS)
    finally:
        store.close()


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_replay_json_reports_the_verdict_field_by_field(demo_store, scenario):
    url, streams = demo_store
    result = runner.invoke(app, ["replay", streams[scenario], "--store", url, "--json", "--verify"])
    state, failure, rule = EXPECTED[scenario]
    assert result.exit_code == EXIT_CODES[failure], result.output
    out = json.loads(result.stdout)
    assert out["stream"] == streams[scenario]
    assert out["state"] == state
    verdict = out["verdict"]
    assert (verdict["state"], verdict["failure"], verdict["rule"]) == (state, failure, rule)
    assert verdict["ok"] is (failure is None)
    assert verdict["evidence"] and all(isinstance(seq, int) for seq in verdict["evidence"])
    assert out["verify"] == {
        "ok": True,
        "seq": None,
        "reason": None,
        "text": out["verify"]["text"],
    }
    timeline = out["timeline"]
    assert len(timeline) == out["events"]
    assert [row["seq"] for row in timeline] == list(range(len(timeline)))
    assert timeline[0]["kind"] == "JobSubmitted" and timeline[-1]["kind"] == "Concluded"
    assert timeline[-1]["state"] == state


def test_replay_reads_a_jsonl_file_and_shows_the_timeline(demo_store, tmp_path):
    url, streams = demo_store
    copy_streams(url, f"jsonl:///{tmp_path}/export", [streams["no_capacity"]])
    files = list((tmp_path / "export").glob("*.jsonl"))
    assert len(files) == 1
    result = runner.invoke(app, ["replay", str(files[0])])
    assert result.exit_code == EXIT_CODES["no_capacity"], result.output
    assert "NO_CAPACITY" in result.output and "queue_grace" in result.output
    assert "+queue" in result.output  # the timer armed by the first IN_QUEUE


def test_replay_verify_names_the_seq_of_a_doctored_log(demo_store, tmp_path):
    url, streams = demo_store
    events = open_store(url).read(streams["success"])
    doctored = [e for e in events if not (e.kind == "StatusObserved" and e.status == "COMPLETED")]
    doctored = [
        e.model_copy(update={"seq": i, "stream": "doctored"}) for i, e in enumerate(doctored)
    ]
    store = JsonlStore(tmp_path / "doctored")
    store.append("doctored", doctored, 0)
    result = runner.invoke(
        app,
        ["replay", "doctored", "--store", f"jsonl:///{tmp_path}/doctored", "--verify", "--json"],
    )
    assert result.exit_code == EXIT_DISAGREES, result.output
    report = json.loads(result.stdout)["verify"]
    assert report["ok"] is False
    assert report["seq"] == len(doctored) - 1  # the verdict the rules no longer reach


def test_replay_of_a_missing_stream_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["replay", "nope", "--store", f"sqlite:///{tmp_path}/e.db"])
    assert result.exit_code == 1
    assert "empty or missing" in result.output


def test_diagram_prints_the_table_as_mermaid_and_dot():
    result = runner.invoke(app, ["diagram"])
    assert result.exit_code == 0 and result.stdout.strip() == mermaid().strip()
    dot = runner.invoke(app, ["diagram", "--format", "dot"])
    assert dot.exit_code == 0 and dot.stdout.startswith("digraph job {")
    assert '"SETUP" -> "TRAINING" [label="start_training"]' in dot.stdout
