"""Reattach a fleet from snapshots: N job streams of 1,000 events, replayed to a ready state.

A replica restarting replays every live job's stream before it polls it again (what
`attach_steps` does before its claim). Each stream here holds 1,000 events
(`common.training_log`) in one SQLite store (and Postgres when FLASHFSM_TEST_POSTGRES_DSN is
set) and a snapshot taken by the watch's rule (`snapshot_every` events): a stream's latest
snapshot is then 0 to `snapshot_every - 1` events behind its end, spread evenly over the
fleet (a restart lands at any phase). In the same run, the same streams are replayed in
full (the job fold without its snapshot codec). Both replay every stream in turn in one
thread; the claims that follow (one `WatchStarted` per job, through one group commit) are
timed apart.

Then the write side: a supervisor-like loop appends one observation to each of W streams
per round through `append_many` (one durable transaction per group of 500, as the group
committer does), and writes the snapshots that fall due after each commit, as the
`SnapshotWriter` does. The CPU spent encoding and writing snapshots is compared with the
whole loop's CPU.

And the fleet's restart, end to end: the N streams are handed off with expired leases (the
replica that held them died), 50 jobs to an endpoint; a `Fleet` replica starts, claims
them all, reattaches each by replay (from its snapshot, or — the baseline, in the same run
— in full), records its `WatchStarted` and polls it once (a client that answers at once);
the time is from the replica's start to the last job's first poll.

Usage: python bench/snapshots.py [--quick]     (quick: N = 1,000; full: N = 10,000)
Goals (the snapshot and fleet issues): reattach all N and poll them again ≤ 5 s with
snapshots, ≥ 20× faster than full replay; snapshot writes < 5% of the CPU (here: of a
write loop that only appends, a lower bound on a fleet's CPU per event, so an upper bound
on the share).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import Row, Section, bench_main, fmt, training_log

from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.events.light import settle_fields
from flashfsm.events.models import StatusObserved, WatchStarted
from flashfsm.events.store import HANDOFF, FencedStore, append_many
from flashfsm.fleet import Fleet
from flashfsm.fsm.job import JobState, evolve
from flashfsm.fsm.snapshot import DEFAULT_SNAPSHOT_EVERY, FOLD_VERSION, encode_snapshot
from flashfsm.ids import new_id
from flashfsm.writer import (
    JOB,
    NEWER_WATCH_WINS,
    Fold,
    Replay,
    StreamWriter,
    replay_stream,
    save_snapshots,
)

EVENTS = 1_000
INTERVALS = (500, 100, 50, 25)
#: The snapshot intervals a replica's restart, and the write loop, are measured at. Every 1
#: leaves each stream's snapshot at its very end (nothing to fold after it): no interval
#: can make a restart cheaper, so it is the most any snapshot interval can gain.
RESTART_EVERY = (DEFAULT_SNAPSHOT_EVERY, 50, 1)
WRITE_EVERY = (500, 100, 50, 25)
GOAL_S, GOAL_RATIO, GOAL_CPU = 5.0, 20.0, 0.05
# The job fold without snapshots (still on the light fast path: the baseline is the best
# full replay there is, not the validating one)
FULL = Fold("job", JobState, evolve, None, settle_fields)
PG_ENV = "FLASHFSM_TEST_POSTGRES_DSN"


def fill(store: object, n: int, every: int) -> list[str]:
    """N streams of `EVENTS` events, each with the snapshot the watch would have left, each
    its own job, handed to a fleet (the leases of the replica that died have expired)."""
    template = list(training_log("job-0", EVENTS))
    handed = FencedStore(store, lambda _stream: HANDOFF)  # type: ignore[arg-type]
    names = []
    for i in range(n):
        stream = f"job-{i}"
        events = [e.model_copy(update={"stream": stream, "id": new_id(e.at)}) for e in template]
        # (50 jobs to an endpoint, as in bench/fleet.py: RunPod's rate limits are per endpoint)
        events[0] = events[0].model_copy(
            update={"job_id": f"job-{i}", "endpoint_id": f"ep-{i // 50}"}
        )
        handed.append(stream, events, 0)
        behind = i % every  # the fleet's phases, spread evenly
        writer = StreamWriter(None, stream, JOB, NEWER_WATCH_WINS)
        writer.took(events[: EVENTS - behind])
        body = encode_snapshot(writer.state, stream)
        store.save_snapshot(stream, EVENTS - 1 - behind, FOLD_VERSION, body)  # type: ignore[attr-defined]
        names.append(stream)
    return names


def reattach_all(store: object, streams: list[str], fold: Fold[JobState]) -> float:
    start = time.perf_counter()
    for stream in streams:
        state = replay_stream(store, Replay(stream, fold))  # type: ignore[arg-type]
        assert state.next_seq == EVENTS and not state.done
    return time.perf_counter() - start


def claim_all(store: object, streams: list[str]) -> float:
    at = time.time()
    batches = [
        (s, [WatchStarted(stream=s, seq=EVENTS, id=new_id(at), at=at, watcher="bench:2")], EVENTS)
        for s in streams
    ]
    start = time.perf_counter()
    for first in range(0, len(batches), 1000):
        assert not any(append_many(store, batches[first : first + 1000]))  # type: ignore[arg-type]
    return time.perf_counter() - start


def snapshot_row(metric: str, snap_s: float, full_s: float) -> Row:
    """A time with snapshots, held to the goals, against the same done by full replays."""
    ratio = full_s / snap_s
    return Row(
        metric,
        snap_s,
        "s",
        f"≤ {GOAL_S:g} s, ≥ {GOAL_RATIO:g}×",
        snap_s <= GOAL_S and ratio >= GOAL_RATIO,
        "full replay",
        full_s,
        f"{fmt(ratio)}×",
    )


def measure_reattach(section: Section, name: str, open_store: object, n: int) -> None:
    for every in INTERVALS:
        store = open_store()  # type: ignore[operator]
        t0 = time.perf_counter()
        streams = fill(store, n, every)
        fill_s = time.perf_counter() - t0
        # the full replays first, so the snapshot side never has a warmer page cache
        full_s = reattach_all(store, streams, FULL)
        snap_s = reattach_all(store, streams, JOB)
        full_s = min(full_s, reattach_all(store, streams, FULL))
        snap_s = min(snap_s, reattach_all(store, streams, JOB))
        claims_s = claim_all(store, streams) if every == INTERVALS[0] else None
        store.close()  # type: ignore[attr-defined]
        ratio = full_s / snap_s
        label = f"{name}, {n:,} jobs × {EVENTS:,} events, snapshot every {every}"
        section.rows.append(snapshot_row(f"reattach {label}", snap_s, full_s))
        section.details.append(
            f"{label}: with snapshots {fmt(snap_s)} s ({fmt(snap_s / n * 1000)} ms/job), "
            f"full replay {fmt(full_s)} s ({fmt(full_s / n * 1000)} ms/job): {fmt(ratio)}× "
            f"(best of 2 each; fill {fmt(fill_s)} s)"
            + (
                ""
                if claims_s is None
                else f"; then the claims, one group commit per 1,000 jobs: {fmt(claims_s)} s"
            )
        )


class FirstPolls:
    """A RunPod client answering at once, that notes when every job has been polled."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.seen: set[str] = set()
        self.all_polled = asyncio.Event()

    async def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.seen.add(job_id)
        if len(self.seen) >= self.jobs:
            self.all_polled.set()
        return {"id": job_id, "status": "IN_PROGRESS"}

    async def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return {"jobs": {"inQueue": 0, "inProgress": 1}, "workers": {"idle": 0, "running": 1}}


class WithoutSnapshots:
    """A store whose snapshots are hidden: every reattach replays in full."""

    def __init__(self, store: object):
        self.inner = store

    def __getattr__(self, name: str) -> Any:
        if name in ("load_snapshot", "save_snapshot", "load_snapshots", "read_tails"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def restart(store: object, jobs: int) -> float:
    """A replica starting on `jobs` expired leases: seconds until it has polled every job
    again (claim, reattach by replay, `WatchStarted`, first status call), then it drains."""
    client = FirstPolls(jobs)

    async def main() -> float:
        fleet = Fleet(
            store,  # type: ignore[arg-type]
            client,
            owner=f"bench-{uuid.uuid4().hex[:6]}",
            lease_s=600,
            tick_s=0.02,
            claim_batch=jobs,
            spread=0,
        )
        start = time.perf_counter()
        task = asyncio.create_task(fleet.run())
        await asyncio.wait_for(client.all_polled.wait(), 600)
        took = time.perf_counter() - start
        fleet.stop()
        await task
        return took

    return asyncio.run(main())


def measure_restart(section: Section, name: str, open_store: object, n: int, every: int) -> None:
    store = open_store()  # type: ignore[operator]
    t0 = time.perf_counter()
    fill(store, n, every)
    fill_s = time.perf_counter() - t0
    full_s = restart(WithoutSnapshots(store), n)  # first, so snapshots get no warmer cache
    snap_s = restart(store, n)
    store.close()  # type: ignore[attr-defined]
    ratio = full_s / snap_s
    label = f"{name}, {n:,} jobs × {EVENTS:,} events, snapshot " + (
        f"every {every}" if every > 1 else "at each stream's end (the floor of any interval)"
    )
    section.rows.append(snapshot_row(f"replica restart polling again, {label}", snap_s, full_s))
    section.details.append(
        f"fleet restart, {label}: a `Fleet` replica claims every expired lease, reattaches "
        f"and polls each job once (a client that answers at once): {fmt(snap_s)} s from "
        f"snapshots, {fmt(full_s)} s replaying in full, {fmt(ratio)}× (fill {fmt(fill_s)} s)"
    )


def measure_writes(section: Section, root: Path, streams: int, rounds: int) -> None:
    """The write loop's CPU, and the share of it spent on snapshots."""
    for every in WRITE_EVERY:
        store = SqliteStore(root / f"writes-{every}.db")
        writers = [StreamWriter(None, f"w-{i}", JOB, NEWER_WATCH_WINS) for i in range(streams)]
        for i, w in enumerate(writers):
            w.snapshot_every = every
            w.snapshot_seq = -1 - i % every  # (the phases spread: a few fall due per round)
        t = 1_700_000_000.0
        start_cpu, snap_cpu, written = time.process_time(), 0.0, 0
        for _ in range(rounds):
            t += 10.0
            batches = []
            for w in writers:
                e = w.event(StatusObserved, t, status="IN_PROGRESS")
                batches.append((w.stream, [e], w.next_seq))
            for first in range(0, len(batches), 500):
                group = batches[first : first + 500]
                assert not any(append_many(store, group))
                due = []
                for stream, events, _ in group:
                    w = writers[int(stream[2:])]
                    w.took(events)
                    if w.snapshot_due():
                        due.append(w.snapshot_request())
                if due:  # what the SnapshotWriter's thread does after the commit
                    s0 = time.thread_time()
                    written += save_snapshots(store, due)
                    snap_cpu += time.thread_time() - s0
        total = time.process_time() - start_cpu
        store.close()
        share = snap_cpu / total
        events = streams * rounds
        section.rows.append(
            Row(
                f"snapshot writes' share of a write loop's CPU, every {every} events",
                share * 100,
                "%",
                f"< {GOAL_CPU * 100:g} %",
                share < GOAL_CPU,
            )
        )
        section.details.append(
            f"write loop, snapshot every {every}: {events:,} events to {streams} streams "
            f"({rounds} rounds, durable SQLite, groups of 500): {fmt(total)} s CPU, of which "
            f"{written} snapshots {fmt(snap_cpu * 1000)} ms ({fmt(share * 100)} %, "
            f"{fmt(snap_cpu / max(1, written) * 1e6)} µs each)"
        )


def run(quick: bool) -> list[Section]:
    start = time.perf_counter()
    n = 1_000 if quick else 10_000
    section = Section(f"reattach {n:,} jobs from snapshots")
    with tempfile.TemporaryDirectory(prefix="flashfsm-bench-") as tmp:
        root = Path(tmp)
        counter = iter(range(100))

        def sqlite() -> SqliteStore:
            return SqliteStore(root / f"events-{next(counter)}.db", durable=False)

        measure_reattach(section, "SQLite", sqlite, n)
        for path in root.glob("events-*.db*"):
            path.unlink()
        for every in RESTART_EVERY:
            measure_restart(section, "SQLite", sqlite, n, every)
            for path in root.glob("events-*.db*"):
                path.unlink()
        dsn = os.environ.get(PG_ENV)
        if dsn:
            from flashfsm.adapters.postgres import PostgresStore

            tables: list[str] = []

            def postgres() -> PostgresStore:
                tables.append(f"bench_snapshots_{os.getpid()}_{len(tables)}")
                return PostgresStore(dsn, table=tables[-1])

            try:
                measure_reattach(section, "Postgres", postgres, n)
                for every in RESTART_EVERY:
                    measure_restart(section, "Postgres", postgres, n, every)
            finally:
                _drop(dsn, tables)
        else:
            section.details.append(f"Postgres: not measured ({PG_ENV} not set)")
        measure_writes(section, root, 200 if quick else 1_000, 600 if quick else 1_000)
    section.seconds = time.perf_counter() - start
    return [section]


def _drop(dsn: str, tables: list[str]) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            for name in (table, *(f"{table}_{x}" for x in ("snapshots", "open", "replicas"))):
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def main() -> None:
    bench_main(__doc__, run)


if __name__ == "__main__":
    main()
