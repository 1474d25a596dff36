"""The imperative shell: a sync poll loop around the pure core, and `poll_job`.

Theory of operation (DESIGN §2). A `JobWatch` owns one job's stream in a store. Each turn
of the loop asks the core `decide(state, clock())` for a command, performs the one piece
of I/O it names through the client or a reader, records the result as an event (appended
to the store before the state changes, so nothing the state knows is missing from the
log), and folds the event in with `evolve`. A crash anywhere loses at most the I/O in
flight; a new `poll_job` on the same stream replays the log and carries on (a reattach).

The shell never decides. Its only judgement is what is worth recording: a regular
heartbeat read that returned nothing new is dropped with `skip_read`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from flashfsm.adapters import observations as obs
from flashfsm.errors import JobOwnedElsewhere, WatchStopped
from flashfsm.events.errors import ConcurrencyError
from flashfsm.events.models import (
    ARTIFACT_CAP,
    DETAIL_CAP,
    Concluded,
    EventBase,
    FailureDetailObserved,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    cap_text,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.events.store import EventStore, iter_events
from flashfsm.fsm.commands import (
    Conclude,
    FetchStatus,
    Finished,
    ProbeHealth,
    ReadFailureDetail,
    ReadHeartbeat,
    Verdict,
    Wait,
)
from flashfsm.fsm.job import JobState, decide, evolve, heartbeat_is_news, replay, skip_read
from flashfsm.ids import new_id
from flashfsm.redact import redact

logger = logging.getLogger("flashfsm")
ATTACH_TRIES = 20  # claims retried while other writers' observations keep landing

Clock = Callable[[], float]
Reader = Callable[..., Any]
Log = Callable[[str], Any] | Any


class JobClient(Protocol):
    """What `poll_job` needs from a RunPod client; both methods raise `RunpodApiError`."""

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]: ...

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]: ...


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what an orchestrator persists)."""
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
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobHandle:
        """Rebuild a handle; unknown keys are ignored and optional ones default.

        `trusted_output` is honoured only as the boolean `True` (what `to_dict` writes).
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
        )


def unpickling_allowed(handle: JobHandle, allow_pickle: bool | None = None) -> bool:
    """Whether a watch of `handle` may unpickle a Flash result: the explicit override when
    given, else the handle's `trusted_output` (False unless this run deployed the endpoint)."""
    return handle.trusted_output is True if allow_pickle is None else allow_pickle is True


@dataclass
class PollResult:
    """The outcome of a watch, as the reference returned it plus the rule and state."""

    ok: bool
    metrics: dict[str, Any] | None = None
    failure: str | None = None
    detail: str | None = None
    state: str | None = None
    rule: str | None = None

    @classmethod
    def from_verdict(cls, verdict: Verdict) -> PollResult:
        """The result an orchestrator sees for a verdict."""
        return cls(
            ok=verdict.ok,
            metrics=verdict.metrics,
            failure=verdict.failure,
            detail=verdict.detail,
            state=verdict.state.value,
            rule=verdict.rule,
        )


def default_stream(handle: JobHandle) -> str:
    """The stream name `poll_job` uses for a handle when none is given."""
    return f"job-{handle.job_id}"


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


def try_read(reader: Reader | None, force: bool) -> tuple[Any, BaseException | None]:
    """Call a reader: (its answer, None), or (None, the exception it raised)."""
    if reader is None:
        return None, None
    try:
        return reader(force=force), None
    except Exception as exc:  # a raise is data too: `heartbeat_observation` classifies it
        logger.debug("reader %r raised %s", reader, type(exc).__name__)
        return None, exc


def safe_read(reader: Reader | None, force: bool) -> Any:
    """Call a reader; a reader that raises counts as one that found nothing."""
    return try_read(reader, force)[0]


class JobWatch:
    """One supervisor's watch over one job stream: state, store and the event factory."""

    def __init__(self, store: EventStore, stream: str, state: JobState, *, watcher: str):
        self.store = store
        self.stream = stream
        self.state = state
        self.watcher = watcher

    @classmethod
    def attach(
        cls,
        store: EventStore,
        stream: str,
        handle: JobHandle,
        policy: GracePolicy,
        *,
        clock: Clock,
        interval_s: float,
        has_heartbeat_reader: bool,
        has_failure_detail_reader: bool,
        watcher: str | None = None,
    ) -> JobWatch:
        """Replay the stream and start (or resume) watching it.

        An empty stream gets `JobSubmitted` and `WatchStarted`; a stream with a submission
        gets a `WatchStarted`, a reattach when a watch existed. A concluded stream is
        returned as is: its verdict stands. If the stream moves between the replay and the
        claim, the claim is retried on the new log, unless the move was another watch
        starting: that newer watch owns the job (`JobOwnedElsewhere`).
        """
        watcher = watcher or default_watcher()
        for _ in range(ATTACH_TRIES):
            watch = cls(store, stream, replay(iter_events(store, stream)), watcher=watcher)
            if watch.state.done:
                return watch
            try:
                watch._append(
                    watch.claim_events(
                        handle,
                        policy,
                        clock(),
                        interval_s,
                        has_heartbeat_reader,
                        has_failure_detail_reader,
                    )
                )
            except ConcurrencyError:
                continue  # observations landed meanwhile: replay them and claim again
            return watch
        raise ConcurrencyError(stream, watch.state.next_seq, len(store.read(stream)))

    def claim_events(
        self,
        handle: JobHandle,
        policy: GracePolicy,
        at: float,
        interval_s: float,
        has_heartbeat_reader: bool,
        has_failure_detail_reader: bool,
    ) -> list[EventBase]:
        """The events that start this watch on the replayed state."""
        state = self.state
        recorded = state.submitted
        if recorded is not None and recorded.job_id != handle.job_id:
            raise ValueError(
                f"stream {self.stream!r} records job {recorded.job_id!r}, not {handle.job_id!r}"
            )
        batch: list[EventBase] = []
        if recorded is None and state.next_seq == 0:
            batch.append(
                self._event(
                    JobSubmitted,
                    at,
                    endpoint_id=handle.endpoint_id,
                    endpoint_name=handle.endpoint_name,
                    job_id=handle.job_id,
                    gpu_class=handle.gpu_class,
                    attempt=handle.attempt,
                    on_last_gpu=handle.on_last_gpu,
                    policy=policy,
                    submitted_at=handle.submitted_at,
                )
            )
        elif recorded is not None and recorded.policy != policy:
            logger.info("stream %s: judged by its recorded policy, not the one passed", self.stream)
        batch.append(
            self._event(
                WatchStarted,
                at,
                len(batch),
                watcher=self.watcher,
                reattach=state.first_watch is not None,
                interval_s=interval_s,
                has_heartbeat_reader=has_heartbeat_reader,
                has_failure_detail_reader=has_failure_detail_reader,
            )
        )
        return batch

    def _event(self, cls: type[EventBase], at: float, offset: int = 0, **fields: Any) -> Any:
        return cls(
            stream=self.stream, seq=self.state.next_seq + offset, id=new_id(at), at=at, **fields
        )

    def _append(self, events: list[EventBase]) -> None:
        try:
            self.store.append(self.stream, events, self.state.next_seq)
        except ConcurrencyError:
            self.raise_if_owned_elsewhere()
            raise
        self.fold(events)

    def raise_if_owned_elsewhere(self) -> None:
        """After a conflict: raise `JobOwnedElsewhere` if a newer watch took the stream."""
        newer = [
            e
            for e in self.store.read(self.stream, self.state.next_seq - 1)
            if isinstance(e, WatchStarted)
        ]
        if newer:
            raise JobOwnedElsewhere(self.stream, newer[-1].watcher)

    def fold(self, events: list[EventBase]) -> None:
        """Fold events this watch appended into its state."""
        for event in events:
            evolve(self.state, event)

    def build(self, cls: type[EventBase], at: float, **fields: Any) -> Any:
        """The next event of this stream (not yet appended)."""
        return self._event(cls, at, **fields)

    def observe(
        self,
        cls: type[EventBase] | None,
        fields: dict[str, Any],
        at: float,
        say: Callable[[str], None],
    ) -> EventBase | None:
        """Record one observation (or, for `cls=None`, drop the read that found nothing)."""
        if cls is None:
            skip_read(self.state)
            return None
        previous = self.state.last_status
        event = self.record(cls, at, **fields)
        say_observation(event, previous, self.state, say)
        return event

    def record(self, cls: type[EventBase], at: float, **fields: Any) -> Any:
        """Build one event at `at`, append it, fold it in, and return it."""
        event = self._event(cls, at, **fields)
        self._append([event])
        return event


@dataclass
class Readers:
    """The optional worker-side readers of a watch."""

    heartbeat: Reader | None = None
    failure_detail: Reader | None = None


def run_watch(
    watch: JobWatch,
    client: JobClient,
    handle: JobHandle,
    readers: Readers,
    *,
    clock: Clock,
    sleep: Callable[[float], Any],
    say: Callable[[str], None],
    allow_pickle: bool = False,
    stop: Callable[[], bool] | None = None,
) -> Verdict:
    """Drive one watch to its verdict (the sync poll loop).

    `allow_pickle` lets a COMPLETED Flash envelope's pickled result be unpickled (only for
    an endpoint the run deployed: see `unpickling_allowed`); otherwise output is JSON-only.

    `stop()`, when given, is asked before each status fetch; True ends the watch with
    `WatchStopped` and records nothing (the job is left as the log last saw it).
    """
    state = watch.state
    while True:
        now = clock()
        command = decide(state, now)
        match command:
            case Finished(verdict=verdict):
                return verdict
            case Wait(seconds=seconds):
                sleep(seconds)
            case FetchStatus():
                if stop is not None and stop():
                    raise WatchStopped(f"watch of {watch.stream!r} stopped on request")
                payload, error = _call(client.job_status, handle.endpoint_id, handle.job_id)
                watch.observe(
                    *status_observation(payload, error, allow_pickle=allow_pickle), now, say
                )
            case ProbeHealth():
                watch.observe(
                    *health_observation(*_call(client.endpoint_health, handle.endpoint_id)),
                    now,
                    say,
                )
            case ReadHeartbeat(force=force):
                raw, error = try_read(readers.heartbeat, force)
                watch.observe(
                    *heartbeat_observation(
                        state, raw, force=force, stream=watch.stream, at=now, error=error
                    ),
                    now,
                    say,
                )
            case ReadFailureDetail():
                watch.observe(
                    *failure_detail_observation(safe_read(readers.failure_detail, True)), now, say
                )
            case Conclude(verdict=verdict):
                watch.observe(*conclusion(verdict), now, say)


def _call(fn: Callable[..., Any], *args: Any) -> tuple[Any, BaseException | None]:
    """(answer, None) or (None, the exception): an API call's outcome as data."""
    try:
        return fn(*args), None
    except Exception as exc:  # every failure is recorded; the core decides what it means
        return None, exc


def status_observation(
    payload: Any = None, error: BaseException | None = None, *, allow_pickle: bool = False
) -> tuple[type[EventBase], dict[str, Any]]:
    """The event for one status fetch: its answer, or the error it raised.

    The output is decoded JSON-only unless `allow_pickle` (a trusted endpoint's job).

    Any failure of the status route, a client bug included, is an observation: it counts
    toward the poll-error budget instead of killing the watch of a healthy job.
    """
    if error is None:
        try:
            return StatusObserved, obs.status_fields(payload, allow_pickle=allow_pickle)
        except Exception as exc:  # a malformed answer, or a decode surprise
            error = exc
    return StatusFetchFailed, obs.error_fields(error)


def health_observation(
    payload: Any = None, error: BaseException | None = None
) -> tuple[type[EventBase], dict[str, Any]]:
    """The event for one health probe (a failed probe is diagnostic only)."""
    if error is None:
        try:
            return HealthObserved, obs.health_fields(payload)
        except Exception as exc:
            error = exc
    return HealthProbeFailed, obs.error_fields(error)


def heartbeat_observation(
    state: JobState,
    raw: Any,
    *,
    force: bool,
    stream: str,
    at: float,
    error: BaseException | None = None,
) -> tuple[type[EventBase] | None, dict[str, Any]]:
    """The event for one heartbeat read; `None` when a regular read brought nothing new.

    `error` is what the reader raised. On a forced read a transient failure
    (`obs.read_error_text`) is recorded as a failed read, which the core tries again; any
    other raise, and any raise on a regular read, is no data.
    """
    if error is not None:
        read_error = obs.read_error_text(error) if force else None
        if read_error is not None:
            return HeartbeatObserved, {"found": False, "forced": True, "read_error": read_error}
        raw = None
    fields = obs.heartbeat_fields(raw)
    if force:
        return HeartbeatObserved, {**fields, "forced": True}
    candidate = HeartbeatObserved(stream=stream, seq=0, id="-", at=at, **fields)
    return (HeartbeatObserved if heartbeat_is_news(state, candidate) else None), fields


def failure_detail_observation(raw: Any) -> tuple[type[EventBase], dict[str, Any]]:
    """The event for the forced read of the failure artifacts."""
    text = raw if isinstance(raw, str) else None
    return FailureDetailObserved, {"text": cap_text(redact(text), ARTIFACT_CAP, tail=True)}


def conclusion(verdict: Verdict) -> tuple[type[EventBase], dict[str, Any]]:
    """The `Concluded` event for a verdict."""
    return Concluded, {
        "state": verdict.state.value,
        "ok": verdict.ok,
        "failure": verdict.failure,
        "detail": cap_text(verdict.detail, DETAIL_CAP) or "",
        "rule": verdict.rule,
        "evidence": verdict.evidence,
        "metrics": verdict.metrics,
    }


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


def resolve_store(store: EventStore | str | None) -> EventStore:
    """A store object from a store, a URL, or None (a fresh in-memory store)."""
    if store is None:
        from flashfsm.adapters.memory import MemoryStore

        return MemoryStore()
    if isinstance(store, str):
        from flashfsm.adapters.stores import open_store

        return open_store(store)
    return store


def poll_job(
    handle: JobHandle | Mapping[str, Any],
    log: Log | None = None,
    interval_s: float = 10.0,
    heartbeat_reader: Reader | None = None,
    failure_detail_reader: Reader | None = None,
    stall_after_s: float = 1200.0,
    setup_grace_s: float = 3000.0,
    unhealthy_grace_s: float = 240.0,
    throttled_grace_s: float = 300.0,
    queue_grace_s: float = 300.0,
    deadline_s: float | None = None,
    *,
    client: JobClient | None = None,
    clock: Clock = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    store: EventStore | str | None = None,
    stream: str | None = None,
    allow_pickle: bool | None = None,
    stop: Callable[[], bool] | None = None,
    heartbeat_every_s: float | None = 30.0,
) -> PollResult:
    """Watch a submitted job until a rule reaches a verdict; every observation is an event.

    The first status fetch happens at `clock()` on entry; after each fetch the loop calls
    `sleep(interval_s)` (after a fetch error, the backoff `min(60, interval_s × n)`) before
    the next. `heartbeat_reader(force=False)` and `failure_detail_reader(force=False)` may
    be None or raise (a raise is no data, except that a forced heartbeat read raising
    `TransientReadError`, `TimeoutError` or `ConnectionError` is recorded as failed and tried
    again, `GracePolicy.forced_read_tries` times in all). A poll asks the heartbeat reader
    for a regular read only when `heartbeat_every_s` has passed since the last poll that
    asked (None: every poll); the pace is kept in the log, so a reattach keeps it.
    `log` receives progress lines.

    `store` (a store or a URL; an in-memory store by default) keeps the stream (default
    `job-<job_id>`). When the stream already holds a watch of this job, the log is replayed
    and the watch continues where it stopped (a reattach): its recorded policy stands and
    the time nobody watched is charged to no timer. When it already holds a verdict, that
    verdict is returned without any call. Raises `JobOwnedElsewhere` if a newer watch takes
    the stream over, and `WatchStopped` when `stop()` (asked before each status fetch)
    says so.

    Output is JSON-only unless the handle is `trusted_output` (its endpoint was deployed by
    this run): a Flash envelope holding only a pickle is then recorded as undecodable
    output and the job concludes by `completed_with_error`. `allow_pickle` overrides the
    handle: True unpickles (up to `MAX_PICKLE_BYTES`), False never does.
    """
    if not isinstance(handle, JobHandle):
        handle = JobHandle.from_dict(handle)
    if not (interval_s > 0):
        raise ValueError(f"interval_s must be positive, got {interval_s!r}")
    if client is None:
        client = _default_client()
    policy = GracePolicy(
        stall_after_s=stall_after_s,
        setup_grace_s=setup_grace_s,
        unhealthy_grace_s=unhealthy_grace_s,
        throttled_grace_s=throttled_grace_s,
        queue_grace_s=queue_grace_s,
        deadline_s=deadline_s,
        heartbeat_every_s=heartbeat_every_s,
    )
    say = make_say(log)
    watch = JobWatch.attach(
        resolve_store(store),
        stream or default_stream(handle),
        handle,
        policy,
        clock=clock,
        interval_s=interval_s,
        has_heartbeat_reader=heartbeat_reader is not None,
        has_failure_detail_reader=failure_detail_reader is not None,
    )
    verdict = run_watch(
        watch,
        client,
        handle,
        Readers(heartbeat_reader, failure_detail_reader),
        clock=clock,
        sleep=sleep,
        say=say,
        allow_pickle=unpickling_allowed(handle, allow_pickle),
        stop=stop,
    )
    return PollResult.from_verdict(verdict)


def _default_client() -> JobClient:
    """The RunPod REST client configured from the environment (`RUNPOD_API_KEY`, …)."""
    from flashfsm.adapters.runpod import RunpodClient

    return RunpodClient.from_env()
