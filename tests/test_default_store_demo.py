"""After a first `flashfsm demo`, the bare read commands find its runs.

The demo writes its own store, `demo.db`, beside the default store (`events.db`), which a
first demo leaves missing. Until the default store exists, a command that only reads, given
no `--store` and no `$FLASHFSM_STORE`, reads the demo's store and says so in one line on
stderr; it still creates nothing. A command that writes keeps the default store, and once
that exists the bare commands read it. The demo's closing lines say which store the bare
commands read.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from flashfsm import open_store
from flashfsm.adapters.urls import path_url
from flashfsm.cli import EXIT_CODES, app
from flashfsm.events.models import Candidate, RunStarted
from flashfsm.ids import new_id
from flashfsm.sigint import EXIT_INTERRUPTED
from tests.test_demo import user_dirs  # noqa: F401 (a fixture)

COMMAND = Path(sys.executable).with_name("flashfsm")
runner = CliRunner()


@pytest.fixture
def data(user_dirs: Path) -> Path:  # noqa: F811 (the fixture, by name)
    """A user data directory of the test's own (`tests.test_demo.user_dirs`), and no
    $FLASHFSM_STORE: the directory the default store (`events.db`) and the demo's
    (`demo.db`) go in (not made here)."""
    return user_dirs / "data" / "flashfsm"


def url_of(path: Path) -> str:
    return path_url("sqlite", path)


def fallback_line(data: Path) -> str:
    return (
        f"(no store at {url_of(data / 'events.db')} yet: reading the demo's store "
        f"{url_of(data / 'demo.db')})"
    )


def write_run(path: Path, name: str) -> None:
    """A store at `path` (created) holding the run `name`, started."""
    path.parent.mkdir(parents=True, exist_ok=True)
    store = open_store(url_of(path))
    try:
        started = RunStarted(
            stream=name,
            seq=0,
            id=new_id(1_700_000_000.0),
            at=1_700_000_000.0,
            run_id=name,
            candidates=(Candidate(gpu_class="L40S", price_per_hour=0.99),),
        )
        store.append(name, [started], 0)
    finally:
        store.close()


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "400"})


def test_after_the_demo_the_bare_read_commands_read_its_store_and_create_nothing(data):
    made = invoke("demo", "--tag", "abc123")
    assert made.exit_code == 0, made.output
    assert (data / "demo.db").is_file() and not (data / "events.db").exists()
    # its closing lines say the bare commands read its store, each line still fits 80 columns
    explore = made.stdout.split("\nexplore (", 1)[1]
    assert explore.startswith(
        "with no default store yet, commands without --store read the demo's;\n"
        "the first line points them at it for good):\n"
    )
    assert all(len(line) <= 80 for line in explore.splitlines() if "export" not in line)
    before = snapshot(data)
    listed = invoke("ls")
    assert listed.exit_code == 0, listed.output
    assert "run-demo-abc123-walk-s1" in listed.stdout
    assert listed.stderr == fallback_line(data) + "\n"
    as_json = invoke("ls", "--json")  # stdout stays one JSON document
    assert json.loads(as_json.stdout)["store"] == url_of(data / "demo.db")
    explained = invoke("explain", "job-demo-abc123-walk-s1-a0")
    assert explained.exit_code == EXIT_CODES["no_capacity"], explained.output
    assert explained.stderr == fallback_line(data) + "\n"
    costed = invoke("cost")
    assert costed.exit_code == 0, costed.output
    assert costed.stderr.count("reading the demo's store") == 1
    assert snapshot(data) == before  # read, never written: no events.db, nothing touched


def test_a_bare_flashfsm_ui_serves_the_demos_store(data):
    write_run(data / "demo.db", "run-demo-abc123-clean-s0")
    assert COMMAND.exists(), f"no console script at {COMMAND}: pip install -e ."
    proc = subprocess.Popen(
        [str(COMMAND), "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"flashfsm ui: {url_of(data / 'demo.db')} at http://"), line
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.splitlines() == [fallback_line(data), "flashfsm ui: stopped"]
    assert not (data / "events.db").exists()


def test_a_command_that_writes_keeps_the_default_store_which_the_bare_commands_read_after(
    data, tmp_path
):
    write_run(data / "demo.db", "run-demo-abc123-clean-s0")
    demo_before = snapshot(data)
    handle = tmp_path / "job.json"
    handle.write_text(json.dumps({"endpoint_id": "ep-1", "job_id": "j-1"}))
    added = invoke("runs", "add", str(handle))
    assert added.exit_code == 0, added.output
    assert "reading the demo's store" not in added.output
    assert (data / "events.db").is_file()
    assert snapshot(data)["demo.db"] == demo_before["demo.db"]  # the demo's store untouched
    listed = invoke("ls")
    assert listed.exit_code == 0, listed.output
    assert "job-j-1" in listed.stdout and "run-demo-abc123" not in listed.stdout
    assert listed.stderr == ""


def test_a_default_store_that_exists_is_read_as_before(data):
    write_run(data / "demo.db", "run-demo-abc123-clean-s0")
    write_run(data / "events.db", "run-mine")
    listed = invoke("ls")
    assert listed.exit_code == 0, listed.output
    assert "run-mine" in listed.stdout and "run-demo" not in listed.stdout
    assert listed.stderr == ""


def test_a_named_store_is_never_swapped_for_the_demos(data, monkeypatch):
    write_run(data / "demo.db", "run-demo-abc123-clean-s0")
    missing = data / "events.db"
    named = invoke("ls", "--store", url_of(missing))
    assert named.exit_code == 1
    assert named.output == f"error: no SQLite store at {missing}\n"
    monkeypatch.setenv("FLASHFSM_STORE", url_of(missing))  # the same, named by the variable
    by_env = invoke("ls")
    assert by_env.exit_code == 1
    assert by_env.output == f"error: no SQLite store at {missing}\n"
    assert not missing.exists()


def test_with_no_store_at_all_a_bare_read_is_the_one_line_error_and_makes_no_directory(data):
    for args in (["ls"], ["replay", "run-x"], ["cost"]):
        result = invoke(*args)
        assert result.exit_code == 1, (args, result.output)
        assert result.output == f"error: no SQLite store at {data / 'events.db'}\n", args
    assert not data.parent.exists()


def test_the_demo_names_the_bare_commands_store_only_when_they_read_it(data, tmp_path):
    """Where the bare commands read another store (a default store exists), the demo's
    closing lines point at its store with the export line alone."""
    write_run(data / "events.db", "run-mine")
    made = invoke("demo", "--store", url_of(tmp_path / "elsewhere.db"), "--tag", "abc123")
    assert made.exit_code == 0, made.output
    assert re.search(r"^explore \(the first line points the commands at", made.stdout, re.M)
    assert "commands without --store" not in made.stdout
