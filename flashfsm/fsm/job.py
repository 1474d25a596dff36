"""The job core: `evolve` folds one event into the state, `decide` says what to do next.

Theory of operation. A watch is a sequence of polls. Each poll opens with a status fetch
(a `StatusObserved` or a `StatusFetchFailed` event) and may be followed by the reads that
fetch made due (a health probe, a heartbeat read, or the forced reads after a terminal
failure); `JobState.pending` lists the reads still due in the current poll, by their
`rules.Read` names. After every event `decide` first asks the verdict rules that judge
that point (`rules.judging`: those waiting for none of the missing reads; if one fires,
`rules.judge_poll` decides: `rules.RULES` order, but among the rules with a timer the
limit that passed first wins, once the reads it waits for are made, so a late poll judges
as an on-time one would), then asks for the next pending read, then waits for the next
poll, then checks the client deadline and fetches again. A forced heartbeat read that
failed on a transient error goes back to the end of `pending` with a due time
(`forced_retry_at`, from the failed read's `at`), so `decide` waits for it and reads
again, a bounded number of times (`rules.forced_read_retry_at`); the verdict rules wait
while it is pending.

`evolve` is the only function that changes a state, and replay is `evolve` over the log,
so a state rebuilt from the log equals the live one after every event. For each event the
fold does three things: the poll's own bookkeeping (what is pending, when the next fetch
is); the *signals* it observed (`rules.Signal`), which arm, restart and clear the rules'
timers exactly as each rule declares; and the *trigger* it observed (`Trigger`, a typed
set held to the table at import), a named event of the shared `transitions.Machine`
(`table.TRANSITIONS`): the table says where that trigger leads from the current phase, and
a trigger with no edge from it leaves the phase alone. The Machine is only called when the
phase moves — a few times per job — so a replay costs little more than decoding the log.

The shell's one exception is `skip_read`: a regular heartbeat read that returned nothing
new is not worth an event, so the shell drops it from `pending` directly. The next fetch
resets `pending` (and a verdict clears it), so live and replayed states agree again there;
an event recorded between the skip and the next fetch (a read a rule asked for before its
verdict) leaves the replay one regular heartbeat read ahead of the live state, and nothing
else: a watch resumed there reads the heartbeat once more (nothing new: skipped again), as
a snapshot taken there is written to (`watch`).

Why it is long: the fold takes every event kind of a job's log in one place, beside `decide`
and `verify`, which must read the same state the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flashfsm.events.errors import CorruptLogError
from flashfsm.events.failures import FailureKind
from flashfsm.events.light import LIGHT_TYPES
from flashfsm.events.models import (
    JOB_EVENTS,
    Concluded,
    Event,
    FailureDetailObserved,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.fsm import reads, rules
from flashfsm.fsm.commands import (
    Command,
    Conclude,
    FetchStatus,
    Finished,
    ProbeHealth,
    ReadFailureDetail,
    ReadHeartbeat,
    ReadWorker,
    ReadWorkerLog,
    Verdict,
    Wait,
)
from flashfsm.fsm.machine import fire
from flashfsm.fsm.reads import READ_COMMANDS, ReadKind, register_read
from flashfsm.fsm.rules import (
    QUEUED_STATUS,
    STARTED_STATES,
    TERMINAL_STATUSES,
    UNHEALTHY_STATE,
    Read,
    Signal,
    heartbeat_read_is_due,
    is_leftover_heartbeat,
    is_training_stage,
    probe_is_due,
    status_counts_as_progress,
    worker_condition,
)
from flashfsm.fsm.state import JobState, Timer
from flashfsm.fsm.table import (
    FAILURE_KIND,
    NEXT,
    TERMINAL,
    TRANSITIONS,
    VERDICT_TRIGGERS,
    JobPhase,
)

#: The reads as `JobState.pending` holds them: plain strings (a state holds plain values).
_PROBE_READ, _HEARTBEAT_READ = Read.PROBE.value, Read.HEARTBEAT.value
_FORCED_READ_NAME, _FAILURE_READ = Read.FORCED_HEARTBEAT.value, Read.FAILURE_DETAIL.value
_WORKER_READ = Read.WORKER.value
#: The failures whose verdict waits for the worker's own log (a watch with a worker
#: reader): the worker's code failed, it was preempted, it stalled or crash-looped.
WORKER_LOG_FAILURES = frozenset(
    {FailureKind.JOB_FAILED, FailureKind.JOB_PREEMPTED, FailureKind.STALLED}
)
_READ_WORKER_LOG = ReadWorkerLog()
_LOG_STATES = frozenset(
    phase.value for phase, kind in FAILURE_KIND.items() if kind in WORKER_LOG_FAILURES
)
_DUE_ON_STATUS = reads.DUE_ON_STATUS  # (the declared reads' list itself: it grows in place)
_DUE_EPSILON = 1e-9  # float slack when comparing a virtual clock with a computed due time

# The rules' timer declarations, compiled per signal into what the fold applies: the mask
# of the timers it clears, and the names it clears, restarts and arms. Each timer has a
# bit in `JobState.running`, kept by `_signal` alone beside `JobState.timers`, so "does
# this signal clear anything?" is one integer test. Signals are looked up once, here.
_BIT: dict[str, int] = {spec.name: 1 << n for n, spec in enumerate(rules.TIMERS)}
_Pairs = tuple[tuple[str, int], ...]
_Actions = tuple[int, tuple[str, ...], _Pairs, _Pairs]


def _compile(signal: Signal) -> _Actions:
    clears = tuple(spec.name for spec in rules.TIMERS if signal in spec.clears)
    restarts = tuple((s.name, _BIT[s.name]) for s in rules.TIMERS if signal in s.restarts)
    arms = tuple((s.name, _BIT[s.name]) for s in rules.TIMERS if signal in s.arms)
    return sum(_BIT[name] for name in clears), clears, restarts, arms


_SUBMITTED = _compile(Signal.SUBMITTED)
_WATCH_STARTED = _compile(Signal.WATCH_STARTED)
_QUEUED = _compile(Signal.QUEUED)
_LEFT_QUEUE = _compile(Signal.LEFT_QUEUE)
_STATUS_CHANGED = _compile(Signal.STATUS_CHANGED)
_NEW_HEARTBEAT = _compile(Signal.NEW_HEARTBEAT)
_WORKER_NONE = _compile(Signal.WORKER_NONE)
_WORKER_CRASHING = _compile(Signal.WORKER_CRASHING)
_WORKER_STARTING = _compile(Signal.WORKER_STARTING)
_PROBE: dict[tuple[bool, bool], tuple[_Actions, _Actions]] = {
    (unhealthy, throttled): (
        _compile(Signal.PROBE_UNHEALTHY if unhealthy else Signal.PROBE_NOT_UNHEALTHY),
        _compile(Signal.PROBE_THROTTLED if throttled else Signal.PROBE_NOT_THROTTLED),
    )
    for unhealthy in (False, True)
    for throttled in (False, True)
}
_SHIFTED: frozenset[str] = frozenset(spec.name for spec in rules.TIMERS if spec.shifts_on_gap)
_LEFT_QUEUE_MASK = _LEFT_QUEUE[0]
#: The poll interval of a state no watch has started (the watch's own default).
_DEFAULT_INTERVAL_S: float = WatchStarted.model_fields["interval_s"].default


class Trigger(StrEnum):
    """The triggers the fold fires for what it observes: the transition table's, less the
    verdicts' (`table.VERDICT_TRIGGERS`). A typed set: a misspelt trigger is an
    `AttributeError`, never a trigger with no edge that silently leaves the phase alone, and
    `check_triggers` holds this set to the table's at import."""

    WORKER_THROTTLED = "worker_throttled"
    WORKER_UNHEALTHY = "worker_unhealthy"
    WORKERS_RECOVERED = "workers_recovered"
    PICKED_UP = "picked_up"
    RESUMED = "resumed"
    REQUEUED = "requeued"
    TRAINING_STARTED = "training_started"


def check_triggers(triggers: Iterable[str]) -> None:
    """Raise `ValueError` unless `triggers` are exactly the table's observation triggers."""
    names = {str(trigger) for trigger in triggers}
    table = {trigger for trigger, _, _ in TRANSITIONS} - set(VERDICT_TRIGGERS.values())
    if names != table:
        raise ValueError(
            f"the fold's triggers and the transition table disagree: unknown to the table "
            f"{sorted(names - table)}, never fired by the fold {sorted(table - names)}"
        )


check_triggers(Trigger)


def _from(trigger: Trigger) -> frozenset[str]:
    """The phases `trigger` leads out of (the table read forwards, once)."""
    return frozenset(source for source, name in NEXT if name == trigger)


_REQUEUED_FROM = _from(Trigger.REQUEUED)
#: The phases a worker picking the job up leads out of (with or without training seen).
_PICKED_UP_FROM = _from(Trigger.PICKED_UP) | _from(Trigger.RESUMED)
_TRAINING_STARTED_FROM = _from(Trigger.TRAINING_STARTED)


class NotWatchingError(RuntimeError):
    """`decide` on a state whose log has no `WatchStarted` yet."""


# --- evolve -------------------------------------------------------------------------------


def evolve(s: JobState, event: Event) -> JobState:
    """Fold one event into the state (in place) and return it.

    Events must arrive in seq order without a gap; a terminal state absorbs every event
    after the verdict unchanged.
    """
    if s.verdict is not None:
        return s
    seq, stream = event.seq, event.stream
    if seq != s.next_seq or (stream != s.stream and s.stream is not None):
        raise CorruptLogError(
            "replay",
            stream,
            f"expected seq {s.next_seq} of stream {s.stream or stream!r}, "
            f"got seq {seq} ({event.kind})",
            seq=seq,
        )
    apply = (
        _APPLY_BY_TYPE.get(type(event)) or _APPLY.get(event.kind) or reads.FOLDS.get(type(event))
    )
    if apply is None:
        raise CorruptLogError("replay", stream, f"{event.kind} is not a job-watch event", seq=seq)
    apply(s, event)
    s.stream = stream
    s.next_seq = seq + 1
    s.last_at = event.at
    return s


def _signal(s: JobState, actions: _Actions, at: float, seq: int) -> None:
    """Apply a compiled signal: clear, restart and arm the timers that listen to it."""
    mask, clears, restarts, arms = actions
    timers = s.timers
    if s.running & mask:
        for name in clears:
            timers.pop(name, None)
        s.running &= ~mask
    if restarts or arms:
        timer: Timer = (at, seq)
        for name, bit in restarts:
            timers[name] = timer
            s.running |= bit
        for name, bit in arms:
            if name not in timers:
                timers[name] = timer
                s.running |= bit


def _trigger(s: JobState, trigger: Trigger) -> None:
    """Fire `trigger` on the shared machine when the table has an edge for it from here."""
    if (s.state, trigger) in NEXT:
        fire(s, trigger)


def _on_submitted(s: JobState, e: JobSubmitted) -> None:
    s.submitted = e
    s.policy = e.policy
    if e.submitted_at is not None:
        _signal(s, _SUBMITTED, e.submitted_at, e.seq)


def _on_watch(s: JobState, e: WatchStarted) -> None:
    if s.first_watch is None:
        s.first_watch = e
        _signal(s, _WATCH_STARTED, e.at, e.seq)  # step 3: the watch's start is progress
        s.next_fetch_at = None
        s.blind = rules.watched_late(s.submitted_at, e.at, e.interval_s)
    else:
        gap = rules.blind_gap(s.last_at, e.at)
        if gap > 0:
            s.blind = True
            _shift_timers(s, gap)
            # The interrupted poll is stale: start the new watch with a fresh fetch.
            s.pending = ()
            s.cycle = None
            s.health = None
            s.probed = False
            s.next_fetch_at = None
            s.heartbeat_gap_read = True  # D5: the first poll after a gap reads the heartbeat
    s.watch = e


def _shift_timers(s: JobState, gap: float) -> None:
    """D2: move every timer that declares it forward by the blind gap (and the probe and
    heartbeat paces, so a reattach probes and reads on the polls an unbroken watch would,
    moved by the gap)."""
    s.gaps += gap
    timers = s.timers
    for name in _SHIFTED.intersection(timers):
        since, seq = timers[name]
        timers[name] = (since + gap, seq)
    if s.last_probe_at is not None:
        s.last_probe_at += gap
    if s.heartbeat_asked_at is not None:
        s.heartbeat_asked_at += gap


def _interval(s: JobState) -> float:
    return _DEFAULT_INTERVAL_S if s.watch is None else s.watch.interval_s


def _on_status(s: JobState, e: StatusObserved) -> None:
    s.cycle = "status"
    s.status = e
    if s.blind:  # the platform still knew the job after the gap (D9)
        s.blind = False
    # This poll's leftovers of the last one, cleared (most polls find them clear already).
    if s.fetch_error is not None or s.error_seqs:
        s.fetch_error = None
        s.error_seqs = ()
    if s.probed:
        s.probed = False
    if s.health is not None or s.forced_heartbeat is not None or s.failure_seq is not None:
        s.health = None
        s.forced_heartbeat = None
        s.forced_read_errors = ()
        s.forced_retry_at = None
        s.failure_text = None
        s.failure_seq = None
    at, watch = e.at, s.watch
    interval = _DEFAULT_INTERVAL_S if watch is None else watch.interval_s
    s.next_fetch_at, s.wait_anchor, s.wait_s = at + interval, at, interval
    status = e.status
    if status_counts_as_progress(s.last_status, status):
        _signal(s, _STATUS_CHANGED, at, e.seq)
    s.last_status = status
    has_hb = watch is not None and watch.has_heartbeat_reader
    pending: tuple[str, ...] = ()
    if status in TERMINAL_STATUSES:
        if status == "FAILED" or (status == "COMPLETED" and e.metrics is None):
            if has_hb:
                pending += (_FORCED_READ_NAME,)
            if watch is not None and watch.has_failure_detail_reader:
                pending += (_FAILURE_READ,)
    elif status == QUEUED_STATUS:
        _signal(s, _QUEUED, at, e.seq)
        if s.state in _REQUEUED_FROM:
            fire(s, Trigger.REQUEUED)
        probe = probe_is_due(s.last_probe_at, at, s.policy.probe_every_s)
        pending = (_PROBE_READ,) * probe + (_HEARTBEAT_READ,) * _heartbeat_due(s, has_hb, at)
        if watch is not None and watch.reads_queue_records and (probe or s.queue_record is None):
            # The endpoint's workers, at the probe's pace, and on every poll of a queue
            # spell until its first record is in (a watch interrupted before it, or a
            # requeue off the probe's pace, still reads them before a queue verdict).
            pending += (_WORKER_READ,)
    else:
        # Any other status (IN_PROGRESS, RUNNING, or one we do not know): a worker has it.
        if s.running & _LEFT_QUEUE_MASK:  # (most statuses find nothing to clear: no call)
            _signal(s, _LEFT_QUEUE, at, e.seq)
        if not s.picked_up:
            s.picked_up = True
        if s.queue_record is not None:
            s.queue_record = None
        if _heartbeat_due(s, has_hb, at):
            pending = (_HEARTBEAT_READ,)
        if s.state in _PICKED_UP_FROM:  # (a worker already has it: nothing moves)
            _trigger(s, Trigger.RESUMED if s.training_seen else Trigger.PICKED_UP)
            if watch is not None and watch.has_worker_reader:
                pending += (_WORKER_READ,)  # who took it, and when the platform started it
    if _DUE_ON_STATUS:  # the declared reads this answer makes due, after the built-in ones
        pending += _declared_due(s, e)
    s.pending = pending


def _declared_due(s: JobState, e: StatusObserved) -> tuple[str, ...]:
    """The declared reads (`flashfsm.fsm.reads`) a status answer makes due, in their order.

    (Its own function: a comprehension over `s` and `e` inside `_on_status` would make them
    closure cells there, and every status folded would pay for it, about 6 % of the fold.)
    """
    return tuple(read.name for read in _DUE_ON_STATUS if read.due(s, e))  # type: ignore[misc]


def _ask_for_evidence(s: JobState) -> None:
    """D9: RunPod forgot the job after a blind gap: the poll reads what outlives it (the
    worker's heartbeat, forced, and its failure artifacts) before the rules judge the 404."""
    watch = s.watch
    s.forced_heartbeat, s.forced_read_errors, s.forced_retry_at = None, (), None
    s.failure_text, s.failure_seq = None, None
    pending: tuple[str, ...] = ()
    if watch is not None and watch.has_heartbeat_reader:
        pending += (_FORCED_READ_NAME,)
    if watch is not None and watch.has_failure_detail_reader:
        pending += (_FAILURE_READ,)
    s.pending = pending


def _heartbeat_due(s: JobState, has_hb: bool, at: float) -> bool:
    """Whether this poll asks for a regular heartbeat read (and, if so, note that it did).

    The first poll after a blind gap reads too, off the pace, which it leaves as it was (D5).
    """
    if not has_hb:
        return False
    if heartbeat_read_is_due(s.heartbeat_asked_at, at, s.policy.heartbeat_every_s):
        s.heartbeat_asked_at = at
        s.heartbeat_gap_read = False
        return True
    if s.heartbeat_gap_read:
        s.heartbeat_gap_read = False
        return True
    return False


def _on_fetch_failed(s: JobState, e: StatusFetchFailed) -> None:
    s.cycle = "error"
    s.fetch_error = e
    s.error_seqs = (*s.error_seqs, e.seq)[-s.policy.max_poll_errors :]
    s.pending = ()
    s.health = None
    s.probed = False
    if s.blind and e.http_status in rules.LOST_STATUSES:
        _ask_for_evidence(s)
    wait = rules.status_error_backoff(_interval(s), len(s.error_seqs), s.policy.max_backoff_s)
    s.next_fetch_at, s.wait_anchor, s.wait_s = e.at + wait, e.at, wait


def _done_read(s: JobState, name: str) -> None:
    if name in s.pending:
        pending = list(s.pending)
        pending.remove(name)
        s.pending = tuple(pending)


def _on_health(s: JobState, e: HealthObserved) -> None:
    _done_read(s, _PROBE_READ)
    s.last_probe_at = e.at
    s.health = e
    s.probed = True
    unhealthy, throttled = worker_condition(e)
    for actions in _PROBE[unhealthy, throttled]:
        _signal(s, actions, e.at, e.seq)
    if unhealthy:
        _trigger(s, Trigger.WORKER_UNHEALTHY)
    elif throttled:
        _trigger(s, Trigger.WORKER_THROTTLED)
    else:
        _trigger(s, Trigger.WORKERS_RECOVERED)


def _on_probe_failed(s: JobState, e: HealthProbeFailed) -> None:
    _done_read(s, _PROBE_READ)
    s.last_probe_at = e.at  # a failed probe still spends the probe slot; it changes no timer
    s.probed = True


def _on_heartbeat(s: JobState, e: HeartbeatObserved) -> None:
    if e.forced:
        due = _FORCED_READ_NAME in s.pending
        _done_read(s, _FORCED_READ_NAME)
        s.forced_heartbeat = e
        if e.read_error is not None:
            _on_forced_read_failed(s, e, due)
            return
    else:
        _done_read(s, _HEARTBEAT_READ)
    if not e.found or e.read_error is not None:
        return
    s.last_heartbeat = e
    if is_leftover_heartbeat(e, s.submitted_at):
        return
    key = (e.stage, e.step, e.ts)
    if key == s.hb_key:
        return
    s.hb_key = key
    _signal(s, _NEW_HEARTBEAT, e.at, e.seq)
    if is_training_stage(e.stage):
        s.training_seen = True
        if s.state in _TRAINING_STARTED_FROM:
            fire(s, Trigger.TRAINING_STARTED)


def _on_forced_read_failed(s: JobState, e: HeartbeatObserved, due: bool) -> None:
    """A forced read that failed on a transient error: read again later, while tries last."""
    s.forced_read_errors = (*s.forced_read_errors, e.seq)
    if not due:  # not a read this poll asked for: nothing to try again
        s.forced_retry_at = None
        return
    p = s.policy
    s.forced_retry_at = rules.forced_read_retry_at(
        e.at, len(s.forced_read_errors), p.forced_read_tries, p.forced_read_backoff_s
    )
    if s.forced_retry_at is not None:
        s.pending = (*s.pending, _FORCED_READ_NAME)  # the other reads go first meanwhile


def _on_failure_detail(s: JobState, e: FailureDetailObserved) -> None:
    _done_read(s, _FAILURE_READ)
    s.failure_text = e.text
    s.failure_seq = e.seq


def _on_worker(s: JobState, e: WorkerObserved) -> None:
    _done_read(s, _WORKER_READ)
    s.worker = e
    if s.last_status == QUEUED_STATUS and e.read_error is None:
        # A record of the endpoint's workers while the job waits: what kind of wait it is.
        s.queue_record = e.seq
        if not e.found:
            _signal(s, _WORKER_NONE, e.at, e.seq)
        elif e.status == UNHEALTHY_STATE:
            _signal(s, _WORKER_CRASHING, e.at, e.seq)
        elif e.status in STARTED_STATES:
            _signal(s, _WORKER_STARTING, e.at, e.seq)


def _on_worker_log(s: JobState, e: WorkerLogObserved) -> None:
    s.worker_log = e


def declared_fold(name: str, then: Callable[[JobState, Any], None] | None = None) -> reads.Fold:
    """The fold of a read declared outside the core (`flashfsm.reads.declare_read`): the
    read is done, its answer kept as the read's last one (`JobState.observed`), then
    `then(state, event)` when given (what else the declaration keeps)."""

    def fold(s: JobState, e: Any) -> None:
        _done_read(s, name)
        s.observed = {**s.observed, name: e}
        if then is not None:
            then(s, e)

    return fold


def _on_concluded(s: JobState, e: Concluded) -> None:
    try:
        dest = JobPhase(e.state)
    except ValueError:
        dest = None
    if dest is None or dest not in TERMINAL:
        raise CorruptLogError(
            "replay", e.stream, f"verdict state {e.state!r} is not terminal", seq=e.seq
        )
    fire(s, VERDICT_TRIGGERS[dest])
    s.verdict = e
    s.pending = ()


# --- the reads, each declared once (`flashfsm.fsm.reads`) ---------------------------------


_STATUS_FETCH, _PROBE_HEALTH = FetchStatus(), ProbeHealth()
_REGULAR_READ, _FORCED_READ = ReadHeartbeat(force=False), ReadHeartbeat(force=True)
#: The built-in reads (their `asked` is the docs' word for what `_on_status`,
#: `_on_fetch_failed` and `_concluding` do). A heartbeat answers the regular read or the
#: forced one by its `forced` flag (`_asked_for`): the forced read declares no event.
BUILT_IN_READS = tuple(
    register_read(read)
    for read in (
        ReadKind(
            Read.PROBE.value,
            _PROBE_HEALTH,
            "a health probe",
            (HealthObserved, HealthProbeFailed),
            _on_health,
            "while the job is IN_QUEUE, at the policy's probe pace",
        ),
        ReadKind(
            Read.HEARTBEAT.value,
            _REGULAR_READ,
            "a regular heartbeat read",
            (HeartbeatObserved,),
            _on_heartbeat,
            "at the policy's heartbeat pace (a watch with a heartbeat reader); recorded "
            "only when it brings news",
        ),
        ReadKind(
            Read.FORCED_HEARTBEAT.value,
            _FORCED_READ,
            "a forced heartbeat read",
            (),
            _on_heartbeat,
            "after a FAILED (or a COMPLETED without metrics) status, or a 404 after a blind "
            "gap; tried again after a transient error",
        ),
        ReadKind(
            Read.FAILURE_DETAIL.value,
            ReadFailureDetail(),
            "a failure-detail read",
            (FailureDetailObserved,),
            _on_failure_detail,
            "with the forced heartbeat read (a watch with a failure-detail reader)",
        ),
        ReadKind(
            Read.WORKER.value,
            ReadWorker(),
            "a worker-record read",
            (WorkerObserved,),
            _on_worker,
            "when a worker picks the job up, and in a queue spell at the probe's pace (a "
            "client that reads worker records)",
        ),
        ReadKind(
            "worker_log",
            _READ_WORKER_LOG,
            "a worker-log read",
            (WorkerLogObserved,),
            _on_worker_log,
            "once, before a failing verdict the worker's own log can explain",
            pending=False,
        ),
    )
)
if set(READ_COMMANDS) != set(Read) - {Read.STATUS}:
    raise RuntimeError(f"reads without a command: {set(Read) - {Read.STATUS} - set(READ_COMMANDS)}")


_APPLY: dict[str, Callable[[JobState, Any], None]] = {
    "JobSubmitted": _on_submitted,
    "WatchStarted": _on_watch,
    "StatusObserved": _on_status,
    "StatusFetchFailed": _on_fetch_failed,
    "HealthObserved": _on_health,
    "HealthProbeFailed": _on_probe_failed,
    "HeartbeatObserved": _on_heartbeat,
    "FailureDetailObserved": _on_failure_detail,
    "WorkerObserved": _on_worker,
    "WorkerLogObserved": _on_worker_log,
    "Concluded": _on_concluded,
}
#: The same table keyed by model class: `evolve` dispatches on `type(event)` (a subclass of
#: an event model falls back to its `kind`).
_APPLY_BY_TYPE: dict[type, Callable[[JobState, Any], None]] = {
    cls: _APPLY[cls.model_fields["kind"].default] for cls in JOB_EVENTS
}
# A light event (a replay's fast path) is folded by its model's handler.
_APPLY_BY_TYPE.update({LIGHT_TYPES[kind]: _APPLY[kind] for kind in _APPLY if kind in LIGHT_TYPES})


def skip_read(s: JobState, name: str = Read.HEARTBEAT.value) -> JobState:
    """Drop a regular read that returned nothing new (nothing to record) from `pending`."""
    if name != _HEARTBEAT_READ:
        raise ValueError(f"only the regular heartbeat read may be skipped, not {name!r}")
    _done_read(s, name)
    return s


def heartbeat_is_news(s: JobState, hb: HeartbeatObserved) -> bool:
    """Whether a regular heartbeat read is worth an event (it differs from the last one)."""
    if not hb.found:
        return False
    last = s.last_heartbeat
    return last is None or (last.stage, last.step, last.ts, last.retriable) != (
        hb.stage,
        hb.step,
        hb.ts,
        hb.retriable,
    )


# --- decide -------------------------------------------------------------------------------


def decide(s: JobState, now: float, *, judged: bool = False) -> Command:
    """The next command for the shell, a pure function of the state and `now`.

    `judged` says the caller decided on this very state before (nothing folded in, no read
    skipped since) and was told to wait: the rules judged after an observation ignore
    `now`, so they would find nothing again and are not tried (a watch waking from a wait
    skips them; the answer is the same either way).
    """
    if s.verdict is not None:
        return Finished(verdict_of(s.verdict))
    if s.watch is None:
        raise NotWatchingError(f"stream {s.stream!r} has no WatchStarted event: nothing watches it")
    if not judged:
        # Most points of a poll find no rule firing, and that is tried here in line; which
        # rule decides, and the reads it may need first, is `rules.judge_poll`'s choice.
        for measure in rules.judging_measures(s):
            if measure(s, now) is not None:
                judged_poll = rules.judge_poll(s)
                if isinstance(judged_poll, str):  # a read an earlier limit's rule waits for
                    return READ_COMMANDS[judged_poll]
                assert judged_poll is not None
                return _concluding(s, judged_poll)
    if s.pending:
        name = s.pending[0]
        due = s.forced_retry_at
        if name == _FORCED_READ_NAME and due is not None and now < due - _DUE_EPSILON:
            return Wait(due - now)  # a failed forced read, tried again after its backoff
        return READ_COMMANDS[name]
    if s.next_fetch_at is not None and now < s.next_fetch_at - _DUE_EPSILON:
        return Wait(max(0.0, s.wait_s - (now - s.wait_anchor)))
    verdict = rules.judge(s, rules.BEFORE_FETCH, now)
    if verdict is not None:
        return _concluding(s, verdict)
    return FetchStatus()


def _concluding(s: JobState, verdict: Verdict) -> Command:
    """Record `verdict`, once a watch with a worker reader has read the worker's own log
    for a failure it can explain (`WORKER_LOG_FAILURES`): the log is evidence, never a
    reason, so the verdict is the same with or without it."""
    if (
        s.worker_log is None
        and verdict.state.value in _LOG_STATES
        and s.watch is not None
        and s.watch.has_worker_reader
    ):
        return _READ_WORKER_LOG
    return Conclude(verdict)


def verdict_of(e: Concluded) -> Verdict:
    """The `Verdict` a `Concluded` event records."""
    return Verdict(JobPhase(e.state), e.rule, e.detail, tuple(e.evidence), e.metrics)


# --- replay and verification --------------------------------------------------------------


def replay(events: Iterable[Event], state: JobState | None = None) -> JobState:
    """The state a log folds to (continuing from `state` when given)."""
    s = JobState() if state is None else state
    for event in events:
        evolve(s, event)
    return s


@dataclass(frozen=True, slots=True)
class Disagreement:
    """Where a log and today's rules part ways (`fields`: the verdict fields that differ,
    when the disagreement is about a recorded verdict's content)."""

    seq: int
    reason: str
    recorded: str | None = None
    expected: str | None = None
    fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of `verify`: ok, or the first disagreement."""

    ok: bool
    events: int
    verdict: Concluded | None
    first_disagreement: Disagreement | None = None

    def __str__(self) -> str:
        if self.ok:
            tail = (
                f"verdict {self.verdict.state} by {self.verdict.rule}"
                if self.verdict
                else "no verdict yet"
            )
            return f"ok: {self.events} events agree with today's rules ({tail})"
        d = self.first_disagreement
        assert d is not None
        text = f"seq {d.seq}: {d.reason}"
        if d.recorded or d.expected:
            text += f" (recorded: {d.recorded or '-'}; rules say: {d.expected or '-'})"
        return text


def _describe(v: Verdict) -> str:
    return f"{v.state.value} by {v.rule}"


def verify(events: Iterable[Event]) -> VerifyReport:
    """Re-decide the log with today's rules and report the first seq where they disagree.

    Verification checks the conversation, not only the verdict. After each event the rules
    are asked what they would do at the time of the next one (`decide_before`), and the
    next event must follow from it:

    - times never go backwards (a watch whose clock is behind the log records its skew on
      its `WatchStarted` and stamps on the log's clock, so a conforming log is monotone);
    - an observation answers the command the rules issue at its time: a status answer (or
      failed fetch) a status fetch, a probe answer a health probe, a regular or forced
      heartbeat read a read of that kind, the failure artifacts their read. A command
      that is due later (`Wait`) means the observation came before it was due; any other
      command means nobody asked for it;
    - a regular heartbeat read is recorded only when it brings news (the watch drops the
      others), so a recorded one must differ from the last one recorded;
    - a recorded verdict is the one the rules reach, field by field (`VERDICT_FIELDS`: state,
      ok, failure, detail, rule, evidence, metrics, each as recording the rules' verdict
      would store it), and nothing follows a point where they would already have concluded.

    `WatchStarted` (a reattach, D2) may come at any time; a late observation is accepted
    (slow I/O or a paused host delay a poll without changing what it asks for).
    """
    s = JobState()
    count = 0
    verdict: Concluded | None = None
    for count, event in enumerate(events, start=1):
        expected_seq = count - 1
        if event.seq != expected_seq:
            reason = "seq missing from the log" if event.seq > expected_seq else "seq repeated"
            return VerifyReport(False, count, None, Disagreement(expected_seq, reason))
        if s.verdict is not None:
            return VerifyReport(
                False,
                count,
                s.verdict,
                Disagreement(event.seq, "event after the verdict", event.kind),
            )
        problem = _check_next(s, event)
        if problem is not None:
            return VerifyReport(False, count, None, problem)
        try:
            evolve(s, event)
        except CorruptLogError as exc:
            return VerifyReport(False, count, None, Disagreement(event.seq, str(exc)))
        if isinstance(event, Concluded):
            verdict = event
    return VerifyReport(True, count, verdict)


def decide_before(s: JobState, nxt: Event | None, now: float) -> Command:
    """`decide` at `now` as the log shows it: the command that `nxt` should answer.

    A regular heartbeat read the log did not record (`nxt` is not one) returned nothing
    new, which the watch does not record (`skip_read`), so it is dropped and the rules
    asked again. `s` is left untouched.
    """
    probe = s.copy()  # a scratch copy keeps `s` untouched by skip_read
    while True:
        command = decide(probe, now)
        if (
            isinstance(command, ReadHeartbeat)
            and not command.force
            and not (isinstance(nxt, HeartbeatObserved) and not nxt.forced)
        ):
            skip_read(probe)
            continue
        return command


def _asked_for(event: Event) -> Command | None:
    """The command `event` answers (None: not an observation)."""
    if isinstance(event, HeartbeatObserved):
        return _FORCED_READ if event.forced else _REGULAR_READ
    if isinstance(event, StatusObserved | StatusFetchFailed):
        return _STATUS_FETCH
    return reads.ANSWERS.get(type(event))


def _command_text(command: Command) -> str:
    match command:
        case Wait(seconds=seconds):
            return f"wait {seconds:.3g}s"
        case Conclude(verdict=verdict) | Finished(verdict=verdict):
            return _describe(verdict)
    if isinstance(command, FetchStatus):
        return "a status fetch"
    return reads.LABELS.get(command, type(command).__name__)


def _check_next(s: JobState, event: Event) -> Disagreement | None:
    """Does `event` follow from what the rules decide about `s` at `event.at`?"""
    if s.last_at is not None and event.at < s.last_at:
        return Disagreement(
            event.seq,
            f"time goes back {s.last_at - event.at:.3f}s (no watch records a clock skew "
            "that explains it)",
            event.kind,
        )
    if isinstance(event, (WatchStarted, JobSubmitted)):
        return None
    if s.watch is None:
        return Disagreement(event.seq, "an event before any watch started", event.kind)
    command = decide_before(s, event, event.at)
    if isinstance(event, Concluded):
        if not isinstance(command, Conclude):
            return Disagreement(
                event.seq, "verdict the rules do not reach", f"{event.state} by {event.rule}"
            )
        return _verdict_disagreement(event, command.verdict)
    if isinstance(command, Conclude):
        return Disagreement(
            event.seq, "the rules had already concluded", event.kind, _describe(command.verdict)
        )
    asked = _asked_for(event)
    if asked is None or command == asked:
        if asked is _REGULAR_READ and not heartbeat_is_news(s, event):  # type: ignore[arg-type]
            return Disagreement(
                event.seq,
                "a regular heartbeat read that brought nothing new (the watch records none)",
                event.kind,
            )
        return None
    what = _command_text(asked)
    if isinstance(command, Wait):
        reason = f"{what} {command.seconds:.3g}s before it was due"
    else:
        reason = f"{what} the rules did not ask for"
    return Disagreement(event.seq, reason, event.kind, _command_text(command))


# --- a recorded verdict, field by field -----------------------------------------------------

#: The fields of a `Concluded` that its verdict fills (the envelope aside), in the event's order.
VERDICT_FIELDS = ("state", "ok", "failure", "detail", "rule", "evidence", "metrics")
#: How much of a differing value a disagreement shows: its repr (escaped, one line), capped.
_SHOWN = 60
#: Characters shown before the point where two texts part.
_SHOWN_BEFORE = 20


def concluded_fields(verdict: Verdict) -> dict[str, Any]:
    """The `VERDICT_FIELDS` of the `Concluded` that records `verdict`."""
    return {
        "state": verdict.state.value,
        "ok": verdict.ok,
        "failure": verdict.failure,
        "detail": verdict.detail,
        "rule": verdict.rule,
        "evidence": verdict.evidence,
        "metrics": verdict.metrics,
    }


def _as_stored(fields: dict[str, Any]) -> dict[str, Any]:
    """Verdict fields as a `Concluded` holding them stores them: built through the model
    (outside text masked with the secrets known now, then capped, as recording does) and in
    their JSON form (what a store gives back: lists for tuples, string keys, null for NaN)."""
    event = Concluded(stream="", seq=0, id="", at=0.0, **fields)
    return event.__pydantic_serializer__.to_python(event, mode="json", include=set(fields))


def _same(a: Any, b: Any) -> bool:
    """Equal JSON values, types included (`true` is not `1`, `1` is not `1.0`)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _excerpt(value: Any, other: Any) -> str:
    """`value` as a disagreement shows it: its repr (outside text escaped), from a little
    before where it parts from `other` when both are text, at most `_SHOWN` characters."""
    if isinstance(value, str) and isinstance(other, str):
        common = min(len(value), len(other))
        parts = next((i for i in range(common) if value[i] != other[i]), common)
        start = max(0, parts - _SHOWN_BEFORE)
        text = ("…" if start else "") + repr(value[start:])
    else:
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _verdict_disagreement(event: Concluded, expected: Verdict) -> Disagreement | None:
    """Does the recorded verdict hold what recording the rules' verdict would, field by
    field (`VERDICT_FIELDS`)? None when it does; else the fields that differ.

    Both sides are compared as stored (`_as_stored`). A recorded detail was masked with the
    secrets its recorder knew, from texts of the log masked alike, so masking it again with
    the secrets known now changes nothing — unless the log holds a secret its recorder did
    not know, which is then masked on both sides the same way. A state or rule that differs
    is "a different verdict" (the other fields follow from them); any other field is named.
    """
    recorded = _as_stored({name: getattr(event, name) for name in VERDICT_FIELDS})
    rules_say = _as_stored(concluded_fields(expected))
    differ = tuple(name for name in VERDICT_FIELDS if not _same(recorded[name], rules_say[name]))
    if not differ:
        return None
    if "state" in differ or "rule" in differ:
        return Disagreement(
            event.seq,
            "a different verdict",
            f"{event.state} by {event.rule}",
            _describe(expected),
            differ,
        )
    names = differ[0] if len(differ) == 1 else f"{', '.join(differ[:-1])} and {differ[-1]}"
    return Disagreement(
        event.seq,
        f"a verdict whose {names} {'differs' if len(differ) == 1 else 'differ'}",
        ", ".join(f"{name}={_excerpt(recorded[name], rules_say[name])}" for name in differ),
        ", ".join(f"{name}={_excerpt(rules_say[name], recorded[name])}" for name in differ),
        differ,
    )
