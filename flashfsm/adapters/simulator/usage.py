"""What the simulated platform created and billed: `Simulator.usage()` and `GET /_sim/usage`.

A test that checks a bill (one deploy, one submit, one training; nothing left alive; how
many worker-seconds a stall cost) reads it from the simulator's own records rather than
from the requests it saw:

- every endpoint ever created, deleted ones too: its id, name, account (the index of its
  API key in the simulator's `api_keys`), `created_at` and `deleted_at` (None while it
  exists), and the jobs submitted to it (`/run`, `/runsync` or `sim.submit`), by id, in
  submission order (a retry is the same job, not another);
- every worker the platform started (a worker whose scripted start lies ahead is not in it
  yet): its endpoint, the job it was started for (None: a standing worker a test set),
  `started_at`, `stopped_at` (None while it still runs or idles) and the seconds it was
  billed up to the reading (`seconds`), and their total (`worker_seconds`).

Times are sim epoch seconds. The models are frozen pydantic models: `usage.model_dump(mode=
"json")` is what `GET /_sim/usage` answers (no API key needed, no fault fires on it, like
`/_sim/clock`), and `read_usage(url)` reads it back from a simulator in another process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
from pydantic import BaseModel, ConfigDict, Field, computed_field

if TYPE_CHECKING:
    from flashfsm.adapters.simulator.world import World


class EndpointUsage(BaseModel):
    """One endpoint the platform created, and the jobs submitted to it."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    account: int = Field(description="the index of its account's key in the simulator's keys")
    created_at: float
    deleted_at: float | None = Field(None, description="when it was deleted; None: it exists")
    jobs: tuple[str, ...] = Field((), description="the ids of its jobs, in submission order")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def submitted(self) -> int:
        """How many jobs were submitted to it."""
        return len(self.jobs)


class WorkerUsage(BaseModel):
    """One worker the platform started, and how long it was billed."""

    model_config = ConfigDict(frozen=True)

    id: str
    endpoint_id: str
    job_id: str | None = Field(description="the job it was started for; None: a standing one")
    started_at: float
    stopped_at: float | None = Field(description="when it stopped; None: it runs or idles")
    stop_reason: str | None = None
    seconds: float = Field(ge=0, description="seconds billed, up to its stop or the reading")


class Usage(BaseModel):
    """What the simulated platform created and billed, read at `at` (sim epoch seconds)."""

    model_config = ConfigDict(frozen=True)

    at: float
    endpoints: tuple[EndpointUsage, ...] = ()
    workers: tuple[WorkerUsage, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def worker_seconds(self) -> float:
        """Every worker's billed seconds, added up."""
        return sum(w.seconds for w in self.workers)

    def endpoint(self, endpoint_id: str) -> EndpointUsage:
        """The endpoint of that id (a `KeyError` when the platform never created it)."""
        for endpoint in self.endpoints:
            if endpoint.id == endpoint_id:
                return endpoint
        raise KeyError(endpoint_id)

    def workers_of(self, endpoint_id: str) -> tuple[WorkerUsage, ...]:
        """The workers of one endpoint, oldest first."""
        return tuple(w for w in self.workers if w.endpoint_id == endpoint_id)

    @property
    def alive(self) -> tuple[EndpointUsage, ...]:
        """The endpoints not deleted."""
        return tuple(e for e in self.endpoints if e.deleted_at is None)


def usage_of(world: World, now: float) -> Usage:
    """The usage of `world` at `now` (call it with the simulator's lock held, after a tick)."""
    jobs: dict[str, list[str]] = {}
    for job in world.jobs.values():
        jobs.setdefault(job.endpoint.id, []).append(job.id)
    endpoints = tuple(
        EndpointUsage(
            id=e.id,
            name=e.name,
            account=world.accounts.index(e.account),
            created_at=e.created_at,
            deleted_at=e.deleted_at,
            jobs=tuple(jobs.get(e.id, ())),
        )
        for e in world.created_endpoints.values()
    )
    workers = []
    for worker in world.workers.values():
        if worker.started_at > now:
            continue  # its start lies ahead: the platform has not started it yet
        stopped = (
            worker.stopped_at
            if worker.stopped_at is not None and worker.stopped_at <= now
            else None
        )
        end = now if stopped is None else stopped
        workers.append(
            WorkerUsage(
                id=worker.id,
                endpoint_id=worker.endpoint_id,
                job_id=worker.job_id,
                started_at=worker.started_at,
                stopped_at=stopped,
                stop_reason=worker.stop_reason if stopped is not None else None,
                seconds=max(0.0, end - worker.started_at),
            )
        )
    return Usage(at=now, endpoints=endpoints, workers=tuple(workers))


def read_usage(url: str, *, timeout: float = 10.0) -> Usage:
    """The usage of the simulator serving at `url` (its `GET /_sim/usage`): what a test
    reads of a simulator in another process (`flashfsm simulator`)."""
    answer = httpx.get(f"{url.rstrip('/')}/_sim/usage", timeout=timeout)
    answer.raise_for_status()
    return Usage.model_validate(answer.json())
