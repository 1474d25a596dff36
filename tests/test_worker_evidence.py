"""The worker's own records in a job's log: who took the job, and its last log lines.

A watch whose client reads the platform's worker records (`has_worker_reader`) records a
`WorkerObserved` when a worker picks the job up (its start, GPU, data centre and the
endpoint's idle timeout) and, before a failed, preempted or stalled verdict, a
`WorkerLogObserved` with the worker's last log lines. The log is evidence, never a reason:
the verdict, its rule and its time are those of a watch without the reader; `verify`
accepts the log; the sync and the asyncio drivers record the same conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from flashfsm import JobHandle, MemoryStore, poll_job
from flashfsm.events.models import Concluded, WatchStarted, WorkerLogObserved, WorkerObserved
from flashfsm.fsm.job import verify
from flashfsm.reads import has_worker_reader
from flashfsm.redact import MASK
from flashfsm.supervisor import JobSpec, Supervisor

T0 = 1_700_000_000.0
SECRET = "sk-planted-Zq8uYt41RkPw"


class Clock:
    """A virtual clock: it moves only when the watch sleeps."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def _secret_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted secret is the environment's Hub token, as a worker's would be."""
    monkeypatch.setenv("HF_TOKEN", SECRET)


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Platform:
    """RunPod, scripted: statuses by poll, the endpoint's workers, each worker's log."""

    def __init__(
        self,
        clock: Clock,
        statuses: list[dict[str, Any]],
        workers: list[dict[str, Any]],
        health: dict[str, int] | None = None,
    ) -> None:
        self.clock, self.statuses, self.workers = clock, statuses, workers
        self.health = health or {"running": 1}
        self.calls: list[str] = []

    def _status(self) -> dict[str, Any]:
        fetches = sum(1 for c in self.calls if c == "status")
        return self.statuses[min(fetches - 1, len(self.statuses) - 1)]

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.calls.append("status")
        return dict(self._status())

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        self.calls.append("health")
        return {"workers": dict(self.health), "jobs": {}}

    def endpoint_workers(self, endpoint_id: str) -> dict[str, Any]:
        self.calls.append("workers")
        return {"workers": [dict(w) for w in self.workers], "summary": {}}

    def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        self.calls.append("endpoint")
        return {"id": endpoint_id, "idleTimeout": 7}

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int = 100) -> dict[str, Any]:
        self.calls.append(f"log {worker_id}")
        lines = [f"{worker_id}: line {n}" for n in range(3)]
        return {"lines": [*lines, f"Traceback: token={SECRET}"][-tail:], "truncated": False}


class AsyncPlatform:
    """The same platform behind the asyncio client's interface."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.platform, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


WORKER = {
    "id": "w-1",
    "status": "running",
    "gpuTypeId": "NVIDIA L40S",
    "dataCenterId": "EU-RO-1",
    "startedAt": _iso(T0 - 15),
}


def failing_job(clock: Clock) -> Platform:
    """Queued, picked up by w-1, then FAILED with the worker's own error."""
    statuses = [
        {"status": "IN_QUEUE"},
        {"status": "IN_PROGRESS", "workerId": "w-1"},
        {"status": "IN_PROGRESS", "workerId": "w-1"},
        {"status": "FAILED", "workerId": "w-1", "error": "CUDA error"},
    ]
    return Platform(clock, statuses, [WORKER])


def crash_loop(clock: Clock) -> Platform:
    """Never picked up: the endpoint's only worker crash-loops (unhealthy)."""
    unhealthy = {**WORKER, "id": "w-crash", "status": "unhealthy"}
    idle = {**WORKER, "id": "w-idle", "status": "idle"}
    return Platform(clock, [{"status": "IN_QUEUE"}], [idle, unhealthy], {"unhealthy": 1})


def watch(make: Callable[[Clock], Platform], *, worker_reader: bool = True) -> list[Any]:
    """The job's log, watched by `poll_job` (the client with or without worker methods)."""
    clock, store = Clock(), MemoryStore()
    platform = make(clock)
    client: Any = platform
    if not worker_reader:

        class Plain:
            job_status = platform.job_status
            endpoint_health = platform.endpoint_health

        client = Plain()
    poll_job(
        JobHandle("ep-1", "flash-x", "job-1", submitted_at=T0),
        client=client,
        clock=clock,
        sleep=clock.sleep,
        store=store,
        unhealthy_grace_s=60.0,
    )
    return store.read("job-job-1")


def test_a_client_with_the_worker_methods_is_a_worker_reader() -> None:
    clock = Clock()
    assert has_worker_reader(failing_job(clock))
    assert not has_worker_reader(object())


def test_pickup_records_the_worker_and_a_failure_its_last_log_lines() -> None:
    log = watch(failing_job)
    kinds = [e.kind for e in log]
    start = log[1]
    assert isinstance(start, WatchStarted) and start.has_worker_reader and start.v == 4
    pickup = next(i for i, e in enumerate(log) if getattr(e, "status", None) == "IN_PROGRESS")
    records = [i for i, e in enumerate(log) if isinstance(e, WorkerObserved)]
    # One while queued, in the first poll beside its probe (the endpoint's worker), then
    # one in the pickup's poll, not one per poll.
    assert records == [4, pickup + 1] and kinds[3] == "HealthObserved"
    worker = log[pickup + 1]
    assert isinstance(worker, WorkerObserved)
    assert (worker.worker_id, worker.found, worker.gpu_type, worker.datacenter) == (
        "w-1",
        True,
        "NVIDIA L40S",
        "EU-RO-1",
    )
    assert worker.started_at == T0 - 15
    assert log[records[0]].idle_timeout_s == 7  # (the endpoint's record: read once a watch)
    assert kinds[-2:] == ["WorkerLogObserved", "Concluded"]
    evidence = log[-2]
    assert isinstance(evidence, WorkerLogObserved) and evidence.worker_id == "w-1"
    assert evidence.lines[0] == "w-1: line 0"
    assert SECRET not in evidence.lines[-1] and MASK in evidence.lines[-1]  # masked, recorded
    assert verify(log).ok, str(verify(log))


def test_the_worker_log_is_evidence_never_a_reason() -> None:
    for make in (failing_job, crash_loop):
        with_reader, without = watch(make), watch(make, worker_reader=False)
        a, b = with_reader[-1], without[-1]
        assert isinstance(a, Concluded) and isinstance(b, Concluded)
        assert (a.state, a.rule, a.failure, a.at) == (b.state, b.rule, b.failure, b.at)
        assert not any(isinstance(e, (WorkerObserved, WorkerLogObserved)) for e in without)


def test_a_crash_loop_reads_the_unhealthy_workers_log() -> None:
    log = watch(crash_loop)
    verdict = log[-1]
    assert isinstance(verdict, Concluded) and verdict.rule == "unhealthy_worker"
    evidence = log[-2]
    assert isinstance(evidence, WorkerLogObserved)
    assert (evidence.worker_id, evidence.worker_status) == ("w-crash", "unhealthy")
    assert evidence.lines and evidence.lines[0].startswith("w-crash")
    # Nobody picked it up: the records, read while IN_QUEUE, name the crash-looping worker.
    records = [e for e in log if isinstance(e, WorkerObserved)]
    assert records and {(r.worker_id, r.status) for r in records} == {("w-crash", "unhealthy")}
    assert verify(log).ok, str(verify(log))


def test_a_failed_log_read_is_recorded_and_the_verdict_still_comes() -> None:
    def broken(clock: Clock) -> Platform:
        platform = failing_job(clock)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError(f"reset by peer (key {SECRET})")

        platform.worker_log = refuse  # type: ignore[method-assign]
        return platform

    log = watch(broken)
    evidence = log[-2]
    assert isinstance(evidence, WorkerLogObserved) and not evidence.lines
    assert evidence.read_error and SECRET not in evidence.read_error
    assert isinstance(log[-1], Concluded) and log[-1].state == "FAILED"
    assert verify(log).ok


@pytest.mark.parametrize("make", [failing_job, crash_loop], ids=["failed", "crash-loop"])
def test_the_supervisor_records_the_same_conversation(make: Callable[[Clock], Platform]) -> None:
    sync_log = watch(make)
    clock, store = Clock(), MemoryStore()
    client = AsyncPlatform(make(clock))
    supervisor = Supervisor(store, client, clock=clock, sleep=clock.asleep, jitter=0.0, spread=0)
    handle = JobHandle("ep-1", "flash-x", "job-1", submitted_at=T0)
    spec = JobSpec(handle, interval_s=10.0, policy=sync_log[0].policy)  # poll_job's policy
    asyncio.run(supervisor.run([spec]))
    async_log = store.read("job-job-1")
    drop = {"id", "watcher"}
    assert [e.model_dump(exclude=drop) for e in async_log] == [
        e.model_dump(exclude=drop) for e in sync_log
    ]
