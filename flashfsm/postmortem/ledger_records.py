"""The ledger's records: what a bill is made from, what it says, and how bills add up.

`flashfsm.postmortem.ledger` reads a job's, a run's or a store's logs into these records;
this module holds the records themselves and nothing that reads a log: the `Cause` each
second of an attempt goes to (and which causes are waste), a `Piece` of an attempt's time,
its `Outcome`, each worker's `WorkerBill`, an attempt's `AttemptLedger` and a job's or a
run's `Ledger` (with their seconds and money by cause), the `AttemptContext` a bill is
made with (what the run and the sweeper recorded of the attempt), how money is shown
(`money_text`, `UNPRICED`: never $0 for an unknown price), and the totals over many
ledgers (`group`). The ledger re-exports every public name here, so
`flashfsm.postmortem.ledger` still names them all; this module imports nothing of it.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

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


# --- money, shown -------------------------------------------------------------------------


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
