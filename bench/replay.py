"""Replay cost per event, next to the raw-decode floor measured in the same run.

Builds a realistic job log (a training job polled every 10 s with a heartbeat every
minute), writes it as JSON lines, then times, each as the median of several rounds:

- raw read: the file read and split into lines;
- decode floor: the same plus `json.loads` of every line (and `orjson.loads` when installed);
- replay: the same plus full pydantic validation of every event and `evolve` into the state;
- trigger fold (baseline): a fold that fires a `transitions` trigger on every event, what a
  naive event-sourced machine would do.

Usage: python bench/replay.py [--events 100000] [--rounds 5]
Goal (issue 7): replay ≤ 2 µs/event and ≤ 8× the read + decode floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from flashfsm.events.codec import decode_many, encode
from flashfsm.events.models import (
    EventBase,
    HeartbeatObserved,
    JobSubmitted,
    StatusObserved,
    WatchStarted,
)
from flashfsm.fsm.job import JobState, evolve
from flashfsm.fsm.machine import MACHINE
from flashfsm.ids import new_id

STREAM = "job-bench"


def make_log(n: int) -> list[EventBase]:
    """A training job's log of `n` events: polls every 10 s, a heartbeat every 6th poll."""
    t0 = 1_700_000_000.0
    events: list[EventBase] = [
        JobSubmitted(
            stream=STREAM,
            seq=0,
            id=new_id(t0),
            at=t0,
            endpoint_id="ep",
            job_id="j",
            submitted_at=t0,
        ),
        WatchStarted(
            stream=STREAM,
            seq=1,
            id=new_id(t0),
            at=t0,
            watcher="bench",
            has_heartbeat_reader=True,
        ),
    ]
    step = 0
    while len(events) < n:
        seq = len(events)
        at = t0 + 10.0 * seq
        if seq % 6 == 0:
            step += 1
            events.append(
                HeartbeatObserved(
                    stream=STREAM,
                    seq=seq,
                    id=new_id(at),
                    at=at,
                    stage="sft_train",
                    step=step,
                    ts=at,
                )
            )
        else:
            status = "IN_QUEUE" if seq < 10 else "IN_PROGRESS"
            events.append(
                StatusObserved(stream=STREAM, seq=seq, id=new_id(at), at=at, status=status)
            )
    return events


def median_time(fn: Callable[[], object], rounds: int) -> float:
    """Median wall time of `fn` over `rounds` runs (seconds)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, rounds = args.events, args.rounds

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        path.write_bytes(b"\n".join(encode(e) for e in make_log(n)) + b"\n")

        def raw_read() -> list[bytes]:
            return path.read_bytes().splitlines()

        def json_floor() -> None:
            for line in raw_read():
                json.loads(line)

        def replay() -> JobState:
            state = JobState()
            for event in decode_many(raw_read()):
                evolve(state, event)
            return state

        def trigger_fold() -> None:
            model = type("Model", (), {"state": "QUEUED"})()
            flip = MACHINE.events["throttle"], MACHINE.events["recover"]
            for i, _line in enumerate(raw_read()):
                flip[i % 2].trigger(model)

        rows = [("raw read", median_time(raw_read, rounds))]
        rows.append(("read + json.loads (floor)", median_time(json_floor, rounds)))
        try:
            import orjson

            def orjson_floor() -> None:
                for line in raw_read():
                    orjson.loads(line)

            rows.append(("read + orjson.loads", median_time(orjson_floor, rounds)))
        except ImportError:
            pass
        rows.append(("replay (validate + evolve)", median_time(replay, rounds)))
        rows.append(("trigger per event (baseline)", median_time(trigger_fold, rounds)))

    floor = rows[1][1]
    replay_s = dict(rows)["replay (validate + evolve)"]
    print(f"{n} events, median of {rounds} rounds")
    print(f"{'what':32} {'µs/event':>10} {'× floor':>8}")
    for name, seconds in rows:
        print(f"{name:32} {seconds / n * 1e6:10.3f} {seconds / floor:8.2f}")
    print(
        f"replay: {replay_s / n * 1e6:.3f} µs/event, {replay_s / floor:.2f}× the json floor, "
        f"{dict(rows)['trigger per event (baseline)'] / replay_s:.1f}× faster than a trigger "
        "per event (goal ≤ 2 µs/event, ≤ 8× floor)"
    )


if __name__ == "__main__":
    main()
