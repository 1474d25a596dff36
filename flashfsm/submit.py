"""`submit_run`: one attempt of a training run, from nothing to a verdict.

Theory of operation. Everything that can be checked without the network is checked
first: the worker's dependencies (`resolve_worker_dependencies`, a pure function of the
spec), the function a non-baked worker runs, the job input, and that the attempt's job
stream is still empty. Only then is an endpoint deployed (`flash_deploy.deploy_endpoint`,
a fresh name per attempt), the job submitted with a TTL and execution timeout derived from
the wall-clock budget (`policy_for_budget`), and the job stream opened with its
`JobSubmitted` before the first poll. The watch is `poll_job` on that stream with the
Hugging Face heartbeat and failure readers, so a crashed supervisor reattaches with
`poll_job` on the same stream and handle.

Two streams are written. The run's stream (`run-<run_id>` by default; other writers may
share it, appends go to its tail) gets the deploy steps, `JobQueued`, or `SubmitFailed`
and `EndpointDeleted` when the submit fails: the endpoint is deleted at once, since no
handle to it exists yet. The job's stream (`job-<run_id>-s<seed>-a<attempt>`) is the watch.

Secrets. The pool's API keys, `HF_TOKEN` and the caller's `runtime_secrets` are
registered for redaction before anything happens; runtime secrets travel only in the job
input to the worker, never in the spec, an event, a log line or an error message.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from flashfsm.adapters.flash_deploy import (
    DeployedEndpoint,
    DeployRequest,
    KeyPool,
    deploy_endpoint,
)
from flashfsm.adapters.flash_wire import build_function_input
from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
)
from flashfsm.adapters.runpod import (
    ENV_API_BASE_URL,
    ENV_ENDPOINT_BASE_URL,
    RunpodClient,
    policy_for_budget,
)
from flashfsm.adapters.stores import default_store_url
from flashfsm.events.errors import ConcurrencyError
from flashfsm.events.models import (
    MESSAGE_CAP,
    NAME_CAP,
    Candidate,
    EndpointDeleted,
    EventBase,
    JobQueued,
    JobSubmitted,
    SubmitFailed,
    cap_text,
)
from flashfsm.events.policy import GracePolicy, stall_kwargs
from flashfsm.events.store import EventStore
from flashfsm.ids import new_id
from flashfsm.naming import endpoint_name
from flashfsm.redact import redact, register_secrets
from flashfsm.shell import JobHandle, Log, PollResult, make_say, poll_job, resolve_store

if TYPE_CHECKING:
    from flashfsm.runs import RunpodRunAdapters, RunResult

logger = logging.getLogger("flashfsm.submit")

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_APT_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+:=~_-]*")
_ENTRYPOINT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Worker env names submit_run sets itself; a spec or a runtime secret may not.
RESERVED_ENV = frozenset({"RUN_ID", "PHASE", "SEED", "ATTEMPT"})
APPEND_TRIES = 20  # tail appends retried while other writers' events keep landing


class RunSpec(BaseModel):
    """What one training run needs from RunPod and the Hub, as plain, JSON-able data.

    The spec travels to the worker as `job_spec_json`, so it holds no secret: pass those
    to `submit_run(runtime_secrets=...)`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(pattern=f"^{_NAME}$", max_length=100, description="the run's id")
    phase: str = Field("train", pattern=f"^{_NAME}$", max_length=50, description="e.g. sft, rl")
    gpu_class: str = Field(
        min_length=1, max_length=100, description="friendly class: H100, A100-80GB, L40S, …"
    )
    hf_repo: str | None = Field(
        None, description="dataset repo the worker writes heartbeats and artifacts to"
    )
    max_wall_seconds: float = Field(
        6 * 3600.0, gt=0, allow_inf_nan=False, description="the job's wall-clock budget"
    )
    disk_gb: int | None = Field(
        None, ge=0, description="container disk; raises the SDK's 64 GB, never lowers it"
    )
    weight_cache: str | None = Field(
        None, pattern=f"^{_NAME}$", max_length=60, description="cache volume base name"
    )
    weight_cache_gb: int = Field(100, ge=10, le=4096, description="size of each cache volume")
    worker_image: str | None = Field(
        None, description="baked worker image; None: Flash runtime plus worker_pip"
    )
    worker_pip: tuple[str, ...] = Field((), description="pip requirements for the worker")
    worker_system_deps: tuple[str, ...] = Field((), description="apt packages (no image)")
    entrypoint: str | None = Field(
        None, description="'module:function' a worker without a baked image runs"
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra worker env, no secrets")
    min_cuda_version: str | None = Field(None, description="e.g. '12.8'; None: SDK default")

    @field_validator("hf_repo", "worker_image", "entrypoint")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return (value.strip() or None) if isinstance(value, str) else value

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if not _ENV_KEY.fullmatch(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by submit_run; it cannot come from the spec")
        return env

    def to_json(self) -> str:
        """The spec as the worker receives it."""
        return self.model_dump_json()


class WorkerDependencyError(ValueError):
    """A worker dependency is malformed; raised before anything is provisioned."""


@dataclass(frozen=True)
class WorkerDependencies:
    """What the worker runs on: a baked image, or the Flash runtime plus packages."""

    image: str | None
    pip: tuple[str, ...] = ()
    system: tuple[str, ...] = ()

    @property
    def baked(self) -> bool:
        """True for a baked image (the job input is the payload itself)."""
        return self.image is not None


def resolve_worker_dependencies(spec: RunSpec) -> WorkerDependencies:
    """The worker's image and packages, validated (`WorkerDependencyError`); pure.

    Each pip requirement must parse as a PEP 508 requirement, each apt package be a plain
    package name, and an image have no whitespace. Duplicates are dropped, order kept.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    image = spec.worker_image
    if image is not None and (not image or any(c.isspace() for c in image)):
        raise WorkerDependencyError(f"worker image {image!r} is not an image reference")
    pip: list[str] = []
    for raw in spec.worker_pip:
        text = raw.strip() if isinstance(raw, str) else ""
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise WorkerDependencyError(f"worker requirement {raw!r} is malformed: {exc}") from None
        if text not in pip:
            pip.append(text)
    system: list[str] = []
    for raw in spec.worker_system_deps:
        text = raw.strip() if isinstance(raw, str) else ""
        if not _APT_PACKAGE.fullmatch(text):
            raise WorkerDependencyError(f"system package {raw!r} is not a package name")
        if text not in system:
            system.append(text)
    if image is not None and system:
        raise WorkerDependencyError("system packages are installed at boot: not with an image")
    return WorkerDependencies(image=image, pip=tuple(pip), system=tuple(system))


def resolve_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """The function a `'module:function'` entrypoint names (imported now)."""
    if not _ENTRYPOINT.fullmatch(entrypoint):
        raise ValueError(f"entrypoint {entrypoint!r} is not 'module:function'")
    module_name, _, attribute = entrypoint.partition(":")
    function = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(function):
        raise ValueError(f"entrypoint {entrypoint!r} is not a function")
    return function


def job_stream_name(run_id: str, seed: int, attempt: int = 0) -> str:
    """The stream of an attempt's job watch."""
    return f"job-{run_id}-s{int(seed)}-a{int(attempt)}"


def run_stream_name(run_id: str) -> str:
    """The default stream of a run's deploy and submit steps."""
    return f"run-{run_id}"


def build_payload(
    spec: RunSpec,
    seed: int,
    attempt: int = 0,
    runtime_secrets: Mapping[str, str] | None = None,
    deps: WorkerDependencies | None = None,
) -> dict[str, Any]:
    """What the worker's training function receives.

    `env` holds the spec's env, `RUN_ID`, `PHASE`, `SEED`, `ATTEMPT` and the runtime
    secrets (only here). `extra_pip` lists the worker requirements a baked image still
    installs; without an image they are installed at boot instead (see `build_function_input`).
    """
    deps = deps or resolve_worker_dependencies(spec)
    env = {
        **spec.env,
        "RUN_ID": spec.run_id,
        "PHASE": spec.phase,
        "SEED": str(int(seed)),
        "ATTEMPT": str(int(attempt)),
        **dict(runtime_secrets or {}),
    }
    return {
        "hf_repo": spec.hf_repo,
        "job_spec_json": spec.to_json(),
        "phase": spec.phase,
        "seed": int(seed),
        "env": env,
        "extra_pip": list(deps.pip) if deps.baked else [],
    }


def _check_secrets(runtime_secrets: Mapping[str, str] | None) -> dict[str, str]:
    secrets = dict(runtime_secrets or {})
    for key, value in secrets.items():
        if not isinstance(key, str) or not _ENV_KEY.fullmatch(key):
            raise ValueError("runtime secret names must be environment variable names")
        if key in RESERVED_ENV:
            raise ValueError(f"{key} is set by submit_run; it cannot be a runtime secret")
        if not isinstance(value, str):
            raise ValueError(f"runtime secret {key} must be a string")
    return secrets


class StreamRecorder:
    """`record(event_cls, **fields)` appending to the tail of a shared stream.

    Other writers may append to the same stream; a stale seq is re-read and the event
    rebuilt at the new tail. String fields pass through `redact` once more.
    """

    def __init__(self, store: EventStore, stream: str, clock: Callable[[], float]):
        self.store, self.stream, self.clock = store, stream, clock
        self._next: int | None = None

    def __call__(self, cls: type[EventBase], **fields: Any) -> Any:
        fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items()}
        for _ in range(APPEND_TRIES):
            if self._next is None:
                self._next = len(self.store.read(self.stream))
            at = self.clock()
            event = cls(stream=self.stream, seq=self._next, id=new_id(at), at=at, **fields)
            try:
                self.store.append(self.stream, [event], event.seq)
            except ConcurrencyError:
                self._next = None
                continue
            self._next += 1
            return event
        raise ConcurrencyError(self.stream, self._next or 0, len(self.store.read(self.stream)))


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
        from flashfsm.adapters.sweeper import IdleSweeper

        with runpod_client(accounts.key()) as client:
            # One stream per account: a sweep sees only its own account's endpoints.
            stream = f"sweeper-{accounts.active}"
            report = IdleSweeper(client, store, stream=stream, clock=clock).sweep(
                protected, min_idle_s=0.0, reap_warm=False
            )
        return len(report.deleted)

    return sweep


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
) -> PollResult:
    """Deploy, submit and watch one attempt of `spec` for `seed`; return the verdict.

    - `attempt` numbers the attempt (0 first): it picks a fresh endpoint name and the job
      stream, and reaches the worker as `ATTEMPT`. `on_last_gpu` says no further GPU
      attempt follows: the capacity graces wait longer (`stall_kwargs`).
    - `candidate` (a `Candidate`) overrides the spec's GPU class for this attempt.
    - `runtime_secrets` go into the worker's env only, and are redacted everywhere.
    - `on_handle(handle_dict)` is called once the job is queued: persist it to reattach
      with `poll_job(handle, store=..., stream=...)` from any process. The handle is
      `trusted_output` (this call deployed the endpoint), so the job's Flash envelope is
      unpickled (up to `MAX_PICKLE_BYTES`); `allow_pickle=False` keeps the watch JSON-only.
    - `store` is a store or a URL (default `default_store_url()`); `run_stream` defaults
      to `run-<run_id>`; the job stream is `job-<run_id>-s<seed>-a<attempt>`.
    - `client` is a `RunpodClient` for the account the endpoint lands on; by default one
      is made for that account of `accounts` (default `KeyPool.from_env()`).
    - `sweep(protected) -> int` frees quota before a deploy retry (default
      `quota_sweeper`); `deployer` replaces `deploy_endpoint` (same signature).
    - `function` (or `spec.entrypoint`) is what a worker without a baked image runs.
    - `clock` and `sleep` drive the deploy waits, the events' times and the watch.
    - `hub_options` go to the Hub readers (`cache_dir`, `endpoint`, `min_interval_s`; the
      watch paces heartbeat reads itself, from the log, and a non-zero `min_interval_s` adds
      a process-local gate that a reattach does not see).

    Raises `WorkerDependencyError` / `ValueError` before anything is provisioned,
    `DeployError` when the deploy gives up, and the client's error when the submit fails
    (the endpoint is deleted first).
    """
    secrets = _check_secrets(runtime_secrets)
    register_secrets(*secrets.values(), os.environ.get("HF_TOKEN"))
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ValueError(f"attempt must be a non-negative integer, got {attempt!r}")
    leaked = sorted(k for k, v in spec.env.items() if redact(v) != v)
    if leaked:
        raise ValueError(f"spec env {', '.join(leaked)} holds a secret: use runtime_secrets")

    gpu_class = candidate.gpu_class if candidate is not None else spec.gpu_class
    deps = resolve_worker_dependencies(spec)
    if not deps.baked and function is None:
        if spec.entrypoint is None:
            raise ValueError("a worker without a baked image needs spec.entrypoint or function")
        function = resolve_entrypoint(spec.entrypoint)
    payload = build_payload(spec, seed, attempt, secrets, deps)
    job_input = build_function_input(
        payload,
        baked_image=deps.baked,
        function=function,
        dependencies=deps.pip,
        system_dependencies=deps.system,
    )
    budget = policy_for_budget(spec.max_wall_seconds)
    name = endpoint_name(spec.run_id, gpu_class, seed, attempt)
    stream = job_stream_name(spec.run_id, seed, attempt)
    if len(stream) > NAME_CAP:
        raise ValueError(f"run id {spec.run_id!r} makes a job stream name over {NAME_CAP} chars")
    say = make_say(log)

    owns_store = store is None or isinstance(store, str)
    opened = resolve_store(store if store is not None else default_store_url())
    try:
        if opened.read(stream):
            raise ValueError(
                f"job stream {stream!r} already holds attempt {attempt}: reattach with "
                "poll_job, or submit a new attempt"
            )
        record = StreamRecorder(opened, run_stream or run_stream_name(spec.run_id), clock)
        pool = accounts if accounts is not None else KeyPool.from_env()
        request = DeployRequest(
            name=name,
            gpu_class=gpu_class,
            attempt=attempt,
            execution_timeout_ms=round(budget["execution_timeout_s"] * 1000),
            image=deps.image,
            dependencies=deps.pip,
            system_dependencies=deps.system,
            weight_cache=spec.weight_cache,
            weight_cache_gb=spec.weight_cache_gb,
            disk_gb=spec.disk_gb,
            min_cuda_version=spec.min_cuda_version,
        )
        say(f"run {spec.run_id}: deploying {name} ({gpu_class}, attempt {attempt})")
        deployed = deployer(
            request,
            accounts=pool,
            record=record,
            sweep=sweep if sweep is not None else quota_sweeper(pool, opened, clock=clock),
            sleep=sleep,
        )
        owns_client = client is None
        rest = client if client is not None else runpod_client(pool.key(deployed.account))
        try:
            handle = _submit(rest, deployed, job_input, budget, record, attempt, clock, say)
            handle.gpu_class, handle.attempt, handle.on_last_gpu = gpu_class, attempt, on_last_gpu
            _open_job_stream(opened, stream, handle, GracePolicy.for_attempt(on_last_gpu), clock)
            record(
                JobQueued,
                attempt=attempt,
                endpoint_id=handle.endpoint_id,
                job_id=handle.job_id,
                job_stream=stream,
                submitted_at=handle.submitted_at,
            )
            say(
                f"submitted job {handle.job_id} to {deployed.name} ({deployed.endpoint_id}): "
                f"attempt {attempt}, gpu {gpu_class}, phase {spec.phase}, seed {seed}"
            )
            if on_handle is not None:
                on_handle(handle.to_dict())
            heartbeat_reader = failure_reader = None
            if spec.hf_repo:
                prefix = heartbeat_prefix(spec.phase, spec.run_id, seed)
                options = {"clock": clock, **dict(hub_options or {})}
                heartbeat_reader = make_hf_heartbeat_reader(spec.hf_repo, prefix, **options)
                failure_reader = make_hf_failure_detail_reader(
                    spec.hf_repo, prefix, spec.phase, **options
                )
            return poll_job(
                handle,
                log=log,
                interval_s=interval_s,
                heartbeat_reader=heartbeat_reader,
                failure_detail_reader=failure_reader,
                **stall_kwargs(on_last_gpu),
                client=rest,
                clock=clock,
                sleep=sleep,
                store=opened,
                stream=stream,
                allow_pickle=allow_pickle,
            )
        finally:
            if owns_client:
                rest.close()
    finally:
        if owns_store:
            opened.close()


def _submit(
    client: Any,
    deployed: DeployedEndpoint,
    job_input: dict[str, Any],
    budget: dict[str, float],
    record: StreamRecorder,
    attempt: int,
    clock: Callable[[], float],
    say: Callable[[str], None],
) -> JobHandle:
    """Queue the job; on failure delete the endpoint (no handle to it exists yet), re-raise."""
    submitted_at = clock()
    try:
        job_id = client.run(
            deployed.endpoint_id,
            job_input,
            ttl_s=budget["ttl_s"],
            execution_timeout_s=budget["execution_timeout_s"],
        )
    except Exception as exc:
        message = cap_text(redact(str(exc)), MESSAGE_CAP) or ""
        record(SubmitFailed, attempt=attempt, error_class=type(exc).__name__, message=message)
        try:
            client.delete_endpoint(deployed.endpoint_id)  # False: already gone, fine too
            deleted = True
        except Exception as cleanup:
            deleted = False
            logger.warning(
                "endpoint %s of a failed submit was not deleted: %s",
                deployed.endpoint_id,
                redact(str(cleanup)),
            )
        record(
            EndpointDeleted, endpoint_id=deployed.endpoint_id, reason="submit failed", ok=deleted
        )
        say(f"submit to {deployed.name} failed ({type(exc).__name__}); endpoint deleted")
        raise
    # this call deployed the endpoint: its output is the run's own, so it may be unpickled
    return JobHandle(
        deployed.endpoint_id, deployed.name, job_id, submitted_at=submitted_at, trusted_output=True
    )


def _open_job_stream(
    store: EventStore,
    stream: str,
    handle: JobHandle,
    policy: GracePolicy,
    clock: Callable[[], float],
) -> None:
    """Append the job's `JobSubmitted` (seq 0) before the first poll: the watch's anchor."""
    at = clock()
    event = JobSubmitted(
        stream=stream,
        seq=0,
        id=new_id(at),
        at=at,
        endpoint_id=handle.endpoint_id,
        endpoint_name=handle.endpoint_name,
        job_id=handle.job_id,
        gpu_class=handle.gpu_class,
        attempt=handle.attempt,
        on_last_gpu=handle.on_last_gpu,
        policy=policy,
        submitted_at=handle.submitted_at,
    )
    store.append(stream, [event], 0)


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
) -> RunpodRunAdapters:
    """The run machine's adapters for `spec`: runpod-flash deploys, REST submits and watches.

    Dependencies are resolved (and a bad one refused) before anything is provisioned; each
    attempt deploys a fresh endpoint, without the weight cache once the run dropped it.
    Jobs are watched on endpoints the run deployed, so their Flash results are unpickled;
    `allow_pickle=False` keeps every watch JSON-only.
    """
    from flashfsm.runs import Deployed, RunpodRunAdapters

    secrets = _check_secrets(runtime_secrets)
    register_secrets(*secrets.values(), os.environ.get("HF_TOKEN"))
    deps = resolve_worker_dependencies(spec)
    if not deps.baked and function is None:
        if spec.entrypoint is None:
            raise ValueError("a worker without a baked image needs spec.entrypoint or function")
        function = resolve_entrypoint(spec.entrypoint)
    pool = accounts if accounts is not None else KeyPool.from_env()
    budget = policy_for_budget(spec.max_wall_seconds)
    rest = client if client is not None else runpod_client(pool.key())

    def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
        started = attempt.started
        request = DeployRequest(
            name=started.endpoint_name,
            gpu_class=started.gpu_class,
            attempt=started.attempt,
            execution_timeout_ms=round(budget["execution_timeout_s"] * 1000),
            image=deps.image,
            dependencies=deps.pip,
            system_dependencies=deps.system,
            weight_cache=None if started.cache_dropped else spec.weight_cache,
            weight_cache_gb=spec.weight_cache_gb,
            disk_gb=spec.disk_gb,
            min_cuda_version=spec.min_cuda_version,
        )
        deployed = deployer(
            request,
            accounts=pool,
            record=record,
            sweep=quota_sweeper(pool, store, clock=clock),
            sleep=sleep,
            record_outcome=False,
        )
        return Deployed(deployed.endpoint_id, deployed.name, deployed.account, deployed.volumes)

    def job_input(run: Any, attempt: Any) -> dict[str, Any]:
        payload = build_payload(spec, seed, attempt.started.attempt, secrets, deps)
        return build_function_input(
            payload,
            baked_image=deps.baked,
            function=function,
            dependencies=deps.pip,
            system_dependencies=deps.system,
        )

    def readers(run: Any, attempt: Any) -> tuple[Any, Any]:
        if not spec.hf_repo:
            return None, None
        prefix = heartbeat_prefix(spec.phase, spec.run_id, seed)
        options = {"clock": clock, **dict(hub_options or {})}
        return (
            make_hf_heartbeat_reader(spec.hf_repo, prefix, **options),
            make_hf_failure_detail_reader(spec.hf_repo, prefix, spec.phase, **options),
        )

    return RunpodRunAdapters(
        rest,
        deploy,
        job_input,
        readers,
        budget_s=spec.max_wall_seconds,
        interval_s=interval_s,
        clock=clock,
        sleep=sleep,
        log=log,
        allow_pickle=allow_pickle,
    )


def supervise_spec(
    spec: RunSpec,
    seed: int,
    candidates: Sequence[Candidate],
    *,
    max_retries: int = 2,
    store: EventStore | str | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    **adapter_options: Any,
) -> RunResult:
    """Run `spec` for `seed` to a result: the GPU walk over `candidates`, with retries.

    The run's stream is `run-<run_id>-s<seed>`; calling this again after a crash resumes
    the run (see `supervise_run`). `adapter_options` go to `flash_run_adapters`.
    """
    from flashfsm.runs import supervise_run

    owns_store = store is None or isinstance(store, str)
    opened = resolve_store(store if store is not None else default_store_url())
    try:
        adapters = flash_run_adapters(
            spec, seed, store=opened, clock=clock, sleep=sleep, **adapter_options
        )
        return supervise_run(
            spec.run_id,
            candidates,
            adapters,
            max_retries=max_retries,
            weight_cache=bool(spec.weight_cache),
            budget_s=spec.max_wall_seconds,
            phase=spec.phase,
            seed=seed,
            store=opened,
            stream=f"run-{spec.run_id}-s{int(seed)}",
            clock=clock,
            sleep=sleep,
        )
    finally:
        if owns_store:
            opened.close()
