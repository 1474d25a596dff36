"""Hugging Face Hub readers for the worker's heartbeat and failure artifacts.

Workers write `{phase}/{run_id}/seed{seed}/heartbeat.json` and `error_{phase}.txt` /
`console_{phase}.txt` to a dataset repo. These readers fetch them with
`huggingface_hub.hf_hub_download(..., force_download=True)`; `HF_ENDPOINT` points the client at
another server (the bundled simulator in tests).

Every reader is rate-limited (`min_interval_s` between downloads; `force=True` bypasses the
gate), thread-safe, and never raises: any failure — the file not there yet, the network, a
bad token — reads as None. The token comes from `HF_TOKEN` at call time and never appears in
anything a reader returns or logs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger("flashfsm.hub")

TextReader = Callable[..., str | None]
ARTIFACT_TAIL = 4000  # characters kept from each failure artifact


def make_hf_text_reader(
    hf_repo: str,
    path_in_repo: str,
    min_interval_s: float = 45.0,
    *,
    clock: Callable[[], float] = time.monotonic,
    cache_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
) -> TextReader:
    """A reader `read(force=False) -> str | None` of one text file of a dataset repo.

    `endpoint` is the Hub's URL; by default `HF_ENDPOINT` as it is when the read happens
    (huggingface_hub itself reads it once, at import).
    """
    lock = threading.Lock()
    last: list[float | None] = [None]

    def read(force: bool = False) -> str | None:
        if not hf_repo:
            return None
        with lock:
            now = clock()
            if not force and last[0] is not None and now - last[0] < min_interval_s:
                return None
            last[0] = now
        try:
            from huggingface_hub import hf_hub_download

            local = hf_hub_download(
                hf_repo,
                path_in_repo,
                repo_type="dataset",
                token=os.environ.get("HF_TOKEN") or None,
                force_download=True,
                cache_dir=cache_dir,
                endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None,
            )
            return Path(local).read_text(encoding="utf-8", errors="replace")
        except Exception as exc:  # the contract: never raise, a failure reads as nothing
            logger.debug("hub read of %s/%s failed: %s", hf_repo, path_in_repo, type(exc).__name__)
            return None

    return read


def make_hf_heartbeat_reader(
    hf_repo: str, prefix: str, min_interval_s: float = 30.0, **options: Any
) -> Callable[..., dict[str, Any] | None]:
    """A reader of `{prefix}/heartbeat.json`: the parsed dict, or None."""
    text_reader = make_hf_text_reader(
        hf_repo, f"{prefix}/heartbeat.json", min_interval_s, **options
    )

    def read(force: bool = False) -> dict[str, Any] | None:
        raw = text_reader(force=force)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    return read


def make_hf_failure_detail_reader(
    hf_repo: str, prefix: str, phase: str, min_interval_s: float = 45.0, **options: Any
) -> TextReader:
    """A reader of the worker's `error_{phase}.txt` and `console_{phase}.txt` tails."""
    names = (f"error_{phase}.txt", f"console_{phase}.txt")
    readers = [
        (name, make_hf_text_reader(hf_repo, f"{prefix}/{name}", min_interval_s, **options))
        for name in names
    ]

    def read(force: bool = False) -> str | None:
        parts = []
        for name, reader in readers:
            text = reader(force=force)
            if text:
                parts.append(f"--- {name} ---\n{text[-ARTIFACT_TAIL:]}")
        return "\n".join(parts) if parts else None

    return read


def heartbeat_prefix(phase: str, run_id: str, seed: int) -> str:
    """Where a worker writes its heartbeat and artifacts in the dataset repo."""
    return f"{phase}/{run_id}/seed{int(seed)}"
