"""The loopback-only guard of tests/conftest.py: tests reach 127.0.0.1 only.

A name or address off this machine is refused at once (and recorded, and the run fails at
its end naming the test); loopback, `localhost` and Unix sockets pass.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from flashfsm import RunpodApiError
from flashfsm.adapters.runpod import AsyncRunpodClient, RetryPolicy, RunpodClient
from tests.conftest import REFUSED_OK, NetworkAttempt, is_local_host

# Documentation addresses (RFC 5737 / RFC 3849): never routed, so a connect that got past the
# guard would hang until its timeout rather than answer.
FAR_V4 = "203.0.113.7"
FAR_V6 = "2001:db8::7"
FAR_NAME = "api.runpod.io"


def _refusals(attempts: list[NetworkAttempt], request: pytest.FixtureRequest) -> list[str]:
    return [a.host for a in attempts if a.test == request.node.nodeid]


@pytest.mark.parametrize(
    "host, local",
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("app.localhost", False),
        (b"127.0.0.1", True),
        (None, True),
        ("", True),
        ("0.0.0.0", True),
        (FAR_V4, False),
        (FAR_V6, False),
        ("::ffff:203.0.113.7", False),
        ("10.0.0.1", False),
        (FAR_NAME, False),
        ("localhost.example.com", False),
        ("128.0.0.1", False),
    ],
)
def test_which_hosts_count_as_this_machine(host: object, local: bool) -> None:
    assert is_local_host(host) is local


@pytest.mark.network_refused_ok
def test_a_far_name_is_refused_at_once_and_recorded(
    loopback_only: list[NetworkAttempt], request: pytest.FixtureRequest
) -> None:
    started = time.monotonic()
    with pytest.raises(OSError, match=f"tests reach 127.0.0.1 only: tried {FAR_NAME}"):
        socket.getaddrinfo(FAR_NAME, 443)
    with pytest.raises(OSError, match=f"tried {FAR_NAME}"):
        socket.create_connection((FAR_NAME, 443), timeout=30)
    assert time.monotonic() - started < 1.0
    assert _refusals(loopback_only, request) == [FAR_NAME, FAR_NAME]
    assert all(a.allowed for a in loopback_only if a.test == request.node.nodeid)


@pytest.mark.network_refused_ok
@pytest.mark.parametrize("address", [FAR_V4, FAR_V6])
def test_a_far_address_is_refused_at_once(
    address: str, loopback_only: list[NetworkAttempt], request: pytest.FixtureRequest
) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    started = time.monotonic()
    for call in ("connect", "connect_ex"):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            with pytest.raises(OSError, match=f"tests reach 127.0.0.1 only: tried {address}"):
                getattr(sock, call)((address, 9))
    with pytest.raises(OSError, match=f"tried {address}"):
        socket.create_connection((address, 9), timeout=30)
    assert time.monotonic() - started < 1.0
    assert _refusals(loopback_only, request) == [address] * 3


@pytest.mark.network_refused_ok
def test_the_runpod_clients_default_hosts_are_refused(
    loopback_only: list[NetworkAttempt], request: pytest.FixtureRequest
) -> None:
    """A client left on RunPod's real hosts fails fast, through httpx and through asyncio."""
    once = RetryPolicy(attempts=1)
    with RunpodClient("k", retry=once) as client, pytest.raises(RunpodApiError) as sync_error:
        client.endpoint_workers("ep1")
    assert "ConnectError" in str(sync_error.value)

    async def main() -> None:
        async with AsyncRunpodClient("k", retry=once) as client:
            await client.job_status("ep1", "j1")

    with pytest.raises(RunpodApiError) as async_error:
        asyncio.run(main())
    assert "ConnectError" in str(async_error.value)
    assert _refusals(loopback_only, request) == ["api.runpod.io", "api.runpod.ai"]


def _echo_once(server: socket.socket) -> threading.Thread:
    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(conn.recv(16))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_passes(host: str, loopback_only: list[NetworkAttempt]) -> None:
    before = len(loopback_only)
    assert socket.getaddrinfo(host, 80)
    with socket.create_server(("127.0.0.1", 0)) as server:
        thread = _echo_once(server)
        port = server.getsockname()[1]
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(b"ping")
            assert conn.recv(16) == b"ping"
        thread.join(10)
    assert len(loopback_only) == before


def test_ipv6_loopback_passes(loopback_only: list[NetworkAttempt]) -> None:
    before = len(loopback_only)
    assert socket.getaddrinfo("::1", 80, socket.AF_INET6)
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        server = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError as exc:
        pytest.skip(f"cannot listen on ::1: {exc}")
    with server:
        thread = _echo_once(server)
        with socket.create_connection(("::1", server.getsockname()[1]), timeout=10) as conn:
            conn.sendall(b"ping6")
            assert conn.recv(16) == b"ping6"
        thread.join(10)
    assert len(loopback_only) == before


def test_unix_sockets_pass(tmp_path: Path, loopback_only: list[NetworkAttempt]) -> None:
    before = len(loopback_only)
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        thread = _echo_once(server)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(str(path))
            conn.sendall(b"unix")
            assert conn.recv(16) == b"unix"
        thread.join(10)
    assert len(loopback_only) == before


def test_a_hub_download_from_the_simulator_asks_nothing_of_huggingface_co(
    tmp_path: Path, loopback_only: list[NetworkAttempt], request: pytest.FixtureRequest
) -> None:
    """huggingface_hub asks huggingface.co for its User-Agent's agent registry, on its first
    download of a process, unless telemetry is off: the conftest turns it off before the
    import, so a download named at the simulator goes to the simulator only."""
    from huggingface_hub import constants

    from flashfsm.adapters.hub import make_hf_text_reader
    from flashfsm.adapters.simulator import Simulator

    assert constants.HF_HUB_DISABLE_TELEMETRY
    with Simulator(speed=0) as sim:
        sim.hub.put("team/runs", "a.txt", "hello")
        read = make_hf_text_reader("team/runs", "a.txt", endpoint=sim.url, cache_dir=tmp_path)
        assert read(force=True) == "hello"
    assert _refusals(loopback_only, request) == []


CHILD_TESTS = """
import socket

import pytest


def _swallow(host):
    # What a retrying client does: the refusal is caught, the test goes on and passes.
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        pass


def test_strays():
    _swallow("stray.example.com")


@pytest.mark.{marker}
def test_asserts_its_refusal():
    _swallow("deliberate.example.com")
"""


def _child_run(tmp_path: Path, tests: str) -> subprocess.CompletedProcess[str]:
    """A pytest session of its own under this conftest, on `tests`."""
    conftest = Path(__file__).with_name("conftest.py").read_text()
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_child.py").write_text(textwrap.dedent(tests))
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    options = ["-p", "no:cacheprovider", "-p", "no:randomly", "-c", os.devnull]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *options, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_run_whose_tests_stray_fails_at_its_end_naming_them(tmp_path: Path) -> None:
    done = _child_run(tmp_path, CHILD_TESTS.format(marker=REFUSED_OK))
    out = done.stdout
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, out + done.stderr
    assert "2 passed" in out
    assert "non-loopback network attempts (refused)" in out
    assert "test_child.py::test_strays: stray.example.com (socket.getaddrinfo) x1" in out
    assert "1 attempt(s) by 1 test(s)" in out
    assert "deliberate.example.com" not in out


def test_a_run_whose_refusals_are_all_marked_passes(tmp_path: Path) -> None:
    tests = CHILD_TESTS.replace('_swallow("stray.example.com")', "pass")
    done = _child_run(tmp_path, tests.format(marker=REFUSED_OK))
    assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
    assert "non-loopback" not in done.stdout
