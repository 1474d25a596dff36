"""What the rules know about one job: `JobState`, rebuilt from its events by the fold.

A timer is a value, `(since, seq)`: when it started (seconds on the recorded clock) and
the seq of the event that started it, which a verdict quotes as evidence. A state
holds its running timers by name (`JobState.timers`), so a rule that declares a new timer
needs no new field here. The rules declare which observations arm, restart and clear each
timer (`flashfsm.fsm.rules`); the fold (`flashfsm.fsm.job.evolve`) applies those
declarations and keeps the bookkeeping of the poll itself (which reads are still due,
when the next fetch is).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from flashfsm.events.models import (
    Concluded,
    HealthObserved,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.events.policy import DEFAULT_POLICY, GracePolicy
from flashfsm.fsm.table import INITIAL, JobPhase

#: A running timer: `(since, seq)`, read as `timer[SINCE]` and `timer[SEQ]`. A plain tuple,
#: not a named one: the garbage collector stops tracking an exact tuple of numbers, and a
#: supervisor holds a few timers for each of thousands of sleeping watches.
Timer = tuple[float, int]
SINCE, SEQ = 0, 1


@dataclass(slots=True)
class JobState:
    """Everything the rules need about one job, rebuilt from its events."""

    state: str = INITIAL.value  # the machine phase, driven by the shared Machine
    stream: str | None = None
    next_seq: int = 0
    last_at: float | None = None
    # submission and watch
    submitted: JobSubmitted | None = None
    policy: GracePolicy = DEFAULT_POLICY
    watch: WatchStarted | None = None
    first_watch: WatchStarted | None = None
    # schedule of the next fetch
    next_fetch_at: float | None = None
    wait_anchor: float = 0.0
    wait_s: float = 0.0
    # the current poll
    cycle: str | None = None  # "status" or "error" once the poll's fetch is in
    status: StatusObserved | None = None  # the latest good status answer
    fetch_error: StatusFetchFailed | None = None
    pending: tuple[str, ...] = ()
    health: HealthObserved | None = None  # this poll's probe answer
    probed: bool = False  # this poll made a health probe (answered or failed)
    forced_heartbeat: HeartbeatObserved | None = None  # the poll's last forced read
    forced_read_errors: tuple[int, ...] = ()  # seqs of this poll's failed forced reads
    forced_retry_at: float | None = None  # when the failed forced read is due again
    failure_text: str | None = None
    failure_seq: int | None = None
    error_seqs: tuple[int, ...] = ()  # the current run of consecutive status errors
    # the rules' running timers by name (see `flashfsm.fsm.rules.TIMERS`), and a bit per
    # running timer (the fold's fast test; only the fold's `_signal` changes either)
    timers: dict[str, Timer] = field(default_factory=dict)
    running: int = 0
    # pacing of the reads
    last_status: str | None = None
    last_probe_at: float | None = None
    heartbeat_asked_at: float | None = None  # the last poll that asked for a regular read
    heartbeat_gap_read: bool = False  # the first poll after a blind gap reads, off the pace
    # heartbeats
    hb_key: tuple[Any, ...] | None = None  # the last heartbeat that counted as progress
    last_heartbeat: HeartbeatObserved | None = None  # the last one recorded
    training_seen: bool = False
    # the worker, as the platform lists it (a watch with a worker reader)
    worker: WorkerObserved | None = None  # the last worker record read
    picked_up: bool = False  # a status has said a worker has the job (ever)
    queue_record: int | None = None  # the seq of this queue spell's last worker record
    worker_log: WorkerLogObserved | None = None  # the worker's log, read before a failure
    # the last answer of each read declared outside the core (`flashfsm.fsm.reads`), by
    # name (replaced, never changed in place: a copy may share it)
    observed: dict[str, Any] = field(default_factory=dict)
    # the end
    verdict: Concluded | None = None
    gaps: float = 0.0  # total blind time charged to no timer (D2)
    # no good status since a blind gap (or since a first watch that came late): a 404 now
    # may be a job that finished meanwhile, judged on the worker's evidence (D9)
    blind: bool = False

    @property
    def phase(self) -> JobPhase:
        """The machine state as an enum."""
        return JobPhase(self.state)

    @property
    def done(self) -> bool:
        """True once the log holds a verdict."""
        return self.verdict is not None

    @property
    def submitted_at(self) -> float | None:
        """When the job was submitted, if the log knows."""
        return None if self.submitted is None else self.submitted.submitted_at

    @property
    def has_heartbeat_reader(self) -> bool:
        """True when the current watch reads the worker's heartbeat."""
        return self.watch is not None and self.watch.has_heartbeat_reader

    def copy(self) -> JobState:
        """An independent copy: what `evolve` does to this state no longer changes it."""
        twin = copy.copy(self)
        twin.timers = dict(self.timers)
        return twin

    def snapshot(self) -> dict[str, Any]:
        """Every field as a dict (what the replay-equals-live properties compare)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
