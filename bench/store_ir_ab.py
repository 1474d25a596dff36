"""The replay A/B of `bench/store_ab.py`, counted under valgrind's cachegrind, not timed.

Each tree's replays run on cachegrind's simulated CPU, which counts what they do.

Why a count beside the clock: on this shared machine a timed replay moves by ±4 % between
runs of the same code, and by much more when a neighbour is busy (the same two trees gave a
SQLite fast path of 1.01× in one `store_ab` run and 1.26× in another), so a 3 % goal cannot
be read off the clock alone. With the hash seed fixed a count repeats to about 0.1 % (the
log's event ids are random), and the ratio of two trees' counts too.

For each path (fast and validating, SQLite and JSONL) and each tree, one child fills a store
with an `--events` training log and replays it once, another fills one and replays it three
times; their difference is two replays alone (start-up, imports and the fill cancel out, while
the replays still allocate in the heap the fill left, as in `store_ab`). Printed per event:

- `Ir`: instructions executed;
- `cycles`: cachegrind's simulated cost, `Ir + 10 × (L1 misses + mispredicted branches) +
  100 × last-level misses` (the estimate KCachegrind shows as "CEst"), which also charges a
  tree for the cache and branch behaviour of its code and its heap's layout.

    PYTHONPATH=.:bench python bench/store_ir_ab.py --base 5662aee [--events 20000] [--quick]

Needs `valgrind` on the PATH; not part of `bench/run.py` (it needs the git history).
`--rounds` is not used: a count repeats, so one run of each side is the measurement. About
15 minutes at 20,000 events on two cores (each child runs ~50× slower than natively).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import ab

STREAM = "job-store-ab"
PATHS = ("sqlite_fast", "sqlite_validating", "jsonl_fast", "jsonl_validating")
#: Replays per child: the short child and the long one (their difference is measured).
SHORT, LONG = 1, 3
#: Fixed, so a dict's or a set's probing is the same in both trees (from one random seed to
#: another a count moves by up to 0.6 %).
HASH_SEED = "0"
CACHEGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes")


def _replay(path: str, events: int, times: int) -> None:
    """Fill a fresh store of `path`'s kind with the training log, then replay it `times`
    times on `path`, all in this process (as `store_ab` does: the fill's heap is the one the
    replay allocates in)."""
    from common import fill, training_log

    from flashfsm.adapters.jsonl import JsonlStore
    from flashfsm.adapters.sqlite import SqliteStore
    from flashfsm.events.store import EventStore, iter_events
    from flashfsm.fsm.job import replay
    from flashfsm.writer import replay_job

    backend, how = path.split("_")
    with tempfile.TemporaryDirectory(prefix="flashfsm-store-ir-ab-") as tmp:
        store: EventStore = (
            SqliteStore(Path(tmp) / "events.db", durable=False)
            if backend == "sqlite"
            else JsonlStore(Path(tmp) / "jsonl", fsync=False)
        )
        fill(store, STREAM, training_log(STREAM, events))
        for _ in range(times):
            if how == "fast":
                replay_job(store, STREAM)
            else:
                replay(iter_events(store, STREAM))
        store.close()


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


def _measure(tree: Path, side: str, scratch: Path, path: str, events: int) -> dict[str, float]:
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


def main() -> None:
    """Check the baseline out, count each path's replays on each tree, print the ratios."""
    parser = ab.arguments(__doc__, rounds=1, quick="5,000 events")
    parser.add_argument("--events", type=int, default=20_000, help="events in the replayed log")
    parser.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--times", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _replay(args.path, args.events, args.times)
        print("{}")
        return
    if shutil.which("valgrind") is None:
        sys.exit("store_ir_ab needs valgrind on the PATH")
    events = 5_000 if args.quick else args.events
    results: dict[str, dict[str, dict[str, float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="flashfsm-base-") as tmp,
        ab.baseline(args.base, Path(tmp)) as base,
    ):
        for side, tree in (("A", base), ("B", ab.ROOT)):
            results[side] = {}
            for path in PATHS:
                results[side][path] = _measure(tree, side, Path(tmp), path, events)
                print(json.dumps({"tree": side, "path": path, **results[side][path]}), flush=True)
    summary: dict[str, Any] = {}
    for path in PATHS:
        for figure in ("Ir", "cycles"):
            a, b = results["A"][path][figure], results["B"][path][figure]
            summary[f"replay {path} {figure}/event"] = {
                "A": round(a),
                "B": round(b),
                "B/A": round(b / a, 3),
            }
    config = {"base": args.base, "events": events, "hash_seed": HASH_SEED}
    print(json.dumps({**config, "summary": summary}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
