"""The idle-endpoint sweeper, over real loopback HTTP against the simulator."""

from __future__ import annotations

import ast
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashfsm import IdleSweeper, MemoryStore, RunpodApiError, RunpodClient, SweepReport
from flashfsm.adapters.runpod import RetryPolicy
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.stores import open_store, path_url
from flashfsm.events.errors import ConcurrencyError, CorruptLogError
from flashfsm.events.models import EndpointReaped, IdleCleared, IdleSeen, StatusObserved
from flashfsm.fsm import sweep as rules
from flashfsm.fsm.sweep import Reading, idle_timers, read_health

KEY = "sweeper-test-key-8642"
ATTEMPTS = 2  # the test client's tries per idempotent call
START = 1_000_000.0
WORKER_KEYS = ("idle", "ready", "running", "initializing")
WORKLOADS: dict[str, dict[str, int]] = {
    "cold": {},
    "warm": {"idle": 1},
    "ready": {"ready": 1},
    "running": {"running": 1},
    "initializing": {"initializing": 1},
}


def client_for(sim: Simulator) -> RunpodClient:
    env = sim.env(hf=False)
    return RunpodClient(
        env["RUNPOD_API_KEY"].split(",")[0],
        endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
        api_base_url=env["RUNPOD_API_BASE_URL"],
        retry=RetryPolicy(attempts=ATTEMPTS, base_s=0.0),
        sleep=lambda _s: None,
        timeout=5.0,
    )


def set_workers(sim: Simulator, endpoint_id: str, workload: str) -> None:
    sim.configure_endpoint(endpoint_id, **{**dict.fromkeys(WORKER_KEYS, 0), **WORKLOADS[workload]})


def add(sim: Simulator, name: str, workload: str = "cold") -> str:
    endpoint_id = sim.add_endpoint(name, check_quota=False)
    set_workers(sim, endpoint_id, workload)
    return endpoint_id


def on(endpoint_id: str):
    """A fault filter: only requests about this endpoint."""
    return lambda request: f"/{endpoint_id}/" in f"{request.path}/"


def live_ids(sim: Simulator) -> set[str]:
    return {e["id"] for e in sim.endpoints()}


def log_of(store: Any, stream: str = "sweeper") -> list[Any]:
    events = store.read(stream)
    assert [e.seq for e in events] == list(range(len(events))), "seqs must be contiguous"
    return events


@pytest.fixture
def sim():
    with Simulator(clock=SimClock(speed=0, start=START), api_keys=(KEY,)) as s:
        yield s
        assert s.errors == [], s.errors[0]


@pytest.fixture
def client(sim):
    with client_for(sim) as c:
        yield c


@pytest.fixture
def store():
    return MemoryStore()


@pytest.fixture
def sweeper(client, store, sim):
    return IdleSweeper(client, store, clock=sim.clock)


# ----------------------------------------------------------------------- which endpoints


def test_only_flash_training_endpoints_are_considered(sim, sweeper):
    flash = {add(sim, "flash-a"), add(sim, "live-flash-b")}
    others = {add(sim, n) for n in ("other", "flashy-c", "live-other", "my-flash-d", "")}
    report = sweeper.sweep()
    assert set(report.deleted) == flash
    assert live_ids(sim) == others
    health_paths = {r.path for r in sim.requests_for("health")}
    assert health_paths == {f"/v2/{e}/health" for e in flash}  # others are never probed
    reaped = [e for e in log_of(sweeper.store) if isinstance(e, EndpointReaped)]
    assert {e.endpoint_id for e in reaped} == flash
    assert {e.endpoint_name for e in reaped} == {"flash-a", "live-flash-b"}


def test_protected_names_match_in_both_forms(sim, sweeper):
    bare_named, live_named, free = (
        add(sim, "flash-a"),
        add(sim, "live-flash-b"),
        add(sim, "flash-c"),
    )
    report = sweeper.sweep({"live-flash-a", "flash-b"})
    assert report.deleted == (free,)
    assert live_ids(sim) == {bare_named, live_named}
    assert sweeper.sweep({"flash-a", "live-flash-b"}).deleted == ()
    assert not any(bare_named in r.path or live_named in r.path for r in sim.requests_for("health"))
    assert sweeper.sweep("flash-a").deleted == (live_named,)  # a lone name is one name


def test_a_protected_endpoint_loses_its_idle_timer(sim, sweeper):
    endpoint = add(sim, "flash-a")
    sweeper.sweep(min_idle_s=60)
    assert sweeper.timers() == {endpoint: START}
    sim.clock.advance(120)
    report = sweeper.sweep({"flash-a"}, min_idle_s=60)
    assert report.deleted == () and report.cleared == (endpoint,)
    assert sweeper.timers() == {}
    cleared = log_of(sweeper.store)[-1]
    assert isinstance(cleared, IdleCleared) and cleared.reason == "protected"
    sim.clock.advance(30)
    assert sweeper.sweep(min_idle_s=60).deleted == ()  # the grace starts over
    assert sweeper.timers() == {endpoint: START + 150}


# ----------------------------------------------------------------------- busy or idle


def test_warm_idle_workers_are_reaped_only_with_reap_warm(sim, sweeper):
    cold, warm, ready = (
        add(sim, "flash-cold"),
        add(sim, "flash-warm", "warm"),
        add(sim, "flash-ready", "ready"),
    )
    report = sweeper.sweep(reap_warm=False)
    assert report.deleted == (cold,) and report.seen_idle == (cold,)
    assert live_ids(sim) == {warm, ready}
    assert set(sweeper.sweep(reap_warm=True).deleted) == {warm, ready}


def test_working_workers_and_pending_jobs_keep_an_endpoint(sim, sweeper):
    running, starting = add(sim, "flash-run", "running"), add(sim, "flash-init", "initializing")
    queued = add(sim, "flash-queued")
    sim.submit(queued, {"scenario": "no_capacity"})
    throttled = add(sim, "flash-throttled")  # a throttled worker is no work, but its job is
    sim.submit(throttled, {"scenario": "throttled"})
    report = sweeper.sweep(reap_warm=True)
    assert report.deleted == () and report.seen_idle == () and report.ok
    assert live_ids(sim) == {running, starting, queued, throttled}
    assert log_of(sweeper.store) == []  # nothing idle: nothing to record


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "missing_keys", "keys": ("workers",)},
        {"kind": "missing_keys", "keys": ("jobs",)},
        {"kind": 200, "body": {"workers": {}, "jobs": {}}},
        {"kind": 200, "body": {"workers": {"running": 0}, "jobs": None}},
        {"kind": 200, "body": {"workers": {"running": "0"}, "jobs": {}}},
        {"kind": "non_object"},
    ],
    ids=["no-workers", "no-jobs", "empty-workers", "null-jobs", "text-count", "list"],
)
def test_an_incomplete_health_answer_cannot_confirm_idle(sim, sweeper, fault):
    endpoint = add(sim, "flash-a")
    sweeper.sweep(min_idle_s=60)
    sim.clock.advance(100)
    kind = fault.pop("kind")
    sim.add_fault("health", kind, times=None, when=on(endpoint), **fault)
    report = sweeper.sweep(min_idle_s=60)
    assert report.deleted == () and report.cleared == (endpoint,)
    assert live_ids(sim) == {endpoint}
    assert sweeper.timers() == {}  # an unconfirmed reading breaks the idle run


def test_read_health_rules():
    idle = {"workers": {"idle": 0, "running": 0}, "jobs": {}}
    assert read_health(idle, reap_warm=False) is Reading.IDLE
    assert read_health({"workers": {"throttled": 2}, "jobs": {}}, reap_warm=False) is Reading.IDLE
    warm = {"workers": {"idle": 1}, "jobs": {"completed": 4}}
    assert read_health(warm, reap_warm=True) is Reading.IDLE
    assert read_health(warm, reap_warm=False) is Reading.BUSY
    assert (
        read_health({"workers": {"x": 0}, "jobs": {"inProgress": 1}}, reap_warm=True)
        is Reading.BUSY
    )
    for broken in (None, [], {}, {"workers": {}}, {"workers": {"running": -1}, "jobs": {}}):
        assert read_health(broken, reap_warm=True) is Reading.UNCONFIRMED
    assert rules.protected_names(["live-flash-a", "flash-b", ""]) == {"flash-a", "flash-b"}
    assert rules.is_flash_endpoint("live-flash-x") and not rules.is_flash_endpoint(
        "live-live-flash-x"
    )


# ----------------------------------------------------------------------- grace and timers


def test_idle_must_last_min_idle_s_across_sweeps(sim, sweeper):
    endpoint = add(sim, "flash-a")
    first = sweeper.sweep(min_idle_s=60)
    assert first.deleted == () and first.seen_idle == (endpoint,)
    sim.clock.advance(59)
    assert sweeper.sweep(min_idle_s=60).deleted == ()
    sim.clock.advance(1)
    assert sweeper.sweep(min_idle_s=60).deleted == (endpoint,)
    seen, reaped = log_of(sweeper.store)
    assert isinstance(seen, IdleSeen) and seen.since == START
    assert isinstance(reaped, EndpointReaped) and reaped.idle_s == 60 and reaped.at == START + 60


def test_an_injected_clock_drives_the_grace(client, store, sim):
    now = [5_000.0]
    sweeper = IdleSweeper(client, store, stream="reaper", clock=lambda: now[0])
    endpoint = add(sim, "flash-a")
    assert sweeper.sweep(min_idle_s=600).deleted == ()
    now[0] += 599.5
    assert sweeper.sweep(min_idle_s=600).deleted == ()
    now[0] += 0.5
    assert sweeper.sweep(min_idle_s=600).deleted == (endpoint,)
    assert store.streams() == ["reaper"]


def test_a_restarted_sweeper_keeps_the_grace_window(sim, client, tmp_path):
    url = path_url("sqlite", tmp_path / "sweeper.db")
    endpoint, other = add(sim, "flash-a"), add(sim, "flash-b", "running")
    first_store = open_store(url)
    assert IdleSweeper(client, first_store, clock=sim.clock).sweep(min_idle_s=300).deleted == ()
    first_store.close()  # the control plane goes down

    sim.clock.advance(200)
    second_store = open_store(url)
    restarted = IdleSweeper(client, second_store, clock=sim.clock)
    assert restarted.timers() == {endpoint: START}
    assert restarted.sweep(min_idle_s=300).deleted == ()  # 200 s of the 300 s already served
    sim.clock.advance(100)
    assert IdleSweeper(client, second_store, clock=sim.clock).sweep(min_idle_s=300).deleted == (
        endpoint,
    )
    assert live_ids(sim) == {other}
    assert idle_timers(log_of(second_store)) == {}
    second_store.close()


def test_timers_clear_when_busy_again_or_gone(sim, sweeper, client):
    endpoint = add(sim, "flash-a")
    sweeper.sweep(min_idle_s=100)
    assert idle_timers(log_of(sweeper.store)) == {endpoint: START}

    sim.clock.advance(60)
    set_workers(sim, endpoint, "running")
    report = sweeper.sweep(min_idle_s=100)
    assert report.cleared == (endpoint,) and idle_timers(log_of(sweeper.store)) == {}

    sim.clock.advance(60)
    set_workers(sim, endpoint, "cold")
    sweeper.sweep(min_idle_s=100)
    assert sweeper.timers() == {endpoint: START + 120}  # a new idle run, a new grace
    sim.clock.advance(60)
    assert sweeper.sweep(min_idle_s=100).deleted == ()  # 160 s since first idle, 60 s this run

    assert client.delete_endpoint(endpoint) is True  # someone else deletes it
    sim.clock.advance(60)
    report = sweeper.sweep(min_idle_s=100)
    assert report.deleted == () and report.cleared == (endpoint,)
    reasons = [e.reason for e in log_of(sweeper.store) if isinstance(e, IdleCleared)]
    assert reasons == ["busy", "gone"]
    assert sweeper.timers() == {}


def test_dry_run_records_and_deletes_nothing(sim, sweeper):
    due, waiting, busy = add(sim, "flash-due"), add(sim, "flash-new"), add(sim, "flash-busy")
    sweeper.sweep(min_idle_s=60)
    sim.clock.advance(60)
    set_workers(sim, waiting, "cold")
    set_workers(sim, busy, "running")
    before = log_of(sweeper.store)
    sim.clear_requests()

    report = sweeper.sweep(min_idle_s=60, dry_run=True)
    assert report.dry_run and report.deleted == ()
    assert set(report.would_delete) == {due, waiting}
    assert report.cleared == (busy,)
    assert log_of(sweeper.store) == before
    assert sim.requests_for("delete_endpoint") == []
    assert live_ids(sim) == {due, waiting, busy}
    assert set(sweeper.sweep(min_idle_s=60).deleted) == {due, waiting}  # the real one agrees


def test_each_account_keeps_its_timers_in_its_own_stream(store):
    with Simulator(clock=SimClock(speed=0, start=START), api_keys=(KEY, "sweeper-key-2")) as sim:
        env = sim.env(hf=False)
        first = sim.add_endpoint("flash-a", account=0)
        sim.add_endpoint("flash-b", account=1, workers_max=1)
        sim.configure_endpoint(first, running=0)
        sweepers = []
        for index, key in enumerate(env["RUNPOD_API_KEY"].split(",")):
            client = RunpodClient(
                key,
                endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                api_base_url=env["RUNPOD_API_BASE_URL"],
            )
            sweepers.append(IdleSweeper(client, store, stream=f"sweeper-{index}", clock=sim.clock))
        for sweeper in sweepers:
            sweeper.sweep(min_idle_s=60)
        sim.clock.advance(30)
        sweepers[1].sweep(min_idle_s=60)
        assert sweepers[0].timers() == {first: START}  # account 1's sweep cannot see it
        sim.clock.advance(30)
        assert sweepers[0].sweep(min_idle_s=60).deleted == (first,)
        for sweeper in sweepers:
            sweeper.client.close()
        assert store.streams() == ["sweeper-0", "sweeper-1"]


# ----------------------------------------------------------------------- failures


@pytest.mark.parametrize("kind", [500, "reset", 429])
def test_a_failed_listing_gives_an_empty_report(sim, sweeper, kind):
    add(sim, "flash-a")
    sim.add_fault("list_endpoints", kind, times=ATTEMPTS)
    report = sweeper.sweep()
    assert report == SweepReport(errors=report.errors)
    assert len(report.errors) == 1 and "list_endpoints" in report.errors[0]
    assert log_of(sweeper.store) == [] and len(live_ids(sim)) == 1
    assert len(sweeper.sweep().deleted) == 1  # the fault is spent: the next sweep works


def test_no_client_failure_escapes_a_sweep(store):
    class Broken:
        def list_endpoints(self):
            raise KeyError("boom")

    report = IdleSweeper(Broken(), store).sweep()
    assert report.deleted == () and "KeyError" in report.errors[0]

    class Odd:
        def list_endpoints(self):
            return {"endpoints": []}

    assert "expected a list" in IdleSweeper(Odd(), store).sweep().errors[0]


def test_health_and_delete_errors_are_noted_and_skipped(sim, sweeper):
    sick, undeletable, fine = add(sim, "flash-sick"), add(sim, "flash-stuck"), add(sim, "flash-ok")
    sim.add_fault("health", 503, times=ATTEMPTS, when=on(sick))
    sim.add_fault("delete_endpoint", 500, times=ATTEMPTS, when=on(undeletable))
    report = sweeper.sweep()
    assert report.deleted == (fine,)
    assert len(report.errors) == 2
    assert any("health" in e and sick in e for e in report.errors)
    assert any("deleting flash-stuck" in e and "HTTP 500" in e for e in report.errors)
    assert sweeper.timers() == {undeletable: START}  # still idle: the next sweep retries
    assert set(sweeper.sweep().deleted) == {sick, undeletable}


def test_an_endpoint_deleted_between_the_listing_and_its_health_read_is_gone_not_an_error(
    sim, sweeper
):
    """Another sweeper (or a person) deleted it after this sweep listed it: the health read
    answers 404, and the endpoint is treated as gone (its timer cleared), never an error."""
    vanished, fine = add(sim, "flash-vanished"), add(sim, "flash-ok")
    sweeper.sweep(min_idle_s=100)
    assert sweeper.timers() == {vanished: START, fine: START}
    sim.add_fault("health", 404, times=ATTEMPTS, when=on(vanished))
    sim.clock.advance(60)
    report = sweeper.sweep(min_idle_s=100)
    assert report.errors == () and report.cleared == (vanished,)
    assert sweeper.timers() == {fine: START}
    reasons = [e.reason for e in log_of(sweeper.store) if isinstance(e, IdleCleared)]
    assert reasons == ["gone"]


def test_a_store_failure_stops_the_sweep_before_deleting(sim, client, store):
    class Down(MemoryStore):
        def append(self, stream, events, expected_seq):
            raise OSError("disk full")

    endpoint = add(sim, "flash-a")
    report = IdleSweeper(client, Down(), clock=sim.clock).sweep()
    assert report.deleted == () and "OSError: disk full" in report.errors[0]
    assert live_ids(sim) == {endpoint}


def test_a_foreign_event_in_the_stream_is_reported_not_acted_on(sim, sweeper):
    sweeper.store.append(
        "sweeper", [StatusObserved(stream="sweeper", seq=0, id="x" * 26, at=0, status="?")], 0
    )
    endpoint = add(sim, "flash-a")
    report = sweeper.sweep()
    assert report.deleted == () and "not a sweeper event" in report.errors[0]
    assert live_ids(sim) == {endpoint}
    with pytest.raises(CorruptLogError):
        idle_timers(sweeper.store.read("sweeper"))


def test_secrets_stay_out_of_events_and_errors(sim, sweeper, monkeypatch):
    token = "hf_sweeper_secret_7f3a9c"
    monkeypatch.setenv("HF_TOKEN", token)
    named = add(sim, f"flash-{token}")
    other = add(sim, "flash-b")
    sim.add_fault("health", 500, times=ATTEMPTS, when=on(other), body={"detail": f"{KEY} {token}"})
    report = sweeper.sweep(min_idle_s=0)
    assert report.deleted == (named,) and report.errors
    sim.add_fault("list_endpoints", 500, times=ATTEMPTS, body={"error": f"bad key {KEY}"})
    report2 = sweeper.sweep()
    text = (
        repr(report) + repr(report2) + "".join(e.model_dump_json() for e in log_of(sweeper.store))
    )
    assert KEY not in text and token not in text
    assert "[REDACTED]" in text


# ----------------------------------------------------------------------- concurrency


def run_together(sweeps: list[Any], rounds: int) -> list[SweepReport]:
    """Run each callable `rounds` times in its own thread, all released at once."""
    barrier = threading.Barrier(len(sweeps))
    reports: list[SweepReport] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def work(sweep):
        try:
            barrier.wait()
            for _ in range(rounds):
                report = sweep()
                with lock:
                    reports.append(report)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in sweeps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not failures, failures
    return reports


def check_reaped_once(sim: Simulator, store: Any, reports: list[SweepReport], ids: set[str]):
    assert all(r.ok for r in reports), [r.errors for r in reports]
    deleted = [e for r in reports for e in r.deleted]
    assert sorted(deleted) == sorted(ids), "every endpoint deleted by exactly one sweep"
    reaped = [e.endpoint_id for e in log_of(store) if isinstance(e, EndpointReaped)]
    assert sorted(reaped) == sorted(ids)
    assert live_ids(sim).isdisjoint(ids)


def test_two_threads_on_one_sweeper_never_double_delete(sim, sweeper):
    ids = {add(sim, f"flash-{i}") for i in range(8)}
    reports = run_together([sweeper.sweep, sweeper.sweep], rounds=3)
    check_reaped_once(sim, sweeper.store, reports, ids)
    deletes = [r.path for r in sim.requests_for("delete_endpoint")]
    assert len(deletes) == len(set(deletes)) == 8  # one DELETE each: the sweeps took turns


def test_two_sweepers_on_one_store_take_turns(sim, client, store):
    ids = {add(sim, f"flash-{i}") for i in range(8)}
    a = IdleSweeper(client, store, clock=sim.clock)
    b = IdleSweeper(client_for(sim), store, clock=sim.clock)
    reports = run_together([a.sweep, b.sweep], rounds=3)
    check_reaped_once(sim, store, reports, ids)
    assert len(sim.requests_for("delete_endpoint")) == 8


def test_sweepers_with_their_own_connections_agree_through_the_log(sim, tmp_path):
    """Like two processes: separate SQLite connections, no shared lock; the log arbitrates."""
    url = path_url("sqlite", tmp_path / "shared.db")
    ids = {add(sim, f"flash-{i}") for i in range(10)}
    stores = [open_store(url) for _ in range(3)]
    clients = [client_for(sim) for _ in stores]
    sweepers = [IdleSweeper(c, s, clock=sim.clock) for c, s in zip(clients, stores, strict=True)]
    try:
        reports = run_together([s.sweep for s in sweepers], rounds=3)
        check_reaped_once(sim, stores[0], reports, ids)
        assert idle_timers(log_of(stores[0])) == {}
        for s in sweepers:
            assert s.timers() == {}
    finally:
        for s in stores:
            s.close()
        for c in clients:
            c.close()


class RacingStore:
    """A store view that lets another writer in just before its first append."""

    def __init__(self, inner: Any, before_first_append: Any):
        self.inner = inner
        self.hook = before_first_append

    def append(self, stream, events, expected_seq):
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return self.inner.append(stream, events, expected_seq)

    def read(self, stream, after=None):
        return self.inner.read(stream, after)


def test_a_lost_append_race_is_refolded_and_replanned(sim, client, store):
    old = add(sim, "flash-old")
    IdleSweeper(client, store, clock=sim.clock).sweep(min_idle_s=60)
    sim.clock.advance(60)
    new = add(sim, "flash-new")
    rival = IdleSweeper(client_for(sim), store, clock=sim.clock)
    rival_reports: list[SweepReport] = []
    racing = RacingStore(store, lambda: rival_reports.append(rival.sweep(min_idle_s=60)))
    appended: list[int] = []
    real_append = store.append

    def counting_append(stream, events, expected_seq):
        try:
            real_append(stream, events, expected_seq)
        except ConcurrencyError:
            appended.append(-1)
            raise
        appended.append(expected_seq)

    store.append = counting_append
    report = IdleSweeper(client, racing, clock=sim.clock).sweep(min_idle_s=60)
    assert rival_reports[0].deleted == (old,)
    assert report.deleted == () and report.ok  # it saw the rival's reap and stood back
    assert -1 in appended  # the lost race happened, and was survived
    assert len(sim.requests_for("delete_endpoint")) == 1
    assert idle_timers(log_of(store)) == {new: START + 60}


# ----------------------------------------------------------------------- the fold is pure


def test_the_sweep_rules_do_no_io():
    allowed = {"__future__", "math", "collections.abc", "dataclasses", "enum", "typing"}
    tree = ast.parse(Path(rules.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name in allowed or name.startswith(("flashfsm.events", "flashfsm.fsm")), name


# ----------------------------------------------------------------------- the property

# Weights by repetition. Names are mostly flash ones; half the endpoints idle steadily
# (so graces run out), the others change often (so runs break).
PREFIXES = ("flash-",) * 3 + ("live-flash-",) * 2 + ("other-", "live-other-", "flashy-")
BUSY = ("running", "initializing", "incomplete", "error")
CHANGING = ("cold",) * 3 + ("warm", "ready", *BUSY, "vanish")
STEADY = ("cold",) * 12 + ("warm", "ready", *BUSY, "vanish")


@st.composite
def histories(draw):
    """Endpoint names, a grace, and per sweep: the time since the last one, the flags,
    each endpoint's reading and the protected (index, in `live-` form) pairs."""
    n = draw(st.integers(1, 4))
    names = [draw(st.sampled_from(PREFIXES)) + f"e{i}" for i in range(n)]
    m = draw(st.integers(1, 7))
    columns = [
        draw(st.lists(st.sampled_from(STEADY if steady else CHANGING), min_size=m, max_size=m))
        for steady in draw(st.lists(st.booleans(), min_size=n, max_size=n))
    ]
    protection = st.sets(st.tuples(st.integers(0, n - 1), st.booleans()), max_size=1)
    sweeps = [
        {
            "gap": draw(st.integers(0, 90)),
            "reap_warm": draw(st.booleans()),
            "restart": draw(st.booleans()),
            "readings": [column[k] for column in columns],
            "protected": draw(st.one_of(st.just(set()), protection)),
        }
        for k in range(m)
    ]
    return names, draw(st.sampled_from([0, 30, 60, 150])), sweeps


def oracle(names: list[str], min_idle_s: float, sweeps: list[dict], times: list[float]):
    """Per sweep: the endpoints (by index) it deletes, and the idle timers it leaves.

    Stated over whole runs of sweeps: an endpoint is deleted at the first sweep k whose
    maximal run of consecutive "idle, unprotected, flash, present" sweeps ending at k
    spans at least `min_idle_s`.
    """
    n = len(names)
    vanished_at = [
        next((k for k, s in enumerate(sweeps) if s["readings"][i] == "vanish"), len(sweeps))
        for i in range(n)
    ]

    def ok(i: int, k: int) -> bool:
        s = sweeps[k]
        reading = s["readings"][i]
        idle = reading == "cold" or (reading in ("warm", "ready") and s["reap_warm"])
        flash = names[i].startswith(("flash-", "live-flash-"))
        protected = any(j == i for j, _ in s["protected"])
        return flash and k < vanished_at[i] and not protected and idle

    def run_start(i: int, k: int) -> int:
        j = k
        while j > 0 and ok(i, j - 1):
            j -= 1
        return j

    deleted_at: dict[int, int] = {}
    for i in range(n):
        for k in range(len(sweeps)):
            if ok(i, k) and times[k] - times[run_start(i, k)] >= min_idle_s:
                deleted_at[i] = k
                break
    expected = []
    for k in range(len(sweeps)):
        gone = {i for i, at in deleted_at.items() if at == k}
        timers = {
            i: times[run_start(i, k)]
            for i in range(n)
            if ok(i, k) and deleted_at.get(i, len(sweeps)) > k
        }
        expected.append((gone, timers))
    return expected, deleted_at


@pytest.fixture(scope="module")
def shared_sim():
    with Simulator(clock=SimClock(speed=0, start=START), api_keys=(KEY,)) as s:
        with client_for(s) as c:
            yield s, c
        assert s.errors == [], s.errors[0]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_deleted_iff_continuously_idle_unprotected_flash_for_min_idle_s(shared_sim, history):
    sim, client = shared_sim
    names, min_idle_s, sweeps = history
    store = MemoryStore()
    ids = [add(sim, name) for name in names]
    times: list[float] = []
    sweeper = IdleSweeper(client, store, clock=sim.clock)
    try:
        actual_deleted: list[set[str]] = []
        actual_timers: list[dict[str, float]] = []
        present = set(ids)
        for s in sweeps:
            sim.clock.advance(s["gap"])
            times.append(sim.clock.now())
            errors_expected = False
            for endpoint_id, reading in zip(ids, s["readings"], strict=True):
                if endpoint_id not in present:
                    continue
                if reading == "vanish":
                    assert client.delete_endpoint(endpoint_id)
                    present.discard(endpoint_id)
                elif reading == "incomplete":
                    sim.add_fault("health", "missing_keys", keys=("jobs",), when=on(endpoint_id))
                elif reading == "error":
                    sim.add_fault("health", 500, times=ATTEMPTS, when=on(endpoint_id))
                else:
                    set_workers(sim, endpoint_id, reading)
            for i, endpoint_id in enumerate(ids):
                protected = any(j == i for j, _ in s["protected"])
                if endpoint_id in present and not protected and s["readings"][i] == "error":
                    errors_expected = errors_expected or rules.is_flash_endpoint(names[i])
            if s["restart"]:
                sweeper = IdleSweeper(client, store, clock=sim.clock)
            protected = {
                ("live-" if live else "") + rules.bare_name(names[j]) for j, live in s["protected"]
            }
            report = sweeper.sweep(protected, min_idle_s=min_idle_s, reap_warm=s["reap_warm"])
            sim.clear_faults()
            assert bool(report.errors) == errors_expected, report.errors
            actual_deleted.append(set(report.deleted))
            actual_timers.append(sweeper.timers())
            present -= set(report.deleted)
            assert live_ids(sim) >= present and live_ids(sim).isdisjoint(set(ids) - present)

        expected, deleted_at = oracle(names, min_idle_s, sweeps, times)
        for k, (gone, timers) in enumerate(expected):
            assert actual_deleted[k] == {ids[i] for i in gone}, f"sweep {k}"
            assert actual_timers[k] == {ids[i]: t for i, t in timers.items()}, f"sweep {k}"
        reaped = {e.endpoint_id: e for e in log_of(store) if isinstance(e, EndpointReaped)}
        assert set(reaped) == {ids[i] for i in deleted_at}
        assert all(e.idle_s >= min_idle_s for e in reaped.values())
        assert idle_timers(store.read("sweeper")) == actual_timers[-1]
    finally:
        sim.clear_faults()
        for endpoint_id in ids:
            with contextlib.suppress(RunpodApiError):
                client.delete_endpoint(endpoint_id)
