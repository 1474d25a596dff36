"""Names of the things a run creates on RunPod."""

from __future__ import annotations

import hashlib
import re

RUN_SLUG_CAP = 40  # characters of the run id kept in an endpoint name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def endpoint_name(run_id: str, gpu_class: str, seed: int, attempt: int = 0) -> str:
    """The attempt's endpoint name: `flash-<run>-<gpu>-s<seed>`, plus `-r<attempt>` after 0.

    Each attempt gets a fresh endpoint, so a retry never lands back on the host that
    failed. A long run id is cut and given a hash, keeping names short and distinct.
    """
    run = _slug(run_id)
    if len(run) > RUN_SLUG_CAP:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
        run = f"{run[: RUN_SLUG_CAP - 9].rstrip('-')}-{digest}"
    name = f"flash-{run}-{_slug(gpu_class)}-s{int(seed)}"
    return f"{name}-r{int(attempt)}" if attempt else name
