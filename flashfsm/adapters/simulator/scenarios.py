"""Scripted job lives: what a simulated job does, as data.

A `Scenario` is a timeline of `Step`s in simulated seconds since the job was queued.
Each step may change the job's status, the workers its endpoint reports on `/health` and
lists on `/v2/serverless/{id}/workers`, its output or error, write a heartbeat or other
files to the fake Hub, print lines to its worker's log, requeue the job (a worker died),
delete it (as RunPod does when a TTL passes) or revoke the API key of the account that
owns the job's endpoint (every authenticated route then answers 401). Fields left at their
defaults change nothing, so a step says only what happens at that moment.

A step's `cycle` sets the worker that would take the job (slot 0; the step hires one in
the cycle's first state when the job has none) going round `(state, seconds)` phases from
that moment, for as long as no later step changes its workers: a container that restarts
again and again (`crash_loop_queue`: 30 s `initializing`, 30 s `unhealthy`, ...). The list
and `/health` show the phase of the moment they are read at.

The worker that takes the job starts `startup_s` before the step that moves the job to
IN_PROGRESS (the scenario's `startup_s`, unless the endpoint or the job's input sets one;
20 s when none does): see `world.py` for the rest of a worker's life.

On top of the script the simulator applies RunPod's own rules to every job: a TTL
(`policy.ttl`, the scenario's `ttl_s`, else 24 h) deletes a job that has not finished, an
execution timeout (`policy.executionTimeout` or the endpoint's) turns a long
IN_PROGRESS into TIMED_OUT, and a finished job's result is deleted after `retention_s`.

A training worker ends as a real one does: as its training finishes it writes its *end
record*, a last heartbeat at stage `done` (`END_STAGE`) with the step its training ended at
and the metrics it returns (`end_record`), and the job is COMPLETED with those metrics
(`finished`, the step that does both: `success`, `training`, `slow_cold_start`,
`worker_death`, `slow_image_pull` and `key_revoked` end with it).

A job picks its scenario from its input (`{"scenario": "throttled"}` or
`{"sim": {"scenario": ...}}`), else from its endpoint, else the simulator's default.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flashfsm.events.models import END_STAGE

DAY_S = 24 * 3600.0


class _Keep:
    """The default of `Step.output` / `Step.error`: leave the value as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


@dataclass(frozen=True)
class Step:
    """What happens to a job `at` simulated seconds after it was queued."""

    at: float
    status: str | None = None
    workers: Mapping[str, int] | None = None  # this job's share of the endpoint's workers
    heartbeat: Mapping[str, Any] | None = None  # written with `ts` = the step's time
    output: Any = KEEP
    error: Any = KEEP
    files: Mapping[str, str] | None = None  # written under the job's Hub prefix
    requeued: bool = False  # a worker died and the job went back to the queue
    gone: bool = False  # the job is deleted: /status answers 404 from now on
    revoke_key: bool = False  # the account's API key is revoked: every route answers 401
    # Lines the job's worker prints: a text is a container line, ("system", text) a host one.
    log: tuple[str | tuple[str, str], ...] | None = None
    # Slot 0's worker goes round these (state, seconds) phases from now (a restart loop).
    cycle: tuple[tuple[str, float], ...] | None = None


@dataclass(frozen=True)
class Scenario:
    """A named, scripted job life."""

    name: str
    steps: tuple[Step, ...]
    description: str = ""
    ttl_s: float | None = None  # the TTL when the job's policy sends none
    retention_s: float = 1800.0  # how long a finished job's result stays readable
    startup_s: float | None = None  # its worker's start-up before the pickup (None: 20 s)

    def __post_init__(self) -> None:
        ats = [s.at for s in self.steps]
        if ats != sorted(ats) or any(a < 0 for a in ats):
            raise ValueError(f"scenario {self.name!r}: steps must be in time order from 0")
        if self.startup_s is not None and not self.startup_s >= 0:
            raise ValueError(f"scenario {self.name!r}: startup_s must be >= 0")
        for step in self.steps:
            if step.cycle is not None and not (
                step.cycle and all(span > 0 for _, span in step.cycle)
            ):
                raise ValueError(f"scenario {self.name!r}: a cycle needs phases of > 0 s")


METRICS: dict[str, Any] = {"reward": 0.82, "loss": 0.117, "steps": 300}
RUNNING = {"running": 1}
STARTING = {"initializing": 1}
#: `slow_image_pull`'s start-up: a 20 GB image pulled for 10 minutes, longer than a queue
#: grace, shorter than a start grace.
SLOW_PULL_S = 600.0
#: `crash_loop_queue`'s round: the container crashes (`unhealthy` while it waits to
#: restart), then restarts (`initializing` until it crashes again).
CRASH_RESTARTS: tuple[tuple[str, float], ...] = (("unhealthy", 30.0), ("initializing", 30.0))
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in main\n'
    "    trainer.train()\n"
    "ValueError: reward model returned NaN"
)
FAILED_ERROR = json.dumps(
    {
        "error_type": "<class 'ValueError'>",
        "error_message": "reward model returned NaN",
        "error_traceback": TRACEBACK,
    }
)


def heartbeat(stage: str, step: int | None = None, *, retriable: bool = False) -> dict[str, Any]:
    """A heartbeat body (the simulator adds `ts`)."""
    return {"stage": stage, "step": step, "retriable": retriable}


def end_record(step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A worker's end record, as a heartbeat body (the simulator adds `ts`): the last
    heartbeat it writes, as its training ends, at stage `done` (`END_STAGE`), with the step
    its training ended at and the metrics it returns. What a watcher that finds the job
    forgotten by RunPod reads to know the training finished, and with what."""
    return {"stage": END_STAGE, "step": step, "metrics": dict(metrics)}


def finished(at: float, step: int, metrics: Mapping[str, Any] = METRICS) -> Step:
    """The step at which a training worker finishes, as a real one does: at `at` it writes
    its end record (`end_record(step, metrics)`) and the job is COMPLETED with `metrics` as
    its output."""
    return Step(at, status="COMPLETED", output=dict(metrics), heartbeat=end_record(step, metrics))


def training(start: float, stop: float, every: float, *, first_step: int = 0) -> list[Step]:
    """Training heartbeats from `start` to `stop` (exclusive), one every `every` seconds."""
    steps, t, n = [], start, first_step
    while t < stop:
        steps.append(Step(t, heartbeat=heartbeat("train", n)))
        t, n = t + every, n + 10
    return steps


def key_revoked(revoke_at: float = 180.0, name: str = "key_revoked") -> Scenario:
    """A job whose account's API key is revoked `revoke_at` seconds in, mid-training.

    The job trains on and completes at 600 s, but from the revocation every route the
    account calls (status, cancel, health, deletes) answers 401. Not a built-in: it revokes
    the key of every job of that account, so a test registers it where it wants it
    (`sim.register_scenario(key_revoked())`, then `scenario="key_revoked"`).
    """
    return _scenario(
        name,
        f"the account's API key is revoked {revoke_at:.0f} s in, mid-training; the job "
        "trains on, and every route answers 401",
        _cold_start(),
        Step(40, heartbeat=heartbeat("rl_train_start", 0)),
        training(60, 600, 60),
        Step(revoke_at, revoke_key=True),
        finished(600, 90, METRICS),
    )


def _scenario(name: str, description: str, *steps: Step | Iterable[Step], **kw: Any) -> Scenario:
    flat: list[Step] = []
    for item in steps:
        flat.extend([item] if isinstance(item, Step) else item)
    flat.sort(key=lambda s: s.at)
    return Scenario(name, tuple(flat), description, **kw)


def _cold_start(pickup: float = 20.0) -> list[Step]:
    return [
        Step(0, status="IN_QUEUE", workers=STARTING),
        Step(pickup, status="IN_PROGRESS", workers=RUNNING, heartbeat=heartbeat("boot")),
    ]


def _finish_with_error(retriable: bool) -> list[Step]:
    return [
        *_cold_start(),
        Step(40, heartbeat=heartbeat("rl_train_start", 0)),
        Step(60, heartbeat=heartbeat("train", 10, retriable=retriable)),
        Step(
            90,
            status="COMPLETED",
            output={"error": "ValueError: reward model returned NaN", "stdout": "step 10\n"},
            files={"error_{phase}.txt": TRACEBACK, "console_{phase}.txt": "step 10\nNaN\n"},
        ),
    ]


def _fail(retriable: bool) -> list[Step]:
    return [
        *_cold_start(),
        Step(45, heartbeat=heartbeat("train", 0, retriable=retriable)),
        Step(
            70,
            status="FAILED",
            error=FAILED_ERROR,
            files={"error_{phase}.txt": TRACEBACK, "console_{phase}.txt": "loading\nNaN\n"},
        ),
    ]


def builtin_scenarios() -> dict[str, Scenario]:
    """The scenarios every simulator knows, by name."""
    scenarios = [*_clean_runs(), *_start_troubles(), *_later_troubles()]
    return {s.name: s for s in scenarios}


def _clean_runs() -> list[Scenario]:
    """The built-in jobs that start, train and complete with their metrics."""
    return [
        _scenario(
            "success",
            "cold start, a few heartbeats, then the end record and COMPLETED with metrics at 90 s",
            _cold_start(),
            Step(40, heartbeat=heartbeat("rl_train_start", 0)),
            training(50, 90, 20),
            finished(90, 20, METRICS),
        ),
        _scenario(
            "training",
            "a 30-minute training run, a heartbeat every minute, then the end record, COMPLETED",
            _cold_start(),
            Step(60, heartbeat=heartbeat("rl_train_start", 0)),
            training(120, 1920, 60),
            finished(1920, 300, METRICS),
        ),
        _scenario(
            "completed_envelope",
            "COMPLETED with a Flash envelope whose json_result holds the metrics",
            _cold_start(),
            Step(60, status="COMPLETED", output={"success": True, "json_result": METRICS}),
        ),
    ]


def _start_troubles() -> list[Scenario]:
    """The built-in jobs whose trouble is in the queue or a slow start."""
    return [
        _scenario(
            "no_capacity",
            "IN_QUEUE forever and no worker at all on /health",
            Step(0, status="IN_QUEUE", workers={}),
        ),
        _scenario(
            "throttled",
            "IN_QUEUE forever; the worker is throttled (its host is full)",
            Step(0, status="IN_QUEUE", workers={"throttled": 1}),
        ),
        _scenario(
            "crash_loop",
            "IN_QUEUE forever; the worker's container crash-loops (unhealthy)",
            Step(0, status="IN_QUEUE", workers={"unhealthy": 1}),
        ),
        _scenario(
            "slow_cold_start",
            "40 minutes of setup heartbeats (longer than the stall window), training, COMPLETED",
            _cold_start(120),
            Step(900, heartbeat=heartbeat("sft_model_load")),
            Step(2100, heartbeat=heartbeat("rl_train_start", 0)),
            training(2400, 3000, 60),
            finished(3000, 100, METRICS),
            startup_s=120.0,  # the worker starts as the job is queued: a 2-minute cold start
        ),
        _scenario(
            "slow_image_pull",
            "IN_QUEUE for 10 minutes while the worker pulls a 20 GB image (initializing), "
            "then training, COMPLETED",
            _cold_start(SLOW_PULL_S),
            Step(0, log=(("system", "image is 20.4 GB: pulling every layer (none cached here)"),)),
            Step(SLOW_PULL_S + 20, heartbeat=heartbeat("rl_train_start", 0)),
            training(SLOW_PULL_S + 60, SLOW_PULL_S + 300, 60),
            finished(SLOW_PULL_S + 300, 40, METRICS),
            startup_s=SLOW_PULL_S,  # the worker starts as the job is queued
        ),
        _scenario(
            "crash_loop_queue",
            "IN_QUEUE forever; the worker restarts again and again: initializing 30 s, "
            "unhealthy 30 s",
            Step(0, status="IN_QUEUE", workers=STARTING),  # the image pull, a first start
            Step(30, cycle=CRASH_RESTARTS),  # crashes at 30 s, restarts at 60 s, ...
        ),
        _scenario(
            "timed_out_in_queue",
            "IN_QUEUE with no worker at all, then RunPod reports TIMED_OUT at 240 s",
            Step(0, status="IN_QUEUE", workers={}),
            Step(240, status="TIMED_OUT"),
        ),
    ]


def _later_troubles() -> list[Scenario]:
    """The built-in jobs whose trouble comes once they run: a stall, a death, an error,
    a failure, a timeout, an expiry."""
    return [
        _scenario(
            "training_stall",
            "training heartbeats stop after 5 minutes; the job stays IN_PROGRESS",
            _cold_start(),
            Step(40, heartbeat=heartbeat("rl_train_start", 0)),
            training(60, 300, 60),
        ),
        _scenario(
            "worker_death",
            "the worker dies mid-training; the job is requeued, restarts, completes",
            _cold_start(),
            training(40, 120, 20),
            Step(120, status="IN_QUEUE", workers=STARTING, requeued=True),
            Step(180, status="IN_PROGRESS", workers=RUNNING, heartbeat=heartbeat("boot")),
            training(200, 300, 20, first_step=100),
            finished(300, 150, METRICS),
        ),
        _scenario(
            "completed_error",
            "COMPLETED whose output is a worker error; heartbeat not retriable",
            _finish_with_error(False),
        ),
        _scenario(
            "completed_error_retriable",
            "COMPLETED whose output is a worker error; the heartbeat says retriable",
            _finish_with_error(True),
        ),
        _scenario(
            "completed_no_output",
            "COMPLETED without any output (the worker failed to post its result)",
            _cold_start(),
            Step(60, status="COMPLETED"),
        ),
        _scenario(
            "failed",
            "FAILED with a JSON error string; heartbeat not retriable",
            _fail(False),
        ),
        _scenario(
            "failed_retriable",
            "FAILED with a JSON error string; the heartbeat says retriable",
            _fail(True),
        ),
        _scenario(
            "timed_out",
            "the job runs, then RunPod reports TIMED_OUT",
            _cold_start(),
            training(40, 120, 20),
            Step(120, status="TIMED_OUT"),
        ),
        _scenario(
            "ttl_expired",
            "the job trains until its 10-minute TTL passes; RunPod deletes it (404)",
            _cold_start(),
            training(40, 3600, 30),
            ttl_s=600.0,
        ),
        _scenario(
            "result_expired",
            "COMPLETED after 60 s; the result is deleted 2 minutes later (404)",
            _cold_start(),
            Step(60, status="COMPLETED", output=METRICS),
            retention_s=120.0,
        ),
    ]


@dataclass
class JobPlace:
    """Where a job's worker writes on the Hub: a repo and the `{phase}/{run}/seed{n}` prefix."""

    repo: str
    prefix: str
    phase: str
    extra: dict[str, Any] = field(default_factory=dict)


def job_place(job_input: Any, default_repo: str | None) -> JobPlace | None:
    """The Hub location of a job's heartbeat, from its input; None when it has none.

    Read from `input["sim"]["hf_prefix"]`, else from the reference's train payload keys
    (`hf_repo`, `phase`, `seed` and `run_id`, or a `job_spec_json` holding `run_id`).
    """
    if not isinstance(job_input, Mapping):
        return None
    sim = job_input.get("sim") if isinstance(job_input.get("sim"), Mapping) else {}
    repo = sim.get("hf_repo") or job_input.get("hf_repo") or default_repo
    phase = sim.get("phase") or job_input.get("phase") or "train"
    if not isinstance(repo, str) or not repo:
        return None
    prefix = sim.get("hf_prefix")
    if not prefix:
        run_id = job_input.get("run_id")
        spec = job_input.get("job_spec_json")
        if run_id is None and isinstance(spec, str):
            try:
                parsed = json.loads(spec)
            except ValueError:
                parsed = None
            run_id = parsed.get("run_id") if isinstance(parsed, dict) else None
        seed = job_input.get("seed")
        if run_id is None or seed is None or not job_input.get("phase"):
            return None
        prefix = f"{phase}/{run_id}/seed{seed}"
    return JobPlace(repo=repo, prefix=str(prefix).strip("/"), phase=str(phase))


def scenario_name(job_input: Any) -> str | None:
    """The scenario a job's input asks for, if any."""
    if not isinstance(job_input, Mapping):
        return None
    sim = job_input.get("sim")
    if isinstance(sim, Mapping) and isinstance(sim.get("scenario"), str):
        return sim["scenario"]
    name = job_input.get("scenario")
    return name if isinstance(name, str) else None
