"""A `RunSpec`: what one training run needs, and the checks it passes before any I/O.

The spec (`RunSpec`) is plain, JSON-able data that travels to the worker, so it holds no
secret. Everything that can be checked without the network is checked here, before
anything is provisioned or handed off (`checked_spec`): the worker's dependencies
(`resolve_worker_dependencies`), the function a worker without a baked image runs
(`resolve_entrypoint`), the runtime secrets (`check_secrets`); `build_payload` is what the
worker's training function receives.

It was part of `flashfsm.submit` (the one deploy → submit → watch path, which makes a spec
I/O), which re-exports its public names; this module imports nothing of it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from flashfsm.adapters.flash_deploy import (
    DEFAULT_IDLE_TIMEOUT_S,
    IDLE_TIMEOUT_RANGE_S,
    check_idle_timeout,
)
from flashfsm.redact import redact

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_APT_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+:=~_-]*")
#: A worker's `'module:function'` entrypoint.
ENTRYPOINT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Worker env names submit_run sets itself; a spec or a runtime secret may not.
RESERVED_ENV = frozenset({"RUN_ID", "PHASE", "SEED", "ATTEMPT"})


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
    idle_timeout_s: int = Field(
        DEFAULT_IDLE_TIMEOUT_S,
        ge=IDLE_TIMEOUT_RANGE_S[0],
        le=IDLE_TIMEOUT_RANGE_S[1],
        description="seconds a worker stays up, billed, after its job: whole, 1 to 3600",
    )

    @field_validator("hf_repo", "worker_image", "entrypoint")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return (value.strip() or None) if isinstance(value, str) else value

    @field_validator("idle_timeout_s", mode="before")
    @classmethod
    def _whole_seconds(cls, value: object) -> int:
        return check_idle_timeout(value)

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
    if not ENTRYPOINT.fullmatch(entrypoint):
        raise ValueError(f"entrypoint {entrypoint!r} is not 'module:function'")
    module_name, _, attribute = entrypoint.partition(":")
    function = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(function):
        raise ValueError(f"entrypoint {entrypoint!r} is not a function")
    return function


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


def check_secrets(runtime_secrets: Mapping[str, str] | None) -> dict[str, str]:
    """The runtime secrets, checked (`ValueError`): each name an environment variable name
    that `submit_run` does not set itself, each value a string."""
    secrets = dict(runtime_secrets or {})
    for key, value in secrets.items():
        if not isinstance(key, str) or not _ENV_KEY.fullmatch(key):
            raise ValueError("runtime secret names must be environment variable names")
        if key in RESERVED_ENV:
            raise ValueError(f"{key} is set by submit_run; it cannot be a runtime secret")
        if not isinstance(value, str):
            raise ValueError(f"runtime secret {key} must be a string")
    return secrets


def checked_spec(spec: RunSpec, seed: int) -> WorkerDependencies:
    """The checks a spec passes before anything is provisioned or handed off: the seed is an
    integer, the idle timeout is in RunPod's range (again: a spec copied with an update
    skips its validation), the spec's env holds no known secret, the worker's dependencies
    parse."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    check_idle_timeout(spec.idle_timeout_s, "spec.idle_timeout_s")
    leaked = sorted(k for k, v in spec.env.items() if redact(v) != v)
    if leaked:
        raise ValueError(f"spec env {', '.join(leaked)} holds a secret: use runtime_secrets")
    return resolve_worker_dependencies(spec)
