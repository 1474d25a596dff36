"""Capacity memory, the shell's half: read the store's recent runs and their job logs.

`recent_waits(store, now, policy)` reads (never writes) every run stream of the store that
was active within the policy's window, and each of its attempts' job logs, and turns them
into `flashfsm.fsm.capacity.JobWait`s: per attempt, where it ran (provider, GPU class), how
long its job waited for a worker, how much of that throttled, and whether it ended
`no_capacity`. `ranking_for(...)` makes the fields of the `CandidatesRanked` a new run
records from them (`flashfsm.fsm.capacity.ranking_fields`, pure).

Cost: one read of each run stream, and one of each job log whose attempt ended within the
window (or is still running). A log that does not decode is skipped with a warning: memory
is advice, and a damaged old log must not stop a new run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Candidate, RunStarted
from flashfsm.events.store import EventStore
from flashfsm.fsm.capacity import CapacityPolicy, JobWait, job_wait, ranking_fields
from flashfsm.fsm.run import replay_run

logger = logging.getLogger("flashfsm.capacity")

RUN_PREFIX = "run-"


def recent_waits(
    store: EventStore,
    now: float,
    policy: CapacityPolicy,
    *,
    exclude: Iterable[str] = (),
) -> tuple[list[JobWait], int]:
    """The job waits of the store's runs within `policy.window_s` before `now`, and how many
    job logs were read to find them. Streams in `exclude` (the run being started) are not
    read."""
    skip = set(exclude)
    since = now - policy.window_s
    waits: list[JobWait] = []
    read = 0
    for stream in store.streams():
        if not stream.startswith(RUN_PREFIX) or stream in skip:
            continue
        try:
            events = store.read(stream)
            if not events or not isinstance(events[0], RunStarted) or events[-1].at < since:
                continue
            run = replay_run(events)
            for a in run.attempts:
                ended_at = a.ended.at if a.ended is not None else None
                if a.job_stream is None or (ended_at is not None and ended_at < since):
                    continue  # no job (a deploy or submit error), or too old
                job_events = store.read(a.job_stream)
                read += 1
                w = job_wait(
                    a.started.provider,
                    a.started.gpu_class,
                    job_events,
                    failure=a.ended.failure if a.ended is not None else None,
                    ended_at=ended_at,
                )
                if w is not None and since <= w.at <= now:
                    waits.append(w)
        except FlashFsmError as exc:
            logger.warning("capacity memory: skipping %s (%s)", stream, exc)
    return waits, read


def ranking_for(
    store: EventStore,
    candidates: Sequence[Candidate],
    now: float,
    policy: CapacityPolicy,
    *,
    exclude: Iterable[str] = (),
) -> dict[str, Any]:
    """The fields of the `CandidatesRanked` a run starting at `now` records."""
    waits, read = recent_waits(store, now, policy, exclude=exclude)
    return ranking_fields(candidates, waits, now, policy, jobs_read=read)
