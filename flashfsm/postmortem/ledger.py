"""The waste ledger: where an attempt's time and money went, cause by cause.

Theory of operation. An attempt is the time from its start (a run's `AttemptStarted`; a bare
job log's first event) to the end of its billing. Its bill is the platform's: each worker the
job's log names with a recorded start — the ones that held the job, and the ones the platform
listed while the job waited (a crash-looping, throttled or starting worker) — is billed from
when the platform started it to when it stopped (`flashfsm.postmortem.billing` says how both
are read from the records), and the attempt's billed time is the sum of its workers' bills:
two workers billed at once are each billed. The ledger cuts the attempt's time into `Piece`s,
each with exactly one `Cause`, so every second is accounted for once; a stretch two (or more)
workers billed at once is one piece, and the other workers' time in it is an overlap piece
(`AttemptLedger.overlaps`), with their own cause:

- `deploy` (unbilled): a run's attempt deploying its endpoint and submitting its job;
- `queue` (unbilled): the job waiting for a worker (`QUEUED`, `THROTTLED`, `UNHEALTHY`)
  while no worker is billed;
- `cold_start`: a worker billed before its first training heartbeat: from its start to
  the pickup, then until training shows (after a requeue, the new worker's boot too); a
  worker billed while the job waits (it crash-loops, or starts) and one billed beside the
  worker that trains (an overlap) never trained either;
- `training`: the job trains (`TRAINING`, a training heartbeat from this worker seen);
- `stall`: in an attempt judged `STALLED`, the billed time from its last progress to the
  verdict, and on while the worker still held the job after it;
- `preempted`: in an attempt judged `PREEMPTED` or `LOST`, all its billed time before the
  worker let go of the job;
- `failed`: in an attempt that ended on any other failure (the job's own code, poll
  errors, a refused key, a cancel, a queue verdict: no capacity, a slow start), the same;
- `idle`: after the worker let go of the job (a terminal status, a cancel): billed for the
  endpoint's idle timeout, unless torn down first, and unbilled after, until the verdict.

A verdict that came while RunPod still ran the job (its last status not terminal: a stall,
a poll error, a crash loop still IN_QUEUE) with no cancel, teardown or reap recorded leaves
the bill *open*: the worker is billed on up to `as_of` (the caller's "now": by default the
newest event it passed), and the attempt says since when (`open_since`) and at what rate. A
sweeper's reap of the endpoint (`reaps`: endpoint id to the time of its `EndpointReaped`)
ends such a bill.

A what-if's verdict (`outcome`) changes the causes and when the run reacted (the caller
shifts the run's cancel and teardown with it), never what the platform did: the workers and
the release are read from the whole log, so a job nobody cancels bills on past an earlier
verdict exactly as it did. Prices come from the run's candidates
(`RunStarted.candidates[AttemptStarted.candidate].price_per_hour`) or the caller; without
one (a candidate nobody gave a price, a bare job log without `--price`) the ledger still
counts seconds and says the money is unknown (None, shown as "unpriced", never $0).
Nothing here does I/O or reads a clock: job streams come from the caller's `load`, "now"
from its `as_of`.

Why it is long: one bill per attempt, cause by cause, for a job log, a run and a whole
store, through one function (`attempt_bill`) that `cost`, `whatif`, `explain` and `timeline`
all price with.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import pairwise

from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    END_STAGE,
    SWEEPER_EVENTS,
    AttemptEnded,
    AttemptStarted,
    Concluded,
    EndpointDeleted,
    EndpointDeployed,
    EndpointReaped,
    Event,
    HeartbeatObserved,
    JobCancelled,
    JobSubmitted,
    RunStarted,
    StatusFetchFailed,
    StatusObserved,
    WorkerObserved,
)
from flashfsm.fsm.job import evolve
from flashfsm.fsm.rules import PROGRESS_TIMER, is_training_stage
from flashfsm.fsm.run import Attempt, replay_run
from flashfsm.fsm.state import SEQ, JobState
from flashfsm.fsm.table import RUNNING, WAITING, JobPhase
from flashfsm.postmortem.billing import MODEL, BillingModel, IdleTimeout


class Cause(StrEnum):
    """What a second of an attempt went to."""

    DEPLOY = "deploy"
    QUEUE = "queue"
    COLD_START = "cold_start"
    TRAINING = "training"
    STALL = "stall"
    PREEMPTED = "preempted"
    FAILED = "failed"
    IDLE = "idle"


#: Every cause, in the order the ledger lists them.
CAUSES: tuple[Cause, ...] = tuple(Cause)
#: The causes whose billed time bought nothing: the attempt's work was thrown away.
WASTE_CAUSES: frozenset[Cause] = frozenset({Cause.STALL, Cause.PREEMPTED, Cause.FAILED})
#: What each cause means, as the docs and the CLI say it.
CAUSE_MEANING: dict[Cause, str] = {
    Cause.DEPLOY: "deploying the endpoint and submitting the job (unbilled)",
    Cause.QUEUE: "waiting for a worker: IN_QUEUE, no worker billed (unbilled)",
    Cause.COLD_START: "a worker billed from its start, no training heartbeat from it yet "
    "(one crash-looping or starting while the job waits too)",
    Cause.TRAINING: "training (useful)",
    Cause.STALL: "a stalled attempt, from its last progress until the worker let go",
    Cause.PREEMPTED: "a preempted or lost attempt's billed time, thrown away",
    Cause.FAILED: "billed time of an attempt that failed otherwise, thrown away",
    Cause.IDLE: "after the worker let go of the job: its idle timeout (billed)",
}
_WAITING = frozenset(p.value for p in WAITING)
_RUNNING = frozenset(p.value for p in RUNNING)
_SETUP, _TRAINING = JobPhase.SETUP.value, JobPhase.TRAINING.value
# What a stretch of the job's log shows a worker doing (the ledger's own reading of the fold).
_WAIT, _BOOT, _TRAIN = "wait", "boot", "train"


@dataclass(frozen=True, slots=True)
class Piece:
    """A stretch of an attempt (epoch seconds) given to one cause, billed or not."""

    cause: Cause
    start: float
    end: float
    billed: bool
    #: how many workers the piece bills at once: 1, but an overlap piece (`AttemptLedger.
    #: overlaps`) stands for every worker billed beside the first one
    workers: int = 1

    @property
    def seconds(self) -> float:
        """How long the piece lasts."""
        return self.end - self.start

    @property
    def billed_s(self) -> float:
        """The worker-seconds the piece bills: its length for each worker (0: unbilled)."""
        return self.seconds * self.workers if self.billed else 0.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: its verdict's time, state, failure kind and rule."""

    at: float
    state: str
    ok: bool
    failure: str | None = None
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerBill:
    """One worker's bill: from its start to its stop (epoch seconds), and why each.

    `picked_up_at` is when it took the job (None: it never did, the platform listed it while
    the job waited: a crash-looping, throttled or starting worker); `start_source` is
    "platform" (the platform's record of the worker's start) or "pickup" (no record: billed
    from the first status that showed a worker had the job); `stop_reason` is one of
    `flashfsm.postmortem.billing.STOP_REASONS`; `status` is the worker's state as the
    platform last listed it (None: not recorded).
    """

    worker_id: str | None
    picked_up_at: float | None
    start: float
    stop: float
    start_source: str
    stop_reason: str
    status: str | None = None

    @property
    def seconds(self) -> float:
        """How long the worker was billed."""
        return self.stop - self.start


@dataclass(frozen=True, slots=True)
class AttemptLedger:
    """One attempt's time, cut into pieces by cause, its workers' bills and its price."""

    attempt: int | None
    stream: str | None  # the attempt's job stream
    gpu_class: str | None
    provider: str
    price_per_hour: float | None  # None: unknown, the money is unknown too
    start: float
    end: float
    pieces: tuple[Piece, ...]
    outcome: Outcome | None  # None: the attempt has not ended
    model: BillingModel = MODEL
    #: each worker the log names with a recorded start (or that held the job), with its bill
    workers: tuple[WorkerBill, ...] = ()
    #: the union of the workers' billed intervals: when anything was billed
    billed_intervals: tuple[tuple[float, float], ...] = ()
    #: the endpoint's idle timeout the bill used, and where it came from
    idle_timeout: IdleTimeout | None = None
    #: when the worker let go of the job (a terminal status, a cancel), None: it did not
    released_at: float | None = None
    #: the bill is still open since then (the verdict, or the log's last event without
    #: one): the worker holds the job and no cancel, teardown or reap is recorded; the
    #: attempt is billed up to `end` (the caller's `as_of`)
    open_since: float | None = None
    #: the counterfactual cancel and teardown applied (a what-if), else the recorded ones
    cancel_at: float | None = None
    teardown_at: float | None = None
    #: the time of the workers billed beside another one (a stretch two workers billed at
    #: once: the second's), each piece with its cause and how many workers it stands for;
    #: `pieces` count each second once, these the extra worker-seconds
    overlaps: tuple[Piece, ...] = ()

    def seconds(self, cause: Cause | None = None) -> float:
        """Seconds given to `cause` (every cause when None): each second of the attempt once."""
        return sum((p.seconds for p in self.pieces if cause is None or p.cause == cause), 0.0)

    @property
    def billed_s(self) -> float:
        """Billed seconds: every worker's bill, added up (the union of the billed intervals,
        and the overlaps: two workers billed at once are each billed)."""
        if self.billed_intervals:
            union = sum((end - start for start, end in self.billed_intervals), 0.0)
        else:
            union = sum((p.seconds for p in self.pieces if p.billed), 0.0)
        return union + sum((p.billed_s for p in self.overlaps), 0.0)

    @property
    def overlap_s(self) -> float:
        """Billed seconds of workers billed beside another one (see `overlaps`)."""
        return sum((p.billed_s for p in self.overlaps), 0.0)

    @property
    def unbilled_s(self) -> float:
        """Seconds of the attempt nobody paid for (deploy, queue, after the idle timeout)."""
        return sum((p.seconds for p in self.pieces if not p.billed), 0.0)

    @property
    def waste_s(self) -> float:
        """Billed seconds thrown away (`WASTE_CAUSES`)."""
        wasted = sum((p.seconds for p in self.pieces if p.billed and p.cause in WASTE_CAUSES), 0.0)
        return wasted + sum((p.billed_s for p in self.overlaps if p.cause in WASTE_CAUSES), 0.0)

    def billed_seconds(self, cause: Cause) -> float:
        """Billed seconds given to `cause` (the overlaps' too: worker-seconds, so they can
        be more than the attempt's `seconds(cause)`)."""
        billed = sum((p.seconds for p in self.pieces if p.billed and p.cause == cause), 0.0)
        return billed + sum((p.billed_s for p in self.overlaps if p.cause == cause), 0.0)

    def unbilled_seconds(self, cause: Cause) -> float:
        """Seconds given to `cause` that nobody paid for."""
        return sum((p.seconds for p in self.pieces if not p.billed and p.cause == cause), 0.0)

    def money(self, cause: Cause | None = None) -> float | None:
        """The money billed for `cause` (all billed time when None); None: no price."""
        if self.price_per_hour is None:
            return None
        seconds = self.billed_s if cause is None else self.billed_seconds(cause)
        return self.model.charge(seconds, self.price_per_hour)

    @property
    def waste_money(self) -> float | None:
        """The money of the billed time thrown away; None: no price."""
        if self.price_per_hour is None:
            return None
        return self.model.charge(self.waste_s, self.price_per_hour)

    @property
    def label(self) -> str:
        """How the attempt ended, in a few words: "SUCCEEDED", "STALLED (stall)", "open"."""
        o = self.outcome
        if o is None:
            return "open"
        return o.state if o.ok or not o.rule else f"{o.state} ({o.rule})"

    @property
    def billing_open(self) -> bool:
        """Whether the worker is still billing: no release, teardown or reap recorded."""
        return self.open_since is not None

    @property
    def open_rate_per_hour(self) -> float | None:
        """What the open bill accrues per hour (0 when the bill is closed; None: no price)."""
        if not self.billing_open:
            return 0.0
        return self.price_per_hour

    @property
    def idle_timeout_s(self) -> float | None:
        """The idle timeout the bill used (None: the attempt had no worker to bill)."""
        return None if self.idle_timeout is None else self.idle_timeout.seconds

    @property
    def idle_timeout_source(self) -> str | None:
        """Where the idle timeout came from: "recorded", "platform", "sdk-default", "assumed"."""
        return None if self.idle_timeout is None else self.idle_timeout.source

    @property
    def started_at_pickup(self) -> bool:
        """Whether a worker's bill starts at its pickup, no record of its start being there."""
        return any(w.start_source == "pickup" for w in self.workers)

    @property
    def stopped_by(self) -> str | None:
        """How the bill of the worker that stopped last ended (one of
        `flashfsm.postmortem.billing.STOP_REASONS`; None: no worker was billed)."""
        last = None
        for w in self.workers:  # the last listed of those that stop last
            if last is None or w.stop >= last.stop:
                last = w
        return None if last is None else last.stop_reason


@dataclass(frozen=True, slots=True)
class Ledger:
    """A job's or a run's attempts, each with its ledger, billed up to `as_of`."""

    stream: str | None
    kind: str  # "job" or "run"
    attempts: tuple[AttemptLedger, ...]
    state: str | None = None  # the run's result or the job's verdict state (None: open)
    as_of: float | None = None  # what an open bill is billed up to

    def seconds(self, cause: Cause | None = None) -> float:
        """Seconds given to `cause` over every attempt."""
        return sum(a.seconds(cause) for a in self.attempts)

    def billed_seconds(self, cause: Cause) -> float:
        """Billed seconds given to `cause` over every attempt."""
        return sum(a.billed_seconds(cause) for a in self.attempts)

    @property
    def billed_s(self) -> float:
        """Billed seconds over every attempt."""
        return sum(a.billed_s for a in self.attempts)

    @property
    def unbilled_s(self) -> float:
        """Unbilled seconds over every attempt."""
        return sum(a.unbilled_s for a in self.attempts)

    @property
    def waste_s(self) -> float:
        """Billed seconds thrown away over every attempt."""
        return sum(a.waste_s for a in self.attempts)

    @property
    def priced(self) -> bool:
        """Whether every attempt that was billed has a price."""
        return all(a.price_per_hour is not None for a in self.attempts if a.billed_s > 0)

    def money(self, cause: Cause | None = None) -> float | None:
        """The money billed (for `cause`) over every attempt; None when a price is missing."""
        if not self.priced:
            return None
        return sum(a.money(cause) or 0.0 for a in self.attempts)

    @property
    def waste_money(self) -> float | None:
        """The money thrown away over every attempt; None when a price is missing."""
        if not self.priced:
            return None
        return sum(a.waste_money or 0.0 for a in self.attempts)

    @property
    def failed(self) -> tuple[AttemptLedger, ...]:
        """The attempts that ended in a failure."""
        return tuple(a for a in self.attempts if a.outcome is not None and not a.outcome.ok)

    @property
    def open_attempts(self) -> tuple[AttemptLedger, ...]:
        """The attempts whose bill is still open (see `AttemptLedger.open_since`)."""
        return tuple(a for a in self.attempts if a.billing_open)

    @property
    def open_rate_per_hour(self) -> float | None:
        """What the open bills accrue per hour, together (None: one of them has no price)."""
        return _sum_money(a.open_rate_per_hour for a in self.open_attempts)


# --- one attempt --------------------------------------------------------------------------


#: How money nobody gave a price for is shown, by every surface (`cost`, `whatif`, the
#: timeline, the web view): never as $0.
UNPRICED = "unpriced"


def money_text(money: float | None) -> str:
    """Money as printed: `$1.27`, `$0.0042` under a cent, `-$0.25` spent more, `unpriced`
    without a price (`UNPRICED`)."""
    if money is None:
        return UNPRICED
    if money == 0:
        return "$0"
    sign = "-" if money < 0 else ""
    money = abs(money)
    return f"{sign}${money:.4f}" if money < 0.01 else f"{sign}${money:,.2f}"


def outcome_of(verdict: Concluded) -> Outcome:
    """A job verdict as an `Outcome`."""
    return Outcome(verdict.at, verdict.state, verdict.ok, verdict.failure, verdict.rule)


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What the run (and the sweeper) recorded of one attempt's job, next to its log: where
    its bill starts, how its run reacted to the verdict, the endpoint's idle timeout and
    the price. A bare job log's context comes from its `JobSubmitted` (`job_context`)."""

    attempt: int | None = None
    gpu_class: str | None = None
    provider: str = "runpod"
    price_per_hour: float | None = None
    endpoint_id: str | None = None
    start: float | None = None  # AttemptStarted (None: the log's first event)
    submitted_at: float | None = None  # JobQueued (None: the log's JobSubmitted)
    ended: Outcome | None = None  # the run's AttemptEnded, for a log without a verdict
    cancel_at: float | None = None  # JobCancelled (ok)
    teardown_at: float | None = None  # EndpointDeleted (ok)
    reap_at: float | None = None  # the sweeper's EndpointReaped
    idle_timeout: IdleTimeout | None = None  # what the run's EndpointDeployed says

    def shifted(self, verdict_at: float, by: float) -> AttemptContext:
        """This context with the run's reactions to the verdict recorded at `verdict_at` (a
        cancel, a teardown at or after it) moved by `by` seconds: the run answering another
        verdict as it answered the recorded one. A sweeper's reap stays where it was (it
        keeps its own clock, not the run's)."""
        if by == 0:
            return self

        def moved(at: float | None) -> float | None:
            return at if at is None or at < verdict_at else at + by

        return replace(self, cancel_at=moved(self.cancel_at), teardown_at=moved(self.teardown_at))


@dataclass(slots=True)
class _Pickup:
    at: float
    requeued_at: float | None = None
    record: WorkerObserved | None = None  # the worker read after the pickup
    waited: WorkerObserved | None = None  # the last worker read while the job waited for it

    @property
    def worker(self) -> WorkerObserved | None:
        """The platform's record of the worker that took the job: the read after the pickup,
        else (that read failed) the worker the platform listed while the job waited for it."""
        return self.record if self.record is not None else self.waited


@dataclass(slots=True)
class _Named:
    """A worker a record named (by id), when first, its recorded start and its last state."""

    at: float
    started_at: float | None
    status: str | None


@dataclass(slots=True)
class _Reading:
    """What one pass over a job log found: the phases as the ledger reads them, the
    workers' pickups, the release, the last progress, the platform's idle timeout."""

    modes: list[tuple[float, str]] = field(default_factory=list)
    pickups: list[_Pickup] = field(default_factory=list)
    #: every worker a record named (found) that is no pickup's read, by id, in order
    named: dict[str, _Named] = field(default_factory=dict)
    terminal_at: float | None = None
    gone_at: float | None = None  # the 404 that said RunPod no longer has the job
    finished_at: float | None = None  # the `ts` of the worker's end record (stage `done`)
    progress_at: float | None = None
    platform_idle_s: float | None = None
    submitted_at: float | None = None
    gpu_class: str | None = None
    first_at: float | None = None
    last_at: float | None = None


def _read(log: Sequence[Event], begin: float, cut: float | None, model: BillingModel) -> _Reading:
    """One fold of the job log (up to any recorded verdict): see `_Reading`. Progress counts
    only up to `cut` (the verdict); the platform's record (pickups, requeues, the release,
    the workers) is read to the log's end."""
    r = _Reading()
    state = JobState()
    last_at = begin
    booting = False
    mode: str | None = None
    waited: WorkerObserved | None = None  # the last worker read while the job waited
    for event in log:
        at = max(event.at, last_at)
        if r.first_at is None:
            r.first_at = at
        if isinstance(event, JobSubmitted):
            if r.gpu_class is None:
                r.gpu_class = event.gpu_class
            if r.submitted_at is None:
                r.submitted_at = event.submitted_at if event.submitted_at is not None else at
        before, key_before = state.state, state.hb_key
        evolve(state, event)
        after = state.state
        if after in _RUNNING and before not in _RUNNING:  # a worker picked the job up
            r.pickups.append(_Pickup(at, waited=waited))
            booting, waited = True, None
        elif after in _WAITING and before in _RUNNING and r.pickups:  # requeued: it left
            r.pickups[-1].requeued_at = at
            waited = None
        trained = (before, after) == (_SETUP, _TRAINING) or (
            isinstance(event, HeartbeatObserved)
            and state.hb_key != key_before
            and is_training_stage(event.stage)
        )
        if booting and after in _RUNNING and trained:
            booting = False  # this worker's first training heartbeat
        now_mode = _WAIT if after in _WAITING else (_BOOT if booting else _TRAIN)
        if after not in _WAITING and after not in _RUNNING:
            now_mode = mode or _WAIT
        if now_mode != mode:
            r.modes.append((max(at, begin), now_mode))
            mode = now_mode
        if isinstance(event, StatusObserved):
            if event.status in model.released_statuses and r.terminal_at is None:
                r.terminal_at = at
        elif isinstance(event, StatusFetchFailed):
            if event.http_status == 404 and r.terminal_at is None:
                r.terminal_at = r.gone_at = at  # the job no longer exists (D4)
        elif isinstance(event, HeartbeatObserved):
            if event.stage == END_STAGE and event.found and event.ts is not None:
                r.finished_at = event.ts
        elif isinstance(event, WorkerObserved):
            if event.idle_timeout_s is not None:
                r.platform_idle_s = event.idle_timeout_s
            last = r.pickups[-1] if r.pickups else None
            if not event.found:
                pass
            elif last is not None and last.record is None and last.requeued_at is None:
                last.record = event  # the read after the pickup: the worker that took it
            elif event.worker_id is not None:  # another worker of the endpoint, listed
                if after in _WAITING:
                    waited = event
                known = r.named.get(event.worker_id)
                if known is None:
                    r.named[event.worker_id] = _Named(at, event.started_at, event.status)
                else:
                    if known.started_at is None:
                        known.started_at = event.started_at
                    known.status = event.status or known.status
        timer = PROGRESS_TIMER.of(state)
        if timer is not None and timer[SEQ] == event.seq and (cut is None or at <= cut):
            r.progress_at = at
        last_at = at
    r.last_at = last_at if log else None
    if r.gone_at is not None and r.terminal_at == r.gone_at and r.finished_at is not None:
        # Forgotten while nobody watched (D9): the worker's end record says when it let go.
        r.terminal_at = max(begin, min(r.finished_at, r.gone_at))
    return r


#: Verdicts of a job RunPod no longer has: nothing holds it after the verdict.
_GONE = (FailureKind.LOST, FailureKind.LOST_UNVERIFIED)


def _waste_cause(verdict: Outcome) -> Cause:
    if verdict.failure == FailureKind.STALLED:
        return Cause.STALL
    if verdict.failure in (FailureKind.JOB_PREEMPTED, *_GONE):
        return Cause.PREEMPTED
    return Cause.FAILED


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _log_and_verdict(
    events: list[Event], outcome: Outcome | None, ended: Outcome | None
) -> tuple[list[Event], Outcome | None]:
    """The job log up to its recorded verdict, and the verdict the ledger judges at:
    `outcome`, else the log's `Concluded`, else `ended`."""
    recorded = next((i for i, e in enumerate(events) if isinstance(e, Concluded)), len(events))
    log = events[:recorded]
    verdict = outcome
    if verdict is None and recorded < len(events):
        concluded = events[recorded]
        assert isinstance(concluded, Concluded)
        verdict = outcome_of(concluded)
    if verdict is None:
        verdict = ended
    return log, verdict


def _release(
    terminal_at: float | None, cancel_at: float | None, verdict: Outcome | None, cut: float
) -> float | None:
    """When the worker let go of the job: a terminal status, a cancel; a lost job is gone."""
    release = terminal_at
    if cancel_at is not None:
        release = cancel_at if release is None else min(release, cancel_at)
    if verdict is not None and verdict.failure in _GONE:
        release = cut if release is None else min(release, cut)
    return release


def _pieces(
    r: _Reading,
    workers: list[WorkerBill],
    span: tuple[float, float],
    job_begin: float,
    cut: float,
    release: float | None,
    verdict: Outcome | None,
) -> tuple[list[Piece], list[Piece]]:
    """The attempt's `span` (begin, end) cut into pieces by cause, and the pieces of the
    workers billed beside the one the job's mode speaks of (the overlaps), both unmerged."""
    begin, end = span
    cuts = {begin, end, job_begin, cut}
    cuts.update(t for t, _ in r.modes)
    cuts.update(t for w in workers for t in (w.start, w.stop))
    if release is not None:
        cuts.add(release)
    if r.progress_at is not None:
        cuts.add(r.progress_at)
    times = sorted(t for t in cuts if begin <= t <= end)
    mode_at = [t for t, _ in r.modes]
    since = r.progress_at if r.progress_at is not None else begin
    waste = None if verdict is None or verdict.ok else _waste_cause(verdict)

    def billed_cause(a: float, mode: str | None) -> Cause:
        """The cause of a billed second at `a` of a worker in `mode`."""
        if release is not None and a >= release:
            return Cause.IDLE
        if waste is not None and a >= cut:
            return waste  # the worker still held the job after the verdict
        if waste is not None and (waste != Cause.STALL or a >= since):
            return waste
        return Cause.TRAINING if mode == _TRAIN else Cause.COLD_START

    pieces: list[Piece] = []
    overlaps: list[Piece] = []
    for a, b in pairwise(times):
        at_once = sum(1 for w in workers if w.start <= a < w.stop)  # workers billed then
        i = bisect_right(mode_at, a) - 1
        mode = r.modes[i][1] if i >= 0 else None
        if at_once:
            pieces.append(Piece(billed_cause(a, mode), a, b, True))
        elif mode is None or a < job_begin:
            pieces.append(Piece(Cause.DEPLOY, a, b, False))
        elif workers and release is not None and a >= release:
            # the worker let go and stopped; the verdict is to come
            pieces.append(Piece(Cause.IDLE, a, b, False))
        else:
            pieces.append(Piece(Cause.QUEUE, a, b, False))
        if at_once > 1:  # the others beside the one the job's mode speaks of: never training
            overlaps.append(Piece(billed_cause(a, _BOOT), a, b, True, at_once - 1))
    return pieces, overlaps


def attempt_ledger(
    events: Sequence[Event],
    *,
    price_per_hour: float | None = None,
    outcome: Outcome | None = None,
    start: float | None = None,
    ended: Outcome | None = None,
    cancel_at: float | None = None,
    teardown_at: float | None = None,
    attempt: int | None = None,
    gpu_class: str | None = None,
    provider: str = "runpod",
    model: BillingModel = MODEL,
    reap_at: float | None = None,
    idle_timeout: IdleTimeout | None = None,
    submitted_at: float | None = None,
    as_of: float | None = None,
) -> AttemptLedger:
    """One attempt's ledger from its job log.

    `outcome` overrides the log's own verdict (a what-if's verdict: the causes are judged
    at it, the platform's record is still read from the whole log); else the log's
    `Concluded`, else `ended` (a run's `AttemptEnded`, for an attempt whose job log has no
    verdict). `start` (a run's `AttemptStarted`) before the log's first event is deploy
    time; `submitted_at` (a run's `JobQueued`, else the log's `JobSubmitted`) is the
    earliest a worker's bill may start. `cancel_at` (the job cancelled on RunPod),
    `teardown_at` (its endpoint deleted by the run) and `reap_at` (deleted by the sweeper)
    end the bill; `idle_timeout` is what the run's deploy recorded (see
    `BillingModel.idle_timeout`). An open bill is billed up to `as_of` (None: the log's
    last event).
    """
    events = list(events)
    log, verdict = _log_and_verdict(events, outcome, ended)
    first = events[0].at if events else None
    begin = start if start is not None else (first if first is not None else 0.0)
    r = _read(log, begin, None if verdict is None else max(verdict.at, begin), model)
    gpu_class = gpu_class if gpu_class is not None else r.gpu_class
    last_at = r.last_at if r.last_at is not None else begin
    cut = max(verdict.at if verdict is not None else last_at, begin)
    job_begin = max(r.first_at, begin) if r.first_at is not None else cut
    submitted = submitted_at if submitted_at is not None else r.submitted_at
    floor = max(begin, submitted if submitted is not None else job_begin)
    release = _release(r.terminal_at, cancel_at, verdict, cut)
    # the workers the platform listed while the job waited and that never took it: a
    # crash-looping, throttled or starting worker, billed from its recorded start
    took = {w.worker_id for p in r.pickups if (w := p.worker) is not None and w.worker_id}
    listed = {wid: n for wid, n in r.named.items() if wid not in took and n.started_at is not None}
    has_workers = bool(r.pickups or listed)
    timeout = model.idle_timeout(idle_timeout, r.platform_idle_s) if has_workers else None
    stop, reason = model.worker_stop(
        release, timeout.seconds if timeout else 0.0, teardown_at, reap_at, cut
    )
    held = bool(r.pickups) and r.pickups[-1].requeued_at is None
    open_since: float | None = None
    if stop is None and (held or listed):
        open_since = cut
        stop = max(as_of if as_of is not None else last_at, cut)

    workers = _worker_bills(r, listed, model, floor, (stop, reason), open_since is not None)
    billed = _union((w.start, w.stop) for w in workers)

    end = max([cut, *(e for _, e in billed)])
    pieces, overlaps = _pieces(r, workers, (begin, end), job_begin, cut, release, verdict)
    return AttemptLedger(
        attempt=attempt,
        stream=events[0].stream if events else None,
        gpu_class=gpu_class,
        provider=provider,
        price_per_hour=price_per_hour,
        start=begin,
        end=end,
        pieces=tuple(_merged(pieces)),
        outcome=verdict,
        model=model,
        workers=tuple(workers),
        billed_intervals=tuple(billed),
        idle_timeout=timeout,
        released_at=release,
        open_since=open_since,
        cancel_at=cancel_at,
        teardown_at=teardown_at,
        overlaps=tuple(_merged(overlaps)),
    )


def _worker_bills(
    r: _Reading,
    listed: Mapping[str, _Named],
    model: BillingModel,
    floor: float,
    stopped: tuple[float | None, str],
    still_billing: bool,
) -> list[WorkerBill]:
    """Each worker's bill: the workers that took the job (one a pickup), then the ones the
    platform listed while it waited (`listed`), each from its start (`BillingModel.
    worker_start`, never before `floor`, the submission) to the attempt's stop (`stopped`:
    when and why; a requeue ends the bill of the worker that lost the job), "open" when
    `still_billing`. A worker that takes the job again is billed on from its last bill."""
    stop, reason = stopped
    bills: list[WorkerBill] = []
    billed_to: dict[str, float] = {}  # a worker's id -> where its last bill stopped
    for p in r.pickups:
        rec = p.worker
        w_start, source = model.worker_start(
            None if rec is None else rec.started_at, p.at, min(floor, p.at)
        )
        worker_id = None if rec is None else rec.worker_id
        if worker_id is not None and worker_id in billed_to:
            w_start = max(w_start, billed_to[worker_id])
        if p.requeued_at is not None:
            w_stop, why = p.requeued_at, "requeue"
            if stop is not None and stop < w_stop:
                w_stop, why = stop, reason
        else:
            assert stop is not None
            w_stop, why = stop, ("open" if still_billing else reason)
        if w_stop > w_start:
            status = None if rec is None else rec.status
            bills.append(WorkerBill(worker_id, p.at, w_start, w_stop, source, why, status))
            if worker_id is not None:
                billed_to[worker_id] = w_stop
    for worker_id, n in listed.items():
        assert stop is not None  # (a listed worker nothing stopped bills on: `still_billing`)
        w_start, source = model.worker_start(n.started_at, n.at, min(floor, n.at))
        if stop > w_start:
            why = "open" if still_billing else reason
            bills.append(WorkerBill(worker_id, None, w_start, stop, source, why, n.status))
    return bills


def _merged(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        kind = (p.cause, p.billed, p.workers)
        if last and last.end == p.start and (last.cause, last.billed, last.workers) == kind:
            out[-1] = replace(last, end=p.end)
        else:
            out.append(p)
    return out


def attempt_bill(
    events: Sequence[Event],
    context: AttemptContext,
    *,
    outcome: Outcome | None = None,
    as_of: float | None = None,
    model: BillingModel = MODEL,
) -> AttemptLedger:
    """One attempt's ledger from its job log and what its run recorded of it (`context`):
    the one function `cost` and `whatif` both price an attempt with."""
    return attempt_ledger(
        events,
        price_per_hour=context.price_per_hour,
        outcome=outcome,
        start=context.start,
        ended=context.ended,
        cancel_at=context.cancel_at,
        teardown_at=context.teardown_at,
        attempt=context.attempt,
        gpu_class=context.gpu_class,
        provider=context.provider,
        model=model,
        reap_at=context.reap_at,
        idle_timeout=context.idle_timeout,
        submitted_at=context.submitted_at,
        as_of=as_of,
    )


# --- a job, a run ---------------------------------------------------------------------------


def reaps_of(events: Iterable[Event]) -> dict[str, float]:
    """When the sweeper reaped each endpoint (its first `EndpointReaped`), from the events
    of one or more sweeper streams."""
    out: dict[str, float] = {}
    for e in events:
        if isinstance(e, EndpointReaped):
            out[e.endpoint_id] = min(e.at, out.get(e.endpoint_id, e.at))
    return out


def newest(*logs: Sequence[Event]) -> float | None:
    """The time of the newest event of `logs` (None: they are empty): a store's "now"."""
    return max((log[-1].at for log in logs if log), default=None)


def job_context(
    events: Sequence[Event],
    price_per_hour: float | None = None,
    reaps: Mapping[str, float] | None = None,
) -> AttemptContext:
    """A bare job log's context: its `JobSubmitted` (attempt, endpoint, submission), its
    price, and the sweeper's reap of its endpoint."""
    submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
    if submitted is None:
        return AttemptContext(price_per_hour=price_per_hour)
    return AttemptContext(
        attempt=submitted.attempt,
        price_per_hour=price_per_hour,
        endpoint_id=submitted.endpoint_id,
        reap_at=(reaps or {}).get(submitted.endpoint_id),
    )


def job_ledger(
    events: Sequence[Event],
    price_per_hour: float | None = None,
    *,
    model: BillingModel = MODEL,
    reaps: Mapping[str, float] | None = None,
    as_of: float | None = None,
) -> Ledger:
    """A bare job log's ledger: one attempt, priced at `price_per_hour` (None: unknown), an
    open bill billed up to `as_of` (None: the log's last event)."""
    events = list(events)
    a = attempt_bill(events, job_context(events, price_per_hour, reaps), as_of=as_of, model=model)
    stream = events[0].stream if events else None
    state = None if a.outcome is None else a.outcome.state
    return Ledger(stream, "job", (a,), state, as_of if as_of is not None else newest(events))


def run_contexts(
    events: Sequence[Event],
    reaps: Mapping[str, float] | None = None,
    *,
    model: BillingModel = MODEL,
) -> list[tuple[Attempt, AttemptContext]]:
    """Each attempt of a run's stream, with what the run (and the sweeper's `reaps`)
    recorded of it: its start, submission, price, outcome, the cancel and teardown that
    end its bill, and the idle timeout its deploy set."""
    events = list(events)
    run = replay_run(events)
    candidates = run.started.candidates if run.started is not None else ()
    cancels: dict[str, float] = {}
    deletes: dict[str, float] = {}
    deployed: dict[tuple[int, str], EndpointDeployed] = {}
    for e in events:
        if isinstance(e, JobCancelled) and e.ok:
            cancels.setdefault(e.job_id, e.at)
        elif isinstance(e, EndpointDeleted) and e.ok:
            deletes.setdefault(e.endpoint_id, e.at)
        elif isinstance(e, EndpointDeployed):
            deployed[e.attempt, e.endpoint_id] = e
    out = []
    for a in run.attempts:
        s: AttemptStarted = a.started
        price = candidates[s.candidate].price_per_hour if s.candidate < len(candidates) else None
        ended: Outcome | None = None
        if a.ended is not None:
            e: AttemptEnded = a.ended
            state = "SUCCEEDED" if e.ok else str(e.failure or "FAILED")
            ended = Outcome(e.at, state, e.ok, e.failure, e.rule)
        elif run.result is not None:  # the run ended under the attempt (a cancel)
            r = run.result
            ended = Outcome(r.at, str(r.failure or "FAILED"), r.ok, r.failure, None)
        endpoint = a.endpoint_id or ""
        deploy = deployed.get((s.attempt, endpoint))
        out.append(
            (
                a,
                AttemptContext(
                    attempt=s.attempt,
                    gpu_class=s.gpu_class,
                    provider=s.provider,
                    price_per_hour=price,
                    endpoint_id=a.endpoint_id,
                    start=s.at,
                    submitted_at=a.submitted_at,
                    ended=ended,
                    cancel_at=cancels.get(a.job_id or ""),
                    teardown_at=deletes.get(endpoint),
                    reap_at=(reaps or {}).get(endpoint),
                    idle_timeout=None
                    if deploy is None
                    else model.deployed_idle_timeout(deploy.idle_timeout_s),
                ),
            )
        )
    return out


def run_ledger(
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]],
    *,
    model: BillingModel = MODEL,
    reaps: Mapping[str, float] | None = None,
    as_of: float | None = None,
) -> Ledger:
    """A run's ledger: each attempt's, its job log read with `load`, priced by its
    candidate; the sweeper's `reaps` end the bills of the endpoints it reaped; an open bill
    is billed up to `as_of` (None: the newest event of the run and its job logs)."""
    events = list(events)
    contexts = run_contexts(events, reaps, model=model)
    jobs = {a.job_stream: list(load(a.job_stream)) for a, _ in contexts if a.job_stream}
    if as_of is None:
        as_of = newest(events, *jobs.values())
    run = replay_run(events)
    attempts = []
    for a, ctx in contexts:
        job = jobs.get(a.job_stream or "", [])
        if job or ctx.ended is not None:
            attempts.append(attempt_bill(job, ctx, as_of=as_of, model=model))
        else:  # deploying or submitting still: up to the run's latest event
            attempts.append(_deploying(a.started, ctx.price_per_hour, run.last_at, model))
    state = None
    if run.result is not None:
        state = "SUCCEEDED" if run.result.ok else str(run.result.failure or "FAILED")
    stream = events[0].stream if events else None
    return Ledger(stream, "run", tuple(attempts), state, as_of)


def _deploying(
    s: AttemptStarted, price: float | None, last_at: float | None, model: BillingModel
) -> AttemptLedger:
    end = max(s.at, last_at if last_at is not None else s.at)
    pieces = (Piece(Cause.DEPLOY, s.at, end, False),) if end > s.at else ()
    return AttemptLedger(
        s.attempt, None, s.gpu_class, s.provider, price, s.at, end, pieces, None, model
    )


def ledger(
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]] | None = None,
    price_per_hour: float | None = None,
    *,
    model: BillingModel = MODEL,
    reaps: Mapping[str, float] | None = None,
    as_of: float | None = None,
) -> Ledger:
    """The ledger of a run's stream (its job streams read with `load`) or of a job log
    (priced at `price_per_hour`, None: unknown); the sweeper's `reaps` (endpoint id to
    when it was reaped: `reaps_of`) end the bills of those endpoints, and an open bill is
    billed up to `as_of` (None: the newest event read)."""
    events = list(events)
    if events and isinstance(events[0], RunStarted):
        return run_ledger(
            events, load or (lambda stream: []), model=model, reaps=reaps, as_of=as_of
        )
    return job_ledger(events, price_per_hour, model=model, reaps=reaps, as_of=as_of)


# --- a store ----------------------------------------------------------------------------------


def log_kind(events: Sequence[Event]) -> str:
    """What kind of stream a log is: "run" (it starts with `RunStarted`), "sweeper" (only
    the sweeper's events), else "job"."""
    if events and isinstance(events[0], RunStarted):
        return "run"
    if events and all(isinstance(e, SWEEPER_EVENTS) for e in events):
        return "sweeper"
    return "job"


def queued_jobs(logs: Mapping[str, Sequence[Event]]) -> dict[str, AttemptContext]:
    """Each job stream a run of `logs` queued, with what its run recorded of it (the reaps
    of every sweeper stream of `logs` included)."""
    reaps = store_reaps(logs)
    out: dict[str, AttemptContext] = {}
    for events in logs.values():
        if log_kind(events) != "run":
            continue
        for a, ctx in run_contexts(events, reaps):
            if a.job_stream:
                out[a.job_stream] = ctx
    return out


def store_reaps(logs: Mapping[str, Sequence[Event]]) -> dict[str, float]:
    """The reaps recorded by every sweeper stream of `logs` (`reaps_of`)."""
    return reaps_of(e for events in logs.values() if log_kind(events) == "sweeper" for e in events)


def store_ledgers(
    logs: Mapping[str, Sequence[Event]],
    price_per_hour: float | None = None,
    *,
    as_of: float | None = None,
    model: BillingModel = MODEL,
) -> list[Ledger]:
    """The ledger of every run of a store's `logs` (stream name to events), and of every job
    no run queued (priced at `price_per_hour`), each named by its stream: the sweeper
    streams' reaps end the bills of the endpoints they reaped, and open bills are billed up
    to `as_of` (None: the store's newest event)."""
    if as_of is None:
        as_of = newest(*logs.values())
    reaps = store_reaps(logs)
    queued = set()
    for events in logs.values():
        if log_kind(events) == "run":
            queued.update(a.job_stream for a in replay_run(events).attempts if a.job_stream)
    out = []

    def load(stream: str) -> Sequence[Event]:
        return logs.get(stream, [])

    for name, events in logs.items():
        kind = log_kind(events)
        if kind == "sweeper" or (kind == "job" and name in queued):
            continue
        led = ledger(events, load, price_per_hour, model=model, reaps=reaps, as_of=as_of)
        out.append(replace(led, stream=name))
    return out


# --- totals ---------------------------------------------------------------------------------

#: What `group` can group attempts by.
GROUP_KEYS = ("cause", "gpu", "rule")


@dataclass(frozen=True, slots=True)
class Group:
    """A line of a total: a cause, a GPU class or a verdict rule, and what went to it."""

    key: str
    attempts: int
    seconds: float  # every second given to it (a cause: billed or not)
    billed_s: float
    money: float | None  # None: some attempt in it has no price
    waste_money: float | None


def _sum_money(values: Iterable[float | None]) -> float | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(v or 0.0 for v in values)


def group(ledgers: Iterable[Ledger], by: str) -> list[Group]:
    """Every attempt of `ledgers` totalled by cause, GPU class or verdict rule."""
    if by not in GROUP_KEYS:
        raise ValueError(f"cannot group by {by!r}: one of {', '.join(GROUP_KEYS)}")
    attempts = [a for led in ledgers for a in led.attempts]
    if by == "cause":
        out = []
        for cause in CAUSES:
            having = [a for a in attempts if a.seconds(cause) > 0 or a.billed_seconds(cause) > 0]
            if not having:
                continue
            billed = sum((a.billed_seconds(cause) for a in having), 0.0)
            money = _sum_money(a.money(cause) if a.billed_seconds(cause) else 0.0 for a in having)
            waste = money if cause in WASTE_CAUSES else 0.0
            seconds = sum((a.seconds(cause) for a in having), 0.0)
            out.append(Group(cause.value, len(having), seconds, billed, money, waste))
        return out
    keyed: dict[str, list[AttemptLedger]] = {}
    for a in attempts:
        if by == "gpu":
            key = a.gpu_class or "unknown GPU"
        else:
            key = "open" if a.outcome is None else a.outcome.rule or a.outcome.state
        keyed.setdefault(key, []).append(a)
    return [
        Group(
            key,
            len(items),
            sum((a.seconds() for a in items), 0.0),
            sum((a.billed_s for a in items), 0.0),
            _sum_money(a.money() if a.billed_s else 0.0 for a in items),
            _sum_money(a.waste_money if a.waste_s else 0.0 for a in items),
        )
        for key, items in sorted(keyed.items())
    ]
