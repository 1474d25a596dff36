"""The Hugging Face readers against the simulator's Hub, through the real huggingface_hub."""

from __future__ import annotations

import json

import pytest

from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
    make_hf_text_reader,
)
from flashfsm.adapters.simulator import Simulator
from flashfsm.errors import TransientReadError

REPO = "team/runs"
PREFIX = heartbeat_prefix("sft", "run-7", 3)


class Tick:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sim(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    with Simulator(speed=0) as sim:
        yield sim


def test_the_prefix_is_phase_run_and_seed():
    assert PREFIX == "sft/run-7/seed3"


def test_the_heartbeat_reader_reads_the_latest_file_and_none_before_it_exists(sim, tmp_path):
    tick = Tick()
    read = make_hf_heartbeat_reader(
        REPO, PREFIX, min_interval_s=30, clock=tick, endpoint=sim.url, cache_dir=tmp_path
    )
    assert read() is None  # not written yet: no error, just nothing
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", json.dumps({"stage": "boot", "step": 1}))
    tick.now += 31
    assert read() == {"stage": "boot", "step": 1}
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", json.dumps({"stage": "train", "step": 2}))
    tick.now += 5
    assert read() is None  # rate-limited: 5 s < 30 s since the last download
    assert read(force=True) == {"stage": "train", "step": 2}  # force bypasses the gate


def test_a_rate_limited_reader_makes_no_request(sim, tmp_path):
    tick = Tick()
    read = make_hf_text_reader(REPO, "a.txt", 45, clock=tick, endpoint=sim.url, cache_dir=tmp_path)
    sim.hub.put(REPO, "a.txt", "hello")
    assert read() == "hello"
    before = len(sim.requests_for("hub_resolve"))
    for _ in range(5):
        tick.now += 1
        assert read() is None
    assert len(sim.requests_for("hub_resolve")) == before


@pytest.mark.parametrize("fault", [500, 503, 429, "reset", "malformed", 404, 401, 403])
def test_a_text_reader_never_raises_whatever_the_hub_does(sim, tmp_path, fault):
    sim.hub.put(REPO, "a.txt", "hello")
    read = make_hf_text_reader(REPO, "a.txt", endpoint=sim.url, cache_dir=tmp_path)
    sim.add_fault("hub_resolve", fault, times=None)
    assert read(force=True) is None
    failure = make_hf_failure_detail_reader(
        REPO, PREFIX, "sft", endpoint=sim.url, cache_dir=tmp_path
    )
    assert failure(force=True) is None


@pytest.mark.parametrize("fault", ["malformed", 404, 401, 403])
def test_the_heartbeat_reader_reads_a_hub_that_refuses_as_nothing(sim, tmp_path, fault):
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", "{not json")
    read = make_hf_heartbeat_reader(REPO, PREFIX, endpoint=sim.url, cache_dir=tmp_path)
    assert read(force=True) is None  # a file that is not JSON reads as nothing
    sim.add_fault("hub_resolve", fault, times=None)
    assert read(force=True) is None


@pytest.mark.parametrize(
    ("fault", "code"), [(500, 500), (502, 502), (503, 503), (429, 429), ("reset", None)]
)
def test_the_heartbeat_reader_raises_transient_read_error_on_what_a_retry_may_fix(
    sim, tmp_path, fault, code
):
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", json.dumps({"stage": "train", "step": 2}))
    read = make_hf_heartbeat_reader(REPO, PREFIX, endpoint=sim.url, cache_dir=tmp_path)
    sim.add_fault("hub_resolve", fault, times=1)
    with pytest.raises(TransientReadError) as caught:
        read(force=True)
    assert caught.value.status_code == code
    assert "heartbeat.json" in str(caught.value)
    assert read(force=True) == {"stage": "train", "step": 2}  # the next try reads it


def test_a_heartbeat_that_is_not_an_object_reads_as_nothing(sim, tmp_path):
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", "[1, 2]")
    read = make_hf_heartbeat_reader(REPO, PREFIX, endpoint=sim.url, cache_dir=tmp_path)
    assert read(force=True) is None


def test_the_failure_reader_joins_the_tails_of_both_artifacts(sim, tmp_path):
    read = make_hf_failure_detail_reader(REPO, PREFIX, "sft", endpoint=sim.url, cache_dir=tmp_path)
    assert read(force=True) is None
    sim.hub.put(REPO, f"{PREFIX}/error_sft.txt", "x" * 5000 + "ValueError: boom")
    sim.hub.put(REPO, f"{PREFIX}/console_sft.txt", "loading model\nstep 3")
    text = read(force=True)
    assert text is not None
    assert text.startswith("--- error_sft.txt ---\n") and "ValueError: boom" in text
    assert "--- console_sft.txt ---\nloading model\nstep 3" in text
    assert len(text.split("--- console_sft.txt ---")[0]) < 4100  # the error's tail only


def test_an_empty_repo_name_reads_nothing_without_a_request(sim, tmp_path):
    read = make_hf_text_reader("", "a.txt", endpoint=sim.url, cache_dir=tmp_path)
    assert read(force=True) is None
    assert sim.requests_for("hub_resolve") == []


def test_the_token_is_sent_but_never_returned_or_logged(sim, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HF_TOKEN", "hf_planted_secret_token_123")
    caplog.set_level("DEBUG")
    sim.add_fault("hub_resolve", 500, times=None)
    read = make_hf_heartbeat_reader(REPO, PREFIX, endpoint=sim.url, cache_dir=tmp_path)
    with pytest.raises(TransientReadError) as caught:
        read(force=True)
    assert "hf_planted_secret_token_123" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    text = make_hf_text_reader(REPO, "a.txt", endpoint=sim.url, cache_dir=tmp_path)
    assert text(force=True) is None
    assert "hf_planted_secret_token_123" not in caplog.text
