"""Scripted jobs whose answers are pure functions of virtual time, for crash tests.

Because every answer depends only on the virtual time, a process killed mid-watch and a
new process that reattaches at the same virtual time see exactly what one uninterrupted
process would have seen, so their verdicts must agree to the second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flashfsm import JobHandle, RunpodApiError, poll_job
from flashfsm.adapters.stores import open_store
from tests.conftest import VirtualClock
from tests.store_support import KillAfter

T0 = 1_000_000.0
HANDLE = JobHandle("ep-crash", "flash-crash", "job-crash", submitted_at=T0)


@dataclass
class Scenario:
    """A job: status and health answers by elapsed time, an optional heartbeat, a policy."""

    name: str
    status: Callable[[float], dict[str, Any] | BaseException]
    health: Callable[[float], dict[str, Any] | BaseException] = field(
        default=lambda t: RunpodApiError("no health", status_code=500)
    )
    heartbeat: Callable[[float], dict[str, Any] | None] | None = None
    policy: dict[str, float] = field(default_factory=dict)


def _answer(value: dict[str, Any] | BaseException) -> dict[str, Any]:
    if isinstance(value, BaseException):
        raise value
    return value


def _training_heartbeat(t: float) -> dict[str, Any] | None:
    if t < 40:
        return None
    stage = "boot" if t < 60 else "sft_train"
    return {"stage": stage, "step": int(t // 20), "ts": T0 + (t // 20) * 20}


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "success",
            lambda t: (
                {"status": "IN_QUEUE"}
                if t < 30
                else {"status": "IN_PROGRESS"}
                if t < 120
                else {"status": "COMPLETED", "output": {"loss": 0.5}}
            ),
            heartbeat=_training_heartbeat,
        ),
        Scenario("no_capacity", lambda t: {"status": "IN_QUEUE"}, policy={"queue_grace_s": 60}),
        Scenario(
            "unhealthy",
            lambda t: {"status": "IN_QUEUE"},
            health=lambda t: {"workers": {"unhealthy": 1}},
            policy={"queue_grace_s": 10_000, "unhealthy_grace_s": 20},
        ),
        Scenario(
            "stall",
            lambda t: {"status": "IN_PROGRESS"},
            heartbeat=lambda t: (
                {"stage": "sft_train", "step": 1, "ts": T0 + 5} if t >= 20 else None
            ),
            policy={"stall_after_s": 50, "setup_grace_s": 50},
        ),
        Scenario(
            "preempted",
            lambda t: {"status": "IN_PROGRESS"} if t < 50 else {"status": "CANCELLED"},
        ),
        Scenario(
            "poll_errors",
            lambda t: (
                {"status": "IN_QUEUE"} if t < 20 else RunpodApiError("bad gateway", status_code=502)
            ),
        ),
    )
}


class _Client:
    def __init__(self, scenario: Scenario, clock: VirtualClock):
        self.scenario, self.clock = scenario, clock

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        return _answer(self.scenario.status(self.clock() - T0))

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return _answer(self.scenario.health(self.clock() - T0))


def run_watch(name: str, url: str, stream: str, kill_after: int | None = None) -> None:
    """Watch scenario `name` on the store at `url`, resuming at the log's last time."""
    scenario = SCENARIOS[name]
    store = open_store(url)
    events = store.read(stream)
    clock = VirtualClock(events[-1].at if events else T0)
    reader = None
    if scenario.heartbeat is not None:
        heartbeat = scenario.heartbeat

        def reader(force: bool = False) -> dict[str, Any] | None:
            return heartbeat(clock() - T0)

    try:
        poll_job(
            HANDLE,
            heartbeat_reader=reader,
            client=_Client(scenario, clock),
            clock=clock,
            sleep=clock.sleep,
            store=KillAfter(store, kill_after),
            stream=stream,
            **scenario.policy,
        )
    finally:
        store.close()
