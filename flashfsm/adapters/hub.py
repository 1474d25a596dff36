"""Hugging Face Hub readers for the worker's heartbeat and failure artifacts.

Workers write `{phase}/{run_id}/seed{seed}/heartbeat.json` and `error_{phase}.txt` /
`console_{phase}.txt` to a dataset repo. These readers fetch them with
`huggingface_hub.hf_hub_download(..., force_download=True)`; `HF_ENDPOINT` points the client at
another server (the bundled simulator in tests).

A reader can be rate-limited (`min_interval_s` between downloads; `force=True` bypasses the
gate) and is thread-safe. The heartbeat reader's gate is off by default: the job core paces
regular heartbeat reads from the log (`GracePolicy.heartbeat_every_s`), and a gate kept in
process memory is state a reattached watcher does not have. A failure that says the file is
not there or cannot be had — not written yet (404), a bad token (401/403), a body that is
not the file — reads as None. A failure a retry may fix — a 5xx or 429 answer, a timeout, a
dropped connection — reads as None too, except from the heartbeat reader, which raises
`TransientReadError` for it: the forced heartbeat read after a terminal failure decides
whether the job is retried, and a watch reads it again rather than judge on a Hub hiccup.
The token comes from `HF_TOKEN` at
call time and never appears in anything a reader returns, raises or logs.

Bounds. Every read is capped (`max_bytes`: `MAX_HEARTBEAT_BYTES` for the heartbeat,
`MAX_ARTIFACT_BYTES` for failure artifacts and logs): the file's size is asked of the Hub
first (a metadata-only `dry_run`) and an oversized file is not downloaded at all, and the
downloaded file is read at most `max_bytes + 1` bytes whatever the metadata said. A file over
the cap reads as None from a text reader; the heartbeat reader raises `HubFileTooLarge`
(which a watch takes as no data). Each download goes to a fresh private directory (0700,
files 0600) under `cache_dir` (or the system's temporary directory) that is removed as
soon as the bytes are read: worker logs are not redacted, so none is left on disk.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from flashfsm.errors import TransientReadError
from flashfsm.events.models import HubLocation

logger = logging.getLogger("flashfsm.hub")

TextReader = Callable[..., str | None]
ARTIFACT_TAIL = 4000  # characters kept from each failure artifact
#: The largest heartbeat file read (a heartbeat is a few hundred bytes of JSON).
MAX_HEARTBEAT_BYTES = 256 * 1024
#: The largest failure artifact or log read (only its last `ARTIFACT_TAIL` characters are kept).
MAX_ARTIFACT_BYTES = 4 * 1024 * 1024


class HubFileTooLarge(ValueError):
    """A Hub file larger than the reader's cap; it was not read (nor, if the Hub said so,
    downloaded)."""


#: HTTP answers a retry may fix (with every 5xx): timeout, too early, too many requests.
TRANSIENT_HTTP = frozenset({408, 425, 429})
#: Exception classes (by name, anywhere in an error's class hierarchy) of a transport
#: failure: the stdlib's, httpx's and requests' (huggingface_hub has used both clients).
TRANSPORT_ERRORS = frozenset(
    {
        "TimeoutError",
        "ConnectionError",
        "TimeoutException",
        "NetworkError",
        "RemoteProtocolError",
        "Timeout",
    }
)


def transient_failure(exc: BaseException) -> tuple[bool, int | None]:
    """(a retry may fix it, the HTTP status if any) for a failed Hub download.

    huggingface_hub wraps the cause (a forced download's HEAD failure becomes a
    `ValueError`), so the chain of causes is walked: the first HTTP answer found decides
    (5xx, 408, 425, 429 are transient; 404, 401, 403 are not), else a transport error
    anywhere in it is transient.
    """
    transport = False
    for cause in _causes(exc):
        code = getattr(getattr(cause, "response", None), "status_code", None)
        if isinstance(code, int) and not isinstance(code, bool):
            return code >= 500 or code in TRANSIENT_HTTP, code
        if any(cls.__name__ in TRANSPORT_ERRORS for cls in type(cause).__mro__):
            transport = True
    return transport, None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then its cause (or context), and so on: at most 32, never a cycle twice."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen and len(seen) < 32:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or cause.__context__


def make_hf_text_reader(
    hf_repo: str,
    path_in_repo: str,
    min_interval_s: float = 45.0,
    *,
    clock: Callable[[], float] = time.monotonic,
    cache_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    raise_transient: bool = False,
    max_bytes: int = MAX_ARTIFACT_BYTES,
    raise_too_large: bool = False,
) -> TextReader:
    """A reader `read(force=False) -> str | None` of one text file of a dataset repo.

    `endpoint` is the Hub's URL; by default `HF_ENDPOINT` as it is when the read happens
    (huggingface_hub itself reads it once, at import). With `raise_transient`, a failure a
    retry may fix raises `TransientReadError` instead of reading as None. A file over
    `max_bytes` reads as None (with `raise_too_large`, raises `HubFileTooLarge`). Downloads
    go to a private directory under `cache_dir` that is removed once read.
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
            return _download_text(hf_repo, path_in_repo, cache_dir, endpoint, max_bytes)
        except HubFileTooLarge as exc:
            logger.warning("hub read of %s/%s refused: %s", hf_repo, path_in_repo, exc)
            if raise_too_large:
                raise
            return None
        except Exception as exc:  # the contract: a failure reads as nothing, or is transient
            transient, code = transient_failure(exc)
            logger.debug(
                "hub read of %s/%s failed: %s%s",
                hf_repo,
                path_in_repo,
                type(exc).__name__,
                " (transient)" if transient else "",
            )
            if not (transient and raise_transient):
                return None
            raise TransientReadError(
                f"hub read of {path_in_repo} failed: {_cause_name(exc)}", status_code=code
            ) from None

    return read


def _download_text(
    hf_repo: str,
    path_in_repo: str,
    cache_dir: str | os.PathLike[str] | None,
    endpoint: str | None,
    max_bytes: int,
) -> str:
    """Download one file into a private directory, read at most `max_bytes`, remove it all."""
    from huggingface_hub import hf_hub_download

    if cache_dir is not None:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    private = tempfile.mkdtemp(prefix="flashfsm-hub-", dir=cache_dir)  # mode 0700
    options: dict[str, Any] = {
        "repo_type": "dataset",
        "token": os.environ.get("HF_TOKEN") or None,
        "force_download": True,
        "cache_dir": private,
        "endpoint": endpoint or os.environ.get("HF_ENDPOINT") or None,
    }
    try:
        info = hf_hub_download(hf_repo, path_in_repo, dry_run=True, **options)
        size = getattr(info, "file_size", None)
        if isinstance(size, int) and size > max_bytes:
            raise HubFileTooLarge(f"{path_in_repo} is {size} bytes, over the {max_bytes} cap")
        local = hf_hub_download(hf_repo, path_in_repo, **options)
        with open(local, "rb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise HubFileTooLarge(f"{path_in_repo} is over the {max_bytes} byte cap")
        return data.decode("utf-8", errors="replace")
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _cause_name(exc: BaseException) -> str:
    """The innermost cause's class name (what failed, without the wrappers' messages)."""
    *_, innermost = _causes(exc)
    return type(innermost).__name__


def make_hf_heartbeat_reader(
    hf_repo: str, prefix: str, min_interval_s: float = 0.0, **options: Any
) -> Callable[..., dict[str, Any] | None]:
    """A reader of `{prefix}/heartbeat.json`: the parsed dict, or None.

    A failure a retry may fix (a 5xx or 429 answer, a timeout, a dropped connection) raises
    `TransientReadError`, so a watch can tell it from a heartbeat that is not there. A file
    over `MAX_HEARTBEAT_BYTES` (or `max_bytes=`) raises `HubFileTooLarge` unread.

    Every call downloads by default: the job core asks for a regular read only every
    `GracePolicy.heartbeat_every_s`, a pace it keeps in the log, so a reattached watcher reads
    on the polls the uninterrupted one would have. A non-zero `min_interval_s` adds this
    reader's own gate on regular reads, which remembers its last read in process memory
    only: a watcher that reattaches after a crash starts with a fresh gate and reads on other
    polls, so progress is seen, and verdicts reached, at other times than without the crash.
    """
    options.setdefault("raise_transient", True)
    options.setdefault("max_bytes", MAX_HEARTBEAT_BYTES)
    options.setdefault("raise_too_large", True)
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


def hub_readers(
    location: HubLocation | None, **options: Any
) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """The heartbeat and failure-detail readers of a job whose worker writes to `location`
    (None: no readers): what a run's attempt, a fleet replica and `poll_job`'s callers read
    the worker's Hub files with. The Hub's URL and token are read from the environment
    (`HF_ENDPOINT`, `HF_TOKEN`) at each read unless `options` say (`endpoint`, `token`,
    `cache_dir`, `clock`: they go to the readers)."""
    if location is None:
        return None, None
    prefix = heartbeat_prefix(location.phase, location.run_id, location.seed)
    return (
        make_hf_heartbeat_reader(location.hf_repo, prefix, **options),
        make_hf_failure_detail_reader(location.hf_repo, prefix, location.phase, **options),
    )
