"""The RunPod REST client over real loopback HTTP against the simulator (real httpx)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from flashfsm import JobHandle, RunpodApiError, poll_job
from flashfsm.adapters.http11 import DEADLINE
from flashfsm.adapters.runpod import (
    MAX_TTL_S,
    ROUTES,
    Answer,
    AsyncRunpodClient,
    Pause,
    RetryPolicy,
    RunpodAuthError,
    RunpodClient,
    Send,
    Wire,
    exchange,
    job_policy,
    policy_for_budget,
)
from flashfsm.adapters.simulator import Simulator

KEY = "sim-test-key-1234"
PLANTED = "rp_PLANTED_SECRET_0123456789abcdef"
FLAVORS = ("sync", "async")


@pytest.fixture
def sim():
    with Simulator(speed=0, api_keys=(KEY, "sim-other-account-key")) as s:
        yield s
        assert s.errors == [], s.errors[0]


@dataclass
class Outcome:
    """What one client call did: its value or its error, and the back-off sleeps."""

    value: Any = None
    error: BaseException | None = None
    sleeps: list[float] = field(default_factory=list)


def call(
    sim: Simulator,
    flavor: str,
    op: str,
    *args: Any,
    key: str = KEY,
    timeout: float = 5.0,
    retry: RetryPolicy | None = None,
    **kwargs: Any,
) -> Outcome:
    """Run one client operation with a fresh sync or async client; never raises."""
    out = Outcome()
    options = {
        "endpoint_base_url": f"{sim.url}/v2",
        "api_base_url": sim.url,
        "timeout": timeout,
        "retry": retry,
        "rng": random.Random(7),
        "sleep": out.sleeps.append,
    }
    try:
        if flavor == "sync":
            with RunpodClient(key, **options) as client:
                out.value = getattr(client, op)(*args, **kwargs)
        else:

            async def go() -> Any:
                async with AsyncRunpodClient(key, **options) as client:
                    return await getattr(client, op)(*args, **kwargs)

            out.value = asyncio.run(go())
    except Exception as exc:  # the tests inspect it
        out.error = exc
    return out


def setup_job(sim: Simulator, scenario: str = "no_capacity") -> tuple[str, str]:
    endpoint = sim.add_endpoint("flash-client-test", scenario=scenario, check_quota=False)
    return endpoint, sim.submit(endpoint, {"n": 1})


def worker_of(sim: Simulator, endpoint: str) -> str:
    """A worker of the endpoint, standing and idle (its log has a few lines)."""
    sim.configure_endpoint(endpoint, idle=1)
    return sim.workers(endpoint)[-1]["id"]


# ----------------------------------------------------------------------- operations


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_operation_round_trips_through_the_simulator(sim, flavor):
    endpoint = sim.add_endpoint("flash-ops", scenario="success")
    job = call(sim, flavor, "run", endpoint, {"x": 1}, ttl_s=3600, execution_timeout_s=600)
    assert job.error is None and isinstance(job.value, str)
    sent = sim.requests_for("run")[-1].json
    assert sent == {"input": {"x": 1}, "policy": {"ttl": 3_600_000, "executionTimeout": 600_000}}

    status = call(sim, flavor, "job_status", endpoint, job.value)
    assert status.value["status"] == "IN_QUEUE"
    health = call(sim, flavor, "endpoint_health", endpoint).value
    assert health["workers"]["initializing"] == 1 and health["jobs"]["inQueue"] == 1

    sim.clock.advance(100)
    done = call(sim, flavor, "job_status", endpoint, job.value).value
    assert done["status"] == "COMPLETED" and done["output"]["reward"] == 0.82

    queued = sim.submit(endpoint, {"scenario": "no_capacity"})
    other = sim.submit(endpoint, {"scenario": "no_capacity"})
    assert call(sim, flavor, "cancel", endpoint, queued).value["status"] == "CANCELLED"
    assert call(sim, flavor, "purge_queue", endpoint).value == {"removed": 1, "status": "completed"}
    assert call(sim, flavor, "job_status", endpoint, other).error.status_code == 404

    listed = call(sim, flavor, "list_endpoints").value
    assert [e["id"] for e in listed] == [endpoint]
    assert call(sim, flavor, "get_endpoint", endpoint).value["name"] == "flash-ops"
    assert call(sim, flavor, "delete_endpoint", endpoint).value is True
    assert call(sim, flavor, "delete_endpoint", endpoint).value is False
    assert call(sim, flavor, "list_endpoints").value == []
    assert [r.route for r in sim.requests_for("delete_endpoint")] == ["delete_endpoint"] * 2


def test_run_sends_no_policy_unless_asked_and_passes_a_webhook(sim):
    endpoint = sim.add_endpoint()
    call(sim, "sync", "run", endpoint, {"a": 1}, webhook="https://hooks.invalid/x")
    assert sim.requests_for("run")[-1].json == {
        "input": {"a": 1},
        "webhook": "https://hooks.invalid/x",
    }


def test_management_calls_see_only_the_callers_account(sim):
    mine = sim.add_endpoint("flash-mine")
    theirs = sim.add_endpoint("flash-theirs", account=1)
    assert [e["id"] for e in call(sim, "sync", "list_endpoints").value] == [mine]
    assert call(sim, "sync", "get_endpoint", theirs).error.status_code == 404


# ----------------------------------------------------------------------- policy


def test_policy_for_budget_adds_margins_and_caps_the_ttl_at_seven_days():
    p = policy_for_budget(3600)
    assert p == {"execution_timeout_s": 4200.0, "ttl_s": 4200.0 + 7200.0}
    big = policy_for_budget(30 * 24 * 3600)
    assert big["ttl_s"] == MAX_TTL_S and big["execution_timeout_s"] == MAX_TTL_S
    assert policy_for_budget(10 * 3600)["execution_timeout_s"] == 11 * 3600
    assert job_policy(**policy_for_budget(60)) == {"ttl": 7_860_000, "executionTimeout": 660_000}
    for bad in (0, -5, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            policy_for_budget(bad)


def test_run_refuses_a_ttl_beyond_seven_days_before_any_request(sim):
    endpoint = sim.add_endpoint()
    out = call(sim, "sync", "run", endpoint, {}, ttl_s=MAX_TTL_S + 1)
    assert isinstance(out.error, ValueError)
    with pytest.raises(ValueError):
        job_policy(None, -1)
    assert sim.requests_for("run") == []


# ----------------------------------------------------------------------- retries


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize(
    "fault",
    [
        {"kind": 429, "retry_after": 2},
        {"kind": 429},
        {"kind": 500},
        {"kind": 502},
        {"kind": 503},
        {"kind": "reset"},
        {"kind": "slow", "delay_s": 0.6},
    ],
    ids=["429-retry-after", "429", "500", "502", "503", "reset", "timeout"],
)
def test_idempotent_calls_retry_transient_faults(sim, flavor, fault):
    endpoint, job = setup_job(sim)
    sim.add_fault("status", times=2, **fault)
    timeout = 0.2 if fault["kind"] == "slow" else 5.0  # (a prompt answer never times out)
    out = call(sim, flavor, "job_status", endpoint, job, timeout=timeout)
    assert out.error is None, out.error
    assert out.value["status"] == "IN_QUEUE"
    assert len(sim.requests_for("status")) == 3
    assert len(out.sleeps) == 2
    if fault.get("retry_after"):
        assert all(2 <= s < 2 + RetryPolicy().base_s for s in out.sleeps)
    else:
        assert out.sleeps[0] <= RetryPolicy().base_s and out.sleeps[1] <= 2 * RetryPolicy().base_s


@pytest.mark.parametrize("flavor", FLAVORS)
def test_retries_stop_after_the_policys_attempts(sim, flavor):
    endpoint, job = setup_job(sim)
    sim.add_fault("status", 503, times=None)
    out = call(sim, flavor, "job_status", endpoint, job, retry=RetryPolicy(attempts=3))
    assert isinstance(out.error, RunpodApiError) and out.error.status_code == 503
    assert out.error.route == "status" and "HTTP 503" in str(out.error)
    assert len(sim.requests_for("status")) == 3 and len(out.sleeps) == 2


def test_a_retry_after_beyond_the_cap_is_not_waited_for(sim):
    endpoint, _ = setup_job(sim)
    sim.add_fault("health", 429, retry_after=3600)
    out = call(sim, "sync", "endpoint_health", endpoint)
    assert out.error.status_code == 429 and out.sleeps == []
    assert len(sim.requests_for("health")) == 1


def test_transport_errors_on_a_dead_host_are_retried_then_raised():
    with Simulator(speed=0, api_keys=(KEY,)) as dead:
        url = dead.url
    out = Outcome()
    client = RunpodClient(
        KEY, endpoint_base_url=f"{url}/v2", api_base_url=url, sleep=out.sleeps.append
    )
    with client, pytest.raises(RunpodApiError) as info:
        client.endpoint_health("ep")
    assert info.value.status_code is None and "ConnectError" in str(info.value)
    assert len(out.sleeps) == RetryPolicy().attempts - 1


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize(
    "fault",
    [
        {"kind": 429, "retry_after": 1},
        {"kind": 503},
        {"kind": "reset"},
        {"kind": "reset", "handled": True},
        {"kind": "slow", "delay_s": 0.6},
    ],
    ids=["429", "503", "reset-before", "reset-after", "timeout"],
)
def test_run_is_never_retried(sim, flavor, fault):
    endpoint = sim.add_endpoint()
    sim.add_fault("run", **fault)
    timeout = 0.2 if fault["kind"] == "slow" else 5.0
    out = call(sim, flavor, "run", endpoint, {"a": 1}, timeout=timeout)
    assert isinstance(out.error, RunpodApiError) and out.error.route == "run"
    assert len(sim.requests_for("run")) == 1 and out.sleeps == []
    # Why: when the answer was lost after the job was queued, a retry would start a second job.
    created = 1 if fault["kind"] == "slow" or fault.get("handled") else 0
    assert len(sim.world.jobs) == created


# ----------------------------------------------------------------------- classification


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_raise_at_once(sim, flavor, status):
    endpoint, job = setup_job(sim)
    sim.add_fault("status", status, times=None)
    out = call(sim, flavor, "job_status", endpoint, job)
    assert isinstance(out.error, RunpodAuthError) and out.error.status_code == status
    assert len(sim.requests_for("status")) == 1 and out.sleeps == []


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_key_the_api_refuses_is_an_auth_error(sim, flavor):
    endpoint = sim.add_endpoint()
    out = call(sim, flavor, "endpoint_health", endpoint, key="not-a-known-key")
    assert isinstance(out.error, RunpodAuthError) and out.error.status_code == 401


@pytest.mark.parametrize("flavor", FLAVORS)
def test_status_of_a_job_that_is_gone_is_a_404(sim, flavor):
    endpoint = sim.add_endpoint(scenario="result_expired")
    job = sim.submit(endpoint, {})
    sim.clock.advance(100)
    assert call(sim, flavor, "job_status", endpoint, job).value["status"] == "COMPLETED"
    sim.clock.advance(100)  # past the 2-minute result retention
    out = call(sim, flavor, "job_status", endpoint, job)
    assert isinstance(out.error, RunpodApiError) and not isinstance(out.error, RunpodAuthError)
    assert out.error.status_code == 404 and out.error.route == "status"
    assert len(sim.requests_for("status")) == 2  # 404 is an answer, not retried
    unknown = call(sim, flavor, "job_status", endpoint, "no-such-job")
    assert unknown.error.status_code == 404


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("kind", ["malformed", "non_object", "missing_keys"])
def test_unusable_answers_are_api_errors(sim, flavor, kind):
    endpoint, job = setup_job(sim)
    sim.add_fault("status", kind)
    out = call(sim, flavor, "job_status", endpoint, job)
    assert isinstance(out.error, RunpodApiError)
    assert out.error.status_code is None and "malformed" in str(out.error)
    assert len(sim.requests_for("status")) == 1


# The fault matrix: every fault on every route the client uses.
FAULTS: dict[str, dict[str, Any]] = {
    "429-retry-after": {"kind": 429, "retry_after": 1},
    "429": {"kind": 429},
    "500": {"kind": 500},
    "502": {"kind": 502},
    "503": {"kind": 503},
    "reset": {"kind": "reset"},
    "timeout": {"kind": "slow", "delay_s": 0.5},
    "malformed": {"kind": "malformed"},
    "non_object": {"kind": "non_object"},
    "missing_keys": {"kind": "missing_keys"},
    "401": {"kind": 401},
    "403": {"kind": 403},
    "404": {"kind": 404},
}
TRANSIENT = {"429-retry-after", "429", "500", "502", "503", "reset", "timeout"}
OPS = {
    "run": ("run", "{ep}", {"n": 1}),
    "status": ("job_status", "{ep}", "{job}"),
    "cancel": ("cancel", "{ep}", "{job}"),
    "health": ("endpoint_health", "{ep}"),
    "purge_queue": ("purge_queue", "{ep}"),
    "list_endpoints": ("list_endpoints",),
    "get_endpoint": ("get_endpoint", "{ep}"),
    "delete_endpoint": ("delete_endpoint", "{ep}"),
    "list_workers": ("endpoint_workers", "{ep}"),
    "worker_logs": ("worker_log", "{ep}", "{worker}"),
}
# Routes whose good answer needs keys that `missing_keys` removes.
NEEDS_KEYS = {"run", "status", "list_endpoints", "get_endpoint", "list_workers"}
# Routes whose good answer is an event stream: a spoiled event is skipped, not an error.
STREAMED = {"worker_logs"}


def expected(route: str, fault: str) -> tuple[str, Any]:
    """("ok", requests made) or ("error", (error class, status_code, requests made))."""
    code = FAULTS[fault]["kind"] if isinstance(FAULTS[fault]["kind"], int) else None
    if fault in TRANSIENT:
        if ROUTES[route].idempotent:
            return "ok", 2
        return "error", (RunpodApiError, code, 1)
    if fault in ("401", "403"):
        return "error", (RunpodAuthError, code, 1)
    if fault == "404":
        return ("ok", 1) if route == "delete_endpoint" else ("error", (RunpodApiError, 404, 1))
    if route in STREAMED and fault in ("malformed", "non_object", "missing_keys"):
        return "ok", 1
    if fault == "malformed":
        return "error", (RunpodApiError, None, 1)
    if fault == "non_object":
        return ("ok", 1) if route == "delete_endpoint" else ("error", (RunpodApiError, None, 1))
    assert fault == "missing_keys"
    return ("error", (RunpodApiError, None, 1)) if route in NEEDS_KEYS else ("ok", 1)


def test_the_matrix_covers_every_client_route():
    assert set(OPS) == set(ROUTES)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("route", list(OPS))
def test_fault_matrix(sim, flavor, route, fault):
    endpoint, job = setup_job(sim)
    op, *raw = OPS[route]
    worker = worker_of(sim, endpoint) if route in STREAMED else ""
    args = [a.format(ep=endpoint, job=job, worker=worker) if isinstance(a, str) else a for a in raw]
    sim.add_fault(route, **FAULTS[fault])
    # A short timeout only where the fault is a slow answer (0.5 s): elsewhere a loaded
    # machine must not turn a prompt answer into a timeout and a retry.
    out = call(sim, flavor, op, *args, timeout=0.2 if fault == "timeout" else 5.0)
    made = len(sim.requests_for(route))
    verdict, detail = expected(route, fault)
    if verdict == "ok":
        assert out.error is None, f"{route}/{fault}: {out.error!r}"
        assert made == detail
        if route == "delete_endpoint":
            # After a lost answer the retry finds the endpoint gone: still a clean False.
            assert out.value is (fault not in ("404", "timeout"))
    else:
        cls, code, count = detail
        assert type(out.error) is cls, f"{route}/{fault}: {out.error!r}"
        assert out.error.status_code == code and out.error.route == route
        assert route in str(out.error)
        assert made == count and out.sleeps == []


# ----------------------------------------------------------------------- secrets


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_planted_key_never_appears_in_errors_or_reprs(flavor):
    with Simulator(speed=0, api_keys=(PLANTED,)) as sim:
        errors: list[BaseException] = []
        for route, (op, *raw) in OPS.items():
            for fault in FAULTS.values():
                endpoint, job = setup_job(sim)
                worker = worker_of(sim, endpoint) if route in STREAMED else ""
                args = [
                    a.format(ep=endpoint, job=job, worker=worker) if isinstance(a, str) else a
                    for a in raw
                ]
                sim.add_fault(route, **fault)
                out = call(sim, flavor, op, *args, key=PLANTED, timeout=0.2)
                sim.clear_faults()
                errors += [out.error] if out.error else []
        # An error body that echoes the credential (a misbehaving proxy) is masked too.
        sim.add_fault("health", 400, body={"error": f"bad header Authorization: Bearer {PLANTED}"})
        echoed = call(sim, flavor, "endpoint_health", "x", key=PLANTED).error
        sim.add_fault("health", 500, times=None, body=f"key={PLANTED}")
        errors += [echoed, call(sim, flavor, "endpoint_health", "x", key=PLANTED).error]
        assert "[REDACTED]" in str(echoed)
        assert len(errors) > 50
        for exc in errors:
            for link in _chain(exc):
                assert PLANTED not in str(link) and PLANTED not in repr(link), repr(link)
        client = RunpodClient(PLANTED, endpoint_base_url=f"{sim.url}/v2", api_base_url=sim.url)
        assert PLANTED not in repr(client)
        client.close()
        for request in sim.requests:
            assert PLANTED not in json.dumps(request.headers)


def test_from_env_takes_the_first_key_of_a_pool_and_the_sdk_hosts(sim, monkeypatch):
    for name, value in sim.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RUNPOD_API_KEY", f" {KEY} , sim-other-account-key")
    endpoint = sim.add_endpoint()
    with RunpodClient.from_env() as client:
        assert client.endpoint_health(endpoint)["workers"]["idle"] == 0
    assert sim.requests[-1].account == "account0"

    async def go() -> list[dict[str, Any]]:
        async with AsyncRunpodClient.from_env() as client:
            return await client.list_endpoints()

    assert [e["id"] for e in asyncio.run(go())] == [endpoint]
    monkeypatch.setenv("RUNPOD_API_KEY", " , ")
    with pytest.raises(RunpodAuthError):
        RunpodClient.from_env()
    monkeypatch.delenv("RUNPOD_API_KEY")
    with pytest.raises(RunpodAuthError):
        RunpodClient.from_env()


# ----------------------------------------------------------------------- poll_job


def _hub_heartbeat(sim: Simulator, repo: str, prefix: str):
    def read(force: bool = False) -> dict[str, Any] | None:
        text = sim.hub.text(repo, f"{prefix}/heartbeat.json")
        return json.loads(text) if text else None

    return read


@pytest.mark.parametrize(
    ("scenario", "state", "rule"),
    [
        ("success", "SUCCEEDED", "completed"),
        ("worker_death", "SUCCEEDED", "completed"),
        ("no_capacity", "NO_CAPACITY", "queue_grace"),
        ("crash_loop", "STALLED", "unhealthy_worker"),
        ("completed_error", "FAILED", "completed_with_error"),
        ("failed_retriable", "PREEMPTED", "worker_failed"),
        ("timed_out", "PREEMPTED", "platform_termination"),
        ("ttl_expired", "LOST", "job_lost"),
        ("training_stall", "STALLED", "stall"),
    ],
)
def test_poll_job_with_the_rest_client_reaches_the_scenarios_verdict(sim, scenario, state, rule):
    endpoint = sim.add_endpoint("flash-poll", hf_repo="team/runs")
    payload = {"scenario": scenario, "phase": "train", "run_id": "run1", "seed": 3}
    with RunpodClient(
        KEY, endpoint_base_url=f"{sim.url}/v2", api_base_url=sim.url, sleep=sim.clock.sleep
    ) as client:
        # ttl_expired's job is deleted when the TTL it was sent passes.
        policy = {"ttl_s": 900} if scenario == "ttl_expired" else policy_for_budget(7200)
        job = client.run(endpoint, payload, **policy)
        handle = JobHandle(endpoint, "flash-poll", job, submitted_at=sim.clock())
        result = poll_job(
            handle,
            client=client,
            clock=sim.clock,
            sleep=sim.clock.sleep,
            heartbeat_reader=_hub_heartbeat(sim, "team/runs", "train/run1/seed3"),
        )
    assert (result.state, result.rule) == (state, rule), result.detail
    assert result.ok is (state == "SUCCEEDED")
    assert sim.requests_for("health") or state not in ("NO_CAPACITY", "STALLED")


def test_poll_job_rides_out_flaky_status_answers_and_builds_its_client_from_env(sim, monkeypatch):
    for name, value in sim.env().items():
        monkeypatch.setenv(name, value)
    endpoint = sim.add_endpoint("flash-flaky", scenario="success")
    job = sim.submit(endpoint, {})
    # The default client retries these itself (with real, sub-second back-off sleeps).
    sim.add_fault("status", 503, after=1)
    sim.add_fault("status", "reset", after=4)
    result = poll_job(
        {"endpoint_id": endpoint, "job_id": job}, clock=sim.clock, sleep=sim.clock.sleep
    )
    assert result.state == "SUCCEEDED" and result.metrics["reward"] == 0.82
    assert [r.fault for r in sim.requests_for("status") if r.fault] == ["status", "reset"]


def test_the_async_client_awaits_its_default_sleep(sim):
    endpoint, job = setup_job(sim)
    sim.add_fault("status", 502, times=2)

    async def go() -> dict[str, Any]:
        async with AsyncRunpodClient(
            KEY,
            endpoint_base_url=f"{sim.url}/v2",
            api_base_url=sim.url,
            retry=RetryPolicy(base_s=0.01),
        ) as client:
            return await client.job_status(endpoint, job)

    assert asyncio.run(go())["status"] == "IN_QUEUE"
    assert len(sim.requests_for("status")) == 3


# ----------------------------------------------------------------------- the protocol, no I/O


def _wire(deadline_s: float = 30.0) -> Wire:
    return Wire(
        bases={"data": "https://api.invalid/v2", "management": "https://mgmt.invalid"},
        headers={"Authorization": f"Bearer {PLANTED}"},
        timeout=httpx.Timeout(5.0),
        retry=RetryPolicy(attempts=3),
        deadline_s=deadline_s,
    )


def test_exchange_builds_the_request_once_and_owns_retries_and_the_deadline():
    params = {"endpoint_id": "ep", "job_id": "j/1"}
    steps = exchange(_wire(), ROUTES["status"], params, None, random.Random(7))
    send = next(steps)
    assert isinstance(send, Send) and send.request.method == "GET"
    assert send.request.url == "https://api.invalid/v2/ep/status/j%2F1"
    assert send.request.extensions[DEADLINE] == send.end
    assert 29.0 < send.end - time.monotonic() <= 30.0
    assert send.request.extensions["timeout"]["read"] == 5.0
    assert PLANTED not in repr(send) and PLANTED not in repr(_wire())
    assert isinstance(steps.send(Answer(503, {}, b"busy")), Pause)
    assert steps.send(None) is send  # the same request again
    # A Retry-After the deadline leaves no time for is not waited: the call fails now.
    with pytest.raises(RunpodApiError) as caught:
        steps.send(Answer(429, {"retry-after": "45"}, b""))
    assert caught.value.status_code == 429 and "HTTP 429" in str(caught.value)


def test_exchange_names_a_timeout_at_the_end_the_call_deadline():
    steps = exchange(_wire(0.05), ROUTES["health"], {"endpoint_id": "ep"}, None, random.Random())
    next(steps)
    time.sleep(0.06)
    with pytest.raises(RunpodApiError, match=r"within the 0\.05 s call deadline") as caught:
        steps.send(httpx.ReadTimeout("slow"))
    assert caught.value.status_code is None and caught.value.route == "health"


def test_exchange_shapes_what_the_caller_gets():
    def one(route: str, answer: Answer, **params: str) -> Any:
        steps = exchange(_wire(), ROUTES[route], params, None, random.Random())
        next(steps)
        try:
            steps.send(answer)
        except StopIteration as done:
            return done.value
        raise AssertionError("no value")

    assert one("run", Answer(200, {}, b'{"id": "j1"}'), endpoint_id="ep") == "j1"
    assert one("delete_endpoint", Answer(204, {}, b""), endpoint_id="ep") is True
    assert one("delete_endpoint", Answer(404, {}, b""), endpoint_id="ep") is False
    listed = Answer(200, {}, b'{"endpoints": [{"id": "e"}, 7]}')
    assert one("list_endpoints", listed) == [{"id": "e"}]
    with pytest.raises(RunpodApiError, match="malformed answer: id is not a string"):
        one("run", Answer(200, {}, b'{"id": 7}'), endpoint_id="ep")
