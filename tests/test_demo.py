"""`flashfsm demo` and `flashfsm.demo`: its own store, unique names, a quiet terminal, deploys
that take time, a picture, Ctrl-C, and the commands it names."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm import render
from flashfsm.adapters.memory import MemoryStore
from flashfsm.adapters.simulator import SimClock
from flashfsm.adapters.stores import open_store
from flashfsm.cli import EXIT_CODES, app
from flashfsm.demo import (
    DEMO_RUNS,
    DEPLOY_S,
    DemoInterrupted,
    check_tag,
    demo_run_name,
    demo_store_url,
    hub_progress_bars_off,
    is_demo_stream,
    new_tag,
    picture_path,
    reset_demo_store,
    run_demo,
)
from flashfsm.events.models import (
    AttemptStarted,
    CancelRequested,
    Concluded,
    EndpointDeleted,
    JobCancelled,
    RunConcluded,
)
from flashfsm.fsm.run import replay_run
from flashfsm.runs import request_cancel

FLASHFSM = [sys.executable, "-c", "from flashfsm.cli import main; main()"]
#: What each demo run promises: (ok, failure, attempts, the first attempt's failure)
PROMISED = {
    "clean": (True, None, 1, None),
    "walk": (True, None, 2, "no_capacity"),
    "crashloop": (True, None, 2, "stalled"),
    "stall": (True, None, 2, "stalled"),
    "codeerror": (False, "job_failed", 1, "job_failed"),
    "slowpull": (True, None, 1, None),
}
CLEAN_ONLY = tuple(d for d in DEMO_RUNS if d.name == "clean")


@pytest.fixture
def user_dirs(tmp_path, monkeypatch):
    """A temporary HOME and XDG data directory, and no $FLASHFSM_STORE: nothing real is
    touched."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.delenv("FLASHFSM_STORE", raising=False)
    return home


def subprocess_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FLASHFSM_STORE"}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CACHE_HOME=str(home / "c"))
    return env


def check_promises(store_url: str, tag: str) -> None:
    """Every run of the demo tagged `tag` in the store reached what the demo promises."""
    store = open_store(store_url)
    try:
        runs = sorted(s for s in store.streams() if s.startswith(f"run-demo-{tag}-"))
        expected = sorted(f"run-demo-{tag}-{d.name}-s{i}" for i, d in enumerate(DEMO_RUNS))
        assert runs == expected
        for stream in runs:
            run = replay_run(store.read(stream))
            ok, failure, attempts, first = PROMISED[demo_run_name(stream)]
            assert run.result is not None, stream
            assert (run.result.ok, run.result.failure, run.result.attempts) == (
                ok,
                failure,
                attempts,
            ), stream
            assert run.attempts[0].ended.failure == first, stream
            for attempt in run.attempts:  # every job stream is this demo's, with a verdict
                assert attempt.job_stream.startswith(f"job-demo-{tag}-")
                assert isinstance(store.read(attempt.job_stream)[-1], Concluded)
    finally:
        store.close()


def crashed(out: str) -> bool:
    """Whether output holds a Python traceback (plain, or rich's box) of the command itself;
    the demo's failing worker quotes one inside its error text, on one line."""
    start = r"^\s*(Traceback \(most recent call last\)|╭─+ Traceback)"
    return re.search(start, out, re.M) is not None


def run_in_a_terminal(
    argv: list[str], env: dict[str, str], timeout: float = 120
) -> tuple[int, str]:
    """Run a command with a pseudo-terminal (80x120, TERM=xterm) as its stdin, stdout and
    stderr, as a person at a terminal would; its exit code and everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "xterm", "COLUMNS": "120", "LINES": "40"},
        close_fds=True,
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, "the command did not finish"
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


# --- (a) a quiet terminal ---------------------------------------------------------------------


def test_in_a_terminal_the_demo_draws_no_progress_bar_and_no_traceback(tmp_path, user_dirs):
    url = f"sqlite:///{tmp_path}/tty.db"
    code, out = run_in_a_terminal([*FLASHFSM, "demo", "--store", url], subprocess_env(user_dirs))
    assert code == 0, out[-3000:]
    assert not crashed(out)
    for bar in ("%|", "it/s]", "B/s]"):  # tqdm's marks (huggingface_hub's download bars)
        assert bar not in out, bar
    # the terminal turns "\n" into "\r\n"; a bar redraws its line with a bare "\r"
    assert re.search(r"\r(?!\n)", out) is None
    assert "explore (" in out and f"export FLASHFSM_STORE={url}" in out


# --- (b) demos at once ------------------------------------------------------------------------


def test_demos_started_together_never_share_a_name_and_each_keeps_its_promises(tmp_path, user_dirs):
    shared = f"sqlite:///{tmp_path}/shared.db"
    stores = [shared, shared, f"jsonl:///{tmp_path}/apart"]  # two together, one apart
    env = subprocess_env(user_dirs)
    procs = [
        subprocess.Popen(
            [*FLASHFSM, "demo", "--store", url],
            env={**env, "COLUMNS": "200"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for url in stores
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    tags = []
    for proc, out, url in zip(procs, outputs, stores, strict=True):
        assert proc.returncode == 0, out[-3000:]
        assert not crashed(out) and "JobOwnedElsewhere" not in out
        tag = re.search(r"^flashfsm demo ([0-9a-f]{6}): ", out, re.M).group(1)
        tags.append(tag)
        check_promises(url, tag)
        assert f"run-demo-{tag}-walk-s1" in out
    assert len(set(tags)) == len(tags)
    store = open_store(shared)
    try:
        assert len([s for s in store.streams() if s.startswith("run-")]) == 2 * len(DEMO_RUNS)
    finally:
        store.close()


# --- (c) where it writes, --reset, the picture, the deploys -----------------------------------


def test_the_demo_store_is_demo_db_beside_the_default_store(user_dirs, tmp_path, monkeypatch):
    data = user_dirs / "data" / "flashfsm"
    assert demo_store_url() == f"sqlite://{data}/demo.db"  # beside the user's events.db
    monkeypatch.setenv("FLASHFSM_STORE", f"sqlite:///{tmp_path}/logs/prod.db")
    assert demo_store_url() == f"sqlite://{tmp_path}/logs/demo.db"
    for elsewhere in ("jsonl:///srv/flashfsm", "postgresql://u:secret@db/flash", "memory://"):
        monkeypatch.setenv("FLASHFSM_STORE", elsewhere)
        assert demo_store_url() == f"sqlite://{data}/demo.db"


def test_the_cli_demo_keeps_to_its_own_store_and_names_a_picture_and_working_commands(
    tmp_path, user_dirs, monkeypatch
):
    monkeypatch.setenv("FLASHFSM_STORE", f"sqlite:///{tmp_path}/events.db")
    runner = CliRunner()
    result = runner.invoke(app, ["demo"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert not (tmp_path / "events.db").exists()  # the user's store is not touched
    demo_db = f"sqlite://{tmp_path}/demo.db"
    tag = re.search(r"^flashfsm demo ([0-9a-f]{6}): 6 runs into (\S+)$", out, re.M).groups()
    assert tag[1] == demo_db
    check_promises(demo_db, tag[0])
    picture = Path(re.search(r"^picture of the runs: (.+)$", out, re.M).group(1))
    assert picture == tmp_path / f"demo-{tag[0]}.html" and picture.exists()
    html = picture.read_text()
    for demo in DEMO_RUNS:  # a lane per attempt, with its job stream
        assert f"job-demo-{tag[0]}-{demo.name}-s" in html, demo.name
    assert 'data-lane="walk-attempt-1"' in html
    # the output ends with the commands to explore, real names included, and they work
    explore = out.split("\nexplore (", 1)[1]
    exported = re.search(r"^  export FLASHFSM_STORE=(\S+)$", explore, re.M).group(1)
    assert exported == demo_db
    commands = re.findall(r"^  (flashfsm .+)$", explore, re.M)
    assert [c.split()[1] for c in commands] == ["ls", "explain", "timeline", "replay", "ui"]
    assert commands[1] == f"flashfsm explain job-demo-{tag[0]}-walk-s1-a0"
    assert out.rstrip().endswith(commands[-1])
    # last, how to open the web view on the demo's store (it serves until interrupted)
    assert "# all of it in a browser: http://127.0.0.1:8766/\n  flashfsm ui" in explore
    assert all(len(line) <= 80 for line in explore.splitlines() if "export" not in line)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLASHFSM_STORE", exported)
    listed = runner.invoke(app, commands[0].split()[1:], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and f"run-demo-{tag[0]}-codeerror-s4" in listed.output
    explained = runner.invoke(app, commands[1].split()[1:])
    assert explained.exit_code == EXIT_CODES["no_capacity"], explained.output
    assert "queue_grace" in explained.output
    drawn = runner.invoke(app, [*commands[2].split()[1:], "--json"])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "walk.html").exists()


def test_each_deploy_takes_simulated_time_drawn_as_deploying(user_dirs):
    store = MemoryStore()
    run_demo(store, say=lambda line: None, runs=CLEAN_ONLY, tag="3f9a1c")
    events = store.read("run-demo-3f9a1c-clean-s0")
    run = replay_run(events)
    (attempt,) = run.attempts
    deploy_s = DEPLOY_S[attempt.started.gpu_class]
    assert attempt.submitted_at - attempt.started.at == pytest.approx(deploy_s)
    pic = render.picture(events, store.read)
    (lane,) = pic.lanes
    first = lane.spans[0]
    assert (first.state, first.end - first.start) == ("DEPLOYING", pytest.approx(deploy_s))
    assert lane.spans[1].start == pytest.approx(deploy_s)  # the job starts after the deploy


def test_tags_name_every_stream(user_dirs):
    store = MemoryStore()
    (result,) = run_demo(store, say=lambda line: None, runs=CLEAN_ONLY, tag="3f9a1c")
    assert result.stream == "run-demo-3f9a1c-clean-s0"
    assert set(store.streams()) == {"run-demo-3f9a1c-clean-s0", "job-demo-3f9a1c-clean-s0-a0"}
    assert demo_run_name(result.stream) == "clean" and demo_run_name("run-x") == "run-x"
    assert all(is_demo_stream(s) for s in store.streams())
    assert not is_demo_stream("run-training-42") and not is_demo_stream("job-demo")
    tags = {new_tag() for _ in range(50)}
    assert len(tags) == 50 and all(re.fullmatch(r"[0-9a-f]{6}", t) for t in tags)
    for bad in ("3F9A1C", "demo", "", "3f9a1c-x"):
        with pytest.raises(ValueError):
            check_tag(bad)
    refused = CliRunner().invoke(app, ["demo", "--store", "memory://", "--tag", "Not-Hex"])
    assert refused.exit_code == 1 and "lowercase hex" in refused.output


def test_reset_deletes_a_demo_store_and_its_pictures_only(tmp_path, user_dirs):
    runner = CliRunner()
    url = f"sqlite:///{tmp_path}/demo.db"
    old = "a1b2c3"
    run_demo(url, say=lambda line: None, runs=CLEAN_ONLY, tag=old, picture=picture_path(url, old))
    assert (tmp_path / f"demo-{old}.html").exists()
    keep = tmp_path / "notes.html"
    keep.write_text("mine")
    second = runner.invoke(app, ["demo", "--store", url, "--reset"])
    assert second.exit_code == 0, second.output
    assert re.search(r"^reset: removed \d+ file\(s\) of ", second.output, re.M)
    assert not (tmp_path / f"demo-{old}.html").exists() and keep.exists()
    store = open_store(url)
    try:
        assert not any(old in s for s in store.streams())  # the old demo's streams are gone
        assert len([s for s in store.streams() if s.startswith("run-")]) == len(DEMO_RUNS)
    finally:
        store.close()


def test_reset_refuses_a_store_that_is_not_only_the_demo_s(tmp_path, user_dirs):
    real = tmp_path / "events.db"
    store = open_store(f"sqlite:///{real}")
    run_demo(store, say=lambda line: None, runs=CLEAN_ONLY)
    request_cancel(store, "run-real-training", by="someone")  # one stream of a real user
    store.close()
    result = CliRunner().invoke(app, ["demo", "--store", f"sqlite:///{real}", "--reset"])
    assert result.exit_code == 1
    assert "not a demo store" in result.output and "run-real-training" in result.output
    assert real.exists()
    with pytest.raises(ValueError, match="SQLite demo store only"):
        reset_demo_store(f"jsonl:///{tmp_path}/logs")
    assert reset_demo_store("memory://") == []


# --- Ctrl-C -----------------------------------------------------------------------------------


def interrupt_after(monkeypatch, sleeps: int) -> None:
    """Make the simulator clock's `sleep` raise KeyboardInterrupt (Ctrl-C) on call `sleeps`."""
    calls = [0]
    sleep = SimClock.sleep

    def counting(self, seconds):
        calls[0] += 1
        if calls[0] == sleeps:
            raise KeyboardInterrupt
        return sleep(self, seconds)

    monkeypatch.setattr(SimClock, "sleep", counting)


def test_ctrl_c_mid_watch_concludes_the_run_as_cancelled_and_cleans_up(
    tmp_path, user_dirs, monkeypatch
):
    interrupt_after(monkeypatch, 20)  # the clean run takes ~10 waits: this is walk's watch
    store = MemoryStore()
    lines: list[str] = []
    picture = tmp_path / "demo-3f9a1c.html"
    with pytest.raises(DemoInterrupted) as stopped:
        run_demo(store, say=lines.append, tag="3f9a1c", picture=picture)
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert [r.stream for r in stopped.value.results] == ["run-demo-3f9a1c-clean-s0"]
    cancelled = stopped.value.cancelled
    assert (cancelled.stream, cancelled.ok, cancelled.failure) == (
        "run-demo-3f9a1c-walk-s1",
        False,
        "cancelled",
    )
    events = store.read("run-demo-3f9a1c-walk-s1")
    kinds = [type(e) for e in events]
    assert CancelRequested in kinds and JobCancelled in kinds and EndpointDeleted in kinds
    assert isinstance(events[-1], RunConcluded) and events[-1].failure == "cancelled"
    # no run is left without its result, and no later run started
    for stream in store.streams():
        if stream.startswith("run-"):
            assert replay_run(store.read(stream)).result is not None, stream
    assert not any("crashloop" in s for s in store.streams())
    assert lines[-2:] == [
        "walk: no capacity on the cheapest GPU: the walk moves to the next class, which succeeds",
        "  → cancelled after 1 attempt(s) (Ctrl-C)",
    ]
    html = picture.read_text()  # the picture has the runs so far, the cancelled one too
    assert "job-demo-3f9a1c-clean-s0-a0" in html and "job-demo-3f9a1c-walk-s1-a0" in html


def test_ctrl_c_in_the_cli_exits_130_naming_the_cancelled_run(tmp_path, user_dirs, monkeypatch):
    interrupt_after(monkeypatch, 20)
    url = f"sqlite:///{tmp_path}/demo.db"
    argv = ["demo", "--store", url, "--tag", "3f9a1c"]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 130, result.output
    tag = "3f9a1c"
    assert result.output.startswith(f"flashfsm demo {tag}: 6 runs into {url}\n")
    assert f"interrupted: run-demo-{tag}-walk-s1 concluded as cancelled" in result.output
    assert f"export FLASHFSM_STORE={url}\n  # every stream" in result.output
    store = open_store(url)
    try:
        started = [
            e for e in store.read(f"run-demo-{tag}-walk-s1") if isinstance(e, AttemptStarted)
        ]
        assert len(started) == 1
    finally:
        store.close()


# --- quiet Hub downloads ----------------------------------------------------------------------


def test_progress_bars_are_off_inside_and_as_they_were_after():
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") is not None:
        pytest.skip("the environment decides the progress bars")
    enable_progress_bars()
    with hub_progress_bars_off():
        assert are_progress_bars_disabled()
    assert not are_progress_bars_disabled()  # the embedding process gets its bars back
    disable_progress_bars()
    try:
        with hub_progress_bars_off():
            assert are_progress_bars_disabled()
        assert are_progress_bars_disabled()  # and a process that had them off keeps them off
    finally:
        enable_progress_bars()
