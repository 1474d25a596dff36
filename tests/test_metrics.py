"""flashfsm.metrics: a scrape, parsed by the Prometheus text parser, says what the store says.

Each store metric is checked against what another reader of the same store says: the
streams, verdicts and results against `flashfsm ls --json`, the money against `flashfsm cost
--json`, the leases against `flashfsm ls --owner --json`, the errors, takeovers and
snapshots against the events and snapshots read back from the store. Every scrape goes over
HTTP on loopback, and `flashfsm supervise --metrics-port` is scraped while it runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from flashfsm import JobHandle, open_store
from flashfsm.adapters.simulator import Simulator
from flashfsm.cli import app
from flashfsm.demo import run_demo
from flashfsm.events.models import (
    Concluded,
    HealthProbeFailed,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    WatchStarted,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fleet import Fleet, hand_off_job
from flashfsm.fsm.snapshot import FOLD_VERSION
from flashfsm.metrics import (
    POLL_LAG_BUCKETS,
    LagHistogram,
    StoreCollector,
    StoreFacts,
    metrics_registry,
    serve_metrics,
)
from flashfsm.postmortem.ledger import WASTE_CAUSES
from flashfsm.store_facts import error_class_label
from flashfsm.watch import submission
from flashfsm.writer import JOB, NEWER_WATCH_WINS, StreamWriter

FLASHFSM = [sys.executable, "-c", "from flashfsm.cli import main; main()"]
T0 = 1_700_000_000.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, by (sample name, sorted labels), through the Prometheus text
    parser."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return out


def by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The samples of one metric keyed by the values of `labels`."""
    return {
        tuple(dict(key)[label] for label in labels): value
        for (sample, key), value in samples.items()
        if sample == name
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, tuple(sorted(labels.items()))]


def scrape_registry(registry) -> Samples:
    """Serve `registry` on a free loopback port, scrape it once over HTTP, stop serving."""
    server = serve_metrics(registry, "127.0.0.1", 0)
    try:
        reply = httpx.get(server.url, timeout=10)
    finally:
        server.close()
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return parse(reply.text)


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- a demo store: streams, verdicts and money ------------------------------------------------


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory) -> str:
    """A store written by the demo: six runs, nine jobs, every kind of verdict it plays."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo')}/demo.db"
    run_demo(url, say=lambda _line: None, tag="abcdef")
    return url


def test_a_scrape_of_a_demo_store_counts_its_streams_and_verdicts_as_ls_lists_them(demo_url):
    samples = scrape_registry(metrics_registry(demo_url, process=False))
    rows = cli_json("ls", "--store", demo_url, "--json")["streams"]
    assert len(rows) == 15

    assert value(samples, "flashfsm_store_up") == 1
    assert by(samples, "flashfsm_streams", "kind", "state") == Counter(
        (r["kind"], r["state"]) for r in rows
    )
    assert by(samples, "flashfsm_open_streams", "kind", "state") == Counter(
        (r["kind"], r["state"]) for r in rows if r["ok"] is None
    )
    verdicts = by(samples, "flashfsm_job_verdicts_total", "rule", "failure")
    assert verdicts == Counter(
        (r["rule"], r["failure"] or "none") for r in rows if r["kind"] == "job"
    )
    assert verdicts[("queue_grace", "no_capacity")] == 1  # (the demo's walk)
    assert verdicts[("completed", "none")] == 5
    assert by(samples, "flashfsm_run_results_total", "failure") == Counter(
        (r["failure"] or "none",) for r in rows if r["kind"] == "run"
    )
    newest = max(r["last_at"] for r in rows)
    assert value(samples, "flashfsm_store_newest_event_timestamp_seconds") == newest
    assert value(samples, "flashfsm_damaged_streams") == 0
    assert value(samples, "flashfsm_takeovers_total") == 0


def test_a_scrape_of_a_demo_store_bills_and_wastes_what_cost_says_by_cause(demo_url):
    samples = scrape_registry(metrics_registry(demo_url, process=False))
    cost = cli_json("cost", "--store", demo_url, "--json", "--by", "cause")
    groups = {g["key"]: g for g in cost["groups"]}
    billed_s = by(samples, "flashfsm_billed_seconds", "cause")
    dollars = by(samples, "flashfsm_billed_dollars", "cause")
    wasted = by(samples, "flashfsm_wasted_dollars", "cause")

    assert set(billed_s) == set(dollars) == {(c,) for c in groups} | {("preempted",), ("idle",)}
    for (cause,), seconds in billed_s.items():
        group = groups.get(cause)
        assert seconds == (group["billed_s"] if group else 0.0), cause
        assert dollars[cause,] == pytest.approx(group["money"] if group else 0.0, rel=1e-12)
    assert {c for (c,) in wasted} == {c.value for c in WASTE_CAUSES}
    for (cause,), money in wasted.items():
        group = groups.get(cause)
        assert money == pytest.approx(group["waste_money"] if group else 0.0, rel=1e-12)

    total = cost["total"]
    assert sum(billed_s.values()) == pytest.approx(total["billed_s"], rel=1e-12)
    assert sum(dollars.values()) == pytest.approx(total["money"], rel=1e-12)
    assert sum(wasted.values()) == pytest.approx(total["waste_money"], rel=1e-12)
    assert total["waste_money"] > 0.4  # (the stall's 25 minutes)
    assert value(samples, "flashfsm_open_bills") == total["open_attempts"]
    unpriced = [
        a
        for led in cost["ledgers"]
        for a in led["attempts"]
        if a["billed_s"] > 0 and a["price_per_hour"] is None
    ]
    assert value(samples, "flashfsm_unpriced_attempts") == len(unpriced)


# --- errors and takeovers, from the events ----------------------------------------------------


SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def errors_url(tmp_path) -> str:
    """One handed-off job whose log records failed calls and three changes of watcher."""
    url = f"sqlite:///{tmp_path}/errors.db"
    store = open_store(url)
    try:
        hand_off_job(JobHandle("ep", "flash-ep", "j1", submitted_at=T0), store, clock=lambda: T0)
        writer = StreamWriter(store, "job-j1", JOB, NEWER_WATCH_WINS)
        writer.open()
        at = iter(range(1, 100))

        def watch(watcher: str) -> None:
            writer.record(WatchStarted, T0 + next(at), watcher=watcher, reattach=True)

        watch("replica-a")
        writer.record(StatusFetchFailed, T0 + next(at), error_class="ConnectError")
        for _ in range(2):
            writer.record(
                StatusFetchFailed,
                T0 + next(at),
                error_class="HTTPStatusError",
                http_status=503,
                message=f"Bearer {SECRET} refused",
            )
        watch("replica-b")  # a takeover
        watch("replica-b")  # the same watcher again: none
        writer.record(
            HeartbeatObserved, T0 + next(at), found=False, read_error="TimeoutError: timed out"
        )
        writer.record(
            HeartbeatObserved, T0 + next(at), found=False, read_error="TransientReadError HTTP 502"
        )
        writer.record(HeartbeatObserved, T0 + next(at), found=True, stage="train", step=1)
        writer.record(HealthProbeFailed, T0 + next(at), error_class=f"token {SECRET}")
        watch("replica-a")  # a takeover back
    finally:
        store.close()
    return url


def test_recorded_errors_count_by_event_class_and_status_and_takeovers_by_watcher(errors_url):
    samples = scrape_registry(metrics_registry(errors_url, process=False))
    errors = by(samples, "flashfsm_errors_total", "event", "error_class", "http_status")
    assert errors == {
        ("StatusFetchFailed", "ConnectError", "none"): 1,
        ("StatusFetchFailed", "HTTPStatusError", "503"): 2,
        ("HeartbeatObserved", "TimeoutError", "none"): 1,
        ("HeartbeatObserved", "TransientReadError", "502"): 1,
        ("HealthProbeFailed", "other", "none"): 1,  # (not a class name: never a label)
    }
    store = open_store(errors_url, read_only=True)
    try:
        log = store.read("job-j1")
    finally:
        store.close()
    failed = [e for e in log if e.kind in ("StatusFetchFailed", "HealthProbeFailed")]
    failed_reads = [e for e in log if e.kind == "HeartbeatObserved" and e.read_error]
    assert sum(errors.values()) == len(failed) + len(failed_reads) == 6
    watchers = [e.watcher for e in log if isinstance(e, WatchStarted)]
    assert watchers == ["replica-a", "replica-b", "replica-b", "replica-a"]
    assert value(samples, "flashfsm_takeovers_total") == 2
    assert by(samples, "flashfsm_open_streams", "kind", "state") == {("job", "QUEUED"): 1}


def test_no_label_holds_outside_text(errors_url):
    server = serve_metrics(metrics_registry(errors_url, process=False), "127.0.0.1", 0)
    try:
        text = httpx.get(server.url, timeout=10).text
    finally:
        server.close()
    assert SECRET not in text and SECRET[:8] not in text
    assert "refused" not in text and "timed out" not in text and "job-j1" not in text
    assert error_class_label("httpx.ConnectError") == "httpx.ConnectError"
    for bad in ("", "a b", "x" * 65, "Bearer abc", "1Class", "Class: message"):
        assert error_class_label(bad) == "other"


# --- leases and replicas, from the open-streams index -------------------------------------------


def hand_off_and_lease(store: Any) -> tuple[Any, Any, Any]:
    """Jobs a to d handed off to `store`, replicas r1 and r2 joined, and their leases:
    job-a held for a minute, job-b for 0.2 s, job-c marked failed to start, job-d never
    claimed. The leases of a, b and c."""
    for n, name in enumerate(("a", "b", "c", "d")):
        handle = JobHandle("ep", "flash-ep", name, submitted_at=T0 + n)
        hand_off_job(handle, store, clock=lambda n=n: T0 + n)
    assert store.join("r1", 60.0) is not None and store.join("r2", 60.0) is not None
    [held] = store.claim("r1", 60.0, 1)
    [short] = store.claim("r2", 0.2, 1)
    [failing] = store.claim("r1", 60.0, 1)
    assert store.mark_failed("r1", failing, "ValueError: a damaged log")
    return held, short, failing


def test_leases_and_replicas_equal_what_ls_owner_and_the_index_say(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    store = open_store(url)
    try:
        held, short, failing = hand_off_and_lease(store)
        time.sleep(0.4)  # job-b's lease lapses; job-d was never claimed
        assert (held.stream, short.stream, failing.stream) == ("job-a", "job-b", "job-c")
        replicas = store.replicas()
    finally:
        store.close()

    samples = scrape_registry(metrics_registry(url, process=False))
    rows = cli_json("ls", "--owner", "--store", url, "--json")["open"]
    leased = [r for r in rows if r["handoff"] and r["parent"] is None]
    expected = {
        "held": sum(1 for r in leased if r["owner"] and not r["failed_to_start"]),
        "expired": sum(
            1
            for r in leased
            if r["lease_left_s"] is not None and r["lease_left_s"] <= 0 and not r["owner"]
        ),
        "free": sum(1 for r in leased if r["lease_left_s"] is None and not r["failed_to_start"]),
        "failed": sum(1 for r in leased if r["failed_to_start"]),
    }
    assert expected == {"held": 1, "expired": 1, "free": 1, "failed": 1}
    assert {s: v for (s,), v in by(samples, "flashfsm_leases", "state").items()} == expected
    assert value(samples, "flashfsm_replicas") == len(replicas) == 2
    [left] = [r["lease_left_s"] for r in leased if r["stream"] == "job-a"]
    [lapsed] = [r["lease_left_s"] for r in leased if r["stream"] == "job-b"]
    assert value(samples, "flashfsm_lease_min_remaining_seconds") == pytest.approx(left, abs=2)
    assert 55 < value(samples, "flashfsm_lease_min_remaining_seconds") <= 60
    assert value(samples, "flashfsm_lease_max_expired_seconds") == pytest.approx(-lapsed, abs=2)
    assert value(samples, "flashfsm_lease_max_expired_seconds") > 0


# --- snapshots -----------------------------------------------------------------------------------


def write_snapshot_streams(store: Any) -> None:
    """Four handed-off job streams of 11, 4, 7 and 30 polls (the last one concluded), the
    first with a snapshot of this fold version at seq 5, the second one of an older version
    at seq 2, the third with none."""
    for name, polls in (("current", 11), ("old", 4), ("bare", 7), ("done", 30)):
        handle = JobHandle("ep", "flash-ep", name, submitted_at=T0)
        hand_off_job(handle, store, clock=lambda: T0)
        writer = StreamWriter(store, f"job-{name}", JOB, NEWER_WATCH_WINS)
        writer.open()
        writer.record(WatchStarted, T0 + 1, watcher="w")
        for n in range(polls):
            writer.record(StatusFetchFailed, T0 + 2 + n, error_class="ConnectError")
        if name == "done":
            writer.record(Concluded, T0 + 99, state="POLL_ERROR", ok=False, rule="poll_errors")
    store.save_snapshot("job-current", 5, FOLD_VERSION, b"{}")
    store.save_snapshot("job-old", 2, FOLD_VERSION - 1, b"{}")


def test_snapshot_lag_is_the_events_a_reattach_folds_past_each_open_job_s_snapshot(tmp_path):
    url = f"sqlite:///{tmp_path}/snapshots.db"
    store = open_store(url)
    try:
        write_snapshot_streams(store)
        heads = {name: store.read(name)[-1].seq for name in store.streams()}
        kept = {name: store.load_snapshot(name) for name in heads}
    finally:
        store.close()
    assert heads == {"job-current": 12, "job-old": 5, "job-bare": 8, "job-done": 32}
    assert kept["job-current"][:2] == (5, FOLD_VERSION) and kept["job-bare"] is None

    samples = scrape_registry(metrics_registry(url, process=False))
    states = {s: v for (s,), v in by(samples, "flashfsm_snapshots", "state").items()}
    assert states == {"current": 1, "other_version": 1, "none": 1}  # (job-done is closed)
    lags = {
        "job-current": heads["job-current"] - 5,  # 7 events past the snapshot
        "job-old": heads["job-old"] + 1,  # another fold version: the whole log
        "job-bare": heads["job-bare"] + 1,  # no snapshot: the whole log
    }
    assert value(samples, "flashfsm_snapshot_max_lag_events") == max(lags.values()) == 9


def test_a_store_that_keeps_no_index_or_snapshots_leaves_their_metrics_out(tmp_path):
    url = f"jsonl://{tmp_path}/logs"
    store = open_store(url)
    try:
        handle = JobHandle("ep", "flash-ep", "j", submitted_at=T0)
        writer = StreamWriter(store, "job-j", JOB, NEWER_WATCH_WINS)
        writer.record(JobSubmitted, T0, **submission(handle, GracePolicy()))
    finally:
        store.close()
    samples = scrape_registry(metrics_registry(url, process=False))
    names = {name for name, _ in samples}
    assert value(samples, "flashfsm_streams", kind="job", state="QUEUED") == 1
    assert not names & {
        "flashfsm_replicas",
        "flashfsm_leases",
        "flashfsm_snapshots",
        "flashfsm_snapshot_max_lag_events",
    }


# --- the collector: caching, and a store that cannot be read ------------------------------------


def test_the_store_is_read_at_most_once_per_max_age_and_a_failed_read_is_store_up_0():
    reads: list[float] = []
    now = [0.0]
    broken = [False]

    def facts() -> StoreFacts:
        if broken[0]:
            raise OSError("the database is unreachable: password=hunter2")
        reads.append(now[0])
        return StoreFacts(takeovers=len(reads))

    collector = StoreCollector(facts, max_age_s=10.0, clock=lambda: now[0])

    def scrape() -> Samples:
        return parse(
            "".join(
                f"# TYPE {m.name} {m.type}\n"
                + "".join(f"{s.name} {s.value}\n" for s in m.samples if not s.labels)
                for m in collector.collect()
            )
        )

    assert value(scrape(), "flashfsm_takeovers_total") == 1
    now[0] = 9.9
    assert value(scrape(), "flashfsm_takeovers_total") == 1 and reads == [0.0]  # (served again)
    now[0] = 10.0
    assert value(scrape(), "flashfsm_takeovers_total") == 2 and reads == [0.0, 10.0]
    broken[0], now[0] = True, 25.0
    failed = scrape()
    assert value(failed, "flashfsm_store_up") == 0
    assert {name for name, _ in failed} == {"flashfsm_store_up"}


def test_a_registry_over_a_missing_store_answers_store_up_0_and_creates_nothing(tmp_path):
    samples = scrape_registry(metrics_registry(f"sqlite:///{tmp_path}/none.db", process=False))
    assert value(samples, "flashfsm_store_up") == 0
    assert not (tmp_path / "none.db").exists()


# --- this process: poll lag and a replica's counters ---------------------------------------------


def test_lag_buckets_count_each_poll_under_the_first_bound_it_does_not_exceed():
    lag = LagHistogram((0.1, 1.0))
    for seconds in (0.0, 0.1, 0.10001, 1.0, 7.0):
        lag.observe(seconds)
    family = lag.family()
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 2, "1.0": 4, "+Inf": 5}
    [total] = [s.value for s in family.samples if s.name.endswith("_sum")]
    assert total == pytest.approx(8.20001)


def test_a_replica_s_scrape_counts_its_polls_lag_claims_and_verdicts(tmp_path):
    url = f"sqlite:///{tmp_path}/replica.db"
    lives = ("success", "crash_loop", "no_capacity")
    lag = LagHistogram()
    with Simulator(speed=0) as sim:
        store = open_store(url)
        for life in lives:
            endpoint = sim.add_endpoint(f"flash-{life}", scenario=life)
            handle = JobHandle(endpoint, f"flash-{life}", sim.submit(endpoint, {}))
            hand_off_job(handle, store, stream=f"job-{life}", clock=sim.clock.now)

        async def main() -> Fleet:
            async with sim.async_client() as client:
                fleet = Fleet(
                    store,
                    client,
                    owner="replica-m",
                    lease_s=3,
                    tick_s=0.3,
                    clock=sim.clock.now,
                    sleep=sim.clock.async_sleep,
                    lag_observer=lag.observe,
                )
                await fleet.run(until=lambda: not store.open_streams())
                return fleet

        fleet = asyncio.run(main())
        store.close()
    samples = scrape_registry(metrics_registry(url, fleet=fleet, lag=lag, process=False))

    lags = fleet.supervisor.lag
    assert value(samples, "flashfsm_poll_lag_seconds_count") == len(lags) > 10
    assert value(samples, "flashfsm_poll_lag_seconds_sum") == pytest.approx(sum(lags))
    buckets = by(samples, "flashfsm_poll_lag_seconds_bucket", "le")
    for bound in POLL_LAG_BUCKETS:
        assert buckets[repr(bound),] == sum(1 for x in lags if x <= bound)
    assert buckets["+Inf",] == len(lags)
    assert value(samples, "flashfsm_replica_info", owner="replica-m") == 1
    assert value(samples, "flashfsm_replica_claims_total") == fleet.stats.claimed == 3
    assert value(samples, "flashfsm_replica_finished_total") == fleet.stats.finished == 3
    assert value(samples, "flashfsm_replica_leases_lost_total") == fleet.stats.lost == 0
    assert value(samples, "flashfsm_replica_streams_held") == 0
    verdicts = by(samples, "flashfsm_job_verdicts_total", "rule", "failure")
    assert verdicts == {
        ("completed", "none"): 1,
        ("unhealthy_worker", "stalled"): 1,
        ("queue_grace", "no_capacity"): 1,
    }


# --- flashfsm supervise --metrics-port ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    """A simulator whose successful job completes 3 s after its submission (90 s of its
    time): the replica, polling every 0.5 s, polls it a few times late or on time first."""
    with Simulator(speed=30) as sim:
        yield sim


STREAMS = ("job-ok", "job-gone", "job-queued")


def test_supervise_serves_its_replica_s_and_its_store_s_metrics_while_it_runs(
    tmp_path: Path, simulator: Simulator
):
    url = f"sqlite:///{tmp_path}/fleet.db"
    store = open_store(url)
    try:
        ok = simulator.add_endpoint("flash-ok", scenario="success")
        job = simulator.submit(ok, {})
        hand_off_job(JobHandle(ok, "flash-ok", job), store, stream="job-ok")
        gone = simulator.add_endpoint("flash-gone", scenario="success")
        hand_off_job(JobHandle(gone, "flash-gone", "no-such-job"), store, stream="job-gone")
        queued = simulator.add_endpoint("flash-queued", scenario="no_capacity")
        hand_off_job(  # polled for 2 s of the replica's clock, however late it starts
            JobHandle(queued, "flash-queued", simulator.submit(queued, {})),
            store,
            stream="job-queued",
            policy=GracePolicy(queue_grace_s=2.0, probe_every_s=0.5),
        )
    finally:
        store.close()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "FLASHFSM_STORE"}
    env.update(simulator.env(hf=False), HOME=str(tmp_path))
    argv = ["supervise", "--store", url, "--interval", "0.5", "--owner", "replica-m"]
    replica = subprocess.Popen(
        [*FLASHFSM, *argv, "--metrics-port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _concluded(url, STREAMS):
            assert replica.poll() is None, replica.communicate()[0]
            assert time.monotonic() < deadline, "no verdicts in 30 s"
            time.sleep(0.2)
        reply = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert replica.poll() is None  # (scraped while it runs)
    finally:
        replica.send_signal(signal.SIGTERM)
        out, _ = replica.communicate(timeout=30)
    assert replica.returncode == 0, out
    assert f"metrics on http://127.0.0.1:{port}/metrics" in out
    samples = parse(reply.text)

    rows = cli_json("ls", "--store", url, "--json")["streams"]
    assert by(samples, "flashfsm_job_verdicts_total", "rule", "failure") == Counter(
        (r["rule"], r["failure"] or "none") for r in rows
    )
    assert len(rows) == 3 and not by(samples, "flashfsm_open_streams", "kind", "state")
    assert {r["stream"]: r["rule"] for r in rows} == {
        "job-ok": "completed",
        "job-gone": "job_lost",
        "job-queued": "queue_grace",
    }
    store = open_store(url, read_only=True)
    try:
        logs = {name: store.read(name) for name in STREAMS}
    finally:
        store.close()
    failed = Counter(
        ("StatusFetchFailed", e.error_class, str(e.http_status))
        for log in logs.values()
        for e in log
        if isinstance(e, StatusFetchFailed)
    )
    assert failed == {("StatusFetchFailed", "RunpodApiError", "404"): 1}  # (the lost job)
    errors = by(samples, "flashfsm_errors_total", "event", "error_class", "http_status")
    assert {k: v for k, v in errors.items() if k[0] == "StatusFetchFailed"} == failed
    assert value(samples, "flashfsm_replicas") == 1
    assert value(samples, "flashfsm_replica_info", owner="replica-m") == 1
    assert value(samples, "flashfsm_replica_claims_total") == 3
    assert value(samples, "flashfsm_replica_finished_total") == 3
    assert value(samples, "flashfsm_replica_streams_held") == 0
    fetches = sum(
        e.kind in ("StatusObserved", "StatusFetchFailed") for g in logs.values() for e in g
    )
    assert 3 <= value(samples, "flashfsm_poll_lag_seconds_count") <= fetches
    assert value(samples, "process_resident_memory_bytes") > 0
    assert "drained: 3 claimed, 3 finished, 0 lost, 0 failed" in out


def _concluded(url: str, streams: tuple[str, ...]) -> bool:
    store = open_store(url, read_only=True)
    try:
        return all((log := store.read(s)) and log[-1].kind == "Concluded" for s in streams)
    finally:
        store.close()


@pytest.mark.parametrize("port", ["0", "65536", "-1"])
def test_supervise_refuses_a_metrics_port_out_of_range_in_one_line(tmp_path, port):
    result = CliRunner().invoke(
        app, ["supervise", "--store", f"sqlite:///{tmp_path}/x.db", "--metrics-port", port]
    )
    assert result.exit_code == 1, result.output
    assert f"--metrics-port must be a port from 1 to 65535, not {port}" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()


def test_supervise_says_a_metrics_port_in_use_in_one_line_and_claims_nothing(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/x.db"
    hand_off_job(JobHandle("ep", "flash-ep", "j", submitted_at=T0), url)
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_test")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["supervise", "--store", url, "--metrics-port", str(port)])
    assert result.exit_code == 1, result.output
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in result.output
    store = open_store(url, read_only=True)
    try:
        assert [o.owner for o in store.open_streams()] == [None]  # nothing claimed
        assert store.replicas() == []  # never joined
    finally:
        store.close()
