"""`poll_job`: the synchronous driver of the watch (`flashfsm.watch.watch_steps`).

Theory of operation. The watch itself is a sans-IO generator (see `flashfsm.watch`); this
module performs what it asks for, one request at a time, in the calling thread: the clock
and `sleep` it was given, the RunPod client, the worker-side readers, and the store. A crash
anywhere loses at most the I/O in flight; a new `poll_job` on the same stream replays the
log and carries on (a reattach).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from flashfsm.events.policy import DEFAULT_POLICY, GracePolicy
from flashfsm.events.store import EventStore
from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.job import JobState
from flashfsm.naming import check_stream, job_stream
from flashfsm.reads import (
    ApiCall,
    Clock,
    HealthCall,
    ReaderCall,
    Request,
    Sleep,
    StatusCall,
    StopAsked,
    has_worker_reader,
)
from flashfsm.watch import (
    JobHandle,
    Log,
    PollResult,
    Reader,
    WatchSpec,
    attach_steps,
    call,
    loop_steps,
    make_say,
    watch_steps,
)
from flashfsm.writer import (
    JOB,
    NEWER_WATCH_WINS,
    StreamWriter,
    perform,
    run_steps,
    snapshot_interval,
)

if TYPE_CHECKING:
    from flashfsm.adapters.runpod import RunpodClient

R = TypeVar("R")
ClockFn = Callable[[], float]


class JobClient(Protocol):
    """What `poll_job` needs from a RunPod client; both methods raise `RunpodApiError`."""

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]: ...

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]: ...


@dataclass
class Readers:
    """The optional worker-side readers of a watch."""

    heartbeat: Reader | None = None
    failure_detail: Reader | None = None


@dataclass
class SyncIO:
    """Everything the synchronous driver performs a watch's requests with."""

    store: EventStore
    client: JobClient | None
    handle: JobHandle
    readers: Readers
    clock: ClockFn
    sleep: Callable[[float], Any]
    stop: Callable[[], bool] | None = None


def drive_watch(steps: Generator[Request, Any, R], io: SyncIO) -> R:
    """Run a watch generator to its end, performing each request in this thread."""
    return run_steps(steps, lambda request: _perform(request, io))


def _perform(request: Request, io: SyncIO) -> Any:
    """One request of a watch, the synchronous way (a store error raises, for the writer)."""
    handle = io.handle
    match request:
        case Clock():
            return io.clock()
        case Sleep(seconds=seconds):
            io.sleep(seconds)
            return io.clock()
        case StopAsked():
            return io.stop is not None and bool(io.stop())
        case StatusCall(at=at):
            job_status = None if io.client is None else io.client.job_status
            return call(job_status, handle.endpoint_id, handle.job_id, at=at)
        case HealthCall(at=at):
            health = None if io.client is None else io.client.endpoint_health
            return call(health, handle.endpoint_id, at=at)
        case ReaderCall(at=at, reader=name, force=force):
            return call(getattr(io.readers, name), force=force, at=at)
        case ApiCall(at=at, name=name, args=args, kwargs=kwargs):
            return call(getattr(io.client, name, None), *args, at=at, **kwargs)
    return perform(io.store, request)


def attach(
    store: EventStore,
    stream: str,
    handle: JobHandle,
    policy: GracePolicy,
    *,
    clock: ClockFn,
    interval_s: float,
    has_heartbeat_reader: bool,
    has_failure_detail_reader: bool,
    watcher: str | None = None,
    writer: StreamWriter[JobState] | None = None,
    has_worker_reader: bool = False,
) -> StreamWriter[JobState]:
    """Replay `stream` and start (or resume) watching it: the watch's writer.

    An empty stream gets `JobSubmitted` and `WatchStarted`; a stream with a submission gets
    a `WatchStarted`, a reattach when a watch existed. A concluded stream is returned as it
    is: its verdict stands. Raises `JobOwnedElsewhere` when a newer watch claims it first.
    `writer` may be given (a subclass, say) to attach through it. `has_worker_reader` says
    the client that will drive the watch reads worker records and logs (`has_worker_reader`
    of `flashfsm.watch`). A stream name holding a control character is a `ValueError`
    (`flashfsm.naming.check_stream`).
    """
    check_stream(stream)
    spec = WatchSpec.of(
        handle,
        policy,
        interval_s,
        stream=stream,
        heartbeat=has_heartbeat_reader,
        failure_detail=has_failure_detail_reader,
        watcher=watcher,
        allow_pickle=False,
        snapshot_every=snapshot_interval(store),
        worker=has_worker_reader,
    )
    writer = writer or StreamWriter(store, stream, JOB, NEWER_WATCH_WINS)
    io = SyncIO(store, None, handle, Readers(), clock, time.sleep)
    return drive_watch(attach_steps(spec, writer), io)


def run_watch(
    writer: StreamWriter[JobState],
    client: JobClient,
    handle: JobHandle,
    readers: Readers,
    *,
    clock: ClockFn,
    sleep: Callable[[float], Any],
    say: Callable[[str], None],
    allow_pickle: bool = False,
    stop: Callable[[], bool] | None = None,
) -> Verdict:
    """Drive an attached watch to its verdict (the sync poll loop).

    `allow_pickle` lets a COMPLETED Flash envelope's pickled result be unpickled (only for
    an endpoint the run deployed: see `unpickling_allowed`); otherwise output is JSON-only.
    `stop()`, when given, is asked before each status fetch; True ends the watch with
    `WatchStopped` and records nothing (the job is left as the log last saw it).
    """
    watch = writer.state.watch
    spec = WatchSpec(
        handle,
        writer.stream,
        writer.state.policy,
        10.0 if watch is None else watch.interval_s,
        readers.heartbeat is not None,
        readers.failure_detail is not None,
        "" if watch is None else watch.watcher,
        allow_pickle=allow_pickle,
        stoppable=stop is not None,
        has_worker_reader=watch is not None and watch.has_worker_reader,
    )
    assert writer.store is not None, "run_watch needs a writer with a store"
    io = SyncIO(writer.store, client, handle, readers, clock, sleep, stop)
    return drive_watch(loop_steps(writer, spec, say), io)


def resolve_store(store: EventStore | str | None) -> EventStore:
    """A store object from a store, a URL, or None (a fresh in-memory store): the caller
    closes what a URL opened. (`poll_job` and `supervise_run` take theirs by `opened_store`.)"""
    if store is None:
        from flashfsm.adapters.memory import MemoryStore

        return MemoryStore()
    if isinstance(store, str):
        from flashfsm.adapters.stores import open_store

        return open_store(store)
    return store


@contextlib.contextmanager
def opened_store(store: EventStore | str | None) -> Iterator[EventStore]:
    """The store a call works in, as `poll_job` and `supervise_run` take it: a store object
    is the caller's (used, never closed); a URL is opened here and closed when the block
    ends; None is the durable default store, `default_store_url()` (`$FLASHFSM_STORE`, else
    SQLite in the user's data directory), opened and closed likewise, so a call made again
    after a crash finds its stream and resumes. `memory://` asks for a fresh in-memory store.
    """
    if store is not None and not isinstance(store, str):
        yield store
        return
    from flashfsm.adapters.stores import default_store_url, open_store

    opened = open_store(default_store_url() if store is None else store)
    try:
        yield opened
    finally:
        opened.close()


def poll_job(
    handle: JobHandle | Mapping[str, Any],
    log: Log | None = None,
    interval_s: float = 10.0,
    heartbeat_reader: Reader | None = None,
    failure_detail_reader: Reader | None = None,
    stall_after_s: float = DEFAULT_POLICY.stall_after_s,
    setup_grace_s: float = DEFAULT_POLICY.setup_grace_s,
    unhealthy_grace_s: float = DEFAULT_POLICY.unhealthy_grace_s,
    throttled_grace_s: float = DEFAULT_POLICY.throttled_grace_s,
    queue_grace_s: float = DEFAULT_POLICY.queue_grace_s,
    deadline_s: float | None = None,
    *,
    client: JobClient | None = None,
    clock: ClockFn = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    store: EventStore | str | None = None,
    stream: str | None = None,
    allow_pickle: bool | None = None,
    stop: Callable[[], bool] | None = None,
    heartbeat_every_s: float | None = DEFAULT_POLICY.heartbeat_every_s,
    start_grace_s: float = DEFAULT_POLICY.start_grace_s,
    watcher: str | None = None,
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
    A client that reads the platform's worker records also reads them while the job is
    IN_QUEUE, at the probe's pace: a worker listed starting means capacity was found, so
    `start_grace_s` (not the queue grace) bounds the wait (docs/rules.md, `slow_start`).
    `log` receives progress lines.

    `store` keeps the stream (default `job-<job_id>`): a store object (the caller's, left
    open), a URL (opened, and closed on return), or by default the durable default store
    (`default_store_url()`: `$FLASHFSM_STORE`, else SQLite in the user's data directory),
    so calling again after a crash resumes; `store="memory://"` asks for a fresh in-memory
    store (nothing to resume). A stream name (or a job id making the default one) holding a
    control character is a `ValueError` before anything is opened (`check_stream` of
    `flashfsm.naming`). When the stream already holds a watch of this job, the log is
    replayed and the watch continues where it stopped (a reattach): its recorded policy
    stands and the time nobody watched is charged to no timer. When it already holds a
    verdict, that verdict is returned without any call. A `KeyboardInterrupt` (SIGINT)
    records nothing and leaves the job running: calling again reattaches. Raises
    `JobOwnedElsewhere` if a newer watch takes the stream over, and `WatchStopped` when
    `stop()` (asked before each status fetch) says so. `watcher` names who watches in the
    `WatchStarted` (default: host and process).

    Output is JSON-only unless the handle is `trusted_output` (its endpoint was deployed by
    this run): a Flash envelope holding only a pickle is then recorded as undecodable
    output and the job concludes by `completed_with_error`. `allow_pickle` overrides the
    handle: True unpickles (up to `MAX_PICKLE_BYTES`), False never does.
    """
    if not isinstance(handle, JobHandle):
        handle = JobHandle.from_dict(handle)
    if not (interval_s > 0):
        raise ValueError(f"interval_s must be positive, got {interval_s!r}")
    check_stream(stream or job_stream(handle.job_id), "" if stream else "job_id")
    policy = GracePolicy(
        stall_after_s=stall_after_s,
        setup_grace_s=setup_grace_s,
        unhealthy_grace_s=unhealthy_grace_s,
        throttled_grace_s=throttled_grace_s,
        queue_grace_s=queue_grace_s,
        deadline_s=deadline_s,
        heartbeat_every_s=heartbeat_every_s,
        start_grace_s=start_grace_s,
    )
    readers = Readers(heartbeat_reader, failure_detail_reader)
    with contextlib.ExitStack() as owned:  # what this call opens, it closes
        if client is None:
            client = owned.enter_context(_default_client())
        opened = owned.enter_context(opened_store(store))
        spec = WatchSpec.of(
            handle,
            policy,
            interval_s,
            stream=stream,
            heartbeat=heartbeat_reader is not None,
            failure_detail=failure_detail_reader is not None,
            allow_pickle=allow_pickle,
            stoppable=stop is not None,
            watcher=watcher,
            snapshot_every=snapshot_interval(opened),
            worker=has_worker_reader(client),
        )
        io = SyncIO(opened, client, handle, readers, clock, sleep, stop)
        return PollResult.from_verdict(drive_watch(watch_steps(spec, make_say(log)), io))


def _default_client() -> RunpodClient:
    """The RunPod REST client configured from the environment (`RUNPOD_API_KEY`, …)."""
    from flashfsm.adapters.runpod import RunpodClient

    return RunpodClient.from_env()


__all__ = [
    "JobClient",
    "JobHandle",
    "PollResult",
    "Readers",
    "SyncIO",
    "attach",
    "drive_watch",
    "opened_store",
    "poll_job",
    "resolve_store",
    "run_watch",
]
