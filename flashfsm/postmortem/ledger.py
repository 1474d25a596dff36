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

This module reads the logs into bills: one bill per attempt, cause by cause, for a job log,
a run and a whole store, through one function (`attempt_bill`) that `cost`, `whatif`,
`explain` and `timeline` all price with. The records it fills in (`Cause`, `Piece`,
`Outcome`, `WorkerBill`, `AttemptLedger`, `Ledger`, `AttemptContext`), `money_text` and the
totals (`group`) are `flashfsm.postmortem.ledger_records`'s, re-exported here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
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
from flashfsm.fsm.run_state import Attempt, replay_run
from flashfsm.fsm.state import SEQ, JobState
from flashfsm.fsm.table import RUNNING, WAITING, JobPhase
from flashfsm.postmortem.billing import MODEL, BillingModel, IdleTimeout
from flashfsm.postmortem.ledger_records import CAUSE_MEANING as CAUSE_MEANING
from flashfsm.postmortem.ledger_records import CAUSES as CAUSES
from flashfsm.postmortem.ledger_records import GROUP_KEYS as GROUP_KEYS
from flashfsm.postmortem.ledger_records import UNPRICED as UNPRICED
from flashfsm.postmortem.ledger_records import WASTE_CAUSES as WASTE_CAUSES
from flashfsm.postmortem.ledger_records import AttemptContext as AttemptContext
from flashfsm.postmortem.ledger_records import AttemptLedger as AttemptLedger
from flashfsm.postmortem.ledger_records import Cause as Cause
from flashfsm.postmortem.ledger_records import Group as Group
from flashfsm.postmortem.ledger_records import Ledger as Ledger
from flashfsm.postmortem.ledger_records import Outcome as Outcome
from flashfsm.postmortem.ledger_records import Piece as Piece
from flashfsm.postmortem.ledger_records import WorkerBill as WorkerBill
from flashfsm.postmortem.ledger_records import group as group
from flashfsm.postmortem.ledger_records import money_text as money_text

_WAITING = frozenset(p.value for p in WAITING)
_RUNNING = frozenset(p.value for p in RUNNING)
_SETUP, _TRAINING = JobPhase.SETUP.value, JobPhase.TRAINING.value
# What a stretch of the job's log shows a worker doing (the ledger's own reading of the fold).
_WAIT, _BOOT, _TRAIN = "wait", "boot", "train"


# --- one attempt --------------------------------------------------------------------------


def outcome_of(verdict: Concluded) -> Outcome:
    """A job verdict as an `Outcome`."""
    return Outcome(verdict.at, verdict.state, verdict.ok, verdict.failure, verdict.rule)


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
