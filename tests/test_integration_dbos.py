"""DBOS: a training run as a DBOS workflow, killed and recovered by DBOS, cancelled by DBOS.

Each test runs the simulator (`flashfsm simulator`, on a manual clock the test moves) and a
DBOS app (tests/dbos_app_support.py) in processes of their own; DBOS keeps its workflows,
and the integration its runs, in a PostgreSQL database of these tests' own
(`flashfsm_dbos_test`, made afresh on the server of `FLASHFSM_TEST_POSTGRES_DSN`). The test
process looks at DBOS only as a client (`DBOSClient`) and at the run only through the store
and the simulator's own records (`read_usage`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

pytest.importorskip("dbos", reason="DBOS is not installed: pip install 'flashfsm[dbos]'")

from dbos import DBOSClient

from flashfsm import RunResult, open_store
from flashfsm.adapters.simulator import read_usage
from flashfsm.events.models import (
    CancelRequested,
    Concluded,
    EndpointDeployed,
    JobCancelled,
    JobQueued,
    RunConcluded,
    StatusObserved,
    WatchStarted,
)
from flashfsm.integrations import dbos as flash
from flashfsm.naming import attempt_stream, endpoint_name, run_stream
from tests.dbos_app_support import NAME, SPEC
from tests.integrations.support import FENCE, ROOT
from tests.store_support import PG_ENV
from tests.test_simulator_cli import FLASHFSM, Served

APP = ROOT / "tests" / "dbos_app_support.py"
DATABASE = "flashfsm_dbos_test"
KEY = "sk-dbos-test-1"
TRAINING_ENDS_S = 1920  # the `training` scenario: COMPLETED this long after the job is queued


# --- the database, the simulator, the app ------------------------------------------------------


@pytest.fixture(scope="module")
def system_db() -> Iterator[str]:
    """A fresh database of these tests' own on the CI server: DBOS's and the runs'."""
    dsn = os.environ.get(PG_ENV)
    if not dsn:
        pytest.skip(f"{PG_ENV} is not set: DBOS needs a PostgreSQL server")
    import psycopg
    from psycopg import sql

    def drop(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
        )

    with psycopg.connect(dsn, autocommit=True) as conn:
        drop(conn)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    yield urlunsplit(urlsplit(dsn)._replace(path=f"/{DATABASE}"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        drop(conn)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Served]:
    """The simulator in its own process: jobs run the 30-minute `training` scenario on a
    clock that moves only when the test moves it."""
    argv = [*FLASHFSM, "simulator", "--port", "0", "--speed", "0", "--key", KEY]
    served = Served([*argv, "--scenario", "training"], tmp_path)
    yield served
    served.stop()


@pytest.fixture
def dbos_client(system_db: str) -> Iterator[DBOSClient]:
    client = DBOSClient(system_database_url=system_db)
    yield client
    client.destroy()


@pytest.fixture
def store(system_db: str) -> Iterator[Any]:
    """The runs' store, where the app keeps them: the DBOS system database."""
    url = flash.store_url({"system_database_url": system_db})
    assert url is not None
    opened = open_store(url)
    yield opened
    opened.close()


def advance(served: Served, seconds: float) -> None:
    """Move the simulator's clock."""
    url = served.env["RUNPOD_API_BASE_URL"]
    httpx.post(f"{url}/_sim/clock", json={"advance": seconds}, timeout=10).raise_for_status()


class App:
    """A DBOS app in a process of its own: `script` (tests/dbos_app_support.py) run with
    `args`, on the simulator and the tests' database (`DBOS_SYSTEM_DATABASE_URL`)."""

    def __init__(self, served: Served, system_db: str, tmp: Path, *args: str, script: Path = APP):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "HF_"))},
            **served.env,
            "HOME": str(tmp),
            "RUNPOD_FLASH_SILENCE_DEPRECATION": "1",
            "DBOS_SYSTEM_DATABASE_URL": system_db,
            "FLASHFSM_DBOS_TEST_HF_CACHE": str(tmp / "hf"),
            "PYTHONPATH": str(ROOT),
        }
        self.err = tmp / f"{'-'.join([script.stem, *args])}.{time.monotonic_ns()}.err"
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), *args],
                env=env,
                cwd=tmp,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def finish(self, timeout: float = 120) -> str:
        """What the app printed, once it exited (with 0)."""
        out, _ = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, self.err.read_text()[-3000:]
        return out

    def outcome(self, timeout: float = 120) -> dict[str, Any]:
        """The JSON line tests/dbos_app_support.py printed once its workflow ended."""
        return json.loads(self.finish(timeout).strip().splitlines()[-1])

    def stop(self) -> None:
        if self.alive():
            self.kill()


def wait_for(
    what: str, check: Callable[[], Any], app: App, timeout: float = 90, *, alive: bool = True
) -> Any:
    """Wait until `check()` is truthy (the app still running, unless `alive` is False);
    returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if alive:
            assert app.alive(), f"the app exited before {what}: {app.err.read_text()[-3000:]}"
        time.sleep(0.1)
    pytest.fail(f"no {what} within {timeout} s: {app.err.read_text()[-3000:]}")


def streams(workflow_id: str) -> tuple[str, str]:
    """The run stream and its first attempt's job stream, for the app's run in `workflow_id`."""
    run_id = flash.run_id(NAME, workflow_id)
    return run_stream(run_id, 0), attempt_stream(run_id, 0, 0)


def statuses(store: Any, job: str) -> list[str]:
    return [e.status for e in store.read(job) if isinstance(e, StatusObserved)]


def training(store: Any, workflow_id: str, served: Served, app: App) -> None:
    """Let the app's run deploy and submit, then move the clock into its training and wait
    until the watch has seen it training (IN_PROGRESS)."""
    run, job = streams(workflow_id)
    wait_for("a job submitted", lambda: any(isinstance(e, JobQueued) for e in store.read(run)), app)
    wait_for("the job watched", lambda: statuses(store, job), app)
    advance(served, 600)  # 10 minutes into the scenario: past the cold start, training
    wait_for("the job seen training", lambda: "IN_PROGRESS" in statuses(store, job), app)


def run_to_the_end(served: Served, app: App) -> dict[str, Any]:
    """Move the clock past the training's end and return what the app printed."""
    advance(served, TRAINING_ENDS_S)
    return app.outcome()


def endpoints_of(served: Served, workflow_id: str, gpu: str = SPEC["gpu_class"]) -> list[Any]:
    """The simulator's own record of the endpoints the workflow's run created."""
    name = endpoint_name(flash.run_id(NAME, workflow_id), gpu, 0)
    usage = read_usage(served.env["RUNPOD_API_BASE_URL"])
    return [e for e in usage.endpoints if name in e.name]  # runpod-flash adds `live-`


def nothing_billing(served: Served) -> bool:
    """Every endpoint the simulator made is deleted and every worker stopped."""
    usage = read_usage(served.env["RUNPOD_API_BASE_URL"])
    endpoints = all(e.deleted_at is not None for e in usage.endpoints)
    return endpoints and all(w.stopped_at is not None for w in usage.workers)


def verdicts(store: Any, workflow_id: str) -> tuple[list[Any], list[Any]]:
    """The run's `RunConcluded`s and its job's `Concluded`s, as comparable tuples."""
    run, job = streams(workflow_id)
    ran = [
        (e.ok, e.failure, e.attempts, e.metrics)
        for e in store.read(run)
        if isinstance(e, RunConcluded)
    ]
    judged = [(e.state, e.rule, e.metrics) for e in store.read(job) if isinstance(e, Concluded)]
    return ran, judged


def step_output(client: DBOSClient, workflow_id: str) -> Any:
    """What DBOS stored as the output of the workflow's `flashfsm.supervise` step."""
    steps = [
        s
        for s in client.list_workflow_steps(workflow_id)
        if s["function_name"] == "flashfsm.supervise"
    ]
    assert len(steps) <= 1
    return steps[0]["output"] if steps else None


# --- the tests ---------------------------------------------------------------------------------


def test_a_sigkilled_dbos_app_is_recovered_by_dbos_and_pays_for_one_deploy_and_one_submit(
    system_db, sim, dbos_client, store, tmp_path
):
    # the uninterrupted run, for its verdict
    baseline = App(sim, system_db, tmp_path, "start", "wf-baseline")
    try:
        training(store, "wf-baseline", sim, baseline)
        expected = run_to_the_end(sim, baseline)
    finally:
        baseline.stop()
    assert expected["result"]["ok"] is True

    first = App(sim, system_db, tmp_path, "start", "wf-killed")
    try:
        training(store, "wf-killed", sim, first)
        first.kill()  # mid-watch, mid-training: DBOS never recorded the step's output
    finally:
        first.stop()
    killed = dbos_client.retrieve_workflow("wf-killed").get_status()
    assert killed.status == "PENDING"
    assert step_output(dbos_client, "wf-killed") is None
    [endpoint] = endpoints_of(sim, "wf-killed")
    assert endpoint.deleted_at is None  # the job trains on, billed, while no process watches

    advance(sim, 300)  # the job goes on training while nothing watches it
    recovering = App(sim, system_db, tmp_path, "recover", "wf-killed")  # DBOS's recovery
    try:
        run, job = streams("wf-killed")
        wait_for(
            "the watch reattached",
            lambda: any(isinstance(e, WatchStarted) and e.reattach for e in store.read(job)),
            recovering,
        )
        got = run_to_the_end(sim, recovering)
    finally:
        recovering.stop()

    # the simulator's own records: one endpoint created, one job submitted to it, then deleted
    [endpoint] = endpoints_of(sim, "wf-killed")
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None
    deploys = [e for e in store.read(run) if isinstance(e, EndpointDeployed)]
    assert [d.endpoint_id for d in deploys] == [endpoint.id]

    # one verdict, equal to the uninterrupted run's
    ran, judged = verdicts(store, "wf-killed")
    assert len(ran) == 1 and len(judged) == 1
    assert (ran, judged) == verdicts(store, "wf-baseline")
    assert (
        RunResult.from_dict(got["result"]).metrics
        == RunResult.from_dict(expected["result"]).metrics
    )
    recovered = dbos_client.retrieve_workflow("wf-killed").get_status()
    assert recovered.status == "SUCCESS"
    assert (recovered.recovery_attempts or 0) > (killed.recovery_attempts or 0)  # DBOS's own
    assert nothing_billing(sim)


def test_the_result_round_trips_through_dbos_step_output_storage(
    system_db, sim, dbos_client, store, tmp_path
):
    app = App(sim, system_db, tmp_path, "start", "wf-output")
    try:
        training(store, "wf-output", sim, app)
        printed = run_to_the_end(sim, app)
    finally:
        app.stop()
    stored = step_output(dbos_client, "wf-output")  # read back from DBOS's own tables
    assert stored == printed["result"]
    assert isinstance(stored, dict) and json.loads(json.dumps(stored)) == stored  # plain JSON
    result = RunResult.from_dict(stored)
    run, _ = streams("wf-output")
    [concluded] = [e for e in store.read(run) if isinstance(e, RunConcluded)]
    assert result == RunResult.from_event(concluded)
    assert (result.ok, result.failure, result.attempts, result.stream) == (True, None, 1, run)
    assert dbos_client.retrieve_workflow("wf-output").get_result() == stored


def test_a_dbos_cancel_cancels_the_run_deletes_its_endpoint_and_names_dbos(
    system_db, sim, dbos_client, store, tmp_path
):
    app = App(sim, system_db, tmp_path, "start", "wf-cancel")
    try:
        training(store, "wf-cancel", sim, app)
        dbos_client.cancel_workflow("wf-cancel")  # DBOS's own cancel, from another process
        run, _ = streams("wf-cancel")

        def run_concluded() -> bool:
            return any(isinstance(e, RunConcluded) for e in store.read(run))

        # the app's wait on the workflow ends at once; its step winds the run down
        wait_for("the run concluded", run_concluded, app, alive=False)
        assert app.outcome() == {"cancelled": True}
    finally:
        app.stop()

    events = store.read(run)
    [cancel] = [e for e in events if isinstance(e, CancelRequested)]
    assert cancel.by == "dbos" and "wf-cancel" in cancel.reason
    [concluded] = [e for e in events if isinstance(e, RunConcluded)]
    assert (concluded.ok, str(concluded.failure)) == (False, "cancelled")
    [endpoint] = endpoints_of(sim, "wf-cancel")
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None
    assert sum(isinstance(e, JobCancelled) for e in events) == 1  # cancelled on the platform
    assert nothing_billing(sim)
    assert dbos_client.retrieve_workflow("wf-cancel").get_status().status == "CANCELLED"
    assert step_output(dbos_client, "wf-cancel") is None  # DBOS keeps no output of a cancel


def test_a_workflow_cancelled_while_no_process_runs_it_is_wound_down_when_resumed(
    system_db, sim, dbos_client, store, tmp_path
):
    app = App(sim, system_db, tmp_path, "start", "wf-orphan")
    try:
        training(store, "wf-orphan", sim, app)
        app.kill()
    finally:
        app.stop()
    # DBOS never recovers a cancelled workflow: `cancel` records the run's cancel too
    flash.cancel("wf-orphan", NAME, client=dbos_client, store=store, reason="bad data")
    assert dbos_client.retrieve_workflow("wf-orphan").get_status().status == "CANCELLED"
    [endpoint] = endpoints_of(sim, "wf-orphan")
    assert endpoint.deleted_at is None  # nobody runs it: it bills until something winds it down

    dbos_client.resume_workflow("wf-orphan")  # enqueued: the next app with DBOS launched runs it
    resumed = App(sim, system_db, tmp_path, "recover", "wf-orphan")
    try:
        got = RunResult.from_dict(resumed.outcome()["result"])
    finally:
        resumed.stop()
    assert (got.ok, got.failure, got.attempts) == (False, "cancelled", 1)
    run, _ = streams("wf-orphan")
    events = store.read(run)
    [cancel] = [e for e in events if isinstance(e, CancelRequested)]
    assert (cancel.by, cancel.reason) == ("dbos", "bad data")
    assert sum(isinstance(e, JobCancelled) for e in events) == 1
    [endpoint] = endpoints_of(sim, "wf-orphan")
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None
    assert nothing_billing(sim)


def embedding_example() -> str | None:
    """docs/embedding.md's DBOS example (its `python-dbos` block), if the page has one."""
    page = ROOT / "docs" / "embedding.md"
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    found = [body for lang, body in FENCE.findall(text) if lang == "python-dbos"]
    return found[0] if found else None


def test_the_docs_example_trains_once_and_answers_again_from_dbos(
    system_db, sim, dbos_client, store, tmp_path
):
    example = embedding_example()
    if example is None:
        pytest.skip("docs/embedding.md has no python-dbos block yet")
    script = tmp_path / "trainer.py"
    script.write_text(example, encoding="utf-8")
    workflow_id = "nightly-2026-01-05"  # the example's
    app = App(sim, system_db, tmp_path, script=script)
    try:
        _, job = streams(workflow_id)
        wait_for("the job watched", lambda: statuses(store, job), app)
        advance(sim, TRAINING_ENDS_S + 600)  # past the training's end
        app.finish()
    finally:
        app.stop()
    stored = RunResult.from_dict(step_output(dbos_client, workflow_id))
    assert (stored.ok, stored.attempts) == (True, 1)
    again = App(sim, system_db, tmp_path, script=script)  # the same workflow id: DBOS answers
    again.finish()
    [endpoint] = endpoints_of(sim, workflow_id, "H100")  # the example's GPU
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None
    assert nothing_billing(sim)


def test_without_dbos_the_import_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['dbos'] = None\n"
        "try:\n"
        "    import flashfsm.integrations.dbos\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert "pip install 'flashfsm[dbos]'" in done.stdout, done.stderr


def test_the_store_is_the_dbos_system_database_when_that_is_postgresql():
    url = "postgresql+psycopg://trainer:pw@db.internal:5432/trainer_dbos_sys?connect_timeout=5"
    assert flash.store_url({"system_database_url": url}) == (
        "postgresql://trainer:pw@db.internal:5432/trainer_dbos_sys?connect_timeout=5"
    )
    assert flash.store_url({"system_database_url": "postgres://db/x"}) == "postgresql://db/x"
    # DBOS on SQLite, or no URL (DBOS's SQLite default): flashfsm's durable default store
    assert flash.store_url({"system_database_url": "sqlite:///trainer.sqlite"}) is None
    assert flash.store_url({"name": "trainer"}) is None


@pytest.mark.parametrize("option", ["on_interrupt", "detach", "max_retries"])
def test_configure_refuses_what_the_step_sets_itself(option):
    with pytest.raises(ValueError, match=f"{option}: set by the step"):
        flash.configure(**{option: None})


@pytest.mark.parametrize("every", [0, -1.0, float("nan"), float("inf"), True, "2"])
def test_configure_refuses_a_cancel_check_that_is_not_a_positive_time(every):
    with pytest.raises(ValueError, match="check_every_s"):
        flash.configure(check_every_s=every)
