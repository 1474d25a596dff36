"""Airflow 3 runs flashfsm (`flashfsm.integrations.airflow`): docs/embedding.md's DAG, run by
`dag.test()` (the task defers; Airflow runs its trigger in the process, as a triggerer would)
against `flashfsm simulator` in a process of its own, on a metadata database of its own.

- uninterrupted: the task succeeds and its XCom is the run's `RunResult.to_dict()`;
- the process driving the trigger SIGKILLed mid-training, then the same DAG run tested again
  (the task instance cleared and run anew, as a retry or a clear does: same DAG run, task and
  map index): the run resumes: 1 endpoint, 1 job, 1 verdict equal to the uninterrupted one;
- a user's kill of the deferred task: the triggerer cancels the trigger's task (here: its
  process is killed) and calls the trigger's `on_kill`, which records the cancel by "airflow"
  and winds the run down: `cancelled`, its endpoint deleted.

Skipped without Airflow (`pip install 'flashfsm[airflow]'`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "airflow.sdk", reason="Airflow is not installed: pip install 'flashfsm[airflow]'"
)

from flashfsm.adapters.simulator import read_usage
from tests.integrations.support import (
    INTERVAL_S,
    child_env,
    doc_block,
    kill,
    mid_training,
    one_endpoint,
    outcome,
    serve_simulator,
)
from tests.test_simulator_cli import Served, python_ok

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
LOGICAL = "2026-12-06T00:00:00+00:00"

#: The docs' DAG, pointed at the test's store and watched every INTERVAL_S, then tested for
#: one DAG run (`dag.test`); it prints the task's state and its XCom as JSON.
RUN = """
import datetime, json, sys
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
{dag}
if __name__ == "__main__":  # (Airflow parses this file too: only the DAG then)
    [task] = dag.tasks
    task.store, task.interval_s = sys.argv[1], float(sys.argv[2])
    logical = datetime.datetime.fromisoformat({logical!r})  # one DAG run: manual__<logical>
    run = dag.test(logical_date=logical, run_after=logical)
    ti = run.get_task_instance("sft")
    query = XComModel.get_many(
        run_id=run.run_id, dag_ids=dag.dag_id, task_ids="sft", key="return_value"
    )
    with create_session() as session:
        xcom = session.scalars(query).first()
        value = None if xcom is None else XComModel.deserialize_value(xcom)
    print(json.dumps({{"state": str(ti.state), "xcom": value}}))
"""

#: A user's kill of the deferred task: the trigger of that task instance, its `on_kill`.
ON_KILL = """
import asyncio, datetime, sys
from types import SimpleNamespace
{dag}
[task] = dag.tasks
task.store, task.interval_s = sys.argv[1], float(sys.argv[2])
logical = datetime.datetime.fromisoformat({logical!r})
ti = SimpleNamespace(dag_id=dag.dag_id, run_id="manual__" + logical.isoformat(),
                     task_id="sft", map_index=-1)
asyncio.run(task.trigger({{"ti": ti}}).on_kill())
"""


#: Simulated seconds a real second: `dag.test` takes 10-20 s to start again, so a resume comes
#: well inside the result's retention (30 simulated minutes: 30 real seconds here).
SPEED = 60.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    yield from serve_simulator(tmp_path, speed=SPEED)


@pytest.fixture
def airflow_home(tmp_path: Path, served: Served) -> dict[str, str]:
    """An Airflow home with its metadata database migrated; the environment to run in."""
    env = child_env(
        served,
        tmp_path,
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(tmp_path / "dags"),
    )
    (tmp_path / "dags").mkdir()
    migrated = subprocess.run(
        [AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return env


def script(tmp_path: Path, name: str, template: str, folder: str = "dags") -> Path:
    path = tmp_path / folder / f"{name}.py"
    path.write_text(template.format(dag=doc_block("python-airflow"), logical=LOGICAL))
    return path


def start(path: Path, store: str, env: dict[str, str], tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(path), store, str(INTERVAL_S)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> dict[str, object]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_a_dag_run_trains_and_its_xcom_is_the_result(
    tmp_path: Path, served: Served, airflow_home: dict[str, str]
) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    answer = finish(start(script(tmp_path, "run", RUN), store, airflow_home, tmp_path))
    assert answer["state"] == "success"
    xcom = answer["xcom"]
    assert isinstance(xcom, dict) and xcom["ok"] is True and xcom["attempts"] == 1
    assert xcom["metrics"]["reward"] == 0.82  # the worker's end record, through XCom
    usage = one_endpoint(served)
    assert usage.endpoints[0].deleted_at is not None  # the run cleaned up after itself


def test_a_killed_trigger_resumes_when_the_dag_run_is_tested_again(
    tmp_path: Path, served: Served, airflow_home: dict[str, str]
) -> None:
    # The store from an Airflow connection this time (`store_conn_id`), as in production.
    store = f"sqlite:///{tmp_path}/runs.db"
    airflow_home = {**airflow_home, "AIRFLOW_CONN_FLASHFSM_STORE": store}
    by_connection = RUN.replace(
        "task.store, task.interval_s = sys.argv[1],",
        "task.store, task.store_conn_id, task.interval_s = None, sys.argv[1],",
    )
    assert by_connection != RUN
    path = script(tmp_path, "run", by_connection)
    first = start(path, "flashfsm_store", airflow_home, tmp_path)
    stream = mid_training(store, served)
    kill(first.pid)  # the process running the trigger (a triggerer) dies mid-training
    first.communicate(timeout=60)
    answer = finish(start(path, "flashfsm_store", airflow_home, tmp_path))  # cleared, rerun
    assert answer["state"] == "success"
    one_endpoint(served)  # 1 deploy, 1 submit: resumed, not started again
    got = outcome(store, stream)
    assert got["run"] == [(True, None, 1, got["job"][0][3])] and len(got["job"]) == 1
    assert got["job"][0][:3] == ("SUCCEEDED", "completed", None)
    assert got["reattached"] == [False, True]  # one watch, then its reattach
    assert got["deploys"] == 1 and got["cancels"] == []


def test_a_user_kill_of_the_deferred_task_cancels_the_run(
    tmp_path: Path, served: Served, airflow_home: dict[str, str]
) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    first = start(script(tmp_path, "run", RUN), store, airflow_home, tmp_path)
    stream = mid_training(store, served)
    kill(first.pid)  # Airflow cancels the trigger's task before its on_kill
    first.communicate(timeout=60)
    on_kill = script(tmp_path, "kill", ON_KILL, ".")
    python_ok([str(on_kill), store, str(INTERVAL_S)], airflow_home, tmp_path, 300)
    got = outcome(store, stream)
    assert got["cancels"] == [("airflow", "the task was killed in Airflow")]
    assert got["run"][0][:2] == (False, "cancelled") and got["deploys"] == 1
    [endpoint] = read_usage(served.env["HF_ENDPOINT"]).endpoints
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        (
            {
                "conn_type": "postgres",
                "host": "db",
                "port": 5432,
                "login": "u",
                "password": "p@ss",
                "schema": "runs",
            },
            "postgresql://u:p%40ss@db:5432/runs",
        ),
        (
            {"conn_type": "postgres", "host": "127.0.0.1", "schema": "test"},
            "postgresql://127.0.0.1/test",
        ),
        (
            {"conn_type": "sqlite", "host": "/var/lib/flashfsm/runs.db"},
            "sqlite:////var/lib/flashfsm/runs.db",
        ),
        ({"conn_type": "sqlite", "schema": "/srv/runs.db"}, "sqlite:////srv/runs.db"),  # a URI's
        ({"conn_type": "generic", "extra": '{"url": "jsonl:///srv/runs"}'}, "jsonl:///srv/runs"),
    ],
)
def test_a_connection_names_its_store_url(fields: dict[str, object], url: str) -> None:
    from airflow.sdk import Connection

    from flashfsm.integrations.airflow import connection_url

    assert connection_url(Connection(conn_id="c", **fields)) == url


def test_a_connections_password_is_masked_from_then_on() -> None:
    from airflow.sdk import Connection

    from flashfsm.integrations.airflow import connection_url
    from flashfsm.redact import redact

    fields = {"conn_type": "postgres", "host": "db", "login": "u", "password": "s3cret-pa55"}
    url = connection_url(Connection(conn_id="c", **fields))
    assert "s3cret-pa55" not in redact(f"could not connect to {url}")


def test_a_connection_of_another_kind_is_refused_without_its_password() -> None:
    from airflow.sdk import Connection

    from flashfsm.integrations.airflow import connection_url

    other = Connection(conn_id="c", conn_type="http", host="h", password="hunter2")
    with pytest.raises(ValueError, match="'c' \\(http\\) names no flashfsm store") as refused:
        connection_url(other)
    assert "hunter2" not in str(refused.value)
