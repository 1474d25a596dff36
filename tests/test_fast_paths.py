"""The replay and commit fast paths agree with the plain ones they stand in for.

Chunked decoding (`decode_many`, `iter_read`), the collector pause, the JSONL writer's index
primed by a whole read, SQLite's one-statement group commit and the id encoder are
optimizations: each must give exactly what the straightforward path gives, errors included.
"""

from __future__ import annotations

import gc
import json
import sqlite3

import pytest

from flashfsm import ids
from flashfsm.adapters.jsonl import JsonlStore
from flashfsm.adapters.memory import MemoryStore
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.simulator.serve import queue_fleet
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.events.codec import CHUNK, decode_many, encode, gc_paused
from flashfsm.events.errors import (
    ConcurrencyError,
    CorruptLogError,
    DuplicateEventError,
    EventDecodeError,
)
from flashfsm.events.store import append_many, first_misplaced, iter_events
from flashfsm.fsm.job import replay
from flashfsm.ids import _ALPHABET, new_id
from tests.store_support import (
    PG_ENV,
    make_backend,
    make_event,
    make_events,
    postgres_dsn,
    run_cleanups,
)

MANY = 2 * CHUNK + 7  # more than two chunks, not a multiple of one


def _stores(tmp_path):
    return {
        "memory": MemoryStore(),
        "jsonl": JsonlStore(tmp_path / "jsonl", fsync=False),
        "sqlite": SqliteStore(tmp_path / "events.db", durable=False),
    }


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite"])
def test_iter_events_yields_what_read_returns_for_every_after(tmp_path, kind):
    store = _stores(tmp_path)[kind]
    events = make_events("job-1", 0, MANY)
    store.append("job-1", events, 0)
    for after in (None, -1, 0, CHUNK - 1, CHUNK, MANY - 2, MANY - 1, MANY + 5):
        assert list(iter_events(store, "job-1", after)) == store.read("job-1", after)
    assert list(iter_events(store, "nothing")) == []
    assert replay(iter_events(store, "job-1")).next_seq == MANY


def test_decode_many_yields_every_event_before_a_bad_line_then_raises():
    lines = [encode(e) for e in make_events("job-1", 0, MANY)]
    bad = CHUNK + 3
    lines[bad] = b'{"kind": "HeartbeatObserved", "v": 1}'
    got = []
    with pytest.raises(EventDecodeError):
        for event in decode_many(lines):
            got.append(event)
    assert [e.seq for e in got] == list(range(bad))


def test_the_collector_pause_restores_the_collectors_state():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a program that turned it off keeps it off
    finally:
        gc.enable()


def test_first_misplaced_finds_the_first_event_out_of_place():
    events = make_events("job-1", 0, 5)
    assert first_misplaced(events, range(5), "job-1") is None
    assert first_misplaced(events, [0, 1, 2, 4, 5], "job-1") == 3
    assert first_misplaced(events, range(5), "job-2") == 0
    assert first_misplaced([], [], "job-1") is None


def test_jsonl_iter_read_names_a_corrupt_line_after_yielding_the_good_ones(tmp_path):
    store = JsonlStore(tmp_path / "log", fsync=False)
    store.append("job-1", make_events("job-1", 0, MANY), 0)
    path = store.path_for("job-1")
    lines = path.read_bytes().split(b"\n")
    bad = CHUNK + 1
    lines[bad] = lines[bad][:-5] + b"#####"
    path.write_bytes(b"\n".join(lines))
    got = []
    with pytest.raises(CorruptLogError) as caught:
        for event in JsonlStore(tmp_path / "log").iter_read("job-1"):
            got.append(event)
    assert caught.value.line == bad + 1
    assert len(got) == CHUNK  # every chunk before the bad one


def test_a_jsonl_index_primed_by_a_read_still_refuses_stale_seqs_and_known_ids(tmp_path):
    writer = JsonlStore(tmp_path / "log", fsync=False)
    events = make_events("job-1", 0, 5)
    writer.append("job-1", events, 0)
    writer.append("job-2", make_events("job-2", 0, 2), 0)
    reader = JsonlStore(tmp_path / "log", fsync=False)
    assert list(reader.iter_read("job-1")) == events  # primes reader's index for job-1
    with pytest.raises(ConcurrencyError):
        reader.append("job-1", [make_event("job-1", 4)], 4)
    with pytest.raises(DuplicateEventError):
        reader.append("job-1", [events[2].model_copy(update={"seq": 5})], 5)
    job2 = writer.read("job-2")
    with pytest.raises(DuplicateEventError):  # ids of files the read did not cover, too
        reader.append("job-1", [job2[0].model_copy(update={"stream": "job-1", "seq": 5})], 5)
    # Another writer appends after the read: the primed index is stale and is re-scanned.
    writer.append("job-1", [make_event("job-1", 5)], 5)
    with pytest.raises(ConcurrencyError):
        reader.append("job-1", [make_event("job-1", 5)], 5)
    reader.append("job-1", [make_event("job-1", 6)], 6)
    assert [e.seq for e in writer.read("job-1")] == list(range(7))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_group_commit_matches_appending_the_batches_one_by_one(tmp_path, kind):
    if kind == "postgres" and postgres_dsn() is None:
        pytest.skip(f"{PG_ENV} not set")
    cleanups: list = []
    try:
        _group_commit_matches_one_by_one(make_backend(kind, tmp_path, cleanups).open())
    finally:
        run_cleanups(cleanups)


def _group_commit_matches_one_by_one(store) -> None:
    store.append("b", make_events("b", 0, 1), 0)
    taken = make_event("z", 0)
    store.append("z", [taken], 0)
    a = make_events("a", 0, 4)

    def one_by_one(*args):
        raise AssertionError("a group without a clash took the batch-by-batch path")

    store._append_in = one_by_one  # (the group's fast path decides every batch itself)
    outcomes = append_many(
        store,
        [
            ("a", a[:2], 0),
            ("b", make_events("b", 0, 1, tag="stale"), 0),  # stale
            ("a", a[2:], 2),  # the same stream again, after its first batch
            ("c", [], 0),  # empty
            ("d", make_events("d", 0, 2), 0),
            ("a", make_events("a", 9, 1), 9),  # a gap
        ],
    )
    assert outcomes[0] is None and outcomes[2] is None and outcomes[3] is None
    assert outcomes[4] is None
    assert isinstance(outcomes[1], ConcurrencyError)
    assert isinstance(outcomes[5], ConcurrencyError)
    assert store.read("a") == a
    assert [len(store.read(s)) for s in "bcd"] == [1, 0, 2]
    del store._append_in
    # A batch whose id is already stored fails alone; the others of its group land.
    clash = taken.model_copy(update={"stream": "e", "seq": 0})
    outcomes = append_many(
        store,
        [("f", make_events("f", 0, 1), 0), ("e", [clash], 0), ("g", make_events("g", 0, 2), 0)],
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], DuplicateEventError)
    assert [len(store.read(s)) for s in "efg"] == [0, 1, 2]
    store.close()


def test_sqlite_iter_read_returns_its_connection_when_closed_early(tmp_path):
    store = SqliteStore(tmp_path / "events.db", durable=False)
    store.append("job-1", make_events("job-1", 0, MANY), 0)
    events = store.iter_read("job-1")
    next(events)
    events.close()
    store.append("job-1", [make_event("job-1", MANY)], MANY)  # no lock left behind
    assert len(store.read("job-1")) == MANY + 1
    with sqlite3.connect(tmp_path / "events.db") as conn:
        conn.execute("UPDATE events SET body = x'7b6e6f7065' WHERE seq = ?", (CHUNK + 2,))
    with pytest.raises(CorruptLogError, match=f"seq {CHUNK + 2}"):
        list(store.iter_read("job-1"))
    store.close()


def test_an_id_spells_its_milliseconds_in_crockford_base32(monkeypatch):
    monkeypatch.setattr(ids, "_last", (-1, 0))  # a fresh sequence, restored afterwards
    at = 1_234_567.891
    id_ = new_id(at)
    value = 0
    for char in id_:
        value = value * 32 + _ALPHABET.index(char)
    assert value >> 80 == int(at * 1000)
    assert len(id_) == 26 and value < 1 << 128


def test_the_simulator_can_start_with_a_fleet_of_queued_jobs():
    with Simulator(speed=0) as sim:
        lines = queue_fleet(sim, 5, 2, "training")
        jobs = [json.loads(line) for line in lines]
        assert len({j["endpoint_id"] for j in jobs}) == 3
        assert all(sim.job(j["job_id"]).status == "IN_QUEUE" for j in jobs)
