"""The simulated RunPod account(s): endpoints, templates, volumes and jobs on a sim clock.

Jobs are lazy: nothing runs in the background. A job's next due moment (its next
scripted step, its TTL, its execution timeout, its result's expiry, the stop of its
idle worker) sits in one heap; every request first calls `tick()`, which pops what is
due and replays it in time order. A request therefore costs O(log n) plus the work that
is actually due, which keeps thousands of concurrent jobs cheap.

Workers (`workers.py`) are the job's: a scenario step's `workers` share becomes that many
`Worker`s, the first of which (slot 0) is the one that takes the job. It starts
`startup_s` before the scripted pickup (the job's input `sim.startup_s`, else the
endpoint's, else the scenario's, else 20 s), so its start may lie ahead of the step
that hires it: views list a worker only between its start and its stop. When the job
ends (COMPLETED, FAILED, CANCELLED, TIMED_OUT, its TTL, a purge) its workers go idle
for the endpoint's `idleTimeout` and then stop; a throttled or crash-looping worker, or
one going round a step's `cycle`, stops at once; deleting the endpoint stops them all at
once; a requeue (the worker died) stops the worker that had the job and hires a new one.
A step's `cycle` sets slot 0 going round its phases (`Worker.cycle`); a later step that
staffs the job settles it first, in the phase of that moment. `/health` counts the same
workers the list shows, each in its state of the moment asked (plus the standing workers
a test set, which are workers too).

The queue is RunPod's: an endpoint runs at most `workersMax` jobs at once. A job submitted
(or retried) while that many others hold a worker slot waits IN_QUEUE in its endpoint's
`queue`, with no script running and no worker (`Job.waiting`); when a job ends its slot goes
to the oldest waiting job (`_vacate`, `_admit_waiting`), whose script begins then (`_begin`):
a worker the ended job left idling takes it at once (the script's queue and cold start are
skipped), else its script runs as written from that moment. Its TTL still counts from its
submission. `tick()` replays due moments in time order across jobs, so one job's end lets
the next one in at the right moment however far the clock jumped.

Every method here is called with the simulator's lock held and returns plain data; the
HTTP layer (`server.py`) turns it into answers.

Why it is long: the whole simulated account (endpoints, templates, volumes, jobs, workers)
lives on one clock and one heap of due moments; split, its invariants would cross modules.
"""

from __future__ import annotations

import heapq
import itertools
import json
import uuid
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.hub import HubStore
from flashfsm.adapters.simulator.scenarios import (
    DAY_S,
    KEEP,
    JobPlace,
    Scenario,
    Step,
    builtin_scenarios,
    job_place,
    scenario_name,
)
from flashfsm.adapters.simulator.workers import (
    CRASH_PERIOD_S,
    DEFAULT_DATACENTER,
    DEFAULT_IMAGE,
    DEFAULT_STARTUP_S,
    THROTTLE_PERIOD_S,
    Worker,
    crash_loop_lines,
    cycle_lines,
    error_lines,
    gpu_of,
    heartbeat_line,
    listing,
    output_error_lines,
    startup_lines,
    throttle_lines,
)

TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
WORKER_STATES = ("idle", "initializing", "ready", "running", "throttled", "unhealthy")
#: The order a step's `workers` share fills a job's worker slots: slot 0 (the worker that
#: takes the job) gets the first state the share names in this order.
SLOT_ORDER = ("running", "idle", "ready", "initializing", "throttled", "unhealthy")
#: Workers that go idle when their job ends (the others stop at once).
IDLES_AFTER = frozenset({"running", "idle", "ready", "initializing"})
MAX_TTL_MS = 7 * 24 * 3600 * 1000
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
QUOTA_MESSAGE = (
    "Max workers across all endpoints is {quota}; this endpoint would bring the total to "
    "{total}. Delete idle endpoints or add balance to raise the limit."
)


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
        return _int(self.config.get("workersMax"), 1)

    @property
    def workers_min(self) -> int:
        return _int(self.config.get("workersMin"), 0)

    @property
    def idle_timeout_s(self) -> float:
        value = self.config.get("idleTimeout")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        return float(value) if ok else 5.0

    @property
    def execution_timeout_s(self) -> float | None:
        ms = self.config.get("executionTimeoutMs")
        return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else None

    def graphql(self, world: World) -> dict[str, Any]:
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

    def rest(self, world: World) -> dict[str, Any]:
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


class World:
    """Every account, endpoint, template, volume and job of one simulator."""

    def __init__(
        self,
        clock: SimClock,
        hub: HubStore,
        accounts: list[Account],
        *,
        default_scenario: str = "success",
        volume_rejecting_datacenters: frozenset[str] = frozenset({"US-MO-1"}),
    ):
        self.clock = clock
        self.hub = hub
        self.accounts = accounts
        self.by_key = {a.key: a for a in accounts}
        self.scenarios: dict[str, Scenario] = builtin_scenarios()
        self.default_scenario = default_scenario
        self.volume_rejecting_datacenters = set(volume_rejecting_datacenters)
        self.gpu_stock = "High"
        self.endpoints: dict[str, Endpoint] = {}
        self.created_endpoints: dict[str, Endpoint] = {}  # every one ever, deleted ones too
        self.templates: dict[str, Template] = {}
        self.volumes: dict[str, Volume] = {}
        self.jobs: dict[str, Job] = {}
        self.workers: dict[tuple[str, str], Worker] = {}  # (endpoint id, worker id): all ever
        self._heap: list[tuple[float, int, int, str]] = []
        self._seq = itertools.count()

    # ------------------------------------------------------------------ time

    def tick(self, now: float | None = None) -> None:
        """Replay everything due up to `now`, in time order across jobs (a job is replayed
        up to the next job's due moment: one job's end frees a worker slot for another)."""
        now = self.clock.now() if now is None else now
        while self._next_due() <= now:
            _, _, _, job_id = heapq.heappop(self._heap)
            self._advance(self.jobs[job_id], now, in_order=True)

    def _next_due(self) -> float:
        """The time of the earliest due moment in the heap (stale entries dropped)."""
        heap = self._heap
        while heap:
            _, _, version, job_id = heap[0]
            job = self.jobs.get(job_id)
            if job is not None and job.version == version:
                return heap[0][0]
            heapq.heappop(heap)
        return float("inf")

    def _schedule(self, job: Job) -> None:
        job.version += 1
        due = job.due()
        if due is not None:
            heapq.heappush(self._heap, (due[0], next(self._seq), job.version, job.id))
        elif not job.crew and not job.leaving and (job.terminal or job.gone):
            job.endpoint.active.pop(job.id, None)

    def _advance(self, job: Job, now: float, *, in_order: bool = False) -> None:
        """Replay the job's due moments up to `now`; `in_order`: only while none of another
        job is due first (the tick's replay, in time order across jobs)."""
        while True:
            due = job.due()
            if due is None or due[0] > (min(now, self._next_due()) if in_order else now):
                break
            at, kind = due
            if kind == 0:
                step = job.scenario.steps[job.cursor]
                job.cursor += 1
                self._apply(job, step, at)
            elif kind == 1:
                self._finish(job, "TIMED_OUT", at)
            elif kind == 2:
                job.gone = True  # the TTL passed: RunPod deletes the job, even mid-run
                self._say(job, at, "system", f"job {job.id} expired (its TTL passed); removed")
                self._release(job, at)
            elif kind == 3:
                job.gone = True  # the result retention passed
            else:
                job.leaving = [w for w in job.leaving if (w.stopped_at or 0.0) > at]
                self._next_release(job)
        self._schedule(job)

    def _apply(self, job: Job, step: Step, at: float) -> None:
        if step.requeued:
            self._lose_worker(job, at)
            job.requeues += 1
            job.endpoint.counts["retried"] += 1
            job.in_progress_since = None
        becomes = step.status if step.status is not None and step.status != job.status else None
        pickup = becomes == "IN_PROGRESS"
        share = step.workers
        if step.cycle and share is None and not job.crew:
            share = {step.cycle[0][0]: 1}  # a worker to go round the cycle
        if share is not None or pickup:
            self._staff(job, share, at, pickup=pickup, cycling=bool(step.cycle))
        if step.cycle and job.crew:
            self._cycle(job.crew[0], step.cycle, at)
        if step.output is not KEEP:
            job.output = step.output
        if step.error is not KEEP:
            job.error = step.error
        if step.heartbeat is not None:
            self._write(job, "heartbeat.json", json.dumps({**step.heartbeat, "ts": at}))
            self._say(job, at, "container", heartbeat_line(step.heartbeat))
        for name, text in (step.files or {}).items():
            phase = job.place.phase if job.place else "train"
            self._write(job, name.format(phase=phase), text)
        for entry in step.log or ():
            source, text = ("container", entry) if isinstance(entry, str) else entry
            self._say(job, at, source, text)
        if becomes is not None:
            if pickup:
                job.in_progress_since = at
                job.started_at = job.started_at if job.started_at is not None else at
                job.taken_by = job.crew[0].id
            if becomes in TERMINAL:
                self._finish(job, becomes, at, keep_workers=step.workers is not None)
            else:
                job.status = becomes
        if step.gone:
            job.gone = True
            self._release(job, at)
        if step.revoke_key:
            job.endpoint.account.revoked = True  # the job runs on; nobody can ask about it

    def _write(self, job: Job, name: str, text: str) -> None:
        if job.place is not None:
            self.hub.put(job.place.repo, f"{job.place.prefix}/{name}", text)

    def _finish(self, job: Job, status: str, at: float, *, keep_workers: bool = False) -> None:
        job.status = status
        job.finished_at = at
        if status == "COMPLETED":
            job.endpoint.counts["completed"] += 1
        elif status in ("FAILED", "TIMED_OUT"):
            job.endpoint.counts["failed"] += 1
        self._say_ending(job, status, at)
        if keep_workers:
            self._vacate(job, at)
        else:
            self._release(job, at)

    def _say_ending(self, job: Job, status: str, at: float) -> None:
        """What the worker that has the job prints when the job ends."""
        if not job.crew or (job.crew[0].picked_up_at is None and job.crew[0].status != "running"):
            return
        if status == "FAILED":
            for line in error_lines(job.error):
                self._say(job, at, "container", line)
            self._say(job, at, "container", f"{job.id} | Failed.")
        elif status == "COMPLETED":
            for line in output_error_lines(job.output):
                self._say(job, at, "container", line)
            if job.output is None:
                lost = "Finished, but posting the result failed: connection reset by peer"
                self._say(job, at, "container", f"{job.id} | {lost}")
            else:
                self._say(job, at, "container", f"{job.id} | Finished.")
        elif status == "CANCELLED":
            self._say(job, at, "container", f"{job.id} | Cancelled.")
        elif status == "TIMED_OUT":
            self._say(job, at, "system", f"job {job.id} passed its execution timeout; stopped")

    def _release(self, job: Job, at: float) -> None:
        """The job's workers go idle for the endpoint's idle timeout, then stop (a
        throttled or crash-looping one stops at once; one not started yet never starts)."""
        idle_s = job.endpoint.idle_timeout_s
        for worker in job.crew:
            if worker.started_at > at:
                self._discard(worker)
            elif worker.status in IDLES_AFTER and not worker.cycle:
                worker.cut(at)
                worker.status = "idle"
                worker.say(at, "system", f"worker idle; it stops after {idle_s:g} s without work")
                self._stop_at(worker, at + idle_s, "idle timeout")
                job.leaving.append(worker)
            else:
                self._stop(worker, at, "no job left to take")
        job.crew = []
        self._next_release(job)
        self._vacate(job, at)

    @staticmethod
    def _next_release(job: Job) -> None:
        stops = [w.stopped_at for w in job.leaving if w.stopped_at is not None]
        job.release_at = min(stops) if stops else None

    # ------------------------------------------------------------------ the queue

    def _enter(self, job: Job, at: float) -> None:
        """The job joins its endpoint's queue at `at`; its script begins at once if a worker
        slot is free (a job waits while `workersMax` others hold one)."""
        job.waiting = True
        job.endpoint.queue.append(job)
        self._admit_waiting(job.endpoint, at)

    def _admit_waiting(self, endpoint: Endpoint, at: float) -> None:
        """Begin the scripts of waiting jobs, oldest first, while a slot is free (a job
        cancelled, purged or past its TTL while it waited is dropped from the queue)."""
        queue = endpoint.queue
        while queue and endpoint.busy < endpoint.workers_max:
            job = queue.popleft()
            if job.waiting and not (job.gone or job.terminal) and at < job.created_at + job.ttl_s:
                self._begin(job, at)
                self._schedule(job)

    def _begin(self, job: Job, at: float) -> None:
        """The job's script begins at `at`: it holds a worker slot until it ends. A warm
        worker (idle in its idle timeout) takes it at once if its script has a pickup: the
        steps before that pickup (its queue and cold start) are skipped, and the rest keep
        their times from the pickup. Else the script runs as written from `at`."""
        job.waiting, job.holds, job.anchor = False, True, at
        job.endpoint.busy += 1
        pickup = self._pickup_index(job)
        warm = self._warm_worker(job.endpoint, at) if pickup is not None else None
        if pickup is None or warm is None:
            return
        owner, worker = warm
        owner.leaving.remove(worker)
        self._next_release(owner)
        self._schedule(owner)
        worker.cut(at)  # its idle-timeout stop, written ahead, never happens
        worker.stopped_at = worker.stop_reason = None
        job.crew = [worker]
        job.cursor, job.anchor = pickup, at - job.scenario.steps[pickup].at
        self._plant_input_lines(job, worker, at)

    @staticmethod
    def _warm_worker(endpoint: Endpoint, at: float) -> tuple[Job, Worker] | None:
        """An idle worker of the endpoint still in its idle timeout, and the job it left."""
        for owner in endpoint.active.values():
            for worker in owner.leaving:
                if worker.status == "idle" and worker.listed(at):
                    return owner, worker
        return None

    def _vacate(self, job: Job, at: float) -> None:
        """The job gives its worker slot back (it ended); the oldest waiting job takes it."""
        if job.holds:
            job.holds = False
            job.endpoint.busy -= 1
            self._admit_waiting(job.endpoint, at)

    # ------------------------------------------------------------------ workers

    def _startup_s(self, job: Job) -> float:
        """How long before its pickup the job's worker starts."""
        sim = job.input.get("sim") if isinstance(job.input, Mapping) else None
        wanted = sim.get("startup_s") if isinstance(sim, Mapping) else None
        for value in (wanted, job.endpoint.startup_s, job.scenario.startup_s):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                return float(value)
        return DEFAULT_STARTUP_S

    @staticmethod
    def _pickup_index(job: Job) -> int | None:
        """The index of the job's next pickup step, if its next status change is one."""
        steps = job.scenario.steps
        for index in range(job.cursor, len(steps)):
            step = steps[index]
            if step.requeued:
                return None
            if step.status is not None and step.status != "IN_QUEUE":
                return index if step.status == "IN_PROGRESS" else None
        return None

    def _staff(
        self,
        job: Job,
        share: Mapping[str, int] | None,
        at: float,
        *,
        pickup: bool,
        cycling: bool = False,
    ) -> None:
        """Give the job the workers `share` names (None: the ones it has), slot 0 first;
        at a pickup slot 0 runs (it takes the job). A cycling worker is settled first;
        `cycling`: slot 0 is about to go round a cycle (a new one starts at `at`)."""
        for worker in job.crew:
            self._settle(worker, at)
        if share is None:
            units = [w.status for w in job.crew]
        else:
            counts = {k: int(v) for k, v in share.items() if v and int(v) > 0}
            known = [s for s in SLOT_ORDER if s in counts] + sorted(set(counts) - set(SLOT_ORDER))
            units = [state for state in known for _ in range(counts[state])]
        if pickup:  # slot 0 takes the job: it runs, whatever the share called it
            if "running" in units:
                units.remove("running")
                units.insert(0, "running")
            elif units:
                units[0] = "running"
            else:
                units = ["running"]
        for slot, state in enumerate(units):
            if slot < len(job.crew):
                worker = job.crew[slot]
                if pickup and slot == 0:
                    self._pick_up(job, worker, at)
                elif worker.status != state:
                    self._turn(worker, state, at)
            else:
                first = slot == 0
                job.crew.append(
                    self._hire(job, slot, state, at, pickup=pickup and first, now=cycling and first)
                )
        for worker in job.crew[len(units) :]:
            self._stop(worker, at, "scaled down")
        del job.crew[len(units) :]

    def _hire(
        self, job: Job, slot: int, state: str, at: float, *, pickup: bool, now: bool = False
    ) -> Worker:
        """A new worker for the job's `slot`, in `state` from `at`. Slot 0's start-up ends
        at its pickup: it starts `startup_s` before it, which may be ahead of `at` (it is
        listed from then) or before the job was queued (it was starting already). `now`:
        it starts at `at` whatever comes next (a worker hired to go round a cycle)."""
        endpoint = job.endpoint
        startup = self._startup_s(job)
        started, ready_at = at, None
        if pickup:
            started, ready_at = at - startup, at
        elif slot == 0 and state == "initializing" and not now:
            index = self._pickup_index(job)
            if index is not None:  # in script time, so a 20 s pickup - 20 s is exactly 0
                pickup_in = job.scenario.steps[index].at
                started = job.anchor + (pickup_in - startup)
                ready_at = job.anchor + pickup_in
        if job.anchor > job.created_at:  # it waited or was retried: no start before its script
            started = max(started, job.anchor)
        worker_id = job.worker_id(slot)
        if worker_id in endpoint.workers:  # two job ids that share their first 8 characters
            worker_id = f"w-{job.id[:13]}{worker_id[10:]}"
        worker = self._new_worker(endpoint, worker_id, job.id, state, started)
        if ready_at is not None:
            lines = startup_lines(worker, ready_at)
        elif state == "initializing":
            lines = startup_lines(worker, started + startup)[:-1]  # not ready yet
        elif state in ("throttled", "unhealthy"):
            lines = startup_lines(worker, started)[:3]  # its container never runs for long
        else:
            lines = startup_lines(worker, started)
        for ts, source, text in lines:
            worker.say(ts, source, text)
        if slot == 0:
            self._plant_input_lines(job, worker, started if ready_at is None else ready_at)
        if pickup:
            self._pick_up(job, worker, at)
        else:
            self._loop_for(worker, state, started)
        return worker

    def _new_worker(
        self, endpoint: Endpoint, worker_id: str, job_id: str | None, state: str, started: float
    ) -> Worker:
        template = self.templates.get(endpoint.template_id or "")
        image = template.fields.get("imageName") if template else None
        worker = Worker(
            id=worker_id,
            endpoint_id=endpoint.id,
            job_id=job_id,
            status=state,
            started_at=started,
            version=endpoint.version,
            gpu_type=gpu_of(endpoint.config.get("gpuIds")),
            datacenter=self._datacenter(endpoint),
            gpu_count=_int(endpoint.config.get("gpuCount"), 1),
            image=str(image or DEFAULT_IMAGE),
        )
        endpoint.workers[worker.id] = worker
        self.workers[(endpoint.id, worker.id)] = worker
        return worker

    def _plant_input_lines(self, job: Job, worker: Worker, at: float) -> None:
        """The lines a job's input asks its worker to print as its container comes up
        (`{"sim": {"log": [...]}}`), at `at`."""
        sim = job.input.get("sim") if isinstance(job.input, Mapping) else None
        lines = sim.get("log") if isinstance(sim, Mapping) else None
        if isinstance(lines, str):
            lines = [lines]
        for text in lines if isinstance(lines, list) else ():
            worker.say(at, "container", str(text))

    def _datacenter(self, endpoint: Endpoint) -> str:
        locations = endpoint.config.get("locations")
        if isinstance(locations, str) and locations.strip():
            return locations.split(",")[0].strip()
        for volume_id in endpoint.volume_ids:
            if volume_id in self.volumes:
                return self.volumes[volume_id].data_center_id
        return DEFAULT_DATACENTER

    def _pick_up(self, job: Job, worker: Worker, at: float) -> None:
        worker.end_loops(at)
        worker.status = "running"
        worker.picked_up_at = at
        worker.say(at, "container", f"{job.id} | Started.")

    def _turn(self, worker: Worker, state: str, at: float) -> None:
        """A worker changes state at `at` (not a pickup)."""
        worker.status = state
        worker.say(at, "system", f"worker {state}")
        self._loop_for(worker, state, at)

    @staticmethod
    def _cycle(worker: Worker, cycle: tuple[tuple[str, float], ...], at: float) -> None:
        """The worker goes round `cycle` from `at` (its log prints each round)."""
        worker.status, worker.cycle, worker.cycle_since = cycle[0][0], tuple(cycle), at
        worker.loop(at, sum(span for _, span in cycle), cycle_lines(worker, cycle))

    def _settle(self, worker: Worker, at: float) -> None:
        """A cycling worker stops going round: it stays in its phase of `at`."""
        if worker.cycle:
            worker.status, worker.cycle = worker.status_at(at), ()
            self._loop_for(worker, worker.status, at)

    @staticmethod
    def _loop_for(worker: Worker, state: str, since: float) -> None:
        if state == "unhealthy":
            worker.loop(since, CRASH_PERIOD_S, crash_loop_lines())
        elif state == "throttled":
            worker.loop(since, THROTTLE_PERIOD_S, throttle_lines(worker))
        else:
            worker.end_loops(since)

    def _say(self, job: Job, at: float, source: str, text: str) -> None:
        """Write a line to the log of the job's worker (slot 0), if it has one."""
        if job.crew and job.crew[0].started_at <= at:
            job.crew[0].say(at, source, text)

    def _stop(self, worker: Worker, at: float, reason: str) -> None:
        """The worker stops now."""
        worker.cut(at)
        self._stop_at(worker, at, reason)

    @staticmethod
    def _stop_at(worker: Worker, at: float, reason: str) -> None:
        worker.stopped_at, worker.stop_reason = at, reason
        worker.end_loops(at)
        worker.say(at, "system", f"worker stopped ({reason})")

    def _discard(self, worker: Worker) -> None:
        """Forget a worker that never started."""
        endpoint = self.endpoints.get(worker.endpoint_id)
        if endpoint is not None:
            endpoint.workers.pop(worker.id, None)
        self.workers.pop((worker.endpoint_id, worker.id), None)

    def _lose_worker(self, job: Job, at: float) -> None:
        """The worker that had the job dies (the job goes back to the queue)."""
        if job.crew:
            worker = job.crew.pop(0)
            if worker.started_at > at:
                self._discard(worker)
            else:
                worker.cut(at)
                killed = "container exited with code 137 (killed: out of memory)"
                worker.say(at, "system", f"{killed}; job {job.id} requeued")
                self._stop_at(worker, at, "died")
        job.generation += 1

    def set_standing(self, endpoint: Endpoint, counts: Mapping[str, int]) -> None:
        """Set an endpoint's standing workers (a test's), `counts` by state."""
        now = self.clock.now()
        endpoint.standing.update({k: int(v) for k, v in counts.items()})
        kept: list[Worker] = []
        for state, n in endpoint.standing.items():
            mine = [w for w in endpoint.standing_workers if w.status == state]
            for i in range(max(0, int(n))):
                if i < len(mine):
                    kept.append(mine[i])
                    continue
                worker = self._new_worker(endpoint, f"{endpoint.id}-{state}-{i}", None, state, now)
                for ts, source, text in startup_lines(worker, now):
                    worker.say(ts, source, text)
                self._loop_for(worker, state, now)
                kept.append(worker)
        for worker in endpoint.standing_workers:
            if worker not in kept:
                self._stop(worker, now, "scaled down")
        endpoint.standing_workers = kept

    def worker(self, endpoint: Endpoint, worker_id: str) -> Worker:
        """One of the endpoint's workers (a stopped one too: its log stays readable)."""
        worker = endpoint.workers.get(worker_id)
        if worker is None or worker.started_at > self.clock.now():
            raise ApiError(404, f"worker {worker_id} not found")
        return worker

    def plant_log(self, target: str, lines: list[str], source: str = "container") -> Worker:
        """Write `lines` to a worker's log now: `target` is a worker id, or a job id (its
        worker: slot 0, else the one that took it last)."""
        now = self.clock.now()
        worker = None
        job = self.jobs.get(target)
        if job is not None:
            if job.crew:
                worker = job.crew[0]
            elif job.taken_by is not None:
                worker = job.endpoint.workers.get(job.taken_by)
        else:
            found = [w for (_, wid), w in self.workers.items() if wid == target]
            worker = found[0] if len(found) == 1 else None
        if worker is None:
            raise ApiError(404, f"no worker for {target!r}")
        for text in lines:
            worker.say(max(now, worker.started_at), source, text)
        return worker

    # ------------------------------------------------------------------ accounts

    def account_for(self, key: str | None) -> Account | None:
        """The account of an API key, or None for an unknown or revoked key."""
        account = self.by_key.get(key or "")
        return None if account is None or account.revoked else account

    def workers_in_use(self, account: Account, *, besides: str | None = None) -> int:
        return sum(
            e.workers_max
            for e in self.endpoints.values()
            if e.account is account and e.id != besides
        )

    # ------------------------------------------------------------------ endpoints

    def add_endpoint(
        self,
        account: Account,
        name: str,
        *,
        config: Mapping[str, Any] | None = None,
        template_id: str | None = None,
        volume_ids: list[str] | None = None,
        scenario: str | None = None,
        hf_repo: str | None = None,
        check_quota: bool = True,
    ) -> Endpoint:
        config = {"workersMin": 0, "workersMax": 1, "idleTimeout": 5, **(config or {})}
        wanted = _int(config.get("workersMax"), 1)
        total = self.workers_in_use(account) + wanted
        if check_quota and total > account.worker_quota:
            raise ApiError(400, QUOTA_MESSAGE.format(quota=account.worker_quota, total=total))
        if scenario is not None:
            self._scenario(scenario)
        endpoint = Endpoint(
            id=_short_id(),
            account=account,
            name=name,
            created_at=self.clock.now(),
            config=config,
            template_id=template_id,
            volume_ids=list(volume_ids or []),
            scenario=scenario,
            hf_repo=hf_repo,
            clock=self.clock,
        )
        self.endpoints[endpoint.id] = endpoint
        self.created_endpoints[endpoint.id] = endpoint
        return endpoint

    def endpoint(self, account: Account | None, endpoint_id: str) -> Endpoint:
        endpoint = self.endpoints.get(endpoint_id)
        if endpoint is None or (account is not None and endpoint.account is not account):
            raise ApiError(404, f"endpoint {endpoint_id} not found")
        return endpoint

    def delete_endpoint(self, account: Account | None, endpoint_id: str) -> None:
        endpoint = self.endpoint(account, endpoint_id)
        now = self.clock.now()
        for job in list(endpoint.active.values()):
            job.gone = True
            for worker in job.crew + job.leaving:
                if worker.started_at > now:
                    self._discard(worker)
                else:
                    self._stop(worker, now, "endpoint deleted")
            job.crew, job.leaving = [], []
            job.release_at = None
            job.version += 1  # drops its heap entries
        for worker in endpoint.standing_workers:
            self._stop(worker, now, "endpoint deleted")
        endpoint.standing_workers = []
        endpoint.queue.clear()
        endpoint.deleted_at = now
        del self.endpoints[endpoint.id]

    def save_endpoint(self, account: Account, data: Mapping[str, Any]) -> Endpoint:
        """The saveEndpoint mutation: create, or update when `id` is given."""
        if not isinstance(data, Mapping):
            raise ApiError(400, "saveEndpoint needs an input object")
        data = dict(data)
        template = data.pop("template", None)
        volume_ids = self._volume_ids(account, data)
        endpoint_id = data.pop("id", None)
        if endpoint_id:
            endpoint = self.endpoint(account, endpoint_id)
            wanted = _int(data.get("workersMax", endpoint.workers_max), 1)
            total = self.workers_in_use(account, besides=endpoint.id) + wanted
            if total > account.worker_quota and wanted > endpoint.workers_max:
                raise ApiError(400, QUOTA_MESSAGE.format(quota=account.worker_quota, total=total))
            endpoint.config.update(data)
            endpoint.name = str(data.get("name") or endpoint.name)
            if volume_ids is not None:
                endpoint.volume_ids = volume_ids
            if isinstance(template, Mapping):
                endpoint.template_id = self._save_template(account, template).id
            endpoint.version += 1
            self._admit_waiting(endpoint, self.clock.now())  # a raised workersMax
            self.tick()
            return endpoint
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "name is required")
        template_id = data.pop("templateId", None)
        if isinstance(template, Mapping):
            template_id = self._save_template(account, template).id
        elif template_id not in self.templates:
            raise ApiError(400, "a template or an existing templateId is required")
        return self.add_endpoint(
            account, name, config=data, template_id=template_id, volume_ids=volume_ids or []
        )

    def _volume_ids(self, account: Account, data: dict[str, Any]) -> list[str] | None:
        ids: list[str] = []
        many = data.pop("networkVolumeIds", None)
        one = data.pop("networkVolumeId", None)
        if isinstance(many, list):
            ids += [v.get("networkVolumeId") if isinstance(v, Mapping) else v for v in many]
        if one:
            ids.append(one)
        if many is None and one is None:
            return None
        for vid in ids:
            volume = self.volumes.get(str(vid))
            if volume is None or volume.account is not account:
                raise ApiError(400, f"network volume {vid} not found")
        return list(dict.fromkeys(str(v) for v in ids if v))

    def _save_template(self, account: Account, fields: Mapping[str, Any]) -> Template:
        template_id = fields.get("id")
        if template_id in self.templates:
            template = self.templates[template_id]
            template.fields.update({k: v for k, v in fields.items() if k != "id"})
            return template
        template = Template(_short_id(), account, {k: v for k, v in fields.items() if k != "id"})
        self.templates[template.id] = template
        return template

    def save_template(self, account: Account, fields: Mapping[str, Any]) -> Template:
        if not isinstance(fields, Mapping):
            raise ApiError(400, "saveTemplate needs an input object")
        template_id = fields.get("id")
        if template_id and template_id not in self.templates:
            raise ApiError(400, f"template {template_id} not found")
        return self._save_template(account, fields)

    # ------------------------------------------------------------------ volumes

    def create_volume(self, account: Account, data: Any) -> Volume:
        if not isinstance(data, Mapping):
            raise ApiError(400, "expected a JSON object")
        name, dc, size = data.get("name"), data.get("dataCenterId"), data.get("size", 10)
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "name is required")
        if not isinstance(dc, str) or not dc:
            raise ApiError(400, "dataCenterId is required")
        if not isinstance(size, int) or not 10 <= size <= 4096:
            raise ApiError(400, "size must be an integer between 10 and 4096")
        if dc in self.volume_rejecting_datacenters:
            raise ApiError(500, f"network volumes are not available in data center {dc}")
        for v in self.volumes.values():
            if v.account is account and v.name == name and v.data_center_id == dc:
                return v
        volume = Volume(_short_id(), account, name, size, dc)
        self.volumes[volume.id] = volume
        return volume

    # ------------------------------------------------------------------ jobs

    def _scenario(self, name: str) -> Scenario:
        scenario = self.scenarios.get(name)
        if scenario is None:
            raise ApiError(400, f"unknown simulator scenario {name!r}")
        return scenario

    def submit(self, endpoint: Endpoint, body: Any) -> Job:
        if not isinstance(body, Mapping) or "input" not in body:
            raise ApiError(400, "the request body needs an 'input' object")
        job_input = body["input"]
        policy = body.get("policy") if isinstance(body.get("policy"), Mapping) else {}
        scenario = self._scenario(
            scenario_name(job_input) or endpoint.scenario or self.default_scenario
        )
        ttl_ms = policy.get("ttl")
        if ttl_ms is not None and (not isinstance(ttl_ms, (int, float)) or ttl_ms <= 0):
            raise ApiError(400, "policy.ttl must be a positive number of milliseconds")
        if ttl_ms is not None and ttl_ms > MAX_TTL_MS:
            raise ApiError(400, "policy.ttl may be at most 7 days")
        timeout_ms = policy.get("executionTimeout")
        ttl_s = ttl_ms / 1000.0 if ttl_ms else (scenario.ttl_s or DAY_S)
        now = self.clock.now()
        job = Job(
            id=f"{uuid.uuid4()}-u1",
            endpoint=endpoint,
            input=job_input,
            scenario=scenario,
            created_at=now,
            anchor=now,
            ttl_s=ttl_s,
            execution_timeout_s=timeout_ms / 1000.0
            if isinstance(timeout_ms, (int, float)) and timeout_ms > 0
            else endpoint.execution_timeout_s,
            place=job_place(job_input, endpoint.hf_repo),
            webhook=body.get("webhook") if isinstance(body.get("webhook"), str) else None,
        )
        self.jobs[job.id] = job
        endpoint.active[job.id] = job
        self._enter(job, now)
        self._advance(job, now)
        return job

    def job(self, endpoint: Endpoint, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None or job.endpoint is not endpoint or job.gone:
            raise ApiError(404, "request does not exist")
        return job

    def cancel(self, job: Job) -> None:
        if not job.terminal:
            self._finish(job, "CANCELLED", self.clock.now())
            self._schedule(job)
            self.tick()  # a job it let out of the queue may be picked up now

    def retry(self, job: Job) -> None:
        if job.status not in ("FAILED", "TIMED_OUT"):
            raise ApiError(400, f"only FAILED or TIMED_OUT jobs can be retried, not {job.status}")
        now = self.clock.now()
        job.status, job.output, job.error = "IN_QUEUE", None, None
        job.anchor, job.cursor, job.finished_at = now, 0, None
        job.in_progress_since = None
        self._release(job, now)  # a worker a terminal step kept; then a new one is hired
        job.generation += 1
        job.requeues += 1
        job.endpoint.counts["retried"] += 1
        job.endpoint.active[job.id] = job
        self._enter(job, now)
        self._advance(job, now)

    def purge(self, endpoint: Endpoint) -> int:
        """Delete the endpoint's queued jobs (waiting or in their scripted queue)."""
        removed = 0
        now = self.clock.now()
        for job in list(endpoint.active.values()):
            if not job.gone and job.status == "IN_QUEUE":
                job.gone = True
                self._release(job, now)
                self._schedule(job)
                removed += 1
        return removed


def _short_id() -> str:
    return uuid.uuid4().hex[:14]


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
