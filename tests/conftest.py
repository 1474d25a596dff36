"""Shared test fixtures: Hypothesis profiles, a virtual clock, a scripted RunPod client, the
checkout's wheel and a non-editable install of it (`flashfsm_wheel`, `installed_flashfsm`),
and the loopback-only network guard.

The guard (`loopback_only`, autouse for the whole session, in this process only): tests reach
127.0.0.1 only. Resolving a name (`socket.getaddrinfo`) or connecting a socket
(`socket.socket.connect`/`connect_ex`, which `socket.create_connection`, asyncio and httpx use)
to anything but loopback (127.0.0.0/8, ::1, `localhost`), the unspecified address (a bind)
or a Unix socket fails at once with `OSError("tests reach 127.0.0.1 only: tried <host>")`,
and the attempt is recorded. At the end of the session the recorded attempts are listed,
with the tests that made them, and the run fails. Child processes are not covered: give
them the simulator's `sim.env()` (its `RUNPOD_*_URL`s).

A run started in the background by a shell without job control inherits Ctrl-C (SIGINT)
ignored, and every child process would keep it so, while many tests stop their children
with Ctrl-C: this process takes SIGINT back at import, so its children start with the
default (Python's `KeyboardInterrupt`).

A test that deliberately names an unreachable host and asserts the refusal itself may carry
`@pytest.mark.network_refused_ok`: its attempts are still refused, but not held against the
run. Use it sparingly.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from flashfsm import RunpodApiError

# `dev` is quick for local runs; `.ci/run` selects `ci`, which tries many more examples.
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# A handled signal is default again in a child after exec; an ignored one stays ignored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# huggingface_hub (2.x) fetches a registry from huggingface.co for its User-Agent on its first
# download of a process, whatever endpoint the download names, unless telemetry is off. It
# reads this once, at its import (not yet made: flashfsm imports it lazily); children inherit.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

# ---------------------------------------------------------------- loopback-only network guard

#: The environment variable that turns the guard off (set to 0) for a whole run.
GUARD_ENV = "FLASHFSM_TEST_NETWORK_GUARD"
#: The marker that lets a test's refused attempts pass (it asserts the refusal itself).
REFUSED_OK = "network_refused_ok"


@dataclass(frozen=True)
class NetworkAttempt:
    """One refused attempt: the test running (its node id, or a note), what was tried, how."""

    test: str
    host: str
    call: str
    allowed: bool


_attempts: list[NetworkAttempt] = []
_attempts_lock = threading.Lock()
_current: list[pytest.Item | None] = [None]


def is_local_host(host: object) -> bool:
    """Whether `host` (a name or address, str or bytes; None or empty for "any") stays on this
    machine: loopback, `localhost`, or the unspecified address."""
    if host is None:
        return True
    if isinstance(host, bytes | bytearray):
        host = bytes(host).decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().strip("[]").lower().rstrip(".")
    if name in ("", "localhost"):  # (not `*.localhost`: a resolver may ask DNS for those)
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _refuse(host: object, call: str) -> OSError:
    """Record an attempt on `host` by `call` and return the error to raise."""
    item = _current[0]
    shown = host.decode("ascii", "replace") if isinstance(host, bytes | bytearray) else str(host)
    attempt = NetworkAttempt(
        test=item.nodeid if item is not None else "(outside a test)",
        host=shown,
        call=call,
        allowed=item is not None and item.get_closest_marker(REFUSED_OK) is not None,
    )
    with _attempts_lock:
        _attempts.append(attempt)
    return OSError(f"tests reach 127.0.0.1 only: tried {shown}")


def _guarded_getaddrinfo(real: Callable[..., Any]) -> Callable[..., Any]:
    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_local_host(host):
            raise _refuse(host, "socket.getaddrinfo")
        return real(host, port, *args, **kwargs)

    return getaddrinfo


def _guarded_connect(real: Callable[..., Any], call: str) -> Callable[..., Any]:
    def connect(self: socket.socket, address: Any) -> Any:
        # Unix sockets take a path (str or bytes); INET ones a (host, port, ...) tuple.
        inet = self.family in (socket.AF_INET, socket.AF_INET6)
        if inet and isinstance(address, tuple) and not is_local_host(address[0]):
            raise _refuse(address[0], f"socket.socket.{call}")
        return real(self, address)

    return connect


@pytest.fixture(autouse=True, scope="session")
def loopback_only() -> Any:
    """Refuse (and record) every resolve or connect to a non-loopback host, in this process,
    for the whole session (see the module notes); `FLASHFSM_TEST_NETWORK_GUARD=0` leaves
    the network alone (`.ci/run`'s orchestrator runs: their own libraries are not ours to
    police, and nothing there but the package registries answers anyway)."""
    if os.environ.get(GUARD_ENV, "1") == "0":
        yield _attempts
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo(socket.getaddrinfo))
        patch.setattr(socket.socket, "connect", _guarded_connect(socket.socket.connect, "connect"))
        patch.setattr(
            socket.socket, "connect_ex", _guarded_connect(socket.socket.connect_ex, "connect_ex")
        )
        yield _attempts


def pytest_configure(config: pytest.Config) -> None:
    """Register the guard's opt-out marker."""
    config.addinivalue_line(
        "markers",
        f"{REFUSED_OK}: the test names a non-loopback host on purpose and asserts its refusal",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Note the running test, to name it in the guard's records."""
    _current[0] = item
    try:
        return (yield)
    finally:
        _current[0] = None


def _held_against_the_run() -> list[NetworkAttempt]:
    with _attempts_lock:
        return [a for a in _attempts if not a.allowed]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail an otherwise green run whose tests tried to leave loopback."""
    if _held_against_the_run() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """List the tests that tried to leave loopback, and the hosts they tried."""
    held = _held_against_the_run()
    if not held:
        return
    tried: dict[str, dict[str, int]] = {}
    for attempt in held:
        hosts = tried.setdefault(attempt.test, {})
        key = f"{attempt.host} ({attempt.call})"
        hosts[key] = hosts.get(key, 0) + 1
    terminalreporter.section("non-loopback network attempts (refused)", sep="=", red=True)
    for test, hosts in tried.items():
        shown = ", ".join(f"{host} x{count}" for host, count in hosts.items())
        terminalreporter.write_line(f"{test}: {shown}")
    terminalreporter.write_line(
        f"{len(held)} attempt(s) by {len(tried)} test(s): tests reach 127.0.0.1 only "
        f"(mark a test that asserts the refusal itself with @pytest.mark.{REFUSED_OK})",
        red=True,
    )


class VirtualClock:
    """A clock that only moves when the code under test sleeps; records every sleep."""

    def __init__(self, start: float = 1_000_000.0):
        self.start = start
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"negative sleep {seconds}"
        self.sleeps.append(seconds)
        self.now += seconds

    @property
    def elapsed(self) -> float:
        """Virtual seconds since the start."""
        return self.now - self.start


Answer = dict[str, Any] | BaseException
Script = Callable[[float, int], Answer]


@dataclass
class ScriptedClient:
    """A `poll_job` client whose answers are functions of (elapsed virtual time, call index).

    A script returns a dict (the answer) or an exception instance (raised). `health=None`
    makes every probe fail with HTTP 500.
    """

    clock: VirtualClock
    status: Script
    health: Script | None = None
    status_calls: list[float] = field(default_factory=list)
    health_calls: list[float] = field(default_factory=list)

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        self.status_calls.append(self.clock.elapsed)
        return self._answer(self.status, len(self.status_calls) - 1)

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        self.health_calls.append(self.clock.elapsed)
        if self.health is None:
            raise RunpodApiError("health probe failed", status_code=500, route="health")
        return self._answer(self.health, len(self.health_calls) - 1)

    def _answer(self, script: Script, index: int) -> dict[str, Any]:
        answer = script(self.clock.elapsed, index)
        if isinstance(answer, BaseException):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def default_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test's durable default store (`FLASHFSM_STORE`, what `poll_job`, `supervise_run`
    and the CLI use without a store): a SQLite file of its own, in a directory of its own
    (not `tmp_path`, which a test may list), never the user's data directory. A test that
    sets or unsets `FLASHFSM_STORE` itself overrides it; its child processes inherit it."""
    from flashfsm.adapters.urls import path_url

    url = path_url("sqlite", tmp_path_factory.mktemp("default-store") / "events.db")
    monkeypatch.setenv("FLASHFSM_STORE", url)
    return url


@pytest.fixture
def clock() -> VirtualClock:
    """A fresh virtual clock."""
    return VirtualClock()


@pytest.fixture
def http(sim: Any) -> Any:
    """An HTTP client on the test module's simulator (its `sim` fixture), its first account's
    key the bearer token."""
    import httpx

    headers = {"Authorization": f"Bearer {sim.accounts[0].key}"}
    with httpx.Client(base_url=sim.url, headers=headers, timeout=10) as client:
        yield client


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy in the environment (a proxy keeps httpx's own transport)."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def client_for() -> Any:
    """Make a test client of a UI view of a store (`client`: the address its requests come
    from); each is closed after the test."""
    from starlette.testclient import TestClient

    from flashfsm.ui.app import UiConfig, create_app

    clients: list[Any] = []

    def make(url: str, client: tuple[str, int] = ("127.0.0.1", 50000), **options: Any) -> Any:
        app = create_app(UiConfig(url, poll_s=0.05, **options))
        made = TestClient(app, base_url="http://127.0.0.1", client=client)
        made.__enter__()
        clients.append(made)
        return made

    yield make
    for made in clients:
        made.__exit__(None, None, None)


@pytest.fixture(params=["sqlite", "postgres"])
def lease_url(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """The URL of a fresh store that keeps leases (a fleet's): SQLite, then PostgreSQL
    (skipped with the reason when `FLASHFSM_TEST_POSTGRES_DSN` is not set)."""
    from tests.store_support import PG_ENV, make_backend, postgres_dsn, run_cleanups

    if request.param == "postgres" and postgres_dsn() is None:
        pytest.skip(f"{PG_ENV} not set")
    cleanups: list[Any] = []
    try:
        yield make_backend(request.param, tmp_path, cleanups).url
    finally:
        run_cleanups(cleanups)


@pytest.fixture
def leases(lease_url: str) -> Any:
    """A fresh store that keeps leases, opened (see `lease_url`)."""
    from flashfsm.adapters.stores import open_store
    from flashfsm.events.store import LeaseStore

    store = open_store(lease_url)
    try:
        assert isinstance(store, LeaseStore)
        yield store
    finally:
        store.close()


@pytest.fixture(scope="session")
def flashfsm_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's wheel, built once per session (`tests.install_support.build_wheel`)."""
    from tests.install_support import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def installed_flashfsm(flashfsm_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the checkout installed from its wheel, not editable: what
    `tests.install_support.isolated_python` runs against (checked here: flashfsm imports
    from it there, never from the checkout)."""
    from tests.install_support import install_wheel, isolated_python

    site = install_wheel(flashfsm_wheel, tmp_path_factory.mktemp("installed") / "site")
    empty = tmp_path_factory.mktemp("cwd")
    done = isolated_python(
        site, ["-c", "import flashfsm; print(flashfsm.__file__)"], cwd=empty, timeout=120
    )
    assert done.returncode == 0, done.stderr
    imported = Path(done.stdout.strip()).resolve()
    assert imported.is_relative_to(site.resolve()), f"flashfsm imported from {imported}"
    return site


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The console as a pipe sees it: no `$COLUMNS`, no width set (lines unwrapped)."""
    from flashfsm.display import text

    monkeypatch.delenv("COLUMNS", raising=False)
    width = text.console.set_width
    text.console.width = None
    yield
    text.console.width = width
