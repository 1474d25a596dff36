"""Late is not different: a watch whose polls come late, or that is killed and reattached,
reaches the verdict and rule of an on-time watch of the same simulated job.

Every built-in simulator scenario is watched twice by `poll_job` on the simulator's manual
clock: once on time, once with Hypothesis's delays (0–2× the poll interval, before any
poll, several per job) and optionally a kill after any event followed by a reattach. The
simulated platform is called in process (the same `World` the HTTP simulator serves), so
the test spends its time on the watch, not on sockets; `tests/test_simulator_*.py` cover
the HTTP path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashfsm import JobHandle, MemoryStore, RunpodApiError, poll_job
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.simulator.scenarios import builtin_scenarios
from flashfsm.adapters.simulator.world import ApiError
from flashfsm.events.models import Concluded, Event
from flashfsm.fsm.job import verify
from flashfsm.postmortem.explain import why_not_report

INTERVAL_S = 10.0
REPO, PHASE = "org/runs", "sft"
SCENARIOS = sorted(builtin_scenarios())


class Killed(Exception):
    """The watching process died right after an append."""


@dataclass
class Platform:
    """RunPod and the Hub of one simulated job, answered in process on the sim's clock."""

    scenario: str
    sim: Simulator = field(init=False)
    endpoint_id: str = field(init=False)
    job_id: str = field(init=False)
    submitted_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.sim = Simulator(speed=0)
        self.endpoint_id = self.sim.add_endpoint("flash-late-s0", hf_repo=REPO)
        self.submitted_at = self.sim.clock.now()
        job_input = {"phase": PHASE, "run_id": "late", "seed": 0, "scenario": self.scenario}
        self.job_id = self.sim.submit(self.endpoint_id, job_input)

    def _world(self) -> Any:
        world = self.sim.world
        world.tick()
        return world

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        world = self._world()
        try:
            return world.job(world.endpoint(None, endpoint_id), job_id).status_answer()
        except ApiError as exc:
            raise RunpodApiError(exc.message, status_code=exc.status, route="status") from None

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        return self._world().endpoint(None, endpoint_id).health()

    def _file(self, name: str) -> str | None:
        self._world()
        return self.sim.hub.text(REPO, f"{PHASE}/late/seed0/{name}")

    def heartbeat(self, force: bool = False) -> dict[str, Any] | None:
        text = self._file("heartbeat.json")
        return None if text is None else json.loads(text)

    def failure_detail(self, force: bool = False) -> str | None:
        return self._file(f"error_{PHASE}.txt")


class KillingStore(MemoryStore):
    """A memory store whose writer dies right after its `kill_after`-th event is stored."""

    def __init__(self) -> None:
        super().__init__()
        self.kill_after: int | None = None
        self.stored = 0

    def append(self, stream: str, events: Sequence[Event], expected_seq: int, **kw: Any) -> Any:
        result = super().append(stream, events, expected_seq, **kw)
        self.stored += len(events)
        if self.kill_after is not None and self.stored > self.kill_after:
            self.kill_after = None
            raise Killed(f"killed after {self.stored} events")
        return result


@dataclass(frozen=True)
class Watched:
    """What a watch concluded: the verdict's state and rule, and when (sim seconds after
    the submission)."""

    state: str
    rule: str
    after_s: float


def watch(
    scenario: str,
    delays: dict[int, float] | None = None,
    kill_after: int | None = None,
    reattach_gap_s: float = 0.0,
) -> tuple[Watched, float]:
    """Watch one simulated job; return its verdict and the time it may lag an on-time
    watch by (the delays given, and the blind gap of a reattach)."""
    platform = Platform(scenario)
    clock = platform.sim.clock
    delays = dict(delays or {})
    sleeps = 0
    lag = 0.0

    def sleep(seconds: float) -> None:
        nonlocal sleeps, lag
        extra = delays.pop(sleeps, 0.0)
        sleeps += 1
        lag += extra
        clock.sleep(seconds + extra)

    store = KillingStore()
    store.kill_after = kill_after
    handle = JobHandle(
        platform.endpoint_id, "flash-late-s0", platform.job_id, submitted_at=platform.submitted_at
    )

    def run() -> Any:
        return poll_job(
            handle,
            interval_s=INTERVAL_S,
            heartbeat_reader=platform.heartbeat,
            failure_detail_reader=platform.failure_detail,
            client=platform,
            clock=clock.now,
            sleep=sleep,
            store=store,
        )

    try:
        run()
    except Killed:
        last_at = store.read(f"job-{platform.job_id}")[-1].at
        clock.sleep(reattach_gap_s)
        lag += clock.now() - last_at
        run()
    verdict = store.read(f"job-{platform.job_id}")[-1]
    assert isinstance(verdict, Concluded)
    return Watched(verdict.state, verdict.rule, verdict.at - platform.submitted_at), lag


@cache
def on_time(scenario: str) -> Watched:
    """The verdict of the on-time watch of `scenario` (no delay, no kill)."""
    return watch(scenario)[0]


@cache
def events_of(scenario: str) -> int:
    """How many events the on-time watch of `scenario` records."""
    platform_watch = on_time(scenario)
    # (a bound for the kill point: an on-time watch records at most one event per poll and
    # read; a late one no more than a few per interval)
    return int(platform_watch.after_s / INTERVAL_S) * 3 + 4


def delays_for(scenario: str) -> st.SearchStrategy[dict[int, float]]:
    polls = max(1, int(on_time(scenario).after_s / INTERVAL_S) + 1)
    return st.dictionaries(
        st.integers(0, polls),
        st.floats(0.0, 2 * INTERVAL_S, allow_nan=False),
        max_size=4,
    )


def test_every_scenario_reaches_a_verdict_on_time() -> None:
    # (the baseline the properties compare against: every scenario concludes)
    verdicts = {name: on_time(name) for name in SCENARIOS}
    assert verdicts["crash_loop"].rule == "unhealthy_worker"
    # (the throttled grace ends with the queue grace here: a tie goes to the queue grace)
    assert verdicts["throttled"].rule == "queue_grace"
    assert verdicts["no_capacity"].rule == "queue_grace"
    assert verdicts["success"].state == "SUCCEEDED"


@pytest.mark.parametrize("scenario", SCENARIOS)
@settings(
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=max(15, settings().max_examples // 4),  # per scenario (the CI profile: 100)
)
@given(data=st.data())
def test_late_polls_and_reattaches_keep_the_on_time_verdict_and_rule(
    scenario: str, data: st.DataObject
) -> None:
    delays = data.draw(delays_for(scenario), label="delays")
    kill_after = data.draw(st.none() | st.integers(1, events_of(scenario)), label="kill_after")
    gap = data.draw(st.floats(0.0, 2 * INTERVAL_S, allow_nan=False), label="reattach_gap_s")
    expected = on_time(scenario)
    got, lag = watch(scenario, delays, kill_after, gap)
    assert (got.state, got.rule) == (expected.state, expected.rule)
    assert got.after_s <= expected.after_s + lag + 1e-6, (got, expected, lag)


def _late_watch_of(scenario: str, delays: dict[int, float]) -> Watched:
    return watch(scenario, delays)[0]


def test_why_not_says_the_losing_rule_held_but_another_limit_passed_first() -> None:
    store = MemoryStore()
    platform = Platform("crash_loop")
    clock = platform.sim.clock
    polls = iter(range(10_000))

    def sleep(seconds: float) -> None:
        clock.sleep(seconds + (8.0 if next(polls) == 29 else 0.0))

    handle = JobHandle(platform.endpoint_id, "flash-late-s0", platform.job_id)
    poll_job(handle, client=platform, clock=clock.now, sleep=sleep, store=store, stream="job-l")
    log = store.read("job-l")
    assert log[-1].rule == "unhealthy_worker"
    assert "its limit passed first: queue grace" in log[-1].detail
    report = why_not_report(log, "queue_grace")
    assert report.held and not report.fired
    assert "unhealthy_worker had its limit pass first (D8)" in report.text
    assert verify(log).ok


@pytest.mark.regression
def test_a_crash_loop_polled_late_past_the_queue_grace_is_still_a_crash_loop() -> None:
    # The case: the poll due at 300 s comes 8 s late. The status alone would end the
    # watch NO_CAPACITY by the queue grace (300 s), but the unhealthy grace (240 s) passed
    # first, so the probe that was due is made first and the crash loop decides.
    polls_before = int(290 / INTERVAL_S)
    got = _late_watch_of("crash_loop", {polls_before: 8.0})
    assert (got.state, got.rule) == ("STALLED", "unhealthy_worker")
    assert got.after_s == pytest.approx(308.0)


@pytest.mark.regression
def test_a_drifted_probe_pace_does_not_hand_a_crash_loop_to_the_queue_grace() -> None:
    # A probe 15 s late moves every later probe: the next one is not due when the queue
    # grace passes. The unhealthy grace passed earlier, so a probe is made at once.
    got = _late_watch_of("crash_loop", {19: 15.0})
    assert (got.state, got.rule) == ("STALLED", "unhealthy_worker")


@pytest.mark.regression
def test_a_watch_killed_between_its_evidence_and_its_verdict_keeps_that_verdicts_time() -> None:
    # CI found it: a crash loop's watch killed right after the probe that decides it, the
    # verdict not yet appended, reattached 1 s later: the blind gap made the probe's evidence
    # stale and the verdict waited for the next probe, a poll later (311 s for 300 s). The
    # new watch now records the verdict the log's evidence reaches, at that evidence's time.
    expected = on_time("crash_loop")
    for kill_after in range(1, events_of("crash_loop") + 1):
        for gap in (1.0, 15.0):
            got, lag = watch("crash_loop", {}, kill_after, gap)
            assert (got.state, got.rule) == (expected.state, expected.rule), kill_after
            assert got.after_s <= expected.after_s + lag + 1e-6, (kill_after, gap, got)
