"""Open an event store from its URL, pick the default one, and move logs between stores.

Store URLs (`open_store`):

- `memory://` – an in-memory store (a new, empty one per call; it takes no option).
- `sqlite:///abs/path/events.db` – a SQLite file; the URL's path is the file path, as in
  `file:` URLs, so three slashes mean an absolute path. `sqlite:////abs/path.db` (the
  SQLAlchemy spelling of an absolute path) names the same file. A relative path has no
  slashes after the colon: `sqlite:events.db`, `sqlite:./logs/events.db` (relative to the
  working directory), `sqlite:~/flashfsm/events.db` (relative to the home directory).
  Query parameters: `durable=false` (see `SqliteStore`), `busy_timeout_s=30`,
  `strict=true` (every event read must carry a checksum; see below), `snapshot_every=100`
  (events between two snapshots of a watched job; `none` writes none).
- `jsonl:///abs/dir`, `jsonl:relative/dir`, `jsonl:~/dir` – a directory of JSONL files,
  one per stream. Query parameters: `fsync=false` (see `JsonlStore`), `strict=true`.
- `postgresql://user@host:5432/db` or `postgres://…` – a PostgreSQL database (needs the
  `postgres` extra). Query parameters `table=`, `pool_size=`, `strict=`, `snapshot_every=`
  and `idle_in_transaction_s=` are the store's own (see `PostgresStore`); every other one
  goes to libpq (`sslmode=require`, `connect_timeout=5`, …).

A numeric option must be a finite number within its range (`STORE_OPTION_RANGES` in
`flashfsm.adapters.urls`: `busy_timeout_s` 1 to 3600 seconds, `idle_in_transaction_s` 0.5
to 86400 seconds, `snapshot_every` a whole number from 1 to 1,000,000, `pool_size` 1 to
1000, libpq's `connect_timeout` 1 to 3600 seconds or 0 for the default); anything else is a
one-line `ValueError` naming the option and its range, before the store is opened or
created. The stores' keywords of the same names take the same ranges (`check_option`).

Every durable store keeps a CRC-32 of each event's bytes and verifies it on every read
(a mismatch is `CorruptLogError`); events written before checksums read unchecked, unless
the store is `strict`.

`open_store(url, read_only=True)` opens a store only to read it: nothing is created or
changed, and a store that does not exist is `StoreNotFound` (a mistyped path is an error,
not a new empty store). `memory://` is always a new empty store.

Characters that are special in URLs are percent-encoded in paths (`%20` for a space).
`default_store_url()` is `$FLASHFSM_STORE` when set, else a SQLite file in the user's data
directory. `copy_streams(src, dst)` copies streams between any two stores keeping stream
names, seqs and event ids (a source given as a URL is opened read-only); copying one
stream into a `jsonl:` store is how a log is exported to one portable file. The source's
checksums are verified as it is read (`strict=True`: every event must carry one), and the
destination stores each event with a fresh checksum of the same bytes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from flashfsm.adapters.urls import display_url, in_range, option_range, path_url, url_path
from flashfsm.events.codec import require_checksums
from flashfsm.events.store import EventStore, check_store

ENV_VAR = "FLASHFSM_STORE"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def _flag(url: str, params: dict[str, str], name: str, default: bool) -> bool:
    value = params.pop(name, None)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"{display_url(url)!r}: {name}={value!r} is not a boolean")


def _number(url: str, params: dict[str, str], name: str, kind: Callable[[str], Any]) -> Any:
    """Pop `name` as a `kind` (int or float) within its `STORE_OPTION_RANGES`; None when it
    is absent, else a one-line `ValueError` naming the option and its range."""
    value = params.pop(name, None)
    if value is None:
        return None
    try:
        number = kind(value) if len(value) <= 32 else None
    except ValueError:
        number = None
    if number is None or not in_range(name, number):
        raise ValueError(f"{display_url(url)!r}: {name}={value[:40]!r} is not {option_range(name)}")
    return number


def _snapshots(url: str, params: dict[str, str]) -> dict[str, Any]:
    """The store keyword for `snapshot_every=N` (or `none`), when the URL gives one."""
    if params.get("snapshot_every", "").lower() in ("none", "off"):
        params.pop("snapshot_every")
        return {"snapshot_every": None}
    every = _number(url, params, "snapshot_every", int)
    return {} if every is None else {"snapshot_every": every}


def _no_more(url: str, params: dict[str, str]) -> None:
    if params:
        raise ValueError(f"{display_url(url)!r}: unknown parameter(s) {', '.join(sorted(params))}")


def _memory(url: str, read_only: bool) -> EventStore:
    from flashfsm.adapters.memory import MemoryStore

    _no_more(url, _query(url))  # (it takes no option: an option given is a typo)
    return MemoryStore()


def _sqlite(url: str, read_only: bool) -> EventStore:
    from flashfsm.adapters.sqlite import SqliteStore

    params = _query(url)
    durable = _flag(url, params, "durable", True)
    busy = _number(url, params, "busy_timeout_s", float)
    strict = _flag(url, params, "strict", False)
    snapshots = _snapshots(url, params)
    _no_more(url, params)
    return SqliteStore(
        url_path(url),
        durable=durable,
        busy_timeout_s=30.0 if busy is None else busy,
        read_only=read_only,
        strict=strict,
        **snapshots,
    )


def _jsonl(url: str, read_only: bool) -> EventStore:
    from flashfsm.adapters.jsonl import JsonlStore

    params = _query(url)
    fsync = _flag(url, params, "fsync", True)
    strict = _flag(url, params, "strict", False)
    _no_more(url, params)
    return JsonlStore(url_path(url), fsync=fsync, read_only=read_only, strict=strict)


def _postgres(url: str, read_only: bool) -> EventStore:
    try:
        from flashfsm.adapters.postgres import PostgresStore
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the postgres store needs psycopg 3: pip install 'flashfsm[postgres]'"
        ) from exc

    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    names = {"table", "pool_size", "strict", "snapshot_every", "idle_in_transaction_s"}
    own = {k: v for k, v in params if k in names}
    rest = [(k, v) for k, v in params if k not in own]
    dsn = urlunsplit(parts._replace(query=urlencode(rest)))
    kwargs: dict[str, Any] = {"read_only": read_only, **_snapshots(url, own)}
    if "table" in own:
        kwargs["table"] = own["table"]
    if "pool_size" in own:
        kwargs["pool_size"] = _number(url, own, "pool_size", int)
    if "strict" in own:
        kwargs["strict"] = _flag(url, {"strict": own["strict"]}, "strict", False)
    if "idle_in_transaction_s" in own:
        kwargs["idle_in_transaction_s"] = _number(url, own, "idle_in_transaction_s", float)
    return PostgresStore(dsn, **kwargs)


#: URL scheme -> factory taking the whole URL and whether to open it read-only (a backend of
#: one's own may register its scheme here: `open_store` then checks what it returns).
SCHEMES: dict[str, Callable[[str, bool], EventStore]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "jsonl": _jsonl,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def open_store(url: str, *, read_only: bool = False) -> EventStore:
    """The store a URL names (see the module docstring); an unknown scheme is a `ValueError`.

    `read_only=True` creates and changes nothing: a missing store is `StoreNotFound`. The
    store is checked against the declared contract once, here (`check_store`: a backend
    registered in `SCHEMES` that breaks it is a `StoreContractError`, and it is closed).
    """
    scheme = urlsplit(url).scheme
    factory = SCHEMES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        if not scheme:  # a bare path
            raise ValueError(
                f"{display_url(url)!r} is not a store URL: a file is sqlite:///path/events.db, "
                f"a directory of JSONL files jsonl:///path (known: {known})"
            )
        raise ValueError(f"unknown store URL scheme {scheme!r} (known: {known})")
    store = factory(url, read_only)
    try:
        check_store(store)
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    return store


def default_store_url() -> str:
    """`$FLASHFSM_STORE`, else `sqlite:///<user data dir>/flashfsm/events.db`."""
    configured = os.environ.get(ENV_VAR, "").strip()
    if configured:
        return configured
    from platformdirs import user_data_dir

    return path_url("sqlite", Path(user_data_dir("flashfsm", appauthor=False)) / "events.db")


def copy_streams(
    src: EventStore | str,
    dst: EventStore | str,
    streams: Iterable[str] | None = None,
    *,
    batch_size: int = 1000,
    strict: bool = False,
) -> dict[str, int]:
    """Copy streams (all of `src`'s by default) into `dst`, keeping names, seqs and ids.

    Resumable: the events `dst` already holds of a stream must be the same ones (same ids,
    in the same order) and only the rest is copied; a stream that has diverged raises
    `ValueError`. An id `dst` holds in another stream raises `DuplicateEventError`.
    Returns how many events were copied per stream. URLs are opened and closed here.

    Every event read (from both stores) has its checksum verified: a damaged event is a
    `CorruptLogError` and nothing after it is copied. `strict=True` also refuses events
    written before checksums.
    """
    source = open_store(src, read_only=True) if isinstance(src, str) else src
    try:
        target = open_store(dst) if isinstance(dst, str) else dst
    except BaseException:
        if isinstance(src, str):
            source.close()
        raise
    copied: dict[str, int] = {}
    try:
        with require_checksums(strict) if strict else contextlib.nullcontext():
            _copy(source, target, streams, batch_size, copied)
    finally:
        if isinstance(src, str):
            source.close()
        if isinstance(dst, str):
            target.close()
    return copied


def _copy(
    source: EventStore,
    target: EventStore,
    streams: Iterable[str] | None,
    batch_size: int,
    copied: dict[str, int],
) -> None:
    """Copy each stream's missing events (see `copy_streams`), counting them in `copied`."""
    for stream in sorted(source.streams()) if streams is None else streams:
        events = source.read(stream)
        have = target.read(stream)
        mine = [e.id for e in events[: len(have)]]
        if [e.id for e in have] != mine:
            raise ValueError(
                f"stream {stream!r}: the destination holds {len(have)} events that are "
                "not the source's first ones; refusing to merge diverged logs"
            )
        rest = events[len(have) :]
        for start in range(0, len(rest), batch_size):
            batch = rest[start : start + batch_size]
            target.append(stream, batch, batch[0].seq)
        copied[stream] = len(rest)
