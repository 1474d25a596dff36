"""The store contract suite (`StoreContract`), written once and run against every backend.

Modelled on the eventsourcing library's recorder tests, which it ships for third-party
recorders to subclass: a class of `test_*` methods that pytest collects from a subclass
(`class TestMyStore(StoreContract)`) and runs once per test on a fresh store location.

Hooks a subclass gives (only `new_store` is required):

- `new_store()`: a new store object on this test's location. The location is fresh for
  every test (`self.tmp` is a new empty directory, `self.location_id` a new unique name);
  every call opens one more object on it. The suite closes them at the end of the test.
- `capabilities`: the names of the optional capabilities the store declares (a subset of
  `flashfsm.events.store.CAPABILITIES`: `lazy_reads`, `group_commit`, `snapshots`,
  `snapshot_batches`, `bulk_reads`, `leases`). The suite checks the store declares exactly
  these (`check_store`), runs their tests, and skips the tests of the others. It also
  checks the `snapshots` capability's setting, `snapshot_every`, as the store declares it.
- `shared` (default True): whether a second object on one location sees the first's events
  (False for an in-memory store: the suite then uses the one object wherever it would open
  another). `durable` (default True): whether an object opened after the others were
  closed still sees what they wrote.
- `store_url()`: a URL `flashfsm.adapters.stores.open_store` opens in another process
  (the suite's process tests, which spawn it; None, the default, skips them). An outside
  backend's scheme is found there as in any process: by its entry point of the group
  `flashfsm.stores` (`flashfsm.adapters.stores.SCHEMES`).
- `damage(store, stream, seq)`: change the stored bytes of that event behind the store's
  back and return True (the integrity tests then expect `CorruptLogError`); the default
  returns False and skips them.
- `lease_ttl_s` (default 0.3): the shortest lease the store can let expire reliably (the
  lease tests sleep a little longer than that).

Where the suite stands: this module holds the hooks, the per-test location and objects, the
core tests and those of every optional capability but one; the tests of `leases` (the
open-streams index, claims, fencing, heartbeats) are `flashfsm.testing.contract_leases`
(`LeaseContract`, which `StoreContract` inherits: one suite still, and a store's
`leases` declaration still turns them on); the event factories and `raises` are
`flashfsm.testing.factories`, re-exported here.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import random
import shutil
import tempfile
import threading
import time
import unittest
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from flashfsm.adapters.memory import MemoryStore
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.events.codec import encode
from flashfsm.events.errors import ConcurrencyError, CorruptLogError, DuplicateEventError
from flashfsm.events.models import Event
from flashfsm.events.store import (
    EventStore,
    FencedStore,
    append_many,
    capabilities,
    check_store,
)
from flashfsm.testing.contract_leases import LeaseContract
from flashfsm.testing.factories import concluded as concluded
from flashfsm.testing.factories import contract_event as contract_event
from flashfsm.testing.factories import contract_events as contract_events
from flashfsm.testing.factories import raises as raises
from flashfsm.testing.factories import run_concluded as run_concluded
from flashfsm.testing.factories import run_started as run_started
from flashfsm.testing.factories import submitted as submitted

# --- skips and seqs ---------------------------------------------------------------------------


def _skip(reason: str) -> None:
    """Skip the running test (pytest's skip when pytest runs it, else unittest's)."""
    try:
        import pytest
    except ImportError:  # pragma: no cover - run without pytest
        raise unittest.SkipTest(reason) from None
    pytest.skip(reason)


def _seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


# --- process workers (spawned: module-level, picklable arguments) ----------------------------


def _append_with_retry(store: EventStore, stream: str, count: int, *, tag: str) -> list[str]:
    """Append `count` one-event batches, re-reading the stream after each conflict."""
    written: list[str] = []
    for _ in range(count):
        while True:
            next_seq = len(store.read(stream))
            event = contract_event(stream, next_seq, tag=tag)
            try:
                store.append(stream, [event], next_seq)
            except ConcurrencyError:
                continue
            written.append(event.id)
            break
    return written


def _writer_process(url: str, stream: str, count: int, tag: str, go: Any, out: Any) -> None:
    store = open_store(url)
    try:
        go.wait(30)
        out.put((tag, _append_with_retry(store, stream, count, tag=tag)))
    finally:
        store.close()


def _delayed_writer_process(url: str, stream: str, seq: int, ready: Any, delay_s: float) -> None:
    store = open_store(url)
    try:
        ready.set()
        time.sleep(delay_s)
        store.append(stream, [contract_event(stream, seq)], seq)
    finally:
        store.close()


def _awkwardly_named_logs(store: EventStore) -> dict[str, list[Event]]:
    """Three logs appended to `store`, under names with a slash, a space and non-ASCII
    letters: each stream's events by its name."""
    logs = {
        "job-a": contract_events("job-a", 0, 5),
        "job/b": contract_events("job/b", 0, 1),
        "ünï c": contract_events("ünï c", 0, 3),
    }
    for name, events in logs.items():
        store.append(name, events, 0)
    return logs


def _follow_into(
    store: EventStore, stream: str, after: int | None, until_seq: int, *, poll_s: float = 0.05
) -> tuple[queue.Queue[tuple[float, Any]], threading.Thread]:
    """Consume `store.follow` in a daemon thread: (receive time, event) pairs in a queue."""
    received: queue.Queue[tuple[float, Any]] = queue.Queue()

    def run() -> None:
        try:
            for event in store.follow(stream, after, poll_s=poll_s):
                received.put((time.time(), event))
                if event.seq >= until_seq:
                    return
        except Exception as exc:  # surfaced by the test through the queue
            received.put((time.time(), exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return received, thread


def _next(received: queue.Queue[tuple[float, Any]], timeout: float = 10.0) -> tuple[float, Event]:
    at, item = received.get(timeout=timeout)
    if isinstance(item, Exception):
        raise item
    return at, item


# --- the suite ------------------------------------------------------------------------------


class StoreContract(LeaseContract):
    """What every store guarantees (see the module notes for the hooks a subclass gives)."""

    capabilities: ClassVar[frozenset[str] | set[str]] = frozenset()
    shared: ClassVar[bool] = True
    durable: ClassVar[bool] = True
    lease_ttl_s: ClassVar[float] = 0.3

    tmp: Path
    location_id: str

    # -- hooks ---------------------------------------------------------------------------------

    def new_store(self) -> EventStore:
        """A new store object on this test's location (see the module notes)."""
        raise NotImplementedError("a StoreContract subclass says how to open its store")

    def store_url(self) -> str | None:
        """A URL `open_store` opens on this test's location in another process (None:
        the store cannot be shared by processes, and the process tests are skipped)."""
        return None

    def damage(self, store: EventStore, stream: str, seq: int) -> bool:
        """Change the stored bytes of the event `stream`/`seq` behind the store's back
        (True), or say the test cannot (False: the integrity tests are skipped)."""
        return False

    # -- per-test location and objects ---------------------------------------------------------

    def setup_method(self, method: object = None) -> None:
        """A fresh location for the test: an empty directory and a unique name."""
        self.tmp = Path(tempfile.mkdtemp(prefix="flashfsm-contract-"))
        self.location_id = f"t{uuid.uuid4().hex[:16]}"
        self._opened: list[EventStore] = []
        self._cleanups: list[Callable[[], object]] = []

    def teardown_method(self, method: object = None) -> None:
        """Close every store the test opened, run the cleanups, remove the directory."""
        while self._opened:
            with contextlib.suppress(Exception):
                self._opened.pop().close()
        while self._cleanups:
            self._cleanups.pop()()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def on_teardown(self, cleanup: Callable[[], object]) -> None:
        """Run `cleanup` after the test (after its stores are closed; newest first)."""
        self._cleanups.append(cleanup)

    def store(self) -> EventStore:
        """The test's first store object (opened on first use)."""
        if not self._opened:
            self._opened.append(self.new_store())
        return self._opened[0]

    def another(self) -> EventStore:
        """One more store object on the location (the first one when not `shared`)."""
        if not self.shared:
            return self.store()
        self.store()
        opened = self.new_store()
        self._opened.append(opened)
        return opened

    def reopened(self) -> EventStore:
        """Close every object, then open a new one (`durable` stores only)."""
        if not (self.shared and self.durable):
            _skip("the store does not outlive its objects (durable = False)")
        while self._opened:
            self._opened.pop().close()
        return self.store()

    def _require(self, name: str) -> Any:
        offered = getattr(capabilities(self.store()), name)
        if offered is None:
            _skip(f"the store declares no {name}")
        return offered

    # -- capabilities --------------------------------------------------------------------------

    def test_the_store_declares_the_capabilities_it_says(self) -> None:
        caps = check_store(self.store())
        assert caps.names == frozenset(self.capabilities), (
            f"declared {sorted(caps.names)}, the test says {sorted(self.capabilities)}"
        )

    # -- appends and reads ---------------------------------------------------------------------

    def test_an_empty_store_has_no_streams_and_reads_empty(self) -> None:
        store = self.store()
        assert store.streams() == []
        assert store.read("nothing") == []
        assert store.read("nothing", after=3) == []

    def test_appended_events_read_back_equal_byte_for_byte_in_seq_order(self) -> None:
        store = self.store()
        first, second = contract_events("job-1", 0, 3), contract_events("job-1", 3, 2)
        store.append("job-1", first, 0)
        store.append("job-1", second, 3)
        got = store.read("job-1")
        assert got == first + second and _seqs(got) == [0, 1, 2, 3, 4]
        assert [encode(e) for e in got] == [encode(e) for e in first + second]

    def test_an_empty_batch_changes_nothing(self) -> None:
        store = self.store()
        store.append("job-1", [], 0)
        assert store.streams() == []

    def test_a_stale_expected_seq_raises_and_writes_nothing(self) -> None:
        store = self.store()
        store.append("job-1", contract_events("job-1", 0, 2), 0)
        for expected in (0, 1, 3):
            with raises(ConcurrencyError) as caught:
                store.append("job-1", contract_events("job-1", expected, 1), expected)
            error = caught[0]
            assert isinstance(error, ConcurrencyError)
            assert (error.expected_seq, error.actual_seq) == (expected, 2)
        with raises(ConcurrencyError):
            store.append("new-job", contract_events("new-job", 1, 1), 1)
        assert _seqs(store.read("job-1")) == [0, 1] and store.streams() == ["job-1"]

    def test_a_stale_batch_repeating_an_id_is_a_conflict_first(self) -> None:
        store = self.store()
        store.append("job-1", contract_events("job-1", 0, 1), 0)
        batch = contract_events("job-1", 0, 2)
        batch[1] = batch[1].model_copy(update={"id": batch[0].id})
        with raises(ConcurrencyError):
            store.append("job-1", batch, 0)

    def test_a_batch_with_a_duplicate_id_inside_leaves_nothing_behind(self) -> None:
        store = self.store()
        batch = contract_events("job-1", 0, 3)
        batch[2] = batch[2].model_copy(update={"id": batch[0].id})
        with raises(DuplicateEventError):
            store.append("job-1", batch, 0)
        assert store.read("job-1") == [] and store.streams() == []

    def test_a_batch_with_a_bad_seq_or_stream_leaves_nothing_behind(self) -> None:
        store = self.store()
        store.append("job-1", contract_events("job-1", 0, 1), 0)
        gap = [contract_event("job-1", 1), contract_event("job-1", 3)]
        with raises(ValueError, match="without a gap"):
            store.append("job-1", gap, 1)
        foreign = [contract_event("job-1", 1), contract_event("job-2", 2)]
        with raises(ValueError, match="belongs to stream"):
            store.append("job-1", foreign, 1)
        assert _seqs(store.read("job-1")) == [0] and store.streams() == ["job-1"]

    def test_a_batch_clashing_with_a_stored_id_leaves_nothing_behind(self) -> None:
        store = self.store()
        stored = contract_events("job-1", 0, 2)
        store.append("job-1", stored, 0)
        batch = contract_events("job-2", 0, 3)
        batch[1] = batch[1].model_copy(update={"id": stored[1].id})
        with raises(DuplicateEventError) as caught:
            store.append("job-2", batch, 0)
        assert getattr(caught[0], "event_id", None) == stored[1].id
        assert store.read("job-2") == [] and store.streams() == ["job-1"]
        store.append("job-2", contract_events("job-2", 0, 1), 0)  # still usable

    def test_an_id_is_unique_across_streams_and_within_one(self) -> None:
        store = self.store()
        event = contract_event("job-1", 0)
        store.append("job-1", [event], 0)
        with raises(DuplicateEventError):
            store.append("job-2", [event.model_copy(update={"stream": "job-2"})], 0)
        with raises(DuplicateEventError):
            store.append("job-1", [event.model_copy(update={"seq": 1})], 1)
        assert store.read("job-1") == [event] and store.read("job-2") == []

    def test_read_after_a_seq_returns_only_later_events(self) -> None:
        store = self.store()
        events = contract_events("job-1", 0, 5)
        store.append("job-1", events, 0)
        for after, start in ((None, 0), (-1, 0), (-7, 0), (0, 1), (2, 3), (4, 5), (40, 5)):
            assert store.read("job-1", after) == events[start:], after

    def test_streams_lists_every_stream_once_sorted_whatever_its_name(self) -> None:
        store = self.store()
        names = ["job-b", "job-a", "runs/7/attempt 2", "ünïcødé-job", "50%off", "..", "x" * 200]
        names.append("Y" + "/" * 199)
        for name in names:
            store.append(name, contract_events(name, 0, 2), 0)
        store.append("job-a", contract_events("job-a", 2, 1), 2)
        assert store.streams() == sorted(names)
        for name in names:
            assert _seqs(store.read(name)) == ([0, 1, 2] if name == "job-a" else [0, 1])

    def test_the_group_commit_helper_lands_every_good_batch_and_fails_only_the_bad(self) -> None:
        store = self.store()
        store.append("b", contract_events("b", 0, 1), 0)
        outcomes = append_many(
            store,
            [
                ("a", contract_events("a", 0, 2), 0),
                ("b", contract_events("b", 0, 1, tag="stale"), 0),
                ("c", contract_events("c", 0, 3), 0),
            ],
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], ConcurrencyError)
        assert [len(store.read(s)) for s in "abc"] == [2, 1, 3]

    def test_a_reopened_store_sees_everything(self) -> None:
        store = self.store()
        a, b = contract_events("job-a", 0, 3), contract_events("job/b", 0, 2)
        store.append("job-a", a, 0)
        store.append("job/b", b, 0)
        again = self.reopened()
        assert again.streams() == ["job-a", "job/b"]
        assert again.read("job-a") == a and again.read("job/b") == b
        again.append("job-a", contract_events("job-a", 3, 1), 3)
        with raises(ConcurrencyError):
            again.append("job-a", contract_events("job-a", 3, 1), 3)
        with raises(DuplicateEventError):
            again.append("job-c", [b[0].model_copy(update={"stream": "job-c"})], 0)

    def test_two_store_objects_on_one_location_see_each_other(self) -> None:
        one, two = self.store(), self.another()
        one.append("job-1", contract_events("job-1", 0, 2), 0)
        with raises(ConcurrencyError):
            two.append("job-1", contract_events("job-1", 0, 1), 0)
        two.append("job-1", contract_events("job-1", 2, 1), 2)
        assert _seqs(one.read("job-1")) == [0, 1, 2]

    def test_concurrent_thread_writers_lose_nothing_and_never_interleave(self) -> None:
        threads_n, each = 4, 8
        stores = [self.store(), *(self.another() for _ in range(threads_n - 1))]
        start = threading.Barrier(threads_n)
        written: dict[int, list[str]] = {}
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                start.wait(10)
                written[i] = _append_with_retry(stores[i], "race", each, tag=f"t{i}")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        log = self.store().read("race")
        assert _seqs(log) == list(range(threads_n * each))
        assert sorted(e.id for e in log) == sorted(i for ids in written.values() for i in ids)

    def test_concurrent_process_writers_lose_nothing_and_never_interleave(self) -> None:
        url = self._url()
        procs_n, each = 3, 6
        ctx = multiprocessing.get_context("spawn")
        go, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_writer_process, args=(url, "race", each, f"p{i}", go, out))
            for i in range(procs_n)
        ]
        for proc in procs:
            proc.start()
        go.set()
        results = [out.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(30)
            assert proc.exitcode == 0
        log = self.store().read("race")
        assert _seqs(log) == list(range(procs_n * each))
        assert sorted(e.id for e in log) == sorted(i for _, ids in results for i in ids)

    def _url(self) -> str:
        url = self.store_url()
        if url is None:
            _skip("the store has no URL another process opens (store_url)")
        assert url is not None
        return url

    # -- follow --------------------------------------------------------------------------------

    def test_follow_replays_then_sees_a_thread_append_within_one_second(self) -> None:
        writer, follower = self.store(), self.another()
        writer.append("job-1", contract_events("job-1", 0, 2), 0)
        received, thread = _follow_into(follower, "job-1", None, until_seq=3)
        assert [_next(received)[1].seq, _next(received)[1].seq] == [0, 1]
        for seq in (2, 3):
            time.sleep(0.2)
            event = contract_event("job-1", seq)
            writer.append("job-1", [event], seq)
            got_at, got = _next(received, timeout=5)
            assert got == event and got_at - event.at < 1.0
        thread.join(5)
        assert not thread.is_alive()

    def test_follow_starts_after_the_given_seq(self) -> None:
        store = self.store()
        store.append("job-1", contract_events("job-1", 0, 4), 0)
        follow = store.follow("job-1", after=1, poll_s=0.05)
        assert [next(follow).seq, next(follow).seq] == [2, 3]
        follow.close()

    def test_follow_sees_another_process_append_within_one_second(self) -> None:
        url = self._url()
        follower = self.store()
        follower.append("job-1", contract_events("job-1", 0, 1), 0)
        received, thread = _follow_into(follower, "job-1", 0, until_seq=1)
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        proc = ctx.Process(target=_delayed_writer_process, args=(url, "job-1", 1, ready, 0.3))
        proc.start()
        try:
            assert ready.wait(60)
            got_at, got = _next(received, timeout=60)
            assert got.seq == 1 and got_at - got.at < 1.0
        finally:
            proc.join(30)
        assert proc.exitcode == 0
        thread.join(5)

    # -- moving logs ---------------------------------------------------------------------------

    def test_copy_streams_both_ways_keeps_streams_seqs_and_ids(self) -> None:
        store = self.store()
        logs = _awkwardly_named_logs(store)
        out = MemoryStore()
        assert copy_streams(store, out, batch_size=2) == {n: len(e) for n, e in logs.items()}
        assert copy_streams(store, out) == dict.fromkeys(logs, 0)  # resumable
        tail = contract_events("job-a", 5, 2)
        store.append("job-a", tail, 5)
        assert copy_streams(store, out, ["job-a"]) == {"job-a": 2}
        back = MemoryStore()
        back.append("job-new", contract_events("job-new", 0, 3), 0)
        assert copy_streams(back, store) == {"job-new": 3}
        assert store.read("job-new") == back.read("job-new")
        assert out.read("job-a") == store.read("job-a") == logs["job-a"] + tail

    def test_copy_streams_refuses_a_diverged_destination(self) -> None:
        store = self.store()
        store.append("job-a", contract_events("job-a", 0, 2), 0)
        other = MemoryStore()
        other.append("job-a", contract_events("job-a", 0, 1), 0)
        with raises(ValueError, match="diverged"):
            copy_streams(store, other)

    # -- the store against a dict ---------------------------------------------------------------

    def test_the_store_matches_a_dict_model_on_random_walks(self) -> None:
        for seed in range(3):
            self._walk(random.Random(seed), f"w{seed}:", steps=40)

    def _walk(self, rng: random.Random, prefix: str, steps: int) -> None:
        model: dict[str, list[Event]] = {}
        clock = 1_700_000_000.0
        names = [prefix + name for name in ("job-a", "job/b", "ünï c", "50%")]
        store = self.store()
        for _ in range(steps):
            move = rng.choice(("append", "append", "append", "read", "streams", "reopen"))
            stream = rng.choice(names)
            log = model.get(stream, [])
            if move == "append":
                delta = rng.choice((0, 0, 0, -1, 1))
                expected = len(log) + delta if len(log) + delta >= 0 else len(log) + 1
                events = []
                for i in range(rng.randint(1, 3)):
                    clock += 1.5
                    events.append(contract_event(stream, expected + i, clock))
                dup = rng.choice(("none", "none", "batch", "store"))
                stored = [e.id for stream_log in model.values() for e in stream_log]
                if dup == "batch" and len(events) > 1:
                    events[-1] = events[-1].model_copy(update={"id": events[0].id})
                elif dup == "store" and stored:
                    events[-1] = events[-1].model_copy(update={"id": rng.choice(stored)})
                else:
                    dup = "none"
                if expected != len(log):
                    with raises(ConcurrencyError):
                        store.append(stream, events, expected)
                elif dup != "none":
                    with raises(DuplicateEventError):
                        store.append(stream, events, expected)
                else:
                    store.append(stream, events, expected)
                    model.setdefault(stream, []).extend(events)
            elif move == "read":
                after = rng.choice((None, -2, -1, 0, 1, 3, 10))
                start = 0 if after is None else max(0, after + 1)
                assert store.read(stream, after) == log[start:]
            elif move == "streams":
                mine = [s for s in store.streams() if s.startswith(prefix)]
                assert mine == sorted(s for s, kept in model.items() if kept)
            elif self.shared and self.durable:
                store = self.reopened()
                for name, kept in model.items():
                    assert store.read(name) == kept

    # -- lazy reads ----------------------------------------------------------------------------

    def test_iter_read_yields_what_read_returns(self) -> None:
        lazy = self._require("lazy_reads")
        store = self.store()
        events = contract_events("job-1", 0, 600)
        store.append("job-1", events, 0)
        for after in (None, -1, 0, 255, 256, 598, 599, 700):
            assert list(lazy.iter_read("job-1", after)) == store.read("job-1", after), after
        assert list(lazy.iter_read("nothing")) == []
        partial = lazy.iter_read("job-1")
        assert next(partial) == events[0]
        close = getattr(partial, "close", None)
        if close is not None:
            close()  # given up early: the store is still usable
        store.append("job-1", contract_events("job-1", 600, 1), 600)
        assert len(store.read("job-1")) == 601

    # -- group commit --------------------------------------------------------------------------

    def test_a_group_commit_has_the_outcomes_of_appending_its_batches_one_by_one(self) -> None:
        group = self._require("group_commit")
        store = self.store()
        stored = contract_events("b", 0, 1)
        store.append("b", stored, 0)
        first = contract_events("e", 0, 1)
        clash = contract_events("f", 0, 1)
        clash[0] = clash[0].model_copy(update={"id": first[0].id})
        outcomes = group.append_many(
            [
                ("a", contract_events("a", 0, 2), 0),
                ("b", contract_events("b", 0, 1, tag="stale"), 0),  # b has seq 0 already
                ("c", [stored[0].model_copy(update={"stream": "c"})], 0),  # a stored id
                ("d", [], 0),
                ("e", first, 0),
                ("f", clash, 0),  # an id an earlier batch of the group takes
                ("a", contract_events("a", 2, 1), 2),  # after the group's own batch of a
            ]
        )
        assert [type(o).__name__ if o else None for o in outcomes] == [
            None,
            "ConcurrencyError",
            "DuplicateEventError",
            None,
            None,
            "DuplicateEventError",
            None,
        ]
        assert [len(store.read(s)) for s in "abcdef"] == [3, 1, 0, 0, 1, 0]
        assert group.append_many([]) == []

    # -- snapshots -----------------------------------------------------------------------------

    def test_a_snapshot_is_kept_per_stream_and_only_replaced_by_a_later_or_other_one(
        self,
    ) -> None:
        snapshots = self._require("snapshots")
        assert snapshots.load_snapshot("job-1") is None
        snapshots.save_snapshot("job-1", 10, 1, b"at ten")
        snapshots.save_snapshot("job-2", 3, 1, b"\x00\xff binary")
        assert snapshots.load_snapshot("job-1") == (10, 1, b"at ten")
        assert snapshots.load_snapshot("job-2") == (3, 1, b"\x00\xff binary")
        snapshots.save_snapshot("job-1", 7, 1, b"older")  # same version, earlier: kept
        assert snapshots.load_snapshot("job-1") == (10, 1, b"at ten")
        snapshots.save_snapshot("job-1", 12, 1, b"later")
        assert snapshots.load_snapshot("job-1") == (12, 1, b"later")
        snapshots.save_snapshot("job-1", 5, 2, b"another version")  # replaces, even earlier
        assert snapshots.load_snapshot("job-1") == (5, 2, b"another version")
        assert self.store().streams() == []  # a snapshot is no part of the log

    def test_many_snapshots_are_saved_together(self) -> None:
        batches = self._require("snapshot_batches")
        snapshots = self._require("snapshots")
        batches.save_snapshots([(f"job-{n}", n, 1, b"s%d" % n) for n in range(5)])
        batches.save_snapshots([])
        assert [snapshots.load_snapshot(f"job-{n}") for n in range(5)] == [
            (n, 1, b"s%d" % n) for n in range(5)
        ]

    def test_snapshots_outlive_the_store_object(self) -> None:
        self._require("snapshots").save_snapshot("job-1", 4, 1, b"kept")
        assert capabilities(self.reopened()).snapshots.load_snapshot("job-1") == (4, 1, b"kept")  # type: ignore[union-attr]

    def test_snapshot_every_is_a_setting_of_the_snapshot_capability(self) -> None:
        store = self.store()
        caps = check_store(store)  # (refuses a malformed one, or one without snapshots)
        declared = getattr(store, "snapshot_every", None)
        if caps.snapshots is None:
            assert declared is None and caps.snapshot_every is None
            return
        assert declared is None or (type(declared) is int and declared >= 1), declared
        assert caps.snapshot_every == declared  # what a watch on the store is told
        fenced = FencedStore(store, lambda _stream: None)
        assert capabilities(fenced).snapshot_every == declared

    # -- bulk reads ----------------------------------------------------------------------------

    def test_bulk_reads_answer_what_reads_one_by_one_answer(self) -> None:
        bulk = self._require("bulk_reads")
        snapshots = self._require("snapshots")
        store = self.store()
        for name, count in (("job-a", 4), ("job-b", 6), ("job-c", 1)):
            store.append(name, contract_events(name, 0, count), 0)
        afters = {"job-a": -1, "job-b": 2, "job-c": 5, "job-none": -1}
        assert bulk.read_tails(afters) == {s: store.read(s, a) for s, a in afters.items()}
        assert bulk.read_tails({}) == {}
        snapshots.save_snapshot("job-a", 2, 1, b"a")
        snapshots.save_snapshot("job-b", 4, 1, b"b")
        assert bulk.load_snapshots(["job-a", "job-b", "job-none"]) == {
            "job-a": (2, 1, b"a"),
            "job-b": (4, 1, b"b"),
        }
        assert bulk.load_snapshots([]) == {}

    # -- integrity -----------------------------------------------------------------------------

    def test_a_damaged_event_is_a_corrupt_log_naming_its_stream_and_seq(self) -> None:
        store = self.store()
        store.append("job-1", contract_events("job-1", 0, 4), 0)
        store.append("job-2", contract_events("job-2", 0, 2), 0)
        if not self.damage(store, "job-1", 2):
            _skip("the test cannot damage the store's bytes (damage)")
        reads: list[Callable[[], object]] = [lambda: store.read("job-1")]
        lazy = capabilities(store).lazy_reads
        if lazy is not None:
            reads.append(lambda: list(lazy.iter_read("job-1")))
        bulk = capabilities(store).bulk_reads
        if bulk is not None:
            reads.append(lambda: bulk.read_tails({"job-1": 0}))
        for read in reads:
            with raises(CorruptLogError) as caught:
                read()
            error = caught[0]
            assert isinstance(error, CorruptLogError)
            assert (error.stream, error.seq) == ("job-1", 2), str(error)
        assert _seqs(store.read("job-1", 2)) == [3]  # what follows it still reads
        assert _seqs(store.read("job-2")) == [0, 1]  # and so does every other stream
