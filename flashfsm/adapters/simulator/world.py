"""The simulated RunPod account(s): endpoints, templates, volumes and jobs on a sim clock.

Jobs are lazy: nothing runs in the background. A job's next due moment (its next
scripted step, its TTL, its execution timeout, its result's expiry, the stop of its
idle worker) sits in one heap; every request first calls `tick()`, which pops what is
due and replays it in time order. A request therefore costs O(log n) plus the work that
is actually due, which keeps thousands of concurrent jobs cheap.

Workers (`workers.py`) are the job's, hired and stopped by the `World`'s worker sub-driver
(`staffing.py`: `Staffing`, which `World` mixes in): a scenario step's `workers` share
becomes that many `Worker`s, the first of which (slot 0) is the one that takes the job. It
starts `startup_s` before the scripted pickup (the job's input `sim.startup_s`, else the
endpoint's, else the scenario's, else 20 s), so its start may lie ahead of the step that
hires it: views list a worker only between its start and its stop. When the job ends
(COMPLETED, FAILED, CANCELLED, TIMED_OUT, its TTL, a purge) its workers go idle for the
endpoint's `idleTimeout` and then stop; a throttled or crash-looping worker, or one going
round a step's `cycle`, stops at once; deleting the endpoint stops them all at once; a
requeue (the worker died) stops the worker that had the job and hires a new one. A step's
`cycle` sets slot 0 going round its phases (`Worker.cycle`); a later step that staffs the
job settles it first, in the phase of that moment. `/health` counts the same workers the
list shows, each in its state of the moment asked (plus the standing workers a test set,
which are workers too).

The queue is RunPod's: an endpoint runs at most `workersMax` jobs at once. A job submitted
(or retried) while that many others hold a worker slot waits IN_QUEUE in its endpoint's
`queue`, with no script running and no worker (`Job.waiting`); when a job ends its slot goes
to the oldest waiting job (`_vacate`, `_admit_waiting`), whose script begins then (`_begin`):
a worker the ended job left idling takes it at once (the script's queue and cold start are
skipped), else its script runs as written from that moment. Its TTL still counts from its
submission. `tick()` replays due moments in time order across jobs, so one job's end lets
the next one in at the right moment however far the clock jumped.

The records the `World` keeps (`Account`, `Template`, `Volume`, `Endpoint`, `Job`, and
`ApiError`) are `records.py`'s, re-exported here. The whole simulated account still lives
on one clock and one heap of due moments, in one `World` object: `records.py` holds what
each record answers of itself, `staffing.py` the methods that move workers, and this module
the heap, the queue and what each request asks of the account.

Every method here is called with the simulator's lock held and returns plain data; the
HTTP layer (`server.py`, `routes.py`) turns it into answers.
"""

from __future__ import annotations

import heapq
import itertools
import json
import uuid
from collections.abc import Mapping
from typing import Any

from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.hub import HubStore
from flashfsm.adapters.simulator.records import REST_FIELDS as REST_FIELDS
from flashfsm.adapters.simulator.records import TERMINAL as TERMINAL
from flashfsm.adapters.simulator.records import WORKER_STATES as WORKER_STATES
from flashfsm.adapters.simulator.records import Account as Account
from flashfsm.adapters.simulator.records import ApiError as ApiError
from flashfsm.adapters.simulator.records import Endpoint as Endpoint
from flashfsm.adapters.simulator.records import Job as Job
from flashfsm.adapters.simulator.records import Template as Template
from flashfsm.adapters.simulator.records import Volume as Volume
from flashfsm.adapters.simulator.records import int_or
from flashfsm.adapters.simulator.scenarios import (
    DAY_S,
    KEEP,
    Scenario,
    Step,
    builtin_scenarios,
    job_place,
    scenario_name,
)
from flashfsm.adapters.simulator.staffing import Staffing
from flashfsm.adapters.simulator.workers import (
    Worker,
    error_lines,
    heartbeat_line,
    output_error_lines,
)

#: Workers that go idle when their job ends (the others stop at once).
IDLES_AFTER = frozenset({"running", "idle", "ready", "initializing"})
MAX_TTL_MS = 7 * 24 * 3600 * 1000
QUOTA_MESSAGE = (
    "Max workers across all endpoints is {quota}; this endpoint would bring the total to "
    "{total}. Delete idle endpoints or add balance to raise the limit."
)


class World(Staffing):
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
        wanted = int_or(config.get("workersMax"), 1)
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
            wanted = int_or(data.get("workersMax", endpoint.workers_max), 1)
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
