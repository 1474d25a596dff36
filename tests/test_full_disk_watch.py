"""A full disk under a live watch: the watch stops with `StoreFullError` (nothing false is
recorded, nothing acknowledged is lost) and, once there is room again, a new watch resumes
by replay and reaches the verdict an uninterrupted watch reaches.

The store is real (SQLite or JSONL); only its append is made to fail for a while, the way
`tests/test_bad_stores.py` shows the stores themselves turn ENOSPC into `StoreFullError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flashfsm import JobHandle, StoreFullError, poll_job, replay, verify
from flashfsm.adapters.stores import open_store
from tests.conftest import ScriptedClient, VirtualClock

HANDLE = JobHandle("ep-1", "flash-disk", "job-disk")
STREAM = "job-job-disk"


def training_then_done(elapsed: float, index: int) -> dict[str, Any]:
    """IN_QUEUE for 30 s, IN_PROGRESS until 200 s, then COMPLETED with metrics."""
    if elapsed < 30:
        return {"id": "job-disk", "status": "IN_QUEUE"}
    if elapsed < 200:
        return {"id": "job-disk", "status": "IN_PROGRESS"}
    return {"id": "job-disk", "status": "COMPLETED", "output": {"loss": 0.5}}


class FillsUp:
    """A store whose appends fail with `StoreFullError` while `full` is set."""

    def __init__(self, store: Any, full_after: int):
        self.store = store
        self.appends = 0
        self.full_after = full_after
        self.full = False

    def append(self, stream: str, events: Any, expected_seq: int) -> None:
        self.appends += 1
        if self.appends > self.full_after:
            self.full = True
        if self.full:
            raise StoreFullError(str(getattr(self.store, "path", "store")), stream)
        self.store.append(stream, events, expected_seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def watch(store: Any, clock: VirtualClock) -> Any:
    client = ScriptedClient(clock, training_then_done, lambda t, i: {"workers": {"idle": 1}})
    return poll_job(HANDLE, client=client, clock=clock, sleep=clock.sleep, store=store)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_full_disk_stops_the_watch_and_a_new_watch_resumes_to_the_same_verdict(
    tmp_path: Path, kind: str
) -> None:
    url = f"sqlite:///{tmp_path}/events.db" if kind == "sqlite" else f"jsonl:///{tmp_path}/logs"
    store = open_store(url)
    try:
        clock = VirtualClock()
        full = FillsUp(store, full_after=6)
        with pytest.raises(StoreFullError) as info:
            watch(full, clock)
        assert STREAM in str(info.value)
        kept = store.read(STREAM)
        assert len(kept) > 0 and replay(kept).verdict is None  # nothing false recorded
        assert verify(kept).ok

        clock.sleep(60)  # the disk has room again a minute later
        result = watch(store, clock)
        events = store.read(STREAM)
        assert events[: len(kept)] == kept  # nothing acknowledged was lost
        assert result.ok and result.rule == "completed"
        assert replay(events).verdict is not None and verify(events).ok
    finally:
        store.close()
