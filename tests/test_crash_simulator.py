"""Crash points everywhere, over the simulator: SIGKILL a watcher after any append, reattach.

Every built-in simulator scenario × every append boundary of an uninterrupted watch ×
SQLite, JSONL and Postgres (Postgres when `FLASHFSM_TEST_POSTGRES_DSN` is set; every
boundary there too).

The watcher is the real thing: `poll_job` in a forked process, with the real
`RunpodClient` over loopback HTTP to a `Simulator` that runs in the test process, and the
real Hub readers (`make_hf_heartbeat_reader`, `make_hf_failure_detail_reader`) against the
simulator's Hub for the scenarios whose workers write to it. The child's clock is the
simulator's manual clock, over its control route (`GET /_sim/clock`; a wait is
`POST /_sim/clock {"advance": s}`), so the killed watcher, the one that reattaches and the
uninterrupted reference all judge by one simulated time.

For each scenario an uninterrupted watch gives the reference log. Then, for every
boundary k (the stream length after each of its appends), a watcher is SIGKILLed right
after the append that brings the stream to k events, and a new one reattaches and
finishes. The verdict (state, rule, failure) and its time must equal the reference's, the
log must have seqs 0..n-1 with no duplicate id, `verify` must accept it, and it must hold
exactly one reattaching `WatchStarted` when the kill came before the verdict.

Why the runs are comparable (checked, not assumed):

- A fresh `Simulator` on a manual clock starting at `T0` per run (the reference, and each
  k), with the same endpoint and the job submitted at `T0`: every run starts from the same
  world. One long-lived simulator would not do: its clock cannot go back, and an
  endpoint's `/health` job counts, the Hub's commits and the request log accumulate.
  A simulator starts and stops in milliseconds.
- The simulated job is a pure function of sim time since its submission: `World.tick()`
  replays each due step at its own scripted time, whenever the next request comes; the
  heartbeat `ts` is the step's time; `/health` is the endpoint's standing workers plus
  its one job's; nothing answers by request count (faults do, and none is scheduled
  here) or by wall time (the clock is manual; `runsync`'s real-time wait is not used).
  The random parts are ids (endpoint, job, Hub commits), which no verdict reads.
- Hub commit ids are unique per simulator. They were once a per-simulator counter, so
  two simulators made equal commits holding different files, and the Hub cache these
  runs share (it files a download under its commit, and `huggingface_hub` serves what it
  holds for a commit even with `force_download`) handed `completed_error_retriable` the
  heartbeat `completed_error` wrote: a FAILED verdict instead of PREEMPTED.
- The watcher's only clock moves are its own waits, so a SIGKILL right after an append
  leaves the sim clock at that event's time, which is where the reattaching watcher
  starts: no time passes unwatched, and the reattach charges no gap to any timer.
- The Hub readers run with their defaults. Regular heartbeat reads are paced by the job
  core from the log (`GracePolicy.heartbeat_every_s`, 30 s), not by a reader's own gate:
  such a gate keeps the last read's time in process memory, which a crash loses, and a
  reattached reader then read at its first poll where the uninterrupted one's gate had
  skipped (`training_stall`, with a 10 s poll and `stall_after_s=100`, concluded at +350 s
  uninterrupted and at +360 or +370 s after a reattach, at 20 of its 44 boundaries). The
  failure-detail reader is read only forced, past its gate.

Speed: children are forked from this already-imported, warmed-up process (`_warm`); each
scenario's poll interval and graces bring its verdict in 9–20 events (`WATCH`): 205
boundaries per store when this was written, 615 crash points with Postgres.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import huggingface_hub
import pytest

from flashfsm import JobHandle, poll_job, verify
from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
)
from flashfsm.adapters.runpod import RunpodClient, default_ssl_context
from flashfsm.adapters.simulator import SimClock, Simulator, builtin_scenarios
from flashfsm.adapters.stores import open_store
from tests.store_support import (
    KillAfter,
    append_boundaries,
    check_reattached,
    crash_store_kinds,
    read_stream,
    run_in_child,
    store_locations,
    verdict_of,
)

T0 = 1_700_000_000.0
STREAM = "job-sim-crash"
HF_REPO = "flashfsm-crash/runs"
PHASE, RUN_ID, SEED = "sft", "crash", 0
PREFIX = heartbeat_prefix(PHASE, RUN_ID, SEED)
SCENARIOS = builtin_scenarios()


@dataclass(frozen=True)
class Watch:
    """How a scenario is watched (`poll_job` keywords) and the verdict it comes to."""

    policy: dict[str, float]
    state: str
    rule: str


#: Per scenario: a poll interval and graces that bring the verdict in few polls (long
#: intervals where the scenario is long: `training` lasts 32 minutes), and that verdict.
#: The reference must reach it: a run that agrees with itself about a wrong verdict (a
#: stale heartbeat, say) is caught here, not by the crash comparison.
WATCH: dict[str, Watch] = {
    "completed_envelope": Watch({"interval_s": 20}, "SUCCEEDED", "completed"),
    "completed_error": Watch({"interval_s": 30}, "FAILED", "completed_with_error"),
    "completed_error_retriable": Watch({"interval_s": 30}, "PREEMPTED", "completed_with_error"),
    "completed_no_output": Watch({"interval_s": 20}, "FAILED", "completed_with_error"),
    "crash_loop": Watch({"interval_s": 20, "unhealthy_grace_s": 60}, "STALLED", "unhealthy_worker"),
    "failed": Watch({"interval_s": 20}, "FAILED", "worker_failed"),
    "failed_retriable": Watch({"interval_s": 20}, "PREEMPTED", "worker_failed"),
    "no_capacity": Watch({"interval_s": 20, "queue_grace_s": 60}, "NO_CAPACITY", "queue_grace"),
    "result_expired": Watch({"interval_s": 20}, "SUCCEEDED", "completed"),
    # setup heartbeats 20 minutes apart: longer than the stall window, within setup grace
    "slow_cold_start": Watch({"interval_s": 300}, "SUCCEEDED", "completed"),
    "success": Watch({"interval_s": 20}, "SUCCEEDED", "completed"),
    "throttled": Watch(
        {"interval_s": 20, "throttled_grace_s": 60}, "NO_CAPACITY", "throttled_worker"
    ),
    "timed_out": Watch({"interval_s": 30}, "PREEMPTED", "platform_termination"),
    "training": Watch({"interval_s": 300}, "SUCCEEDED", "completed"),
    "training_stall": Watch({"interval_s": 60, "stall_after_s": 300}, "STALLED", "stall"),
    "ttl_expired": Watch({"interval_s": 120}, "LOST", "job_lost"),  # 404 after its TTL
    "worker_death": Watch({"interval_s": 60}, "SUCCEEDED", "completed"),  # after a requeue
    # the queue's cases, told apart by the worker records (D10)
    "slow_image_pull": Watch({"interval_s": 60}, "SUCCEEDED", "completed"),
    "crash_loop_queue": Watch({"interval_s": 20, "queue_grace_s": 60}, "STALLED", "crash_loop"),
    "timed_out_in_queue": Watch({"interval_s": 30}, "NO_CAPACITY", "expired_in_queue"),
}


def writes_to_hub(scenario: str) -> bool:
    """Whether the scenario's worker writes heartbeats or files (then the watch reads them)."""
    return any(s.heartbeat is not None or s.files for s in SCENARIOS[scenario].steps)


# --- the watcher (runs in a forked child) --------------------------------------------------


class RemoteSimClock:
    """The simulator's manual clock, over its control route: `clock()` and `clock.sleep(s)`."""

    def __init__(self, url: str):
        self._http = httpx.Client(base_url=url, timeout=10, verify=default_ssl_context())

    def __call__(self) -> float:
        answer = self._http.get("/_sim/clock")
        answer.raise_for_status()
        return answer.json()["now"]

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._http.post("/_sim/clock", json={"advance": seconds}).raise_for_status()

    def close(self) -> None:
        self._http.close()


@dataclass(frozen=True)
class SimJob:
    """A job submitted to a running simulator: what a watcher process needs to watch it."""

    scenario: str
    url: str
    key: str
    handle: JobHandle
    cache_dir: str


def watch_job(job: SimJob, store_url: str, kill_after: int | None) -> None:
    """Watch `job` into the store at `store_url` (SIGKILLed once the stream has k events)."""
    clock = RemoteSimClock(job.url)
    readers: dict[str, Any] = {}
    if writes_to_hub(job.scenario):
        hub = {"clock": clock, "endpoint": job.url, "cache_dir": job.cache_dir}
        readers = {
            "heartbeat_reader": make_hf_heartbeat_reader(HF_REPO, PREFIX, **hub),
            "failure_detail_reader": make_hf_failure_detail_reader(HF_REPO, PREFIX, PHASE, **hub),
        }
    store = open_store(store_url)
    client = RunpodClient(
        job.key,
        endpoint_base_url=f"{job.url}/v2",
        api_base_url=job.url,
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    try:
        poll_job(
            job.handle,
            client=client,
            clock=clock,
            sleep=clock.sleep,
            store=KillAfter(store, kill_after),
            stream=STREAM,
            **readers,
            **WATCH[job.scenario].policy,
        )
    finally:
        client.close()
        store.close()
        clock.close()


# --- the test ------------------------------------------------------------------------------


@contextmanager
def fresh_job(scenario: str, cache_dir: Path) -> Iterator[SimJob]:
    """A new simulator on a manual clock at `T0`, with the scenario's job submitted at `T0`."""
    with Simulator(clock=SimClock(speed=0, start=T0)) as sim:
        endpoint = sim.add_endpoint(f"flash-crash-{scenario}".replace("_", "-"), hf_repo=HF_REPO)
        job_input = {
            "scenario": scenario,
            "hf_repo": HF_REPO,
            "phase": PHASE,
            "run_id": RUN_ID,
            "seed": SEED,
        }
        job_id = sim.submit(endpoint, job_input)
        handle = JobHandle(endpoint, f"flash-crash-{scenario}", job_id, submitted_at=T0)
        yield SimJob(scenario, sim.url, sim.accounts[0].key, handle, str(cache_dir))
        assert sim.errors == [], sim.errors[0]


#: How this process's Hub client was made (`_warm`), for the children to make theirs alike.
_HUB_CLIENT: dict[str, Any] = {}


def _hub_client() -> Any:
    """huggingface_hub's client as this process made it, on the TLS context it already has.

    huggingface_hub drops its client in a forked child; made afresh, it would load the CA
    bundle again (~20 ms in each of hundreds of children). Same class, hooks, redirects
    and timeout; the verifying context is `default_ssl_context()`, built before the forks.
    """
    return _HUB_CLIENT["class"](
        event_hooks=_HUB_CLIENT["event_hooks"],
        follow_redirects=_HUB_CLIENT["follow_redirects"],
        timeout=_HUB_CLIENT["timeout"],
        verify=default_ssl_context(),
    )


def watch_in_child(job: SimJob, store_url: str, kill_after: int | None) -> None:
    """`watch_job` in a forked child (the Hub client on the inherited TLS context)."""
    if _HUB_CLIENT:
        huggingface_hub.set_client_factory(_hub_client)
    watch_job(job, store_url, kill_after)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    """One Hub download cache for every run of every scenario, as one machine would have."""
    return tmp_path_factory.mktemp("hf-cache")


@pytest.fixture(scope="module", autouse=True)
def _warm(hub_cache):
    """One watch in this process first, so the forked watchers inherit its warm state.

    Lazy imports, the shared TLS context and huggingface_hub's agent registry (which it
    would otherwise look up once per process) are then paid once, not by every child.
    """
    with fresh_job("completed_error", hub_cache) as job:
        watch_job(job, "memory://", None)
    session = huggingface_hub.get_session()
    if hasattr(huggingface_hub, "set_client_factory") and hasattr(session, "event_hooks"):
        _HUB_CLIENT.update(  # huggingface_hub >= 1 (an httpx client); older ones use requests
            {
                "class": type(session),
                "event_hooks": session.event_hooks,
                "follow_redirects": session.follow_redirects,
                "timeout": session.timeout,
            }
        )
    if hasattr(huggingface_hub, "close_session"):
        huggingface_hub.close_session()  # no pooled Hub connection crosses a fork
    yield
    _HUB_CLIENT.clear()


def test_every_builtin_scenario_is_watched():
    assert sorted(WATCH) == sorted(SCENARIOS)


@pytest.mark.parametrize("store_kind", crash_store_kinds())
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sigkill_after_any_append_then_reattach_reaches_the_same_verdict(
    scenario, store_kind, tmp_path, hub_cache
):
    with store_locations(store_kind, tmp_path) as new_url:
        reference_url = new_url()
        with fresh_job(scenario, hub_cache) as job:
            assert run_in_child(watch_in_child, job, reference_url, None) == 0
        reference = read_stream(reference_url, STREAM)
        expected = verdict_of(reference)
        assert expected[:2] == (WATCH[scenario].state, WATCH[scenario].rule), expected
        assert verify(reference).ok

        for k in append_boundaries(reference):
            url = new_url()
            with fresh_job(scenario, hub_cache) as job:
                code = run_in_child(watch_in_child, job, url, k)
                assert code == -signal.SIGKILL, f"k={k}: the watcher was not killed (exit {code})"
                assert len(read_stream(url, STREAM)) >= k
                assert run_in_child(watch_in_child, job, url, None) == 0, (
                    f"k={k}: the reattach failed"
                )
            check_reattached(read_stream(url, STREAM), expected, k, len(reference))
