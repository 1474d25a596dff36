"""The simulated account's records: accounts, templates, volumes, endpoints and jobs.

What it holds, and how it relates to `world.py`: the plain records the `World` keeps and
changes (`Account`, `Template`, `Volume`, `Endpoint`, `Job`), what each answers of itself
(a job's status answer and next due moment, an endpoint's REST and GraphQL shapes, its
worker counts, `/health` and worker list), and `ApiError`, a request the simulated API
refuses. The `World` (`world.py`) owns the heap, the queue and the workers that move
them; it re-exports these names, so `from flashfsm.adapters.simulator.world import Job`
keeps working. This module does not import `world.py`: an endpoint's shapes read the
`World` as a `WorldView`.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.scenarios import JobPlace, Scenario
from flashfsm.adapters.simulator.workers import Worker, listing

TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
WORKER_STATES = ("idle", "initializing", "ready", "running", "throttled", "unhealthy")
REST_FIELDS = (
    "id",
    "name",
    "templateId",
    "gpuIds",
    "gpuCount",
    "workersMin",
    "workersMax",
    "idleTimeout",
    "locations",
    "scalerType",
    "scalerValue",
    "executionTimeoutMs",
    "userId",
    "version",
    "type",
    "createdAt",
    "flashBootType",
    "allowedCudaVersions",
    "minCudaVersion",
)  # the REST v2 shape of an endpoint (plus networkVolumeIds and workers)


class ApiError(Exception):
    """A request the simulated API refuses: an HTTP status and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(eq=False)
class Account:
    """One RunPod account (one API key): its quota and resources."""

    name: str
    key: str = field(repr=False)
    worker_quota: int = 5
    user_id: str = ""
    revoked: bool = False  # the key was revoked: every authenticated route answers 401

    def __post_init__(self) -> None:
        self.user_id = self.user_id or f"user_{self.name}"


@dataclass(eq=False)
class Template:
    """A pod template (image, disk, env)."""

    id: str
    account: Account
    fields: dict[str, Any]

    def graphql(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.fields.get("name"),
            "imageName": self.fields.get("imageName"),
            "containerDiskInGb": self.fields.get("containerDiskInGb"),
            "dockerArgs": self.fields.get("dockerArgs", ""),
            "env": list(self.fields.get("env") or []),
            "readme": self.fields.get("readme", ""),
            "volumeInGb": self.fields.get("volumeInGb", 0),
            "isServerless": True,
        }


@dataclass(eq=False)
class Volume:
    """A network volume in one datacenter."""

    id: str
    account: Account
    name: str
    size: int
    data_center_id: str

    def rest(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "size": self.size,
            "dataCenterId": self.data_center_id,
        }


class WorldView(Protocol):
    """What an endpoint's REST and GraphQL shapes read of the `World` (`world.py`)."""

    clock: SimClock
    templates: dict[str, Template]
    volumes: dict[str, Volume]


@dataclass(eq=False)
class Endpoint:
    """A serverless endpoint: its config, its jobs, and its standing workers."""

    id: str
    account: Account
    name: str
    created_at: float
    config: dict[str, Any]  # the saveEndpoint input, as sent (minus the template)
    template_id: str | None = None
    volume_ids: list[str] = field(default_factory=list)
    scenario: str | None = None
    hf_repo: str | None = None
    startup_s: float | None = None  # a worker's start-up before its pickup (None: default)
    standing: dict[str, int] = field(default_factory=dict)  # workers set by a test
    standing_workers: list[Worker] = field(default_factory=list)  # those workers
    active: dict[str, Job] = field(default_factory=dict)  # unfinished or holding a worker
    counts: Counter = field(default_factory=Counter)  # completed, failed, retried
    queue: deque[Job] = field(default_factory=deque)  # jobs waiting for a worker, oldest first
    busy: int = 0  # jobs holding one of its `workersMax` worker slots
    deleted_at: float | None = None  # when it was deleted (None: it exists)
    version: int = 0
    workers: dict[str, Worker] = field(default_factory=dict)  # every worker it had, by id
    clock: SimClock | None = field(default=None, repr=False)  # its world's (views' default now)

    def _now(self, now: float | None) -> float:
        if now is not None:
            return now
        if self.clock is None:
            raise ValueError("an endpoint without a clock needs `now`")
        return self.clock.now()

    @property
    def workers_max(self) -> int:
        return int_or(self.config.get("workersMax"), 1)

    @property
    def workers_min(self) -> int:
        return int_or(self.config.get("workersMin"), 0)

    @property
    def idle_timeout_s(self) -> float:
        value = self.config.get("idleTimeout")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        return float(value) if ok else 5.0

    @property
    def execution_timeout_s(self) -> float | None:
        ms = self.config.get("executionTimeoutMs")
        return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else None

    def graphql(self, world: WorldView) -> dict[str, Any]:
        volumes = [world.volumes[v] for v in self.volume_ids if v in world.volumes]
        first = volumes[0] if volumes else None
        template = world.templates.get(self.template_id or "")
        return {
            **{k: v for k, v in self.config.items() if not isinstance(v, (dict, list))},
            "id": self.id,
            "name": self.name,
            "aiKey": None,
            "userId": self.account.user_id,
            "templateId": self.template_id,
            "type": self.config.get("type", "QB"),
            "version": self.version,
            "workersMin": self.workers_min,
            "workersMax": self.workers_max,
            "workersStandby": self.config.get("workersStandby", 0),
            "gpuCount": self.config.get("gpuCount", 1),
            "idleTimeout": int(self.idle_timeout_s),
            "locations": self.config.get("locations"),
            "networkVolumeId": first.id if first else None,
            "networkVolumeIds": [
                {"networkVolumeId": v.id, "dataCenterId": v.data_center_id} for v in volumes
            ],
            "networkVolume": {"id": first.id, "dataCenterId": first.data_center_id}
            if first
            else None,
            "instanceIds": self.config.get("instanceIds"),
            "env": template.fields.get("env", []) if template else [],
            "template": template.graphql() if template else None,
            "createdAt": _iso(self.created_at),
        }

    def rest(self, world: WorldView) -> dict[str, Any]:
        """The REST v2 shape of the endpoint."""
        gql = self.graphql(world)
        out = {k: gql.get(k) for k in REST_FIELDS}
        out["networkVolumeIds"] = [v["networkVolumeId"] for v in gql["networkVolumeIds"]]
        out["workers"] = self.worker_counts(world.clock.now())
        return out

    def live_workers(self) -> list[Worker]:
        """The standing workers and every worker of its active jobs (started or not)."""
        out = list(self.standing_workers)
        for job in self.active.values():
            out += job.crew
            out += job.leaving
        return out

    def worker_counts(self, now: float | None = None) -> dict[str, int]:
        """The workers listed at `now` (default: the clock's now), counted by state
        (`/health`'s `workers`)."""
        now = self._now(now)
        counts = dict.fromkeys(WORKER_STATES, 0)
        for worker in self.live_workers():
            if worker.listed(now):
                state = worker.status_at(now)
                counts[state] = counts.get(state, 0) + 1
        return counts

    def listing(self, now: float | None = None) -> dict[str, Any]:
        """`GET /v2/serverless/{id}/workers`: the workers listed at `now` (default: the
        clock's now)."""
        return listing(self.live_workers(), self._now(now), self.version)

    def health(self, now: float | None = None) -> dict[str, Any]:
        """`/health`: job counts, and the workers listed at `now` (default: the clock's)."""
        queued = sum(1 for j in self.active.values() if not j.gone and j.status == "IN_QUEUE")
        running = sum(1 for j in self.active.values() if not j.gone and j.status == "IN_PROGRESS")
        return {
            "jobs": {
                "completed": self.counts["completed"],
                "failed": self.counts["failed"],
                "inProgress": running,
                "inQueue": queued,
                "retried": self.counts["retried"],
            },
            "workers": self.worker_counts(now),
        }


@dataclass(eq=False)
class Job:
    """One simulated job following its scenario."""

    id: str
    endpoint: Endpoint
    input: Any
    scenario: Scenario
    created_at: float
    ttl_s: float
    execution_timeout_s: float | None
    place: JobPlace | None
    webhook: str | None = None
    anchor: float = 0.0  # when the current run of the script started
    cursor: int = 0
    status: str = "IN_QUEUE"
    output: Any = None
    error: Any = None
    crew: list[Worker] = field(default_factory=list)  # its workers by slot (0 takes the job)
    leaving: list[Worker] = field(default_factory=list)  # released: idle until their stop
    generation: int = 0  # how many times its worker was replaced (a requeue, a retry)
    waiting: bool = False  # queued behind its endpoint's busy workers: no script, no worker
    holds: bool = False  # its script runs: it holds one of its endpoint's worker slots
    taken_by: str | None = None  # the worker that took it last (the status's workerId)
    started_at: float | None = None  # first IN_PROGRESS
    in_progress_since: float | None = None
    finished_at: float | None = None
    release_at: float | None = None  # the next stop of a leaving worker
    gone: bool = False
    requeues: int = 0
    version: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def status_answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"id": self.id, "status": self.status}
        if self.started_at is not None:
            answer["delayTime"] = int((self.started_at - self.created_at) * 1000)
            answer["workerId"] = self.taken_by
        if self.in_progress_since is not None and self.finished_at is not None:
            answer["executionTime"] = int((self.finished_at - self.in_progress_since) * 1000)
        if self.output is not None:
            answer["output"] = self.output
        if self.error is not None:
            answer["error"] = self.error
        return answer

    def worker_id(self, slot: int = 0) -> str:
        """The id of its worker in `slot` of its current generation (the status's
        `workerId` is slot 0's: `w-<the job id's first 8 characters>` at first)."""
        suffix = (f"-{self.generation}" if self.generation else "") + (f"-s{slot}" if slot else "")
        return f"w-{self.id[:8]}{suffix}"

    def due(self) -> tuple[float, int] | None:
        """The next moment something happens to this job (time, priority), if any."""
        options: list[tuple[float, int]] = []
        if not self.gone and not self.terminal:
            steps = self.scenario.steps
            if self.cursor < len(steps) and not self.waiting:
                options.append((self.anchor + steps[self.cursor].at, 0))
            if self.in_progress_since is not None and self.execution_timeout_s:
                options.append((self.in_progress_since + self.execution_timeout_s, 1))
            options.append((self.created_at + self.ttl_s, 2))
        if not self.gone and self.terminal and self.finished_at is not None:
            options.append((self.finished_at + self.scenario.retention_s, 3))
        if self.release_at is not None:
            options.append((self.release_at, 4))
        return min(options) if options else None


def int_or(value: Any, default: int) -> int:
    """`value` if it is an int (not a bool), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
