"""Every name the library makes: RunPod endpoints and the streams of the event log."""

from __future__ import annotations

import hashlib
import re

from flashfsm.events.models import NAME_CAP

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


# --- streams --------------------------------------------------------------------------------
# Every stream the library writes is named here. Stream names must fit an event's `stream`
# field (`STREAM_CAP` characters).

#: The longest stream name a store takes: an event's `stream` field holds at most this many
#: characters (`flashfsm.events.models.NAME_CAP`).
STREAM_CAP = NAME_CAP


def check_stream(name: str, made_from: str = "") -> str:
    """`name`, or a `ValueError` naming `STREAM_CAP` when it is longer (`made_from`: what
    the name was made from, for the message)."""
    if len(name) > STREAM_CAP:
        source = f"{made_from} makes " if made_from else ""
        raise ValueError(
            f"{source}a stream name of {len(name)} characters, over the store's limit of "
            f"{STREAM_CAP}"
        )
    return name


def job_stream(job_id: str) -> str:
    """The stream `poll_job` and the `Supervisor` use for a job when none is given."""
    return f"job-{job_id}"


def attempt_stream(run_id: str, attempt: int, seed: int | None = None) -> str:
    """The job stream of a run's attempt: `job-<run>-s<seed>-a<attempt>` (no `-s` part
    for a run without a seed)."""
    seeded = "" if seed is None else f"-s{int(seed)}"
    return f"job-{run_id}{seeded}-a{int(attempt)}"


def run_stream(run_id: str, seed: int | None = None, attempt: int | None = None) -> str:
    """A run's stream: `run-<run>`, `run-<run>-s<seed>` for a seeded run, and
    `run-<run>-s<seed>-a<attempt>` for the one-attempt run `submit_run` records."""
    name = f"run-{run_id}"
    if seed is not None:
        name += f"-s{int(seed)}"
    if attempt is not None:
        name += f"-a{int(attempt)}"
    return name


def sweeper_stream(account: int | None = None) -> str:
    """The idle sweeper's stream: one per account of a key pool (`sweeper-<index>`, never
    the key), or `sweeper` for a single account."""
    return "sweeper" if account is None else f"sweeper-{int(account)}"
