"""What the benchmarks share: result rows, timing, the machine's description, sample logs.

Every benchmark module under `bench/` has `run(quick: bool) -> Section` and a `main()` that
prints its rows; `bench/run.py` runs them all and writes `bench/RESULTS.md`. A row holds a
figure, the goal it is held to, and the baseline measured in the same run with the ratio
between them, so a slow or busy machine moves both sides of a comparison alike.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from flashfsm.events.models import (
    EventBase,
    HealthObserved,
    HeartbeatObserved,
    JobSubmitted,
    StatusObserved,
    WatchStarted,
    WorkerCounts,
)
from flashfsm.ids import new_id

T0 = 1_700_000_000.0


@dataclass
class Row:
    """One figure: what, how much, the goal it is held to, and its baseline."""

    metric: str
    value: float
    unit: str
    goal: str = "—"
    met: bool | None = None  # None: no goal for this figure
    baseline: str = "—"
    baseline_value: float | None = None
    ratio: str = "—"
    summary: bool = True  # part of the summary table (else detail only)

    def measured(self) -> str:
        return f"{fmt(self.value)} {self.unit}"

    def baseline_text(self) -> str:
        if self.baseline_value is None:
            return self.baseline
        return f"{self.baseline}: {fmt(self.baseline_value)} {self.unit}"

    def verdict(self) -> str:
        return "—" if self.met is None else ("yes" if self.met else "**no**")


@dataclass
class Section:
    """A benchmark's rows, plus free-form detail lines (markdown) for RESULTS.md."""

    title: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0


def fmt(value: float) -> str:
    """A figure with sensible digits."""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def times(fn: Callable[[], object], rounds: int, *, warmup: int = 1) -> list[float]:
    """Wall times of `rounds` runs of `fn` (seconds), after `warmup` untimed runs."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest-rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))
    return ordered[index]


def rss_kib(pid: int | None = None) -> int:
    """Resident set size of a process (this one by default), KiB."""
    path = f"/proc/{pid or 'self'}/status"
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # a peak, not current


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                    break
    except OSError:
        pass
    import pydantic
    import transitions

    load = "?"
    if hasattr(os, "getloadavg"):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "RAM": ram,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "pydantic": pydantic.VERSION,
        "transitions": getattr(transitions, "__version__", "?"),
        "load average at start": load,
    }


# --- sample logs -----------------------------------------------------------------------------


def training_log(
    stream: str, n: int, *, interval_s: float = 10.0, heartbeat_every: int = 6
) -> Iterator[EventBase]:
    """A long training job's log of `n` events, built lazily.

    Submitted, watched, queued for a minute (with one health probe), then polled every
    `interval_s` while a heartbeat with a new step is recorded every `heartbeat_every` polls —
    the shape of a real week-long watch.
    """
    t = T0
    seq = 0

    def env(at: float) -> dict[str, object]:
        nonlocal seq
        fields = {"stream": stream, "seq": seq, "id": new_id(at), "at": at}
        seq += 1
        return fields

    yield JobSubmitted(**env(t), endpoint_id="ep-bench", job_id="job-bench", submitted_at=t)
    yield WatchStarted(
        **env(t), watcher="bench:1", has_heartbeat_reader=True, interval_s=interval_s
    )
    polls = step = 0
    while seq < n:
        at = t + interval_s * polls
        polls += 1
        queued = polls <= 6
        yield StatusObserved(**env(at), status="IN_QUEUE" if queued else "IN_PROGRESS")
        if seq >= n:
            break
        if polls == 1:
            yield HealthObserved(**env(at), workers=WorkerCounts(initializing=1))
        elif not queued and polls % heartbeat_every == 0:
            step += 1
            stage = "boot" if step == 1 else "sft_train"
            yield HeartbeatObserved(**env(at), stage=stage, step=step, ts=at - 3.0)


def seven_day_events(interval_s: float = 10.0) -> int:
    """Events of a 7-day watch: a poll every `interval_s` plus a heartbeat every 6th poll."""
    polls = int(7 * 24 * 3600 / interval_s)
    return polls + polls // 6 + 3


def batched(events: Iterator[EventBase], size: int) -> Iterator[list[EventBase]]:
    batch: list[EventBase] = []
    for event in events:
        batch.append(event)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def fill(store: object, stream: str, events: Iterator[EventBase], batch: int = 10_000) -> int:
    """Append `events` to `store` in batches; returns how many."""
    count = 0
    for chunk in batched(events, batch):
        store.append(stream, chunk, count)  # type: ignore[attr-defined]
        count += len(chunk)
    return count


def print_section(section: Section) -> None:
    """A section's rows on stdout (what each module's `main` prints)."""
    print(f"== {section.title} ({section.seconds:.1f} s)")
    for row in section.rows:
        goal = "" if row.goal == "—" else f"  goal {row.goal}: {row.verdict()}"
        base = "" if row.baseline_value is None else f"  vs {row.baseline_text()} ({row.ratio})"
        print(f"  {row.metric}: {row.measured()}{goal}{base}")
    for line in section.details:
        print(f"  {line}")


def bench_dir() -> Path:
    return Path(__file__).resolve().parent


def timed(measure: Callable[[], Section]) -> list[Section]:
    """`run`'s answer for a module of one section: `measure`'s, with the seconds it took."""
    start = time.perf_counter()
    section = measure()
    section.seconds = time.perf_counter() - start
    return [section]


def bench_main(doc: str, run: Callable[[bool], list[Section]]) -> None:
    """A benchmark module's command line: `--quick` for the small sizes, then its sections."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for section in run(args.quick):
        print_section(section)
