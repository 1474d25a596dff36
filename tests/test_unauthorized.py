"""D6: a 401 or 403 from the status route ends the watch `unauthorized` at once, never retried.

The reference counted a refused key as one more poll error: eight of them made a
`poll_error`, which orchestrators retry, so a revoked key resubmitted the job forever. Here
the first refusal concludes UNAUTHORIZED / `unauthorized`; neither `supervise_run` nor the
`Supervisor` tries again. The acceptance test runs a whole `supervise_run` against the
simulator, whose account key is revoked mid-job.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flashfsm import (
    Candidate,
    JobHandle,
    MemoryStore,
    RunpodApiError,
    poll_job,
    verify,
)
from flashfsm.adapters.simulator import Simulator, key_revoked
from flashfsm.cli.common import EXIT_CODES, exit_for
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Concluded,
    JobCancelled,
    StatusFetchFailed,
)
from flashfsm.fsm.run import RETRIABLE_FAILURES
from flashfsm.postmortem.explain import explain, why_not_report
from flashfsm.runs import Deployed, RunpodRunAdapters, supervise_run
from flashfsm.supervisor import JobSpec, Supervisor
from tests.conftest import ScriptedClient, VirtualClock
from tests.test_run import Clock as RunClock
from tests.test_run import Script

RUNNING = {"status": "IN_PROGRESS"}
STREAM = "job-auth"


def refused(code: int) -> RunpodApiError:
    return RunpodApiError(f"RunPod status: HTTP {code}: key refused", status_code=code)


def watch(clock: VirtualClock, answers: list[Any], then: Any) -> tuple[Any, list[Any], Any]:
    """`poll_job` on a client answering `answers` by fetch, then `then` forever."""
    client = ScriptedClient(clock, status=lambda t, i: answers[i] if i < len(answers) else then)
    store = MemoryStore()
    result = poll_job(
        JobHandle("ep-1", "trainer", "job-1", submitted_at=clock.now),
        client=client,
        clock=clock,
        sleep=clock.sleep,
        store=store,
        stream=STREAM,
    )
    return result, store.read(STREAM), client


# --- the rule, through the real watch ---------------------------------------------------------


@pytest.mark.parametrize("code", [401, 403])
def test_the_first_401_or_403_on_status_concludes_unauthorized_at_once(
    clock: VirtualClock, code: int
) -> None:
    result, events, client = watch(clock, [RUNNING, RUNNING], refused(code))
    assert (result.ok, result.state, result.failure, result.rule) == (
        False,
        "UNAUTHORIZED",
        "unauthorized",
        "unauthorized",
    )
    assert len(client.status_calls) == 3 and clock.elapsed == 20  # no backoff, no 2nd try
    assert f"HTTP {code}" in (result.detail or "") and "refused" in (result.detail or "")
    verdict = events[-1]
    assert isinstance(verdict, Concluded) and verdict.failure == FailureKind.UNAUTHORIZED
    failed = [e for e in events if isinstance(e, StatusFetchFailed)]
    assert [e.http_status for e in failed] == [code] and verdict.evidence == (failed[0].seq,)
    assert verify(events).ok
    e = explain(events)
    assert (e.rule, e.step) == ("unauthorized", "D6") and f"HTTP {code}" in e.because


def test_a_refusal_after_seven_server_errors_is_unauthorized_not_a_poll_error(
    clock: VirtualClock,
) -> None:
    """The 8th consecutive error is a refusal: both rules could fire, and D6 comes first."""
    flaky = [RunpodApiError("down", status_code=503)] * 7
    result, events, client = watch(clock, flaky, refused(401))
    assert (result.failure, result.rule) == ("unauthorized", "unauthorized")
    failed = [e.http_status for e in events if isinstance(e, StatusFetchFailed)]
    assert failed == [503] * 7 + [401] and len(client.status_calls) == 8
    assert verify(events).ok


@pytest.mark.parametrize("code", [400, 429, 500])
def test_other_status_errors_are_still_poll_errors_after_eight(
    clock: VirtualClock, code: int
) -> None:
    result, events, client = watch(clock, [], RunpodApiError("nope", status_code=code))
    assert (result.failure, result.rule) == ("poll_error", "poll_errors")
    assert len(client.status_calls) == 8
    assert why_not_report(events, "unauthorized").fired is False


def test_unauthorized_has_its_own_exit_code_and_is_not_retriable() -> None:
    assert EXIT_CODES[FailureKind.UNAUTHORIZED] == 18
    assert FailureKind.UNAUTHORIZED not in RETRIABLE_FAILURES


def test_the_cli_exits_18_on_an_unauthorized_verdict(clock: VirtualClock) -> None:
    _, events, _ = watch(clock, [], refused(403))
    assert exit_for(events[-1]) == 18


# --- the run: no second attempt ---------------------------------------------------------------


def test_supervise_run_ends_at_the_first_unauthorized_attempt_with_retries_left() -> None:
    clock, store = RunClock(), MemoryStore()
    script = Script({0: "unauthorized"}, clock)
    result = supervise_run(
        "r1",
        [Candidate(gpu_class=g, price_per_hour=p, vram_gb=24) for g, p in (("A", 1), ("B", 2))],
        script,
        max_retries=5,
        store=store,
        clock=clock,
        sleep=clock.sleep,
    )
    assert (result.ok, result.failure, result.attempts) == (False, "unauthorized", 1)
    assert "(not retried)" in result.detail
    assert [c for c in script.calls if c[0] in ("deploy", "submit", "watch")] == [
        ("deploy", 0),
        ("submit", 0),
        ("watch", 0),
    ]
    # the job may still run and bill: its cancel is tried, its endpoint deleted
    assert ("cancel", "job-0") in script.calls and ("delete", "ep-0") in script.calls
    assert clock.sleeps == []  # no wait for a next attempt


# --- acceptance: a revoked key in the simulator -----------------------------------------------


def _run_against(sim: Simulator, revoke: str) -> tuple[Any, MemoryStore, list[float]]:
    """A `supervise_run` whose key is revoked by the scenario, by hand at t+180 s, or right
    after the deploy ("at submit"): (its result, its store, the waits it slept)."""
    sim.register_scenario(key_revoked(revoke_at=180.0))
    store = MemoryStore()
    sleeps: list[float] = []

    def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
        name = attempt.started.endpoint_name
        scenario = "key_revoked" if revoke == "scenario" else "training"
        deployed = Deployed(sim.add_endpoint(name, scenario=scenario), name)
        if revoke == "at submit":
            sim.revoke_key(0)
        return deployed

    with sim.client() as client:

        def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            sim.clock.sleep(seconds)
            if revoke == "by hand" and sim.clock.now() - start >= 180.0:
                sim.revoke_key(0)

        start = sim.clock.now()
        adapters = RunpodRunAdapters(
            client,
            deployer=deploy,
            job_input=lambda run, attempt: {"prompt": "..."},
            budget_s=6 * 3600,
            clock=sim.clock.now,
            sleep=sleep,
        )
        result = supervise_run(
            "revoked",
            [
                Candidate(gpu_class="RTX4090", price_per_hour=0.69, vram_gb=24),
                Candidate(gpu_class="L40S", price_per_hour=0.99, vram_gb=48),
            ],
            adapters,
            max_retries=3,
            store=store,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
        )
    return result, store, sleeps


@pytest.mark.parametrize("revoke", ["scenario", "by hand"])
def test_a_revoked_key_ends_a_run_unauthorized_after_one_attempt_with_no_resubmission(
    revoke: str,
) -> None:
    with Simulator(speed=0) as sim:
        result, store, _ = _run_against(sim, revoke)
        submissions = sim.requests_for("run")
        statuses = sim.requests_for("status")
    assert (result.ok, result.failure, result.attempts) == (False, "unauthorized", 1), result
    assert len(submissions) == 1 and submissions[0].status == 200
    # watched until the revocation, then concluded on the first refusal
    assert [r.status for r in statuses].count(401) == 1 and statuses[-1].status == 401
    assert 180.0 <= statuses[-1].at - submissions[0].at <= 190.0
    run = store.read("run-revoked")
    assert sum(isinstance(e, AttemptStarted) for e in run) == 1
    cancels = [e for e in run if isinstance(e, JobCancelled)]
    assert [c.ok for c in cancels] == [False]  # tried; the revoked key is refused there too
    job = store.read("job-revoked-a0")
    assert isinstance(job[-1], Concluded) and job[-1].rule == "unauthorized"
    assert verify(job).ok


def test_the_supervisor_concludes_a_revoked_key_unauthorized_and_never_resubmits() -> None:
    with Simulator(speed=0) as sim:
        sim.register_scenario(key_revoked(revoke_at=60.0))
        endpoint = sim.add_endpoint("flash-revoked", scenario="key_revoked")
        job_id = sim.submit(endpoint, {"prompt": "..."})
        store = MemoryStore()

        async def main() -> Any:
            client = sim.async_client()
            try:
                supervisor = Supervisor(
                    store, client, clock=sim.clock.now, sleep=sim.clock.async_sleep, jitter=0
                )
                handle = JobHandle(endpoint, "flash-revoked", job_id)
                return await supervisor.watch(JobSpec(handle, stream=STREAM, interval_s=10.0))
            finally:
                await client.aclose()

        result = asyncio.run(main())
        statuses = [r.status for r in sim.requests_for("status")]
        submissions = sim.requests_for("run")
    assert (result.state, result.failure, result.rule) == (
        "UNAUTHORIZED",
        "unauthorized",
        "unauthorized",
    )
    assert statuses.count(401) == 1 and statuses[-1] == 401
    assert submissions == []  # the supervisor watches; it never submits
    assert verify(store.read(STREAM)).ok


def test_a_key_refused_at_submit_ends_the_run_unauthorized_without_a_retry() -> None:
    """The key revoked between the deploy and the submit: the refused `/run` ends the
    attempt `unauthorized` (not a `poll_error` waited on and retried) and the run with it."""
    with Simulator(speed=0) as sim:
        result, store, sleeps = _run_against(sim, "at submit")
        submissions = sim.requests_for("run")
    assert (result.ok, result.failure, result.attempts) == (False, "unauthorized", 1), result
    assert [r.status for r in submissions] == [401]
    assert sleeps == []  # no wait for a retry
    ended = [e for e in store.read("run-revoked") if isinstance(e, AttemptEnded)]
    assert [(e.failure, e.detail.split(":")[0]) for e in ended] == [
        ("unauthorized", "submit refused")
    ]
