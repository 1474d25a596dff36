"""What a watch asks its driver for, and the reads it makes, each declared once.

A watch (`flashfsm.watch`) is a sans-IO generator: it yields requests (the ones below and
the writer's store requests) and a driver — `poll_job`'s in the calling thread, the
`Supervisor`'s under asyncio — performs them. A read of the platform or of the worker's
side is one declaration across the two layers it spans: its core half (`ReadKind` in
`flashfsm.fsm.reads`: its name, the command `decide` asks for it with, its events and
fold, its docs row) and its shell half here, the steps that perform it (`ReadSteps`: a
generator of requests, the same for both drivers, that returns what to record). The
drivers know no read: they perform the few kinds of request (`ApiCall` reaches any method
of the platform client), so a new read is one `declare_read` and reaches both.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from flashfsm.adapters import observations as obs
from flashfsm.events.models import (
    DECLARED_EVENTS,
    EventBase,
    FailureDetailObserved,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    StatusFetchFailed,
    StatusObserved,
    WorkerLogObserved,
    WorkerObserved,
    register_event,
    unregister_event,
)
from flashfsm.fsm import reads as core
from flashfsm.fsm.commands import Command, Observe
from flashfsm.fsm.job import declared_fold, heartbeat_is_news
from flashfsm.fsm.reads import ReadKind, register_read, unregister_read
from flashfsm.fsm.rules import Read
from flashfsm.fsm.state import JobState
from flashfsm.writer import StoreRequest

Built = tuple[type[EventBase] | None, dict[str, Any]]


# --- what a watch asks its driver for -------------------------------------------------------
# The requests and the outcome are plain slotted dataclasses, not frozen ones: a watch
# makes several per poll, and a frozen dataclass's __init__ costs about three times as much.


@dataclass(slots=True)
class Clock:
    """The time now (seconds on the watch's clock)."""


@dataclass(slots=True)
class Sleep:
    """Wait `seconds`, then answer with the time now (a poll starts after every wait, so
    the answer saves it a `Clock()`)."""

    seconds: float


@dataclass(slots=True)
class StopAsked:
    """Whether the watch is to stop before its next status fetch (a cancelled run)."""


@dataclass(slots=True)
class StatusCall:
    """Fetch the job's status; `at` is when the watch decided to, `due` when it was due."""

    at: float
    due: float | None


@dataclass(slots=True)
class HealthCall:
    """Probe the endpoint's `/health`."""

    at: float


@dataclass(slots=True)
class ReaderCall:
    """Call a worker-side reader (`"heartbeat"` or `"failure_detail"`) with `force`."""

    at: float
    reader: str
    force: bool


@dataclass(slots=True)
class ApiCall:
    """Call the platform client's method `name` with `args` (a read of the platform's
    records: `endpoint_workers`, `get_endpoint`, `worker_log`)."""

    at: float
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(slots=True)
class Outcome:
    """What a call came back with: its answer or the exception it raised, and when it was
    made (`at` of the request, unless the driver had to wait before making it)."""

    at: float
    value: Any = None
    error: BaseException | None = None


Request = Clock | Sleep | StopAsked | StatusCall | HealthCall | ReaderCall | ApiCall | StoreRequest
CLOCK, STOP_ASKED = Clock(), StopAsked()
HEARTBEAT_READ = Read.HEARTBEAT.value


#: The client methods a watch reads the platform's worker records and logs with.
WORKER_METHODS = ("endpoint_workers", "get_endpoint", "worker_log")
#: How many of the worker's last log lines a watch asks for before a failing verdict.
WORKER_LOG_TAIL = 100


def has_worker_reader(client: Any) -> bool:
    """Whether `client` can read the platform's worker records and worker logs (RunPod's
    clients can; a scripted test client without those methods cannot)."""
    return all(callable(getattr(client, name, None)) for name in WORKER_METHODS)


# --- turning answers into events ------------------------------------------------------------


def status_observation(
    payload: Any = None, error: BaseException | None = None, *, allow_pickle: bool = False
) -> Built:
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


def health_observation(payload: Any = None, error: BaseException | None = None) -> Built:
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
) -> Built:
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


def failure_detail_observation(raw: Any) -> Built:
    """The event for the forced read of the failure artifacts (its tail is kept)."""
    return FailureDetailObserved, {"text": raw if isinstance(raw, str) else None}


def worker_observation(worker_id: str | None, workers: Outcome, endpoint: Outcome | None) -> Built:
    """The event for one worker-record read: the platform's list of the endpoint's workers
    (and, on the first read, the endpoint's record with its idle timeout), or its error."""
    if workers.error is not None:
        return WorkerObserved, obs.worker_error_fields(workers.error, worker_id)
    settings = None if endpoint is None else endpoint.value
    fields = obs.worker_fields(workers.value, settings, worker_id)
    if endpoint is not None and endpoint.error is not None and fields.get("read_error") is None:
        fields["read_error"] = obs.read_error_text(endpoint.error) or type(endpoint.error).__name__
    return WorkerObserved, fields


def worker_log_observation(
    worker: tuple[str, str | None] | None, log: Outcome | None, listing_error: BaseException | None
) -> Built:
    """The event for one worker-log read: the last lines of the chosen worker's log, or why
    there are none (no worker listed, the read failed)."""
    worker_id, worker_status = worker if worker is not None else (None, None)
    error = listing_error if log is None else log.error
    if error is not None:
        return WorkerLogObserved, obs.worker_log_error_fields(error, worker_id, worker_status)
    if log is None:
        return WorkerLogObserved, {"read_error": "the endpoint lists no worker"}
    return WorkerLogObserved, obs.worker_log_fields(log.value, worker_id, worker_status)


# --- how each read is made (the shell's half of its declaration) -----------------------------


@dataclass(slots=True)
class ReadContext:
    """What a read's steps are given: the `command` that asked for it, the `state` it is
    made in, the job's endpoint, the worker the last status answer named, the watch's own
    clock when it asked (`own`), the stream, and the watch's clock skew (the log's time is
    its own plus the skew)."""

    command: Command
    state: JobState
    endpoint_id: str
    worker_id: str | None
    own: float
    stream: str
    skew: float


#: A read's steps: requests out, answers in; it returns what to record (the event's model
#: and fields; no model: nothing worth recording) and when it read, on the watch's clock.
ReadSteps = Callable[[ReadContext], Generator["Request", Any, tuple[Built, float]]]


def _probe(c: ReadContext) -> Generator[Request, Any, tuple[Built, float]]:
    """The endpoint's `/health` (a failed probe is recorded, and judges nothing)."""
    got = yield HealthCall(c.own)
    return health_observation(got.value, got.error), got.at


def _heartbeat(c: ReadContext) -> Generator[Request, Any, tuple[Built, float]]:
    """The worker's heartbeat, a regular or a forced read (the command says which)."""
    force = bool(getattr(c.command, "force", False))
    got = yield ReaderCall(c.own, "heartbeat", force)
    at = got.at + c.skew
    built = heartbeat_observation(
        c.state, got.value, force=force, stream=c.stream, at=at, error=got.error
    )
    return built, got.at


def _failure_detail(c: ReadContext) -> Generator[Request, Any, tuple[Built, float]]:
    """The worker's failure artifacts (what a failed read gives is no text)."""
    got = yield ReaderCall(c.own, "failure_detail", True)
    return failure_detail_observation(None if got.error is not None else got.value), got.at


def _worker(c: ReadContext) -> Generator[Request, Any, tuple[Built, float]]:
    """The worker record a pickup asks for (and the endpoint's, once a watch, or again
    after a read of it failed)."""
    got = yield ApiCall(c.own, "endpoint_workers", (c.endpoint_id,), {})
    endpoint, last = None, c.state.worker
    if last is None or (last.idle_timeout_s is None and last.read_error is not None):
        endpoint = yield ApiCall(c.own, "get_endpoint", (c.endpoint_id,), {})
    return worker_observation(c.worker_id, got, endpoint), got.at


def _worker_log(c: ReadContext) -> Generator[Request, Any, tuple[Built, float]]:
    """The worker's last log lines before a failing verdict: of the worker the status
    named, else (a crash loop: no status named one) of the one the platform lists."""
    chosen, listed = _known_worker(c.state, c.worker_id), None
    if chosen is None:
        listed = yield ApiCall(c.own, "endpoint_workers", (c.endpoint_id,), {})
        chosen = None if listed.error else obs.pick_worker(listed.value, None)
    got = None
    if chosen is not None:
        tail = {"tail": WORKER_LOG_TAIL}
        got = yield ApiCall(c.own, "worker_log", (c.endpoint_id, chosen[0]), tail)
    last = got or listed
    listing_error = None if listed is None else listed.error
    built = worker_log_observation(chosen, got, listing_error)
    return built, last.at if last is not None else c.own


def _known_worker(state: JobState, worker_id: str | None) -> tuple[str, str | None] | None:
    """The job's worker, as a status or a pickup's record named it (None: unknown; a
    record read while the job waited names the endpoint's worker, not the job's)."""
    if worker_id is not None:
        return worker_id, None
    worker = state.worker
    if worker is not None and worker.worker_id is not None and worker.seq != state.queue_record:
        return worker.worker_id, None
    return None


#: The steps of each read, by its name (`flashfsm.fsm.reads.READS`).
STEPS: dict[str, ReadSteps] = {
    Read.PROBE.value: _probe,
    Read.HEARTBEAT.value: _heartbeat,
    Read.FORCED_HEARTBEAT.value: _heartbeat,
    Read.FAILURE_DETAIL.value: _failure_detail,
    Read.WORKER.value: _worker,
    "worker_log": _worker_log,
}
if set(STEPS) != set(core.READS):
    raise RuntimeError(f"reads declared on one side only: {set(STEPS) ^ set(core.READS)}")
#: The same steps by the command that asks for them (what a watch looks up).
STEPS_BY_COMMAND: dict[Command, ReadSteps] = {
    core.READS[name].command: steps for name, steps in STEPS.items()
}


# --- a read declared from outside ---------------------------------------------------------------


@dataclass(frozen=True)
class DeclaredRead:
    """A read `declare_read` added; `remove()` (or leaving a `with` block) takes it back."""

    kind: ReadKind
    event: type[EventBase]
    steps: ReadSteps

    def remove(self) -> None:
        """Take the read back: its event kind, its core half and its steps (only what this
        declaration registered: a name or kind another one holds is left to it)."""
        name, kind = self.kind.name, self.event.model_fields["kind"].default
        if STEPS.get(name) is self.steps:
            del STEPS[name], STEPS_BY_COMMAND[self.kind.command]
        if core.READS.get(name) is self.kind:
            unregister_read(name)
        if DECLARED_EVENTS.get(kind) is self.event:
            unregister_event(kind)

    def __enter__(self) -> DeclaredRead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def declare_read(
    name: str,
    event: type[EventBase],
    *,
    method: str,
    parse: Callable[[Any], dict[str, Any]],
    due: Callable[[JobState, StatusObserved], bool],
    summary: Callable[[Any], str],
    asked: str,
    fold: Callable[[JobState, Any], None] | None = None,
) -> DeclaredRead:
    """Declare a read of the platform in one place; both drivers, the fold, `verify`, the
    views and the docs' table of reads then know it.

    - `name`: the read's name (what `JobState.pending` holds while it is due, and the key
      of its last answer in `JobState.observed`);
    - `event`: its event model, an `EventBase` subclass with a new `kind` and a
      `read_error` field (what a failed read records);
    - `method`: the platform client's method the read calls with the job's endpoint id
      (both drivers call it: `poll_job` directly, the `Supervisor` awaited);
    - `parse(answer)`: the event's fields from the method's answer (a raise records a
      `read_error` naming the exception's class);
    - `due(state, status)`: whether a status answer makes the read due in its poll;
    - `summary(event)`: its one line in the views (`flashfsm explain`'s timeline);
    - `asked`: when it is made, in words (the docs' table of reads);
    - `fold(state, event)`: what else the fold keeps of it (optional).

    No rule waits for a declared read: it is evidence the log keeps, never a reason for a
    verdict. `ValueError` for a name, command or event kind already taken.
    """
    if "read_error" not in event.model_fields:
        raise ValueError(f"{event.__name__}: a read's event needs a read_error field")
    command = Observe(name)
    kind = ReadKind(
        name,
        command,
        f"a {name} read",
        (event,),
        declared_fold(name, fold),
        asked,
        due=due,
        summary=summary,
    )

    def steps(c: ReadContext) -> Generator[Request, Any, tuple[Built, float]]:
        got = yield ApiCall(c.own, method, (c.endpoint_id,), {})
        return (event, _declared_fields(parse, method, got)), got.at

    register_event(event)
    declared = DeclaredRead(kind, event, steps)
    try:
        register_read(kind)
    except ValueError:
        declared.remove()
        raise
    STEPS[name] = steps
    STEPS_BY_COMMAND[command] = steps
    return declared


def _declared_fields(
    parse: Callable[[Any], dict[str, Any]], method: str, got: Outcome
) -> dict[str, Any]:
    """A declared read's event fields: `parse`d from its answer, or why there are none
    (only an exception's class and a transient failure's code and message are kept)."""
    if got.error is not None:
        return {"read_error": obs.read_error_text(got.error) or type(got.error).__name__}
    if got.value is None:
        return {"read_error": f"no answer (the client has no {method})"}
    try:
        return parse(got.value)
    except Exception as exc:  # an answer the declaration cannot read: recorded, not raised
        return {"read_error": f"unreadable answer ({type(exc).__name__})"}
