"""The bill the records allow: every worker the log names with a recorded start is billed.

A crash-looping worker keeps its job IN_QUEUE and never takes it, yet RunPod bills it from
its start until it stops; the watch names it (`WorkerObserved` with `status="unhealthy"`,
read while the job waits). Two workers billed at once (a requeue: the first worker's bill
runs until the requeue is seen, the second worker started before that) are each billed.
The logs are built by hand from the event models (`tests/billing_logs.py`; times in
seconds after `T`, $36/h is a cent a second) and priced by hand; the crash loop is also
run on the bundled simulator, whose own worker records must agree with `flashfsm cost`,
and `flashfsm whatif --all` must price each job as `cost` does.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import JobHandle, RunpodClient, poll_job
from flashfsm.adapters.flash_deploy import DEFAULT_IDLE_TIMEOUT_S
from flashfsm.adapters.hub import hub_readers
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.demo import GPUS, PHASE
from flashfsm.events.models import (
    Concluded,
    EndpointDeleted,
    Event,
    HealthObserved,
    HubLocation,
    IdleSeen,
    JobCancelled,
    JobQueued,
    RunConcluded,
    StatusObserved,
    WorkerCounts,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.postmortem.ledger import (
    CAUSES,
    AttemptLedger,
    Cause,
    Ledger,
    group,
    store_ledgers,
)
from flashfsm.runs import Deployed, RunpodRunAdapters
from tests import billing_logs as B
from tests.test_billing_platform import SCENARIOS, check_attempt, write_store
from tests.test_docs_examples import supervise_example

T = B.T


# --- logs built by hand ---------------------------------------------------------------------


def _crash_looping(job: B.Job, *, until: float) -> B.Job:
    """Submitted at 10; the endpoint's only worker (`w-crash`) started at 12 and crash-loops:
    the job stays IN_QUEUE. The watch probes at 20, 120, 220 (each probe reads the
    endpoint's workers: unhealthy, started at 12) and polls every 10 s up to `until`, when
    it reads the worker's log and concludes STALLED (a crash loop)."""
    job.submit(10)
    for at in range(10, int(until) + 1, 10):
        job.queued(at)
        if at % 100 == 20 and at < until:
            job.add(HealthObserved, at, workers=WorkerCounts(unhealthy=1))
            job.add(
                WorkerObserved,
                at,
                worker_id="w-crash",
                gpu_type="NVIDIA L40S",
                started_at=T + 12,
                idle_timeout_s=5.0,
                status="unhealthy",
            )
    job.add(
        WorkerLogObserved,
        until,
        worker_id="w-crash",
        worker_status="unhealthy",
        lines=("ModuleNotFoundError: No module named 'flash_attn'",),
    )
    return job.add(
        Concluded,
        until,
        state="STALLED",
        ok=False,
        failure="stalled",
        rule="crash_loop",
        detail="worker crash-looping while IN_QUEUE",
    )


def crash_loop_run() -> dict[str, list[Event]]:
    """Attempt 0 crash-loops (its worker billed from 12; the run cancels the job and deletes
    the endpoint at the verdict, 320); attempt 1 succeeds as `billing_logs.retry`'s second
    attempt does, a fresh endpoint from 320."""
    run = B.run_stream("run-crash", ("L40S", B.CENT_A_SECOND))
    a0 = _crash_looping(B.Job("job-crash-a0", endpoint="ep-crash-0", job_id="j-crash-0"), until=320)
    B.attempt(run, a0, 0, 0, deployed=5, queued=10)
    B.ended(run, 320, 0, "stalled", "crash_loop")
    run.add(JobCancelled, 320, attempt=0, job_id="j-crash-0")
    run.add(EndpointDeleted, 320, endpoint_id="ep-crash-0", reason="retrying after stalled")
    a1 = B.Job("job-crash-a1", endpoint="ep-crash-1", job_id="j-crash-1")
    B.attempt(run, a1, 320, 1, deployed=325, queued=330)
    a1.submit(330).queued(330, probe=True).picked_up(340, "w-ok", started=332)
    a1.polls(350, 360).beat(370, "train", 0, 365).polls(370, 390)
    a1.add(StatusObserved, 400, **B.COMPLETED).verdict(400, "SUCCEEDED", "completed")
    B.ended(run, 400, 1, rule="completed")
    run.add(EndpointDeleted, 400, endpoint_id="ep-crash-1", reason="run succeeded")
    run.add(RunConcluded, 400, ok=True, attempts=2)
    return B.store(run, a0, a1)


def crash_loop_bare() -> dict[str, list[Event]]:
    """The same crash loop watched by plain `poll_job` (no run: nothing cancels the job or
    deletes its endpoint), concluded at 260; a sweeper's stream holds the store's newest
    event, at 1000."""
    job = _crash_looping(B.Job("job-crash-bare", endpoint="ep-cb", job_id="j-cb"), until=260)
    sweeper = B.Stream("sweeper")
    sweeper.add(IdleSeen, 1000, endpoint_id="ep-other", since=T + 1000)
    return B.store(job, sweeper)


def overlapping_requeue(second_started: float = 95) -> dict[str, list[Event]]:
    """`billing_logs.requeue` (the job requeued at 100, its first worker started at 20 and
    trained from 60; the second picks it up at 120 and trains from 160; completed at 200,
    the endpoint deleted at 201), its second worker started at `second_started`: before 100
    its bill overlaps the first worker's."""
    logs = B.requeue()
    events = logs["job-requeue"]
    [second] = [e for e in events if isinstance(e, WorkerObserved) and e.worker_id == "w-q2"]
    i = events.index(second)
    events[i] = second.model_copy(update={"started_at": T + second_started})
    return logs


def _without_worker_records(logs: dict[str, list[Event]]) -> dict[str, list[Event]]:
    """The logs as a watch without a worker reader writes them: no worker record at all."""
    drop = (WorkerObserved, WorkerLogObserved)
    out = {}
    for name, events in logs.items():
        kept = [e for e in events if not isinstance(e, drop)]
        out[name] = [e.model_copy(update={"seq": i}) for i, e in enumerate(kept)]
    return out


def _ledger(logs: dict[str, list[Event]], stream: str, price: float | None = None) -> Ledger:
    [led] = [led for led in store_ledgers(logs, price) if led.stream == stream]
    return led


def _billed(a: AttemptLedger) -> dict[str, float]:
    return {c.value: a.billed_seconds(c) for c in CAUSES if a.billed_seconds(c)}


def _unbilled(a: AttemptLedger) -> dict[str, float]:
    return {c.value: a.unbilled_seconds(c) for c in CAUSES if a.unbilled_seconds(c)}


def _workers(a: AttemptLedger) -> list[tuple[str | None, float | None, float, float, str]]:
    return [
        (
            w.worker_id,
            None if w.picked_up_at is None else w.picked_up_at - T,
            w.start - T,
            w.stop - T,
            w.stop_reason,
        )
        for w in a.workers
    ]


def check_tiling(a: AttemptLedger) -> None:
    """Each second of the attempt is in exactly one piece; the billed seconds are the
    workers' bills added up: the union of their intervals plus the overlaps."""
    at = a.start
    for p in a.pieces:
        assert p.start == at and p.end > p.start and p.workers == 1
        at = p.end
    assert at == a.end
    union = sum(end - start for start, end in a.billed_intervals)
    assert union == sum(p.seconds for p in a.pieces if p.billed)
    assert a.billed_s == pytest.approx(sum(w.seconds for w in a.workers))
    assert a.billed_s == pytest.approx(union + a.overlap_s)
    assert sum(a.billed_seconds(c) for c in CAUSES) == pytest.approx(a.billed_s)
    for p in a.overlaps:  # an overlap lies on billed time, beside a billed piece
        assert p.billed and p.workers >= 1
        assert any(s <= p.start and p.end <= e for s, e in a.billed_intervals)


# --- a crash loop ---------------------------------------------------------------------------


def test_a_crash_looping_worker_is_billed_from_its_recorded_start_to_its_stop() -> None:
    led = _ledger(crash_loop_run(), "run-crash")
    a0, a1 = led.attempts
    check_tiling(a0)
    # the unhealthy worker from its start (12) to the run's teardown at the verdict (320):
    # a stalled attempt's billed time from its last progress (the IN_QUEUE status at 10)
    assert _workers(a0) == [("w-crash", None, 12, 320, "teardown")]
    assert a0.workers[0].status == "unhealthy" and a0.workers[0].start_source == "platform"
    assert _billed(a0) == {"stall": 308}
    assert _unbilled(a0) == {"deploy": 10, "queue": 2}
    assert a0.billed_s == 308 and a0.money() == pytest.approx(3.08)
    assert a0.waste_money == pytest.approx(3.08) and a0.overlaps == ()
    assert a0.stopped_by == "teardown" and not a0.billing_open
    assert a0.idle_timeout_source == "recorded"
    # the second attempt is billed as before: worker 332-400
    assert _billed(a1) == {"cold_start": 38, "training": 30}
    assert led.money() == pytest.approx(3.08 + 0.68)


def test_the_same_crash_loop_without_worker_records_is_billed_as_before() -> None:
    led = _ledger(_without_worker_records(crash_loop_run()), "run-crash")
    a0, a1 = led.attempts
    assert a0.workers == () and a0.billed_s == 0 and a0.money() == 0
    assert _unbilled(a0) == {"deploy": 10, "queue": 310}
    assert a0.idle_timeout is None and a0.stopped_by is None
    # and the second attempt, without its worker read, from its pickup (340)
    assert _billed(a1) == {"cold_start": 30, "training": 30} and a1.started_at_pickup


def test_a_crash_loop_nobody_cancelled_is_an_open_bill() -> None:
    led = _ledger(crash_loop_bare(), "job-crash-bare", price=B.CENT_A_SECOND)
    [a] = led.attempts
    check_tiling(a)
    # no cancel, no teardown, no reap: the worker bills on past the verdict (260), up to
    # the store's newest event (1000)
    assert a.billing_open and a.open_since == T + 260 and a.end == T + 1000
    assert _workers(a) == [("w-crash", None, 12, 1000, "open")]
    assert _billed(a) == {"stall": 988} and a.money() == pytest.approx(9.88)
    assert a.idle_timeout_source == "platform"
    assert led.open_rate_per_hour == B.CENT_A_SECOND


def test_a_crash_looping_worker_beside_the_one_that_took_the_job_is_its_own_cold_start() -> None:
    # The endpoint listed w-crash (unhealthy, started at 12) while the job waited; then
    # another worker (started at 25) took the job at 30 and trained from 60 to its
    # completion at 100, the endpoint deleted at 100. Nothing recorded w-crash stopping:
    # it is billed to the attempt's stop, and its time beside the training is cold start,
    # not training.
    job = B.Job("job-beside", endpoint="ep-b", job_id="j-b")
    job.submit(10).queued(10).queued(20)
    job.add(HealthObserved, 20, workers=WorkerCounts(unhealthy=1))
    job.add(WorkerObserved, 20, worker_id="w-crash", started_at=T + 12, status="unhealthy")
    job.picked_up(30, "w-ok", started=25).polls(40, 50)
    job.beat(60, "train", 0, 55).polls(60, 90).add(StatusObserved, 100, **B.COMPLETED)
    job.add(Concluded, 100, state="SUCCEEDED", ok=True, rule="completed")
    run = B.run_stream("run-beside", ("L40S", B.CENT_A_SECOND))
    B.attempt(run, job, 0, 0, deployed=5, queued=10)
    B.ended(run, 100, 0, rule="completed")
    run.add(EndpointDeleted, 100, endpoint_id="ep-b", reason="run succeeded")
    [a] = _ledger(B.store(run, job), "run-beside").attempts
    check_tiling(a)
    assert _workers(a) == [
        ("w-ok", 30, 25, 100, "teardown"),
        ("w-crash", None, 12, 100, "teardown"),
    ]
    # w-crash alone 12-25 (cold start); from 25 both: cold start to the first training
    # heartbeat (60), then training for w-ok and cold start for w-crash beside it
    assert _billed(a) == {"cold_start": 48 + 35 + 40, "training": 40}
    assert [(p.cause, p.start - T, p.end - T, p.workers) for p in a.overlaps] == [
        (Cause.COLD_START, 25, 100, 1)
    ]
    assert a.billed_s == 88 + 75 and a.money() == pytest.approx(1.63)


# --- workers that overlap in a requeue --------------------------------------------------------


def test_two_workers_that_overlap_in_a_requeue_are_each_billed() -> None:
    [a] = _ledger(overlapping_requeue(95), "run-requeue").attempts
    check_tiling(a)
    # worker 1: 20 to the requeue seen at 100; worker 2 from its start (95): 95-100 bills both
    assert _workers(a) == [("w-q1", 30, 20, 100, "requeue"), ("w-q2", 120, 95, 201, "teardown")]
    assert list(a.billed_intervals) == [(T + 20, T + 201)]  # 181 s of time
    assert a.overlap_s == 5 and a.billed_s == 80 + 106
    # worker 1 trains from 60 to 100; beside it, worker 2's first 5 s are its cold start
    assert [(p.cause, p.start - T, p.end - T, p.workers) for p in a.overlaps] == [
        (Cause.COLD_START, 95, 100, 1)
    ]
    assert _billed(a) == {"cold_start": 40 + 60 + 5, "training": 80, "idle": 1}
    assert _unbilled(a) == {"deploy": 10, "queue": 10}
    assert a.seconds(Cause.COLD_START) == 100  # each second once: 105 billed worker-seconds
    assert a.money() == pytest.approx(1.86)


def test_workers_that_do_not_overlap_are_billed_as_before() -> None:
    [a] = _ledger(overlapping_requeue(105), "run-requeue").attempts  # billing_logs.requeue
    check_tiling(a)
    assert a.overlaps == () and a.overlap_s == 0
    assert _billed(a) == {"cold_start": 95, "training": 80, "idle": 1}
    assert a.billed_s == 176 == sum(end - start for start, end in a.billed_intervals)


@pytest.mark.parametrize(
    "scenario",
    [
        B.clean,
        B.walk,
        B.stall_cancelled,
        B.retry,
        B.cancel,
        B.lost,
        B.requeue,
        B.bare_failed,
        B.idle_reaped,
        B.v1_run,
        B.v1_bare,
    ],
)
def test_logs_whose_workers_never_overlap_bill_their_union(scenario: Any) -> None:
    for led in store_ledgers(scenario(), 36.0):
        for a in led.attempts:
            check_tiling(a)
            assert a.overlaps == ()
            assert a.billed_s == sum(end - start for start, end in a.billed_intervals)
            assert all(w.picked_up_at is not None for w in a.workers)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_hand_priced_scenarios_are_billed_as_before(name: str) -> None:
    # tests/test_billing_platform.py's bills, priced by hand before workers were each billed
    s = SCENARIOS[name]
    [led] = [led for led in store_ledgers(s.logs(), s.price) if led.stream == s.stream]
    for a, bill in zip(led.attempts, s.attempts, strict=True):
        check_attempt(a, bill)


def test_a_worker_listed_while_the_job_waited_and_then_taking_it_is_one_worker() -> None:
    # a slow start: the endpoint listed w-slow initializing (started at 12) while the job
    # waited; it took the job at 40. One bill, from its start; and the same when the read
    # after the pickup failed (the worker listed while the job waited is the one that took it)
    for read_after_pickup in (True, False):
        job = B.Job("job-slow", endpoint="ep-s", job_id="j-s")
        job.submit(10).queued(10)
        job.add(WorkerObserved, 10, worker_id="w-slow", started_at=T + 12, status="initializing")
        job.queued(20).queued(30).running(40)
        if read_after_pickup:
            job.add(WorkerObserved, 40, worker_id="w-slow", started_at=T + 12, status="running")
        else:
            job.add(WorkerObserved, 40, found=False, read_error="HTTP 502")
        job.polls(50, 60).beat(70, "train", 0, 65).polls(70, 90)
        job.add(StatusObserved, 100, **B.COMPLETED)
        job.add(Concluded, 100, state="SUCCEEDED", ok=True, rule="completed")
        [a] = _ledger(B.store(job), "job-slow", price=B.CENT_A_SECOND).attempts
        assert _workers(a) == [("w-slow", 40, 12, 105, "idle timeout")], read_after_pickup
        assert _billed(a) == {"cold_start": 58, "training": 30, "idle": 5}
        assert a.overlaps == () and not a.started_at_pickup


def test_a_worker_that_takes_the_job_again_after_a_requeue_is_not_billed_twice() -> None:
    # w-q1 loses the job at 100 and takes it again at 120 (the read names it, started at 20)
    logs = B.requeue()
    events = logs["job-requeue"]
    [second] = [e for e in events if isinstance(e, WorkerObserved) and e.worker_id == "w-q2"]
    events[events.index(second)] = second.model_copy(
        update={"worker_id": "w-q1", "started_at": T + 20}
    )
    [a] = _ledger(logs, "run-requeue").attempts
    check_tiling(a)
    assert _workers(a) == [("w-q1", 30, 20, 100, "requeue"), ("w-q1", 120, 100, 201, "teardown")]
    assert a.overlaps == () and a.billed_s == 181


# --- cost and whatif --------------------------------------------------------------------------


def _invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "250", "TZ": "UTC"})
    assert result.exit_code in (0, 10), result.output
    return result.output


def test_cost_prints_and_gives_the_crash_loop_and_the_overlaps(tmp_path: Path) -> None:
    url = write_store(tmp_path, {**crash_loop_run(), **overlapping_requeue(95)})
    text = _invoke("cost", "run-crash", "--store", url)
    assert "  attempt 0 on L40S at $36/h: STALLED (crash_loop)" in text
    assert "    billed 5 min 8 s $3.08: stall 5 min 8 s $3.08" in text
    assert "    unbilled: deploy 10 s, queue 2 s" in text
    data = json.loads(_invoke("cost", "--store", url, "--json"))
    attempts = {a["stream"]: a for led in data["ledgers"] for a in led["attempts"]}
    crash = attempts["job-crash-a0"]
    assert crash["billed_s"] == 308 and crash["money"] == pytest.approx(3.08)
    assert crash["workers"] == [
        {
            "worker_id": "w-crash",
            "picked_up_at": None,
            "start": T + 12,
            "stop": T + 320,
            "start_source": "platform",
            "stop_reason": "teardown",
            "status": "unhealthy",
        }
    ]
    requeue = attempts["job-requeue"]
    assert requeue["billed_s"] == 186 and requeue["causes"]["cold_start"]["billed_s"] == 105
    assert requeue["causes"]["cold_start"]["seconds"] == 100
    assert requeue["overlaps"] == [
        {"cause": "cold_start", "start": T + 95, "end": T + 100, "workers": 1}
    ]
    by_cause = {g["key"]: g for g in data["groups"]}
    assert by_cause["cold_start"]["billed_s"] == 105 + 38  # the requeue's and attempt 1's
    assert by_cause["cold_start"]["seconds"] == 100 + 38
    text = _invoke("cost", "run-requeue", "--store", url)
    assert "billed 3 min 6 s $1.86: cold start 1 min 45 s $1.05" in text
    assert "unbilled: deploy 10 s, queue 10 s" in text


def test_the_totals_count_every_workers_bill() -> None:
    ledgers = [_ledger(overlapping_requeue(95), "run-requeue")]
    by_cause = {g.key: g for g in group(ledgers, "cause")}
    assert by_cause["cold_start"].billed_s == 105 and by_cause["cold_start"].seconds == 100
    assert sum(g.money or 0.0 for g in by_cause.values()) == pytest.approx(1.86)


# --- on the simulator -------------------------------------------------------------------------

START = 1_700_000_000.0
HF_REPO = "my-org/runs"
PRICE = GPUS["L40S"].price_per_hour


@dataclass
class Sim:
    """A store of a crash-loop run and a bare crash-loop job on the simulator, and its record
    of every worker it started."""

    url: str
    workers: list[dict[str, Any]]
    endpoints: dict[str, str]  # job stream -> endpoint id


def _crash_then_success(sim: Simulator, client: RunpodClient, store: Any, scratch: str) -> None:
    """A run on the L40S whose attempt 0 crash-loops and whose attempt 1 succeeds."""
    scenarios = ("crash_loop", "success")

    def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
        name = attempt.started.endpoint_name
        scenario = scenarios[min(attempt.started.attempt, 1)]
        idle = DEFAULT_IDLE_TIMEOUT_S
        endpoint_id = sim.add_endpoint(name, scenario=scenario, hf_repo=HF_REPO, idleTimeout=idle)
        return Deployed(endpoint_id, name, idle_timeout_s=idle)

    adapters = RunpodRunAdapters(
        client,
        deploy,
        lambda run, attempt: {"hf_repo": HF_REPO, "phase": PHASE, "run_id": "crash", "seed": 0},
        lambda run, attempt: hub_readers(
            HubLocation(hf_repo=HF_REPO, phase=PHASE, run_id="crash", seed=0),
            endpoint=sim.url,
            clock=sim.clock.now,
            cache_dir=f"{scratch}/hf",
        ),
        budget_s=6 * 3600,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
    )
    supervise_example("crash", [GPUS["L40S"]], adapters, store, sim)


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    with tempfile.TemporaryDirectory() as scratch:
        url = f"jsonl:{scratch}/store"
        store = open_store(url)
        endpoints: dict[str, str] = {}
        with Simulator(clock=SimClock(speed=0, start=START)) as world, world.client() as client:
            _crash_then_success(world, client, store, scratch)
            endpoint_id = world.add_endpoint(
                "flash-bare-s0", scenario="crash_loop", hf_repo=HF_REPO, idleTimeout=5
            )
            submitted = world.clock.now()
            job_input = {"hf_repo": HF_REPO, "phase": PHASE, "run_id": "bare", "seed": 0}
            job_id = world.submit(endpoint_id, job_input)
            handle = JobHandle(
                endpoint_id, "flash-bare-s0", job_id, submitted_at=submitted, gpu_class="L40S"
            )
            poll_job(
                handle,
                client=client,
                clock=world.clock.now,
                sleep=world.clock.sleep,
                store=store,
                stream="job-bare",
            )
            workers = world.workers()
            endpoints["job-bare"] = endpoint_id
            for name in store.streams():
                for event in store.read(name):
                    if isinstance(event, JobQueued):
                        endpoints[event.job_stream] = event.endpoint_id
        store.close()
        yield Sim(url, workers, endpoints)


def _by_the_simulator(sim: Sim, stream: str, as_of: float) -> tuple[float, int]:
    """Each worker the simulator started for the job's endpoint, from its start to its stop
    (to `as_of` while it runs), added up; and how many never took the job."""
    total, never = 0.0, 0
    for w in sim.workers:
        if w["endpoint_id"] != sim.endpoints[stream]:
            continue
        stop = as_of if w["stopped_at"] is None else min(w["stopped_at"], as_of)
        total += max(0.0, stop - w["started_at"])
        never += w["picked_up_at"] is None
    return total, never


def _cost_json(sim: Sim, *args: str) -> dict[str, Any]:
    return json.loads(_invoke("cost", *args, "--store", sim.url, "--json"))


def test_the_simulators_crash_looping_worker_is_billed_as_the_platform_records_it(sim: Sim) -> None:
    [led] = _cost_json(sim, "run-crash")["ledgers"]
    crash, success = led["attempts"]
    expected, never = _by_the_simulator(sim, crash["stream"], led["as_of"])
    assert never == 1 and expected > 200  # the crash-looping worker never took the job
    assert crash["billed_s"] == pytest.approx(expected, abs=1e-6)
    assert crash["money"] == pytest.approx(expected * PRICE / 3600)
    [worker] = crash["workers"]
    assert worker["picked_up_at"] is None and worker["status"] == "unhealthy"
    assert crash["open_since"] is None  # the run cancelled the job and deleted the endpoint
    assert crash["causes"]["stall"]["billed_s"] == pytest.approx(expected)
    expected, _ = _by_the_simulator(sim, success["stream"], led["as_of"])
    assert success["billed_s"] == pytest.approx(expected, abs=1e-6)


def test_the_simulators_bare_crash_loop_bills_on_while_the_platform_runs_it(sim: Sim) -> None:
    [led] = _cost_json(sim, "job-bare", "--price", str(PRICE))["ledgers"]
    [a] = led["attempts"]
    alive = [w for w in sim.workers if w["endpoint_id"] == sim.endpoints["job-bare"]]
    assert [w["stopped_at"] for w in alive] == [None]  # the platform still runs it
    assert a["open_since"] == a["outcome"]["at"] and a["stopped_by"] == "open"
    expected, _ = _by_the_simulator(sim, "job-bare", led["as_of"])
    assert a["billed_s"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("change", ["unhealthy_grace_s=60", "unhealthy_grace_s=900"])
def test_whatif_prices_the_crash_loop_as_cost_does(sim: Sim, change: str) -> None:
    costs = {
        a["stream"]: a
        for led in _cost_json(sim, "--price", str(PRICE))["ledgers"]
        for a in led["attempts"]
        if a["stream"]
    }
    args = ["--store", sim.url, "--json", "--set", change, "--price", str(PRICE)]
    report = json.loads(_invoke("whatif", "--all", *args))
    crash_loops = {"job-bare", *(s for s, a in costs.items() if a["outcome"]["ok"] is False)}
    assert {c["stream"] for c in report["changes"]} == crash_loops  # both crash loops change
    for c in report["changes"]:
        recorded = costs[c["stream"]]
        assert c["money_before"] == pytest.approx(recorded["money"])
        assert c["billed_before_s"] == pytest.approx(recorded["billed_s"])
        assert recorded["billed_s"] > 200  # the crash-looping worker's bill
        if c["delta_s"] is None:  # undecided when the observations end: as recorded, or more
            assert c["saved"] == 0 and c["money_after_at_least"]
        elif c["stream"] == "job-bare":  # nothing cancels it: it bills on as recorded
            assert c["saved"] == 0
        elif c["delta_s"] > 0:  # judged later, the run tears down later: it spends more
            assert c["saved"] < 0
        else:  # judged sooner, torn down sooner: the crash-looping worker costs less
            assert c["saved"] > 0
    if change == "unhealthy_grace_s=900":  # only waits longer: it never saves
        assert report["metrics"]["saved"] <= 0


def test_the_picture_s_cost_strip_counts_the_second_worker_in_its_tip() -> None:
    from flashfsm import render

    logs = overlapping_requeue(95)
    pic = render.picture(logs["run-requeue"], logs.__getitem__, price_per_hour=36.0)
    drawn = render.svg(pic)
    # The 5 s two workers bill at once are in the tip of the piece they lie on, and its
    # money is both workers' ($0.01 a second at $36/h).
    assert "(+5 s of a second worker)" in drawn
