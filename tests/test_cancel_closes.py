"""A cancel closes everything it opened: a cancelled run's job is cancelled on the platform
and watched to the platform's answer, so its job stream concludes and no stream is left
open; Ctrl-C is a cancel too, and `flashfsm demo` stopped by it at any moment exits 130
without a traceback."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import AttemptEnded, CancelRequested, Candidate, RunConcluded
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.runs import Deployed, Recorder, RunpodRunAdapters, request_cancel, supervise_run

RUN, STREAM, JOB = "c1", "run-c1", "job-c1-a0"


def adapters(sim: Simulator, client: Any, scenario: str = "success") -> RunpodRunAdapters:
    """Deploys on the simulator (one scripted job life per endpoint), no Hub readers."""

    def deploy(run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        name = attempt.started.endpoint_name
        return Deployed(sim.add_endpoint(name, scenario=scenario), name)

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        return {"run_id": RUN}

    return RunpodRunAdapters(client, deploy, job_input, clock=sim.clock.now, sleep=sim.clock.sleep)


def on_sleep(monkeypatch: pytest.MonkeyPatch, nth: int, act: Any) -> None:
    """Call `act()` in the simulator clock's `nth` sleep (mid-watch: a watch sleeps
    between its polls), before sleeping."""
    calls = [0]
    sleep = SimClock.sleep

    def counting(self: SimClock, seconds: float) -> Any:
        calls[0] += 1
        if calls[0] == nth:
            act()
        return sleep(self, seconds)

    monkeypatch.setattr(SimClock, "sleep", counting)


def supervise(sim: Simulator, client: Any, store: Any, scenario: str = "success") -> Any:
    return supervise_run(
        RUN,
        [Candidate(gpu_class="L40S")],
        adapters(sim, client, scenario),
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
        capacity_memory=False,
    )


def assert_closed(store: SqliteStore) -> None:
    """The run concluded `cancelled`, its attempt ended with its job's verdict — the
    platform's CANCELLED, judged by `platform_termination` — and nothing is open."""
    run = store.read(STREAM)
    assert isinstance(run[-1], RunConcluded) and run[-1].failure == "cancelled"
    job = replay(store.read(JOB))
    assert job.verdict is not None, "the job stream was left open"
    assert job.status is not None and job.status.status == "CANCELLED"
    assert job.verdict.rule == "platform_termination"
    [ended] = [e for e in run if isinstance(e, AttemptEnded)]
    cancel = next(e for e in run if isinstance(e, CancelRequested))
    assert ended.seq > cancel.seq and ended.rule == "platform_termination"
    assert store.open_streams() == []


@pytest.fixture
def world(tmp_path: Path):
    store = SqliteStore(tmp_path / "events.db")
    with Simulator(speed=0) as sim, sim.client() as client:
        yield sim, client, store
    store.close()


def test_a_run_cancelled_mid_attempt_concludes_its_job_stream(world, monkeypatch):
    sim, client, store = world
    on_sleep(monkeypatch, 4, lambda: request_cancel(store, STREAM, by="t", clock=sim.clock.now))
    result = supervise(sim, client, store)
    assert (result.ok, result.failure) == (False, "cancelled")
    assert_closed(store)


def test_ctrl_c_mid_attempt_cancels_the_run_then_raises_again(world, monkeypatch):
    sim, client, store = world

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    on_sleep(monkeypatch, 4, ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        supervise(sim, client, store)
    assert_closed(store)
    cancel = next(e for e in store.read(STREAM) if isinstance(e, CancelRequested))
    assert (cancel.by, cancel.reason) == ("Ctrl-C", "(Ctrl-C)")
    # calling again returns the cancelled result, and opens nothing
    assert supervise(sim, client, store).failure == "cancelled"
    assert store.open_streams() == []


def test_a_platform_that_cannot_be_reached_after_the_cancel_concludes_by_poll_errors(
    world, monkeypatch
):
    sim, client, store = world

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the platform cannot be reached")

    def cancel_and_lose_the_platform() -> None:
        request_cancel(store, STREAM, by="t", clock=sim.clock.now)
        monkeypatch.setattr(client, "cancel", unreachable)
        monkeypatch.setattr(client, "job_status", unreachable)

    on_sleep(monkeypatch, 4, cancel_and_lose_the_platform)
    started = sim.clock.now()
    result = supervise(sim, client, store)
    assert result.failure == "cancelled"
    job = replay(store.read(JOB))
    assert job.verdict is not None and job.verdict.rule == "poll_errors"
    assert "cannot be reached" in (job.verdict.detail or "")
    # bounded: the error budget (8 in a row, each backing off to at most 60 s)
    assert sim.clock.now() - started < 15 * 60
    assert store.open_streams() == []


# --- Ctrl-C at random moments of `flashfsm demo` ----------------------------------------------

#: The `flashfsm` console script of this interpreter (not a shim that execs it).
COMMAND = Path(sys.executable).with_name("flashfsm")
#: What Python prints for an exception nobody caught, or one it had to ignore.
UNCAUGHT = re.compile(r"^(Traceback \(most recent call last\):|Exception ignored|Fatal Python)")
GUARD = b"flashfsm.sigint"
#: The demo's last line, once it is done.
LAST_LINE = re.compile(r"^  flashfsm replay run-demo-\S+$", re.M)


def start_demo(home: Path) -> subprocess.Popen[bytes]:
    """`flashfsm demo` into a fresh store, in a fresh HOME and cwd; returns once the
    process has loaded flashfsm's first module (Python's own start-up, before the
    program's first line, cannot take a Ctrl-C: `flashfsm.sigint`)."""
    env = {k: v for k, v in os.environ.items() if k != "FLASHFSM_STORE"}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
        PYTHONPROFILEIMPORTTIME="1",  # each import's line on stderr: the guard's says when
    )
    argv = [str(COMMAND), "demo", "--store", f"sqlite:///{home}/demo.db"]
    process = subprocess.Popen(
        argv, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    for line in process.stderr:
        if line.split(b"|")[-1].strip() == GUARD:
            return process
    raise AssertionError(f"flashfsm never loaded {GUARD!r}")


def finish(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    out, err = process.communicate(timeout=120)
    lines = [line for line in err.splitlines() if not line.startswith(b"import time:")]
    return process.returncode, (out + b"\n" + b"\n".join(lines)).decode(errors="replace")


@pytest.mark.skipif(not COMMAND.exists(), reason="the flashfsm console script is not installed")
def test_ctrl_c_at_random_moments_of_the_demo_exits_130_and_leaves_nothing_open(tmp_path):
    whole = time.monotonic()
    home = tmp_path / "full"
    home.mkdir()
    began = time.monotonic()
    code, output = finish(start_demo(home))
    duration = time.monotonic() - began
    assert code == 0 and not UNCAUGHT.search(output), output[-3000:]
    rng = random.Random(27)
    # most moments in the first seconds (imports, the simulator's start, the first run),
    # the rest anywhere in the demo
    early = [rng.uniform(0, 1.5) for _ in range(14)]
    moments = sorted(early + [rng.uniform(0, 0.8 * duration) for _ in range(6)])
    for n, delay in enumerate(moments):
        home = tmp_path / f"m{n}"
        home.mkdir()
        process = start_demo(home)
        time.sleep(delay)
        over = process.poll() is not None  # (a loaded machine can make a demo quicker)
        process.send_signal(signal.SIGINT)
        code, output = finish(process)
        where = f"Ctrl-C {delay:.2f}s in (of {duration:.1f}s):\n{output[-3000:]}"
        assert UNCAUGHT.search(output) is None, where
        # 0 only for a demo that was over (or exiting, its last line printed) when it came
        done = over or (code == 0 and LAST_LINE.search(output) is not None)
        assert code == (0 if done else 130), where
        db = home / "demo.db"
        if db.exists():
            store = open_store(f"sqlite:///{db}")
            try:
                assert store.open_streams() == [], where
            finally:
                store.close()
    assert time.monotonic() - whole < 300
