"""Quiet unless the application configures logging (docs/api.md, "Importing, and logging").

flashfsm's loggers (all under `flashfsm`) have a NullHandler at their top, so Python's
last-resort handler never prints their warnings to an unconfigured application's stderr;
the `transitions` library's per-transition INFO lines stay out of an application's INFO logs
(an Airflow or Prefect task log) unless the application set that logger's level itself.
Each case runs a whole job, `poll_job` on the in-process simulator, in a fresh interpreter:
the test process's own logging (pytest's) must not count.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A job watched to its verdict on the simulator (its transitions: QUEUED → SETUP →
#: SUCCEEDED), after `{setup}` ran; the last line of stdout is the verdict.
JOB = """
import logging
{setup}
from flashfsm import JobHandle, MemoryStore, poll_job
from flashfsm.adapters.simulator import Simulator

with Simulator(speed=0) as sim:
    endpoint_id = sim.add_endpoint("flash-quiet-s0")
    job_id = sim.submit(endpoint_id, {{"scenario": "success"}})
    handle = JobHandle(endpoint_id, "flash-quiet-s0", job_id, submitted_at=sim.clock.now())
    with sim.client() as client:
        result = poll_job(
            handle,
            interval_s=10,
            client=client,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
            store=MemoryStore(),
            stream="job-quiet",
        )
{after}
print(result.state)
"""


def run_job(setup: str = "", after: str = "") -> tuple[str, str]:
    """(stdout, stderr) of a fresh interpreter that ran `JOB`."""
    code = JOB.format(setup=textwrap.dedent(setup), after=textwrap.dedent(after))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "SUCCEEDED"
    return done.stdout, done.stderr


def transitions_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "transitions" in line]


def test_a_job_run_writes_nothing_to_stderr_when_logging_is_not_configured():
    # and a warning of the library's (here one of its own loggers, as a torn line would log)
    # is not printed by Python's last-resort handler either
    _, stderr = run_job(after="logging.getLogger('flashfsm.writer').warning('a library warning')")
    assert stderr == ""


def test_an_application_logging_at_info_gets_no_transitions_lines():
    _, stderr = run_job(setup="logging.basicConfig(level=logging.INFO)")
    assert transitions_lines(stderr) == []


def test_the_applications_own_level_for_transitions_is_kept():
    # set before flashfsm is imported: flashfsm leaves it alone (and the lines are there to
    # see, so the check above can fail)
    _, stderr = run_job(
        setup="""
        logging.basicConfig(level=logging.INFO)
        logging.getLogger("transitions").setLevel(logging.INFO)
        """
    )
    assert any("Finished processing state" in line for line in transitions_lines(stderr))


def test_the_libraries_warnings_reach_an_application_that_configures_logging():
    _, stderr = run_job(
        setup="logging.basicConfig(level=logging.WARNING)",
        after="logging.getLogger('flashfsm.writer').warning('a library warning')",
    )
    assert "WARNING:flashfsm.writer:a library warning" in stderr.splitlines()
