"""Runs run out of the box in the fleet: the two-shell transcript of docs/fleet.md, run.

`flashfsm simulator` in one process; its `export` lines applied to the environment of the
commands of the second shell (`runs add` of a spec file, `supervise --until-idle`,
`replay`), each its own process, in a scratch directory that is their working directory
and `HOME` (runpod-flash writes `./.flash` and reads `./.env`). The run deploys with
runpod-flash against the simulator, trains and concludes with no code of the user's. The
transcript is read from the page, so the page shows what the commands print (its two
shells keep it out of tests/test_docs_transcripts.py).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from flashfsm.adapters.stores import open_store
from flashfsm.events.models import EndpointDeployed, RunStarted, WatchStarted
from flashfsm.fsm.run import replay_run
from tests.test_simulator_cli import FLASHFSM, Served

PAGE = Path(__file__).resolve().parents[1] / "docs" / "fleet.md"
SECTION = "## Runs, out of the box"
TEXT = re.compile(r"^```text\n(.*?)^```", re.S | re.M)
TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.M)
PORT = re.compile(r"127\.0\.0\.1:\d+")
ELIDED = "…"


def shells() -> tuple[list[str], list[str]]:
    """The section's two blocks, as lines: the simulator's shell and the replica's."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    first, second = TEXT.findall(section)
    return first.splitlines(), second.splitlines()


def steps(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Each `$ command` line and the lines it shows."""
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            out[-1][1].append(line)
    return out


def normal(text: str) -> str:
    """Output as the page shows it, but for what differs run to run (log times, the port)."""
    return PORT.sub("127.0.0.1:PORT", TIME.sub("TIME ", text))


def matches(shown: list[str], printed: list[str]) -> bool:
    want = [normal(line).rstrip() for line in shown]
    got = [normal(line).rstrip() for line in printed]
    while got and not got[-1]:
        got.pop()
    if want and want[-1] == ELIDED:
        return got[: len(want) - 1] == want[:-1]
    return got == want


def test_the_fleet_deploys_trains_and_concludes_a_handed_off_spec_with_no_user_code(
    tmp_path: Path,
):
    first, second = shells()
    [(simulator, exports)] = steps(first)
    argv = shlex.split(simulator)
    assert argv[0] == "flashfsm"
    served = Served([*FLASHFSM, *argv[1:], "--port", "0"], tmp_path)  # (any free port)
    try:
        printed = [f"export {name}={shlex.quote(value)}" for name, value in served.env.items()]
        assert matches(exports, [*printed, *served.comments]), (exports, printed)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "HF_"))}
        env.pop("FLASHFSM_STORE", None)
        env.update(HOME=str(tmp_path), RUNPOD_FLASH_SILENCE_DEPRECATION="1")
        env["PYTHONUNBUFFERED"] = "1"  # (stdout and stderr interleaved as written)
        for command, shown in steps(second):
            words = shlex.split(command)
            if words[0] == "export":  # the first shell's lines, pasted
                name, _, value = words[1].partition("=")
                assert normal(served.env[name]) == normal(value), (name, value)
                env[name] = served.env[name]
                continue
            if words[0] == "cat":  # the spec file, as the page shows it
                (tmp_path / words[1]).write_text("\n".join(shown) + "\n", encoding="utf-8")
                continue
            assert words[0] == "flashfsm", command
            done = subprocess.run(
                [*FLASHFSM, *words[1:]],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=180,
            )
            assert done.returncode == 0, (command, done.stdout[-3000:])
            assert matches(shown, done.stdout.splitlines()), (command, done.stdout)
    finally:
        assert served.stop() == 0
    store = open_store(f"sqlite:{tmp_path}/fleet.db")
    try:
        run_log = store.read("run-demo-1-s0")
        run = replay_run(run_log)
        [started] = [e for e in run_log if isinstance(e, RunStarted)]
        [deployed] = [e for e in run_log if isinstance(e, EndpointDeployed)]
        job_log = store.read(run.attempts[0].started.job_stream)
    finally:
        store.close()
    assert started.spec is not None and '"worker_image":"team/trainer:3"' in started.spec
    assert deployed.endpoint_id  # runpod-flash's deploy, against the simulator
    assert run.result is not None and run.result.ok and run.result.attempts == 1
    assert [e.watcher for e in job_log if isinstance(e, WatchStarted)] == ["replica-1"]
    assert job_log[-1].kind == "Concluded" and job_log[-1].state == "SUCCEEDED"
