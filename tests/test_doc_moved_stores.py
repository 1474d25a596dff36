"""What docs/stores.md showed as runnable examples, kept as tests: a snapshot of another fold
version in a SQLite store is ignored and the stream replayed in full, and a rebuilt one is
read; a job stream of the example logs copied into a `jsonl:` directory, resumably, replays
to the verdict it holds."""

from __future__ import annotations

from pathlib import Path

from flashfsm import copy_streams, example_logs, read_jsonl_file, replay
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.urls import path_url
from flashfsm.fsm.snapshot import FOLD_VERSION, encode_snapshot
from flashfsm.writer import JOB, Replay, perform

STREAM = "job-walk-s0-a0"


def test_a_snapshot_of_another_version_is_ignored_and_a_rebuilt_one_read(tmp_path: Path) -> None:
    log = read_jsonl_file(example_logs() / f"{STREAM}.jsonl")
    with SqliteStore(tmp_path / "events.db") as store:
        store.append(STREAM, log, 0)
        at = len(log) - 2
        store.save_snapshot(STREAM, at, FOLD_VERSION + 1, b"written by another version")
        request = Replay(STREAM, JOB)
        assert perform(store, request).snapshot() == replay(log).snapshot()
        assert request.loaded == -1  # ignored (a warning), replayed in full
        body = encode_snapshot(replay(log[: at + 1]), STREAM)
        store.save_snapshot(STREAM, at, FOLD_VERSION, body)  # rebuilt
        assert perform(store, request).snapshot() == replay(log).snapshot()
        assert request.loaded == at  # from the snapshot, then one event


def test_a_stream_copied_into_a_jsonl_directory_resumes_and_replays(tmp_path: Path) -> None:
    source, incident = path_url("jsonl", example_logs()), path_url("jsonl", tmp_path / "incident")
    copied = copy_streams(source, incident, [STREAM])
    assert copy_streams(source, incident, [STREAM]) == {STREAM: 0}  # resumable
    events = read_jsonl_file(tmp_path / "incident" / f"{STREAM}.jsonl")
    assert copied == {STREAM: len(events)}
    assert replay(events).verdict.rule == "queue_grace"
