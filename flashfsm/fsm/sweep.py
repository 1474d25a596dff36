"""The idle-endpoint sweeper's rules and the fold of its stream (pure: no I/O, no clock).

Theory of operation. Runs that crash or finish without tearing their endpoint down leave
flash endpoints behind that hold the account's worker quota. A sweep lists the account's
endpoints, reads the health of every flash training endpoint, and deletes the ones that
have done nothing for long enough. "Long enough" spans sweeps: an endpoint's idle timer
starts at the first sweep that confirms it idle and clears at the first sweep that does
not, so one transient zero (a cold start, the gap between two jobs) never deletes
anything. The timers are the sweeper's only state, and they live in its event stream:

    IdleSeen(since)   the endpoint was confirmed idle by a sweep at `since`
    IdleCleared       it was busy, protected, unconfirmed or gone: the timer resets
    EndpointReaped    the sweeper deleted it

`replay_sweeper` folds that stream into a `SweeperState`; `idle_timers` is the part of it
the rules read. A restarted control plane folds the same log and keeps every grace window.

One sweep is: `read_health` turns each answer into a `Reading`, `plan_sweep` turns the
readings, the folded state and the sweep's time into the timer events to record and the
endpoints now due for deletion. The shell (`flashfsm.sweeper`) does the I/O.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from flashfsm.events.errors import CorruptLogError
from flashfsm.events.models import EndpointReaped, Event, IdleCleared, IdleSeen

FLASH_PREFIX = "flash-"  # what every flash training endpoint's name starts with
LIVE_PREFIX = "live-"  # runpod-flash registers a deployed endpoint as `live-<name>`

# Worker states that mean an endpoint is doing something, and the warm ones that only
# count as doing something when warm workers are not to be reaped.
WORKING = ("running", "initializing")
WARM = ("idle", "ready")
IN_FLIGHT = ("inQueue", "inProgress")


class Reading(StrEnum):
    """What a sweep learned about one flash endpoint."""

    IDLE = "idle"  # confirmed doing nothing: the timer runs
    BUSY = "busy"  # working, spinning up, or holding jobs
    UNCONFIRMED = "unconfirmed"  # no health answer, or an incomplete one
    PROTECTED = "protected"  # named by a live run: never touched


class ClearReason(StrEnum):
    """Why a timer cleared (the `reason` of `IdleCleared`)."""

    BUSY = "busy"
    PROTECTED = "protected"
    UNCONFIRMED = "unconfirmed"
    GONE = "gone"
    NOT_FLASH = "not_flash"


# --- names ---------------------------------------------------------------------------------


def bare_name(name: str) -> str:
    """The endpoint name without runpod-flash's `live-` registration prefix."""
    return name.removeprefix(LIVE_PREFIX)


def is_flash_endpoint(name: str) -> bool:
    """Only flash training endpoints are ever swept, in either registered form."""
    return bare_name(name).startswith(FLASH_PREFIX)


def protected_names(protected: Iterable[str]) -> frozenset[str]:
    """The bare forms of the protected names: a live run may be named either way."""
    if isinstance(protected, str):
        protected = (protected,)
    return frozenset(bare_name(p) for p in protected if isinstance(p, str) and p)


def is_protected(name: str, protected: Collection[str]) -> bool:
    """A run's endpoint is protected whichever form the endpoint or the caller used.

    `protected` must hold bare names (see `protected_names`).
    """
    return bare_name(name) in protected


# --- health --------------------------------------------------------------------------------


def _count(value: Any) -> float | None:
    """A worker or job count: missing is 0; anything but a non-negative number is unusable."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def read_health(health: Any, *, reap_warm: bool) -> Reading:
    """Judge one `/health` answer.

    Without a non-empty `workers` object and a `jobs` object the answer cannot prove the
    endpoint idle, and a malformed count proves nothing either. Busy means a worker is
    running or initializing, or a job is queued or in progress; with `reap_warm` False a
    warm (idle or ready) worker counts as busy too, so only endpoints scaled to zero go.
    """
    if not isinstance(health, Mapping):
        return Reading.UNCONFIRMED
    workers, jobs = health.get("workers"), health.get("jobs")
    if not isinstance(workers, Mapping) or not workers or not isinstance(jobs, Mapping):
        return Reading.UNCONFIRMED
    busy_states = WORKING if reap_warm else WORKING + WARM
    counts = [_count(workers.get(k)) for k in busy_states]
    counts += [_count(jobs.get(k)) for k in IN_FLIGHT]
    if any(c is None for c in counts):
        return Reading.UNCONFIRMED
    return Reading.BUSY if sum(c for c in counts if c is not None) > 0 else Reading.IDLE


# --- the fold ------------------------------------------------------------------------------


@dataclass
class SweeperState:
    """The sweeper stream folded: running idle timers and what is already done."""

    stream: str | None = None
    next_seq: int = 0
    timers: dict[str, float] = field(default_factory=dict)  # endpoint id -> idle since
    touched_at: dict[str, float] = field(default_factory=dict)  # endpoint id -> last record
    reaped: set[str] = field(default_factory=set)


def evolve_sweeper(s: SweeperState, event: Event) -> SweeperState:
    """Fold one sweeper event into the state (in place) and return it."""
    if event.seq != s.next_seq or (s.stream is not None and event.stream != s.stream):
        raise CorruptLogError(
            "replay",
            event.stream,
            f"expected seq {s.next_seq} of stream {s.stream or event.stream!r}, "
            f"got seq {event.seq} ({event.kind})",
            seq=event.seq,
        )
    match event:
        case IdleSeen():
            # A timer already running keeps its start: idleness is measured from the first
            # confirmation of an unbroken run of them.
            s.timers.setdefault(event.endpoint_id, event.since)
        case IdleCleared():
            s.timers.pop(event.endpoint_id, None)
        case EndpointReaped():
            s.timers.pop(event.endpoint_id, None)
            s.reaped.add(event.endpoint_id)
        case _:
            raise CorruptLogError(
                "replay", event.stream, f"{event.kind} is not a sweeper event", seq=event.seq
            )
    s.touched_at[event.endpoint_id] = max(s.touched_at.get(event.endpoint_id, event.at), event.at)
    s.stream = event.stream
    s.next_seq = event.seq + 1
    return s


def replay_sweeper(events: Iterable[Event], state: SweeperState | None = None) -> SweeperState:
    """The state a sweeper log folds to (continuing from `state` when given)."""
    s = SweeperState() if state is None else state
    for event in events:
        evolve_sweeper(s, event)
    return s


def idle_timers(events: Iterable[Event]) -> dict[str, float]:
    """Endpoint id -> when its current unbroken idle run began, from the sweeper's log."""
    return dict(replay_sweeper(events).timers)


# --- one sweep -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Record `IdleSeen`: the endpoint's idle run begins at `since`."""

    endpoint_id: str
    endpoint_name: str
    since: float


@dataclass(frozen=True, slots=True)
class ClearTimer:
    """Record `IdleCleared`: the endpoint's idle run is over."""

    endpoint_id: str
    reason: ClearReason


@dataclass(frozen=True, slots=True)
class Due:
    """An endpoint idle for at least the grace: delete it."""

    endpoint_id: str
    endpoint_name: str
    since: float


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """What one sweep records before deleting, and what it deletes."""

    records: tuple[StartTimer | ClearTimer, ...] = ()
    due: tuple[Due, ...] = ()
    idle: tuple[str, ...] = ()  # every endpoint this sweep confirmed idle


def plan_sweep(
    state: SweeperState,
    readings: Mapping[str, tuple[str, Reading]],
    listed: Mapping[str, str],
    now: float,
    min_idle_s: float,
) -> SweepPlan:
    """The timer records and the deletions one sweep's readings call for.

    `readings` maps each flash endpoint's id to (name, reading); `listed` maps every
    endpoint the account listed to its name. A timer whose endpoint was not confirmed idle
    clears, whatever the reason. An endpoint already reaped, or recorded by another sweeper
    after this sweep's `now`, is left alone: a newer record wins over an older reading.
    """
    records: list[StartTimer | ClearTimer] = []
    due: list[Due] = []
    idle: list[str] = []
    for endpoint_id, (name, reading) in readings.items():
        if endpoint_id in state.reaped or state.touched_at.get(endpoint_id, now) > now:
            continue
        since = state.timers.get(endpoint_id)
        if reading is not Reading.IDLE:
            if since is not None:
                records.append(ClearTimer(endpoint_id, ClearReason(reading.value)))
            continue
        idle.append(endpoint_id)
        if since is None:
            since = now
            records.append(StartTimer(endpoint_id, name, since))
        if idle_long_enough(since, now, min_idle_s):
            due.append(Due(endpoint_id, name, since))
    for endpoint_id in state.timers.keys() - readings.keys():
        if state.touched_at.get(endpoint_id, now) > now:
            continue
        reason = ClearReason.GONE if endpoint_id not in listed else ClearReason.NOT_FLASH
        records.append(ClearTimer(endpoint_id, reason))
    return SweepPlan(tuple(records), tuple(due), tuple(idle))


def idle_long_enough(since: float, now: float, min_idle_s: float) -> bool:
    """The grace rule: an idle run must have lasted `min_idle_s` before a delete."""
    return now - since >= min_idle_s
