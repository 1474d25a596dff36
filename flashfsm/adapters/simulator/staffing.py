"""How a simulated job's steps staff, turn and stop its workers (`Staffing`, mixed into `World`).

What it holds, and how it relates to `world.py`: the worker sub-driver of the `World`. A
scenario step's `workers` share becomes that many `Worker`s (`_staff`, `_hire`), slot 0
first (the one that takes the job, `_pick_up`); workers change state (`_turn`), go round a
step's `cycle` (`_cycle`, `_settle`), print their start-up, throttle and crash-loop lines
(`_loop_for`), die (`_lose_worker`) and stop (`_stop`, `_stop_at`, `_discard`); a test sets
an endpoint's standing workers (`set_standing`) or plants lines in a worker's log
(`plant_log`). `World` (`world.py`) mixes `Staffing` in and calls these from its replay of
due moments and its queue; they read and write only the `World`'s records (its `clock`,
`jobs`, `endpoints`, `templates`, `volumes` and `workers`), under the simulator's lock.
This module does not import `world.py`.
"""

from __future__ import annotations

from collections.abc import Mapping

from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.records import (
    ApiError,
    Endpoint,
    Job,
    Template,
    Volume,
    int_or,
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
    gpu_of,
    startup_lines,
    throttle_lines,
)

#: The order a step's `workers` share fills a job's worker slots: slot 0 (the worker that
#: takes the job) gets the first state the share names in this order.
SLOT_ORDER = ("running", "idle", "ready", "initializing", "throttled", "unhealthy")


class Staffing:
    """The `World`'s workers: hired, turned, cycled, stopped; `World` is the one class that
    mixes it in (it sets the records these methods read)."""

    clock: SimClock
    jobs: dict[str, Job]
    endpoints: dict[str, Endpoint]
    templates: dict[str, Template]
    volumes: dict[str, Volume]
    workers: dict[tuple[str, str], Worker]  # (endpoint id, worker id): all ever

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
            gpu_count=int_or(endpoint.config.get("gpuCount"), 1),
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
