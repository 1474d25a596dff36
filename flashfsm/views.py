"""What a stream is and how the tools read it: job, run or sweeper, each through its own fold.

Theory of operation. A store holds three kinds of stream, and `stream_kind` is the one test
that tells them apart: a run's stream starts with `RunStarted`, a sweeper's holds only its
idle-timer events, and everything else is a job's. Every view reads a stream through the
fold of its kind — a job log through `flashfsm.fsm.job` and `flashfsm.postmortem.explain`, a run
through `flashfsm.fsm.run.replay_run`, a sweeper log through
`flashfsm.fsm.sweep.evolve_sweeper` (`sweeper_view`) — and never re-derives what a fold
already knows. A run is named by its `RunPhase` through one table (`RUN_PHASE_LABELS`).

Like the folds it reads, this module does no I/O and reads no clock: a run's job streams
come from the caller's `load`, and a live view takes the caller's wall-clock reading.

Time. A log is measured on its own clock, never on the reader's alone: a simulator's log
runs on a virtual clock (ahead of the wall clock, or years behind it) and a finished log
was finished long ago. `view_now` is the one place the time a log is viewed at is decided:
a concluded log (a job's verdict, a run's result) is viewed at its last event, so nothing
in it keeps ageing; a live one at the later of the wall clock and its last event, so no
elapsed time is ever negative. Every view below takes the wall clock and goes through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from flashfsm.events.models import (
    SWEEPER_EVENTS,
    Concluded,
    EndpointReaped,
    Event,
    IdleCleared,
    IdleSeen,
    RunConcluded,
    RunStarted,
)
from flashfsm.fsm.run import Attempt, RunPhase, RunState, replay_run
from flashfsm.fsm.sweep import SweeperState, evolve_sweeper
from flashfsm.postmortem.explain import WatchView, watch_view

StreamKind = Literal["job", "run", "sweeper"]
STREAM_KINDS: tuple[StreamKind, ...] = ("job", "run", "sweeper")


def stream_kind(events: Sequence[Event]) -> StreamKind:
    """What kind of stream a log is: "run" (it starts with `RunStarted`), "sweeper" (it holds
    only `IdleSeen`, `IdleCleared` and `EndpointReaped`), else "job"."""
    if events and isinstance(events[0], RunStarted):
        return "run"
    if events and all(isinstance(e, SWEEPER_EVENTS) for e in events):
        return "sweeper"
    return "job"


# --- time ---------------------------------------------------------------------------------


def concluded(events: Sequence[Event]) -> bool:
    """Whether a log is finished: a job's holds its verdict, a run's its result (a sweeper's
    never finishes)."""
    kind = stream_kind(events)
    if kind == "sweeper":
        return False
    done = RunConcluded if kind == "run" else Concluded
    return any(isinstance(e, done) for e in events)


def view_now(events: Sequence[Event], wall: float) -> float:
    """The time to view a log at, on its own clock: its last event's time when it is
    concluded, else the later of `wall` (the reader's clock) and its last event's time."""
    if not events:
        return wall
    last = max(e.at for e in events)
    return last if concluded(events) else max(wall, last)


def job_view(events: Sequence[Event], wall: float) -> WatchView:
    """The live view of a job log (`watch_view`) at `view_now(events, wall)`."""
    return watch_view(events, view_now(events, wall))


# --- runs ---------------------------------------------------------------------------------

#: What each run phase is called wherever a run is shown.
RUN_PHASE_LABELS: dict[RunPhase, str] = {
    RunPhase.STARTING: "STARTING",
    RunPhase.DEPLOYING: "DEPLOYING",
    RunPhase.SUBMITTING: "SUBMITTING",
    RunPhase.WATCHING: "WATCHING",
    RunPhase.BETWEEN: "BETWEEN ATTEMPTS",
    RunPhase.SUCCEEDED: "SUCCEEDED",
    RunPhase.FAILED: "FAILED",
    RunPhase.CANCELLED: "CANCELLED",
}


def run_label(run: RunState, *, failure: bool = True) -> str:
    """The run's phase as shown; a failed run names its failure kind unless `failure` is False."""
    label = RUN_PHASE_LABELS[run.phase]
    if failure and run.phase is RunPhase.FAILED and run.result is not None and run.result.failure:
        return f"{label} ({run.result.failure})"
    return label


def last_job_stream(run: RunState) -> str | None:
    """The job stream of the last attempt that queued a job (None before any did)."""
    return next((a.job_stream for a in reversed(run.attempts) if a.job_stream), None)


def attempt_outcome(attempt: Attempt, run: RunState | None = None) -> str:
    """How an attempt ended: "ok", "<failure> (<rule>)", its deploy or submit error; or, not
    ended, where its run stands ("no outcome yet (WATCHING)")."""
    ended = attempt.ended
    if ended is not None:
        return "ok" if ended.ok else f"{ended.failure} ({ended.rule or 'no job'})"
    if attempt.deploy_error is not None:
        return f"deploy failed: {attempt.deploy_error}"
    if attempt.submit_error is not None:
        return f"submit failed: {attempt.submit_error}"
    return "no outcome yet" if run is None else f"no outcome yet ({run_label(run)})"


@dataclass(frozen=True, slots=True)
class RunView:
    """A run as a live watcher sees it: its fold, its label, and its current job's view."""

    stream: str
    run: RunState
    label: str
    job_stream: str | None
    job: WatchView | None

    @property
    def attempts(self) -> int:
        """How many attempts the run has started."""
        return len(self.run.attempts)


def run_view(
    stream: str, events: Sequence[Event], load: Callable[[str], Sequence[Event]], wall: float
) -> RunView:
    """The live view of a run's stream with the wall clock at `wall` (see `view_now`: a
    finished run is viewed at its last event); its last job stream comes from `load`."""
    run = replay_run(events)
    job_stream = last_job_stream(run)
    job = None
    if job_stream is not None:
        job_events = load(job_stream)
        if job_events:
            job = job_view(job_events, view_now(events, wall))
    return RunView(stream, run, run_label(run), job_stream, job)


# --- the sweeper --------------------------------------------------------------------------

IdleOutcome = Literal["running", "cleared", "reaped"]


@dataclass(frozen=True, slots=True)
class SweeperRow:
    """One event of a sweeper's stream, with the idle time it started, ended or reaped."""

    seq: int
    at: float
    offset: float  # seconds since the stream's first event
    kind: str
    endpoint_id: str
    endpoint_name: str
    since: float | None  # the idle timer this event started, cleared or reaped
    idle_s: float | None  # how long the endpoint had been idle (None: a timer started)
    reason: str = ""  # why a timer cleared
    running: int = 0  # timers running after this event


@dataclass(frozen=True, slots=True)
class IdlePeriod:
    """One unbroken idle run of an endpoint, as the sweeper's timers recorded it."""

    endpoint_id: str
    endpoint_name: str
    since: float
    end: float | None  # when the timer cleared or the endpoint was reaped (None: running)
    outcome: IdleOutcome
    reason: str = ""  # why it cleared
    reaped_idle_s: float | None = None  # the idle time the sweeper recorded when it reaped

    def idle_s(self, now: float) -> float:
        """How long the endpoint was (or, running, has been at `now`) idle."""
        if self.reaped_idle_s is not None:
            return self.reaped_idle_s
        return (self.end if self.end is not None else now) - self.since


@dataclass(frozen=True, slots=True)
class SweeperView:
    """A sweeper's stream read through the sweeper fold, as of `now`."""

    stream: str | None
    events: int
    start: float
    last_at: float
    now: float
    rows: tuple[SweeperRow, ...]
    periods: tuple[IdlePeriod, ...]  # in the order they started

    @property
    def timers(self) -> tuple[IdlePeriod, ...]:
        """The idle timers still running, the longest idle first."""
        running = [p for p in self.periods if p.outcome == "running"]
        return tuple(sorted(running, key=lambda p: p.since))

    @property
    def reaped(self) -> tuple[IdlePeriod, ...]:
        """The endpoints the sweeper deleted."""
        return tuple(p for p in self.periods if p.outcome == "reaped")

    @property
    def cleared(self) -> tuple[IdlePeriod, ...]:
        """The idle runs that ended without a delete."""
        return tuple(p for p in self.periods if p.outcome == "cleared")

    @property
    def summary(self) -> str:
        """What the sweeper did, as one phrase: "1 reaped, 1 cleared, 1 timer(s) running"."""
        return (
            f"{len(self.reaped)} reaped, {len(self.cleared)} cleared, "
            f"{len(self.timers)} timer(s) running"
        )


def sweeper_view(events: Sequence[Event], wall: float | None = None) -> SweeperView:
    """A sweeper's stream, event by event and idle run by idle run, viewed with the wall
    clock at `wall` (`view_now`: never before its last event; the last event's time when
    not given). Raises `CorruptLogError` for a log the sweeper fold refuses."""
    state = SweeperState()
    names: dict[str, str] = {}
    periods: list[IdlePeriod] = []
    running: dict[str, int] = {}  # endpoint id -> index of its open period in `periods`
    rows: list[SweeperRow] = []
    start = events[0].at if events else 0.0

    def begin(endpoint: str, since: float) -> None:
        running[endpoint] = len(periods)
        periods.append(IdlePeriod(endpoint, names.get(endpoint, ""), since, None, "running"))

    def end(
        endpoint: str, at: float, outcome: IdleOutcome, reason: str = "", idle: float | None = None
    ) -> None:
        index = running.pop(endpoint, None)
        if index is not None:
            p = periods[index]
            periods[index] = IdlePeriod(
                p.endpoint_id, p.endpoint_name, p.since, at, outcome, reason, idle
            )

    for event in events:
        before = dict(state.timers)
        evolve_sweeper(state, event)  # refuses anything but the sweeper's events
        assert isinstance(event, SWEEPER_EVENTS)
        endpoint = event.endpoint_id
        since = before.get(endpoint)
        idle_s: float | None = None
        reason = ""
        match event:
            case IdleSeen():
                names[endpoint] = event.endpoint_name or names.get(endpoint, "")
                if since is None:
                    begin(endpoint, event.since)
                since = state.timers[endpoint]
            case IdleCleared():
                reason = event.reason
                idle_s = None if since is None else event.at - since
                end(endpoint, event.at, "cleared", reason=reason)
            case EndpointReaped():
                names[endpoint] = event.endpoint_name or names.get(endpoint, "")
                idle_s = event.idle_s
                if since is None:  # no timer of this log ran: the reap's own record says
                    since = event.at - event.idle_s
                    begin(endpoint, since)
                end(endpoint, event.at, "reaped", idle=event.idle_s)
        rows.append(
            SweeperRow(
                seq=event.seq,
                at=event.at,
                offset=event.at - start,
                kind=event.kind,
                endpoint_id=endpoint,
                endpoint_name=names.get(endpoint, ""),
                since=since,
                idle_s=idle_s,
                reason=reason,
                running=len(state.timers),
            )
        )
    last_at = events[-1].at if events else start
    return SweeperView(
        stream=state.stream,
        events=len(events),
        start=start,
        last_at=last_at,
        now=last_at if wall is None else max(wall, last_at),
        rows=tuple(rows),
        periods=tuple(periods),
    )
