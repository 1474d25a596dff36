"""The asyncio supervisor: 1,000 concurrent simulated jobs to their verdicts in one process."""

from __future__ import annotations

import asyncio
import collections
import random

import pytest

from flashfsm import GracePolicy, JobHandle, MemoryStore, replay, verify
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.events.models import Concluded
from flashfsm.supervisor import GroupCommitter, JobSpec, Supervisor, TokenBucket
from tests.sim_support import async_client

SPEED = 10.0  # simulated seconds per real second
POLICY = GracePolicy(queue_grace_s=150, unhealthy_grace_s=30, throttled_grace_s=60)
#: Worker-health scenarios get a queue grace no load-induced lag can reach first.
HEALTH_POLICY = POLICY.model_copy(update={"queue_grace_s": 100_000})
#: scenario -> (state, failure, rule) with POLICY and no Hub readers
EXPECTED = {
    "success": ("SUCCEEDED", None, "completed"),
    "failed": ("FAILED", "job_failed", "worker_failed"),
    "no_capacity": ("NO_CAPACITY", "no_capacity", "queue_grace"),
    "crash_loop": ("STALLED", "stalled", "unhealthy_worker"),
    "timed_out": ("PREEMPTED", "job_preempted", "platform_termination"),
    "completed_no_output": ("FAILED", "job_failed", "completed_with_error"),
    "throttled": ("NO_CAPACITY", "no_capacity", "throttled_worker"),
    "completed_error": ("FAILED", "job_failed", "completed_with_error"),
}


def _fleet(sim: Simulator, jobs: int, *, per_endpoint: int = 50) -> list[tuple[str, JobSpec]]:
    scenarios = sorted(EXPECTED)
    fleet = []
    endpoints: dict[str, list[str]] = collections.defaultdict(list)
    for n in range(jobs):
        scenario = scenarios[n % len(scenarios)]
        pool = endpoints[scenario]
        if len(pool) <= (n // len(scenarios)) // per_endpoint:  # this scenario's next endpoint
            pool.append(
                sim.add_endpoint(
                    f"flash-fleet-{scenario}-{len(pool)}",
                    check_quota=False,
                    workers_max=per_endpoint,  # (its jobs run at once, none queued)
                )
            )
        endpoint_id = pool[-1]
        job_id = sim.submit(endpoint_id, {"scenario": scenario})
        handle = JobHandle(endpoint_id, f"flash-fleet-{scenario}", job_id)
        policy = HEALTH_POLICY if scenario in ("crash_loop", "throttled") else POLICY
        fleet.append((scenario, JobSpec(handle, stream=f"job-{n}", interval_s=20.0, policy=policy)))
    return fleet


def test_one_supervisor_watches_1000_concurrent_jobs_to_the_right_verdicts(tmp_path):
    store = SqliteStore(tmp_path / "fleet.db")
    with Simulator(speed=SPEED, worker_quota=100_000) as sim:
        fleet = _fleet(sim, 1000)

        async def main():
            client = async_client(sim)
            try:
                supervisor = Supervisor(
                    store,
                    client,
                    clock=sim.clock.now,
                    sleep=lambda s: asyncio.sleep(s / SPEED),
                    rng=random.Random(7),
                )
                results = await supervisor.run(spec for _, spec in fleet)
                return results, supervisor
            finally:
                await client.aclose()

        results, supervisor = asyncio.run(main())
    assert len(results) == 1000
    wrong = []
    for n, (scenario, spec) in enumerate(fleet):
        result = results[spec.stream]
        assert not isinstance(result, BaseException), f"job {n} ({scenario}) raised {result!r}"
        got = (result.state, result.failure, result.rule)
        if got != EXPECTED[scenario]:
            wrong.append((n, scenario, got))
    assert wrong == []
    # Group commit: far fewer transactions than events.
    assert supervisor.committer.events_written > 5 * supervisor.committer.commits
    # Every log replays to its verdict and agrees with today's rules.
    for _, spec in fleet[::25]:
        events = store.read(spec.stream)
        assert isinstance(events[-1], Concluded)
        assert replay(events).verdict == events[-1]
        assert verify(events).ok
    store.close()


def test_a_stopped_supervisor_records_nothing_false_and_every_watch_resumes(tmp_path):
    store = SqliteStore(tmp_path / "stop.db")
    with Simulator(speed=SPEED, worker_quota=100_000) as sim:
        fleet = _fleet(sim, 40)

        async def first_run():
            client = async_client(sim)
            supervisor = Supervisor(
                store, client, clock=sim.clock.now, sleep=lambda s: asyncio.sleep(s / SPEED)
            )
            task = asyncio.create_task(supervisor.run(spec for _, spec in fleet))  # noqa: RUF006
            await asyncio.sleep(1.5)  # 15 simulated seconds: every job is mid-watch
            supervisor.stop()
            results = await task
            await client.aclose()
            return results

        interrupted = asyncio.run(first_run())
        assert all(isinstance(r, asyncio.CancelledError) for r in interrupted.values())
        for _, spec in fleet:
            events = store.read(spec.stream)
            assert events and not any(isinstance(e, Concluded) for e in events)
            assert verify(events).ok  # nothing recorded that the rules would not have

        async def second_run():
            client = async_client(sim)
            supervisor = Supervisor(
                store, client, clock=sim.clock.now, sleep=lambda s: asyncio.sleep(s / SPEED)
            )
            results = await supervisor.run(spec for _, spec in fleet)
            await client.aclose()
            return results

        resumed = asyncio.run(second_run())
    for scenario, spec in fleet:
        result = resumed[spec.stream]
        assert (result.state, result.failure, result.rule) == EXPECTED[scenario]
        events = store.read(spec.stream)
        assert sum(e.kind == "WatchStarted" and e.reattach for e in events) == 1
        assert verify(events).ok
    store.close()


def test_the_token_bucket_keeps_calls_under_the_rate():
    async def main():
        bucket = TokenBucket(rate=200.0, burst=10)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(60):
            await bucket.acquire()
        return loop.time() - start

    elapsed = asyncio.run(main())
    assert elapsed >= (60 - 10) / 200.0 * 0.9  # the burst, then 200 per second


def test_the_group_committer_batches_appends_and_reports_each_batch_outcome():
    from tests.store_support import make_events

    store = MemoryStore()
    store.append("taken", make_events("taken", 0, 1), 0)

    async def main():
        committer = GroupCommitter(store, window_s=0.01)
        committer.start()
        good = [committer.append(f"s{i}", make_events(f"s{i}", 0, 2), 0) for i in range(50)]
        stale = committer.append("taken", make_events("taken", 0, 1, tag="x"), 0)
        outcomes = await asyncio.gather(*good, stale, return_exceptions=True)
        await committer.close()
        return outcomes, committer

    outcomes, committer = asyncio.run(main())
    assert outcomes[:50] == [None] * 50
    assert type(outcomes[50]).__name__ == "ConcurrencyError"
    assert committer.commits <= 3 and committer.events_written == 100


@pytest.mark.parametrize("scenario", ["success", "crash_loop"])
def test_the_supervisor_and_poll_job_reach_the_same_verdict(scenario):
    from flashfsm import RunpodClient, poll_job

    with Simulator(speed=0) as sim:
        endpoint = sim.add_endpoint(f"flash-same-{scenario}", check_quota=False)
        job_a = sim.submit(endpoint, {"scenario": scenario})
        env = sim.env()
        sync = RunpodClient(
            sim.accounts[0].key,
            endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
            api_base_url=env["RUNPOD_API_BASE_URL"],
        )
        with sync:
            expected = poll_job(
                JobHandle(endpoint, "x", job_a),
                client=sync,
                clock=sim.clock.now,
                sleep=sim.clock.sleep,
                **POLICY.model_dump(
                    include={"queue_grace_s", "unhealthy_grace_s", "throttled_grace_s"}
                ),
            )
        endpoint_b = sim.add_endpoint(f"flash-same-b-{scenario}", check_quota=False)
        job_b = sim.submit(endpoint_b, {"scenario": scenario})

        async def main():
            client = async_client(sim)

            async def virtual_sleep(seconds: float) -> None:
                sim.clock.advance(seconds)

            supervisor = Supervisor(
                MemoryStore(), client, clock=sim.clock.now, sleep=virtual_sleep, jitter=0
            )
            result = await supervisor.watch(
                JobSpec(JobHandle(endpoint_b, "y", job_b), policy=POLICY)
            )
            await client.aclose()
            return result

        got = asyncio.run(main())
    assert (got.state, got.failure, got.rule) == (expected.state, expected.failure, expected.rule)
