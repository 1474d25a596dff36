"""The fault matrix and the fault soak: every fault on every route a watch uses.

A watch talks to three routes: RunPod's job `status`, the endpoint's `health`, and the
Hugging Face Hub download of the worker's heartbeat (`hub_resolve`, read through
`make_hf_heartbeat_reader` pointed at the simulator). Each of them gets each fault the
simulator injects, once and for good, through `poll_job` (the sync client) and through the
asyncio `Supervisor` (the async client, several jobs at once). What must hold:

- a transient fault (429 with or without Retry-After, 500/502/503, a reset, a timeout) on a
  RunPod route is retried by the client: nothing reaches the log and the job still reaches
  its scenario's verdict;
- status faults that persist end in `poll_error` after 8 consecutive status errors — or in
  `lost` on a 404 (divergence D4), or in `unauthorized` on the first 401/403 (the client's
  `RunpodAuthError`; divergence D6). Unusable answers (not JSON, not an object, no
  `status`) count as status errors like any other;
- a health fault changes nothing: a failed probe moves no timer, and a watch whose probes
  all fail reaches the verdict of a watch that has no health data at all;
- a Hub fault is a heartbeat read that found nothing — except a transient one (429, 5xx, a
  reset, a timeout) on the forced read after a failure: that read is recorded as failed and
  tried again after a backoff, so the verdict is the one the heartbeat gives;
- no exception ever escapes, and the simulator saw no bug of its own.

The soak then lets Hypothesis choose fault schedules over whole lifecycles of random
scenarios and checks every verdict against an explicit oracle (`allowed_verdicts`).

Timing. The simulator's clock is manual (`speed=0`): `poll_job` sleeps by advancing it,
the Supervisor by a discrete-event scheduler (`VirtualTime`), so hours of job life take
milliseconds. Only slow answers cost real time: clients time out after `TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import random
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from flashfsm import (
    AsyncRunpodClient,
    GracePolicy,
    JobHandle,
    MemoryStore,
    PollResult,
    RunpodClient,
    poll_job,
    replay,
    verify,
)
from flashfsm.adapters.hub import make_hf_heartbeat_reader
from flashfsm.adapters.runpod import RetryPolicy
from flashfsm.adapters.simulator import Scenario, Simulator, Step
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.events.models import (
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    StatusFetchFailed,
    StatusObserved,
    WorkerCounts,
)
from flashfsm.fsm.job import JobState, evolve
from flashfsm.supervisor import JobSpec, Supervisor
from flashfsm.watch import default_stream

KEY = "sim-faults-key-0001"
REPO = "team/runs"
TIMEOUT_S = 0.1  # RunPod clients give up on an answer after this (real seconds)
HUB_TIMEOUT_S = 0.1  # and huggingface_hub too (see `quick_hub`)
SLOW_S = 0.3  # how late a "timeout" fault answers (real seconds)
RETRY = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.05)
INTERVAL_S = 20.0

# --------------------------------------------------------------------------- the faults

#: Every fault the simulator injects, as `Simulator.add_fault` keyword arguments.
FAULTS: dict[str, dict[str, Any]] = {
    "429-retry-after": {"kind": 429, "retry_after": 1},
    "429": {"kind": 429},
    "500": {"kind": 500},
    "502": {"kind": 502},
    "503": {"kind": 503},
    "reset": {"kind": "reset"},
    "timeout": {"kind": "slow", "delay_s": SLOW_S},
    "malformed": {"kind": "malformed"},  # 200 with a body that is not JSON
    "non_object": {"kind": "non_object"},  # 200 with a JSON list
    "missing_keys": {"kind": "missing_keys"},  # 200 without the route's keys (`status`, …)
    "gzip": {"kind": "gzip"},  # the answer gzip-encoded: a client that decodes sees no fault
    "401": {"kind": 401},
    "403": {"kind": 403},
    "404": {"kind": 404},
}
#: Faults a RunPod client retries (on its idempotent routes, which status and health are).
TRANSIENT = frozenset({"429-retry-after", "429", "500", "502", "503", "reset", "timeout"})
#: The HTTP status a fault answers with (None: no HTTP error status reaches the caller).
HTTP_CODE = {name: f["kind"] for name, f in FAULTS.items() if isinstance(f["kind"], int)}
ROUTES = ("status", "health", "hub_resolve")


def fires(route: str, fault: str, mode: str) -> int | None:
    """How often a fault fires in a mode (`Simulator.add_fault`'s `times=`).

    `always` never stops. `once` is one failed call: twice in a row for a transient fault
    on a RunPod route (RETRY makes 3 attempts, so the client absorbs it), else once (the
    Hub reader does not retry). `forced` (the Hub only) is once, on the forced read.
    """
    if mode == "always":
        return None
    return 2 if route != "hub_resolve" and fault in TRANSIENT else 1


def add_fault(sim: Simulator, route: str, fault: str, times: int | None, job: Job, **kw: Any):
    """Schedule `fault` on `route` for `job`'s requests only."""
    marker = job.hub_marker if route == "hub_resolve" else job.handle.endpoint_id
    spec = dict(FAULTS[fault])
    if fault == "missing_keys" and route == "status":
        spec["keys"] = ("status",)  # a status answer without its status
    extra_when = kw.pop("when", None)

    def when(request: Any) -> bool:
        return marker in request.path and (extra_when is None or extra_when(request))

    return sim.add_fault(route, times=times, when=when, **spec, **kw)


# --------------------------------------------------------------------------- the scenarios


@dataclass(frozen=True)
class Setup:
    """The scenario a route's faults are tried on, and the verdicts that may come of it."""

    scenario: str
    policy: GracePolicy
    expected: tuple[str, str]  # (state, rule) when nothing goes wrong
    blind: tuple[str, str]  # (state, rule) when the route never answers usefully
    heartbeat: bool = False  # watched with a Hub heartbeat reader


POLICY = GracePolicy()
#: Crash-loop detection needs the probe: the queue grace is out of its way, and a stall
#: window of 600 s ends a watch that never gets a usable probe answer.
HEALTH_POLICY = GracePolicy(queue_grace_s=3600.0, stall_after_s=600.0)

#: A crash loop judged on the worker records alone (the probe blind or late, D10).
CRASH_LOOP_BY_RECORDS = ("STALLED", "crash_loop")

SETUPS: dict[str, Setup] = {
    "status": Setup("success", POLICY, ("SUCCEEDED", "completed"), ("POLL_ERROR", "poll_errors")),
    "health": Setup(
        "crash_loop", HEALTH_POLICY, ("STALLED", "unhealthy_worker"), ("STALLED", "stall")
    ),
    # FAILED, and the forced read of the worker's last heartbeat says `retriable: true`.
    "hub_resolve": Setup(
        "failed_retriable",
        POLICY,
        ("PREEMPTED", "worker_failed"),
        ("FAILED", "worker_failed"),
        heartbeat=True,
    ),
}
#: The Hub read that decides a retriable failure: the scenario reports FAILED at 70 s.
FORCED_READ_AT = 70.0


# --------------------------------------------------------------------------- the rig


@pytest.fixture(scope="module", autouse=True)
def quick_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """huggingface_hub with short timeouts and no real back-off sleeps.

    `hf_hub_download` waits 10 s for a HEAD answer (a keyword default) and sleeps whole
    seconds between its retries of a GET; neither is configurable per call, so a test of
    timeouts would take minutes. The reader under test is unchanged.
    """
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub import file_download as hf_download
    from huggingface_hub.utils import _http as hf_http

    no_sleep = types.SimpleNamespace(**{**vars(time), "sleep": lambda _s: None})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
        mp.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        mp.delenv("HF_TOKEN", raising=False)
        download = inspect.unwrap(huggingface_hub.hf_hub_download)
        mp.setitem(download.__kwdefaults__, "etag_timeout", HUB_TIMEOUT_S)
        mp.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", HUB_TIMEOUT_S)
        mp.setattr(hf_http, "time", no_sleep)
        mp.setattr(hf_download, "time", no_sleep)
        yield


@dataclass
class Job:
    """One simulated job and what watching it needs."""

    handle: JobHandle
    hub_marker: str  # a string only this job's Hub paths hold
    setup: Setup
    reader: Callable[..., Any] | None = None

    @property
    def stream(self) -> str:
        return default_stream(self.handle)


_names = itertools.count()


def new_job(sim: Simulator, setup: Setup, cache: Path, scenario: str | None = None) -> Job:
    """Queue a job of `setup` (or of `scenario` under the setup's policy) on its own endpoint."""
    name = f"faults{next(_names)}"
    endpoint = sim.add_endpoint(f"flash-{name}", hf_repo=REPO, check_quota=False)
    payload = {"scenario": scenario or setup.scenario, "phase": "train", "run_id": name, "seed": 1}
    job_id = sim.submit(endpoint, payload)
    handle = JobHandle(endpoint, f"flash-{name}", job_id, submitted_at=sim.clock.now())
    reader = None
    if setup.heartbeat:
        reader = make_hf_heartbeat_reader(
            REPO,
            f"train/{name}/seed1",
            clock=sim.clock.now,
            endpoint=sim.url,
            cache_dir=cache / name,
        )
    return Job(handle, f"/{name}/", setup, reader)


def sync_client(sim: Simulator) -> RunpodClient:
    return RunpodClient(
        KEY,
        endpoint_base_url=f"{sim.url}/v2",
        api_base_url=sim.url,
        timeout=TIMEOUT_S,
        retry=RETRY,
        sleep=sim.clock.sleep,
        rng=random.Random(3),
    )


def graces(policy: GracePolicy) -> dict[str, Any]:
    """`poll_job` keyword arguments for a policy."""
    return policy.model_dump(
        include={
            "stall_after_s",
            "setup_grace_s",
            "unhealthy_grace_s",
            "throttled_grace_s",
            "queue_grace_s",
            "deadline_s",
        }
    )


def watch(
    sim: Simulator, job: Job, client: Any = None, store: Any = None
) -> tuple[PollResult, list[Any]]:
    """`poll_job` over the simulator to a verdict: the result and the job's log."""
    store = store if store is not None else MemoryStore()
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(sync_client(sim))
        result = poll_job(
            job.handle,
            client=client,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
            heartbeat_reader=job.reader,
            store=store,
            interval_s=INTERVAL_S,
            **graces(job.setup.policy),
        )
    return result, store.read(job.stream)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(speed=0, api_keys=(KEY,), worker_quota=10_000) as s:
        yield s
        assert s.errors == [], s.errors[0]


# --------------------------------------------------------------------------- classification


@dataclass(frozen=True)
class Expect:
    """What a fault on a route, in a mode, must come to."""

    verdict: tuple[str, str]
    fetch_failures: int | None = 0  # StatusFetchFailed events (None: not counted)
    probe_failures: int | None = 0  # HealthProbeFailed events (None: not counted)


def expect(route: str, fault: str, mode: str) -> Expect:
    """The classification of `fault` on `route` in `mode` (the matrix's oracle)."""
    setup = SETUPS[route]
    if fault == "gzip":  # decoded as any answer is: no fault at all
        return Expect(setup.expected, 0, 0 if route == "health" else None)
    if route == "status":
        if fault == "404":
            return Expect(("LOST", "job_lost"), fetch_failures=1)  # D4: the job is gone
        if fault in ("401", "403"):  # D6: the key was refused, at the first refusal
            return Expect(("UNAUTHORIZED", "unauthorized"), fetch_failures=1)
        if mode == "always":
            return Expect(("POLL_ERROR", "poll_errors"), fetch_failures=POLICY.max_poll_errors)
        # Retried away, or one status error that the next good answer forgives.
        return Expect(setup.expected, fetch_failures=0 if fault in TRANSIENT else 1)
    if route == "health":
        failed_probes = None if mode == "always" else 0 if fault in TRANSIENT else 1
        if fault == "missing_keys":
            failed_probes = 0  # not a failed probe: an answer whose counts all read 0
        # The client reads the platform's worker records too (D10): they list the worker
        # unhealthy from the first poll, so when the first probe shows nothing (it failed,
        # or read every count as 0) the records' crash_loop limit passes first; a
        # transient fault is retried away and the probe's rule decides, as without them.
        useless = fault not in TRANSIENT or fault == "missing_keys"
        verdict = CRASH_LOOP_BY_RECORDS if mode == "always" or useless else setup.expected
        return Expect(verdict, 0, failed_probes)
    # The Hub: a read that fails found nothing; only the forced read can change a verdict,
    # and a transient error on it is read again (so it changes nothing).
    if mode == "always":
        return Expect(setup.blind)
    if mode == "forced" and fault not in TRANSIENT:
        return Expect(setup.blind)
    return Expect(setup.expected)


def state_after(events: list[Any], upto: int) -> JobState:
    state = JobState()
    for e in events[:upto]:
        evolve(state, e)
    return state


NO_WORKERS = WorkerCounts()
#: What a failed probe may change: it spends the probe slot, nothing else (step 8).
#: (`probed`: the poll made its probe, so no rule waits for one in this poll, D8)
PROBE_FAILURE_MAY_CHANGE = {"pending", "last_probe_at", "probed", "next_seq", "last_at"}


def assert_failed_probes_change_nothing(events: list[Any]) -> None:
    for i, e in enumerate(events):
        if isinstance(e, HealthProbeFailed):
            before = state_after(events, i).snapshot()
            after = state_after(events, i + 1).snapshot()
            changed = {k for k in before if before[k] != after[k]}
            assert changed <= PROBE_FAILURE_MAY_CHANGE, (e, changed)


def check(route: str, fault: str, mode: str, result: PollResult, events: list[Any]) -> None:
    """Assert the classification of one watch under one fault."""
    want = expect(route, fault, mode)
    got = (result.state, result.rule)
    assert got == want.verdict, f"{route}/{fault}/{mode}: {got}: {result.detail}"
    assert result.ok is (got[0] == "SUCCEEDED")
    # The log replays to the verdict, and today's rules agree with every step of it.
    assert replay(events).verdict is not None
    assert (replay(events).verdict.state, replay(events).verdict.rule) == got
    assert verify(events).ok, verify(events)
    fetch_failed = [e for e in events if isinstance(e, StatusFetchFailed)]
    probe_failed = [e for e in events if isinstance(e, HealthProbeFailed)]
    if want.fetch_failures is not None:
        assert len(fetch_failed) == want.fetch_failures, fetch_failed
    if want.probe_failures is not None:
        assert len(probe_failed) == want.probe_failures, probe_failed
    if route == "status" and fetch_failed:
        code = HTTP_CODE.get(fault)
        assert {e.http_status for e in fetch_failed} == {code}
        kinds = {e.error_class for e in fetch_failed}
        assert kinds == {"RunpodAuthError" if fault in ("401", "403") else "RunpodApiError"}
        if got[0] == "POLL_ERROR":  # 8 in a row, and they are the verdict's evidence
            status_events = [e for e in events if isinstance(e, StatusObserved | StatusFetchFailed)]
            tail = status_events[-POLICY.max_poll_errors :]
            assert all(isinstance(e, StatusFetchFailed) for e in tail)
            assert tuple(replay(events).verdict.evidence) == tuple(e.seq for e in tail)
    if route == "health":
        assert_failed_probes_change_nothing(events)
        if fault == "missing_keys":  # the garbled answer reads as zero workers
            zero = [e for e in events if isinstance(e, HealthObserved) and e.workers == NO_WORKERS]
            assert zero, "a health answer without its keys counts every worker as 0"
    if route == "hub_resolve" and fault == "gzip":  # decoded: the reads find the heartbeat
        forced = [e for e in events if isinstance(e, HeartbeatObserved) and e.forced]
        assert forced and forced[-1].found and forced[-1].read_error is None
    elif route == "hub_resolve":
        assert not fetch_failed and not probe_failed
        found = [e for e in events if isinstance(e, HeartbeatObserved) and e.found]
        if mode == "always":
            assert found == [], "a Hub that never answers usefully yields no heartbeat"
        forced = [e for e in events if isinstance(e, HeartbeatObserved) and e.forced]
        failed_reads = [e for e in forced if e.read_error is not None]
        if mode == "forced" and fault in TRANSIENT:  # one failed forced read, then the beat
            assert len(failed_reads) == 1 and forced[0] is failed_reads[0], forced
            assert forced[-1].found and forced[-1].retriable and forced[-1].read_error is None
            retry = forced[-1].at - failed_reads[0].at
            assert retry == pytest.approx(POLICY.forced_read_backoff_s)
        elif mode == "forced":  # the fault met the forced read, which found nothing
            assert forced and not forced[-1].found and failed_reads == []
        if mode == "always" and fault in TRANSIENT:  # every try failed, then the verdict
            assert len(failed_reads) == len(forced) == POLICY.forced_read_tries
            assert "could not be read" in (result.detail or "")


def fault_cases() -> list[Any]:
    cases = []
    for route in ROUTES:
        modes = ("once", "always", "forced") if route == "hub_resolve" else ("once", "always")
        for fault in FAULTS:
            for mode in modes:
                cases.append(pytest.param(route, fault, mode, id=f"{route}-{fault}-{mode}"))
    return cases


def schedule(sim: Simulator, job: Job, route: str, fault: str, mode: str):
    """Put one matrix fault on `job`'s requests to `route`."""
    when = None
    if route == "hub_resolve":
        start = sim.clock.now()
        # `once`: the first read that has a heartbeat to find; `forced`: the forced read.
        at = FORCED_READ_AT if mode == "forced" else 20.0
        when = (lambda r: r.at - start >= at) if mode != "always" else None
    times = None if mode == "always" else fires(route, fault, mode)
    return add_fault(sim, route, fault, times, job, when=when)


# --------------------------------------------------------------------------- poll_job


def test_without_faults_each_routes_scenario_reaches_its_verdict(sim, tmp_path):
    for route, setup in SETUPS.items():
        result, events = watch(sim, new_job(sim, setup, tmp_path))
        assert (result.state, result.rule) == setup.expected, route
        assert verify(events).ok


class _NoHealth:
    """A client whose health probe always raises (a client bug, even): no health data."""

    def __init__(self, inner: RunpodClient):
        self.inner = inner

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        return self.inner.job_status(endpoint_id, job_id)

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        raise ZeroDivisionError("a client bug")


def test_the_blind_verdicts_are_those_of_a_watch_without_the_routes_data(sim, tmp_path):
    # Health: a client whose probe raises anything at all.
    with sync_client(sim) as client:
        result, events = watch(sim, new_job(sim, SETUPS["health"], tmp_path), _NoHealth(client))
    assert (result.state, result.rule) == SETUPS["health"].blind
    assert all(
        e.error_class == "ZeroDivisionError" for e in events if e.kind == "HealthProbeFailed"
    )
    assert_failed_probes_change_nothing(events)
    # Hub: a reader of a repo that does not exist.
    job = new_job(sim, SETUPS["hub_resolve"], tmp_path)
    job.reader = make_hf_heartbeat_reader(
        "team/no-such-repo", "x", clock=sim.clock.now, endpoint=sim.url, cache_dir=tmp_path
    )
    result, _ = watch(sim, job)
    assert (result.state, result.rule) == SETUPS["hub_resolve"].blind


def test_the_matrix_covers_every_fault_kind_the_simulator_has():
    from flashfsm.adapters.simulator.faults import KINDS, STREAM_KINDS

    # The stream kinds exist only on the worker-log route (tests/test_simulator_workers.py).
    kinds = KINDS - {"status"} - STREAM_KINDS
    assert {f["kind"] for f in FAULTS.values() if isinstance(f["kind"], str)} == kinds
    assert {429, 500, 502, 503, 401, 403, 404} <= set(HTTP_CODE.values())


@pytest.mark.parametrize(("route", "fault", "mode"), fault_cases())
def test_poll_job_classifies_every_fault_on_every_route(sim, tmp_path, route, fault, mode):
    job = new_job(sim, SETUPS[route], tmp_path)
    injected = schedule(sim, job, route, fault, mode)
    result, events = watch(sim, job)
    assert injected.fired >= 1, "the fault never fired: the matrix tested nothing"
    if injected.times is not None:
        assert injected.fired == injected.times
    if route != "hub_resolve" and fault in TRANSIENT and mode == "always":
        assert injected.fired >= RETRY.attempts  # each failed call was retried first
    check(route, fault, mode, result, events)


# Regressions of two bugs (fixed): text a watch could not take. Half an emoji: JSON may
# escape a lone UTF-16 surrogate ("\\ud83d"), json.loads accepts it, and text cut between the
# halves of an emoji carries one; pydantic refused such a string in an event. Odd digits: a
# heartbeat step of "²" passes `str.isdigit` and fails `int`. Either way the exception
# escaped `poll_job`; now the text is made valid (`safe_text`) and the step reads as none.
HALF_EMOJI = "step 10 \ud83d"
ODD_ANSWERS = {
    "failed-error": Scenario(
        "half-emoji-failed",
        (Step(0, status="IN_QUEUE"), Step(20, status="FAILED", error=HALF_EMOJI)),
    ),
    "heartbeat-stage": Scenario(
        "half-emoji-heartbeat",
        (
            Step(0, status="IN_PROGRESS", heartbeat={"stage": HALF_EMOJI, "step": 1}),
            Step(60, status="COMPLETED", output={"loss": 0.1}),
        ),
    ),
    "metrics": Scenario(  # recorded in a store that writes JSON
        "half-emoji-metrics",
        (Step(0, status="IN_PROGRESS"), Step(30, status="COMPLETED", output={"note": HALF_EMOJI})),
    ),
    "heartbeat-step": Scenario(
        "odd-digit-step",
        (
            Step(0, status="IN_PROGRESS", heartbeat={"stage": "train", "step": "\u00b2"}),
            Step(60, status="COMPLETED", output={"loss": 0.1}),
        ),
    ),
}


@pytest.mark.parametrize("where", ["error-body", *ODD_ANSWERS])
def test_regression_odd_text_in_an_answer_never_crashes_the_watch(sim, tmp_path, where):
    setup = Setup("success", POLICY, ("SUCCEEDED", "completed"), ("", ""), heartbeat=True)
    scenario = ODD_ANSWERS.get(where)
    if scenario is not None:
        sim.register_scenario(scenario)
    job = new_job(sim, setup, tmp_path, scenario=scenario.name if scenario else None)
    if where == "error-body":  # a 500 whose body RunPod's error detail is read from
        add_fault(sim, "status", "500", RETRY.attempts, job, body={"error": HALF_EMOJI})
    store = SqliteStore(tmp_path / "events.db")
    try:
        result, events = watch(sim, job, store=store)
    finally:
        store.close()
    assert result.state is not None and verify(events).ok


# --------------------------------------------------------------------------- the Supervisor


class VirtualTime:
    """Discrete-event time for a Supervisor on the simulator's manual clock.

    `sleep` parks the caller until the clock reaches its wake time. The clock moves only
    when every live watch is parked (none is waiting on HTTP, a thread or the store), and
    then only to the earliest wake time, so concurrent jobs see the same time line as they
    would in real time, without waiting for it.
    """

    def __init__(self, sim: Simulator):
        self.clock = sim.clock
        self._parked: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        wake = self.clock.now() + max(0.0, seconds)
        heapq.heappush(self._parked, (wake, next(self._order), future))
        await future

    @staticmethod
    def _live_watches() -> int:
        return sum(
            1
            for task in asyncio.all_tasks()
            if getattr(task.get_coro(), "__qualname__", "") == "Supervisor.watch"
        )

    async def run(self, work: Any, *, limit_s: float = 60.0) -> Any:
        task = asyncio.ensure_future(work)
        started = time.monotonic()
        while not task.done():
            await asyncio.sleep(0.0005)
            assert time.monotonic() - started < limit_s, "the supervisor made no progress"
            self._parked = [p for p in self._parked if not p[2].done()]
            heapq.heapify(self._parked)
            if self._parked and len(self._parked) >= self._live_watches():
                wake = self._parked[0][0]
                now = self.clock.now()
                if wake > now:
                    self.clock.advance(wake - now)
                while self._parked and self._parked[0][0] <= wake:  # all due now, together
                    heapq.heappop(self._parked)[2].set_result(None)
        return task.result()


def supervise_jobs(
    sim: Simulator, jobs: list[Job]
) -> tuple[dict[str, PollResult | BaseException], MemoryStore]:
    """Watch `jobs` concurrently with one Supervisor (and one async client) to their verdicts."""
    store = MemoryStore()

    async def main() -> dict[str, PollResult | BaseException]:
        virtual = VirtualTime(sim)
        async with AsyncRunpodClient(
            KEY,
            endpoint_base_url=f"{sim.url}/v2",
            api_base_url=sim.url,
            timeout=TIMEOUT_S,
            retry=RETRY,
            sleep=virtual.sleep,
            rng=random.Random(5),
        ) as client:
            supervisor = Supervisor(
                store,
                client,
                clock=sim.clock.now,
                sleep=virtual.sleep,
                rng=random.Random(9),
                jitter=0.0,  # jobs due together poll together
                commit_window_s=0.0,  # virtual time: nothing to gather for
            )
            specs = [
                JobSpec(
                    job.handle,
                    interval_s=INTERVAL_S,
                    policy=job.setup.policy,
                    heartbeat_reader=job.reader,
                )
                for job in jobs
            ]
            return await virtual.run(supervisor.run(specs))

    return asyncio.run(main()), store


#: Jobs the faults never touch, watched alongside the faulted ones.
BYSTANDERS = (
    ("success", ("SUCCEEDED", "completed")),
    ("no_capacity", ("NO_CAPACITY", "queue_grace")),
)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_supervisor_classifies_every_fault_and_keeps_watching_the_others(
    sim, tmp_path, route, fault
):
    setup = SETUPS[route]
    once, always = new_job(sim, setup, tmp_path), new_job(sim, setup, tmp_path)
    bystanders = [(new_job(sim, Setup(s, POLICY, v, v), tmp_path), v) for s, v in BYSTANDERS]
    faults = [
        schedule(sim, once, route, fault, "once"),
        schedule(sim, always, route, fault, "always"),
    ]
    results, store = supervise_jobs(sim, [once, always, *(job for job, _ in bystanders)])
    for result in results.values():
        assert isinstance(result, PollResult), f"a watch raised {result!r}"
    assert all(f.fired >= 1 for f in faults)
    for job, mode in ((once, "once"), (always, "always")):
        check(route, fault, mode, results[job.stream], store.read(job.stream))
    for job, verdict in bystanders:
        result = results[job.stream]
        assert (result.state, result.rule) == verdict, job.setup.scenario
        events = store.read(job.stream)
        assert not any(isinstance(e, StatusFetchFailed | HealthProbeFailed) for e in events)


# --------------------------------------------------------------------------- the soak

#: The scenarios the soak runs (whole lifecycles, under POLICY, with a Hub reader), and the
#: verdict each reaches when nothing goes wrong.
SOAK: dict[str, tuple[str, str]] = {
    "success": ("SUCCEEDED", "completed"),
    "completed_envelope": ("SUCCEEDED", "completed"),
    "worker_death": ("SUCCEEDED", "completed"),
    "result_expired": ("SUCCEEDED", "completed"),
    "completed_error": ("FAILED", "completed_with_error"),
    "completed_no_output": ("FAILED", "completed_with_error"),
    "completed_error_retriable": ("PREEMPTED", "completed_with_error"),
    "failed": ("FAILED", "worker_failed"),
    "failed_retriable": ("PREEMPTED", "worker_failed"),
    "timed_out": ("PREEMPTED", "platform_termination"),
    "no_capacity": ("NO_CAPACITY", "queue_grace"),
    "throttled": ("NO_CAPACITY", "queue_grace"),  # or throttled_worker: see allowed_verdicts
    "crash_loop": ("STALLED", "unhealthy_worker"),
    "training_stall": ("STALLED", "stall"),
    "ttl_expired": ("LOST", "job_lost"),
}
_UNHEALTHY_LATE = (
    "the unhealthy timer starts at the first answered probe; a later one lets the queue "
    "grace (an earlier rule) end the watch first"
)
_RETRIABLE_UNREAD = (
    "the last forced heartbeat read met a fault: a non-transient one found nothing, or every "
    "try of a transient one failed, so `retriable` is unknown"
)
#: The other verdicts a fault on a route may lead a scenario to, and why that is no lie.
_RECORDS_FIRST = (
    "the worker records list the worker unhealthy from the first poll (D10): with the probe "
    "late or blind, their crash_loop limit passes first"
)
DEGRADED: dict[tuple[str, str], dict[tuple[str, str], str]] = {
    ("crash_loop", "health"): {
        ("NO_CAPACITY", "queue_grace"): _UNHEALTHY_LATE,
        CRASH_LOOP_BY_RECORDS: _RECORDS_FIRST,
    },
    ("crash_loop", "status"): {
        ("NO_CAPACITY", "queue_grace"): _UNHEALTHY_LATE,
        CRASH_LOOP_BY_RECORDS: _RECORDS_FIRST,
    },
    ("failed_retriable", "hub_resolve"): {("FAILED", "worker_failed"): _RETRIABLE_UNREAD},
    ("completed_error_retriable", "hub_resolve"): {
        ("FAILED", "completed_with_error"): _RETRIABLE_UNREAD
    },
}


def allowed_verdicts(scenario: str, requests: list[Any]) -> dict[tuple[str, str], str]:
    """The soak's oracle: every verdict a watch may reach, given what was injected, and why.

    - the scenario's own verdict, always;
    - a degraded verdict of `DEGRADED`, when a fault fired on its route (on the Hub: on its
      last request, the forced read's last try — a transient fault before it is retried);
    - `poll_error`, only when the last 8 (or more) status requests all met an injected
      fault: a poll fails only when every attempt of it does, and one good answer resets
      the count, so 8 failed polls in a row need at least 8 faulted requests in a row;
    - `lost`, only when the last status request was answered 404 (injected, or the
      simulator's own TTL and result retention);
    - `unauthorized`, only when the last status request was answered 401 or 403.
    """
    allowed = {SOAK[scenario]: "the scenario's verdict"}
    if scenario == "throttled":
        # Both timers start at the first queued poll; status faults shift the polls and the
        # probes differently, so either capacity rule may be the first to see its grace pass.
        allowed[("NO_CAPACITY", "throttled_worker")] = "the throttled grace passed first"
    hub = [r for r in requests if r.route == "hub_resolve"]
    for route in {r.route for r in requests if r.fault}:
        if route == "hub_resolve" and not hub[-1].fault:
            continue  # the last Hub read, the last try of the forced read, found the heartbeat
        allowed.update(DEGRADED.get((scenario, route), {}))
    status = [r for r in requests if r.route == "status"]
    failing = len(list(itertools.takewhile(lambda r: r.fault is not None, reversed(status))))
    if failing >= POLICY.max_poll_errors:
        allowed[("POLL_ERROR", "poll_errors")] = f"the last {failing} status requests were faulted"
    if status and status[-1].status == 404:
        allowed[("LOST", "job_lost")] = "the last status answer was a 404"
    if status and status[-1].status in (401, 403):
        allowed[("UNAUTHORIZED", "unauthorized")] = "the last status answer refused the key"
    return allowed


#: How many requests of a route a lifecycle makes, roughly: where a fault may start.
_REACH = {"status": 30, "health": 3, "hub_resolve": 8}


@st.composite
def fault_schedules(draw: st.DrawFn) -> list[tuple[str, str, int | None, int]]:
    """Up to 4 faults: (route, fault, times or None for ever, requests let through first)."""
    schedule = []
    for _ in range(draw(st.integers(0, 4))):
        route = draw(st.sampled_from(ROUTES))
        fault = draw(st.sampled_from(sorted(FAULTS)))
        times = draw(st.sampled_from([1, 1, 2, 3, 4, 6, 8, 12, 24, None]))
        if fault == "timeout":  # each one costs real time
            times = min(times or 3, 3)
        schedule.append((route, fault, times, draw(st.integers(0, _REACH[route]))))
    return schedule


@settings(
    max_examples=2 * settings.default.max_examples,
    suppress_health_check=[HealthCheck.too_slow],
    deadline=None,
)
@given(scenario=st.sampled_from(sorted(SOAK)), schedule=fault_schedules())
def test_soak_random_fault_schedules_raise_nothing_and_reach_no_false_verdict(
    scenario: str, schedule: list[tuple[str, str, int | None, int]]
) -> None:
    setup = Setup(scenario, POLICY, SOAK[scenario], SOAK[scenario], heartbeat=True)
    with (
        tempfile.TemporaryDirectory() as cache,
        Simulator(speed=0, api_keys=(KEY,), worker_quota=10_000) as sim,
    ):
        job = new_job(sim, setup, Path(cache))
        for route, fault, times, after in schedule:
            spec = dict(FAULTS[fault])
            sim.add_fault(route, times=times, after=after, **spec)
        result, events = watch(sim, job)  # raises nothing, whatever was injected
        assert sim.errors == [], sim.errors[0]
        requests = sim.requests
    got = (result.state, result.rule)
    allowed = allowed_verdicts(scenario, requests)
    assert got in allowed, f"{scenario}: false verdict {got} ({result.detail}); allowed: {allowed}"
    for route in sorted({r.route for r in requests if r.fault}) or ["no route"]:
        event(f"faults fired on {route}")
    kind = {"POLL_ERROR": "poll_error", "LOST": "lost", "UNAUTHORIZED": "unauthorized"}.get(
        got[0], "degraded"
    )
    event(f"verdict: {'expected' if got == SOAK[scenario] else kind}")
    assert verify(events).ok, verify(events)
    verdict = replay(events).verdict
    assert verdict is not None and (verdict.state, verdict.rule) == got
