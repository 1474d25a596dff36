"""One job watch, written once as a sans-IO generator; `poll_job` and the `Supervisor` drive it.

Theory of operation. `watch_steps` is the whole watch of one job: it attaches to the job's
stream (replay, then claim it with a `WatchStarted`), then loops — ask the core
`decide(state, now)` what to do, have the I/O done, turn the answer into an event, append
it, fold it in — until a verdict. It does no I/O itself: it *yields* each piece of I/O it
needs as a request and receives the answer:

- `Clock()` → the time now; `Sleep(seconds)` → the time now, once slept; `StopAsked()` →
  whether to stop (asked only by a watch whose driver can stop it: `WatchSpec.stoppable`);
- `StatusCall`, `HealthCall`, `ReaderCall` → an `Outcome` (the answer, or the exception
  the call raised, and when it was made);
- the stream writer's store requests (`flashfsm.writer`: `Replay`, `Append`, `ReadAfter`,
  and `SaveSnapshot`, answered None, once a snapshot of the stream is due).

A driver performs the requests. The sync driver (`flashfsm.shell.drive_watch`, behind
`poll_job`) calls the client, the readers and the store directly; the asyncio driver
(`flashfsm.supervisor`) awaits a shared client behind rate limits, runs readers and store
reads in worker threads and sends appends through its group commit. Both run exactly the
same watch, so a job watched either way reaches the same verdict from the same answers.

Appending goes through one `StreamWriter` with the `NEWER_WATCH_WINS` policy: the newest
watch owns the job, and an older one that finds a newer `WatchStarted` stops with
`JobOwnedElsewhere`. A crash anywhere loses at most the I/O in flight; a new watch on the
same stream replays the log and carries on (a reattach); when the log ends in the evidence
of a verdict the dead watch had no time to append, the new watch appends it first.

The watch never decides. Its only judgement is what is worth recording: a regular
heartbeat read that returned nothing new is dropped with `skip_read`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from flashfsm.adapters import observations as obs
from flashfsm.errors import WatchStopped
from flashfsm.events.errors import ConcurrencyError
from flashfsm.events.models import (
    Concluded,
    EventBase,
    HealthObserved,
    HeartbeatObserved,
    HubLocation,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.commands import (
    Conclude,
    FetchStatus,
    Finished,
    Verdict,
    Wait,
)
from flashfsm.fsm.job import JobState, concluded_fields, decide, skip_read
from flashfsm.naming import job_stream
from flashfsm.reads import (
    CLOCK,
    HEARTBEAT_READ,
    STEPS_BY_COMMAND,
    STOP_ASKED,
    Built,
    Outcome,
    ReadContext,
    Request,
    Sleep,
    StatusCall,
    status_observation,
)
from flashfsm.redact import redact
from flashfsm.results import Portable
from flashfsm.writer import JOB, NEWER_WATCH_WINS, Build, StreamWriter

logger = logging.getLogger("flashfsm")

Reader = Callable[..., Any]
Log = Callable[[str], Any] | Any


# --- handles and results --------------------------------------------------------------------


@dataclass
class JobHandle:
    """Where a submitted job lives: enough for any process to reattach to it.

    `trusted_output` says the job runs on an endpoint this run deployed itself, so a Flash
    envelope's pickled result may be unpickled. Only the code that deployed the endpoint
    sets it (`submit_run`, the run adapters); every other handle is JSON-only. It is the
    caller's own statement, never taken from anything the endpoint returns.
    """

    endpoint_id: str
    endpoint_name: str
    job_id: str
    on_last_gpu: bool = False
    submitted_at: float | None = None
    gpu_class: str | None = None
    attempt: int = 0
    trusted_output: bool = False
    hub: HubLocation | None = None  # where its worker writes heartbeat and artifacts

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what an orchestrator persists); `hub` only when known."""
        hub = {} if self.hub is None else {"hub": self.hub.model_dump()}
        return {
            "provider": "runpod",
            "endpoint_id": self.endpoint_id,
            "endpoint_name": self.endpoint_name,
            "job_id": self.job_id,
            "on_last_gpu": self.on_last_gpu,
            "submitted_at": self.submitted_at,
            "gpu_class": self.gpu_class,
            "attempt": self.attempt,
            "trusted_output": self.trusted_output,
            **hub,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobHandle:
        """Rebuild a handle; unknown keys are ignored and optional ones default.

        `trusted_output` is honoured only as the boolean `True` (what `to_dict` writes); a
        `hub` that is not a `HubLocation`'s fields is a `ValueError`.
        """
        missing = [k for k in ("endpoint_id", "job_id") if not data.get(k)]
        if missing:
            raise ValueError(f"a job handle needs {' and '.join(missing)}")
        submitted_at = data.get("submitted_at")
        attempt = data.get("attempt")
        on_last_gpu = data.get("on_last_gpu", False)
        if isinstance(on_last_gpu, str):
            on_last_gpu = on_last_gpu.strip().lower() in ("true", "1", "yes")
        number = (int, float)
        return cls(
            endpoint_id=str(data["endpoint_id"]),
            endpoint_name=str(data.get("endpoint_name") or ""),
            job_id=str(data["job_id"]),
            on_last_gpu=on_last_gpu is True,
            submitted_at=float(submitted_at)
            if isinstance(submitted_at, number) and not isinstance(submitted_at, bool)
            else None,
            gpu_class=str(data["gpu_class"]) if data.get("gpu_class") else None,
            attempt=attempt
            if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0
            else 0,
            trusted_output=data.get("trusted_output") is True,
            hub=_hub_of(data.get("hub")),
        )


def _hub_of(value: Any) -> HubLocation | None:
    """A handle dict's `hub` (None when absent); `ValueError` naming the field otherwise."""
    if value is None or isinstance(value, HubLocation):
        return value
    try:
        return HubLocation.model_validate(value)
    except ValidationError as exc:
        detail = exc.errors()[0]["msg"]
        raise ValueError(f"a job handle's hub is not a Hub location: {detail}") from None


def unpickling_allowed(handle: JobHandle, allow_pickle: bool | None = None) -> bool:
    """Whether a watch of `handle` may unpickle a Flash result: the explicit override when
    given, else the handle's `trusted_output` (False unless this run deployed the endpoint)."""
    return handle.trusted_output is True if allow_pickle is None else allow_pickle is True


@dataclass
class PollResult(Portable):
    """The outcome of a watch, as the reference returned it plus the rule and state
    (`to_dict`/`from_dict`: plain JSON for an orchestrator to store)."""

    ok: bool
    metrics: dict[str, Any] | None = None
    failure: str | None = None
    detail: str | None = None
    state: str | None = None
    rule: str | None = None

    @classmethod
    def from_verdict(cls, verdict: Verdict) -> PollResult:
        """The result an orchestrator sees for a verdict."""
        failure = verdict.failure
        return cls(
            ok=verdict.ok,
            metrics=verdict.metrics,
            failure=None if failure is None else str(failure),
            detail=verdict.detail,
            state=verdict.state.value,
            rule=verdict.rule,
        )


def default_stream(handle: JobHandle) -> str:
    """The stream name `poll_job` uses for a handle when none is given."""
    return job_stream(handle.job_id)


def default_watcher() -> str:
    """Who is watching: host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def make_say(log: Log | None) -> Callable[[str], None]:
    """A function that sends one progress line to `log` (a callable or a writable file)."""

    def say(line: str) -> None:
        line = redact(line) or ""
        logger.debug("%s", line)
        if log is None:
            return
        if callable(log):
            log(line)
        else:
            print(line, file=log, flush=True)

    return say


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """What one watch needs to know, whichever driver runs it."""

    handle: JobHandle
    stream: str
    policy: GracePolicy
    interval_s: float
    has_heartbeat_reader: bool
    has_failure_detail_reader: bool
    watcher: str
    allow_pickle: bool = False
    #: Whether the driver can be asked to stop the watch (`StopAsked` before each status
    #: fetch): a run's watch can be; a supervisor's watches stop by being cancelled.
    stoppable: bool = False
    #: Events between two snapshots of the job's stream (None: the watch writes none); the
    #: driver sets it from its store (`flashfsm.writer.snapshot_interval`).
    snapshot_every: int | None = None
    #: Whether the client reads the platform's worker records and worker logs
    #: (`has_worker_reader`): the watch then records who took the job and, before a
    #: failing verdict, the worker's last log lines.
    has_worker_reader: bool = False

    @classmethod
    def of(
        cls,
        handle: JobHandle,
        policy: GracePolicy,
        interval_s: float,
        *,
        stream: str | None = None,
        heartbeat: bool = False,
        failure_detail: bool = False,
        watcher: str | None = None,
        allow_pickle: bool | None = None,
        stoppable: bool = False,
        snapshot_every: int | None = None,
        worker: bool = False,
    ) -> WatchSpec:
        """The spec of a new watch, its defaults filled in one place: the handle's job
        stream, this host and process as the watcher, and unpickling only when
        `unpickling_allowed` says so."""
        return cls(
            handle,
            stream or default_stream(handle),
            policy,
            interval_s,
            heartbeat,
            failure_detail,
            watcher or default_watcher(),
            allow_pickle=unpickling_allowed(handle, allow_pickle),
            stoppable=stoppable,
            snapshot_every=snapshot_every,
            has_worker_reader=worker,
        )


def conclusion(verdict: Verdict) -> Built:
    """The `Concluded` event for a verdict (its fields are the ones `verify` checks)."""
    return Concluded, concluded_fields(verdict)


def say_observation(
    event: EventBase, previous_status: str | None, state: JobState, say: Callable[[str], None]
) -> None:
    """The progress line, if any, an event is worth."""
    job = f"job {state.submitted.job_id}" if state.submitted is not None else event.stream
    match event:
        case StatusObserved(status=status) if status != previous_status:
            say(f"{job}: {status}")
        case StatusFetchFailed(error_class=error_class, http_status=code):
            http = "" if code is None else f" HTTP {code}"
            streak = len(state.error_seqs)
            say(f"{job}: status fetch failed ({error_class}{http}); {streak} in a row")
        case HealthObserved(workers=w) if (
            w.throttled or w.unhealthy or w.initializing or not (w.running or w.ready or w.idle)
        ):
            say(f"{job}: queued; workers: {w.model_dump()}")
        case HeartbeatObserved(found=True, forced=False, stage=stage, step=step):
            say(f"heartbeat: {stage}{'' if step is None else f' step {step}'}")
        case HeartbeatObserved(forced=True, read_error=str() as read_error):
            tries = len(state.forced_read_errors)
            again = "; reading it again" if "forced_heartbeat" in state.pending else ""
            say(f"{job}: forced heartbeat read {tries} failed ({read_error}){again}")
        case Concluded(state=final, ok=ok, failure=failure, rule=rule):
            say(f"{job}: {final}: {'succeeded' if ok else f'{failure} ({rule})'}")


# --- the watch ------------------------------------------------------------------------------


def submission(handle: JobHandle, policy: GracePolicy) -> dict[str, Any]:
    """The fields of the `JobSubmitted` that records `handle` judged by `policy` (what a
    watch's first claim and a fleet's hand-off write)."""
    return {
        "endpoint_id": handle.endpoint_id,
        "endpoint_name": handle.endpoint_name,
        "job_id": handle.job_id,
        "gpu_class": handle.gpu_class,
        "attempt": handle.attempt,
        "on_last_gpu": handle.on_last_gpu,
        "policy": policy,
        "submitted_at": handle.submitted_at,
        **({} if handle.hub is None else {"hub": handle.hub}),
    }


class HandleFacts(Protocol):
    """What a handle is rebuilt from: a `JobSubmitted`, or a fleet's job intake."""

    @property
    def endpoint_id(self) -> str: ...
    @property
    def endpoint_name(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def on_last_gpu(self) -> bool: ...
    @property
    def submitted_at(self) -> float | None: ...
    @property
    def gpu_class(self) -> str | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def hub(self) -> HubLocation | None: ...


def recorded_handle(submitted: HandleFacts) -> JobHandle:
    """The handle a `JobSubmitted` (or a fleet's intake) records (JSON-only:
    `trusted_output` is never recorded)."""
    return JobHandle(
        submitted.endpoint_id,
        submitted.endpoint_name,
        submitted.job_id,
        on_last_gpu=submitted.on_last_gpu,
        submitted_at=submitted.submitted_at,
        gpu_class=submitted.gpu_class,
        attempt=submitted.attempt,
        hub=submitted.hub,
    )


def claim_events(writer: StreamWriter[JobState], spec: WatchSpec, at: float) -> list[EventBase]:
    """The events that start this watch on the replayed state: a `JobSubmitted` on an empty
    stream, then a `WatchStarted` (a reattach when a watch existed); none on a verdict."""
    state = writer.state
    if state.done:
        return []
    handle = spec.handle
    recorded = state.submitted
    if recorded is not None and recorded.job_id != handle.job_id:
        raise ValueError(
            f"stream {writer.stream!r} records job {recorded.job_id!r}, not {handle.job_id!r}"
        )
    batch: list[EventBase] = []
    if recorded is None and state.next_seq == 0:
        batch.append(writer.event(JobSubmitted, at, **submission(handle, spec.policy)))
    elif recorded is not None and recorded.policy != spec.policy:
        logger.info("stream %s: judged by its recorded policy, not the one passed", writer.stream)
    # A clock behind the log's last event (another host's): record by how much, and start
    # on the log's clock; the watch stamps everything it writes at its clock plus the skew.
    last_at = state.last_at
    skew = {} if last_at is None or at >= last_at else {"skew_s": last_at - at}
    batch.append(
        writer.event(
            WatchStarted,
            last_at if skew and last_at is not None else at,
            len(batch),
            watcher=spec.watcher,
            reattach=state.first_watch is not None,
            interval_s=spec.interval_s,
            has_heartbeat_reader=spec.has_heartbeat_reader,
            has_failure_detail_reader=spec.has_failure_detail_reader,
            **skew,  # (a skew makes it a v2 event, a worker reader a v4 one)
            **({"has_worker_reader": True} if spec.has_worker_reader else {}),
        )
    )
    return batch


def clock_skew(state: JobState) -> float:
    """How far this watch's clock is behind the log: the `skew_s` its `WatchStarted`
    recorded (0 when it recorded none, or when no watch started)."""
    return 0.0 if state.watch is None else state.watch.skew_s


def attach_steps(
    spec: WatchSpec, writer: StreamWriter[JobState] | None = None, *, opened: bool = False
) -> Generator[Request, Any, StreamWriter[JobState]]:
    """Replay the job's stream and claim it: the watch's writer, ready to watch.

    A concluded stream is left as it is (its verdict stands). If the stream moves between
    the replay and the claim, the new events are folded in and the claim rebuilt, unless
    the move was another watch starting: that newer watch owns the job.

    The replay starts from the stream's latest valid snapshot when the store keeps one; a
    stream that has gone `spec.snapshot_every` events without one (or whose snapshot was
    ignored) gets a new one after the claim.
    """
    writer = writer or StreamWriter(None, spec.stream, JOB, NEWER_WATCH_WINS)
    if spec.snapshot_every is not None:
        writer.snapshot_every = spec.snapshot_every
    if not opened:  # (a driver that replayed the stream itself passes its writer opened)
        yield from writer.open_steps()
    state = writer.state
    if not state.done and state.watch is not None and state.last_at is not None:
        # A watch that died between its last observation and the verdict the rules reach on
        # it: that verdict is the log's, at the time of its evidence, however late this
        # watch comes (a reattach's blind gap would otherwise defer it to a fresh poll).
        decided = decide(state.copy(), state.last_at)
        if isinstance(decided, Conclude):
            built = conclusion(decided.verdict)
            yield from writer.append_steps(_observation_build(writer, built, state.last_at))
    at = yield CLOCK  # (a stream that holds its verdict now gets no claim: `claim_events`)
    yield from writer.append_steps(lambda _state: claim_events(writer, spec, at))
    if writer.snapshot_due():
        yield writer.snapshot_request()
    return writer


def loop_steps(
    writer: StreamWriter[JobState], spec: WatchSpec, say: Callable[[str], None]
) -> Generator[Request, Any, Verdict]:
    """Watch an attached job to its verdict (the poll loop)."""
    state, stream = writer.state, writer.stream
    # The clock skew this watch recorded when it started (see `claim_events`): it judges and
    # stamps on the log's clock, its own plus the skew; requests keep its own clock.
    skew, stoppable, allow_pickle = clock_skew(state), spec.stoppable, spec.allow_pickle
    endpoint_id, reads_workers = spec.handle.endpoint_id, spec.has_worker_reader
    worker_id: str | None = None  # the worker the last status answer named
    # Whether this poll's regular heartbeat read found nothing new (dropped, unrecorded): a
    # replay of the log still has it pending, so a snapshot taken in this poll must too.
    skipped = False
    del spec  # what it needs is read: a sleeping watch holds no more than it must
    own, judged = (yield CLOCK), False
    while True:
        now = own + skew
        # (`judged`: the state has not changed since the rules last found nothing in it.)
        command = decide(state, now, judged=judged)
        match command:
            case Finished(verdict=verdict):
                return verdict
            case Wait(seconds=seconds):
                # Nothing of the last poll is held while asleep (its answer, its event):
                # a supervisor keeps thousands of these generators waiting.
                got = built = recorded = command = steps = context = None
                own, judged = (yield Sleep(seconds)), True
                continue
            case FetchStatus():
                skipped = False  # (a new poll: its status answer sets what is pending anew)
                if stoppable and (yield STOP_ASKED):
                    raise WatchStopped(f"watch of {stream!r} stopped on request")
                due = state.next_fetch_at
                got = yield StatusCall(own, None if due is None else due - skew)
                built = status_observation(got.value, got.error, allow_pickle=allow_pickle)
                at = got.at + skew
                if reads_workers and got.error is None:
                    worker_id = obs.status_worker_id(got.value) or worker_id
            case Conclude(verdict=verdict):
                built, at = conclusion(verdict), now
            case _:  # a read: made by its declared steps (`flashfsm.reads`)
                steps = STEPS_BY_COMMAND.get(command)
                if steps is None:
                    raise TypeError(f"the core asked for something no watch does: {command!r}")
                context = ReadContext(command, state, endpoint_id, worker_id, own, stream, skew)
                built, at = yield from steps(context)
                at += skew
        if built[0] is None:
            skip_read(state)  # a regular read that found nothing new: nothing to record
            skipped = True
        else:
            # The writer's append, its first try made right here: a poll appends once or
            # twice, and a generator per append is measurable across a fleet of watches.
            previous = state.last_status
            recorded = observation_events(writer, state, built, at)
            if recorded:
                try:
                    yield writer.request(recorded)
                except ConcurrencyError as conflict:
                    rebuild = _observation_build(writer, built, at)
                    recorded = yield from writer.retry_steps(rebuild, conflict)
                else:
                    writer.took(recorded)
            for event in recorded:
                say_observation(event, previous, state, say)
            if writer.snapshot_due():  # written by the driver after the append, off the watch
                request = writer.snapshot_request()
                # (The skipped read came first: the reads are made in order. A verdict
                # clears what is pending, in a replay too.)
                if skipped and not request.state.done:
                    request.state.pending = (HEARTBEAT_READ, *request.state.pending)
                yield request
        own, judged = (yield CLOCK), False


def observation_events(
    writer: StreamWriter[JobState], s: JobState, built: Built, at: float
) -> list[EventBase]:
    """The observation's event, built on the state `s` it is appended to: none once the log
    holds its verdict, and never stamped before the log's last event (a clock that stepped
    back mid-watch): the log's times do not go backwards."""
    if s.done:
        return []
    last = s.last_at
    cls, fields = built
    return [writer.event(cls, at if last is None or at >= last else last, **fields)]  # type: ignore[arg-type]


def _observation_build(writer: StreamWriter[JobState], built: Built, at: float) -> Build[JobState]:
    """`observation_events` built anew after a conflict, once the newer events are folded
    in (a log that meanwhile got its verdict takes nothing more)."""
    return lambda s: observation_events(writer, s, built, at)


def watch_steps(spec: WatchSpec, say: Callable[[str], None]) -> Generator[Request, Any, Verdict]:
    """The whole watch of one job: attach, then loop to a verdict."""
    writer = yield from attach_steps(spec)
    return (yield from loop_steps(writer, spec, say))


def call(fn: Callable[..., Any] | None, *args: Any, at: float, **kwargs: Any) -> Outcome:
    """Call `fn` and return its `Outcome` (a raise is an outcome too; no `fn`, no answer)."""
    if fn is None:
        return Outcome(at)
    try:
        return Outcome(at, fn(*args, **kwargs))
    except Exception as exc:  # every failure is recorded; the core decides what it means
        # The callable's name only: its repr could show what it holds (a token, a key).
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        logger.debug("%s raised %s", redact(str(name)), type(exc).__name__)
        return Outcome(at, error=exc)
