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

`--count` counts the replays instead of timing them, under valgrind's cachegrind (a
simulated CPU). On this shared machine a timed replay moves by ±4 % between runs of the
same code, and by much more when a neighbour is busy (the same two trees gave a SQLite fast
path of 1.01× in one run and 1.26× in another), so a 3 % goal cannot be read off the clock
alone. With the hash seed fixed a count repeats to about 0.1 % (the log's event ids are
random). For each path and tree, one child fills a store with the log (20,000 events by
default, 5,000 with `--quick`) and replays it once, another fills one and replays it three
times; their difference is two replays alone (start-up, imports and the fill cancel out,
while the replays still allocate in the heap the fill left). Printed per event: `Ir`,
instructions executed, and `cycles`, cachegrind's simulated cost `Ir + 10 × (L1 misses +
mispredicted branches) + 100 × last-level misses` (KCachegrind's "CEst"), which also
charges a tree for its cache and branch behaviour. Needs `valgrind`; `--rounds` is not
used (a count repeats); about 15 minutes at 20,000 events on two cores.

    PYTHONPATH=.:bench python bench/store_ab.py --base 5662aee --count [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ab

STREAM = "job-store-ab"
WRITERS = 100


def _stores(root: Path) -> dict[str, Any]:
    """The two stores a replay is measured on, under `root`, by name."""
    from flashfsm.adapters.jsonl import JsonlStore
    from flashfsm.adapters.sqlite import SqliteStore

    return {
        "sqlite": SqliteStore(root / "events.db", durable=False),
        "jsonl": JsonlStore(root / "jsonl", fsync=False),
    }


def _replays(store: Any) -> dict[str, Callable[[], object]]:
    """The two replay paths of `STREAM` in `store`: the fast path (`writer.replay_job`) and
    the validating path (`fsm.job.replay(events.store.iter_events(...))`)."""
    from flashfsm.events.store import iter_events
    from flashfsm.fsm.job import replay
    from flashfsm.writer import replay_job

    return {
        "fast": lambda: replay_job(store, STREAM),
        "validating": lambda: replay(iter_events(store, STREAM)),
    }


def _replay_us(n: int, rounds: int, root: Path) -> dict[str, float]:
    """µs per event of the fast and validating replays of an `n`-event log, both stores."""
    from common import fill, median, times, training_log

    out: dict[str, float] = {}
    for name, store in _stores(root).items():
        fill(store, STREAM, training_log(STREAM, n))
        for how, replay in _replays(store).items():
            out[f"{name}_{how}"] = median(times(replay, rounds)) / n * 1e6
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


#: The paths `--count` counts: a store, then a replay path (`_stores`, `_replays`).
PATHS = ("sqlite_fast", "sqlite_validating", "jsonl_fast", "jsonl_validating")
#: Replays per counted child: the short child and the long one (their difference is measured).
SHORT, LONG = 1, 3
#: Fixed, so a dict's or a set's probing is the same in both trees (from one random seed to
#: another a count moves by up to 0.6 %).
HASH_SEED = "0"
CACHEGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes")


def _count_child(path: str, events: int, replays: int) -> None:
    """Fill a fresh store of `path`'s kind with the training log, then replay it `replays`
    times on `path`, all in this process (the fill's heap is the one the replay allocates in,
    as when timed)."""
    from common import fill, training_log

    backend, how = path.split("_")
    with tempfile.TemporaryDirectory(prefix="flashfsm-store-ab-count-") as tmp:
        stores = _stores(Path(tmp))
        store = stores[backend]
        fill(store, STREAM, training_log(STREAM, events))
        replay = _replays(store)[how]
        for _ in range(replays):
            replay()
        for each in stores.values():
            each.close()


def _counts(out_file: Path) -> dict[str, int]:
    """A cachegrind output file's totals, by event name (Ir, I1mr, D1mr, ..., Bim)."""
    names: list[str] = []
    for line in out_file.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            return dict(zip(names, map(int, line.split()[1:]), strict=True))
    raise ValueError(f"{out_file}: no summary line (did valgrind run?)")


def _cycles(c: dict[str, int]) -> float:
    """Cachegrind's cycle estimate of a run's counts (KCachegrind's CEst)."""
    l1 = c["I1mr"] + c["D1mr"] + c["D1mw"]
    last_level = c["ILmr"] + c["DLmr"] + c["DLmw"]
    return c["Ir"] + 10 * (l1 + c["Bcm"] + c["Bim"]) + 100 * last_level


def _count(tree: Path, side: str, scratch: Path, path: str, events: int) -> dict[str, float]:
    """Ir and simulated cycles per event of `path`'s replay on `tree`."""

    def run(times: int) -> dict[str, int]:
        out_file = scratch / f"cachegrind-{side}-{path}-{times}.out"
        prefix = (*CACHEGRIND, f"--cachegrind-out-file={out_file}")
        argv = ["--child", side, "--path", path, "--times", str(times), "--events", str(events)]
        ab.run_child(__file__, tree, argv, prefix=prefix, env_extra={"PYTHONHASHSEED": HASH_SEED})
        return _counts(out_file)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # (each child is one core)
        short, long = pool.map(run, (SHORT, LONG))
    per = (LONG - SHORT) * events
    return {
        "Ir": (long["Ir"] - short["Ir"]) / per,
        "cycles": (_cycles(long) - _cycles(short)) / per,
    }


def _count_main(base: str, events: int) -> None:
    """`--count`: each path counted on each tree (see the module's docstring)."""
    if shutil.which("valgrind") is None:
        sys.exit("store_ab --count needs valgrind on the PATH")
    runs: dict[str, list[dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="flashfsm-base-") as tmp,
        ab.baseline(base, Path(tmp)) as tree_a,
    ):
        for side, tree in zip(ab.SIDES, (tree_a, ab.ROOT), strict=True):
            counted = {path: _count(tree, side, Path(tmp), path, events) for path in PATHS}
            print(json.dumps({"tree": side, **counted}), flush=True)
            runs[side] = [counted]
    figures = {f"replay {p} {f}/event": (p, f) for p in PATHS for f in ("Ir", "cycles")}
    summary = ab.ratios(runs, figures, statistics.median, digits=0)
    config = {"base": base, "events": events, "hash_seed": HASH_SEED}
    print(json.dumps({**config, "summary": summary}, indent=1, ensure_ascii=False))


def main() -> None:
    """Check the baseline out, run the interleaved comparison, print runs and the summary
    (`--count`: count each path's replays on each tree instead)."""
    parser = ab.arguments(__doc__, rounds=4, quick="20,000 events, 2 s, 1 round")
    parser.add_argument("--events", type=int, help="events in the replayed log")
    parser.add_argument("--seconds", type=float, default=5.0, help="group commit run length")
    parser.add_argument("--count", action="store_true", help="count under cachegrind, not time")
    parser.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--times", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.path:
            _count_child(args.path, args.events, args.times)
            print("{}")
        else:
            _child(args.child, args.events, args.seconds)
        return
    if args.count:
        _count_main(args.base, args.events or (5_000 if args.quick else 20_000))
        return
    args.events = args.events or 100_000
    if args.quick:
        args.events, args.seconds, args.rounds = 20_000, 2.0, 1
    argv = ["--events", str(args.events), "--seconds", str(args.seconds)]
    runs = ab.compare(args.base, args.rounds, __file__, argv)
    summary = ab.ratios(runs, FIGURES, statistics.median)
    config = {"base": args.base, "events": args.events, "rounds": args.rounds}
    print(json.dumps({**config, "summary": summary}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
