"""What a deploy is asked and what it answers, as plain data: no runpod-flash here.

`flashfsm.adapters.flash_deploy` deploys an endpoint with runpod-flash (the only module
that imports it); this module holds the SDK-free half it works with: the `DeployRequest`
(what to deploy, validated before anything reaches the SDK), the idle timeout's default and
range (`DEFAULT_IDLE_TIMEOUT_S`, `IDLE_TIMEOUT_RANGE_S`, `check_idle_timeout`), the friendly
GPU classes (`GPU_CLASSES`, `gpu_key`), the RunPod accounts a deploy may use (`KeyPool`),
the weight cache's volume names, what a deploy returns (`DeployedEndpoint`) and the error it
raises (`DeployError`). `flash_deploy` re-exports every public name here, so
`flashfsm.adapters.flash_deploy` still names them all; this module imports nothing of it.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from flashfsm.events.errors import FlashFsmError
from flashfsm.redact import redact, register_secrets

DEFAULT_EXECUTION_TIMEOUT_MS = 24 * 3600 * 1000
DEFAULT_WEIGHT_CACHE_GB = 100
#: The idle timeout flashfsm sets on every endpoint it deploys, in seconds: how long a
#: worker stays up after its job, billed, waiting for another. A training attempt is one
#: job on an endpoint of its own, so idle time after it is pure waste; 5 s is RunPod's own
#: console default (runpod-flash's `Endpoint` would set 60 s). The one place for it.
DEFAULT_IDLE_TIMEOUT_S = 5
#: RunPod's range for an endpoint's idle timeout, in whole seconds (lowest, highest).
IDLE_TIMEOUT_RANGE_S = (1, 3600)

#: Friendly GPU class -> (runpod-flash enum, member name). Keys are compared after
#: `gpu_key` (upper case, no spaces, dashes or underscores). A class names a pool
#: (`GpuGroup`) when RunPod sells several cards under it, so the job lands on any of them.
GPU_CLASSES: dict[str, tuple[str, str]] = {
    "ANY": ("GpuGroup", "ANY"),
    "H100": ("GpuGroup", "ADA_80_PRO"),
    "H10080GB": ("GpuGroup", "ADA_80_PRO"),
    "H100SXM": ("GpuType", "NVIDIA_H100_80GB_HBM3"),
    "H200": ("GpuGroup", "HOPPER_141"),
    "B200": ("GpuGroup", "BLACKWELL_180"),
    "A100": ("GpuGroup", "AMPERE_80"),
    "A10080GB": ("GpuGroup", "AMPERE_80"),
    "A100PCIE": ("GpuType", "NVIDIA_A100_80GB_PCIe"),
    "A100SXM": ("GpuType", "NVIDIA_A100_SXM4_80GB"),
    "A40": ("GpuType", "NVIDIA_A40"),
    "A6000": ("GpuType", "NVIDIA_RTX_A6000"),
    "RTXA6000": ("GpuType", "NVIDIA_RTX_A6000"),
    "A5000": ("GpuType", "NVIDIA_RTX_A5000"),
    "RTXA5000": ("GpuType", "NVIDIA_RTX_A5000"),
    "L4": ("GpuType", "NVIDIA_L4"),
    "L40": ("GpuGroup", "ADA_48_PRO"),
    "L40S": ("GpuGroup", "ADA_48_PRO"),
    "RTX6000ADA": ("GpuType", "NVIDIA_RTX_6000_ADA_GENERATION"),
    "RTX3090": ("GpuType", "NVIDIA_GEFORCE_RTX_3090"),
    "RTX4090": ("GpuGroup", "ADA_24"),
    "RTX5090": ("GpuGroup", "ADA_32_PRO"),
    "RTXPRO6000": ("GpuGroup", "BLACKWELL_96"),
}


class DeployError(FlashFsmError):
    """A deploy gave up: the worker quota on every account, or another error.

    `error_class` names the underlying error's class; `quota` is True when every account's
    worker quota refused. The message is redacted and never holds a key.
    """

    def __init__(self, message: str, *, error_class: str = "DeployError", quota: bool = False):
        super().__init__(redact(message) or message)
        self.error_class = error_class
        self.quota = quota


def check_idle_timeout(value: object, what: str = "idle_timeout_s") -> int:
    """`value` as an endpoint idle timeout: whole seconds in RunPod's range, 1 to 3600.

    An integer, or a float with no fraction (5.0 is 5). A bool, a string, NaN, an
    infinity, a fraction or a value out of range raises `ValueError` with one line
    naming `what` and the value.
    """
    low, high = IDLE_TIMEOUT_RANGE_S
    whole = f"{what} must be a whole number of seconds from {low} to {high}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{whole}, not {value!r}")
    if isinstance(value, numbers.Integral):
        seconds = int(value)
    else:
        number = float(value)
        if not math.isfinite(number) or not number.is_integer():
            raise ValueError(f"{whole}, not {value!r}")
        seconds = int(number)
    if not low <= seconds <= high:
        raise ValueError(f"{whole} (RunPod's range), not {value!r}")
    return seconds


def gpu_key(name: str) -> str:
    """A GPU class name reduced for lookup: `"a100-80gb"` and `"A100 80GB"` are the same."""
    return re.sub(r"[\s_\-]+", "", name).upper()


# ----------------------------------------------------------------------- accounts


class KeyPool:
    """The RunPod accounts a deploy may use: one API key each, and which one is active.

    `RUNPOD_API_KEY` may hold several comma-separated keys (`KeyPool.from_env()`). Accounts
    are named by index everywhere outside this object; its repr shows no key. The active
    account is where the next deploy starts; a quota failover moves it, so later deploys
    start on the account that last had room. Every key is registered for redaction.
    """

    def __init__(self, keys: Sequence[str], *, active: int = 0):
        cleaned = [k.strip() for k in keys if isinstance(k, str) and k.strip()]
        if not cleaned:
            raise ValueError("a key pool needs at least one RunPod API key")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("a key pool lists the same key twice")
        register_secrets(*cleaned)
        self._keys = tuple(cleaned)
        self._lock = threading.Lock()
        self._active = 0
        self.activate(active)

    @classmethod
    def from_env(cls, var: str = "RUNPOD_API_KEY") -> KeyPool:
        """The pool in `$RUNPOD_API_KEY` (comma-separated keys, first one active)."""
        raw = os.environ.get(var) or ""
        try:
            return cls(raw.split(","))
        except ValueError:
            raise ValueError(f"{var} holds no RunPod API key") from None

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"KeyPool({len(self._keys)} accounts, active={self.active})"

    @property
    def active(self) -> int:
        """The index of the account the next deploy starts on."""
        with self._lock:
            return self._active

    def activate(self, account: int) -> None:
        """Make `account` the active one."""
        if not isinstance(account, int) or not 0 <= account < len(self._keys):
            raise ValueError(f"no account {account!r} in a pool of {len(self._keys)}")
        with self._lock:
            self._active = account

    def key(self, account: int | None = None) -> str:
        """The key of `account` (default: the active one). Never log or record it."""
        return self._keys[self.active if account is None else account]


# ----------------------------------------------------------------------- the request


class DeployRequest(BaseModel):
    """What to deploy: one serverless training endpoint, as plain data.

    `name` is the bare endpoint name (runpod-flash registers it as `live-<name>`).
    `image` deploys a baked worker image; without one the Flash runtime image is used
    and `dependencies` / `system_dependencies` are what the job installs at boot (they
    travel in the job input, see `build_function_input`). `weight_cache` is the base
    name of the weight cache (None: no cache): one network volume of `weight_cache_gb`
    per volume-capable datacenter, named `<base>-<dc>`. `disk_gb` raises the container
    disk (never lowers it below the SDK's default). `idle_timeout_s` is how long a worker
    stays up, billed, after its job (`check_idle_timeout`: whole seconds, 1 to 3600;
    default `DEFAULT_IDLE_TIMEOUT_S`). `attempt` is recorded in each event.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=150)
    gpu_class: str = Field(min_length=1, max_length=100)
    attempt: int = Field(0, ge=0)
    execution_timeout_ms: int = Field(DEFAULT_EXECUTION_TIMEOUT_MS, gt=0)
    idle_timeout_s: int = Field(
        DEFAULT_IDLE_TIMEOUT_S, ge=IDLE_TIMEOUT_RANGE_S[0], le=IDLE_TIMEOUT_RANGE_S[1]
    )
    image: str | None = None
    dependencies: tuple[str, ...] = ()
    system_dependencies: tuple[str, ...] = ()
    weight_cache: str | None = None
    weight_cache_gb: int = DEFAULT_WEIGHT_CACHE_GB
    disk_gb: int | None = Field(None, ge=0)
    workers: tuple[int, int] = (0, 1)
    min_cuda_version: str | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError("an endpoint name is letters, digits, '.', '_' and '-'")
        return value

    @field_validator("image", "weight_cache")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if isinstance(value, str) else value

    @field_validator("idle_timeout_s", mode="before")
    @classmethod
    def _whole_seconds(cls, value: object) -> int:
        return check_idle_timeout(value)

    @model_validator(mode="after")
    def _workers_in_order(self) -> DeployRequest:
        low, high = self.workers
        if low < 0 or high < low:
            raise ValueError(f"workers must be (min, max) with 0 <= min <= max, not {self.workers}")
        return self

    @property
    def baked_image(self) -> bool:
        """True when the endpoint runs a baked worker image (the job input is the payload)."""
        return self.image is not None

    @property
    def protected_names(self) -> set[str]:
        """This endpoint's name in both forms, which a quota sweep must never delete."""
        return {self.name, f"live-{self.name}"}


@dataclass(frozen=True)
class DeployedEndpoint:
    """A deployed endpoint: its id, bare name, account index, cache volumes, disk and the
    idle timeout set on it (None: a deployer that does not say; `deploy_endpoint` does)."""

    endpoint_id: str
    name: str
    account: int = 0
    volumes: tuple[str, ...] = ()
    disk_gb: int | None = None
    registered_name: str = ""  # the name RunPod knows (runpod-flash's `live-` form)
    idle_timeout_s: int | None = None  # seconds a worker stays up, billed, after its job

    @property
    def endpoint_name(self) -> str:
        """The bare name (the spelling `flashfsm.runs` expects)."""
        return self.name


def weight_cache_volume_name(base: str, datacenter: str) -> str:
    """The physical volume of cache `base` in `datacenter`: `<base>-<dc lower-cased>`.

    The datacenter must be in the name: runpod-flash keys a volume by name alone, so two
    same-named volumes in different datacenters would collide in its registry.
    """
    return f"{base}-{datacenter.lower()}"
