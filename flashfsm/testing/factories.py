"""The store contract's event factories, and its assertion that needs no test runner.

What it holds: the real events the contract suite appends (`contract_event`,
`contract_events`, and those that open and close a stream in the open-streams index:
`submitted`, `concluded`, `run_started`, `run_concluded`) and `raises`, the suite's
`pytest.raises` that works without pytest. How it relates to `flashfsm.testing.contract`:
they were part of it; `StoreContract` and its lease tests (`flashfsm.testing.contract_leases`)
build every batch with them, and that module re-exports them (so does `flashfsm.testing`).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

from flashfsm.events.models import (
    Candidate,
    Concluded,
    Event,
    HeartbeatObserved,
    JobSubmitted,
    RunConcluded,
    RunStarted,
    StatusObserved,
)
from flashfsm.ids import new_id

# --- events ---------------------------------------------------------------------------------


def contract_event(stream: str, seq: int, at: float | None = None, *, tag: str = "") -> Event:
    """A real event of `stream` at `seq` (odd seqs a heartbeat, even ones a status); its
    text carries a newline, a quote and non-ASCII, which a line-based store must survive."""
    t = time.time() if at is None else at
    if seq % 2:
        return HeartbeatObserved(
            stream=stream, seq=seq, id=new_id(t), at=t, stage=f"sft_start{tag}", step=seq, ts=t
        )
    return StatusObserved(
        stream=stream,
        seq=seq,
        id=new_id(t),
        at=t,
        status="IN_QUEUE",
        stdout_tail=f'line one\nline "two" ünïcødé {tag}',
    )


def contract_events(stream: str, first: int, count: int, *, tag: str = "") -> list[Event]:
    """`count` events of `stream` with seqs `first`, `first + 1`, …"""
    return [contract_event(stream, first + i, tag=tag) for i in range(count)]


def submitted(stream: str, seq: int = 0, at: float = 100.0) -> Event:
    """A `JobSubmitted` (it opens a job stream in the open-streams index)."""
    return JobSubmitted(
        stream=stream, seq=seq, id=new_id(time.time()), at=at, endpoint_id="ep", job_id="j1"
    )


def concluded(stream: str, seq: int) -> Event:
    """A job's verdict (it closes the stream)."""
    return Concluded(
        stream=stream,
        seq=seq,
        id=new_id(time.time()),
        at=200.0,
        state="SUCCEEDED",
        ok=True,
        detail="done",
        rule="completed",
    )


def run_started(stream: str, seq: int = 0, at: float = 1.0) -> Event:
    """A `RunStarted` (it opens a run stream)."""
    return RunStarted(
        stream=stream,
        seq=seq,
        id=new_id(time.time()),
        at=at,
        run_id=stream,
        candidates=(Candidate(gpu_class="L4"),),
    )


def run_concluded(stream: str, seq: int) -> Event:
    """A run's result (it closes the run and the attempts it opened)."""
    return RunConcluded(stream=stream, seq=seq, id=new_id(time.time()), at=2.0, ok=True, attempts=1)


# --- assertions without a test runner -------------------------------------------------------


@contextlib.contextmanager
def raises(kind: type[BaseException], match: str | None = None) -> Iterator[list[BaseException]]:
    """Expect the block to raise `kind` (whose text matches the regex `match`); the error
    is the one item of the yielded list."""
    caught: list[BaseException] = []
    try:
        yield caught
    except kind as exc:
        if match is not None and not re.search(match, str(exc)):
            raise AssertionError(f"{kind.__name__} {str(exc)!r} does not match {match!r}") from exc
        caught.append(exc)
        return
    raise AssertionError(f"{kind.__name__} not raised")
