"""A job's worker log read live from RunPod: read now, masked, never recorded.

A job log names the endpoint its job ran on (`JobSubmitted`) and, when its watch read
worker records, the worker that took it (`WorkerObserved`) or whose log it read before a
verdict (`WorkerLogObserved`). `live_log_target` picks, from a stream's jobs (a run's
attempts, the latest last), the latest job that names both; `read_live_log` asks RunPod for
that worker's last lines (`RunpodClient.worker_log`: bounded in bytes and in time, see
`flashfsm.adapters.runpod`) and masks each line (`flashfsm.redact.redact`). Nothing is
written: what the platform says now is shown, not recorded.

Both raise `LiveLogUnavailable` (a `ValueError`) with one masked line saying why: no worker
named yet, no RunPod key, a failed read. `flashfsm logs --fetch` prints the read; the web
view follows it on a running job's page through a `LiveLogReader`, which shares one client
and keeps each read `cache_s` seconds, so however many tabs follow a worker, RunPod is
asked at most once per `cache_s` for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flashfsm.errors import message
from flashfsm.events.models import Event, JobSubmitted
from flashfsm.fsm.findings import worker_evidence
from flashfsm.redact import redact

#: How many lines a live read asks for when its caller does not say (`logs --fetch`, the view).
FETCH_TAIL_DEFAULT = 100
#: How long a `LiveLogReader` keeps a worker's read before asking RunPod again (seconds).
LIVE_LOG_CACHE_S = 5.0


class LiveLogUnavailable(ValueError):
    """A live log cannot be read: the message says why, in one masked line. `final` is
    True when asking again will not help (no RunPod key, a client that reads no logs)."""

    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


class LogReader(Protocol):
    """What a live read needs of a RunPod client (`RunpodClient` is one)."""

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int) -> dict[str, Any]:
        """The last `tail` lines of a worker's log: `{"lines": [...], "truncated": bool}`."""
        ...

    def close(self) -> None:
        """Release the client's connections."""
        ...


@dataclass(frozen=True, slots=True)
class LiveLogTarget:
    """The worker whose log a live read asks for: its job stream, endpoint and worker."""

    stream: str
    endpoint_id: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class LiveLog:
    """A worker's last log lines as RunPod gave them (each masked), and what was asked."""

    target: LiveLogTarget
    tail: int
    truncated: bool  # the read stopped at its bound (bytes or time): older lines not read
    lines: tuple[str, ...]

    def json(self) -> dict[str, Any]:
        """The read, field by field (`logs --fetch --json`'s `fetched`)."""
        return {
            "stream": self.target.stream,
            "endpoint_id": self.target.endpoint_id,
            "worker_id": self.target.worker_id,
            "tail": self.tail,
            "truncated": self.truncated,
            "lines": list(self.lines),
        }


def live_log_target(jobs: Iterable[tuple[str, Sequence[Event]]]) -> LiveLogTarget:
    """The worker to read the live log of: of `jobs` (each a job stream's name and events,
    oldest first), the latest whose log names a worker; `LiveLogUnavailable` when none does
    or when that job's log does not say which endpoint it ran on."""
    for stream, events in reversed(list(jobs)):
        worker, log = worker_evidence(events)
        worker_id = (log.worker_id if log is not None else None) or (
            worker.worker_id if worker is not None else None
        )
        if not worker_id:
            continue
        submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
        if submitted is None:
            raise LiveLogUnavailable(f"{stream} does not say which endpoint its job ran on")
        return LiveLogTarget(stream, submitted.endpoint_id, worker_id)
    raise LiveLogUnavailable("no job of this stream recorded a worker id to read the log of")


def client_from_env() -> LogReader:
    """A RunPod client from the environment (`RUNPOD_API_KEY`, the base-URL variables);
    `LiveLogUnavailable` (final) when it cannot be made."""
    from flashfsm.adapters.runpod import RunpodClient

    try:
        client: Any = RunpodClient.from_env()
    except Exception as exc:  # a missing key, a bad URL: one line
        raise LiveLogUnavailable(
            f"cannot reach RunPod: {redact(message(exc))}", final=True
        ) from None
    if not callable(getattr(client, "worker_log", None)):
        client.close()
        raise LiveLogUnavailable(
            "this flashfsm's RunPod client cannot read worker logs", final=True
        )
    return client


def read_live_log(
    target: LiveLogTarget, *, tail: int = FETCH_TAIL_DEFAULT, client: LogReader | None = None
) -> LiveLog:
    """The last `tail` lines (at most the API's `LOG_TAIL_MAX`) of `target`'s worker log,
    each masked; `client` is used and left open, else one is made from the environment and
    closed. A failed read is `LiveLogUnavailable`, its text masked."""
    from flashfsm.adapters.runpod import LOG_TAIL_MAX

    if tail < 1:
        raise ValueError(f"tail must be at least 1, not {tail}")
    tail = min(tail, LOG_TAIL_MAX)
    reader = client if client is not None else client_from_env()
    try:
        answer = reader.worker_log(target.endpoint_id, target.worker_id, tail=tail)
    except Exception as exc:  # the read failed: one line, masked
        what = f"{type(exc).__name__}: {message(exc)}"
        raise LiveLogUnavailable(
            f"cannot read worker {target.worker_id}'s log: {redact(what)}"
        ) from None
    finally:
        if client is None:
            reader.close()
    raw = answer.get("lines") if isinstance(answer, dict) else None
    lines = tuple(redact(x) for x in (raw if isinstance(raw, list) else []) if isinstance(x, str))
    truncated = isinstance(answer, dict) and answer.get("truncated") is True
    return LiveLog(target, tail, truncated, lines)


class LiveLogReader:
    """Live reads for a long-running process (the web view): one client, made from the
    environment at the first read and kept, and each target's read kept `cache_s` seconds.
    Reads of one target wait for the read under way rather than asking RunPod again; reads
    of different targets do not wait for each other. Thread-safe; `close` releases the
    client."""

    def __init__(
        self,
        *,
        tail: int = FETCH_TAIL_DEFAULT,
        cache_s: float = LIVE_LOG_CACHE_S,
        client: Callable[[], LogReader] = client_from_env,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tail, self.cache_s = tail, cache_s
        self._make, self._clock = client, clock
        self._client: LogReader | None = None
        self._refused: LiveLogUnavailable | None = None
        self._lock = threading.Lock()
        self._reads: dict[LiveLogTarget, tuple[float, LiveLog | LiveLogUnavailable]] = {}
        self._busy: dict[LiveLogTarget, threading.Lock] = {}

    def _the_client(self) -> LogReader:
        with self._lock:
            if self._refused is not None:
                raise self._refused
            if self._client is None:
                try:
                    self._client = self._make()
                except LiveLogUnavailable as exc:
                    if exc.final:
                        self._refused = exc
                    raise
            return self._client

    def _kept(self, target: LiveLogTarget) -> LiveLog | LiveLogUnavailable | None:
        with self._lock:
            kept = self._reads.get(target)
        if kept is not None and self._clock() - kept[0] < self.cache_s:
            return kept[1]
        return None

    def read(self, target: LiveLogTarget) -> LiveLog:
        """`target`'s live log, read at most once per `cache_s` (a failed read is kept as
        long, and raised again: `LiveLogUnavailable`)."""
        with self._lock:
            busy = self._busy.setdefault(target, threading.Lock())
        with busy:
            got = self._kept(target)
            if got is None:
                try:
                    got = read_live_log(target, tail=self.tail, client=self._the_client())
                except LiveLogUnavailable as exc:
                    got = exc
                with self._lock:
                    self._reads[target] = (self._clock(), got)
                    for old in [t for t, (at, _) in self._reads.items() if self._stale(at)]:
                        del self._reads[old]  # (forgotten: a view followed by many jobs)
                        if old != target and not self._busy[old].locked():
                            del self._busy[old]
        if isinstance(got, LiveLogUnavailable):
            raise got
        return got

    def _stale(self, at: float) -> bool:
        return self._clock() - at >= self.cache_s

    def close(self) -> None:
        """Close the client (a later read makes a new one)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
