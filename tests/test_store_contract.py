"""The event-store contract, written once and run against every backend.

Modelled on the eventsourcing library's recorder tests: one test case, parametrized over
memory, SQLite, JSONL and Postgres (the last only when FLASHFSM_TEST_POSTGRES_DSN names a
server; each test gets its own table). Backend-specific behaviour (JSONL torn lines and
corruption, file modes, URLs) follows the contract class.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import shutil
import sqlite3
import stat
import threading
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from flashfsm.adapters.jsonl import JsonlStore, TornLineWarning, read_jsonl_file
from flashfsm.adapters.memory import MemoryStore
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import (
    copy_streams,
    default_store_url,
    open_store,
    path_url,
    url_path,
)
from flashfsm.events.codec import encode, encode_sealed
from flashfsm.events.errors import ConcurrencyError, CorruptLogError, DuplicateEventError
from flashfsm.events.models import Event
from flashfsm.events.store import EventStore, append_many
from tests.store_support import (
    DURABLE,
    KINDS,
    PG_ENV,
    Backend,
    append_with_retry,
    delayed_writer_process,
    make_backend,
    make_event,
    make_events,
    postgres_dsn,
    run_cleanups,
    writer_process,
)

NO_POSTGRES = f"{PG_ENV} not set"


def _kind_param(kind: str):
    if kind != "postgres":
        return pytest.param(kind, id=kind)
    return pytest.param(
        kind,
        id=kind,
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES),
        ],
    )


def _available_kinds() -> list[str]:
    return [k for k in KINDS if k != "postgres" or postgres_dsn() is not None]


@pytest.fixture
def cleanups():
    pending: list = []
    yield pending
    run_cleanups(pending)


@pytest.fixture(params=[_kind_param(k) for k in KINDS])
def backend(request, tmp_path, cleanups) -> Backend:
    """An empty store location of each kind."""
    return make_backend(request.param, tmp_path, cleanups)


@pytest.fixture(params=[_kind_param(k) for k in DURABLE])
def durable_backend(request, tmp_path, cleanups) -> Backend:
    """An empty store location of each kind that outlives its store objects."""
    return make_backend(request.param, tmp_path, cleanups)


@pytest.fixture
def store(backend) -> EventStore:
    return backend.open()


def _ids(events: list[Event]) -> list[str]:
    return [e.id for e in events]


def _seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


def _spawn():
    return multiprocessing.get_context("spawn")


def _follow_into(store: EventStore, stream: str, after: int | None, until_seq: int):
    """Consume `store.follow` in a daemon thread; (receive time, event) pairs land in a queue."""
    received: queue.Queue = queue.Queue()

    def run() -> None:
        try:
            for event in store.follow(stream, after):
                received.put((time.time(), event))
                if event.seq >= until_seq:
                    return
        except Exception as exc:  # surfaced by the test through the queue
            received.put((time.time(), exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return received, thread


def _next(received: queue.Queue, timeout: float = 10.0) -> tuple[float, Event]:
    at, item = received.get(timeout=timeout)
    if isinstance(item, Exception):
        raise item
    return at, item


class TestStoreContract:
    """What every `EventStore` guarantees."""

    def test_an_empty_store_has_no_streams_and_reads_empty(self, store):
        assert store.streams() == []
        assert store.read("nothing") == []
        assert store.read("nothing", after=3) == []

    def test_appended_events_read_back_equal_and_in_seq_order(self, store):
        first = make_events("job-1", 0, 3)
        second = make_events("job-1", 3, 2)
        store.append("job-1", first, 0)
        store.append("job-1", second, 3)
        got = store.read("job-1")
        assert got == first + second
        assert _seqs(got) == [0, 1, 2, 3, 4]
        assert [encode(e) for e in got] == [encode(e) for e in first + second]

    def test_an_empty_batch_changes_nothing(self, store):
        store.append("job-1", [], 0)
        assert store.streams() == []

    def test_a_stale_expected_seq_raises_and_writes_nothing(self, store):
        store.append("job-1", make_events("job-1", 0, 2), 0)
        for expected in (0, 1, 3):
            with pytest.raises(ConcurrencyError) as caught:
                store.append("job-1", make_events("job-1", expected, 1), expected)
            assert caught.value.expected_seq == expected
            assert caught.value.actual_seq == 2
        with pytest.raises(ConcurrencyError):
            store.append("new-job", make_events("new-job", 1, 1), 1)
        assert _seqs(store.read("job-1")) == [0, 1]
        assert store.streams() == ["job-1"]

    def test_a_batch_with_a_duplicate_id_inside_leaves_nothing_behind(self, store):
        batch = make_events("job-1", 0, 3)
        batch[2] = batch[2].model_copy(update={"id": batch[0].id})
        with pytest.raises(DuplicateEventError):
            store.append("job-1", batch, 0)
        assert store.read("job-1") == []
        assert store.streams() == []

    def test_a_batch_with_a_bad_seq_or_stream_leaves_nothing_behind(self, store):
        store.append("job-1", make_events("job-1", 0, 1), 0)
        gap = [make_event("job-1", 1), make_event("job-1", 3)]
        with pytest.raises(ValueError, match="without a gap"):
            store.append("job-1", gap, 1)
        foreign = [make_event("job-1", 1), make_event("job-2", 2)]
        with pytest.raises(ValueError, match="belongs to stream"):
            store.append("job-1", foreign, 1)
        assert _seqs(store.read("job-1")) == [0]
        assert store.streams() == ["job-1"]

    def test_a_batch_clashing_with_a_stored_id_leaves_nothing_behind(self, store):
        stored = make_events("job-1", 0, 2)
        store.append("job-1", stored, 0)
        batch = make_events("job-2", 0, 3)
        batch[1] = batch[1].model_copy(update={"id": stored[1].id})
        with pytest.raises(DuplicateEventError) as caught:
            store.append("job-2", batch, 0)
        assert caught.value.event_id == stored[1].id
        assert store.read("job-2") == []
        assert store.streams() == ["job-1"]
        store.append("job-2", make_events("job-2", 0, 1), 0)  # the stream is still usable

    def test_an_id_is_unique_across_streams_and_within_one(self, store):
        event = make_event("job-1", 0)
        store.append("job-1", [event], 0)
        with pytest.raises(DuplicateEventError):
            store.append("job-2", [event.model_copy(update={"stream": "job-2"})], 0)
        with pytest.raises(DuplicateEventError):
            store.append("job-1", [event.model_copy(update={"seq": 1})], 1)
        assert store.read("job-1") == [event]
        assert store.read("job-2") == []

    def test_a_group_commit_lands_every_good_batch_and_fails_only_the_bad_one(self, store):
        store.append("b", make_events("b", 0, 1), 0)
        outcomes = append_many(
            store,
            [
                ("a", make_events("a", 0, 2), 0),
                ("b", make_events("b", 0, 1, tag="stale"), 0),  # stale: b already has seq 0
                ("c", make_events("c", 0, 3), 0),
            ],
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], ConcurrencyError)
        assert [len(store.read(s)) for s in "abc"] == [2, 1, 3]

    def test_read_after_a_seq_returns_only_later_events(self, store):
        events = make_events("job-1", 0, 5)
        store.append("job-1", events, 0)
        assert store.read("job-1", None) == events
        assert store.read("job-1", -1) == events
        assert store.read("job-1", -7) == events
        assert store.read("job-1", 0) == events[1:]
        assert store.read("job-1", 2) == events[3:]
        assert store.read("job-1", 4) == []
        assert store.read("job-1", 40) == []

    def test_streams_lists_every_stream_once_sorted(self, store):
        names = [
            "job-b",
            "job-a",
            "runs/7/attempt 2",
            "ünïcødé-job",
            "50%off",
            "..",
            "x" * 200,
            "Y" + "/" * 199,
        ]
        for name in names:
            store.append(name, make_events(name, 0, 2), 0)
        store.append("job-a", make_events("job-a", 2, 1), 2)
        assert store.streams() == sorted(names)
        for name in names:
            assert _seqs(store.read(name)) == ([0, 1, 2] if name == "job-a" else [0, 1])

    def test_a_reopened_store_sees_everything(self, durable_backend):
        backend = durable_backend
        first = backend.open()
        a = make_events("job-a", 0, 3)
        b = make_events("job/b", 0, 2)
        first.append("job-a", a, 0)
        first.append("job/b", b, 0)
        first.close()
        second = backend.open()
        assert second.streams() == ["job-a", "job/b"]
        assert second.read("job-a") == a
        assert second.read("job/b") == b
        second.append("job-a", make_events("job-a", 3, 1), 3)
        with pytest.raises(ConcurrencyError):
            second.append("job-a", make_events("job-a", 3, 1), 3)
        with pytest.raises(DuplicateEventError):
            second.append("job-c", [b[0].model_copy(update={"stream": "job-c"})], 0)

    def test_two_store_objects_on_one_location_see_each_other(self, backend):
        one, two = backend.open(), backend.open()
        one.append("job-1", make_events("job-1", 0, 2), 0)
        with pytest.raises(ConcurrencyError):
            two.append("job-1", make_events("job-1", 0, 1), 0)
        two.append("job-1", make_events("job-1", 2, 1), 2)
        assert _seqs(one.read("job-1")) == [0, 1, 2]

    def test_concurrent_thread_writers_lose_nothing_and_never_interleave(self, backend):
        threads_n, each = 4, 8
        stores = [backend.open() for _ in range(threads_n)]
        start = threading.Barrier(threads_n)
        written: dict[int, list[str]] = {}
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                start.wait(10)
                written[i] = append_with_retry(stores[i], "race", each, tag=f"t{i}")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        log = backend.open().read("race")
        assert _seqs(log) == list(range(threads_n * each))
        assert sorted(_ids(log)) == sorted(i for ids in written.values() for i in ids)

    def test_concurrent_process_writers_lose_nothing_and_never_interleave(self, durable_backend):
        backend = durable_backend
        procs_n, each = 3, 6
        ctx = _spawn()
        go, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=writer_process, args=(backend.url, "race", each, f"p{i}", go, out))
            for i in range(procs_n)
        ]
        for proc in procs:
            proc.start()
        go.set()
        results = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(30)
            assert proc.exitcode == 0
        log = backend.open().read("race")
        assert _seqs(log) == list(range(procs_n * each))
        assert sorted(_ids(log)) == sorted(i for _, ids in results for i in ids)

    def test_follow_replays_then_sees_a_thread_append_within_one_second(self, backend):
        writer, follower = backend.open(), backend.open()
        writer.append("job-1", make_events("job-1", 0, 2), 0)
        received, thread = _follow_into(follower, "job-1", None, until_seq=3)
        assert _seqs([_next(received)[1], _next(received)[1]]) == [0, 1]
        for seq in (2, 3):
            time.sleep(0.3)
            event = make_event("job-1", seq)
            writer.append("job-1", [event], seq)
            got_at, got = _next(received, timeout=5)
            assert got == event
            assert got_at - event.at < 1.0
        thread.join(5)
        assert not thread.is_alive()

    def test_follow_starts_after_the_given_seq(self, store):
        store.append("job-1", make_events("job-1", 0, 4), 0)
        follow = store.follow("job-1", after=1, poll_s=0.05)
        assert [next(follow).seq, next(follow).seq] == [2, 3]
        follow.close()

    def test_follow_sees_another_process_append_within_one_second(self, durable_backend):
        backend = durable_backend
        follower = backend.open()
        follower.append("job-1", make_events("job-1", 0, 1), 0)
        received, thread = _follow_into(follower, "job-1", 0, until_seq=1)
        ctx = _spawn()
        ready = ctx.Event()
        proc = ctx.Process(
            target=delayed_writer_process, args=(backend.url, "job-1", 1, ready, 0.3)
        )
        proc.start()
        try:
            assert ready.wait(30)
            got_at, got = _next(received, timeout=30)
            assert got.seq == 1
            assert got_at - got.at < 1.0
        finally:
            proc.join(30)
        assert proc.exitcode == 0
        thread.join(5)

    def test_copy_streams_to_every_backend_keeps_streams_seqs_and_ids(
        self, backend, tmp_path, cleanups
    ):
        src = backend.open()
        logs = {
            "job-a": make_events("job-a", 0, 5),
            "job/b": make_events("job/b", 0, 1),
            "ünï c": make_events("ünï c", 0, 3),
        }
        for name, events in logs.items():
            src.append(name, events, 0)
        for kind in _available_kinds():
            dst = make_backend(kind, tmp_path, cleanups).open()
            copied = copy_streams(src, dst, batch_size=2)
            assert copied == {name: len(events) for name, events in logs.items()}
            assert dst.streams() == sorted(logs)
            for name, events in logs.items():
                assert dst.read(name) == events, (backend.kind, kind, name)
            # resumable and idempotent: nothing left to copy, then only the new tail
            assert copy_streams(src, dst) == dict.fromkeys(logs, 0)
            have = len(logs["job-a"])
            tail = make_events("job-a", have, 2)
            src.append("job-a", tail, have)
            assert copy_streams(src, dst, ["job-a"]) == {"job-a": 2}
            logs["job-a"] = logs["job-a"] + tail
            assert dst.read("job-a") == logs["job-a"]

    def test_copy_streams_refuses_a_diverged_destination(self, backend, tmp_path, cleanups):
        src = backend.open()
        src.append("job-a", make_events("job-a", 0, 2), 0)
        dst = make_backend("memory", tmp_path, cleanups).open()
        dst.append("job-a", make_events("job-a", 0, 1), 0)
        with pytest.raises(ValueError, match="diverged"):
            copy_streams(src, dst)

    def test_the_store_matches_a_dict_model(self, backend):
        shared = {"store": backend.open()}

        class Machine(StoreVersusModel):
            location = backend
            current = shared

        run_state_machine_as_test(Machine, settings=settings(settings(), stateful_step_count=20))


# -- the dict model --------------------------------------------------------------------------

STREAMS = st.sampled_from(["job-a", "job/b", "ünï c", "50%"])
_examples = itertools.count()


class StoreVersusModel(RuleBasedStateMachine):
    """Every store answer equals a plain dict's: stream -> list of events.

    The examples share one store location (a new one per example would cost more than the
    example); each example works in streams of its own, named with a fresh prefix.
    """

    location: Backend
    current: dict[str, EventStore]

    @initialize()
    def start(self) -> None:
        self.prefix = f"ex{next(_examples)}:"
        self.model: dict[str, list[Event]] = {}
        self.clock = 1_700_000_000.0

    @property
    def store(self) -> EventStore:
        return self.current["store"]

    def _stored_ids(self) -> list[str]:
        return sorted(e.id for log in self.model.values() for e in log)

    @rule(
        stream=STREAMS,
        n=st.integers(1, 3),
        delta=st.sampled_from([0, 0, 0, -1, 1]),
        dup=st.sampled_from(["none", "none", "batch", "store"]),
        data=st.data(),
    )
    def append(self, stream: str, n: int, delta: int, dup: str, data) -> None:
        stream = self.prefix + stream
        next_seq = len(self.model.get(stream, []))
        expected = next_seq + delta if next_seq + delta >= 0 else next_seq + 1
        events = []
        for i in range(n):
            self.clock += 1.5
            events.append(make_event(stream, expected + i, self.clock))
        if dup == "batch" and n > 1:
            events[-1] = events[-1].model_copy(update={"id": events[0].id})
        elif dup == "store" and self._stored_ids():
            clash = data.draw(st.sampled_from(self._stored_ids()))
            events[-1] = events[-1].model_copy(update={"id": clash})
        else:
            dup = "none"
        if expected != next_seq:
            with pytest.raises(ConcurrencyError):
                self.store.append(stream, events, expected)
        elif dup != "none":
            with pytest.raises(DuplicateEventError):
                self.store.append(stream, events, expected)
        else:
            self.store.append(stream, events, expected)
            self.model.setdefault(stream, []).extend(events)

    @rule(stream=STREAMS, after=st.none() | st.integers(-2, 10))
    def read(self, stream: str, after: int | None) -> None:
        stream = self.prefix + stream
        log = self.model.get(stream, [])
        start = 0 if after is None else max(0, after + 1)
        assert self.store.read(stream, after) == log[start:]

    @rule()
    def streams(self) -> None:
        mine = [s for s in self.store.streams() if s.startswith(self.prefix)]
        assert mine == sorted(s for s, log in self.model.items() if log)

    @precondition(lambda self: self.location.durable)
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.current["store"] = self.location.open()
        for stream, log in self.model.items():
            assert self.store.read(stream) == log


# -- JSONL: torn lines, corruption, the file alone, modes ------------------------------------


def _jsonl_with(tmp_path: Path, stream: str, count: int) -> tuple[JsonlStore, list[Event], Path]:
    store = JsonlStore(tmp_path / "log")
    events = make_events(stream, 0, count)
    store.append(stream, events, 0)
    return store, events, store.path_for(stream)


def test_jsonl_a_torn_last_line_is_ignored_by_a_read_and_cut_only_by_the_next_append(tmp_path):
    _, events, path = _jsonl_with(tmp_path, "job-1", 3)
    good = path.read_bytes()
    torn = encode_sealed(make_event("job-1", 3))
    path.write_bytes(good + torn[: len(torn) // 2])  # the crash hit mid-write
    reopened = JsonlStore(tmp_path / "log")
    for read in (reopened.read, lambda s: list(reopened.iter_read(s))):
        with pytest.warns(TornLineWarning, match="line 4.*never changes the file"):
            assert read("job-1") == events
    assert path.read_bytes() == good + torn[: len(torn) // 2]  # a read cut nothing
    nxt = make_event("job-1", 3)
    cut = f"line 4 was torn .*[(]{len(torn) // 2} bytes, never acknowledged[)]; cut it"
    with pytest.warns(TornLineWarning, match=cut):
        reopened.append("job-1", [nxt], 3)
    assert path.read_bytes() == good + encode_sealed(nxt) + b"\n"
    assert reopened.read("job-1") == [*events, nxt]


def test_jsonl_a_torn_last_line_is_cut_on_append(tmp_path):
    _, events, path = _jsonl_with(tmp_path, "job-1", 2)
    good = path.read_bytes()
    path.write_bytes(good + b'{"stream":"job-1","seq":2,"id":"01')
    writer = JsonlStore(tmp_path / "log")
    nxt = make_event("job-1", 2)
    with pytest.warns(TornLineWarning, match="line 3"):
        writer.append("job-1", [nxt], 2)
    assert path.read_bytes() == good + encode_sealed(nxt) + b"\n"
    assert JsonlStore(tmp_path / "log").read("job-1") == [*events, nxt]


@pytest.mark.parametrize(
    "last",
    [b"\x00\x00\x00\x00\n", b"{}\n", b"not json\n"],
    ids=["zero-filled", "another object", "not json"],
)
def test_jsonl_an_undecodable_complete_last_line_is_corruption_and_never_cut(tmp_path, last):
    store, _, path = _jsonl_with(tmp_path, "job-1", 2)
    damaged = path.read_bytes() + last
    path.write_bytes(damaged)
    for read in (store.read, lambda s: list(store.iter_read(s))):
        with pytest.raises(CorruptLogError, match="line 3 seq 2") as caught:
            read("job-1")
        assert caught.value.seq == 2 and caught.value.line == 3
    with pytest.raises(CorruptLogError, match="line 3"):
        read_jsonl_file(path)
    writer = JsonlStore(tmp_path / "log")
    with pytest.raises(CorruptLogError, match="line 3"):
        writer.append("job-1", [make_event("job-1", 2)], 2)
    assert path.read_bytes() == damaged  # neither a read nor a refused append cut it


def test_jsonl_a_verdict_whose_newline_was_damaged_is_corruption_not_a_torn_line(tmp_path):
    store, _, path = _jsonl_with(tmp_path, "job-1", 3)
    damaged = path.read_bytes()[:-1] + b"\x0b"  # the last newline, one bit flipped
    path.write_bytes(damaged)
    with pytest.raises(CorruptLogError, match="newline is damaged"):
        store.read("job-1")
    with pytest.raises(CorruptLogError, match="newline is damaged"):
        JsonlStore(tmp_path / "log").append("job-1", [make_event("job-1", 3)], 3)
    assert path.read_bytes() == damaged


def test_jsonl_a_corrupt_middle_line_raises_naming_the_line(tmp_path):
    store, _, path = _jsonl_with(tmp_path, "job-1", 4)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:-5] + b"#####"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptLogError, match="line 2") as caught:
        store.read("job-1")
    assert caught.value.line == 2
    assert str(path) in str(caught.value)
    with pytest.raises(CorruptLogError, match="line 2"):
        read_jsonl_file(path)
    writer = JsonlStore(tmp_path / "log")
    with pytest.raises(CorruptLogError, match="line 2"):
        writer.append("job-1", [make_event("job-1", 4)], 4)
    writer.append("job-2", make_events("job-2", 0, 1), 0)  # other streams carry on
    assert _seqs(writer.read("job-2")) == [0]


def test_jsonl_a_line_out_of_place_raises_naming_the_line(tmp_path):
    store, _, path = _jsonl_with(tmp_path, "job-1", 3)
    lines = path.read_bytes().split(b"\n")
    lines[0], lines[1] = lines[1], lines[0]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptLogError, match="line 1"):
        store.read("job-1")


def test_jsonl_a_stream_file_replays_with_nothing_but_the_file(tmp_path):
    _, events, path = _jsonl_with(tmp_path, "runs/7", 3)
    elsewhere = tmp_path / "post-mortem.jsonl"
    shutil.copyfile(path, elsewhere)
    assert read_jsonl_file(elsewhere) == events
    with open(elsewhere, "ab") as f:
        f.write(b'{"stream":')
    before = elsewhere.read_bytes()
    with pytest.warns(TornLineWarning, match="ignoring"):
        assert read_jsonl_file(elsewhere) == events
    assert elsewhere.read_bytes() == before  # a post-mortem read never modifies the file


def test_jsonl_copy_exports_one_stream_to_one_file(tmp_path):
    src = SqliteStore(tmp_path / "events.db")
    events = make_events("job-1", 0, 4)
    src.append("job-1", events, 0)
    src.append("job-2", make_events("job-2", 0, 1), 0)
    copy_streams(src, path_url("jsonl", tmp_path / "export"), ["job-1"])
    assert sorted(os.listdir(tmp_path / "export")) == [".flashfsm.lock", "job-1.jsonl"]
    assert read_jsonl_file(tmp_path / "export" / "job-1.jsonl") == events


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_jsonl_files_are_owner_only(tmp_path):
    store = JsonlStore(tmp_path / "a" / "b" / "log")
    store.append("job-1", make_events("job-1", 0, 1), 0)
    for directory in ("a", "a/b", "a/b/log"):
        assert _mode(tmp_path / directory) == 0o700, directory
    assert _mode(store.path_for("job-1")) == 0o600
    assert _mode(tmp_path / "a/b/log/.flashfsm.lock") == 0o600


def test_jsonl_long_stream_names_get_a_hashed_file_name_and_read_back(tmp_path):
    store = JsonlStore(tmp_path / "log")
    long_name = "ü/" * 100
    store.append(long_name, make_events(long_name, 0, 2), 0)
    assert len(store.path_for(long_name).name) < 255
    assert store.streams() == [long_name]
    assert _seqs(JsonlStore(tmp_path / "log").read(long_name)) == [0, 1]


def test_sqlite_files_are_owner_only(tmp_path):
    store = SqliteStore(tmp_path / "x" / "y" / "events.db")
    store.append("job-1", make_events("job-1", 0, 1), 0)
    for directory in ("x", "x/y"):
        assert _mode(tmp_path / directory) == 0o700, directory
    for name in ("events.db", "events.db-wal", "events.db-shm"):
        path = tmp_path / "x" / "y" / name
        assert _mode(path) == 0o600, name
    store.close()


def test_sqlite_a_corrupt_body_raises_naming_file_stream_and_seq(tmp_path):
    store = SqliteStore(tmp_path / "events.db")
    store.append("job-1", make_events("job-1", 0, 3), 0)
    with sqlite3.connect(tmp_path / "events.db") as conn:
        conn.execute("UPDATE events SET body = x'7b6e6f7065' WHERE seq = 1")
    with pytest.raises(CorruptLogError, match="seq 1") as caught:
        store.read("job-1")
    assert caught.value.stream == "job-1"
    assert "events.db" in str(caught.value)
    store.close()


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_postgres_follow_is_woken_by_notify_not_by_polling(tmp_path, cleanups):
    from flashfsm.adapters.postgres import PostgresStore

    backend = make_backend("postgres", tmp_path, cleanups)
    table = backend.url.rsplit("table=", 1)[1]
    dsn = postgres_dsn()
    assert dsn is not None
    writer = PostgresStore(dsn, table=table)
    follower = PostgresStore(dsn, table=table, fallback_s=60.0)
    backend.opened += [writer, follower]
    received, thread = _follow_into(follower, "job-1", None, until_seq=0)
    time.sleep(0.3)  # the follower is listening, with a minute between fallback polls
    writer.append("job-2", make_events("job-2", 0, 1), 0)  # another stream: not woken for it
    event = make_event("job-1", 0)
    writer.append("job-1", [event], 0)
    got_at, got = _next(received, timeout=5)
    assert got == event
    assert got_at - event.at < 1.0
    thread.join(5)


# -- URLs --------------------------------------------------------------------------------------


def test_store_urls_name_their_backends(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert isinstance(open_store("memory://"), MemoryStore)
    absolute = open_store(f"sqlite://{tmp_path}/abs.db")
    assert isinstance(absolute, SqliteStore) and absolute.path == tmp_path / "abs.db"
    assert absolute.durable
    absolute.close()
    relative = open_store("sqlite:rel/events.db?durable=false")
    assert isinstance(relative, SqliteStore) and relative.path == tmp_path / "rel/events.db"
    assert not relative.durable
    relative.close()
    logs = open_store("jsonl:logs?fsync=0")
    assert isinstance(logs, JsonlStore) and logs.directory == tmp_path / "logs"
    assert not logs.fsync
    assert url_path("sqlite:////srv/x.db") == Path("/srv/x.db")  # the SQLAlchemy spelling
    assert url_path("sqlite:///srv/with%20space.db") == Path("/srv/with space.db")
    assert url_path(path_url("jsonl", tmp_path / "a b%")) == tmp_path / "a b%"
    with pytest.raises(ValueError, match="local path"):
        open_store("sqlite://relative.db")
    with pytest.raises(ValueError, match="unknown parameter"):
        open_store(f"sqlite://{tmp_path}/p.db?durible=0")
    with pytest.raises(ValueError, match="unknown store URL scheme"):
        open_store("mysql://x")


def test_a_store_url_sets_the_snapshot_interval_and_refuses_a_bad_one(tmp_path):
    every = open_store(f"sqlite://{tmp_path}/a.db?snapshot_every=25")
    off = open_store(f"sqlite://{tmp_path}/b.db?snapshot_every=none")
    default = open_store(f"sqlite://{tmp_path}/c.db")
    assert (every.snapshot_every, off.snapshot_every, default.snapshot_every) == (25, None, 100)
    for store in (every, off, default):
        store.close()
    for bad in ("0", "-5", "2.5", "often", ""):
        with pytest.raises(ValueError, match="snapshot_every"):
            open_store(f"sqlite://{tmp_path}/d.db?snapshot_every={bad}")
    assert not (tmp_path / "d.db").exists()  # refused before anything is created
    with pytest.raises(ValueError, match="snapshot_every must be at least 1"):
        SqliteStore(tmp_path / "e.db", snapshot_every=0)


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_a_postgres_url_sets_the_store_s_own_options(tmp_path, cleanups):
    backend = make_backend("postgres", tmp_path, cleanups)
    store = open_store(f"{backend.url}&snapshot_every=none&idle_in_transaction_s=2.5&pool_size=2")
    backend.opened.append(store)
    assert (store.snapshot_every, store.idle_in_transaction_s) == (None, 2.5)
    with store._pool.connection() as conn:  # the server ends idle transactions at 2.5 s
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("2500ms",)
    for bad in ("idle_in_transaction_s=0", "idle_in_transaction_s=inf", "pool_size=many"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            open_store(f"{backend.url}&{bad}")


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_postgres_urls_open_a_postgres_store(tmp_path, cleanups):
    from flashfsm.adapters.postgres import PostgresStore

    backend = make_backend("postgres", tmp_path, cleanups)
    for url in (backend.url, backend.url.replace("postgresql://", "postgres://", 1)):
        store = open_store(url)
        backend.opened.append(store)
        assert isinstance(store, PostgresStore)
        assert store.table == backend.url.rsplit("table=", 1)[1]


def test_default_store_url_is_the_env_var_else_a_user_sqlite_file(monkeypatch):
    monkeypatch.setenv("FLASHFSM_STORE", "jsonl:///srv/flashfsm")
    assert default_store_url() == "jsonl:///srv/flashfsm"
    monkeypatch.delenv("FLASHFSM_STORE")
    url = default_store_url()
    assert url.startswith("sqlite:///") and url.endswith("/flashfsm/events.db")
    assert url_path(url).is_absolute()


def test_store_protocol_is_implemented_by_every_backend(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for store in (MemoryStore(), SqliteStore(tmp_path / "e.db"), JsonlStore(tmp_path / "j")):
            assert isinstance(store, EventStore)
            store.close()
