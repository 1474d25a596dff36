"""Dagster 1.x runs flashfsm (`flashfsm.integrations.dagster`): docs/embedding.md's job, run
by Dagster's in-process executor in a run-worker process of its own (`execute_job` on a
`DagsterInstance` in a temporary `DAGSTER_HOME`), trains on `flashfsm simulator`.

- uninterrupted, its output read back through Dagster's own IO manager;
- its run worker SIGKILLed mid-training, the run marked failed (what Dagster's run
  monitoring does for a dead run worker), then re-executed from failure (a new run of the
  same group: a new run_id, the same root_run_id), which resumes the run: 1 endpoint, 1 job,
  1 verdict equal to the uninterrupted one;
- terminated (`instance.run_launcher.terminate`: the run CANCELING), with and without the
  interrupt a launcher sends its run worker: the run concludes `cancelled` with its endpoint
  deleted, by "dagster", and Dagster marks the run CANCELED.

Skipped without Dagster (`pip install 'flashfsm[dagster]'`). Telemetry is off
(`dagster.yaml`, `DAGSTER_DISABLE_TELEMETRY`); every process talks only to 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dagster", reason="Dagster is not installed: pip install 'flashfsm[dagster]'")

from dagster import DagsterInstance, DagsterRunStatus

from flashfsm import RunResult
from flashfsm.adapters.simulator import read_usage
from tests.integrations.support import (
    INTERVAL_S,
    child_env,
    doc_block,
    kill,
    mid_training,
    one_endpoint,
    outcome,
    run_streams,
    simulator,
    wait_for,
)

#: A run worker: docs/embedding.md's job (`training_job.py`), executed in this process with
#: the in-process executor, or re-executed from the failure of run `argv[1]`; prints the
#: run's id, whether it succeeded, and the op's output as its IO manager stored it.
WORKER = textwrap.dedent(
    """
    import json, sys
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable
    from training_job import training

    parent, config = sys.argv[1], json.loads(sys.argv[2])
    with DagsterInstance.get() as instance:
        again = ReexecutionOptions.from_failure(parent, instance) if parent != "-" else None
        with execute_job(reconstructable(training), instance=instance, run_config=config,
                         reexecution_options=again, raise_on_error=False) as result:
            output = result.output_for_node("train") if result.success else None
            print(json.dumps({"run_id": result.run_id, "success": result.success,
                              "output": output}))
    """
)


class Worker:
    """Dagster's run worker for docs/embedding.md's job, on the simulator `served`."""

    def __init__(self, served: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        self.served, self.tmp = served, tmp_path
        home = tmp_path / "dagster-home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.store = f"sqlite:///{tmp_path}/runs.db"
        (tmp_path / "training_job.py").write_text(doc_block("python-dagster"))
        (tmp_path / "worker.py").write_text(WORKER)
        dagster = {"DAGSTER_HOME": str(home), "DAGSTER_DISABLE_TELEMETRY": "1"}
        self.env = child_env(served, tmp_path, TRAINING_STORE=self.store, **dagster)
        for name, value in dagster.items():
            monkeypatch.setenv(name, value)  # this process's instance is the same one
        self.instance = DagsterInstance.get()

    def config(self, check_every_s: float = 1.0) -> dict[str, Any]:
        settings = {"store_url": self.store, "interval_s": INTERVAL_S}
        return {"resources": {"flashfsm": {"config": {**settings, "check_every_s": check_every_s}}}}

    def start(self, parent: str = "-", check_every_s: float = 1.0) -> subprocess.Popen[str]:
        """A run worker executing the job (a re-execution of `parent`'s failure)."""
        with open(self.tmp / "worker.err", "a") as err:  # (the child keeps its own copy)
            return subprocess.Popen(
                [sys.executable, "worker.py", parent, json.dumps(self.config(check_every_s))],
                cwd=self.tmp,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def finish(self, worker: subprocess.Popen[str]) -> dict[str, Any]:
        """What the run worker printed, once it has ended."""
        out, _ = worker.communicate(timeout=180)
        assert worker.returncode == 0, (self.tmp / "worker.err").read_text()[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    def run(self, parent: str = "-") -> dict[str, Any]:
        return self.finish(self.start(parent))

    def the_run(self) -> Any:
        """The one Dagster run of the instance (once the worker made it)."""
        found = wait_for("the Dagster run", lambda: self.instance.get_runs(limit=1))
        return found[0]


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    with simulator(tmp_path) as served:
        made = Worker(served, tmp_path, monkeypatch)
        try:
            yield made
        finally:
            made.instance.dispose()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The docs' job run once, start to end: what it recorded and what Dagster stored."""
    tmp_path = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as monkeypatch, simulator(tmp_path) as served:
        made = Worker(served, tmp_path, monkeypatch)
        try:
            printed = made.run()
            [stream] = run_streams(made.store)
            return {
                **printed,
                "stream": stream,
                "outcome": outcome(made.store, stream),
                "usage": one_endpoint(served),
            }
        finally:
            made.instance.dispose()


def test_the_output_round_trips_through_dagster_s_io_manager(uninterrupted):
    assert uninterrupted["success"]
    stored = uninterrupted["output"]  # loaded back by the job's IO manager
    result = RunResult.from_dict(stored)
    assert result.to_dict() == stored and result.ok and result.attempts == 1
    assert result.metrics == {"reward": 0.82, "loss": 0.117, "steps": 300}
    # the first run of a group has no root_run_id: its own run id stands for it
    assert result.stream == uninterrupted["stream"]
    assert result.stream.startswith(f"run-dagster.{uninterrupted['run_id']}.train.")
    assert uninterrupted["outcome"]["job"] == [("SUCCEEDED", "completed", None, result.metrics)]
    assert uninterrupted["usage"].endpoints[0].deleted_at is not None


def test_a_killed_run_worker_re_executed_from_failure_resumes_its_run(worker, uninterrupted):
    first = worker.start()
    stream = mid_training(worker.store, worker.served)
    kill(first.pid)
    first.wait(timeout=30)
    run = worker.the_run()
    assert run.status == DagsterRunStatus.STARTED  # nobody told Dagster: its worker died
    worker.instance.report_run_failed(run, message="run worker died")  # run monitoring's call

    again = worker.run(parent=run.run_id)
    assert again["success"] and again["run_id"] != run.run_id
    retried = worker.instance.get_run_by_id(again["run_id"])
    assert retried.root_run_id == run.run_id  # the same group: the same flashfsm run

    usage = one_endpoint(worker.served)  # 1 endpoint created, 1 job submitted
    resumed = outcome(worker.store, stream)
    expected = uninterrupted["outcome"]
    assert resumed["run"] == expected["run"] and len(resumed["run"]) == 1  # 1 verdict
    assert resumed["job"] == expected["job"] and len(resumed["job"]) == 1
    assert resumed["deploys"] == 1 and resumed["reattached"] == [False, True]
    output = again["output"]
    assert RunResult.from_dict(output).stream == stream
    assert {k: v for k, v in output.items() if k != "stream"} == {
        k: v for k, v in uninterrupted["output"].items() if k != "stream"
    }
    assert usage.endpoints[0].deleted_at is not None


@pytest.mark.parametrize("interrupted", [False, True], ids=["status", "interrupt"])
def test_a_dagster_termination_cancels_the_job_and_deletes_the_endpoint(worker, interrupted):
    # "interrupt": the run's status is not read between waits, so only the interrupt a
    # launcher sends its run worker after marking the run CANCELING brings the cancel
    process = worker.start(check_every_s=3600.0 if interrupted else 1.0)
    stream = mid_training(worker.store, worker.served)
    run = worker.the_run()
    worker.instance.run_launcher.terminate(run.run_id)  # the UI's Terminate: CANCELING
    if interrupted:
        process.send_signal(signal.SIGINT)  # what the launcher's code server sends
    printed = worker.finish(process)
    cancelled = outcome(worker.store, stream)
    usage = read_usage(worker.served.env["HF_ENDPOINT"])

    assert not printed["success"]
    assert worker.instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELED
    assert cancelled["run"] == [(False, "cancelled", 1, None)]
    [(by, reason)] = cancelled["cancels"]
    assert by == "dagster" and run.run_id in reason
    assert cancelled["job"][0][:2] == ("PREEMPTED", "platform_termination")  # its cancel's answer
    [endpoint] = usage.endpoints
    assert endpoint.submitted == 1 and endpoint.deleted_at is not None
