"""Shared test fixtures: Hypothesis profiles, a virtual clock and a scripted RunPod client."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
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
