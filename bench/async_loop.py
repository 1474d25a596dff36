"""How long `asupervise_run` holds its event loop (issue 37): no step longer than 50 ms.

Every demo run is driven by `asupervise_run` on one event loop in debug mode with
`slow_callback_duration = 0`, so asyncio times every callback it runs (each step of every
task) and reports it; the longest is the most the driver ever blocked the loop. The runs
play on the simulator (a manual clock, real HTTP on 127.0.0.1) with a SQLite store, the
store's reads and appends and the REST calls in worker threads as the driver makes them.
Beside the runs, a probe task sleeps 1 ms at a time and records how late it wakes: what
another coroutine on the same loop (a triggerer's other triggers) sees.

    PYTHONPATH=.:bench python bench/async_loop.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

from common import Row, Section, print_section

GOAL_MS = 50.0
TOOK = re.compile(r"took (\d+\.\d+) seconds")


class _Steps(logging.Handler):
    """Collects the durations asyncio's debug mode reports for each callback."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = TOOK.search(record.getMessage())
        if found:
            self.seconds.append(float(found.group(1)))


async def _runs(rounds: int, tmp: Path) -> list[float]:
    from flashfsm.adapters.simulator import SimClock, Simulator  # (imported before the loop)
    from flashfsm.adapters.sqlite import SqliteStore
    from flashfsm.demo import DEMO_RUNS, GPUS, PHASE, _DemoRunner
    from flashfsm.runs import asupervise_run

    lateness: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lateness.append(time.perf_counter() - start - 0.001)

    prober = asyncio.create_task(probe())
    store = await asyncio.to_thread(SqliteStore, str(tmp / "runs.db"))
    try:
        for round_ in range(rounds):
            for demo in DEMO_RUNS:
                # (the bench's own set-up and tear-down, off the loop: not the driver's steps)
                sim = await asyncio.to_thread(Simulator(clock=SimClock(speed=0)).__enter__)
                client = await asyncio.to_thread(sim.client)
                try:
                    runner = _DemoRunner(sim, client, demo, f"{round_:08x}", 0, str(tmp), store)
                    adapters = dataclasses.replace(runner.adapters(), asleep=sim.clock.async_sleep)
                    await asupervise_run(
                        runner.run_id,
                        [GPUS[g] for g in demo.gpus],
                        adapters,
                        phase=PHASE,
                        seed=0,
                        store=store,
                        stream=runner.stream,
                        clock=sim.clock.now,
                        sleep=sim.clock.async_sleep,
                        capacity_memory=False,
                    )
                finally:
                    await asyncio.to_thread(client.close)
                    await asyncio.to_thread(sim.__exit__, None, None, None)
    finally:
        done.set()
        await prober
        await asyncio.to_thread(store.close)
    return lateness


def run(quick: bool) -> list[Section]:
    """The bench's rows: the longest loop step, and how late a 1 ms sleeper beside it woke."""
    started = time.perf_counter()
    import flashfsm.adapters.simulator
    import flashfsm.adapters.sqlite
    import flashfsm.demo
    import flashfsm.runs
    import flashfsm.supervisor  # noqa: F401  (imports are not the driver's steps: made first)

    steps = _Steps()
    logger = logging.getLogger("asyncio")
    logger.addHandler(steps)
    saved = logger.level, logger.propagate
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        with tempfile.TemporaryDirectory(prefix="flashfsm-async-") as tmp:
            loop = asyncio.new_event_loop()
            loop.set_debug(True)
            loop.slow_callback_duration = 0.0
            try:
                lateness = loop.run_until_complete(_runs(1 if quick else 3, Path(tmp)))
            finally:
                loop.close()
    finally:
        logger.removeHandler(steps)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
    longest_ms = max(steps.seconds, default=0.0) * 1000
    late = sorted(lateness)
    p99_ms = late[int(0.99 * (len(late) - 1))] * 1000 if late else 0.0
    section = Section("asupervise_run on an event loop (issue 37)")
    section.rows.append(
        Row(
            "asupervise_run: longest loop step",
            longest_ms,
            "ms",
            goal=f"≤ {GOAL_MS:.0f} ms",
            met=longest_ms <= GOAL_MS,
        )
    )
    section.rows.append(
        Row(
            "a 1 ms sleeper beside it: p99 lateness",
            p99_ms,
            "ms",
            summary=False,
            baseline="worst",
            baseline_value=max(late, default=0.0) * 1000,
        )
    )
    section.details.append(
        f"{len(steps.seconds)} loop steps timed (debug mode, slow_callback_duration 0) over "
        f"{'one round' if quick else 'three rounds'} of the demo's runs; "
        f"{len(late)} wake-ups of the sleeper"
    )
    section.seconds = time.perf_counter() - started
    return [section]


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of the demo's runs")
    args = parser.parse_args(argv)
    for section in run(args.quick):
        print_section(section)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
