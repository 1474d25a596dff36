"""A/B of the store path in one run: replay and group commit on the code of a baseline
commit (A) and on this tree (B), each side in fresh child processes, interleaved
(`bench/ab.py`).

- `replay`: a 100,000-event training log (20,000 with `--quick`) in a SQLite and a JSONL
  store; the fast path (`writer.replay_job`) and the validating path
  (`fsm.job.replay(events.store.iter_events(...))`), µs per event, the median of 5 reads;
- `group commit`: 100 watches appending one observation at a time as fast as one
  `GroupCommitter` over a durable SQLite store takes them (`bench/commit.py`'s capacity
  run) for 5 s (2 s with `--quick`): CPU µs per observation and observations per second.

    PYTHONPATH=.:bench python bench/store_ab.py --base a7ee8c7^ [--rounds 4] [--quick]

Prints one JSON line per run and a summary with the B / A ratios (below 1: B is cheaper;
for observations per second, above 1 is better). Not part of `bench/run.py`: it needs the
git history.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import ab

STREAM = "job-store-ab"
WRITERS = 100


def _replay_us(n: int, rounds: int, root: Path) -> dict[str, float]:
    """µs per event of the fast and validating replays of an `n`-event log, both stores."""
    from common import fill, median, times, training_log

    from flashfsm.adapters.jsonl import JsonlStore
    from flashfsm.adapters.sqlite import SqliteStore
    from flashfsm.events.store import iter_events
    from flashfsm.fsm.job import replay
    from flashfsm.writer import replay_job

    stores = {
        "sqlite": SqliteStore(root / "events.db", durable=False),
        "jsonl": JsonlStore(root / "jsonl", fsync=False),
    }
    out: dict[str, float] = {}
    for name, store in stores.items():
        fill(store, STREAM, training_log(STREAM, n))
        fast = median(times(lambda s=store: replay_job(s, STREAM), rounds))
        full = median(times(lambda s=store: replay(iter_events(s, STREAM)), rounds))
        out[f"{name}_fast"] = fast / n * 1e6
        out[f"{name}_validating"] = full / n * 1e6
        store.close()
    return out


def _commit(seconds: float, root: Path) -> dict[str, float]:
    """CPU µs per observation and observations per second through the group commit."""
    from commit import _watches

    from flashfsm.adapters.sqlite import SqliteStore

    store = SqliteStore(root / "commit.db", durable=True)
    try:
        count, wall, cpu, _commits, _system = asyncio.run(_watches(store, WRITERS, seconds, None))
    finally:
        store.close()
    return {"cpu_us_per_obs": cpu / max(1, count) * 1e6, "obs_per_s": count / wall}


def _child(side: str, events: int, seconds: float) -> None:
    import flashfsm

    result: dict[str, Any] = {"tree": side, "flashfsm": str(Path(flashfsm.__file__).parent)}
    with tempfile.TemporaryDirectory(prefix="flashfsm-store-ab-") as tmp:
        result["replay_us"] = _replay_us(events, 5, Path(tmp))
        result["commit"] = _commit(seconds, Path(tmp))
    print(json.dumps(result))


FIGURES = {
    "replay SQLite fast µs/event": ("replay_us", "sqlite_fast"),
    "replay SQLite validating µs/event": ("replay_us", "sqlite_validating"),
    "replay JSONL fast µs/event": ("replay_us", "jsonl_fast"),
    "replay JSONL validating µs/event": ("replay_us", "jsonl_validating"),
    "group commit CPU µs/obs": ("commit", "cpu_us_per_obs"),
    "group commit obs/s": ("commit", "obs_per_s"),
}


def main() -> None:
    """Check the baseline out, run the interleaved comparison, print runs and the summary."""
    parser = ab.arguments(__doc__, rounds=4, quick="20,000 events, 2 s, 1 round")
    parser.add_argument("--events", type=int, default=100_000, help="events in the replayed log")
    parser.add_argument("--seconds", type=float, default=5.0, help="group commit run length")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.events, args.seconds)
        return
    if args.quick:
        args.events, args.seconds, args.rounds = 20_000, 2.0, 1
    argv = ["--events", str(args.events), "--seconds", str(args.seconds)]
    runs = ab.compare(args.base, args.rounds, __file__, argv)
    summary = ab.ratios(runs, FIGURES, statistics.median)
    config = {"base": args.base, "events": args.events, "rounds": args.rounds}
    print(json.dumps({**config, "summary": summary}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
