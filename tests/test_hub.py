"""The Hugging Face readers against the simulator's Hub, through the real huggingface_hub."""

from __future__ import annotations

import json
import stat
import tracemalloc

import pytest

from flashfsm.adapters.hub import (
    HubFileTooLarge,
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


def test_a_50_mb_heartbeat_is_refused_without_being_downloaded(sim, tmp_path):
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", b'{"stage": "boot", "pad": "' + b"x" * 50_000_000)
    read = make_hf_heartbeat_reader(REPO, PREFIX, endpoint=sim.url, cache_dir=tmp_path / "c")
    tracemalloc.start()
    try:
        with pytest.raises(HubFileTooLarge):
            read(force=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak  # the 50 MB body never entered this process
    text = make_hf_text_reader(
        REPO, f"{PREFIX}/heartbeat.json", endpoint=sim.url, cache_dir=tmp_path
    )
    assert text(force=True) is None  # a text reader reads an oversized file as nothing


def test_a_read_leaves_no_file_behind_and_its_cache_dir_is_private(sim, tmp_path):
    cache = tmp_path / "cache"
    sim.hub.put(REPO, f"{PREFIX}/heartbeat.json", json.dumps({"stage": "boot", "step": 1}))
    sim.hub.put(REPO, f"{PREFIX}/console_sft.txt", "worker log with a secret in it")
    read = make_hf_heartbeat_reader(REPO, PREFIX, endpoint=sim.url, cache_dir=cache)
    assert read(force=True) == {"stage": "boot", "step": 1}
    logs = make_hf_failure_detail_reader(REPO, PREFIX, "sft", endpoint=sim.url, cache_dir=cache)
    assert "secret" in (logs(force=True) or "")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert [p for p in cache.rglob("*")] == []  # nothing of the worker's is left


def test_a_file_over_a_readers_cap_reads_as_nothing(sim, tmp_path):
    sim.hub.put(REPO, "big.txt", "y" * 5000)
    read = make_hf_text_reader(
        REPO, "big.txt", endpoint=sim.url, cache_dir=tmp_path, max_bytes=4999
    )
    assert read(force=True) is None
    ok = make_hf_text_reader(REPO, "big.txt", endpoint=sim.url, cache_dir=tmp_path, max_bytes=5000)
    assert ok(force=True) == "y" * 5000
