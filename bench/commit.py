"""Durable observations per second through the supervisor's group commit (SQLite).

Many watches append one observation each at a time, as the supervisor's tasks do, through
one `GroupCommitter` over a durable `SqliteStore` (`synchronous=FULL`: a commit returns
after the WAL is fsynced). Three runs:

- paced: the watches together offer 2,000 observations per second; the figures are the
  rate achieved and the CPU the process spent doing it (`time.process_time`, every thread
  counted) as a share of one core;
- capacity: the same watches append as fast as the committer takes them;
- baseline: one `append` (one transaction, one fsync) per observation, in a loop.

Each observation is built (a validated `StatusObserved`), encoded and committed.

Usage: python bench/commit.py [--quick]
Goal (issue 7): ≥ 2,000 durable observations/s at < 25% of one core.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from common import T0, Row, Section, bench_main, fmt, timed

from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.events.models import StatusObserved
from flashfsm.ids import new_id
from flashfsm.supervisor import GroupCommitter

GOAL_RATE = 2000.0
GOAL_CPU = 25.0  # % of one core


def _event(stream: str, seq: int) -> StatusObserved:
    at = T0 + seq * 10.0
    return StatusObserved(stream=stream, seq=seq, id=new_id(at), at=at, status="IN_PROGRESS")


async def _watches(
    store: SqliteStore, writers: int, seconds: float, rate: float | None
) -> tuple[int, float, float, int, float]:
    """(observations, wall s, cpu s, commits, system cpu s) for `writers` watches."""
    committer = GroupCommitter(store)
    committer.start()
    loop = asyncio.get_running_loop()
    period = None if rate is None else writers / rate
    start = loop.time()
    deadline = start + seconds
    counts = [0] * writers

    async def watch(i: int) -> None:
        stream = f"job-{i}"
        seq = 0
        due = start + (0.0 if period is None else period * i / writers)
        while True:
            if period is not None:
                await asyncio.sleep(max(0.0, due - loop.time()))
                due += period
            if loop.time() >= deadline:
                return
            await committer.append(stream, [_event(stream, seq)], seq)
            seq += 1
            counts[i] = seq

    window: list[float] = []

    async def clock_out() -> None:
        # The measurement window ends at the deadline (plus one commit window, for the
        # appends in flight); the watches' last sleeps after it are not counted.
        await asyncio.sleep(max(0.0, deadline + 0.02 - loop.time()))
        t = os.times()
        window.extend([time.perf_counter() - wall0, time.process_time() - cpu0, sum(counts)])
        window.append(t.system - sys0)

    cpu0, wall0, sys0 = time.process_time(), time.perf_counter(), os.times().system
    await asyncio.gather(clock_out(), *(watch(i) for i in range(writers)))
    await committer.close()
    wall, cpu, acknowledged, system = window
    return int(acknowledged), wall, cpu, committer.commits, system


def _one_fsync_per_event(store: SqliteStore, seconds: float) -> tuple[int, float, float]:
    stream, seq = "job-baseline", 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    deadline = wall0 + seconds
    while time.perf_counter() < deadline:
        store.append(stream, [_event(stream, seq)], seq)
        seq += 1
    return seq, time.perf_counter() - wall0, time.process_time() - cpu0


def measure(seconds: float, writers: int) -> Section:
    section = Section("group commit (SQLite, durable)")
    with tempfile.TemporaryDirectory(prefix="flashfsm-bench-") as tmp:
        root = Path(tmp)
        store = SqliteStore(root / "paced.db", durable=True)
        n, wall, cpu, commits, system = asyncio.run(_watches(store, writers, seconds, GOAL_RATE))
        store.close()
        rate, share = n / wall, cpu / wall * 100
        store = SqliteStore(root / "capacity.db", durable=True)
        cn, cwall, ccpu, ccommits, _ = asyncio.run(_watches(store, writers, seconds, None))
        store.close()
        store = SqliteStore(root / "baseline.db", durable=True)
        bn, bwall, bcpu = _one_fsync_per_event(store, max(2.0, seconds / 2))
        store.close()
    base_rate = bn / bwall
    capacity = cn / cwall
    section.rows.append(
        Row(
            f"durable observations/s, group commit, {GOAL_RATE:,.0f}/s offered",
            rate,
            "obs/s",
            # The watches offer exactly the goal's rate, so the paced run can only keep up
            # with it (sleeps pace to within a hair); the capacity row shows the headroom.
            f"keeps up with {GOAL_RATE:,.0f}/s offered (≥ 99% taken)",
            rate >= GOAL_RATE * 0.99,
            baseline="one fsync per event",
            baseline_value=base_rate,
            ratio=f"{rate / base_rate:.1f}×",
        )
    )
    section.rows.append(
        Row(
            f"CPU for {GOAL_RATE:,.0f} durable observations/s",
            share,
            "% of one core",
            f"< {GOAL_CPU:g}%",
            share < GOAL_CPU,
        )
    )
    section.rows.append(
        Row(
            "durable observations/s, group commit, as fast as it takes them",
            capacity,
            "obs/s",
            baseline="one fsync per event",
            baseline_value=base_rate,
            ratio=f"{capacity / base_rate:.1f}×",
            summary=False,
        )
    )
    section.details.append(
        f"paced: {n:,} observations from {writers:,} watches in {fmt(wall)} s, {commits:,} "
        f"commits ({fmt(n / max(commits, 1))} per commit), CPU {fmt(cpu)} s = {fmt(share)}% of "
        f"a core ({fmt(system)} s of it in the kernel: fsync, locks), "
        f"{fmt(cpu / max(n, 1) * 1e6)} µs per observation"
    )
    section.details.append(
        f"capacity: {cn:,} observations in {fmt(cwall)} s, {ccommits:,} commits, CPU "
        f"{fmt(ccpu / cwall * 100)}% of a core"
    )
    section.details.append(
        f"one fsync per event: {bn:,} observations in {fmt(bwall)} s, "
        f"{fmt(bwall / max(bn, 1) * 1000)} ms each, CPU {fmt(bcpu / bwall * 100)}% of a core"
    )
    return section


def run(quick: bool) -> list[Section]:
    return timed(lambda: measure(4.0 if quick else 15.0, 500 if quick else 2000))


def main() -> None:
    bench_main(__doc__, run)


if __name__ == "__main__":
    main()
