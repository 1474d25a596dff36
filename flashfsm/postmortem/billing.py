"""The billing model: what the provider charges for, as the ledger applies it.

This module is the one place that knows how a GPU worker is billed; the ledger
(`flashfsm.postmortem.ledger`) finds each worker of an attempt in the job's log and asks this
model when its bill starts, when it stops and what it costs. Another provider's model
(per-minute rounding, billed queue time, a minimum charge) is a change to this one file.

The model is RunPod serverless's for flex workers, as its pricing page states it
(https://docs.runpod.io/serverless/pricing): a worker is billed per second "from when a
worker starts until it fully stops", during its start time (the cold start: container
start, model load), its execution time and its idle timeout (the time it stays up after
its request) — the queue itself is free: a job waiting with no worker up costs nothing.
Every worker the job's log names with a recorded start is billed: the ones that took the
job, and the ones the platform listed while the job waited (`WorkerObserved` read while
IN_QUEUE: a crash-looping worker, one throttled or still starting): the platform started
them, and bills a worker from its start, though they never took the job. Two workers billed
at once are each billed. Applied to a job:

- **start**: when the platform started the worker (`WorkerObserved.started_at`), never
  before the job's submission (a warm worker started earlier was billed to whoever used it
  then) nor after the record that showed it; with no such record for the worker that took
  the job (a log from before the watch read them) the pickup, the first status that showed
  a worker had the job. A worker named with no recorded start otherwise (only by a
  worker-log read) is not billed: nothing says when it started.
- **stop**: whichever comes first of the endpoint's teardown (the run's `EndpointDeleted`,
  or the sweeper's `EndpointReaped`) and the worker's release (the job reached a terminal
  status, or was cancelled) plus the endpoint's idle timeout: one stop for every worker of
  the attempt. A job requeued by the platform leaves its worker at the requeue; the next
  worker is billed from its own start. A worker with none of these recorded is still
  billing (an *open* bill).
- **idle timeout**: the one recorded for the endpoint — the value flashfsm set when it
  deployed (`EndpointDeployed.idle_timeout_s`, "recorded"), else the platform's record of
  it (`WorkerObserved.idle_timeout_s`, "platform"), else, for a deploy recorded before the
  value was (`EndpointDeployed` v1), runpod-flash's default that applied then
  (`SDK_DEFAULT_IDLE_TIMEOUT_S`, "sdk-default"), else an assumption: RunPod's documented
  default (`ASSUMED_IDLE_TIMEOUT_S`, "assumed").

Known approximations: seconds are not rounded up per worker (RunPod rounds each worker's
bill up to the second: at most a second per worker more than the ledger); a release is
taken at the poll that first saw the terminal status, and a requeue at the poll that saw
it (each up to a poll interval late: a new worker started before the old one's requeue was
seen is billed beside it until then); a worker listed while the job waited and never seen
to stop is billed to the attempt's stop, even when another worker took the job (an upper
bound: the platform may have stopped it sooner); active (always-on) workers, storage and
network volumes are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from flashfsm.fsm.table import JobPhase

#: Where the model comes from.
SOURCE = "https://docs.runpod.io/serverless/pricing"
#: The idle timeout runpod-flash 1.21.0 gives an endpoint when told none
#: (`Endpoint(idle_timeout=60)`, `ServerlessResource.idleTimeout = 60`): what a deploy
#: recorded as `EndpointDeployed` v1 (before flashfsm set the value itself) ran with.
SDK_DEFAULT_IDLE_TIMEOUT_S = 60.0
#: RunPod's documented default idle timeout ("default: 5 seconds"): assumed for a worker
#: whose endpoint's idle timeout nothing recorded (a bare job log from an older watch).
ASSUMED_IDLE_TIMEOUT_S = 5.0
#: How close two times must be to be the same moment: the platform gives a worker's start
#: in RFC 3339 to the microsecond, the log's times are floats; a start a few microseconds
#: after the submission is the submission, not a sliver of queue.
TIME_RESOLUTION_S = 1e-3
#: Where an attempt's idle timeout came from, the most trusted first (see the module notes).
IDLE_TIMEOUT_SOURCES: tuple[str, ...] = ("recorded", "platform", "sdk-default", "assumed")
#: How a worker's bill can end: its job was requeued (the worker lost it), the endpoint was
#: torn down by its run or reaped by the sweeper, its idle timeout ran out after the
#: release, or nothing recorded an end ("open": still billing).
STOP_REASONS: tuple[str, ...] = ("requeue", "teardown", "reap", "idle timeout", "open")


@dataclass(frozen=True, slots=True)
class IdleTimeout:
    """An endpoint's idle timeout as the ledger bills it, and where the value came from
    (one of `IDLE_TIMEOUT_SOURCES`)."""

    seconds: float
    source: str

    @property
    def recorded(self) -> bool:
        """Whether flashfsm recorded the value it set (nothing had to be looked up or assumed)."""
        return self.source == "recorded"


@dataclass(frozen=True, slots=True)
class BillingModel:
    """How a provider bills a worker: when its bill starts and stops, and at what rate."""

    name: str
    source: str
    billed_phases: frozenset[str]  # job phases during which a worker holds the job
    idle_timeout_s: float  # assumed when nothing records the endpoint's idle timeout
    #: RunPod statuses after which the worker no longer holds the job (it goes idle)
    released_statuses: frozenset[str] = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
    #: the idle timeout an endpoint deployed before flashfsm recorded it ran with
    sdk_default_idle_timeout_s: float = SDK_DEFAULT_IDLE_TIMEOUT_S

    def billed(self, phase: str) -> bool:
        """Whether a worker holds (and bills for) a job in `phase`."""
        return phase in self.billed_phases

    def idle_timeout(
        self, recorded: IdleTimeout | None = None, platform_s: float | None = None
    ) -> IdleTimeout:
        """The idle timeout to bill by: `recorded` when the deploy recorded the value it set,
        else the platform's (`platform_s`), else `recorded` when it is the SDK's default of
        a deploy that recorded none, else the assumed default."""
        if recorded is not None and recorded.source == "recorded":
            return recorded
        if platform_s is not None:
            return IdleTimeout(platform_s, "platform")
        if recorded is not None:
            return recorded
        return IdleTimeout(self.idle_timeout_s, "assumed")

    def deployed_idle_timeout(self, idle_timeout_s: float | None) -> IdleTimeout:
        """What an `EndpointDeployed` says of its endpoint's idle timeout: the value set
        (v2), else runpod-flash's default that applied when none was recorded (v1)."""
        if idle_timeout_s is not None:
            return IdleTimeout(idle_timeout_s, "recorded")
        return IdleTimeout(self.sdk_default_idle_timeout_s, "sdk-default")

    def worker_start(
        self, started_at: float | None, picked_up_at: float, not_before: float
    ) -> tuple[float, str]:
        """When a worker's bill starts, and from what: the platform's start of the worker
        (never before `not_before`, the job's submission, nor after `picked_up_at`, the
        pickup or the worker record that showed it), or, with none recorded, the pickup."""
        if started_at is None:
            return picked_up_at, "pickup"
        start = min(max(started_at, not_before), picked_up_at)
        for bound in (not_before, picked_up_at):  # a time the platform rounded to the µs
            if abs(start - bound) < TIME_RESOLUTION_S:
                start = bound
        return start, "platform"

    def worker_stop(
        self,
        released_at: float | None,
        idle_timeout_s: float,
        teardown_at: float | None,
        reaped_at: float | None,
        not_before: float,
    ) -> tuple[float | None, str]:
        """When the worker that holds (or held) a job stops billing, and why: the first of
        its release plus the idle timeout, the endpoint's teardown and the sweeper's reap
        (a teardown or reap recorded before `not_before`, the verdict, counts at it); None
        and "open" when none is recorded: the worker is still billing."""
        ends: list[tuple[float, str]] = []
        if teardown_at is not None:
            ends.append((max(teardown_at, not_before), "teardown"))
        if reaped_at is not None:
            ends.append((max(reaped_at, not_before), "reap"))
        if released_at is not None:
            ends.append((released_at + idle_timeout_s, "idle timeout"))
        if not ends:
            return None, "open"
        return min(ends, key=lambda end: end[0])

    def idle_end(self, verdict_at: float, released_at: float, teardown_at: float | None) -> float:
        """When billing stops after a verdict, with the assumed idle timeout: the release
        plus the idle timeout, or the endpoint's teardown if that comes first (never before
        the verdict). Kept for callers of the earlier model; the ledger uses `worker_stop`."""
        end = max(verdict_at, released_at) + self.idle_timeout_s
        if teardown_at is not None:
            end = min(end, max(teardown_at, verdict_at))
        return end

    def charge(self, seconds: float, price_per_hour: float) -> float:
        """The money `seconds` of billed worker time cost at `price_per_hour`."""
        return seconds * price_per_hour / 3600.0


#: RunPod serverless flex workers (see the module's notes).
RUNPOD_SERVERLESS = BillingModel(
    name="runpod-serverless",
    source=SOURCE,
    billed_phases=frozenset({JobPhase.SETUP.value, JobPhase.TRAINING.value}),
    idle_timeout_s=ASSUMED_IDLE_TIMEOUT_S,
)
#: The model the ledger applies.
MODEL = RUNPOD_SERVERLESS
