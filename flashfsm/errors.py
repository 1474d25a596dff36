"""Errors of the shell and the adapters (the core's own live in `flashfsm.events.errors`)."""

from __future__ import annotations

from flashfsm.events.errors import FlashFsmError


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


class JobOwnedElsewhere(FlashFsmError):
    """A newer watch owns this job's stream; this supervisor must stop."""

    def __init__(self, stream: str, watcher: str | None):
        owner = f" by {watcher!r}" if watcher else ""
        super().__init__(f"stream {stream!r} is watched{owner} now; this watch stops")
        self.stream = stream
        self.watcher = watcher


class WatchStopped(FlashFsmError):
    """A watch given up on request (a run was cancelled); nothing false is recorded."""
