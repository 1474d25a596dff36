"""Fleets of `flashfsm supervise` processes on PostgreSQL, for the tests that kill, pause
and restart them (tests/test_fleet_replicas.py, tests/test_fleet_restart.py), and the run
adapters those processes drive handed-off runs with.

The adapters (`--run-adapters tests.fleet_support:sim_run_adapters`, imported by each child
process, so this module imports nothing heavy at its top) deploy with the simulator's own
GraphQL `saveEndpoint` (what runpod-flash calls), made with httpx to `RUNPOD_API_BASE_URL`;
each attempt's job picks its scenario from its input, by the run's id: a `fail-…` run's job
fails (the run ends `job_failed`), the others succeed.

`FleetHarness` is the rest: a fresh table, the simulator in the test's process, replicas
as child processes (each incarnation of a replica names its connections
`<owner>.<n>`), the hand-off of a mix of jobs and runs, and triggers (test scaffolding, not
the library's) that note which process wrote each row and which one bumped each lease's
token, so `stale_writes` can say whether anything was written under a stale token.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from flashfsm.adapters.runpod import RunpodClient
from flashfsm.events.models import RunStarted
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, RunpodRunAdapters

#: The runs' poll interval (seconds of the replicas' real clock).
RUN_INTERVAL_S = 2.0
SAVE = "mutation Save($input: EndpointInput!) { saveEndpoint(input: $input) { id name } }"


def scenario_of(run_id: str, attempt: int) -> str:
    """The scenario the attempt's job plays."""
    return "failed" if run_id.startswith("fail-") else "success"


def sim_run_adapters(started: RunStarted, sleep: Callable[[float], None]) -> RunpodRunAdapters:
    """`RunAdapters` for one handed-off run, on the simulator the environment names."""
    base = os.environ["RUNPOD_API_BASE_URL"].rstrip("/")
    key = os.environ["RUNPOD_API_KEY"]

    def deploy(run: RunState, attempt: Attempt, record: Any) -> Deployed:
        name = attempt.started.endpoint_name
        variables = {
            "input": {
                "name": name,
                "template": {"name": f"{name}-t", "imageName": "runpod/flash:sim"},
                "gpuIds": attempt.started.gpu_class,
                "workersMax": 1,
            }
        }
        reply = httpx.post(
            f"{base}/graphql",
            json={"query": SAVE, "variables": variables},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        reply.raise_for_status()
        endpoint = reply.json()["data"]["saveEndpoint"]
        return Deployed(endpoint["id"], endpoint["name"])

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        return {"scenario": scenario_of(started.run_id, attempt.started.attempt)}

    return RunpodRunAdapters(
        RunpodClient.from_env(),
        deploy,
        job_input,
        interval_s=RUN_INTERVAL_S,
        sleep=sleep,
    )


# --- a fleet of `flashfsm supervise` processes on PostgreSQL --------------------------------

ROOT = Path(__file__).resolve().parent.parent
#: The scenarios of the jobs handed off, in turn.
SCENARIOS = ("success", "failed", "no_capacity", "crash_loop", "worker_death", "timed_out")


#: Workers per endpoint: more than the jobs any test gives one endpoint.
WORKERS_MAX = 500


@dataclass
class Outcome:
    """One stream of a finished fleet run, as the log and the triggers tell it."""

    verdict: tuple[object, ...]  # a job's (state, failure, rule), a run's (ok, failure, attempts)
    offset_s: float  # the verdict's time after the hand-off
    verdict_at: float
    watchers: list[tuple[str, float]]  # (process that wrote it, when) of every WatchStarted
    claims: list[tuple[str, float]]  # (replica, when) of every token bump of its lease (a run's)
    verdicts: int
    writers: list[str]  # the process that wrote each seq (the hand-off: the test's own)
    kinds: list[str]  # each seq's event kind
    writes: list[tuple[str, float]] = field(default_factory=list)  # (process, when) per seq
    claimers: list[tuple[str, float]] = field(default_factory=list)  # (process, when) per bump


def stale_writes(outcomes: dict[str, Outcome]) -> list[tuple[str, int, str, str]]:
    """Every row written under a stale fencing token: `(stream, seq, writer, holder)` where
    the last token bump of the stream's lease (a run's, for its attempts' streams) before
    the write was made by another process (rows before the first bump are the hand-off's).
    A write's row lock and a bump's exclude each other, so their times order them."""
    stale = []
    for stream, got in outcomes.items():
        for seq, (app, at) in enumerate(got.writes):
            before = [who for who, when in got.claimers if when < at]
            if before and before[-1] != app:
                stale.append((stream, seq, app, before[-1]))
    return stale


class FleetHarness:
    """Replicas of `flashfsm supervise` (child processes) on a fresh PostgreSQL table, the
    simulator (`speed`) in this process; `start(owner)` starts (or restarts) one."""

    def __init__(
        self,
        dsn: str,
        logs: Path,
        *,
        speed: float,
        lease_s: float,
        interval_s: float,
        policy: Any,
        runs: int,
    ) -> None:
        self.dsn, self.logs, self.speed = dsn, logs, speed
        self.lease_s, self.interval_s, self.policy = lease_s, interval_s, policy
        self.table = f"flashfsm_fleet_{uuid.uuid4().hex[:12]}"
        self.url = f"{dsn}{'&' if '?' in dsn else '?'}table={self.table}"
        self.runs = runs
        self.replicas: dict[str, subprocess.Popen[bytes]] = {}  # the live incarnation of each
        self.started: dict[str, int] = {}  # incarnations started per owner
        self.handed: dict[str, float] = {}

    def __enter__(self) -> FleetHarness:
        from flashfsm.adapters.postgres import PostgresStore
        from flashfsm.adapters.simulator import Simulator

        self.store = PostgresStore(self.dsn, table=self.table)
        self._record_writers()
        quota = len(SCENARIOS) * WORKERS_MAX + 10 * max(1, self.runs)  # (the runs' own endpoints)
        self.sim = Simulator(speed=self.speed, worker_quota=quota)
        self.sim.__enter__()
        self.env = {**os.environ, **self.sim.env(hf=False), "PYTHONUNBUFFERED": "1"}
        self.endpoints = {
            # (every job of a scenario on one endpoint, each with a worker: none waits behind
            # another in the endpoint's queue, so a job's verdict is its scenario's)
            s: self.sim.add_endpoint(
                f"flash-{s}", scenario=s, check_quota=False, workers_max=WORKERS_MAX
            )
            for s in SCENARIOS
        }
        return self

    def __exit__(self, *exc: object) -> None:
        from tests.store_support import drop_table

        try:
            for proc in self.replicas.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                    proc.wait()
            self.sim.__exit__(None, None, None)
        finally:
            self.store.close()
            drop_table(self.dsn, self.table)

    def log(self, owner: str, n: int | None = None) -> Path:
        """The output of `owner`'s `n`-th incarnation (default: its latest)."""
        return self.logs / f"{self.table}-{owner}.{self.started[owner] if n is None else n}.log"

    def spawn(self, owner: str, app: str) -> subprocess.Popen[bytes]:
        """A `flashfsm supervise --owner owner` process whose connections are named `app`."""
        code = "from flashfsm.cli import main; main()"
        url = f"{self.url}&application_name={app}"  # (see `_record_writers`)
        args = [sys.executable, "-c", code, "supervise", "--store", url, "--owner", owner]
        args += ["--lease", str(self.lease_s), "--interval", str(self.interval_s)]
        args += ["--run-adapters", "tests.fleet_support:sim_run_adapters"]
        with open(self.logs / f"{self.table}-{app}.log", "wb") as out:
            return subprocess.Popen(
                args, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
            )

    def start(self, owner: str) -> subprocess.Popen[bytes]:
        """Start `owner`'s next incarnation (as a service manager restarts it)."""
        self.started[owner] = n = self.started.get(owner, 0) + 1
        self.replicas[owner] = proc = self.spawn(owner, f"{owner}.{n}")
        return proc

    def await_log(self, owner: str, text: str, timeout_s: float = 60.0) -> None:
        """Wait until `owner`'s latest incarnation has written `text` (a loaded host starts
        a process slowly: a kill before it is up would test nothing)."""
        deadline = time.monotonic() + timeout_s
        path = self.log(owner)
        while not (path.exists() and text in path.read_text(errors="replace")):
            assert time.monotonic() < deadline, f"{path.name}: no {text!r} in {timeout_s} s"
            time.sleep(0.1)

    def await_replicas(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until `count` replicas have a live heartbeat (a loaded host starts them
        slowly)."""
        deadline = time.monotonic() + timeout_s
        while len(self.store.replicas()) < count:
            assert time.monotonic() < deadline, f"{count} replicas did not beat in {timeout_s} s"
            time.sleep(0.2)

    def hand_off(self, jobs: int, runs: int, scenarios: tuple[str, ...] = SCENARIOS) -> None:
        """Hand `jobs` jobs (`scenarios` in turn) and `runs` runs (every fourth fails)."""
        from flashfsm import JobHandle
        from flashfsm.events.models import Candidate
        from flashfsm.fleet import hand_off_job
        from flashfsm.runs import supervise_run

        for n in range(jobs):
            scenario = scenarios[n % len(scenarios)]
            endpoint = self.endpoints[scenario]
            handle = JobHandle(endpoint, f"flash-{scenario}", self.sim.submit(endpoint, {}))
            stream = hand_off_job(
                handle, self.store, policy=self.policy, stream=f"job-{scenario}-{n}"
            )
            self.handed[stream] = time.time()
        for n in range(runs):
            run_id = f"fail-{n}" if n % 4 == 0 else f"ok-{n}"
            result = supervise_run(
                run_id,
                [Candidate(gpu_class="L4")],
                None,  # type: ignore[arg-type]  (a hand-off deploys nothing)
                store=self.store,
                detach=True,
                capacity_memory=False,
            )
            self.handed[result.stream] = time.time()

    def held(self) -> dict[str, int]:
        """How many unexpired leases each replica name holds now."""
        owners = [o.owner for o in self.store.open_streams() if o.expires_in and o.expires_in > 0]
        return {owner: owners.count(owner) for owner in set(owners) if owner is not None}

    def wait_idle(self, timeout_s: float = 300.0) -> None:
        """Wait until every handed-off stream has its verdict (none is left open)."""
        deadline = time.monotonic() + timeout_s
        while self.store.open_streams() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert self.store.open_streams() == [], "streams left open"

    def drain(self) -> dict[str, int]:
        """SIGTERM every live replica; their exit codes."""
        for proc in self.replicas.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return {owner: proc.wait(timeout=60) for owner, proc in self.replicas.items()}

    def _record_writers(self) -> None:
        """Triggers noting which process (its connection's application_name) inserted each
        row and when, and every bump of a lease's token (a claim, or a take-over's fence):
        who, as which replica, when."""
        import psycopg

        t = self.table
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {t}_writers (stream TEXT, seq BIGINT, app TEXT, at FLOAT8)")
            conn.execute(f"CREATE TABLE {t}_claims (stream TEXT, owner TEXT, app TEXT, at FLOAT8)")
            conn.execute(
                f"CREATE FUNCTION {t}_note() RETURNS trigger AS $$ BEGIN "
                f"INSERT INTO {t}_writers VALUES (NEW.stream, NEW.seq, "
                "current_setting('application_name'), extract(epoch from clock_timestamp()));"
                " RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            conn.execute(
                f"CREATE TRIGGER {t}_noted AFTER INSERT ON {t} "
                f"FOR EACH ROW EXECUTE FUNCTION {t}_note()"
            )
            conn.execute(
                f"CREATE FUNCTION {t}_claim() RETURNS trigger AS $$ BEGIN "
                f"INSERT INTO {t}_claims VALUES (NEW.stream, NEW.owner, "
                "current_setting('application_name'), extract(epoch from clock_timestamp()));"
                " RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            conn.execute(
                f"CREATE TRIGGER {t}_claimed AFTER UPDATE ON {t}_open "
                f"FOR EACH ROW WHEN (NEW.token <> OLD.token) EXECUTE FUNCTION {t}_claim()"
            )

    def _writers(self) -> tuple[dict[str, list[tuple[str, float]]], dict[str, list[Any]]]:
        """Per stream, (process, when) of each seq in seq order; (replica, process, when)
        of each token bump in time order. Drops the scaffolding."""
        import psycopg

        t = self.table
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            writes: dict[str, list[tuple[str, float]]] = {}
            rows = conn.execute(f"SELECT stream, app, at FROM {t}_writers ORDER BY stream, seq")
            for stream, app, at in rows.fetchall():
                writes.setdefault(stream, []).append((app, at))
            claims: dict[str, list[Any]] = {}
            rows = conn.execute(f"SELECT stream, owner, app, at FROM {t}_claims ORDER BY at")
            for stream, owner, app, at in rows.fetchall():
                claims.setdefault(stream, []).append((owner, app, at))
            for name in ("writers", "claims"):
                conn.execute(f"DROP TABLE {t}_{name}")
            conn.execute(f"DROP FUNCTION {t}_note() CASCADE")
            conn.execute(f"DROP FUNCTION {t}_claim() CASCADE")
        return writes, claims

    def outcomes(self) -> dict[str, Outcome]:
        """Every stream's outcome (call once, after `wait_idle`)."""
        from flashfsm import replay
        from flashfsm.events.models import Concluded, JobSubmitted, RunStarted
        from flashfsm.fsm.run import SUBMIT_LOST, replay_run

        writes, claims = self._writers()
        out: dict[str, Outcome] = {}
        for stream in self.store.streams():
            events = self.store.read(stream)
            first, kinds = events[0], [e.kind for e in events]
            if isinstance(first, RunStarted):
                run = replay_run(events)
                result = run.result
                assert result is not None, stream
                # a submit whose answer died with its replica is redone as a new attempt
                # (SUBMIT_LOST): the run's attempts are counted without the lost ones
                lost = [a for a in run.attempts if a.ended and a.ended.rule == SUBMIT_LOST]
                attempts = result.attempts - len(lost)
                decided, ended = (result.ok, result.failure, attempts), result
                verdicts, since = kinds.count("RunConcluded"), self.handed[stream]
            else:
                assert isinstance(first, JobSubmitted), stream
                verdict = replay(events).verdict
                assert verdict is not None, stream
                decided, ended = (verdict.state, verdict.failure, verdict.rule), verdict
                verdicts = sum(isinstance(e, Concluded) for e in events)
                # an attempt's job is timed from its run's hand-off
                since = self.handed.get(stream) or self.handed[_run_of(stream)]
            # (an attempt's job stream is its run's: leased with it, never on its own)
            leased = stream if stream in self.handed else _run_of(stream)
            apps = [app for app, _ in writes[stream]]
            out[stream] = Outcome(
                decided,
                ended.at - since,
                ended.at,
                [(apps[n], e.at) for n, e in enumerate(events) if e.kind == "WatchStarted"],
                [(owner, at) for owner, _, at in claims[leased]],
                verdicts,
                apps,
                kinds,
                writes[stream],
                [(app, at) for _, app, at in claims[leased]],
            )
        return _renumbered(out)


def _renumbered(out: dict[str, Outcome]) -> dict[str, Outcome]:
    """`out` with each run's attempt job streams numbered 0, 1, … in order: a redo after a
    lost submit (whose attempt never had a job stream) takes the next number, so a run's
    jobs compare with a baseline's by their place, not by the attempt number."""
    jobs: dict[str, list[str]] = {}
    for stream in out:
        if stream.startswith("job-") and _run_of(stream) in out:
            jobs.setdefault(_run_of(stream), []).append(stream)
    renamed = {}
    for streams in jobs.values():
        streams.sort(key=lambda s: int(s.rsplit("-a", 1)[1]))
        for n, stream in enumerate(streams):
            renamed[stream] = f"{stream.rsplit('-a', 1)[0]}-a{n}"
    return {renamed.get(stream, stream): outcome for stream, outcome in out.items()}


def _run_of(stream: str) -> str:
    """The run stream an attempt's job stream (`job-<run_id>-s<seed>-a<n>`) belongs to."""
    return f"run-{stream[4:].rsplit('-a', 1)[0]}"


def one_line_refusal(harness: FleetHarness, owner: str, timeout_s: float = 60.0) -> str:
    """Start a duplicate of the live replica `owner` (same --owner): it must be refused, in
    one line, exit 1; that line."""
    proc = harness.spawn(owner, f"{owner}.duplicate")
    code = proc.wait(timeout=timeout_s)
    lines = (harness.logs / f"{harness.table}-{owner}.duplicate.log").read_text().splitlines()
    assert code == 1 and len(lines) == 1, (code, lines)
    return lines[0]
