"""The run's adapters: the I/O a run needs (`RunAdapters`), and RunPod's (`RunpodRunAdapters`).

`RunAdapters` is the seam between the run's loop (`flashfsm.run_loop`) and the world:
`RunpodRunAdapters` talks to RunPod's REST API with a pluggable deployer (runpod-flash in
production, via `flashfsm.submit.flash_run_adapters`; the simulator in tests and the
demo). A candidate's `provider` is where its attempt deploys: adapters that name the
providers they deploy to (`providers`) refuse, before the run starts, a candidate whose
provider is not one of them (`check_providers`, `UnsupportedProvider`).

The protocol and its one production adapter set change together, so they live together.
They were part of `flashfsm.runs`, which re-exports their public names; this module imports
nothing of the run's drivers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Candidate, HubLocation
from flashfsm.events.policy import GracePolicy, stall_kwargs
from flashfsm.events.store import EventStore
from flashfsm.fsm.run import Attempt, RunState
from flashfsm.fsm.sweep import bare_name
from flashfsm.shell import JobHandle, PollResult, poll_job


@dataclass(frozen=True)
class Deployed:
    """What a deploy returns. `idle_timeout_s` is the idle timeout the deploy set on the
    endpoint, recorded in its `EndpointDeployed` (v2); None when the deployer does not
    say (a v1 event, as before the field existed)."""

    endpoint_id: str
    endpoint_name: str
    account: int = 0
    volumes: tuple[str, ...] = ()
    disk_gb: int | None = None
    idle_timeout_s: int | None = None


Recorder = Callable[..., Any]


class UnsupportedProvider(FlashFsmError, ValueError):
    """A run's candidate names a provider its adapters do not deploy to."""


class RunAdapters(Protocol):
    """The I/O a run needs. Each method may raise; the shell records what happened.

    Adapters may also have `providers`, the set of providers they deploy to (a candidate's
    `provider`); a run whose candidates name another is refused before it starts. Adapters
    without it deploy whatever they are asked to.
    """

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        """Deploy the attempt's endpoint under `attempt.started.endpoint_name` (record
        deploy steps through `record`)."""
        ...

    def find_endpoints(self, run: RunState, attempt: Attempt) -> Sequence[Deployed]:
        """The endpoints that exist under the attempt's endpoint name (as the platform's
        records say: id, account, idle timeout): asked when a deploy was intended and the
        process stopped before its outcome was recorded. Adapters without it cannot
        resume such a deploy: the attempt ends, and nothing is deployed blind."""
        ...

    def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
        """Submit the job to the attempt's endpoint; return (job id, submitted_at)."""
        ...

    def watch(
        self, run: RunState, attempt: Attempt, store: EventStore, stop: Callable[[], bool]
    ) -> PollResult:
        """Watch the attempt's job stream to a verdict; raise `WatchStopped` when `stop()`."""
        ...

    def cancel_job(self, run: RunState, attempt: Attempt) -> bool:
        """Cancel the attempt's job on RunPod; False when it failed."""
        ...

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        """Delete an endpoint the run created; False when it failed."""
        ...


def check_providers(candidates: Sequence[Candidate], adapters: Any) -> None:
    """Refuse candidates whose provider the adapters do not deploy to (`providers`)."""
    providers = getattr(adapters, "providers", None)
    if providers is None:
        return
    foreign = sorted({c.provider for c in candidates if c.provider not in providers})
    if foreign:
        names = ", ".join(
            f"{c.provider}/{c.gpu_class}" for c in candidates if c.provider in foreign
        )
        raise UnsupportedProvider(
            f"these adapters deploy to {sorted(providers)}, not {foreign}: drop the "
            f"candidates {names}, or pass adapters that deploy there"
        )


Deployer = Callable[[RunState, Attempt, Recorder], Deployed]
JobInput = Callable[[RunState, Attempt], dict[str, Any]]
ReaderFactory = Callable[[RunState, Attempt], tuple[Any, Any]]


@dataclass
class RunpodRunAdapters:
    """`RunAdapters` over RunPod's REST API, with a pluggable deployer.

    `deployer` makes the attempt's endpoint (runpod-flash in production, see
    `flashfsm.submit.flash_run_adapters`; the simulator in tests and the demo); `job_input`
    builds the job's input; `readers` gives the attempt's Hub heartbeat and failure
    readers. Watching is `poll_job` on the attempt's job stream with
    `stall_kwargs(on_last_gpu)`, so a restarted control plane reattaches by replay.

    `client` talks to RunPod for every attempt; with a key pool, `client_for(account)`
    gives the client of the account an attempt's endpoint was deployed on instead (and
    `close()` closes what it made). `on_handle(handle_dict)` is called when a job's watch
    starts, with the handle an orchestrator would persist to reattach.

    The watched endpoint is always the one this run deployed (the attempt's endpoint comes
    only from its own `EndpointDeployed` record), so the handle is `trusted_output` and a
    Flash envelope's pickled result is unpickled; `allow_pickle=False` keeps it JSON-only.
    The exception a deploy or submit raised is kept by attempt number in `errors`.
    """

    client: Any
    deployer: Deployer
    job_input: JobInput
    readers: ReaderFactory | None = None
    budget_s: float | None = None
    interval_s: float = 10.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Any] = time.sleep
    log: Callable[[str], Any] | None = None
    allow_pickle: bool | None = None
    client_for: Callable[[int], Any] | None = None
    on_handle: Callable[[dict[str, Any]], Any] | None = None
    errors: dict[int, BaseException] = field(default_factory=dict)
    #: Who watches the attempts' jobs, as their `WatchStarted` names it (None: host:pid).
    watcher: str | None = None
    #: The providers these adapters deploy to: RunPod only.
    providers: frozenset[str] = frozenset({"runpod"})
    #: The accounts (of the key pool `client_for` serves) an endpoint may be on: where an
    #: interrupted deploy's endpoint is looked for.
    accounts: tuple[int, ...] = (0,)
    #: Where an attempt's worker writes its heartbeat and artifacts (recorded with its job,
    #: so a verdict can say where the artifacts of a result RunPod forgot are).
    hub: Callable[[RunState, Attempt], HubLocation | None] | None = None
    #: The waits of a watch on an event loop (`awatch`): `sleep`'s twin.
    asleep: Callable[[float], Awaitable[Any]] = asyncio.sleep

    def _client(self, account: int) -> Any:
        return self.client if self.client_for is None else self.client_for(account)

    def deploy(self, run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        """The attempt's endpoint, from the deployer."""
        try:
            return self.deployer(run, attempt, record)
        except Exception as exc:
            self.errors[attempt.started.attempt] = exc
            raise

    def find_endpoints(self, run: RunState, attempt: Attempt) -> list[Deployed]:
        """The endpoints named like the attempt's (runpod-flash's `live-` form too) on each
        of `accounts`, with the idle timeout each one's record says."""
        name = attempt.started.endpoint_name
        found = []
        for account in self.accounts:
            for record in self._client(account).list_endpoints():
                if not isinstance(record, dict) or bare_name(str(record.get("name"))) != name:
                    continue
                endpoint_id, idle = record.get("id"), record.get("idleTimeout")
                if isinstance(endpoint_id, str) and endpoint_id:
                    idle_s = idle if isinstance(idle, int) and not isinstance(idle, bool) else None
                    found.append(Deployed(endpoint_id, name, account, idle_timeout_s=idle_s))
        return found

    def submit(self, run: RunState, attempt: Attempt) -> tuple[str, float]:
        """Queue the job with the run's budget as its TTL and execution timeout."""
        assert attempt.endpoint_id is not None
        from flashfsm.adapters.runpod import policy_for_budget  # (httpx: loaded on first use)

        budget = policy_for_budget(self.budget_s) if self.budget_s else {}
        submitted_at = self.clock()
        try:
            job_input = self.job_input(run, attempt)
            client = self._client(attempt.account)
            return client.run(attempt.endpoint_id, job_input, **budget), submitted_at
        except Exception as exc:
            self.errors[attempt.started.attempt] = exc
            raise

    def handle(self, attempt: Attempt, run: RunState | None = None) -> JobHandle:
        """The handle of the attempt's job (trusted: this run deployed its endpoint)."""
        assert attempt.endpoint_id is not None and attempt.job_id is not None
        started = attempt.started
        return JobHandle(
            attempt.endpoint_id,
            started.endpoint_name,
            attempt.job_id,
            on_last_gpu=started.on_last_gpu,
            submitted_at=attempt.submitted_at,
            gpu_class=started.gpu_class,
            attempt=started.attempt,
            trusted_output=True,  # the endpoint of the run's own EndpointDeployed
            hub=None if self.hub is None or run is None else self.hub(run, attempt),
        )

    def watch(
        self, run: RunState, attempt: Attempt, store: EventStore, stop: Callable[[], bool]
    ) -> PollResult:
        """`poll_job` on the attempt's job stream, tuned for the attempt."""
        handle = self.handle(attempt, run)
        if self.on_handle is not None:
            self.on_handle(handle.to_dict())
        heartbeat, failure_detail = self.readers(run, attempt) if self.readers else (None, None)
        return poll_job(
            handle,
            log=self.log,
            interval_s=self.interval_s,
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
            client=self._client(attempt.account),
            clock=self.clock,
            sleep=self.sleep,
            store=store,
            stream=attempt.job_stream,
            stop=stop,
            allow_pickle=self.allow_pickle,
            watcher=self.watcher,
            **stall_kwargs(attempt.started.on_last_gpu),
        )

    async def awatch(
        self,
        run: RunState,
        attempt: Attempt,
        store: EventStore,
        stop: Callable[[], Awaitable[bool]] | None,
    ) -> PollResult:
        """`watch` on an event loop (`asupervise_run`): the same watch, driven by a
        `Supervisor` of this one job (no jitter, so it polls when `poll_job` would), its
        client's calls and the readers in worker threads; `stop()` is awaited before each
        status fetch (None: the watch runs to its verdict)."""
        from flashfsm.supervisor import JobSpec, Supervisor, ThreadedClient

        handle = self.handle(attempt, run)
        if self.on_handle is not None:
            self.on_handle(handle.to_dict())
        heartbeat, failure_detail = self.readers(run, attempt) if self.readers else (None, None)
        client = ThreadedClient(self._client(attempt.account))
        supervisor = Supervisor(
            store,
            client,
            clock=self.clock,
            sleep=self.asleep,
            jitter=0.0,
            log=self.log,
            watcher=self.watcher,
        )
        job = JobSpec(
            handle,
            stream=attempt.job_stream,
            interval_s=self.interval_s,
            policy=GracePolicy(**stall_kwargs(attempt.started.on_last_gpu)),
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
            allow_pickle=self.allow_pickle,
            stop=stop,
        )
        try:
            return await supervisor.watch(job)
        finally:
            await supervisor.committer.close()
            await supervisor.snapshots.close()

    def cancel_job(self, run: RunState, attempt: Attempt) -> bool:
        """Cancel the attempt's job on RunPod."""
        assert attempt.endpoint_id is not None and attempt.job_id is not None
        self._client(attempt.account).cancel(attempt.endpoint_id, attempt.job_id)
        return True

    def delete_endpoint(self, run: RunState, endpoint_id: str) -> bool:
        """Delete an endpoint the run created (False from RunPod: already gone, fine too)."""
        account = next((a.account for a in run.attempts if a.endpoint_id == endpoint_id), 0)
        self._client(account).delete_endpoint(endpoint_id)
        return True

    def close(self) -> None:
        """Close the clients `client_for` made (the given `client` is the caller's)."""
        close = getattr(self.client_for, "close", None)
        if close is not None:
            close()
