"""Capacity memory: a fleet of runs while one GPU class has no capacity for six hours.

    python bench/capacity.py            # 36 runs, one every 15 simulated minutes
    python bench/capacity.py --quick    # 16 runs, one every 30 simulated minutes

Two fleets run in the same process, on the loopback simulator and a virtual clock (six
simulated hours take seconds): the same runs, the same candidates and the same outage,
once with capacity memory (the default) and once without (`capacity_memory=False`). Each
run walks `runpod/L4 $0.39/h` (the cheapest), `runpod/A10 $0.60/h`, `runpod/L40S $0.90/h`;
during the first six hours every L4 endpoint's worker is throttled (the host is full), so
an L4 attempt waits out the throttled grace and ends `no_capacity`. Runs start one after
another; the next starts at its slot, or when the previous one ended if that is later.

Figures, per fleet: the mean time from a run's start to a worker picking up the job that
trained (its first status other than IN_QUEUE), and the queue minutes spent on jobs that
never trained (every wait before pickup of an attempt that did not succeed). Then each
memory run is replayed: its recorded ranking must be the one its log folds to, and
re-planning every attempt from its log's prefix must pick the candidate it recorded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from common import Row, Section, print_section  # noqa: E402

from flashfsm import MemoryStore, supervise_run  # noqa: E402
from flashfsm.adapters.simulator import SimClock, Simulator  # noqa: E402
from flashfsm.events.models import AttemptStarted, Candidate  # noqa: E402
from flashfsm.fsm.capacity import job_wait  # noqa: E402
from flashfsm.fsm.run import plan_attempt, replay_run  # noqa: E402
from flashfsm.runs import Deployed, RunpodRunAdapters  # noqa: E402

T0 = 1_700_000_000.0
OUTAGE_S = 6 * 3600.0
STARVED = "L4"
CANDIDATES = (
    Candidate(gpu_class="L4", price_per_hour=0.39, vram_gb=24),
    Candidate(gpu_class="A10", price_per_hour=0.60, vram_gb=24),
    Candidate(gpu_class="L40S", price_per_hour=0.90, vram_gb=48),
)


def fleet(runs: int, gap_s: float, memory: bool) -> dict[str, Any]:
    """Run the fleet; return its figures and its store."""
    store = MemoryStore()
    with Simulator(clock=SimClock(speed=0, start=T0)) as sim, sim.client() as client:

        def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
            gpu = attempt.started.gpu_class
            starved = gpu == STARVED and sim.clock.now() < T0 + OUTAGE_S
            name = attempt.started.endpoint_name
            scenario = "throttled" if starved else "success"
            return Deployed(sim.add_endpoint(name, scenario=scenario, check_quota=False), name)

        adapters = RunpodRunAdapters(
            client,
            deploy,
            lambda run, attempt: {"run": run.started.run_id},
            budget_s=6 * 3600,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
        )
        for n in range(runs):
            slot = T0 + n * gap_s
            if sim.clock.now() < slot:
                sim.clock.sleep(slot - sim.clock.now())
            supervise_run(
                f"fleet-{n:03d}",
                CANDIDATES,
                adapters,
                max_retries=2,
                store=store,
                clock=sim.clock.now,
                sleep=sim.clock.sleep,
                capacity_memory=memory,
            )
    return {"store": store, **measure(store, runs)}


def measure(store: MemoryStore, runs: int) -> dict[str, Any]:
    """Time to training and wasted queue time over the fleet's runs."""
    to_training, wasted, attempts, starved_attempts = [], 0.0, 0, 0
    for n in range(runs):
        events = store.read(f"run-fleet-{n:03d}")
        run = replay_run(events)
        assert run.result is not None and run.result.ok, f"run {n} did not succeed"
        for a in run.attempts:
            attempts += 1
            starved_attempts += a.started.gpu_class == STARVED and not a.ended.ok
            job = store.read(a.job_stream) if a.job_stream else []
            w = job_wait(a.started.provider, a.started.gpu_class, job)
            if w is None:
                continue
            if a.ended is not None and a.ended.ok:
                to_training.append(_picked_at(job) - events[0].at)
            else:
                wasted += w.waited_s
    return {
        "to_training_s": statistics.mean(to_training),
        "wasted_min": wasted / 60,
        "attempts": attempts,
        "starved_attempts": starved_attempts,
    }


def _picked_at(job: list[Any]) -> float:
    for e in job:
        if e.kind == "StatusObserved" and e.status != "IN_QUEUE":
            return float(e.at)
    return float(job[-1].at)


def check_replay(store: MemoryStore, runs: int) -> int:
    """Replay every run: its ranking is the recorded one and every attempt re-plans alike.
    Returns how many attempts were re-planned."""
    checked = 0
    for n in range(runs):
        events = store.read(f"run-fleet-{n:03d}")
        recorded = next(e for e in events if e.kind == "CandidatesRanked")
        assert replay_run(events).ranking == recorded
        for i, e in enumerate(events):
            if isinstance(e, AttemptStarted):
                plan = plan_attempt(replay_run(events[:i]))
                assert plan is not None and plan.candidate == e.candidate, (n, e.attempt)
                checked += 1
    return checked


def run(quick: bool) -> list[Section]:
    """Both fleets, their ratios, and the replay check."""
    start = time.perf_counter()
    runs, gap_s = (16, 1800.0) if quick else (36, 900.0)
    with_memory = fleet(runs, gap_s, memory=True)
    without = fleet(runs, gap_s, memory=False)
    replanned = check_replay(with_memory["store"], runs)
    section = Section(
        f"capacity memory: {runs} runs, one every {gap_s / 60:.0f} simulated minutes, "
        f"{STARVED} without capacity for {OUTAGE_S / 3600:.0f} h"
    )
    speedup = without["to_training_s"] / with_memory["to_training_s"]
    section.rows.append(
        Row(
            "mean time from run start to training, with capacity memory",
            with_memory["to_training_s"],
            "s",
            goal="< without memory",
            met=with_memory["to_training_s"] < without["to_training_s"],
            baseline="without memory",
            baseline_value=without["to_training_s"],
            ratio=f"{speedup:.2f}× sooner",
        )
    )
    saved = without["wasted_min"] / max(with_memory["wasted_min"], 1e-9)
    section.rows.append(
        Row(
            "queue time of jobs that never trained, with capacity memory",
            with_memory["wasted_min"],
            "min",
            goal="< without memory",
            met=with_memory["wasted_min"] < without["wasted_min"],
            baseline="without memory",
            baseline_value=without["wasted_min"],
            ratio=f"{saved:.2f}× less",
        )
    )
    section.details.append(
        f"attempts: {with_memory['attempts']} with memory ({with_memory['starved_attempts']} "
        f"on the starved class), {without['attempts']} without "
        f"({without['starved_attempts']}); every memory run replayed to its recorded "
        f"ranking and {replanned} attempts re-planned from their logs alike"
    )
    section.seconds = time.perf_counter() - start
    return [section]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for section in run(args.quick):
        print_section(section)


if __name__ == "__main__":
    main()
