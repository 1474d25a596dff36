"""What `decide` asks the shell to do next, and the verdict it reaches.

Commands are plain frozen values: the shell pattern-matches them, performs the one piece
of I/O each names, records the result as an event and asks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flashfsm.fsm.table import FAILURE_KIND, JobPhase


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a watch ended: the terminal state, the rule that fired and its evidence."""

    state: JobPhase
    rule: str
    detail: str
    evidence: tuple[int, ...] = ()
    metrics: dict[str, Any] | None = field(default=None, compare=True)

    @property
    def ok(self) -> bool:
        """True only for a success."""
        return self.state is JobPhase.SUCCEEDED

    @property
    def failure(self) -> str | None:
        """The failure kind an orchestrator routes on (None for a success)."""
        return FAILURE_KIND[self.state]


@dataclass(frozen=True, slots=True)
class FetchStatus:
    """Fetch the job's status."""


@dataclass(frozen=True, slots=True)
class ProbeHealth:
    """Probe the endpoint's `/health`."""


@dataclass(frozen=True, slots=True)
class ReadHeartbeat:
    """Read the worker's heartbeat; `force` bypasses the reader's rate limit."""

    force: bool = False


@dataclass(frozen=True, slots=True)
class ReadFailureDetail:
    """Force-read the worker's failure artifacts."""


@dataclass(frozen=True, slots=True)
class ReadWorker:
    """Read the platform's record of the worker that just took the job (its start, GPU,
    data centre) and the endpoint's idle timeout."""


@dataclass(frozen=True, slots=True)
class ReadWorkerLog:
    """Read the last lines of the worker's own log, before a failing verdict is recorded."""


@dataclass(frozen=True, slots=True)
class Observe:
    """Make the declared read named `read` (a read declared outside the core:
    `flashfsm.reads.declare_read`)."""

    read: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep `seconds` before asking again."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Conclude:
    """Record this verdict (a `Concluded` event); the watch then ends."""

    verdict: Verdict


@dataclass(frozen=True, slots=True)
class Finished:
    """The log already holds the verdict: nothing more to do."""

    verdict: Verdict


Command = (
    FetchStatus
    | ProbeHealth
    | ReadHeartbeat
    | ReadFailureDetail
    | ReadWorker
    | ReadWorkerLog
    | Observe
    | Wait
    | Conclude
    | Finished
)
