"""The pure core's cost per observation: `evolve` then `decide`, as the live loop runs them.

The events of a training job's log (`common.training_log`) are folded one at a time, each
followed by `decide(state, event.at)` — exactly what the shell does after recording an
observation — and the time is divided by the number of observations. Decoding and I/O are
not included: they are the replay and store benchmarks' business.

Usage: python bench/core.py [--quick]
Goal (issue 7): ≤ 10 µs per observation.
"""

from __future__ import annotations

from common import Row, Section, bench_main, fmt, median, timed, times, training_log

from flashfsm.fsm.job import JobState, decide, evolve
from flashfsm.fsm.machine import MACHINE

GOAL_US = 10.0


def measure(n: int, rounds: int) -> Section:
    section = Section(f"core, {n:,} observations")
    events = list(training_log("job-core", n))
    head, body = events[:2], events[2:]  # decide needs the WatchStarted

    def live() -> None:
        s = JobState()
        for event in head:
            evolve(s, event)
        for event in body:
            evolve(s, event)
            decide(s, event.at)

    def evolve_only() -> None:
        s = JobState()
        for event in events:
            evolve(s, event)

    total = median(times(live, rounds)) / len(body) * 1e6
    fold = median(times(evolve_only, rounds)) / len(events) * 1e6
    model = type("Model", (), {"state": "QUEUED"})()
    flip = MACHINE.events["worker_throttled"], MACHINE.events["workers_recovered"]

    def triggers() -> None:
        for i in range(len(body)):
            flip[i % 2].trigger(model)

    trigger = median(times(triggers, rounds)) / len(body) * 1e6
    section.rows.append(
        Row(
            "core cost per observation (evolve + decide)",
            total,
            "µs",
            f"≤ {GOAL_US:g} µs",
            total <= GOAL_US,
            baseline="one `transitions` trigger (for scale)",
            baseline_value=trigger,
            ratio=f"a trigger costs {trigger / total:.1f}× as much",
        )
    )
    section.details.append(
        f"evolve alone {fmt(fold)} µs, decide alone ≈ {fmt(total - fold)} µs per observation; "
        f"one trigger through the shared Machine {fmt(trigger)} µs (median of {rounds} rounds)"
    )
    return section


def run(quick: bool) -> list[Section]:
    return timed(lambda: measure(20_000 if quick else 100_000, 5))


def main() -> None:
    bench_main(__doc__, run)


if __name__ == "__main__":
    main()
