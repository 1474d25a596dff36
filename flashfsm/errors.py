"""Errors of the shell and the adapters (the core's own live in `flashfsm.events.errors`)."""

from __future__ import annotations

from pydantic import ValidationError

from flashfsm.events.errors import FlashFsmError, StoreError


def one_line(message: str) -> str:
    """A message on one line: its lines joined, each run of white space one space."""
    return " ".join(message.split())


def message(exc: BaseException) -> str:
    """An exception as one line (a validation error: each field and what is wrong with it)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "value"
            parts.append(f"{where}: {err.get('msg')}")
        return "; ".join(parts)
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return one_line(str(exc))


class RunpodApiError(FlashFsmError):
    """A RunPod API call failed.

    `status_code` is the HTTP status when the failure was an HTTP answer (None for a
    transport error or an unusable body); `route` names the call, never a credential.
    """

    def __init__(self, message: str, *, status_code: int | None = None, route: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.route = route


class OutputDecodeError(FlashFsmError, RuntimeError):
    """A job output that is not a metrics dict: a worker error, or a shape we cannot read."""


class UntrustedOutputError(OutputDecodeError):
    """A Flash envelope whose result is only a pickle, from a job whose output is not trusted.

    Unpickling runs code chosen by whoever wrote the bytes, so a pickle is loaded only from
    an endpoint the run itself deployed (`JobHandle.trusted_output`) or on an explicit
    `allow_pickle=True`. Recorded like any undecodable output (`output_error`).
    """


class JobOwnedElsewhere(FlashFsmError):
    """A newer watch owns this job's stream; this supervisor must stop."""

    def __init__(self, stream: str, watcher: str | None):
        owner = f" by {watcher!r}" if watcher else ""
        super().__init__(f"stream {stream!r} is watched{owner} now; this watch stops")
        self.stream = stream
        self.watcher = watcher


class WatchStopped(FlashFsmError):
    """A watch given up on request (a run was cancelled); nothing false is recorded."""


class LeaseLost(FlashFsmError):
    """A fleet replica no longer holds a stream's lease (it expired, another replica took
    it, or the replica is draining): its watch of the stream stops; nothing is recorded."""


class TransientReadError(FlashFsmError):
    """A worker-side read (the heartbeat on the Hub) failed in a way a retry may fix.

    Raised by a heartbeat reader for a Hub 5xx or 429, a timeout or a dropped connection:
    the read tells nothing about the heartbeat. A forced read that raises it (or
    `TimeoutError` / `ConnectionError`) is recorded as a failed read and tried again;
    any other exception from a reader counts as no data. `status_code` is the HTTP status
    when there was one.
    """

    def __init__(self, message: str, *, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class StoreNotFound(StoreError):
    """A store opened for reading that does not exist: reading never creates one.

    `where` names the missing file, directory or table (never a credential).
    """

    def __init__(self, where: str, what: str = "store"):
        super().__init__(f"no {what} at {where}")
        self.where = where
