"""Deploying a training endpoint with runpod-flash: the only module that imports it.

Theory of operation. `deploy_endpoint(request, ...)` turns a `DeployRequest` (plain data)
into a live serverless endpoint and returns a `DeployedEndpoint`. Every step is reported
through `record(event_cls, **fields)` with the run-stream kinds: a `DeployAttempted` per
try, a `QuotaExhausted` per refusal of the account's worker quota, an `AccountFailedOver`
per move to the next key of the pool, then `EndpointDeployed` or `DeployFailed`. Accounts
are indexes into a `KeyPool`; a key never reaches `record`, a log line or an error.

The quota ladder, as the reference had it: a refused deploy sweeps the account's idle
endpoints (`sweep(protected)`, protecting this endpoint's name in both forms) and retries
after 30 s, then 60 s (through the injected `sleep`, outside the SDK lock); after the
third refusal it fails over once to each other account of the pool, then raises
`DeployError`. Any other error raises at once.

The idle timeout. RunPod keeps a worker up, and bills it, for the endpoint's idle timeout
after each job; runpod-flash's `Endpoint` (and its `LiveServerless`) would set 60 s. A
deploy always sets it explicitly (`DeployRequest.idle_timeout_s`, default
`DEFAULT_IDLE_TIMEOUT_S`, checked by `check_idle_timeout` before anything reaches the
SDK), and the `DeployedEndpoint` (and the `EndpointDeployed` v2 it records) says what
was set.

runpod-flash is process-global in three ways, and each is contained here:

- It keeps its resources in `./.flash/resources.pkl` and in a `ResourceManager`
  singleton, and reuses anything tracked there under the same name without checking (a
  stale entry hands back a deleted endpoint, or a volume id of another account). Each try
  runs in a fresh temporary working directory, removed afterwards, and the manager is
  made to track nothing before and after it through its public API (`_forget_resources`:
  ids cleared, endpoints untracked, nothing deleted), so every try starts from nothing
  and leaves nothing behind. The working directory is process-wide: avoid relative-path
  I/O in other threads during a deploy.
- It reads `RUNPOD_API_KEY` from the environment on each call (a comma-separated pool
  would be sent as one bogus key) and `runpod.api_key` was captured at its import. Both
  are set to the active account's key for the try and restored afterwards.
- Its import loads `.env` from the working directory upward, installs stdout and file
  handlers on the root logger and sets levels. The import happens once, inside a
  temporary working directory, and the logging changes are undone.

`SDK_LOCK` is held across each try's critical section, so two threads never interleave
inside the SDK. Only runpod-flash's public API is used: the endpoint is its public
`LiveServerless` resource class built by `endpoint_config` (not `Endpoint`'s private
builder), deployed by `ResourceManager.get_or_deploy_resource`. Swapping runpod-flash
for its successor (the RunPod Python SDK 2.0) means rewriting `_load_sdk`,
`endpoint_config`, `_deploy_once` and `_forget_resources`; the rest is SDK-free.

It is the one module that imports runpod-flash, so every step of a deploy that touches the
SDK (the endpoint's config, the disk, the weight cache's volumes, the SDK's registries, its
errors) is here, behind `deploy_endpoint`. The plain data a deploy works with — the
`DeployRequest`, the `KeyPool`, the `DeployedEndpoint`, the `DeployError`, the idle timeout's
default and check, the GPU classes — is `flashfsm.adapters.deploy_request`'s, SDK-free and
re-exported here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from flashfsm.adapters.deploy_request import (
    DEFAULT_EXECUTION_TIMEOUT_MS as DEFAULT_EXECUTION_TIMEOUT_MS,
)
from flashfsm.adapters.deploy_request import DEFAULT_IDLE_TIMEOUT_S as DEFAULT_IDLE_TIMEOUT_S
from flashfsm.adapters.deploy_request import DEFAULT_WEIGHT_CACHE_GB as DEFAULT_WEIGHT_CACHE_GB
from flashfsm.adapters.deploy_request import GPU_CLASSES as GPU_CLASSES
from flashfsm.adapters.deploy_request import IDLE_TIMEOUT_RANGE_S as IDLE_TIMEOUT_RANGE_S
from flashfsm.adapters.deploy_request import DeployedEndpoint as DeployedEndpoint
from flashfsm.adapters.deploy_request import DeployError as DeployError
from flashfsm.adapters.deploy_request import DeployRequest as DeployRequest
from flashfsm.adapters.deploy_request import KeyPool as KeyPool
from flashfsm.adapters.deploy_request import check_idle_timeout as check_idle_timeout
from flashfsm.adapters.deploy_request import gpu_key as gpu_key
from flashfsm.adapters.deploy_request import weight_cache_volume_name as weight_cache_volume_name
from flashfsm.events.models import (
    MESSAGE_CAP,
    AccountFailedOver,
    DeployAttempted,
    DeployFailed,
    EndpointDeployed,
    QuotaExhausted,
)
from flashfsm.redact import redact, redact_then_cap

logger = logging.getLogger("flashfsm.deploy")

SDK_LOCK = threading.RLock()
"""Held across every call into runpod-flash (its state is process-global)."""

#: Datacenters of `DataCenter.all()` that refuse network volumes (a volume there fails
#: the whole deploy with HTTP 500). The SDK has no capability flag, so this is data.
VOLUME_INCAPABLE_DATACENTERS = frozenset({"US-MO-1"})
QUOTA_TRIES = 3  # deploy tries per account while its worker quota refuses
QUOTA_WAIT_S = 30.0  # the wait before try n (n = 1, 2, …) is QUOTA_WAIT_S × n
QUOTA_MARKERS = ("max workers across all endpoints", "cannot go beyond the maximum limit")

Record = Callable[..., Any]
Sweep = Callable[[set[str]], int]


def is_quota_error(exc: BaseException) -> bool:
    """True when an error says the account's worker quota is exhausted."""
    text = str(exc).lower()
    return any(marker in text for marker in QUOTA_MARKERS)


# ----------------------------------------------------------------------- the ladder


def deploy_endpoint(
    request: DeployRequest,
    *,
    accounts: KeyPool | None = None,
    record: Record | None = None,
    sweep: Sweep | None = None,
    sleep: Callable[[float], Any] = time.sleep,
    record_outcome: bool = True,
) -> DeployedEndpoint:
    """Deploy `request`'s endpoint, climbing the quota ladder; every step goes to `record`.

    `accounts` defaults to `KeyPool.from_env()`; the deploy starts on its active account.
    `sweep(protected) -> int` deletes idle endpoints of the active account and returns how
    many (None: no sweep). With `record_outcome=False` the final `EndpointDeployed` /
    `DeployFailed` is left to the caller (a run shell that records them itself).
    Raises `DeployError`; a request whose idle timeout is out of RunPod's range (one
    built around its validation) is a `ValueError` before anything is recorded or sent.
    """
    check_idle_timeout(request.idle_timeout_s, f"deploy {request.name}: idle_timeout_s")
    pool = accounts if accounts is not None else KeyPool.from_env()
    note = record or _ignore
    attempt, name = request.attempt, request.name
    first = pool.active
    order = [(first + hop) % len(pool) for hop in range(len(pool))]
    last_refusal: BaseException | None = None

    for hop, account in enumerate(order):
        if hop:
            note(
                AccountFailedOver, attempt=attempt, from_account=order[hop - 1], to_account=account
            )
            pool.activate(account)
            logger.warning(
                "deploy %s: worker quota exhausted on account %d; failing over to account %d",
                name,
                order[hop - 1],
                account,
            )
        deployed, last_refusal = _deploy_on(
            request, pool, account, note, sweep, sleep, record_outcome=record_outcome
        )
        if deployed is not None:
            return deployed

    error = DeployError(
        f"deploy {name}: the worker quota refused {QUOTA_TRIES} tries on each of "
        f"{len(pool)} account(s): {_message(last_refusal)}",
        error_class="QuotaExhausted",
        quota=True,
    )
    if record_outcome:
        note(DeployFailed, attempt=attempt, **_error_fields(error))
    logger.warning("%s", error)
    raise error from last_refusal


def _deploy_on(
    request: DeployRequest,
    pool: KeyPool,
    account: int,
    note: Record,
    sweep: Sweep | None,
    sleep: Callable[[float], Any],
    *,
    record_outcome: bool,
) -> tuple[DeployedEndpoint | None, BaseException | None]:
    """One rung of the ladder: up to `QUOTA_TRIES` deploys on `account`, sweeping and
    waiting between quota refusals. The endpoint, else the last refusal; any other error
    is recorded (when `record_outcome`) and raised as a `DeployError`."""
    attempt, name = request.attempt, request.name
    last_refusal: BaseException | None = None
    for try_no in range(QUOTA_TRIES):
        note(DeployAttempted, attempt=attempt, account=account, endpoint_name=name, try_no=try_no)
        try:
            deployed = _deploy_once(request, pool.key(account), account)
        except Exception as exc:
            if not is_quota_error(exc):
                error = _as_deploy_error(exc)
                if record_outcome:
                    note(DeployFailed, attempt=attempt, **_error_fields(error))
                logger.warning("deploy %s failed: %s", name, error)
                raise error from exc
            last_refusal = exc
            more = try_no + 1 < QUOTA_TRIES
            swept = _sweep_quietly(sweep, request.protected_names) if more else 0
            wait_s = QUOTA_WAIT_S * (try_no + 1) if more else 0.0
            note(
                QuotaExhausted,
                attempt=attempt,
                account=account,
                swept=swept,
                wait_s=wait_s,
                message=_message(exc),
            )
            if more:
                logger.warning(
                    "deploy %s: worker quota hit on account %d (try %d/%d); swept %d idle "
                    "endpoint(s), retrying in %.0fs",
                    name,
                    account,
                    try_no + 1,
                    QUOTA_TRIES,
                    swept,
                    wait_s,
                )
                sleep(wait_s)
            continue
        if record_outcome:
            note(
                EndpointDeployed,
                attempt=attempt,
                endpoint_id=deployed.endpoint_id,
                endpoint_name=name,
                account=account,
                volumes=deployed.volumes,
                disk_gb=deployed.disk_gb,
                idle_timeout_s=deployed.idle_timeout_s,
            )
        logger.info("deployed %s as %s on account %d", name, deployed.endpoint_id, deployed.account)
        return deployed, None
    return None, last_refusal


def _ignore(*_: Any, **__: Any) -> None:
    return None


def _message(exc: BaseException | None) -> str:
    return "" if exc is None else redact_then_cap(str(exc), MESSAGE_CAP)


def _error_fields(error: DeployError) -> dict[str, str]:
    return {"error_class": error.error_class, "message": _message(error)}


def _as_deploy_error(exc: BaseException) -> DeployError:
    if isinstance(exc, DeployError):
        return exc
    return DeployError(str(exc) or type(exc).__name__, error_class=type(exc).__name__)


def _sweep_quietly(sweep: Sweep | None, protected: set[str]) -> int:
    """Run the quota sweep; a sweep that fails deleted nothing (the retry still happens)."""
    if sweep is None:
        return 0
    try:
        swept = sweep(set(protected))
    except Exception as exc:
        logger.warning("quota sweep failed (%s); retrying without it", redact(str(exc)))
        return 0
    return swept if isinstance(swept, int) and swept >= 0 else 0


# ----------------------------------------------------------------------- runpod-flash


def _deploy_once(request: DeployRequest, key: str, account: int) -> DeployedEndpoint:
    """One deploy on one account: the SDK critical section."""
    with sdk_session(key) as sdk:
        volumes, datacenters = _weight_cache(sdk, request)
        config = endpoint_config(sdk, request, volumes=volumes, datacenters=datacenters)
        disk = apply_disk_gb(config, request.disk_gb)
        resource = _run_coroutine(sdk.ResourceManager().get_or_deploy_resource(config))
        endpoint_id = getattr(resource, "id", None)
        if not isinstance(endpoint_id, str) or not endpoint_id:
            raise DeployError(f"deploy {request.name}: runpod-flash returned no endpoint id")
        answered = getattr(resource, "idleTimeout", None)
        if isinstance(answered, int) and answered != request.idle_timeout_s:
            logger.warning(
                "deploy %s: idle timeout %d s asked for, but the endpoint says %d s",
                request.name,
                request.idle_timeout_s,
                answered,
            )
        return DeployedEndpoint(
            endpoint_id=endpoint_id,
            name=request.name,
            account=account,
            volumes=tuple(v.name for v in volumes),
            disk_gb=disk,
            registered_name=str(getattr(resource, "name", "") or f"live-{request.name}"),
            idle_timeout_s=request.idle_timeout_s,
        )


def endpoint_config(
    sdk: SimpleNamespace,
    request: DeployRequest,
    *,
    volumes: Sequence[Any] = (),
    datacenters: Sequence[Any] = (),
) -> Any:
    """The runpod-flash resource config that deploys `request`: a `LiveServerless`.

    Built from the SDK's public resource class with the fields runpod-flash's `Endpoint`
    would fill for the same arguments (its own builder is private), and nothing left to
    the SDK's defaults that flashfsm chooses: the idle timeout (never the SDK's 60 s),
    the workers, the GPU (one card), the execution timeout, the image (none: the Flash
    runtime image), FlashBoot and the queue-delay scaler, the CUDA floor when asked, and
    the weight cache's `volumes` with their `datacenters` (default: every datacenter of
    `DataCenter.all()`). `dependencies` are not part of an endpoint: they travel in the
    job input. Call it inside `sdk_session`: the class reads `FLASH_IS_LIVE_PROVISIONING`
    (set there) to register the name as `live-<name>`. Pure and offline.
    """
    fields: dict[str, Any] = {
        "name": request.name,
        "gpus": [_gpu(sdk, request.gpu_class)],
        "gpuCount": 1,
        "workersMin": request.workers[0],
        "workersMax": request.workers[1],
        "idleTimeout": request.idle_timeout_s,  # never the SDK's 60 s default
        "executionTimeoutMs": request.execution_timeout_ms,
        "flashboot": True,
        "scalerType": sdk.ServerlessScalerType.QUEUE_DELAY,
        "scalerValue": 4,
        "datacenter": list(datacenters) or list(sdk.DataCenter.all()),
    }
    if len(volumes) == 1:
        fields["networkVolume"] = volumes[0]
    elif volumes:
        fields["networkVolumes"] = list(volumes)
    if request.image:
        fields["imageName"] = request.image
    if request.min_cuda_version:
        fields["minCudaVersion"] = request.min_cuda_version
    return sdk.LiveServerless(**fields)


def _gpu(sdk: Any, gpu_class: str) -> Any:
    """The runpod-flash GPU enum for a friendly class, a pool name or a card's name."""
    entry = GPU_CLASSES.get(gpu_key(gpu_class))
    if entry is not None:
        enum_name, member = entry
        return getattr(sdk, enum_name)[member]
    for enum in (sdk.GpuGroup, sdk.GpuType):
        for option in enum:
            if gpu_class in (option.name, option.value):
                return option
    known = ", ".join(sorted(GPU_CLASSES))
    raise DeployError(f"unknown GPU class {gpu_class!r} (known: {known})", error_class="ValueError")


def weight_cache_datacenters(sdk: Any | None = None) -> list[Any]:
    """Every datacenter of `DataCenter.all()` that takes network volumes."""
    sdk = sdk or _load_sdk()
    return [dc for dc in sdk.DataCenter.all() if dc.value not in VOLUME_INCAPABLE_DATACENTERS]


def _weight_cache(sdk: Any, request: DeployRequest) -> tuple[list[Any], list[Any]]:
    """The cache's volumes and their datacenters, or two empty lists (never raises).

    The endpoint may run in every volume-capable datacenter and carries a volume in each,
    so wherever it lands its cache is warm. Volumes are built fresh for every try:
    runpod-flash stamps an account's volume id onto the object it deploys.
    """
    if not request.weight_cache:
        return [], []
    try:
        datacenters = weight_cache_datacenters(sdk)
        volumes = [
            sdk.NetworkVolume(
                name=weight_cache_volume_name(request.weight_cache, dc.value),
                size=request.weight_cache_gb,
                datacenter=dc,
            )
            for dc in datacenters
        ]
    except Exception as exc:  # the cache must never break a deploy
        logger.warning(
            "weight cache %r disabled for %s (%s); deploying without a volume",
            request.weight_cache,
            request.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )
        return [], []
    return (volumes, datacenters) if volumes else ([], [])


def apply_disk_gb(config: Any, disk_gb: int | None) -> int | None:
    """Raise the built config's container disk to `disk_gb` (never lower it); the result.

    The SDK's `Endpoint` has no disk setting; its template defaults to 64 GB, and a model
    whose checkpoint is bigger needs more. A smaller request keeps the default.
    """
    template = getattr(config, "template", None)
    current = getattr(template, "containerDiskInGb", None) if template is not None else None
    if not disk_gb:
        return current
    if template is None:
        logger.warning("disk_gb=%s asked for, but the endpoint config has no template", disk_gb)
        return None
    template.containerDiskInGb = max(int(disk_gb), int(current or 0))
    return template.containerDiskInGb


def _run_coroutine(coroutine: Any) -> Any:
    """Run an SDK coroutine to completion, also from a thread whose event loop is running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="flashfsm-deploy") as pool:
        return pool.submit(asyncio.run, coroutine).result()


_sdk: SimpleNamespace | None = None
_SDK_ENV = ("RUNPOD_API_KEY", "FLASH_IS_LIVE_PROVISIONING")
_SDK_QUIET_LOGGERS = ("httpx", "httpcore", "asyncio")


@contextlib.contextmanager
def sdk_session(key: str) -> Iterator[SimpleNamespace]:
    """The SDK, ready to act for the account of `key`, with its state isolated.

    Holds `SDK_LOCK`; inside, the working directory is a fresh temporary directory,
    `RUNPOD_API_KEY` and `runpod.api_key` are `key`, `FLASH_IS_LIVE_PROVISIONING` is
    true and the `ResourceManager` tracks nothing (`_forget_resources`). Everything is
    restored on exit, and the manager is left tracking nothing again.
    """
    with SDK_LOCK:
        saved_env = {name: os.environ.get(name) for name in _SDK_ENV}
        saved_cwd = os.getcwd()
        workdir = tempfile.mkdtemp(prefix="flashfsm-flash-")
        sdk: SimpleNamespace | None = None
        saved_api_key: Any = None
        try:
            os.chdir(workdir)
            os.environ["RUNPOD_API_KEY"] = key
            os.environ["FLASH_IS_LIVE_PROVISIONING"] = "true"
            sdk = _load_sdk()
            saved_api_key = sdk.runpod.api_key
            sdk.runpod.api_key = key
            _forget_resources(sdk)  # (raises rather than deploy beside something tracked)
            yield sdk
        finally:
            if sdk is not None:
                try:
                    _forget_resources(sdk)
                except Exception as exc:  # never hides the try's own outcome
                    logger.warning("runpod-flash state not emptied: %s", redact(str(exc)))
                sdk.runpod.api_key = saved_api_key
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            with contextlib.suppress(OSError):
                os.chdir(saved_cwd)
            shutil.rmtree(workdir, ignore_errors=True)


def _forget_resources(sdk: SimpleNamespace) -> None:
    """Make runpod-flash's `ResourceManager` track nothing, deleting nothing.

    The manager is a process-wide singleton that hands back whatever it tracks under a
    resource's name (`LiveServerless:live-<name>`, `NetworkVolume:<name>`); with
    `FLASH_IS_LIVE_PROVISIONING=true` it does not even check that an endpoint still
    exists. It has no public way to stop tracking a live resource: its one public
    removal, `undeploy_resource`, deletes what it removes, and with `force_remove=True`
    drops the entry even when the delete did not happen (the SDK's own
    `flash undeploy --cleanup-stale`). So, through its public API only:

    - every tracked resource (`list_all_resources`) loses its id first: there is then
      nothing to delete, since runpod-flash deletes an endpoint by its id (with none it
      answers that it cannot undeploy) and does not delete network volumes at all (its
      undeploy raises `NotImplementedError`; a weight cache must survive);
    - each is then `undeploy_resource(uid, force_remove=True)`: the delete does not
      happen, and the entry is dropped.

    A resource whose id could not be cleared is never undeployed, and is an error (a
    later deploy under its name could be handed it). The SDK's expected "cannot
    undeploy" warning is not passed on. Call with `SDK_LOCK` held, in the session's
    temporary working directory (the manager rewrites `./.flash/resources.pkl`).
    """
    manager = sdk.ResourceManager()
    tracked = manager.list_all_resources()
    if not tracked:
        return
    for resource in tracked.values():
        with contextlib.suppress(Exception):  # (a model that refuses: caught below)
            resource.id = None
    idless = [uid for uid, resource in tracked.items() if getattr(resource, "id", None) is None]

    async def untrack() -> None:
        for uid in idless:
            await manager.undeploy_resource(uid, force_remove=True)

    sdk_logger = logging.getLogger(sdk.ServerlessResource.__module__)
    quiet = _BelowError()
    sdk_logger.addFilter(quiet)
    try:
        _run_coroutine(untrack())
    finally:
        sdk_logger.removeFilter(quiet)
    left = sorted(manager.list_all_resources())
    if left:
        raise DeployError(f"runpod-flash still tracks {', '.join(left)}; it could reuse them")


class _BelowError(logging.Filter):
    """Drops every record below ERROR (the SDK's expected "cannot undeploy" warning)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


#: What to install for deploys: the extra that brings runpod-flash (and runpod with it).
DEPLOY_EXTRA_HINT = "pip install 'flashfsm[deploy]'"


def _missing_sdk(exc: ImportError) -> str:
    return f"deploying needs runpod-flash: {DEPLOY_EXTRA_HINT} ({exc})"


def require_sdk() -> None:
    """Raise `ImportError` naming the extra to install when runpod-flash is missing.

    Cheap (no import): callers check before anything is provisioned or recorded.
    """
    import importlib.util

    for module in ("runpod_flash", "runpod"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing = ImportError(f"No module named {module!r}", name=module)
            raise ImportError(_missing_sdk(missing), name=module)


def load_sdk() -> SimpleNamespace:
    """Import runpod-flash now (from a temporary directory) and return its pieces.

    Deploys import it on first use; call this to pay the import (about 2 s) up front.
    Its hosts (`RUNPOD_API_BASE_URL`, `RUNPOD_REST_API_URL`, …) are read at this import.
    """
    with SDK_LOCK:
        if _sdk is not None:
            return _sdk
        saved_cwd = os.getcwd()
        workdir = tempfile.mkdtemp(prefix="flashfsm-flash-")
        try:
            os.chdir(workdir)
            return _load_sdk()
        finally:
            with contextlib.suppress(OSError):
                os.chdir(saved_cwd)
            shutil.rmtree(workdir, ignore_errors=True)


def _load_sdk() -> SimpleNamespace:
    """Import runpod-flash once (the caller holds `SDK_LOCK`), undoing its logging setup."""
    global _sdk
    if _sdk is not None:
        return _sdk
    root = logging.getLogger()
    saved_level = root.level
    saved_handlers = list(root.handlers)
    saved_filters = {id(h): list(h.filters) for h in saved_handlers}
    saved_levels = {name: logging.getLogger(name).level for name in _SDK_QUIET_LOGGERS}
    try:
        # Submodules, not the package's lazy attributes: those print a sunset FutureWarning
        # that this module's users cannot act on (the SDK is swapped here, in one file).
        import runpod
        from runpod_flash.core.resources.datacenter import DataCenter
        from runpod_flash.core.resources.gpu import GpuGroup, GpuType
        from runpod_flash.core.resources.live_serverless import LiveServerless
        from runpod_flash.core.resources.network_volume import NetworkVolume
        from runpod_flash.core.resources.resource_manager import ResourceManager
        from runpod_flash.core.resources.serverless import (
            ServerlessResource,
            ServerlessScalerType,
        )
        from runpod_flash.endpoint import Endpoint
    except ImportError as exc:
        raise ImportError(_missing_sdk(exc), name=exc.name) from exc
    finally:
        for handler in list(root.handlers):
            if handler not in saved_handlers:
                root.removeHandler(handler)
                with contextlib.suppress(Exception):
                    handler.close()
        for handler in saved_handlers:
            handler.filters[:] = saved_filters[id(handler)]
        root.setLevel(saved_level)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
    _sdk = SimpleNamespace(
        runpod=runpod,
        DataCenter=DataCenter,
        GpuGroup=GpuGroup,
        GpuType=GpuType,
        NetworkVolume=NetworkVolume,
        ResourceManager=ResourceManager,
        LiveServerless=LiveServerless,
        ServerlessResource=ServerlessResource,
        ServerlessScalerType=ServerlessScalerType,
        Endpoint=Endpoint,  # not used to deploy: the front door whose defaults we override
    )
    return _sdk
