"""Prefect 3 runs flashfsm (`flashfsm.integrations.prefect`): docs/embedding.md's flow, served
by a Prefect runner against a Prefect server, trains on `flashfsm simulator`.

- uninterrupted, its result read back through Prefect's own result storage;
- its flow-run process SIGKILLed mid-training: the runner marks the flow run Crashed and
  `prefect flow-run retry` (Prefect's own retry, the UI's Retry) runs the same flow run
  again, which resumes the run: 1 endpoint, 1 job, 1 verdict equal to the uninterrupted one;
- cancelled from Prefect (CANCELLING, as `prefect flow-run cancel` sets it): the runner stops
  the process, the run concludes `cancelled` with its endpoint deleted, by "prefect".

Skipped without Prefect (`pip install 'flashfsm[prefect]'`). Every process here talks only to
127.0.0.1: the Prefect server (analytics off, no UI) and the simulator.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

pytest.importorskip("prefect", reason="Prefect is not installed: pip install 'flashfsm[prefect]'")

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_LOCAL_STORAGE_PATH,
    temporary_settings,
)
from prefect.states import Cancelling

from flashfsm import RunResult
from flashfsm.adapters.simulator import read_usage
from flashfsm.integrations.prefect import FlashfsmStore, store_url
from tests.integrations.support import (
    INTERVAL_S,
    child_env,
    children,
    doc_block,
    kill,
    mid_training,
    one_endpoint,
    outcome,
    run_streams,
    simulator,
    wait_for,
)

PREFECT = str(Path(sys.executable).with_name("prefect"))
QUIET = {  # nothing leaves the machine: no analytics, no UI, no update checks
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A Prefect server on 127.0.0.1, and the settings every process here uses with it."""

    url: str
    home: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            **QUIET,
            "PREFECT_API_URL": self.url,
            "PREFECT_HOME": str(self.home),
            "PREFECT_LOCAL_STORAGE_PATH": str(self.home / "storage"),
        }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {**os.environ, **QUIET, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/api"

    def healthy() -> bool:
        assert process.poll() is None, (home / "server.log").read_text()
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        return False

    try:
        wait_for("the Prefect server", healthy, timeout=120)
        found = Server(url, home)
        with temporary_settings(
            {
                PREFECT_API_URL: url,
                PREFECT_HOME: home,
                PREFECT_LOCAL_STORAGE_PATH: home / "storage",
            }
        ):
            yield found
            EventsWorker.drain_all()  # (this process's events and logs, sent before the server
            APILogWorker.drain_all()  # stops, not retried at exit against a closed port)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


class Deployment:
    """docs/embedding.md's flow, served (`python train_flow.py`: `train.serve(name="train")`)
    by a runner whose flow runs train on the simulator `served`."""

    def __init__(self, server: Server, served: Any, tmp_path: Path):
        self.server, self.served, self.tmp = server, served, tmp_path
        self.store = f"sqlite:///{tmp_path}/runs.db"
        (tmp_path / "train_flow.py").write_text(doc_block("python-prefect"))
        env = child_env(served, tmp_path, **server.env, PREFECT_RUNNER_POLL_FREQUENCY="1")
        self.env = env
        self.log = open(tmp_path / "runner.log", "w")  # noqa: SIM115 - closed in stop()
        self.runner = subprocess.Popen(
            [sys.executable, "train_flow.py"],
            cwd=tmp_path,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.deployment = wait_for("the deployment", self._deployment)

    def _deployment(self) -> UUID | None:
        assert self.runner.poll() is None, (self.tmp / "runner.log").read_text()
        with get_client(sync_client=True) as client:
            try:
                return client.read_deployment_by_name("train/train").id
            except Exception:
                return None

    def start(self) -> UUID:
        """A flow run of the deployment, with the test's store and watch interval."""
        parameters = {"store": self.store, "interval_s": INTERVAL_S}
        with get_client(sync_client=True) as client:
            run = client.create_flow_run_from_deployment(self.deployment, parameters=parameters)
        return run.id

    def state(self, flow_run_id: UUID) -> Any:
        with get_client(sync_client=True) as client:
            return client.read_flow_run(flow_run_id).state

    def wait(self, flow_run_id: UUID, *types: StateType, timeout: float = 120.0) -> Any:
        def reached() -> Any:
            state = self.state(flow_run_id)
            return state if state is not None and state.type in types else None

        return wait_for(f"flow run {flow_run_id} to be {types}", reached, timeout=timeout)

    def flow_process(self) -> int:
        """The pid of the flow-run process the runner started (a multiprocessing child)."""
        [pid] = wait_for("the flow-run process", lambda: children(self.runner.pid, "spawn_main"))
        return pid

    def stop(self) -> None:
        self.runner.terminate()
        try:
            self.runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.runner.kill()
        self.log.close()


@contextlib.contextmanager
def deployed(server: Server, tmp_path: Path) -> Iterator[Deployment]:
    """A simulator and a runner serving the docs' flow on it, both stopped after."""
    with simulator(tmp_path) as served:
        deployment = Deployment(server, served, tmp_path)
        try:
            yield deployment
        finally:
            deployment.stop()


@pytest.fixture(scope="module")
def uninterrupted(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The docs' flow run once, start to end: what it recorded and what Prefect stored."""
    with deployed(server, tmp_path_factory.mktemp("uninterrupted")) as deployment:
        flow_run_id = deployment.start()
        state = deployment.wait(flow_run_id, StateType.COMPLETED, StateType.FAILED)
        assert state.type == StateType.COMPLETED, state
        stored = state.result()  # from Prefect's result storage, as JSON
        [stream] = run_streams(deployment.store)
        return {
            "stored": stored,
            "stream": stream,
            "outcome": outcome(deployment.store, stream),
            "usage": one_endpoint(deployment.served),
            "flow_run_id": str(flow_run_id),
        }


def test_the_result_round_trips_through_prefect_s_result_storage(uninterrupted):
    stored = uninterrupted["stored"]
    result = RunResult.from_dict(stored)
    assert result.to_dict() == stored and result.ok and result.attempts == 1
    assert result.metrics == {"reward": 0.82, "loss": 0.117, "steps": 300}  # the end record's
    assert result.stream == uninterrupted["stream"]
    # the run is named by the flow run's id, which a retry keeps
    assert result.stream.startswith(f"run-prefect.{uninterrupted['flow_run_id']}.sft.")
    assert uninterrupted["outcome"]["job"] == [("SUCCEEDED", "completed", None, result.metrics)]
    [endpoint] = uninterrupted["usage"].endpoints
    assert endpoint.deleted_at is not None  # the run deleted its endpoint at the end


def test_a_killed_flow_run_retried_by_prefect_resumes_its_run(server, tmp_path, uninterrupted):
    with deployed(server, tmp_path) as deployment:
        flow_run_id = deployment.start()
        stream = mid_training(deployment.store, deployment.served)
        kill(deployment.flow_process())
        # the runner saw its process die: Prefect's own verdict on the flow run
        deployment.wait(flow_run_id, StateType.CRASHED)

        retry = subprocess.run(
            [PREFECT, "flow-run", "retry", str(flow_run_id)],
            env=deployment.env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert retry.returncode == 0, retry.stdout + retry.stderr
        state = deployment.wait(flow_run_id, StateType.COMPLETED, StateType.FAILED)
        assert state.type == StateType.COMPLETED, state

        usage = one_endpoint(deployment.served)  # 1 endpoint created, 1 job submitted
        resumed = outcome(deployment.store, stream)
        stored = state.result()

    expected = uninterrupted["outcome"]
    assert resumed["run"] == expected["run"] and len(resumed["run"]) == 1  # 1 verdict
    assert resumed["job"] == expected["job"] and len(resumed["job"]) == 1
    assert resumed["deploys"] == 1 and resumed["reattached"] == [False, True]
    assert RunResult.from_dict(stored).stream == stream
    assert {k: v for k, v in stored.items() if k != "stream"} == {
        k: v for k, v in uninterrupted["stored"].items() if k != "stream"
    }
    assert usage.endpoints[0].deleted_at is not None


def test_a_cancel_from_prefect_cancels_the_job_and_deletes_the_endpoint(server, tmp_path):
    with deployed(server, tmp_path) as deployment:
        flow_run_id = deployment.start()
        stream = mid_training(deployment.store, deployment.served)
        with get_client(sync_client=True) as client:  # what `prefect flow-run cancel` does
            client.set_flow_run_state(flow_run_id, Cancelling())
        deployment.wait(flow_run_id, StateType.CANCELLED)
        cancelled = outcome(deployment.store, stream)
        usage = read_usage(deployment.served.env["HF_ENDPOINT"])

    assert cancelled["run"] == [(False, "cancelled", 1, None)]
    [(by, reason)] = cancelled["cancels"]
    assert by == "prefect" and str(flow_run_id) in reason
    [(state, _rule, _failure, _metrics)] = cancelled["job"]
    assert state != "SUCCEEDED"  # the job was cancelled on the platform mid-training
    [endpoint] = usage.endpoints
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None


DIRECT = """
import json, sys
from train_flow import train
print(json.dumps(train(store=sys.argv[1], interval_s=float(sys.argv[2]))))
"""


def test_a_flow_run_cancelled_where_no_runner_stops_it_is_cancelled_between_waits(server, tmp_path):
    """The flow called in a script: nothing stops its process on a cancel, so the task reads
    the flow run's state between the watch's waits, cancels the run and returns its result."""
    with simulator(tmp_path) as served:
        (tmp_path / "train_flow.py").write_text(doc_block("python-prefect"))
        store = f"sqlite:///{tmp_path}/runs.db"
        process = subprocess.Popen(
            [sys.executable, "-c", DIRECT, store, str(INTERVAL_S)],
            cwd=tmp_path,
            env=child_env(served, tmp_path, **server.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        stream = mid_training(store, served)
        with get_client(sync_client=True) as client:
            [flow_run] = client.read_flow_runs(limit=1, sort=FlowRunSort.START_TIME_DESC)
            assert stream.startswith(f"run-prefect.{flow_run.id}.")
            client.set_flow_run_state(flow_run.id, Cancelling())
        out, _ = process.communicate(timeout=120)
        usage = read_usage(served.env["HF_ENDPOINT"])

    returned = RunResult.from_dict(json.loads(out.strip().splitlines()[-1]))
    assert (returned.ok, returned.failure, returned.stream) == (False, "cancelled", stream)
    cancelled = outcome(store, stream)
    [(by, _reason)] = cancelled["cancels"]
    assert by == "prefect" and cancelled["run"] == [(False, "cancelled", 1, None)]
    [endpoint] = usage.endpoints
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None


def test_a_flashfsm_store_block_keeps_the_url_as_a_secret(server):
    url = "postgresql://trainer:s3cret-pw@127.0.0.1:5432/runs"
    FlashfsmStore(url=url).save("flashfsm-test-store", overwrite=True)
    loaded = FlashfsmStore.load("flashfsm-test-store")
    assert store_url(loaded) == url and "s3cret" not in repr(loaded)
    assert store_url("sqlite:///x.db") == "sqlite:///x.db" and store_url(None) is None
