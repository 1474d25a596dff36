"""The one stream writer and its three conflict policies, each tested here once.

`StreamWriter` builds the next events from its folded state, appends them with the seq
the state expects, and folds them only once the store took them. When another writer got
there first its policy decides: stop (an error), or fold the newer events in and build the
append anew.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flashfsm import JobOwnedElsewhere, MemoryStore
from flashfsm.events.errors import ConcurrencyError
from flashfsm.events.models import (
    AttemptStarted,
    CancelRequested,
    Candidate,
    Concluded,
    IdleSeen,
    JobSubmitted,
    RunStarted,
    StatusObserved,
    WatchStarted,
)
from flashfsm.writer import (
    FOLD_CANCELS,
    JOB,
    NEWER_WATCH_WINS,
    REBUILD,
    RUN,
    SWEEPER,
    TAIL,
    Append,
    Contention,
    ReadAfter,
    Replay,
    StreamWriter,
    drive,
)


def _job_writers(store: MemoryStore) -> tuple[StreamWriter, StreamWriter]:
    """Two watches' writers on one job stream, both replayed after its submission."""
    first = StreamWriter(store, "job", JOB, NEWER_WATCH_WINS)
    first.record(JobSubmitted, 1.0, endpoint_id="ep", job_id="j")
    first.record(WatchStarted, 1.0, watcher="first")
    second = StreamWriter(store, "job", JOB, NEWER_WATCH_WINS)
    second.open()
    return first, second


def _status(writer: StreamWriter, at: float) -> Any:
    return lambda state: [] if state.done else [writer.event(StatusObserved, at, status="X")]


# --- NEWER_WATCH_WINS ---------------------------------------------------------------------


def test_a_newer_watch_stops_the_older_one_and_nothing_of_the_older_lands():
    store = MemoryStore()
    older, newer = _job_writers(store)
    newer.record(WatchStarted, 2.0, watcher="newer", reattach=True)
    with pytest.raises(JobOwnedElsewhere, match="newer"):
        older.append(_status(older, 3.0))
    assert [e.kind for e in store.read("job")][-1] == "WatchStarted"
    assert older.state.next_seq == 2  # the older state knows nothing the log does not


def test_a_foreign_observation_is_folded_in_and_the_append_built_anew():
    store = MemoryStore()
    mine, other = _job_writers(store)
    other.record(StatusObserved, 2.0, status="IN_QUEUE")
    [appended] = mine.append(_status(mine, 3.0))
    assert (appended.seq, mine.state.next_seq, mine.state.last_status) == (3, 4, "X")
    assert [e.seq for e in store.read("job")] == [0, 1, 2, 3]


def test_a_log_that_got_its_verdict_meanwhile_takes_no_more_observations():
    store = MemoryStore()
    mine, other = _job_writers(store)
    verdict = {"state": "LOST", "ok": False, "failure": "lost", "rule": "job_lost"}
    other.record(Concluded, 2.0, **verdict)
    assert mine.append(_status(mine, 3.0)) == []
    assert mine.state.done and store.read("job")[-1].kind == "Concluded"


# --- FOLD_CANCELS -------------------------------------------------------------------------


def _run_writer(store: MemoryStore) -> StreamWriter:
    writer = StreamWriter(store, "run", RUN, FOLD_CANCELS)
    writer.record(RunStarted, 1.0, run_id="r", candidates=(Candidate(gpu_class="L4"),))
    return writer


def test_a_user_cancel_from_another_process_is_folded_into_the_run():
    store = MemoryStore()
    driver = _run_writer(store)
    canceller = StreamWriter(store, "run", TAIL, REBUILD)
    canceller.open()
    canceller.record(CancelRequested, 2.0, by="alice")
    driver.record(CancelRequested, 3.0, by="driver")  # any append of the driver's, really
    assert driver.state.cancel_requested and driver.state.next_seq == 3
    assert [e.kind for e in store.read("run")] == ["RunStarted", *["CancelRequested"] * 2]


def test_anything_but_a_cancel_from_elsewhere_means_another_driver():
    store = MemoryStore()
    driver = _run_writer(store)
    intruder = StreamWriter(store, "run", RUN, FOLD_CANCELS)
    intruder.open()
    intruder.record(AttemptStarted, 2.0, attempt=0, candidate=0, provider="runpod", gpu_class="L4")
    with pytest.raises(JobOwnedElsewhere):
        driver.record(CancelRequested, 3.0)
    assert driver.state.attempts == []  # nothing of the other driver's was taken in


# --- REBUILD ------------------------------------------------------------------------------


def test_rebuild_folds_others_and_builds_anew_then_gives_up_after_its_tries():
    store = MemoryStore()
    slow = StreamWriter(store, "sweeper", SWEEPER, dataclasses.replace(REBUILD, tries=3))
    fast = StreamWriter(store, "sweeper", SWEEPER, REBUILD)
    built: list[int] = []

    def seen(state: Any) -> list[Any]:
        built.append(state.next_seq)
        fast.record(IdleSeen, 1.0, endpoint_id=f"e{state.next_seq}", since=1.0)  # a race
        return [slow.event(IdleSeen, 2.0, endpoint_id="mine", since=2.0)]

    with pytest.raises(Contention, match="3 times"):
        slow.append(seen)
    assert built == [0, 1, 2]  # built anew from each newer state
    assert "mine" not in slow.state.timers and set(slow.state.timers) == {"e0", "e1", "e2"}


def test_given_events_cannot_be_rebuilt_so_a_conflict_raises():
    store = MemoryStore()
    writer = StreamWriter(store, "tail", TAIL, REBUILD)
    event = writer.event(CancelRequested, 1.0)
    StreamWriter(store, "tail", TAIL, REBUILD).record(CancelRequested, 0.5)
    with pytest.raises(ConcurrencyError):
        writer.append([event])


# --- the protocol, sans I/O ---------------------------------------------------------------


def test_the_writer_only_asks_for_store_requests_and_a_driver_answers_them():
    store = MemoryStore()
    _job_writers(store)  # a submission and a watch: seqs 0 and 1
    writer = StreamWriter(None, "job", JOB, NEWER_WATCH_WINS)  # no store of its own
    asked: list[type] = []

    class Recording(MemoryStore):
        """The store a driver performs requests on, noting which ones."""

        def append(self, *args: Any) -> None:
            asked.append(Append)
            store.append(*args)

        def read(self, *args: Any) -> list[Any]:
            asked.append(ReadAfter)
            return store.read(*args)

    assert isinstance(next(writer.open_steps()), Replay)  # what a driver is asked first
    drive(writer.open_steps(), Recording())
    other = StreamWriter(store, "job", TAIL, REBUILD)
    other.open()
    other.record(StatusObserved, 3.0, status="IN_PROGRESS")  # lands first, at seq 2
    drive(writer.append_steps(_status(writer, 4.0)), Recording())
    assert writer.state.next_seq == 4 and writer.state.last_status == "X"
    assert asked[-3:] == [Append, ReadAfter, Append]  # conflict, read the newer, again
    with pytest.raises(RuntimeError, match="no store of its own"):
        writer.append(_status(writer, 5.0))
