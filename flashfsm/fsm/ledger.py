"""The waste ledger: where an attempt's time and money went, cause by cause.

Theory of operation. An attempt is the time from its start (a run's `AttemptStarted`; a bare
job log's first event) to the end of its billing. The ledger cuts that time into `Piece`s,
each with exactly one `Cause`, so every second of an attempt is accounted for once:

- `deploy` (unbilled): a run's attempt deploying its endpoint and submitting its job;
- `queue` (unbilled): the job waiting for capacity (`QUEUED`, `THROTTLED`, `UNHEALTHY`);
- `cold_start`: a worker has the job and no training heartbeat has come yet (`SETUP`);
- `training`: the job trains (`TRAINING`): the useful part;
- `stall`: in an attempt judged `STALLED`, the billed time from its last progress to the
  verdict;
- `preempted`: in an attempt judged `PREEMPTED` or `LOST`, all its billed time: it is
  thrown away;
- `failed`: in an attempt that ended on any other failure (the job's own code, poll
  errors, a refused key, a cancel), all its billed time;
- `idle`: after the verdict, the worker still billed until it was released and its idle
  timeout passed, or its endpoint was deleted.

The phases come from the job fold (`flashfsm.fsm.job.evolve`), progress from the rules'
progress timer, and which phases cost money, for how long after the verdict and at what
rate from the billing model (`flashfsm.fsm.billing.MODEL`). A price comes from the run's
candidates (`RunStarted.candidates[AttemptStarted.candidate].price_per_hour`) or the
caller; without one the ledger still counts seconds and says the money is unknown (None).
Nothing here does I/O or reads a clock: a run's job streams come from the caller's `load`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Concluded,
    EndpointDeleted,
    Event,
    JobCancelled,
    JobSubmitted,
    RunStarted,
    StatusObserved,
)
from flashfsm.fsm.billing import MODEL, BillingModel
from flashfsm.fsm.job import evolve
from flashfsm.fsm.rules import PROGRESS_TIMER
from flashfsm.fsm.run import replay_run
from flashfsm.fsm.state import SEQ, JobState
from flashfsm.fsm.table import JobPhase


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
    Cause.QUEUE: "waiting for capacity: IN_QUEUE, throttled, unhealthy (unbilled)",
    Cause.COLD_START: "a worker has the job, no training heartbeat yet",
    Cause.TRAINING: "training (useful)",
    Cause.STALL: "a stalled attempt, from its last progress to the verdict",
    Cause.PREEMPTED: "a preempted or lost attempt's billed time, thrown away",
    Cause.FAILED: "billed time of an attempt that failed otherwise, thrown away",
    Cause.IDLE: "the worker billed after the verdict, until release and idle timeout",
}
_WAITING = frozenset(p.value for p in (JobPhase.QUEUED, JobPhase.THROTTLED, JobPhase.UNHEALTHY))


@dataclass(frozen=True, slots=True)
class Piece:
    """A stretch of an attempt (epoch seconds) given to one cause, billed or not."""

    cause: Cause
    start: float
    end: float
    billed: bool

    @property
    def seconds(self) -> float:
        """How long the piece lasts."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: its verdict's time, state, failure kind and rule."""

    at: float
    state: str
    ok: bool
    failure: str | None = None
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptLedger:
    """One attempt's time, cut into pieces by cause, and its price."""

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

    def seconds(self, cause: Cause | None = None) -> float:
        """Seconds given to `cause` (every cause when None)."""
        return sum((p.seconds for p in self.pieces if cause is None or p.cause == cause), 0.0)

    @property
    def billed_s(self) -> float:
        """Billed seconds."""
        return sum((p.seconds for p in self.pieces if p.billed), 0.0)

    @property
    def unbilled_s(self) -> float:
        """Seconds of the attempt nobody paid for (deploy, queue)."""
        return sum((p.seconds for p in self.pieces if not p.billed), 0.0)

    @property
    def waste_s(self) -> float:
        """Billed seconds thrown away (`WASTE_CAUSES`)."""
        return sum((p.seconds for p in self.pieces if p.billed and p.cause in WASTE_CAUSES), 0.0)

    def billed_seconds(self, cause: Cause) -> float:
        """Billed seconds given to `cause`."""
        return sum((p.seconds for p in self.pieces if p.billed and p.cause == cause), 0.0)

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


@dataclass(frozen=True, slots=True)
class Ledger:
    """A job's or a run's attempts, each with its ledger."""

    stream: str | None
    kind: str  # "job" or "run"
    attempts: tuple[AttemptLedger, ...]
    state: str | None = None  # the run's result or the job's verdict state (None: open)

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


# --- one attempt --------------------------------------------------------------------------


def money_text(money: float | None) -> str:
    """Money as printed: `$1.27`, `$0.0042` under a cent, `price unknown` without a price."""
    if money is None:
        return "price unknown"
    if money == 0:
        return "$0"
    return f"${money:.4f}" if abs(money) < 0.01 else f"${money:,.2f}"


def outcome_of(verdict: Concluded) -> Outcome:
    """A job verdict as an `Outcome`."""
    return Outcome(verdict.at, verdict.state, verdict.ok, verdict.failure, verdict.rule)


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
) -> AttemptLedger:
    """One attempt's ledger from its job log.

    `outcome` overrides the log's own verdict (a what-if's verdict: the log is then read up
    to it); else the log's `Concluded`, else `ended` (a run's `AttemptEnded`, for an
    attempt whose job log has no verdict). `start` (a run's `AttemptStarted`) before the
    log's first event is deploy time. `cancel_at` is when the job was cancelled on RunPod
    and `teardown_at` when its endpoint was deleted: they end the billing after the verdict.
    """
    first = events[0].at if events else None
    begin = start if start is not None else (first if first is not None else 0.0)
    state = JobState()
    points: list[tuple[float, str]] = []  # (from when, phase)
    progress_at: float | None = None
    last_status: str | None = None
    verdict: Outcome | None = outcome
    last_at = begin
    stream = events[0].stream if events else None
    for event in events:
        at = max(event.at, last_at)
        if isinstance(event, Concluded):
            if verdict is None:
                verdict = outcome_of(event)
            break
        if outcome is not None and at > outcome.at:
            break
        if isinstance(event, JobSubmitted) and gpu_class is None:
            gpu_class = event.gpu_class
        before = state.state
        evolve(state, event)
        if not points:
            points.append((max(at, begin), before))
        if state.state != before:
            points.append((at, state.state))
        timer = PROGRESS_TIMER.of(state)
        if timer is not None and timer[SEQ] == event.seq:
            progress_at = at
        if isinstance(event, StatusObserved):
            last_status = event.status
        last_at = at
    if verdict is None:
        verdict = ended
    cut = max(verdict.at if verdict is not None else last_at, begin)
    pieces: list[Piece] = []
    if points and points[0][0] > begin:
        pieces.append(Piece(Cause.DEPLOY, begin, points[0][0], False))
    elif not points:
        pieces.append(Piece(Cause.DEPLOY, begin, cut, False))
    for i, (at, phase) in enumerate(points):
        end = points[i + 1][0] if i + 1 < len(points) else cut
        end = min(max(end, at), cut)
        billed = model.billed(phase)
        if phase == JobPhase.SETUP.value:
            cause = Cause.COLD_START
        elif billed or phase not in _WAITING:
            cause = Cause.TRAINING
        else:
            cause = Cause.QUEUE
        pieces.append(Piece(cause, at, end, billed))
    pieces = _judged(pieces, verdict, progress_at)
    end_phase = points[-1][1] if points else None
    if verdict is not None and end_phase is not None and model.billed(end_phase):
        released = cut
        if not (last_status in model.released_statuses or verdict.failure == FailureKind.LOST):
            released = cancel_at if cancel_at is not None and cancel_at >= cut else cut
        pieces.append(Piece(Cause.IDLE, cut, model.idle_end(cut, released, teardown_at), True))
    pieces = _merged([p for p in pieces if p.end > p.start])
    return AttemptLedger(
        attempt=attempt,
        stream=stream,
        gpu_class=gpu_class,
        provider=provider,
        price_per_hour=price_per_hour,
        start=begin,
        end=max([begin, *(p.end for p in pieces)]),
        pieces=tuple(pieces),
        outcome=verdict,
        model=model,
    )


def _judged(pieces: list[Piece], verdict: Outcome | None, progress_at: float | None) -> list[Piece]:
    """The billed pieces given to the failure that ended the attempt."""
    if verdict is None or verdict.ok:
        return pieces
    if verdict.failure == FailureKind.STALLED:
        since = progress_at if progress_at is not None else pieces[0].start if pieces else 0.0
        out: list[Piece] = []
        for p in pieces:
            if not p.billed or p.end <= since:
                out.append(p)
            elif p.start >= since:
                out.append(Piece(Cause.STALL, p.start, p.end, True))
            else:
                out.append(Piece(p.cause, p.start, since, True))
                out.append(Piece(Cause.STALL, since, p.end, True))
        return out
    lost = (FailureKind.JOB_PREEMPTED, FailureKind.LOST)
    cause = Cause.PREEMPTED if verdict.failure in lost else Cause.FAILED
    return [Piece(cause, p.start, p.end, True) if p.billed else p for p in pieces]


def _merged(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        if last and (last.cause, last.billed, last.end) == (p.cause, p.billed, p.start):
            out[-1] = Piece(p.cause, out[-1].start, p.end, p.billed)
        else:
            out.append(p)
    return out


# --- a job, a run ---------------------------------------------------------------------------


def job_ledger(
    events: Sequence[Event], price_per_hour: float | None = None, *, model: BillingModel = MODEL
) -> Ledger:
    """A bare job log's ledger: one attempt, priced at `price_per_hour` (None: unknown)."""
    events = list(events)
    submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
    a = attempt_ledger(
        events,
        price_per_hour=price_per_hour,
        attempt=None if submitted is None else submitted.attempt,
        model=model,
    )
    stream = events[0].stream if events else None
    return Ledger(stream, "job", (a,), None if a.outcome is None else a.outcome.state)


def run_ledger(
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]],
    *,
    model: BillingModel = MODEL,
) -> Ledger:
    """A run's ledger: each attempt's, its job log read with `load`, priced by its candidate."""
    events = list(events)
    run = replay_run(events)
    candidates = run.started.candidates if run.started is not None else ()
    cancels: dict[str, float] = {}
    deletes: dict[str, list[float]] = {}
    for e in events:
        if isinstance(e, JobCancelled) and e.ok:
            cancels.setdefault(e.job_id, e.at)
        elif isinstance(e, EndpointDeleted) and e.ok:
            deletes.setdefault(e.endpoint_id, []).append(e.at)
    attempts = []
    for a in run.attempts:
        s: AttemptStarted = a.started
        price = candidates[s.candidate].price_per_hour if s.candidate < len(candidates) else None
        job = list(load(a.job_stream)) if a.job_stream else []
        ended: Outcome | None = None
        if a.ended is not None:
            e: AttemptEnded = a.ended
            state = "SUCCEEDED" if e.ok else str(e.failure or "FAILED")
            ended = Outcome(e.at, state, e.ok, e.failure, e.rule)
        elif run.result is not None:  # the run ended under the attempt (a cancel)
            r = run.result
            ended = Outcome(r.at, str(r.failure or "FAILED"), r.ok, r.failure, None)
        elif not job:  # deploying or submitting still: up to the run's latest event
            ended = None
        teardown = deletes.get(a.endpoint_id or "", [])
        attempts.append(
            attempt_ledger(
                job,
                price_per_hour=price,
                start=s.at,
                ended=ended,
                cancel_at=cancels.get(a.job_id or ""),
                teardown_at=teardown[0] if teardown else None,
                attempt=s.attempt,
                gpu_class=s.gpu_class,
                provider=s.provider,
                model=model,
            )
            if job or ended is not None
            else _deploying(s, price, run.last_at, model)
        )
    state = None
    if run.result is not None:
        state = "SUCCEEDED" if run.result.ok else str(run.result.failure or "FAILED")
    stream = events[0].stream if events else None
    return Ledger(stream, "run", tuple(attempts), state)


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
) -> Ledger:
    """The ledger of a run's stream (its job streams read with `load`) or of a job log
    (priced at `price_per_hour`, None: unknown)."""
    events = list(events)
    if events and isinstance(events[0], RunStarted):
        return run_ledger(events, load or (lambda stream: []), model=model)
    return job_ledger(events, price_per_hour, model=model)


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
            having = [a for a in attempts if a.seconds(cause) > 0]
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
