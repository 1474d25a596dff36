"""Running a `RunSpec` on RunPod: the one deploy → submit → watch path, two ways to use it.

Theory of operation. `flash_run_adapters(spec, seed)` is the only place a spec becomes I/O:
it checks everything that can be checked without the network first (the worker's
dependencies, the function a non-baked worker runs, the runtime secrets: `RunSpec` and
these checks are `flashfsm.run_spec`'s, which this module re-exports), then returns the run
machine's adapters (`flashfsm.run_adapters.RunpodRunAdapters`) — each attempt deploys a
fresh endpoint with runpod-flash (`flash_deploy.deploy_endpoint`), submits the job with a
TTL and execution timeout derived from the wall-clock budget (`policy_for_budget`), and is
watched by `poll_job` with the Hugging Face heartbeat and failure readers.

- `supervise_spec(spec, seed, candidates)` runs the whole GPU walk with those adapters
  (`supervise_run`), in the stream `run-<run_id>-s<seed>`.
- `submit_run(spec, seed, attempt=n)` is ONE attempt of the same path, for a caller that
  walks itself: a run of exactly that attempt (`single_attempt`), on one candidate, with
  no retry, in the stream `run-<run_id>-s<seed>-a<n>`. Its job stream is
  `job-<run_id>-s<seed>-a<n>`; a crashed caller reattaches with `poll_job` on it (the
  handle comes through `on_handle`), or by calling `submit_run` again, which resumes.

Both streams are ordinary run and job logs, so every CLI command reads them.

Secrets. The pool's API keys, `HF_TOKEN` and the caller's `runtime_secrets` are
registered for masking before anything happens; runtime secrets travel only in the job
input to the worker, never in the spec, an event, a log line or an error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from flashfsm import naming
from flashfsm.adapters.flash_deploy import (
    DeployedEndpoint,
    DeployError,
    DeployRequest,
    KeyPool,
    deploy_endpoint,
    require_sdk,
)
from flashfsm.adapters.flash_wire import build_function_input
from flashfsm.adapters.hub import hub_readers
from flashfsm.adapters.runpod import (
    ENV_API_BASE_URL,
    ENV_ENDPOINT_BASE_URL,
    RunpodClient,
    policy_for_budget,
)
from flashfsm.errors import RunpodApiError, WatchStopped
from flashfsm.events.models import (
    SPEC_CAP,
    AttemptStarted,
    Candidate,
    HubLocation,
    RunStarted,
)
from flashfsm.events.store import EventStore
from flashfsm.fsm.capacity import CapacityPolicy
from flashfsm.fsm.job import replay, verdict_of
from flashfsm.fsm.run import Attempt, RunState, replay_run
from flashfsm.naming import attempt_stream
from flashfsm.redact import register_secrets
from flashfsm.run_adapters import Deployed, Recorder, RunpodRunAdapters, check_providers
from flashfsm.run_loop import AttemptHook, RunResult
from flashfsm.run_spec import (
    ENTRYPOINT,
    RunSpec,
    WorkerDependencies,
    build_payload,
    check_secrets,
    checked_spec,
    resolve_entrypoint,
)
from flashfsm.run_spec import WorkerDependencyError as WorkerDependencyError
from flashfsm.run_spec import resolve_worker_dependencies as resolve_worker_dependencies
from flashfsm.runs import OnInterrupt, asupervise_run, supervise_run
from flashfsm.shell import PollResult, opened_store
from flashfsm.watch import Log, make_say

logger = logging.getLogger("flashfsm.submit")


def runpod_client(key: str) -> RunpodClient:
    """A REST client for one account, hosts from the SDKs' environment variables."""
    return RunpodClient(
        key,
        endpoint_base_url=os.environ.get(ENV_ENDPOINT_BASE_URL) or None,
        api_base_url=os.environ.get(ENV_API_BASE_URL) or None,
    )


def quota_sweeper(
    accounts: KeyPool, store: EventStore, *, clock: Callable[[], float] = time.time
) -> Callable[[set[str]], int]:
    """The deploy-time sweep: endpoints of the active account already scaled to zero.

    Conservative, as a deploy only knows its own run: `min_idle_s=0` but warm workers
    count as busy (`reap_warm=False`), so another live run's warm endpoint survives.
    Its idle timers go to the `IdleSweeper`'s stream in `store`.
    """

    def sweep(protected: set[str]) -> int:
        from flashfsm.sweeper import IdleSweeper

        with runpod_client(accounts.key()) as client:
            # One stream per account: a sweep sees only its own account's endpoints.
            stream = naming.sweeper_stream(accounts.active)
            report = IdleSweeper(client, store, stream=stream, clock=clock).sweep(
                protected, min_idle_s=0.0, reap_warm=False
            )
        return len(report.deleted)

    return sweep


class AccountClients:
    """One REST client per account of a key pool, made when first asked for."""

    def __init__(self, accounts: KeyPool):
        self.accounts = accounts
        self._clients: dict[int, RunpodClient] = {}

    def __call__(self, account: int) -> RunpodClient:
        client = self._clients.get(account)
        if client is None:
            client = self._clients[account] = runpod_client(self.accounts.key(account))
        return client

    def close(self) -> None:
        """Close every client made."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def deploy_request(
    spec: RunSpec, deps: WorkerDependencies, attempt: AttemptStarted
) -> DeployRequest:
    """What the attempt's deploy asks runpod-flash for: the weight cache only where the
    attempt has it (its provider has one, and the run has not dropped it)."""
    budget = policy_for_budget(spec.max_wall_seconds)
    with_cache = (
        attempt.weight_cache if attempt.weight_cache is not None else not attempt.cache_dropped
    )
    return DeployRequest(
        name=attempt.endpoint_name,
        gpu_class=attempt.gpu_class,
        attempt=attempt.attempt,
        execution_timeout_ms=round(budget["execution_timeout_s"] * 1000),
        image=deps.image,
        dependencies=deps.pip,
        system_dependencies=deps.system,
        weight_cache=spec.weight_cache if with_cache else None,
        weight_cache_gb=spec.weight_cache_gb,
        disk_gb=spec.disk_gb,
        min_cuda_version=spec.min_cuda_version,
        idle_timeout_s=spec.idle_timeout_s,
    )


def flash_run_adapters(
    spec: RunSpec,
    seed: int,
    *,
    store: EventStore,
    client: Any = None,
    accounts: KeyPool | None = None,
    runtime_secrets: Mapping[str, str] | None = None,
    function: Callable[..., Any] | None = None,
    deployer: Callable[..., DeployedEndpoint] = deploy_endpoint,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    interval_s: float = 10.0,
    hub_options: Mapping[str, Any] | None = None,
    log: Log | None = None,
    allow_pickle: bool | None = None,
    sweep: Callable[[set[str]], int] | None = None,
    on_handle: Callable[[dict[str, Any]], Any] | None = None,
) -> RunpodRunAdapters:
    """The run machine's adapters for `spec`: runpod-flash deploys, REST submits and watches.

    Checked before anything is provisioned (`WorkerDependencyError` / `ValueError`): the
    worker's dependencies, the function a worker without a baked image runs (`function`,
    else `spec.entrypoint`), the runtime secrets, and that the spec's env holds none.
    Each attempt deploys a fresh endpoint, without the weight cache once the run dropped
    it; `sweep(protected) -> int` frees quota before a deploy retry (default
    `quota_sweeper`); `deployer` replaces `deploy_endpoint` (same signature).
    `client` (a `RunpodClient`) serves every attempt; by default each attempt uses a
    client of the account its endpoint landed on (close them with `adapters.close()`).
    Jobs are watched on endpoints the run deployed, so their Flash results are unpickled;
    `allow_pickle=False` keeps every watch JSON-only. `hub_options` go to the Hub readers
    (`cache_dir`, `endpoint`, `min_interval_s`; the watch paces heartbeat reads itself).
    """
    secrets = check_secrets(runtime_secrets)
    register_secrets(*secrets.values(), os.environ.get("HF_TOKEN"))
    deps = checked_spec(spec, seed)
    if not deps.baked and function is None:
        if spec.entrypoint is None:
            raise ValueError("a worker without a baked image needs spec.entrypoint or function")
        function = resolve_entrypoint(spec.entrypoint)
    pool = accounts if accounts is not None else KeyPool.from_env()
    free_quota = sweep if sweep is not None else quota_sweeper(pool, store, clock=clock)

    def deploy(run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
        deployed = deployer(
            deploy_request(spec, deps, attempt.started),
            accounts=pool,
            record=record,
            sweep=free_quota,
            sleep=sleep,
            record_outcome=False,  # the run records EndpointDeployed / DeployFailed
        )
        return Deployed(
            deployed.endpoint_id,
            deployed.name,
            deployed.account,
            deployed.volumes,
            deployed.disk_gb,
            deployed.idle_timeout_s,  # what the deploy set (None: a deployer that did not say)
        )

    def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
        payload = build_payload(spec, seed, attempt.started.attempt, secrets, deps)
        return build_function_input(
            payload,
            baked_image=deps.baked,
            function=function,
            dependencies=deps.pip,
            system_dependencies=deps.system,
        )

    def hub(run: RunState, attempt: Attempt) -> HubLocation | None:
        if not spec.hf_repo:
            return None
        return HubLocation(hf_repo=spec.hf_repo, phase=spec.phase, run_id=spec.run_id, seed=seed)

    def readers(run: RunState, attempt: Attempt) -> tuple[Any, Any]:
        where = hub(run, attempt)
        if where is None:
            return None, None
        return hub_readers(where, **{"clock": clock, **dict(hub_options or {})})

    return RunpodRunAdapters(
        client,
        deploy,
        job_input,
        readers,
        budget_s=spec.max_wall_seconds,
        interval_s=interval_s,
        clock=clock,
        sleep=sleep,
        log=log,
        allow_pickle=allow_pickle,
        client_for=None if client is not None else AccountClients(pool),
        on_handle=on_handle,
        accounts=(0,) if client is not None else tuple(range(len(pool))),
        hub=hub,
    )


def submit_run(
    spec: RunSpec,
    seed: int,
    log: Log | None = None,
    on_handle: Callable[[dict[str, Any]], Any] | None = None,
    attempt: int = 0,
    runtime_secrets: Mapping[str, str] | None = None,
    on_last_gpu: bool = False,
    *,
    client: Any = None,
    store: EventStore | str | None = None,
    run_stream: str | None = None,
    deployer: Callable[..., DeployedEndpoint] = deploy_endpoint,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    candidate: Candidate | None = None,
    accounts: KeyPool | None = None,
    sweep: Callable[[set[str]], int] | None = None,
    function: Callable[..., Any] | None = None,
    interval_s: float = 10.0,
    allow_pickle: bool | None = None,
    hub_options: Mapping[str, Any] | None = None,
    on_interrupt: OnInterrupt = "cancel",
) -> PollResult:
    """Deploy, submit and watch one attempt of `spec` for `seed`; return the verdict.

    One attempt of the run machine's own path (see the module notes), recorded as a run of
    exactly that attempt:

    - `attempt` numbers the attempt (0 first): it picks a fresh endpoint name and the job
      stream, and reaches the worker as `ATTEMPT`. `on_last_gpu` says no further GPU
      attempt follows: the capacity graces wait longer (`stall_kwargs`).
    - `candidate` (a `Candidate`) overrides the spec's GPU class for this attempt.
    - `runtime_secrets` go into the worker's env only, and are masked everywhere.
    - `on_handle(handle_dict)` is called once the job is queued, as its watch starts:
      persist it to reattach with `poll_job(handle, store=..., stream=...)` from any
      process. The handle is `trusted_output` (this call deployed the endpoint), so the
      job's Flash envelope is unpickled (up to `MAX_PICKLE_BYTES`); `allow_pickle=False`
      keeps the watch JSON-only.
    - `store` is a store or a URL (default `default_store_url()`); `run_stream` defaults
      to `run-<run_id>-s<seed>-a<attempt>`, the job stream is
      `job-<run_id>-s<seed>-a<attempt>`. Calling again on a run stream whose attempt has
      not concluded resumes it. A `run_stream` holding a control character is a
      `ValueError` (`flashfsm.naming.check_stream`).
    - `client` is a `RunpodClient` for every call; by default one is made for the account
      the endpoint lands on, of `accounts` (default `KeyPool.from_env()`).
    - `sweep`, `deployer`, `function`, `hub_options`, `allow_pickle`: as for
      `flash_run_adapters`; `clock` and `sleep` drive the deploy waits, the events' times
      and the watch.
    - `on_interrupt`: what a Ctrl-C does, as for `supervise_run`: "cancel" (the default)
      cancels the job, deletes the endpoint and raises `KeyboardInterrupt` again;
      "detach" records and cancels nothing (calling again resumes the attempt).

    Raises `ImportError` naming the `deploy` extra when runpod-flash is missing (and the
    default deployer is used), `WorkerDependencyError` / `ValueError` before anything is
    provisioned (a job stream or run stream that already records this attempt included),
    `UnsupportedProvider` when `candidate` names a provider other than `runpod`,
    `DeployError` when
    the deploy gives up, the client's error when the submit fails (the endpoint is
    deleted first), and `WatchStopped` when the run was cancelled (`request_cancel`).
    """
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ValueError(f"attempt must be a non-negative integer, got {attempt!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    job_stream = naming.check_stream(attempt_stream(spec.run_id, attempt, seed), "run_id")
    stream = naming.check_stream(run_stream or naming.run_stream(spec.run_id, seed, attempt))
    adapter_options = {
        "client": client,
        "accounts": accounts,
        "runtime_secrets": runtime_secrets,
        "function": function,
        "deployer": deployer,
        "interval_s": interval_s,
        "hub_options": hub_options,
        "log": log,
        "allow_pickle": allow_pickle,
        "sweep": sweep,
        "on_handle": on_handle,
    }
    with _spec_adapters(spec, seed, store, clock, sleep, adapter_options) as (opened, adapters):
        _check_unrecorded(opened, stream, job_stream, attempt)
        result = _walk(
            spec,
            seed,
            [candidate or Candidate(gpu_class=spec.gpu_class)],
            adapters,
            opened,
            stream,
            clock,
            sleep,
            max_retries=0,
            log=make_say(log),
            single_attempt=attempt,
            on_last_gpu=on_last_gpu,
            on_interrupt=on_interrupt,
        )
        return _attempt_result(opened, result, adapters, attempt)


def _check_unrecorded(store: EventStore, stream: str, job_stream: str, attempt: int) -> None:
    """Refuse an attempt recorded by anything but this attempt's own run. The attempt's own
    run resumes (an orchestrator's retry after a kill: no second deploy or submit), or,
    once it is done, answers from its record."""
    events = store.read(stream)
    if events:
        started = replay_run(events).started
        if started is None or started.single_attempt != attempt:
            raise ValueError(
                f"run stream {stream!r} already records another run: submit a new attempt, "
                "or name another run_stream"
            )
        return
    if store.read(job_stream):
        raise ValueError(
            f"job stream {job_stream!r} already holds attempt {attempt} outside a run: "
            "reattach with poll_job, or submit a new attempt"
        )


def _attempt_result(
    store: EventStore, result: RunResult, adapters: RunpodRunAdapters, attempt: int
) -> PollResult:
    """The attempt's verdict as `poll_job` returns it, or the error that kept it from a job.

    A run cancelled before its attempt ended is `WatchStopped`, although its job's stream
    has a verdict too: the platform's answer to the cancel, watched to close the stream.
    """
    events = store.read(result.stream)
    run = replay_run(events)
    tried = run.attempts[-1] if run.attempts else None
    cancel = next((e.seq for e in events if e.kind == "CancelRequested"), None)
    if cancel is not None and (tried is None or tried.ended is None or tried.ended.seq > cancel):
        raise WatchStopped(f"run {result.stream!r} was cancelled: {result.detail}")
    if tried is not None and tried.job_stream:
        state = replay(store.read(tried.job_stream))
        if state.verdict is not None:
            return PollResult.from_verdict(verdict_of(state.verdict))
    if run.cancel_requested:
        raise WatchStopped(f"run {result.stream!r} was cancelled: {result.detail}")
    error = adapters.errors.get(attempt)
    if error is not None:
        raise error
    if tried is not None and tried.submit_error is not None:  # a resumed run's old failure
        raise RunpodApiError(tried.submit_error, route="run")
    raise DeployError(result.detail, error_class=str(result.failure))


def supervise_spec(
    spec: RunSpec,
    seed: int,
    candidates: Sequence[Candidate],
    *,
    max_retries: int = 2,
    store: EventStore | str | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    capacity_memory: CapacityPolicy | bool = True,
    on_attempt_end: AttemptHook | None = None,
    on_interrupt: OnInterrupt = "cancel",
    detach: bool = False,
    **adapter_options: Any,
) -> RunResult:
    """Run `spec` for `seed` to a result: the GPU walk over `candidates`, with retries.

    The run's stream is `run-<run_id>-s<seed>`; calling this again after a crash resumes
    the run (see `supervise_run`, which also says what `capacity_memory`, `on_attempt_end`
    and `on_interrupt` do: by default a Ctrl-C cancels the run; "detach" leaves it to
    resume). Every candidate's provider must be `runpod`
    (`UnsupportedProvider` otherwise). `adapter_options` go to `flash_run_adapters`.

    `detach=True` hands the run to a fleet (`flashfsm.fleet`) instead: the spec is checked
    as for a deploy, its `RunStarted` recorded with the spec as a hand-off, and a pending
    result returned at once; a `flashfsm supervise` replica on the same store deploys,
    submits and watches it (`fleet_run_adapters`). Nothing is deployed here, so neither a
    key nor runpod-flash is needed; runtime secrets cannot travel this way (the store
    would hold them), nor can other `adapter_options`.
    """
    if detach:
        if adapter_options:
            raise ValueError(
                f"{', '.join(sorted(adapter_options))}: not for a run handed to a fleet "
                "(its replica makes the adapters)"
            )
        return _hand_off_spec(
            spec, seed, candidates, max_retries, store, clock, capacity_memory, on_interrupt
        )
    with _spec_adapters(spec, seed, store, clock, sleep, adapter_options) as (opened, adapters):
        stream = naming.run_stream(spec.run_id, seed)
        return _walk(
            spec,
            seed,
            candidates,
            adapters,
            opened,
            stream,
            clock,
            sleep,
            max_retries=max_retries,
            capacity_memory=capacity_memory,
            on_attempt_end=on_attempt_end,
            on_interrupt=on_interrupt,
        )


async def asupervise_spec(
    spec: RunSpec,
    seed: int,
    candidates: Sequence[Candidate],
    *,
    max_retries: int = 2,
    store: EventStore | str | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    capacity_memory: CapacityPolicy | bool = True,
    on_attempt_end: AttemptHook | None = None,
    **adapter_options: Any,
) -> RunResult:
    """`supervise_spec` from an event loop (`flashfsm.runs.asupervise_run`): the same run,
    the same events. Opening the store and checking the spec (`flash_run_adapters`) is
    one blocking step, run in a worker thread; so are the deploys (runpod-flash). A
    cancelled task records and cancels nothing: calling again resumes the run; a user's
    cancel is `request_cancel` on its stream (`run-<run_id>-s<seed>`)."""
    opening = _spec_adapters(spec, seed, store, clock, time.sleep, adapter_options)
    opened, adapters = await asyncio.to_thread(opening.__enter__)
    try:
        adapters.asleep = sleep
        return await asupervise_run(
            spec.run_id,
            candidates,
            adapters,
            store=opened,
            stream=naming.run_stream(spec.run_id, seed),
            clock=clock,
            sleep=sleep,
            max_retries=max_retries,
            capacity_memory=capacity_memory,
            on_attempt_end=on_attempt_end,
            **_spec_run_options(spec, seed),
        )
    finally:
        await asyncio.to_thread(opening.__exit__, None, None, None)


def _hand_off_spec(
    spec: RunSpec,
    seed: int,
    candidates: Sequence[Candidate],
    max_retries: int,
    store: EventStore | str | None,
    clock: Callable[[], float],
    capacity_memory: CapacityPolicy | bool,
    on_interrupt: OnInterrupt,
) -> RunResult:
    """`supervise_spec(..., detach=True)`: the run recorded for a fleet, with its spec."""
    deps = checked_spec(spec, seed)
    if not deps.baked and spec.entrypoint is None:
        raise ValueError("a worker without a baked image needs spec.entrypoint")
    if spec.entrypoint is not None and not ENTRYPOINT.fullmatch(spec.entrypoint):
        raise ValueError(f"entrypoint {spec.entrypoint!r} is not 'module:function'")
    check_providers(candidates, RunpodRunAdapters)  # (the providers the replica deploys to)
    recorded = spec.to_json()
    if len(recorded) > SPEC_CAP:
        raise ValueError(f"the spec is {len(recorded)} characters as JSON: at most {SPEC_CAP}")
    with opened_store(store) as opened:
        return supervise_run(
            spec.run_id,
            candidates,
            None,  # type: ignore[arg-type]  (a hand-off deploys nothing)
            max_retries=max_retries,
            weight_cache=bool(spec.weight_cache),
            budget_s=spec.max_wall_seconds,
            phase=spec.phase,
            seed=seed,
            store=opened,
            stream=naming.run_stream(spec.run_id, seed),
            clock=clock,
            capacity_memory=capacity_memory,
            on_interrupt=on_interrupt,
            detach=True,
            spec=recorded,
        )


#: What `hand_off_spec` reads beside the spec's own fields.
HAND_OFF_FIELDS = frozenset({"seed", "candidates", "max_retries"})


def spec_intake(data: Mapping[str, Any]) -> tuple[RunSpec, int, list[Candidate], int]:
    """A spec hand-off's data checked, before any store is opened: the `RunSpec`, the seed,
    the candidates and the retries (a `ValueError` naming what is wrong). Each candidate
    carries the price it was given; one given none (and the default, the spec's GPU class
    alone) is unpriced (`price_per_hour` None), so its money shows as such, never $0."""
    fields = {k: v for k, v in data.items() if k not in HAND_OFF_FIELDS}
    spec = RunSpec.model_validate(fields)
    raw = data.get("candidates")
    if raw is not None and (not isinstance(raw, list) or not raw):
        raise ValueError("candidates must be a non-empty list")
    candidates = (
        [Candidate.model_validate(c) for c in raw]
        if raw is not None
        else [Candidate(gpu_class=spec.gpu_class, price_per_hour=None)]
    )
    seed, retries = data.get("seed", 0), data.get("max_retries", 2)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ValueError(f"max_retries must be a non-negative integer, got {retries!r}")
    return spec, seed, candidates, retries


def hand_off_spec(data: Mapping[str, Any], store: EventStore | str | None = None) -> RunResult:
    """Hand a run to a fleet from plain data (`flashfsm runs add` of a spec file): a
    `RunSpec`'s fields, and optionally `seed` (0), `candidates` (the spec's GPU class
    alone) and `max_retries` (2), checked by `spec_intake`. See `supervise_spec(...,
    detach=True)`."""
    spec, seed, candidates, retries = spec_intake(data)
    return supervise_spec(spec, seed, candidates, max_retries=retries, store=store, detach=True)


def fleet_run_adapters(
    store: EventStore,
    *,
    interval_s: float = 10.0,
    clock: Callable[[], float] = time.time,
    **adapter_options: Any,
) -> Callable[[RunStarted, Callable[[float], None]], RunpodRunAdapters]:
    """What a fleet replica drives handed-off runs with by default (`flashfsm supervise`):
    each run's recorded spec (`supervise_spec(..., detach=True)`), deployed with
    runpod-flash and watched over REST with the keys in `RUNPOD_API_KEY`, everything else
    from the SDKs' own environment variables — the one deploy path, `flash_run_adapters`.
    Sweeps of quota go to `store`. Raises at once, before any run is claimed, when a run
    could not be deployed: `ImportError` naming the `deploy` extra without runpod-flash,
    `ValueError` without a key. A run recorded without a spec is a `ValueError` when
    its adapters are asked for (drive such runs with adapters of your own)."""
    require_sdk()
    accounts = KeyPool.from_env()

    def adapters(started: RunStarted, sleep: Callable[[float], None]) -> RunpodRunAdapters:
        if started.spec is None:
            raise ValueError(
                f"run {started.run_id!r} was handed off without a spec: nothing says what "
                "to deploy (hand it off with supervise_spec, or drive it with --run-adapters)"
            )
        spec = RunSpec.model_validate_json(started.spec)
        return flash_run_adapters(
            spec,
            started.seed or 0,
            store=store,
            accounts=accounts,
            clock=clock,
            sleep=sleep,
            interval_s=interval_s,
            **adapter_options,
        )

    return adapters


@contextlib.contextmanager
def _spec_adapters(
    spec: RunSpec,
    seed: int,
    store: EventStore | str | None,
    clock: Callable[[], float],
    sleep: Callable[[float], Any],
    adapter_options: Mapping[str, Any],
) -> Iterator[tuple[EventStore, RunpodRunAdapters]]:
    """The store (opened, and closed after, when it is a URL or None: `default_store_url()`)
    and `flash_run_adapters` for `spec` (closed after).

    Deploying with runpod-flash (the default `deployer`) needs the `deploy` extra: without
    it, an `ImportError` naming the extra, before anything is opened or recorded.
    """
    if adapter_options.get("deployer", deploy_endpoint) is deploy_endpoint:
        require_sdk()
    with opened_store(store) as opened:
        adapters = flash_run_adapters(
            spec, seed, store=opened, clock=clock, sleep=sleep, **adapter_options
        )
        try:
            yield opened, adapters
        finally:
            adapters.close()


def _walk(
    spec: RunSpec,
    seed: int,
    candidates: Sequence[Candidate],
    adapters: RunpodRunAdapters,
    store: EventStore,
    stream: str,
    clock: Callable[[], float],
    sleep: Callable[[float], Any],
    **run_options: Any,
) -> RunResult:
    """`supervise_run` of `spec` for `seed` over `candidates`, in `stream`."""
    return supervise_run(
        spec.run_id,
        candidates,
        adapters,
        store=store,
        stream=stream,
        clock=clock,
        sleep=sleep,
        **_spec_run_options(spec, seed),
        **run_options,
    )


def _spec_run_options(spec: RunSpec, seed: int) -> dict[str, Any]:
    """What a spec says of its run, for either driver."""
    return {
        "weight_cache": bool(spec.weight_cache),
        "budget_s": spec.max_wall_seconds,
        "phase": spec.phase,
        "seed": seed,
    }
