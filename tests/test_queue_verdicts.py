"""Issue 40: the queue verdicts told apart by the platform's worker records.

A watch whose client reads the endpoint's workers (`has_worker_reader`) reads them while
the job is IN_QUEUE too, at the probe's pace. What it finds tells the waits apart: no
worker listed at all is a capacity gap (`queue_grace`, `no_capacity`: the walk moves on);
a worker listed starting means capacity was found (`slow_start`, past the start grace, not
held against the GPU class); a worker listed unhealthy while /health shows it restarting
is a crash loop that looks like a queue (`crash_loop`, `stalled`); TIMED_OUT before any
pickup with no worker listed is the platform's capacity answer (`expired_in_queue`). A
watch without worker records judges as the reference does, and so does the policy
`queue_by_workers=False` with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from flashfsm import JobHandle, MemoryStore, poll_job
from flashfsm.events.models import Concluded, Event, WorkerObserved
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.job import verify
from flashfsm.fsm.rules import STARTED_STATES, UNHEALTHY_STATE
from flashfsm.reads import has_worker_reader
from flashfsm.shell import Readers, SyncIO, drive_watch
from flashfsm.watch import WatchSpec, watch_steps
from tests.conftest import VirtualClock

T0 = 1_700_000_000.0
INTERVAL = 10.0
#: Small graces, so a short script reaches each of them (probe every 30 s).
POLICY = GracePolicy(
    queue_grace_s=120.0,
    throttled_grace_s=120.0,
    unhealthy_grace_s=60.0,
    start_grace_s=400.0,
    probe_every_s=30.0,
    setup_grace_s=3000.0,
)
#: The rules that judge a wait by the worker records (they never fire without them).
RECORD_RULES = {"crash_loop", "slow_start", "expired_in_queue"}


@dataclass(frozen=True)
class Phase:
    """From `start` seconds after submission on: the job's status, what /health counts
    and the state the endpoint's worker list gives its worker (None: lists no worker)."""

    start: float
    status: str = "IN_QUEUE"
    health: tuple[tuple[str, int], ...] = ()
    listed: str | None = None


class Platform:
    """RunPod, scripted by time: each answer is the phase in force at the call's time."""

    def __init__(self, clock: VirtualClock, phases: Sequence[Phase]) -> None:
        self.clock, self.phases = clock, sorted(phases, key=lambda p: p.start)
        self.calls: list[str] = []

    def _now(self) -> Phase:
        elapsed = self.clock.now - T0
        return [p for p in self.phases if p.start <= elapsed][-1]

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.calls.append("status")
        phase = self._now()
        answer: dict[str, Any] = {"id": job_id, "status": phase.status}
        if phase.status == "IN_PROGRESS":
            answer["workerId"] = "w-1"
        if phase.status == "COMPLETED":
            answer["output"] = {"loss": 0.1}
        return answer

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        self.calls.append("health")
        return {"workers": dict(self._now().health), "jobs": {}}

    def endpoint_workers(self, endpoint_id: str) -> dict[str, Any]:
        self.calls.append("workers")
        listed = self._now().listed
        if listed is None:
            return {"workers": []}
        started = datetime.fromtimestamp(T0 + 5, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"workers": [{"id": "w-1", "status": listed, "startedAt": started}]}

    def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        return {"id": endpoint_id, "idleTimeout": 5}

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int = 100) -> dict[str, Any]:
        return {"lines": [f"{worker_id}: starting"], "truncated": False}


class PlainPlatform:
    """The same platform through a client without the worker-record methods."""

    def __init__(self, platform: Platform) -> None:
        self.job_status = platform.job_status
        self.endpoint_health = platform.endpoint_health


def watch(
    phases: Sequence[Phase], *, records: bool = True, policy: GracePolicy = POLICY
) -> list[Event]:
    """The job's whole log, watched to its verdict (with or without worker records)."""
    clock, store = VirtualClock(T0), MemoryStore()
    platform = Platform(clock, phases)
    client: Any = platform if records else PlainPlatform(platform)
    handle = JobHandle("ep-1", "flash-x", "job-1", submitted_at=T0)
    # (what `poll_job` does, with a whole policy: the probe pace and the start grace too)
    spec = WatchSpec.of(handle, policy, INTERVAL, worker=has_worker_reader(client))
    io = SyncIO(store, client, handle, Readers(), clock, clock.sleep, None)
    drive_watch(watch_steps(spec, lambda line: None), io)
    log = store.read("job-job-1")
    assert verify(log).ok, str(verify(log))
    return log


def verdict(log: list[Event]) -> Concluded:
    last = log[-1]
    assert isinstance(last, Concluded), f"no verdict: the log ends with {last.kind}"
    return last


def records_in(log: list[Event]) -> list[WorkerObserved]:
    return [e for e in log if isinstance(e, WorkerObserved)]


# --- the named cases -------------------------------------------------------------------


NO_WORKER = [Phase(0)]
SLOW_PULL = [
    Phase(0, health=(("initializing", 1),), listed="initializing"),
    Phase(300, status="IN_PROGRESS", health=(("running", 1),), listed="running"),
    Phase(400, status="COMPLETED", health=(("idle", 1),), listed="idle"),
]
ENDLESS_PULL = [Phase(0, health=(("initializing", 1),), listed="initializing")]
# A crash loop that looks like a queue: /health shows the worker restarting (initializing),
# which keeps the probe's unhealthy rule from arming; the list shows it unhealthy between.
CRASH_LOOP = [
    Phase(t, health=(("initializing", 1),), listed="unhealthy" if (t // 30) % 2 else "initializing")
    for t in range(0, 3600, 30)
]
TIMED_OUT_IN_QUEUE = [Phase(0), Phase(100, status="TIMED_OUT")]


def test_no_worker_listed_is_a_capacity_gap_and_names_the_record() -> None:
    log = watch(NO_WORKER)
    v = verdict(log)
    assert (v.rule, v.state, v.failure) == ("queue_grace", "NO_CAPACITY", "no_capacity")
    by_seq = {e.seq: e for e in log}
    named = [by_seq[seq] for seq in v.evidence if isinstance(by_seq[seq], WorkerObserved)]
    assert named and all(not r.found for r in named)
    assert v.at == verdict(watch(NO_WORKER, records=False)).at  # the reference's time


def test_a_slow_image_pull_is_waited_for_past_the_queue_grace() -> None:
    # The worker initializes for 300 s, longer than the 120 s queue grace: the reference
    # calls that no capacity; the records show capacity was found, and the job completes.
    assert verdict(watch(SLOW_PULL, records=False)).rule == "queue_grace"
    v = verdict(watch(SLOW_PULL))
    assert (v.rule, v.state) == ("completed", "SUCCEEDED")


def test_a_start_past_the_start_grace_is_a_slow_start_resting_on_the_record() -> None:
    log = watch(ENDLESS_PULL)
    v = verdict(log)
    assert (v.rule, v.state, v.failure) == ("slow_start", "SLOW_START", "slow_start")
    first = records_in(log)[0]
    assert first.status == "initializing" and v.evidence[0] == first.seq
    assert v.at - first.at > POLICY.start_grace_s
    assert "start grace 400s" in v.detail


def test_a_crash_loop_that_looks_like_a_queue_is_a_crash_loop() -> None:
    plain = verdict(watch(CRASH_LOOP, records=False))
    assert (plain.rule, plain.failure) == ("queue_grace", "no_capacity")  # the reference
    log = watch(CRASH_LOOP)
    v = verdict(log)
    assert (v.rule, v.state, v.failure) == ("crash_loop", "STALLED", "stalled")
    crashing = next(r for r in records_in(log) if r.status == UNHEALTHY_STATE)
    assert v.evidence[0] == crashing.seq and crashing.started_at == T0 + 5
    assert v.at < plain.at + POLICY.unhealthy_grace_s + 60


def test_timed_out_before_pickup_is_the_platforms_capacity_answer() -> None:
    plain = verdict(watch(TIMED_OUT_IN_QUEUE, records=False))
    assert (plain.rule, plain.failure) == ("platform_termination", "job_preempted")
    log = watch(TIMED_OUT_IN_QUEUE)
    v = verdict(log)
    assert (v.rule, v.state, v.failure) == ("expired_in_queue", "NO_CAPACITY", "no_capacity")
    assert any(isinstance(e, WorkerObserved) and e.seq in v.evidence for e in log)
    assert v.at == plain.at


def test_a_job_timed_out_after_a_pickup_stays_a_platform_termination() -> None:
    phases = [Phase(0), Phase(40, status="IN_PROGRESS", listed="running"), Phase(50)]
    phases.append(Phase(100, status="TIMED_OUT"))
    assert verdict(watch(phases)).rule == "platform_termination"


def test_queue_by_workers_false_judges_as_the_reference_with_records() -> None:
    reference = GracePolicy(**{**POLICY.model_dump(), "queue_by_workers": False})
    for phases in (SLOW_PULL, ENDLESS_PULL, CRASH_LOOP, TIMED_OUT_IN_QUEUE, NO_WORKER):
        a = verdict(watch(phases, policy=reference))
        b = verdict(watch(phases, records=False))
        assert (a.rule, a.state, a.at) == (b.rule, b.state, b.at)


# --- properties --------------------------------------------------------------------------

LISTED = st.sampled_from([None, "initializing", "running", "idle", "throttled", "unhealthy"])
HEALTH = st.sampled_from(
    [(), (("initializing", 1),), (("throttled", 1),), (("unhealthy", 1),), (("running", 1),)]
)


@st.composite
def queued_lives(draw: st.DrawFn) -> list[Phase]:
    """A job's wait in the queue, phase by phase, ending queued forever, picked up and
    completed, or TIMED_OUT in the queue."""
    starts = sorted(set(draw(st.lists(st.integers(1, 60), max_size=5))))
    phases = [Phase(0, health=draw(HEALTH), listed=draw(LISTED))]
    phases += [Phase(s * 10.0, health=draw(HEALTH), listed=draw(LISTED)) for s in starts]
    end = draw(st.sampled_from(["queued", "completed", "timed_out"]))
    last = (max(starts) if starts else 0) * 10.0 + draw(st.integers(1, 30)) * 10.0
    if end == "completed":
        phases.append(Phase(last, status="IN_PROGRESS", health=(("running", 1),), listed="running"))
        phases.append(Phase(last + 50, status="COMPLETED"))
    elif end == "timed_out":
        phases.append(Phase(last, status="TIMED_OUT", listed=draw(LISTED)))
    return phases


@given(queued_lives())
def test_without_worker_records_every_queue_verdict_is_the_reference_one(
    phases: list[Phase],
) -> None:
    # The same answers: the records only ever change a verdict through a rule that reads
    # them; every other verdict, its rule and its time are the record-less watch's.
    plain, read = verdict(watch(phases, records=False)), verdict(watch(phases))
    assert plain.rule not in RECORD_RULES
    if read.rule in RECORD_RULES or plain.rule == "queue_grace":
        return  # (a queue grace may have given way to a record rule or a longer wait)
    assert (read.rule, read.state, read.at) == (plain.rule, plain.state, plain.at)


@given(queued_lives())
def test_each_queue_verdict_evidence_holds_the_worker_records_it_names(
    phases: list[Phase],
) -> None:
    log = watch(phases)
    v = verdict(log)
    by_seq = {e.seq: e for e in log}
    named = [by_seq[seq] for seq in v.evidence if isinstance(by_seq[seq], WorkerObserved)]
    if v.rule == "crash_loop":
        assert named and named[0].status == UNHEALTHY_STATE
    elif v.rule == "slow_start":
        assert named and named[0].status in STARTED_STATES
        assert v.at - named[0].at > POLICY.start_grace_s
    elif v.rule in ("queue_grace", "expired_in_queue") and records_in(log):
        # The last record read in the wait is named, and it lists nobody starting.
        assert named and all(r.status not in STARTED_STATES for r in named)
    for r in named:
        assert f"seq {r.seq}" in v.detail or v.rule in ("crash_loop", "slow_start")


# --- the walk ------------------------------------------------------------------------------


def test_the_walk_comes_back_to_a_class_that_started_slowly_and_leaves_one_without_capacity():
    from tests.test_run import cand, run

    candidates = [cand("pricey", 2.0), cand("cheap", 1.0)]
    _, slow, _, _, _ = run(candidates, {0: "slow_start"})
    assert [a.gpu_class for a in slow] == ["cheap", "cheap"]  # capacity was found there
    assert [a.on_last_gpu for a in slow] == [False, False]  # "pricey" is still untried
    _, gap, _, _, _ = run(candidates, {0: "no_capacity"})
    assert [a.gpu_class for a in gap] == ["cheap", "pricey"]


def test_a_slow_start_still_spends_the_retry_budget():
    from tests.test_run import cand, run

    result, attempts, _, _, _ = run(
        [cand("only", 1.0)], {n: "slow_start" for n in range(5)}, max_retries=2
    )
    assert len(attempts) == 3 and not result.ok and result.failure == "slow_start"


# --- whole runs on the bundled simulator ------------------------------------------------------


def test_on_the_simulator_a_slow_start_is_kept_and_a_capacity_gap_walked_away_from(
    tmp_path: Any,
) -> None:
    from flashfsm.adapters.stores import open_store
    from flashfsm.demo import DemoRun, run_demo

    runs = (
        DemoRun("pull", "a 20 GB image", ("RTX4090", "L40S"), ("slow_image_pull", "success")),
        DemoRun("gap", "no capacity", ("RTX4090", "L40S"), ("no_capacity", "success")),
        DemoRun("loop", "a quiet crash loop", ("L40S",), ("crash_loop_queue", "success")),
    )
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    pull, gap, loop = run_demo(url, say=lambda line: None, runs=runs, tag="be")
    # The image pull outlasts the 300 s queue grace; the records show capacity was found,
    # so the job is kept and completes on the class it found, with no second cold start.
    assert pull.ok and pull.attempts == 1
    # No worker at all: a capacity gap, walked away from to the next class.
    assert gap.ok and gap.attempts == 2
    # The crash loop is retried on a fresh endpoint, as a crash loop, not a capacity gap.
    assert loop.ok and loop.attempts == 2
    store = open_store(url, read_only=True)
    try:
        rules = {
            name: store.read(f"job-demo-be-{name}-s{seed}-a0")[-1].rule
            for seed, name in enumerate(("pull", "gap", "loop"))
        }
    finally:
        store.close()
    assert rules == {"pull": "completed", "gap": "queue_grace", "loop": "crash_loop"}
    # `whatif` between the reference's rule and the records' prices the distinction, signed
    # as `cost` is: the old rule calls the pull no capacity 590 s earlier and throws away
    # the money the job had spent (its cold start, the pull) with its success.
    import json

    from typer.testing import CliRunner

    from flashfsm.cli import app

    args = ["whatif", "--all", "--store", url, "--set", "queue_by_workers=false", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    [lost] = [c for c in data["changes"] if c["stream"] == "job-demo-be-pull-s0-a0"]
    assert (lost["from"], lost["to"]) == ("SUCCEEDED", "NO_CAPACITY (queue_grace)")
    assert lost["delta_s"] == -590.0 and lost["wasted"] > 0
    assert data["metrics"]["success_lost"] == 1
    # ...and the lost success takes a new attempt, which pays the pull again: the cold start
    # the records save, named in seconds and money.
    assert data["metrics"]["cold_start_again_s"] >= 600
    assert data["metrics"]["cold_start_again"] > 0
    text = CliRunner().invoke(app, args[:-1], env={"COLUMNS": "200"}).output
    assert "each lost success takes a new attempt, which pays its cold start again" in text


def test_capacity_memory_counts_a_slow_start_as_capacity_found_not_a_starved_class() -> None:
    from flashfsm.fsm.capacity import CapacityPolicy, job_wait

    policy = CapacityPolicy()
    pull, plain = watch(SLOW_PULL), watch(SLOW_PULL, records=False)
    found = job_wait("runpod", "L40S", pull)
    assert found is not None and found.picked_up and found.waited_s < POLICY.queue_grace_s
    # without the records the same wait is a capacity gap, as the reference judged it
    reference = job_wait("runpod", "L40S", plain)
    assert reference is not None and reference.no_capacity and not reference.picked_up
    gap = job_wait("runpod", "L40S", watch(NO_WORKER))  # no worker listed: still starved
    assert gap is not None and gap.no_capacity and not gap.picked_up
    assert found.waited_s < policy.starve_after_s and not found.no_capacity


def test_a_watch_killed_before_its_first_record_reads_one_before_a_queue_verdict() -> None:
    """One job, one verdict: a watch killed after its first probe and before that poll's
    worker record (the reattach drops the stale poll's reads) still reads a record before
    the queue grace may judge, so it reaches the unbroken watch's verdict (CI's fleet test
    found a crash loop called no_capacity after such a takeover)."""
    from flashfsm.adapters.simulator import Simulator
    from flashfsm.events.models import HealthObserved

    class Killed(Exception):
        pass

    class KilledAfterTheProbe(MemoryStore):
        armed = True

        def append(self, stream: str, events: Any, expected_seq: int, **kw: Any) -> Any:
            result = super().append(stream, events, expected_seq, **kw)
            if self.armed and any(isinstance(e, HealthObserved) for e in events):
                self.armed = False
                raise Killed
            return result

    graces = {"queue_grace_s": 20.0, "unhealthy_grace_s": 20.0, "throttled_grace_s": 20.0}
    verdicts = []
    for kill in (False, True):
        with Simulator(speed=0) as sim, sim.client() as client:
            endpoint, t0 = sim.add_endpoint("flash-q"), sim.clock.now()
            handle = JobHandle(
                endpoint,
                "flash-q",
                sim.submit(endpoint, {"scenario": "crash_loop"}),
                submitted_at=t0,
            )
            store = KilledAfterTheProbe() if kill else MemoryStore()
            run = dict(
                client=client,
                interval_s=2.0,
                clock=sim.clock.now,
                sleep=sim.clock.sleep,
                store=store,
                stream="j",
                **graces,
            )
            try:
                poll_job(handle, **run)
            except Killed:
                sim.clock.sleep(5.0)
                poll_job(handle, **run)
            log = store.read("j")
            assert verify(log).ok, str(verify(log))
            verdicts.append((verdict(log).state, verdict(log).rule))
    assert verdicts[1] == verdicts[0] and verdicts[0][0] == "STALLED"
