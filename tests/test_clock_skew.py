"""A watch whose clock is behind the log records the skew and keeps the log's time.

A reattach from another host may read a clock behind the log's last event. The watch
records by how much (`WatchStarted.skew_s`, a v2 event), stamps everything it writes at its
own clock plus the skew (never before the log's last event), and judges on that time: the
log stays monotone and the verdict comes when an unskewed watch's would, instead of after
the watch has waited the skew out.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from flashfsm import JobHandle, MemoryStore, poll_job, verify
from flashfsm.errors import WatchStopped
from flashfsm.events.codec import decode, encode
from flashfsm.events.models import Concluded, WatchStarted
from tests.conftest import ScriptedClient, VirtualClock

STREAM = "job-skew"
T0 = 1_000_000.0


def _queued_forever(clock: VirtualClock) -> ScriptedClient:
    return ScriptedClient(
        clock, lambda elapsed, i: {"status": "IN_QUEUE"}, health=lambda e, i: {"workers": {}}
    )


def _watch(world: VirtualClock, store: MemoryStore, *, behind_s: float = 0.0, **kw: Any) -> Any:
    """`poll_job` on `world` time, read by a clock `behind_s` seconds behind it."""
    return poll_job(
        JobHandle("ep-1", "ep-name", "job-1", submitted_at=T0),
        interval_s=10.0,
        client=_queued_forever(world),
        clock=lambda: world.now - behind_s,
        sleep=world.sleep,
        store=store,
        stream=STREAM,
        **kw,
    )


def _interrupted_at(t: float) -> tuple[VirtualClock, MemoryStore]:
    """A watch of a job stuck IN_QUEUE from T0, stopped before its fetch at T0 + t."""
    world, store = VirtualClock(T0), MemoryStore()
    with pytest.raises(WatchStopped):
        _watch(world, store, stop=lambda: world.elapsed >= t)
    return world, store


def test_a_reattach_with_a_clock_120s_behind_writes_a_monotone_log_and_concludes_on_time() -> None:
    world, store = _interrupted_at(100.0)
    last = store.read(STREAM)[-1]
    assert last.at == T0 + 90.0  # the fetch at T0 + 100 was never made
    result = _watch(world, store, behind_s=120.0)
    log = store.read(STREAM)

    assert (result.state, result.rule) == ("NO_CAPACITY", "queue_grace")
    times = [event.at for event in log]
    assert times == sorted(times), "the log's time went backwards"
    (reattach,) = [e for e in log if isinstance(e, WatchStarted) and e.reattach]
    # the watcher's clock read T0 - 20 against the log's T0 + 90: 110 s are all it can see
    assert (reattach.v, reattach.skew_s, reattach.at) == (2, 110.0, T0 + 90.0)
    verdict = log[-1]
    assert isinstance(verdict, Concluded)
    # on the log's clock the job waited 310 s in the queue, as an uninterrupted watch sees
    assert verdict.at == T0 + 310.0 and "IN_QUEUE for 310s" in verdict.detail
    # and the watcher did not wait the skew out: the verdict came 10 s of world time after
    # an unskewed one's, the fetch the interruption lost (not 120 s more)
    assert world.now == T0 + 320.0
    assert verify(log).ok
    assert verify([decode(encode(event)) for event in log]).ok


def test_the_same_reattach_from_an_unskewed_clock_records_no_skew_and_writes_v1() -> None:
    world, store = _interrupted_at(100.0)
    _watch(world, store)
    log = store.read(STREAM)
    starts = [e for e in log if isinstance(e, WatchStarted)]
    assert [(e.v, e.skew_s) for e in starts] == [(1, 0.0), (1, 0.0)]
    assert all("skew_s" not in json.loads(encode(e)) for e in starts)
    assert world.now == T0 + 320.0 and verify(log).ok  # the 10 s gap is charged to no timer


def test_a_reattach_from_a_clock_behind_without_the_skew_fact_fails_verify() -> None:
    world, store = _interrupted_at(100.0)
    _watch(world, store, behind_s=120.0)
    log = store.read(STREAM)
    i = next(i for i, e in enumerate(log) if isinstance(e, WatchStarted) and e.reattach)
    # what a watch that did not correct wrote: its own clock's time, and no skew
    older = [*log[:i], log[i].model_copy(update={"v": 1, "skew_s": 0.0, "at": T0 - 20.0})]
    found = verify([*older, *log[i + 1 :]]).first_disagreement
    assert found is not None and found.seq == i
    assert found.reason.startswith("time goes back 110.000s")


def test_a_skew_is_a_v2_field_and_a_v1_event_cannot_carry_one() -> None:
    base = {"stream": "s", "seq": 1, "id": "x", "at": T0, "kind": "WatchStarted", "watcher": "w"}
    v1 = decode(json.dumps({**base, "v": 1}))
    assert isinstance(v1, WatchStarted) and v1.skew_s == 0.0
    v2 = decode(json.dumps({**base, "v": 2, "skew_s": 120.0}))
    assert isinstance(v2, WatchStarted) and v2.skew_s == 120.0
    assert decode(encode(v2)) == v2
    with pytest.raises(Exception, match="v2 field"):
        decode(json.dumps({**base, "v": 1, "skew_s": 120.0}))
    with pytest.raises(ValidationError):
        WatchStarted(stream="s", seq=1, id="x", at=T0, watcher="w", v=2, skew_s=-1.0)
