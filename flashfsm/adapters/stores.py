"""Open an event store from its URL.

`memory://` is an in-memory store (a new one per call). Durable backends register their
schemes in `SCHEMES`.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from flashfsm.events.store import EventStore


def _memory(url: str) -> EventStore:
    from flashfsm.adapters.memory import MemoryStore

    return MemoryStore()


#: URL scheme -> factory taking the whole URL.
SCHEMES: dict[str, Callable[[str], EventStore]] = {"memory": _memory}


def open_store(url: str) -> EventStore:
    """The store a URL names (`memory://`, …); an unknown scheme is a `ValueError`."""
    scheme = urlsplit(url).scheme
    factory = SCHEMES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise ValueError(f"unknown store URL scheme {scheme!r} (known: {known})")
    return factory(url)
