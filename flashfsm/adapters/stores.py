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
- Any other scheme is a plug-in's (`SCHEMES`, a `StoreSchemes`: the one registry of
  schemes). A package registers its backend by an entry point of the group
  `flashfsm.stores` (`ENTRY_POINT_GROUP`): the entry point's name is the scheme, its value
  `module:opener`, an `Opener` — `opener(url, *, read_only)` returning the store. Every
  process finds it, a spawned one too. The entry points are read lazily and once: never at
  import, never for a built-in scheme, only when a scheme that is not built in is first
  looked up (the plug-in's module is imported when its scheme is first opened). A program
  or a test may register a scheme in its own process in the same registry
  (`SCHEMES["mine"] = opener`). A scheme registered twice (two entry points, or an entry
  point and a registration in process), an entry point naming a built-in scheme, and a
  plug-in that fails to import are one-line `ValueError`s naming the scheme and the entry
  point. Whatever an opener returns is checked against the store contract (`check_store`).

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
import importlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from flashfsm.adapters.urls import display_url, in_range, option_range, path_url, url_path
from flashfsm.errors import message
from flashfsm.events.codec import require_checksums
from flashfsm.events.store import EventStore, check_store

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

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


class Opener(Protocol):
    """What opens a store from its URL: the whole URL, and whether to open it only to read
    it (`read_only`, passed by keyword). The built-in schemes' openers are of this shape,
    and so is a plug-in's (`SCHEMES`)."""

    def __call__(self, url: str, *, read_only: bool) -> EventStore:
        """A store on what `url` names; `read_only=True` creates and changes nothing."""
        ...


#: The entry-point group whose entry points register store URL schemes: each one's name is
#: a scheme, its value `module:opener` an `Opener`.
ENTRY_POINT_GROUP = "flashfsm.stores"

_SCHEME_NAME = re.compile(r"[a-z][a-z0-9+.-]*")


def _named(entry: EntryPoint) -> str:
    """An entry point as its distribution declares it: `name = value (distribution)`."""
    dist = getattr(entry, "dist", None)
    return f"{entry.name} = {entry.value}" + (f" ({dist.name})" if dist is not None else "")


class StoreSchemes(MutableMapping[str, Opener]):
    """Store URL scheme -> its `Opener`: the one registry `open_store` looks a scheme up in.

    It is fed three ways, and a scheme comes from exactly one of them:

    - built in: `memory`, `sqlite`, `jsonl`, `postgresql`, `postgres` (never replaced);
    - registered in this process: `SCHEMES["mine"] = opener` (`del SCHEMES["mine"]`
      forgets it);
    - a plug-in, by entry point: a distribution's entry point of the group `flashfsm.stores`
      (`ENTRY_POINT_GROUP`), its name the scheme and its value `module:opener`. Every
      process that opens the URL finds it, a spawned one too.

    The entry points are read lazily, never at import and never for a built-in scheme: the
    first time a scheme that is neither built in nor registered is looked up (or one is
    registered), once; a plug-in's module is imported when its scheme is first opened.
    Errors are one-line `ValueError`s: an entry point naming a built-in scheme, two naming
    one scheme (or one naming a scheme also registered in process), a name that is not a
    URL scheme, a plug-in whose import fails or whose value is not callable.
    `refresh()` forgets what was read (a distribution installed while the process runs).
    """

    def __init__(self, built_in: Mapping[str, Opener]) -> None:
        self._built_in = dict(built_in)
        self._registered: dict[str, Opener] = {}
        self._group: dict[str, list[EntryPoint]] | None = None  # (read once, lazily)
        self._loaded: dict[str, Opener] = {}
        self._lock = threading.RLock()

    @property
    def built_in(self) -> frozenset[str]:
        """The built-in schemes."""
        return frozenset(self._built_in)

    def __getitem__(self, scheme: str) -> Opener:
        opener = self._built_in.get(scheme) or self._registered.get(scheme)
        if opener is not None:
            return opener
        with self._lock:
            if scheme not in self._loaded:
                entries = self._entry_points().get(scheme)
                if entries is None:
                    raise KeyError(scheme)
                self._loaded[scheme] = self._load(scheme, entries[0])
            return self._loaded[scheme]

    def __setitem__(self, scheme: str, opener: Opener) -> None:
        if scheme in self._built_in:
            raise ValueError(
                f"store URL scheme {scheme!r} is built in: register the backend under a "
                "scheme of its own"
            )
        with self._lock:
            held = self._registered.get(scheme)
            if held is not None and held is not opener:
                raise ValueError(
                    f"store URL scheme {scheme!r} is registered twice in this process "
                    f"({held!r}, then {opener!r}): del SCHEMES[{scheme!r}] first"
                )
            entries = self._entry_points().get(scheme)
            if entries:
                raise ValueError(
                    f"store URL scheme {scheme!r} is registered twice: in this process and "
                    f"by the entry point {_named(entries[0])} of group {ENTRY_POINT_GROUP!r}"
                )
            self._registered[scheme] = opener

    def __delitem__(self, scheme: str) -> None:
        if scheme in self._built_in:
            raise ValueError(f"store URL scheme {scheme!r} is built in: it cannot be removed")
        with self._lock:
            del self._registered[scheme]

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            names = [*self._built_in, *self._registered, *self._entry_points()]
        return iter(dict.fromkeys(names))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def refresh(self) -> None:
        """Forget the entry points read and the plug-ins loaded: the next lookup reads
        them anew (after a distribution was installed or removed in a running process)."""
        with self._lock:
            self._group = None
            self._loaded.clear()
        importlib.invalidate_caches()

    def _entry_points(self) -> dict[str, list[EntryPoint]]:
        """The group's entry points by scheme, read once and checked whole each time."""
        if self._group is None:
            from importlib.metadata import entry_points

            group: dict[str, list[EntryPoint]] = {}
            for entry in entry_points(group=ENTRY_POINT_GROUP):
                same = group.setdefault(entry.name, [])
                if all(e.value != entry.value for e in same):  # (one package seen twice)
                    same.append(entry)
            self._group = group
        for scheme, entries in self._group.items():
            where = f"the entry point {_named(entries[0])} of group {ENTRY_POINT_GROUP!r}"
            if scheme in self._built_in:
                raise ValueError(f"{where} shadows the built-in store URL scheme {scheme!r}")
            if not _SCHEME_NAME.fullmatch(scheme):
                raise ValueError(f"{where} names no URL scheme (lowercase: {scheme.lower()!r})")
            if len(entries) > 1:
                raise ValueError(
                    f"store URL scheme {scheme!r} is registered twice, by the entry points "
                    f"{' and '.join(_named(e) for e in entries)} of group {ENTRY_POINT_GROUP!r}"
                )
            if scheme in self._registered:
                raise ValueError(
                    f"store URL scheme {scheme!r} is registered twice: in this process and "
                    f"by {where}"
                )
        return self._group

    @staticmethod
    def _load(scheme: str, entry: EntryPoint) -> Opener:
        """Import a plug-in's opener: any failure is one line naming the scheme and the
        entry point (a plug-in that cannot load is a configuration error, not a crash)."""
        where = f"store URL scheme {scheme!r}: the entry point {_named(entry)}"
        try:
            opener = entry.load()
        except Exception as exc:
            why = f"{type(exc).__name__}: {message(exc)}"
            raise ValueError(f"{where} failed to load: {why}") from exc
        if not callable(opener):
            raise ValueError(f"{where} is not callable: {type(opener).__name__}")
        return cast(Opener, opener)


#: Store URL scheme -> the `Opener` of its store: the built-in schemes, those registered in
#: this process and the plug-ins' (see `StoreSchemes`). `open_store` checks what an opener
#: returns.
SCHEMES = StoreSchemes(
    {
        "memory": _memory,
        "sqlite": _sqlite,
        "jsonl": _jsonl,
        "postgresql": _postgres,
        "postgres": _postgres,
    }
)


def open_store(url: str, *, read_only: bool = False) -> EventStore:
    """The store a URL names (see the module docstring); an unknown scheme is a `ValueError`.

    `read_only=True` creates and changes nothing: a missing store is `StoreNotFound`. A
    scheme that is not built in is looked up among those registered in this process and
    the plug-ins' entry points (`SCHEMES`). The store is checked against the declared
    contract once, here (`check_store`: a backend that breaks it is a
    `StoreContractError`, and it is closed).
    """
    scheme = urlsplit(url).scheme
    if not scheme:  # a bare path (no plug-in is looked up for it)
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES.built_in))
        raise ValueError(
            f"{display_url(url)!r} is not a store URL: a file is sqlite:///path/events.db, "
            f"a directory of JSONL files jsonl:///path (known: {known})"
        )
    opener = SCHEMES.get(scheme)
    if opener is None:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise ValueError(f"unknown store URL scheme {scheme!r} (known: {known})")
    store = opener(url, read_only=read_only)
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
