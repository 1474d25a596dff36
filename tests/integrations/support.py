"""What the orchestrator tests share: the simulator in a process of its own, the environment
of the processes an orchestrator starts, reading a run's log while it runs, and the docs'
orchestrator blocks (docs/embedding.md), which these tests run.

Every run here trains the simulator's `training` scenario: 30 simulated minutes (a
heartbeat each minute, then the end record and COMPLETED), at `SPEED` simulated seconds per
real second, watched every `INTERVAL_S` real seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flashfsm.adapters.simulator import Usage, read_usage
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import (
    CancelRequested,
    Concluded,
    EndpointDeployed,
    JobQueued,
    RunConcluded,
    StatusObserved,
    WatchStarted,
)
from tests.store_support import read_stream
from tests.test_simulator_cli import FLASHFSM, Served

ROOT = Path(__file__).resolve().parents[2]
EMBEDDING = ROOT / "docs" / "embedding.md"
KEY = "sk-test-embed"
SPEED = 150.0  # the 30-minute training takes 12.8 real seconds
INTERVAL_S = 1.0
#: Simulated seconds after the submit when a run is killed or cancelled: mid-training
#: (training heartbeats run from 120 s to 1920 s).
MID_TRAINING_S = 600.0
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)


def doc_block(language: str) -> str:
    """The one block of `language` in docs/embedding.md (the orchestrator's example)."""
    [block] = [
        body
        for lang, body in FENCE.findall(EMBEDDING.read_text(encoding="utf-8"))
        if lang == language
    ]
    return block


def serve_simulator(tmp_path: Path, speed: float = SPEED) -> Iterator[Served]:
    """`flashfsm simulator` in its own process: every job trains for 30 simulated minutes,
    at `speed` simulated seconds a second (slower for an orchestrator that restarts slowly:
    a resume must come within the result's 30-minute retention)."""
    served = Served(
        [
            *FLASHFSM,
            "simulator",
            "--port",
            "0",
            "--speed",
            str(speed),
            "--key",
            KEY,
            "--scenario",
            "training",
        ],
        tmp_path,
    )
    try:
        yield served
    finally:
        served.stop(signal.SIGTERM)  # (SIGINT is ignored where a shell started pytest in the
        # background, and a child inherits that)


#: `serve_simulator` as a context manager.
simulator = contextlib.contextmanager(serve_simulator)


def child_env(served: Served, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a process an orchestrator runs: the simulator's exports (RunPod
    and the Hub), a home of its own, and nothing of this machine's RunPod or Hub settings."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "HF_"))}
    return {
        **keep,
        **served.env,
        "HOME": str(home),
        "HF_HOME": str(home / "hf"),
        "RUNPOD_FLASH_SILENCE_DEPRECATION": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **extra,
    }


def run_streams(store: str) -> list[str]:
    """The run streams (`run-…`) of the store at `store`."""
    opened = open_store(store)
    try:
        return sorted(s for s in opened.streams() if s.startswith("run-"))
    finally:
        opened.close()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    """`check()`'s first truthy answer, asked every 0.2 s; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def sim_now(served: Served) -> float:
    """The simulator's clock (sim epoch seconds), as its usage record reads it."""
    return read_usage(served.env["HF_ENDPOINT"]).at


def mid_training(store: str, served: Served) -> str:
    """Wait until the one run of `store` has a job that trains, `MID_TRAINING_S` simulated
    seconds after its submit; returns the run's stream."""

    def training() -> str | None:
        for stream in run_streams(store):
            run = read_stream(store, stream)
            queued = [e for e in run if isinstance(e, JobQueued)]
            if not queued:
                continue
            job = read_stream(store, queued[-1].job_stream)
            started = any(isinstance(e, StatusObserved) and e.status == "IN_PROGRESS" for e in job)
            if started and sim_now(served) - queued[-1].submitted_at >= MID_TRAINING_S:
                return stream
        return None

    return wait_for("a job mid-training", training)


def outcome(store: str, stream: str) -> dict[str, Any]:
    """What a run concluded, without what names it: the run's result and its job's verdict
    (state, rule, failure, metrics), how many of each were recorded, and the watches."""
    run = read_stream(store, stream)
    [queued] = [e for e in run if isinstance(e, JobQueued)]
    job = read_stream(store, queued.job_stream)
    concluded = [e for e in run if isinstance(e, RunConcluded)]
    verdicts = [e for e in job if isinstance(e, Concluded)]
    return {
        "run": [(e.ok, e.failure, e.attempts, e.metrics) for e in concluded],
        "job": [(e.state, e.rule, e.failure, e.metrics) for e in verdicts],
        "deploys": sum(isinstance(e, EndpointDeployed) for e in run),
        "cancels": [(e.by, e.reason) for e in run if isinstance(e, CancelRequested)],
        "reattached": [e.reattach for e in job if isinstance(e, WatchStarted)],
    }


def one_endpoint(served: Served) -> Usage:
    """The simulator's own records, checked to hold exactly one endpoint with one job."""
    usage = read_usage(served.env["HF_ENDPOINT"])
    [endpoint] = usage.endpoints
    assert endpoint.submitted == 1, usage
    return usage


def kill(pid: int) -> None:
    """SIGKILL `pid` (the orchestrator's worker process)."""
    os.kill(pid, signal.SIGKILL)


def children(pid: int, running: str = "") -> list[int]:
    """The processes whose parent is `pid` and whose command line holds `running` (/proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if int(fields[1]) == pid and running in command:
            found.append(int(stat.parent.name))
    return found
