"""The `flashfsm` command, run on logs the simulator makes."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from typer.testing import CliRunner

from flashfsm.adapters.jsonl import JsonlStore
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.cli import EXIT_CODES, EXIT_DISAGREES, EXIT_NO_VERDICT, app
from flashfsm.demo import DEMO_JOBS, watch_scenarios
from flashfsm.postmortem.diagram import mermaid
from flashfsm.postmortem.diagram import svg as diagram_svg
from tests.test_render import build_run_log

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
    streams = watch_scenarios(url, say=lambda line: None)
    return url, dict(zip([name for name, _ in DEMO_JOBS], streams, strict=True))


def test_the_demo_runs_the_fleet_through_supervise_run_to_the_expected_results(
    tmp_path, monkeypatch
):
    from flashfsm import replay
    from flashfsm.demo import DEMO_RUNS, demo_run_name, demo_store_url
    from flashfsm.events.models import AttemptEnded, AttemptStarted, RunConcluded

    monkeypatch.setenv("FLASHFSM_STORE", f"sqlite:///{tmp_path}/events.db")
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    store = open_store(demo_store_url())  # the demo's own store, beside the default one
    try:
        runs = [s for s in store.streams() if s.startswith("run-")]
        assert len(runs) == len(DEMO_RUNS)
        outcomes = {}
        for stream in runs:
            events = store.read(stream)
            name = demo_run_name(stream)
            concluded = events[-1]
            assert isinstance(concluded, RunConcluded)
            attempts = [e for e in events if isinstance(e, AttemptStarted)]
            ended = [(e.failure, e.rule) for e in events if isinstance(e, AttemptEnded)]
            outcomes[name] = (concluded.failure, [a.gpu_class for a in attempts], ended)
            for attempt in attempts:  # every attempt's job log replays to its verdict
                job = store.read(attempt.job_stream)
                assert replay(job).verdict is not None
    finally:
        store.close()
    assert outcomes == {
        "clean": (None, ["RTX4090"], [(None, "completed")]),
        "walk": (
            None,
            ["RTX4090", "L40S"],
            [("no_capacity", "queue_grace"), (None, "completed")],
        ),
        "crashloop": (
            None,
            ["L40S", "L40S"],
            [("stalled", "unhealthy_worker"), (None, "completed")],
        ),
        "stall": (None, ["L40S", "A100-80GB"], [("stalled", "stall"), (None, "completed")]),
        "codeerror": ("job_failed", ["L40S"], [("job_failed", "worker_failed")]),
        "slowpull": (None, ["RTX4090"], [(None, "completed")]),
    }
    for demo in DEMO_RUNS:
        assert demo.name in result.output
    assert "last GPU" in result.output


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
    open_store(f"sqlite:///{tmp_path}/e.db").close()
    result = runner.invoke(app, ["replay", "nope", "--store", f"sqlite:///{tmp_path}/e.db"])
    assert result.exit_code == 1
    assert "empty or missing" in result.output
    result = runner.invoke(app, ["replay", "nope", "--store", f"sqlite:///{tmp_path}/typo.db"])
    assert result.exit_code == 1
    assert result.output == f"error: no SQLite store at {tmp_path}/typo.db\n"
    assert not (tmp_path / "typo.db").exists()


def test_diagram_prints_the_table_as_mermaid_and_svg():
    result = runner.invoke(app, ["diagram"])
    assert result.exit_code == 0 and result.stdout.strip() == mermaid().strip()
    picture = runner.invoke(app, ["diagram", "--format", "svg"])
    assert picture.exit_code == 0 and picture.stdout.strip() == diagram_svg().strip()
    assert 'data-trigger="training_started" data-from="SETUP" data-to="TRAINING"' in picture.stdout
    dot = runner.invoke(app, ["diagram", "--format", "dot"])  # dropped: unreadable
    assert dot.exit_code == 1 and "unknown format 'dot' (mermaid, svg)" in dot.output


# --- explain, why-not, whatif ------------------------------------------------------------


@pytest.fixture(scope="module")
def run_stream(demo_store):
    """A run whose three attempts are the demo's no_capacity, crash_loop and success jobs."""
    url, streams = demo_store
    store = open_store(url)
    try:
        run = build_run_log(
            store, [streams["no_capacity"], streams["crash_loop"], streams["success"]]
        )
    finally:
        store.close()
    return run


def _json(result):
    assert result.stdout.strip(), result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_explain_json_reports_rule_why_evidence_and_numbers(demo_store, scenario):
    url, streams = demo_store
    result = runner.invoke(app, ["explain", streams[scenario], "--store", url, "--json"])
    state, failure, rule = EXPECTED[scenario]
    assert result.exit_code == EXIT_CODES[failure], result.output
    out = _json(result)
    assert out["stream"] == streams[scenario]
    assert (out["state"], out["rule"]) == (state, rule)
    assert out["verdict"]["rule"] == rule and out["verdict"]["failure"] == failure
    assert out["step"] and out["why"] and not out["why"].startswith("Step")
    assert [e["seq"] for e in out["evidence"]] == out["verdict"]["evidence"]
    for item in out["evidence"]:
        assert set(item) == {"seq", "at", "offset_s", "kind", "summary"}
    assert out["timers"] == []
    if scenario in ("no_capacity", "crash_loop", "training_stall"):
        [number] = out["numbers"]
        assert number["fired"] is True and number["op"] == ">"
        assert number["value"] > number["limit"] and number["unit"] == "s"
        assert number["text"].startswith(number["quantity"])
    else:
        assert out["numbers"] == [] and out["facts"]


def test_explain_prints_the_numbers(demo_store):
    url, streams = demo_store
    result = runner.invoke(app, ["explain", streams["no_capacity"], "--store", url])
    assert result.exit_code == EXIT_CODES["no_capacity"], result.output
    assert "by rule queue_grace (step 7)" in result.output
    assert re.search(r"because: IN_QUEUE \d+ s > queue grace 300 s", result.output)
    assert "evidence: seq 2 at t+0 s: status IN_QUEUE" in result.output


def test_explain_of_a_run_explains_its_last_attempt(demo_store, run_stream):
    url, _ = demo_store
    result = runner.invoke(app, ["explain", run_stream, "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    out = _json(result)
    assert out["stream"] == f"{run_stream}-job2" and out["rule"] == "completed"


def test_why_not_quotes_the_numbers(demo_store):
    url, streams = demo_store
    result = runner.invoke(app, ["why-not", streams["no_capacity"], "stall", "--store", url])
    assert result.exit_code == 0, result.output
    assert re.search(r"no progress for \d+ s < setup grace 3000 s", result.output)
    result = runner.invoke(
        app, ["why-not", streams["success"], "queue_grace", "--store", url, "--json"]
    )
    assert result.exit_code == 0, result.output
    out = _json(result)
    assert (out["rule"], out["fired"], out["held"]) == ("queue_grace", False, False)
    assert out["verdict_rule"] == "completed"
    [number] = out["numbers"]
    assert (number["quantity"], number["op"], number["limit"]) == ("IN_QUEUE", "<", 300.0)
    assert any(fact.startswith("the job left IN_QUEUE at t+") for fact in out["facts"])
    assert out["text"].startswith("queue_grace did not fire at the verdict")


def test_why_not_an_unknown_rule_is_a_usage_error(demo_store):
    url, streams = demo_store
    result = runner.invoke(app, ["why-not", streams["success"], "nope", "--store", url])
    assert result.exit_code == 1
    assert "unknown rule 'nope'" in result.output and "queue_grace" in result.output


def test_whatif_longer_queue_grace_ends_with_the_observations(demo_store):
    url, streams = demo_store
    args = ["whatif", streams["no_capacity"], "--store", url, "--set", "queue_grace_s=600"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = _json(result)
    assert out["outcome"] == "observations_end"
    assert out["overrides"] == {"queue_grace_s": 600.0}
    assert out["policy"]["queue_grace_s"] == 600.0
    assert out["recorded_policy"]["queue_grace_s"] == 300.0
    assert out["verdict"] is None and out["at"] is None
    assert out["recorded"]["rule"] == "queue_grace"
    assert out["timers"][0]["rule"] == "queue_grace"
    assert out["timers"][0]["left_s"] == pytest.approx(600 - out["end_offset_s"])
    text = runner.invoke(app, args)
    assert "the recorded observations end at t+" in text.output


def test_whatif_shorter_queue_grace_names_the_earlier_time(demo_store):
    url, streams = demo_store
    args = ["whatif", streams["no_capacity"], "--store", url, "--set", "queue_grace_s=200"]
    out = _json(runner.invoke(app, [*args, "--set", "stall_after_s=5000", "--json"]))
    assert out["outcome"] == "earlier"
    assert out["overrides"] == {"queue_grace_s": 200.0, "stall_after_s": 5000.0}
    assert out["verdict"]["rule"] == "queue_grace" and out["verdict"]["failure"] == "no_capacity"
    assert 200 < out["offset_s"] <= 210
    assert out["instead_of_seq"] == out["after_seq"] + 1 < out["recorded"]["evidence"][-1]
    text = runner.invoke(app, args).output
    assert f"at t+{out['offset_s']:.0f} s, after seq {out['after_seq']}" in text


def test_whatif_rejects_unknown_names_and_bad_values(demo_store):
    url, streams = demo_store
    base = ["whatif", streams["no_capacity"], "--store", url]
    result = runner.invoke(app, [*base, "--set", "queue_grace=600"])
    assert result.exit_code == 1 and "unknown policy field" in result.output
    assert "queue_grace_s" in result.output  # the names it knows
    result = runner.invoke(app, [*base, "--set", "queue_grace_s=abc"])
    assert result.exit_code == 1 and "queue_grace_s" in result.output
    result = runner.invoke(app, [*base, "--set", "queue_grace_s"])
    assert result.exit_code == 1 and "NAME=VALUE" in result.output
    result = runner.invoke(app, [*base, "--json"])
    assert result.exit_code == 0 and _json(result)["outcome"] == "same"


# --- timeline ------------------------------------------------------------------------------


def test_timeline_draws_a_run_as_lanes(demo_store, run_stream, tmp_path):
    url, _ = demo_store
    out_file = tmp_path / "run.svg"
    args = ["timeline", run_stream, "--store", url, "--out", str(out_file), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = _json(result)
    assert out["format"] == "svg" and out["out"] == str(out_file)
    assert (out["verdict"], out["ok"]) == ("SUCCEEDED", True)
    lanes = out["lanes"]
    assert [lane["key"] for lane in lanes] == ["attempt-0", "attempt-1", "attempt-2"]
    assert [lane["rule"] for lane in lanes] == ["queue_grace", "unhealthy_worker", "completed"]
    assert lanes[0]["spans"][0]["state"] == "DEPLOYING"
    assert lanes[0]["spans"][1]["state"] == "QUEUED"
    assert {"at_s", "kind", "label"} <= set(lanes[0]["marks"][0])
    svg = out_file.read_text()
    assert svg.startswith("<svg") and 'data-lane="attempt-2"' in svg


def test_timeline_of_an_exported_run_finds_its_job_files(demo_store, run_stream, tmp_path):
    url, _ = demo_store
    streams = [run_stream, *(f"{run_stream}-job{n}" for n in range(3))]
    result = runner.invoke(
        app, ["export", *streams, "--store", url, "--to", f"jsonl:///{tmp_path}/x"]
    )
    assert result.exit_code == 0, result.output
    page = tmp_path / "run.html"
    result = runner.invoke(
        app, ["timeline", str(tmp_path / "x" / f"{run_stream}.jsonl"), "--out", str(page)]
    )
    assert result.exit_code == 0, result.output
    assert "3 lane(s), SUCCEEDED" in result.output
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "STALLED · unhealthy_worker" in html


def test_timeline_needs_an_svg_or_html_file(demo_store, tmp_path):
    url, streams = demo_store
    out_file = tmp_path / "x.png"
    args = ["timeline", streams["success"], "--store", url, "--out", str(out_file)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and ".svg or .html" in result.output


# --- watch ---------------------------------------------------------------------------------


def _partial(url, stream, count, tmp_path, name="partial"):
    """A store holding the first `count` events of `stream` as stream `name`."""
    events = open_store(url).read(stream)[:count]
    target = f"sqlite:///{tmp_path}/partial.db"
    store = open_store(target)
    try:
        store.append(name, [e.model_copy(update={"stream": name}) for e in events], 0)
    finally:
        store.close()
    return target, events


def test_watch_prints_a_finished_job_once_with_its_exit_code(demo_store):
    url, streams = demo_store
    result = runner.invoke(app, ["watch", streams["no_capacity"], "--store", url, "--json"])
    assert result.exit_code == EXIT_CODES["no_capacity"], result.output
    out = json.loads(result.stdout)
    assert out["state"] == "NO_CAPACITY" and out["verdict"]["rule"] == "queue_grace"
    assert out["next_timer"] is None and out["timers"] == []


def test_watch_shows_time_in_state_and_the_next_timer(demo_store, tmp_path):
    url, streams = demo_store
    target, events = _partial(url, streams["no_capacity"], 20, tmp_path)
    now = events[-1].at + 5
    args = ["watch", "partial", "--store", target, "--now", str(now)]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == EXIT_NO_VERDICT, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["status"], out["verdict"]) == ("QUEUED", "IN_QUEUE", None)
    assert out["in_state_s"] == pytest.approx(now - events[0].at)
    assert out["quiet_s"] == pytest.approx(5.0)
    first_queued = next(e for e in events if e.kind == "StatusObserved")
    assert out["next_timer"]["rule"] == "queue_grace"
    assert out["next_timer"]["left_s"] == pytest.approx(300 - (now - first_queued.at))
    text = runner.invoke(app, args).output
    assert "partial: QUEUED for" in text and "next timer: queue grace 300 s:" in text


def test_watch_follow_tails_the_log_until_the_verdict(demo_store, tmp_path):
    url, streams = demo_store
    target, _ = _partial(url, streams["crash_loop"], 10, tmp_path)
    rest = [
        e.model_copy(update={"stream": "partial"})
        for e in open_store(url).read(streams["crash_loop"])[10:]
    ]

    def write():
        store = open_store(target)
        try:
            time.sleep(0.05)  # let the watch print the log as it stands first
            for event in rest:
                time.sleep(0.002)
                store.append("partial", [event], event.seq)
        finally:
            store.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        result = runner.invoke(
            app, ["watch", "partial", "--store", target, "--follow", "--json", "--poll-s", "0.01"]
        )
    finally:
        writer.join()
    assert result.exit_code == EXIT_CODES["stalled"], result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    counts = [line["events"] for line in lines]
    assert counts == sorted(set(counts)) and len(lines) > 2  # one line per new event
    assert lines[0]["verdict"] is None
    assert lines[-1]["verdict"]["rule"] == "unhealthy_worker"
    assert lines[-1]["events"] == 10 + len(rest)
    assert {line["state"] for line in lines} >= {"UNHEALTHY", "STALLED"}


def test_watch_a_run_shows_its_current_attempt(demo_store, run_stream):
    url, _ = demo_store
    result = runner.invoke(app, ["watch", run_stream, "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["kind"], out["state"], out["attempts"]) == ("run", "SUCCEEDED", 3)
    assert out["job_stream"] == f"{run_stream}-job2"
    assert out["job"]["verdict"]["rule"] == "completed"
    text = runner.invoke(app, ["watch", run_stream, "--store", url]).output
    assert f"run {run_stream}: SUCCEEDED, 3 attempt(s)" in text


# --- the store: ls, export, import ------------------------------------------------------------


def test_ls_lists_streams_with_state_and_verdict(demo_store, run_stream):
    url, streams = demo_store
    result = runner.invoke(app, ["ls", "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    out = _json(result)
    assert out["store"] == url
    rows = {row["stream"]: row for row in out["streams"]}
    for scenario, (state, failure, rule) in EXPECTED.items():
        row = rows[streams[scenario]]
        assert (row["kind"], row["state"], row["failure"], row["rule"]) == (
            "job",
            state,
            failure,
            rule,
        )
        assert row["ok"] is (failure is None) and row["events"] > 0
    run = rows[run_stream]
    assert (run["kind"], run["state"], run["ok"], run["attempts"]) == ("run", "SUCCEEDED", True, 3)
    text = runner.invoke(app, ["ls", "--store", url]).output
    assert "NO_CAPACITY" in text and "run" in text


def test_export_then_import_round_trips_streams(demo_store, tmp_path):
    url, streams = demo_store
    names = [streams["success"], streams["failed"]]
    to = f"jsonl:///{tmp_path}/out"
    result = runner.invoke(app, ["export", *names, "--store", url, "--to", to, "--json"])
    assert result.exit_code == 0, result.output
    out = _json(result)
    assert out["from"] == url and out["to"] == to
    assert set(out["copied"]) == set(names) and all(n > 0 for n in out["copied"].values())
    again = _json(runner.invoke(app, ["export", *names, "--store", url, "--to", to, "--json"]))
    assert again["copied"] == dict.fromkeys(names, 0)  # resumable: nothing left to copy
    fresh = f"sqlite:///{tmp_path}/fresh.db"
    result = runner.invoke(app, ["import", to, names[0], "--store", fresh, "--json"])
    assert result.exit_code == 0, result.output
    assert _json(result)["copied"] == {names[0]: out["copied"][names[0]]}
    jsonl_file = next((tmp_path / "out").glob("*failed*.jsonl"))
    result = runner.invoke(app, ["import", str(jsonl_file), "--store", fresh])
    assert result.exit_code == 0 and f"{names[1]}: " in result.output
    listed = _json(runner.invoke(app, ["ls", "--store", fresh, "--json"]))
    assert sorted(row["stream"] for row in listed["streams"]) == sorted(names)


def test_export_of_a_missing_stream_is_a_usage_error(demo_store, tmp_path):
    url, _ = demo_store
    result = runner.invoke(app, ["export", "nope", "--store", url, "--to", f"jsonl:///{tmp_path}"])
    assert result.exit_code == 1 and "no such stream" in result.output


# --- sweep -----------------------------------------------------------------------------------


def test_sweep_dry_run_then_sweep_against_the_simulator(tmp_path):
    from flashfsm.adapters.simulator import Simulator

    with Simulator(speed=0) as sim:
        idle = sim.add_endpoint("flash-idle-1")
        kept = sim.add_endpoint("flash-keep-2")
        sim.add_endpoint("other-3")  # not a flash endpoint: never swept
        env = {**sim.env(), "FLASHFSM_STORE": f"sqlite:///{tmp_path}/sweep.db"}
        args = ["sweep", "--protect", "flash-keep-2", "--json"]
        result = runner.invoke(app, [*args, "--dry-run"], env=env)
        assert result.exit_code == 0, result.output
        out = _json(result)
        assert out["dry_run"] is True and out["ok"] is True
        assert out["would_delete"] == [idle] and out["deleted"] == []
        assert kept not in out["seen_idle"]
        out = _json(runner.invoke(app, args, env=env))
        assert out["deleted"] == [idle] and out["dry_run"] is False
        listed = _json(runner.invoke(app, ["ls", "--json"], env=env))
        assert [row["kind"] for row in listed["streams"]] == ["sweeper"]


def test_sweep_without_a_key_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    result = runner.invoke(app, ["sweep", "--store", f"sqlite:///{tmp_path}/s.db"])
    assert result.exit_code == 1 and "RUNPOD_API_KEY" in result.output
