"""`flashfsm ui` stops on Ctrl-C, live feeds open or not, and says no more than it must.

A page's live feed (`/feed`, server-sent events) is a response that never completes, and
uvicorn waits for every response before it stops: the view ends every feed when its shutdown
starts (`Feeds.end`), and cancels any other request still running after `GRACE_S`. So one
Ctrl-C stops it within a second (exit 130, the one line `flashfsm ui: stopped` on stderr, no
traceback); a second Ctrl-C while it stops exits at once, just as quietly. A port in use is
one line naming `--port`, for the view and the simulator alike, and the two default to
different ports, so both serve at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from flashfsm import open_store
from flashfsm.adapters.simulator.serve import ServeOptions
from flashfsm.cli import app
from flashfsm.cli.ui import DEFAULT_PORT, GRACE_S, STOPPED
from flashfsm.events.models import Candidate, RunStarted
from flashfsm.ids import new_id
from flashfsm.sigint import EXIT_INTERRUPTED
from flashfsm.ui.app import Feeds

ROOT = Path(__file__).resolve().parents[1]
COMMAND = Path(sys.executable).with_name("flashfsm")  # the console script: Ctrl-C as a user's
#: The designed bound on a stop (seconds), and what the tests allow a loaded 2-CPU machine.
STOP_S = 1.0
SLACK_S = 2.0
runner = CliRunner()


def small_store(tmp_path: Path) -> str:
    """A SQLite store of three open runs."""
    url = f"sqlite:///{tmp_path}/events.db"
    store = open_store(url)
    try:
        for n in range(3):
            name = f"run-stop-{n}"
            started = RunStarted(
                stream=name,
                seq=0,
                id=new_id(1_700_000_000.0 + n),
                at=1_700_000_000.0 + n,
                run_id=name,
                candidates=(Candidate(gpu_class="L40S", price_per_hour=0.99),),
            )
            store.append(name, [started], 0)
    finally:
        store.close()
    return url


def first_line(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """The first line the process prints on stdout (failing with its stderr if it ends)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise AssertionError(f"no line in {timeout_s} s")
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"exited {proc.returncode}: {err}")
    return line


@pytest.fixture
def view(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`flashfsm ui --port 0` on a small store: the process and the address it serves."""
    assert COMMAND.exists(), f"no console script at {COMMAND}: pip install -e ."
    url = small_store(tmp_path)
    proc = subprocess.Popen(
        [str(COMMAND), "ui", "--store", url, "--port", "0", "--poll", "0.1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "400"},  # (its first line, unwrapped)
    )
    try:
        line = first_line(proc)
        assert " at http://127.0.0.1:" in line, line
        yield proc, line.split(" at ", 1)[1].split()[0].rstrip("/")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def assert_quiet_stop(proc: subprocess.Popen[str], sent_at: float) -> float:
    """The view exited 130 with its one line and nothing else; how long it took."""
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("still serving 30 s after Ctrl-C") from None
    took = time.monotonic() - sent_at
    _, err = proc.communicate(timeout=10)
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "CancelledError" not in err, err
    assert err == f"{STOPPED}\n", err
    return took


def test_ctrl_c_stops_the_view_within_a_second_with_live_feeds_open(view):
    proc, base = view
    with (
        httpx.Client(base_url=base, timeout=10) as a,
        httpx.Client(base_url=base, timeout=10) as b,
        a.stream("GET", "/feed") as whole,
        b.stream("GET", "/feed", params={"stream": "run-stop-1"}) as one,
    ):
        feeds = [whole.iter_lines(), one.iter_lines()]
        for lines in feeds:  # both feeds are live: their first message came
            assert next(lines) == "retry: 2000"
        sent_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        took = assert_quiet_stop(proc, sent_at)
        for lines in feeds:  # each feed was ended by the server, not cut off
            rest = list(lines)
            assert all(not line.startswith("event: change") for line in rest), rest
    print(f"stopped in {took:.2f} s (designed: <= {STOP_S} s)")
    assert took <= STOP_S + SLACK_S, f"took {took:.2f} s to stop (designed: {STOP_S} s)"


@pytest.mark.parametrize("gap_s", [0.0, 0.05, 0.3])
def test_a_second_ctrl_c_while_it_stops_is_as_quiet(view, gap_s):
    proc, base = view
    with (
        httpx.Client(base_url=base, timeout=10) as client,
        contextlib.suppress(httpx.TransportError),  # (closing a feed the exit cut off)
        client.stream("GET", "/feed") as feed,
    ):
        assert next(feed.iter_lines()) == "retry: 2000"
        sent_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        proc.send_signal(signal.SIGINT)  # (a no-op when it has already gone)
        took = assert_quiet_stop(proc, sent_at)
    assert took <= STOP_S + SLACK_S, f"took {took:.2f} s"


SLOW_VIEW = textwrap.dedent(
    """
    import asyncio, socket, sys
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from flashfsm.cli.ui import serve

    async def slow(request):
        print("in", flush=True)  # (the test stops the view only once the request is here)
        await asyncio.sleep(60)
        return PlainTextResponse("late")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    print(sock.getsockname()[1], flush=True)
    try:
        serve(Starlette(routes=[Route("/slow", slow)]), sock)
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


def test_a_request_still_running_is_cancelled_after_the_grace_quietly():
    """Any other request (a slow page) has `GRACE_S` to finish, then is cancelled: the stop
    is bounded, and says nothing of the cancelled request."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_VIEW], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        port = int(first_line(proc))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert first_line(proc).strip() == "in"  # the request is in the app, asleep
            sent_at = time.monotonic()
            proc.send_signal(signal.SIGINT)
            took = assert_quiet_stop(proc, sent_at)
            with contextlib.suppress(ConnectionResetError):  # closed, not left hanging
                conn.recv(4096)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert GRACE_S <= took <= GRACE_S + STOP_S + SLACK_S, f"took {took:.2f} s"


def test_ended_feeds_end_and_a_feed_opened_after_is_born_ended():
    async def scenario() -> tuple[list[object], list[object]]:
        feeds = Feeds()
        before = feeds.open()
        feeds.publish([])  # (nothing to say: offered to no one)
        assert before.empty()
        feeds.end()
        ended = await asyncio.wait_for(before.get(), 1)
        after = await asyncio.wait_for(feeds.open().get(), 1)
        return ended, after

    assert asyncio.run(scenario()) == ([], [])


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def one_error_line(result: object) -> str:
    output = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 1, output  # type: ignore[attr-defined]
    assert "Traceback" not in output
    lines = output.splitlines()
    assert len(lines) == 1, output
    return lines[0]


def test_a_port_in_use_is_one_line_naming_port_for_the_view(tmp_path, held_port):
    url = small_store(tmp_path)
    result = runner.invoke(
        app, ["ui", "--store", url, "--port", str(held_port)], env={"COLUMNS": "200"}
    )
    line = one_error_line(result)
    assert line == (
        f"error: cannot serve on 127.0.0.1:{held_port}: Address already in use "
        "(--port 0 picks a free port, or --port N)"
    )


def test_a_port_in_use_is_one_line_naming_port_for_the_simulator(held_port):
    result = runner.invoke(app, ["simulator", "--port", str(held_port)], env={"COLUMNS": "200"})
    line = one_error_line(result)
    assert line == (
        f"error: cannot serve on 127.0.0.1:{held_port}: Address already in use "
        "(--port 0 picks a free port, or --port N)"
    )


def test_the_view_and_the_simulator_default_to_different_ports_as_documented():
    assert ServeOptions().port != DEFAULT_PORT
    for page in ("docs/ui.md", "docs/cli.md"):
        text = (ROOT / page).read_text()
        assert f"http://127.0.0.1:{DEFAULT_PORT}/" in text, page
        assert f"http://127.0.0.1:{ServeOptions().port}/" not in text, page
    fleet = (ROOT / "docs" / "fleet.md").read_text()  # the simulator's exports keep its port
    assert f"http://127.0.0.1:{ServeOptions().port}/v2" in fleet
