"""Untrusted output: a Flash pickle is loaded only from an endpoint the run deployed.

Unpickling runs code chosen by whoever wrote the bytes. Every watch is JSON-only unless its
handle is `trusted_output` (set by `submit_run` and the run adapters for the endpoints they
deploy) or the caller overrides with `allow_pickle`. These tests run the real clients over
the loopback simulator with `cloudpickle.loads` replaced by a spy, so "never unpickled"
means the function was never called.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import pytest

from flashfsm import (
    AsyncRunpodClient,
    GracePolicy,
    JobHandle,
    MemoryStore,
    OutputDecodeError,
    PollResult,
    UntrustedOutputError,
    poll_job,
    replay,
    verify,
)
from flashfsm.adapters.flash_wire import MAX_PICKLE_BYTES, decode_output
from flashfsm.adapters.simulator import Scenario, Simulator, Step
from flashfsm.events.models import AttemptEnded, Candidate, JobSubmitted, StatusObserved
from flashfsm.submit import supervise_spec
from flashfsm.supervisor import JobSpec, Supervisor
from tests.sim_support import sync_client
from tests.test_deploy import sim_factory
from tests.test_submit import run, scripted, spec, train_body

METRICS = {"reward": 0.91, "loss": 0.07, "steps": 300}
JSON_METRICS = {"reward": 0.5, "source": "json_result"}


def pickled(value: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode()


#: A Flash live-function envelope whose only result is a pickle.
PICKLED_ENVELOPE = {"success": True, "result": pickled(METRICS), "stdout": "done\n"}

#: Outputs that carry JSON the watch can read without unpickling anything.
JSON_OUTPUTS: dict[str, Any] = {
    "plain-dict": dict(JSON_METRICS),
    "json-string": json.dumps(JSON_METRICS),
    "envelope-json-result": {"success": True, "json_result": dict(JSON_METRICS)},
    # both: the JSON is preferred, so even a trusted watch loads no pickle
    "envelope-json-and-pickle": {
        "success": True,
        "json_result": dict(JSON_METRICS),
        "result": pickled(METRICS),
    },
    "json-string-envelope": json.dumps({"success": True, "json_result": JSON_METRICS}),
}


def life(name: str, output: Any) -> Scenario:
    """A short job life: queued, a worker picks it up, COMPLETED with `output`."""
    return Scenario(
        name,
        (
            Step(0, status="IN_QUEUE", workers={"initializing": 1}),
            Step(20, status="IN_PROGRESS", workers={"running": 1}),
            Step(60, status="COMPLETED", output=output),
        ),
    )


class Spy:
    """Replaces `cloudpickle.loads`: records each call, then raises or performs it."""

    def __init__(self, real: Callable[..., Any], *, allow: bool):
        self.real = real
        self.allow = allow
        self.calls: list[bytes] = []

    def __call__(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(data)
        if not self.allow:
            raise AssertionError("cloudpickle.loads called on untrusted output")
        return self.real(data, *args, **kwargs)


@pytest.fixture
def forbid_unpickling(monkeypatch: pytest.MonkeyPatch) -> Spy:
    """`cloudpickle.loads` fails the test if anything calls it."""
    spy = Spy(cloudpickle.loads, allow=False)
    monkeypatch.setattr(cloudpickle, "loads", spy)
    return spy


@pytest.fixture
def count_unpickling(monkeypatch: pytest.MonkeyPatch) -> Spy:
    """`cloudpickle.loads` still works; every call is recorded."""
    spy = Spy(cloudpickle.loads, allow=True)
    monkeypatch.setattr(cloudpickle, "loads", spy)
    return spy


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(speed=0) as s:
        yield s
        assert s.errors == [], s.errors[0]


def submit(sim: Simulator, name: str, output: Any, **handle: Any) -> JobHandle:
    """An endpoint whose one job ends with `output`, and a handle to that job."""
    sim.register_scenario(life(name, output))
    endpoint = sim.add_endpoint(f"flash-{name}", check_quota=False)
    job_id = sim.submit(endpoint, {"scenario": name})
    return JobHandle(endpoint, f"flash-{name}", job_id, submitted_at=sim.clock.now(), **handle)


def watch(
    sim: Simulator, handle: JobHandle | dict[str, Any], **kw: Any
) -> tuple[PollResult, list[Any]]:
    store = MemoryStore()
    with sync_client(sim) as client:
        result = poll_job(
            handle, client=client, clock=sim.clock.now, sleep=sim.clock.sleep, store=store, **kw
        )
    (stream,) = store.streams()
    return result, store.read(stream)


def supervise(sim: Simulator, *jobs: JobSpec) -> dict[str, Any]:
    """Run a `Supervisor` over `jobs` on the simulator's manual clock."""

    async def main() -> dict[str, Any]:
        env = sim.env()
        client = AsyncRunpodClient(
            sim.accounts[0].key,
            endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
            api_base_url=env["RUNPOD_API_BASE_URL"],
        )

        async def virtual_sleep(seconds: float) -> None:
            sim.clock.advance(seconds)

        try:
            supervisor = Supervisor(
                MemoryStore(), client, clock=sim.clock.now, sleep=virtual_sleep, jitter=0
            )
            return await supervisor.run(jobs)
        finally:
            await client.aclose()

    return asyncio.run(main())


def assert_refused(result: PollResult, events: list[Any] | None = None) -> None:
    """The verdict of a job whose only result was a pickle nobody may load."""
    assert (result.state, result.failure, result.rule) == (
        "FAILED",
        "job_failed",
        "completed_with_error",
    ), result
    assert "unpickling is off" in (result.detail or "")
    assert result.metrics is None
    if events is not None:
        completed = [e for e in events if isinstance(e, StatusObserved) and e.status == "COMPLETED"]
        assert completed and completed[-1].metrics is None
        assert "unpickling is off" in (completed[-1].output_error or "")
        assert verify(events).ok


# --- (a) poll_job: untrusted handles never unpickle -----------------------------------------


def test_the_default_everywhere_is_json_only(forbid_unpickling: Spy) -> None:
    assert JobHandle("ep", "name", "job").trusted_output is False  # positional, as before
    with pytest.raises(UntrustedOutputError, match="unpickling is off"):
        decode_output(PICKLED_ENVELOPE)
    assert forbid_unpickling.calls == []


def test_poll_job_on_an_untrusted_handle_never_unpickles_and_still_concludes(
    sim: Simulator, forbid_unpickling: Spy
) -> None:
    handle = submit(sim, "untrusted", PICKLED_ENVELOPE)

    result, events = watch(sim, handle)

    assert forbid_unpickling.calls == []
    assert_refused(result, events)


@pytest.mark.parametrize(
    "trust",
    [None, False, "true", 1, "yes"],
    ids=["missing", "false", "string", "int", "yes"],
)
def test_a_handle_dict_is_trusted_only_by_the_boolean_true(
    sim: Simulator, forbid_unpickling: Spy, trust: Any
) -> None:
    data = submit(sim, f"dict-{trust}".lower(), PICKLED_ENVELOPE).to_dict()
    if trust is None:
        del data["trusted_output"]
    else:
        data["trusted_output"] = trust
    assert JobHandle.from_dict(data).trusted_output is False

    result, events = watch(sim, data)

    assert forbid_unpickling.calls == []
    assert_refused(result, events)


def test_allow_pickle_false_overrides_a_trusted_handle(
    sim: Simulator, forbid_unpickling: Spy
) -> None:
    handle = submit(sim, "override-off", PICKLED_ENVELOPE, trusted_output=True)

    result, events = watch(sim, handle, allow_pickle=False)

    assert forbid_unpickling.calls == []
    assert_refused(result, events)


def test_allow_pickle_true_is_the_callers_explicit_override(
    sim: Simulator, count_unpickling: Spy
) -> None:
    handle = submit(sim, "override-on", PICKLED_ENVELOPE)

    result, _ = watch(sim, handle, allow_pickle=True)

    assert result.ok and result.metrics == METRICS
    assert len(count_unpickling.calls) == 1


def test_the_remote_side_cannot_make_its_output_trusted(
    sim: Simulator, forbid_unpickling: Spy
) -> None:
    """Nothing the endpoint returns touches the handle: trust is the caller's alone."""
    forged = {**PICKLED_ENVELOPE, "trusted_output": True, "allow_pickle": True}
    handle = submit(sim, "forged", forged)

    result, events = watch(sim, handle)

    assert forbid_unpickling.calls == []
    assert_refused(result, events)
    assert handle.trusted_output is False
    submitted = events[0]
    assert isinstance(submitted, JobSubmitted)
    assert "trusted_output" not in submitted.model_dump()  # the log records no trust bit


# --- (b) the paths that deploy the endpoint do unpickle its result ------------------------


@pytest.fixture
def make_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Simulator]]:
    yield from sim_factory(monkeypatch)


def flash_spec(**kw: Any) -> Any:
    """A live-function worker (no baked image): it answers with a Flash envelope."""
    return spec(worker_image=None, weight_cache=None, **kw)


def test_submit_run_unpickles_the_result_of_the_endpoint_it_deployed(
    make_sim, tmp_path, count_unpickling: Spy
) -> None:
    sim = make_sim()
    sim.register_scenario(life("pickled", PICKLED_ENVELOPE))
    store, handles = MemoryStore(), []

    result = run(
        sim,
        store,
        tmp_path,
        "pickled",
        spec=flash_spec(),
        function=train_body,
        on_handle=handles.append,
    )

    assert result.ok and result.metrics == METRICS, result.detail
    assert len(count_unpickling.calls) == 1
    assert handles[0]["trusted_output"] is True
    events = store.read("job-run-42-s0-a0")
    assert replay(events).verdict.metrics == METRICS and verify(events).ok

    # A reattach from the persisted handle dict keeps the trust (a fresh store re-watches).
    with sim.client() as client:
        again = poll_job(
            handles[0],
            client=client,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
            store=MemoryStore(),
        )
    assert again.ok and again.metrics == METRICS
    assert len(count_unpickling.calls) == 2


def test_submit_run_with_allow_pickle_false_is_json_only(
    make_sim, tmp_path, forbid_unpickling: Spy
) -> None:
    sim = make_sim()
    sim.register_scenario(life("pickled", PICKLED_ENVELOPE))
    store = MemoryStore()

    result = run(
        sim,
        store,
        tmp_path,
        "pickled",
        spec=flash_spec(),
        function=train_body,
        allow_pickle=False,
    )

    assert forbid_unpickling.calls == []
    assert_refused(result, store.read("job-run-42-s0-a0"))


def test_supervise_spec_unpickles_the_result_of_the_endpoints_it_deployed(
    make_sim, tmp_path, count_unpickling: Spy
) -> None:
    sim = make_sim()
    sim.register_scenario(life("pickled", PICKLED_ENVELOPE))
    store = MemoryStore()

    result = supervise_spec(
        flash_spec(run_id="run-p"),
        0,
        [Candidate(gpu_class="L40S", price_per_hour=0.99)],
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        deployer=scripted(sim, "pickled"),
        function=train_body,
        hub_options={"cache_dir": tmp_path / "hf"},
    )

    assert result.ok and result.metrics == METRICS, result.detail
    assert len(count_unpickling.calls) == 1
    ended = [e for e in store.read(result.stream) if isinstance(e, AttemptEnded)]
    assert [e.metrics for e in ended] == [METRICS]
    assert sim.endpoints() == []


def test_supervise_spec_with_allow_pickle_false_is_json_only(
    make_sim, tmp_path, forbid_unpickling: Spy
) -> None:
    sim = make_sim()
    sim.register_scenario(life("pickled", PICKLED_ENVELOPE))

    result = supervise_spec(
        flash_spec(run_id="run-j"),
        0,
        [Candidate(gpu_class="L40S", price_per_hour=0.99)],
        store=MemoryStore(),
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        deployer=scripted(sim, "pickled"),
        function=train_body,
        hub_options={"cache_dir": tmp_path / "hf"},
        allow_pickle=False,
    )

    assert forbid_unpickling.calls == []
    assert not result.ok and result.failure == "job_failed"  # never retried: same output
    assert result.attempts == 1 and "unpickling is off" in (result.detail or "")


# --- (c) the asyncio supervisor honours the handle's trust the same way -------------------


def test_the_supervisor_never_unpickles_for_an_untrusted_handle(
    sim: Simulator, forbid_unpickling: Spy
) -> None:
    untrusted = submit(sim, "sup-untrusted", PICKLED_ENVELOPE)
    overridden = submit(sim, "sup-off", PICKLED_ENVELOPE, trusted_output=True)

    results = supervise(
        sim,
        JobSpec(untrusted, stream="untrusted"),
        JobSpec(overridden, stream="off", allow_pickle=False),
    )

    assert forbid_unpickling.calls == []
    assert_refused(results["untrusted"])
    assert_refused(results["off"])


def test_the_supervisor_unpickles_for_a_trusted_handle(
    sim: Simulator, count_unpickling: Spy
) -> None:
    trusted = submit(sim, "sup-trusted", PICKLED_ENVELOPE, trusted_output=True)
    overridden = submit(sim, "sup-on", PICKLED_ENVELOPE)

    results = supervise(
        sim,
        JobSpec(trusted, stream="trusted", policy=GracePolicy()),
        JobSpec(overridden, stream="on", allow_pickle=True),
    )

    for stream in ("trusted", "on"):
        assert results[stream].ok and results[stream].metrics == METRICS, results[stream]
    assert len(count_unpickling.calls) == 2


# --- (d) the size cap holds for trusted output --------------------------------------------


def test_a_trusted_pickle_over_the_cap_is_never_loaded(
    sim: Simulator, forbid_unpickling: Spy
) -> None:
    big = cloudpickle.dumps({"blob": b"x" * MAX_PICKLE_BYTES})  # a valid pickle, one cap+
    assert len(big) > MAX_PICKLE_BYTES
    output = {"success": True, "result": base64.b64encode(big).decode()}
    handle = submit(sim, "oversize", output, trusted_output=True)

    result, events = watch(sim, handle)

    assert forbid_unpickling.calls == []
    assert (result.state, result.failure, result.rule) == (
        "FAILED",
        "job_failed",
        "completed_with_error",
    )
    assert f"at most {MAX_PICKLE_BYTES} bytes" in (result.detail or "")
    assert verify(events).ok


def test_a_trusted_pickle_over_a_smaller_cap_is_refused(forbid_unpickling: Spy) -> None:
    size = len(base64.b64decode(PICKLED_ENVELOPE["result"]))
    with pytest.raises(OutputDecodeError, match=f"at most {size - 1} bytes"):
        decode_output(PICKLED_ENVELOPE, allow_pickle=True, max_pickle_bytes=size - 1)
    assert forbid_unpickling.calls == []


# --- (e) JSON is decoded in every mode ----------------------------------------------------

MODES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (handle fields, poll_job / JobSpec options)
    "untrusted": ({}, {}),
    "trusted": ({"trusted_output": True}, {}),
    "trusted-pickle-off": ({"trusted_output": True}, {"allow_pickle": False}),
    "untrusted-pickle-on": ({}, {"allow_pickle": True}),
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("shape", sorted(JSON_OUTPUTS))
def test_poll_job_decodes_json_output_in_every_mode(
    sim: Simulator, forbid_unpickling: Spy, shape: str, mode: str
) -> None:
    handle_fields, options = MODES[mode]
    handle = submit(sim, f"json-{shape}-{mode}", JSON_OUTPUTS[shape], **handle_fields)

    result, events = watch(sim, handle, **options)

    assert result.ok and result.metrics == JSON_METRICS, result
    assert forbid_unpickling.calls == []
    assert verify(events).ok


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_supervisor_decodes_json_output_in_every_mode(
    sim: Simulator, forbid_unpickling: Spy, mode: str
) -> None:
    handle_fields, options = MODES[mode]
    jobs = [
        JobSpec(
            submit(sim, f"sup-json-{shape}-{mode}", output, **handle_fields),
            stream=shape,
            **options,
        )
        for shape, output in sorted(JSON_OUTPUTS.items())
    ]

    results = supervise(sim, *jobs)

    for shape in JSON_OUTPUTS:
        assert results[shape].ok and results[shape].metrics == JSON_METRICS, results[shape]
    assert forbid_unpickling.calls == []
