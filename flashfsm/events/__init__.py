"""Events: the immutable record of every observation and verdict (pure: no I/O, no clock).

The recorded format: the models, their codec, the grace policy a job is judged by, the
failure kinds, outside text (masked, then capped) and the store protocol.

Each name below is loaded from its module on first use (PEP 562), so importing one module
of the package (`flashfsm.events.text`, which `flashfsm` itself imports to mask secrets)
does not build every event model.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flashfsm.events.codec import decode, decode_many, encode, register_upcaster, upcast
    from flashfsm.events.errors import (
        ChecksumError,
        ConcurrencyError,
        CorruptLogError,
        DuplicateEventError,
        EventDecodeError,
        FlashFsmError,
        StoreError,
        StoreFullError,
        UnknownEventError,
    )
    from flashfsm.events.failures import FailureKind
    from flashfsm.events.models import (
        EVENT_TYPES,
        Concluded,
        Event,
        EventBase,
        FailureDetailObserved,
        HealthObserved,
        HealthProbeFailed,
        HeartbeatObserved,
        JobCounts,
        JobSubmitted,
        StatusFetchFailed,
        StatusObserved,
        WatchStarted,
        WorkerCounts,
    )
    from flashfsm.events.policy import GracePolicy, stall_kwargs
    from flashfsm.events.store import EventStore
    from flashfsm.events.text import Outside, OutsideTail

#: Where each name lives (a module of this package).
_HOMES: dict[str, str] = {
    **dict.fromkeys(("decode", "decode_many", "encode", "register_upcaster", "upcast"), "codec"),
    **dict.fromkeys(
        (
            "ChecksumError",
            "ConcurrencyError",
            "CorruptLogError",
            "DuplicateEventError",
            "EventDecodeError",
            "FlashFsmError",
            "StoreError",
            "StoreFullError",
            "UnknownEventError",
        ),
        "errors",
    ),
    "FailureKind": "failures",
    **dict.fromkeys(
        (
            "EVENT_TYPES",
            "Concluded",
            "Event",
            "EventBase",
            "FailureDetailObserved",
            "HealthObserved",
            "HealthProbeFailed",
            "HeartbeatObserved",
            "JobCounts",
            "JobSubmitted",
            "StatusFetchFailed",
            "StatusObserved",
            "WatchStarted",
            "WorkerCounts",
        ),
        "models",
    ),
    **dict.fromkeys(("GracePolicy", "stall_kwargs"), "policy"),
    "EventStore": "store",
    **dict.fromkeys(("Outside", "OutsideTail"), "text"),
}


def _module(home: str) -> ModuleType:
    """One module of this package, imported (by name: the pure core imports no importlib)."""
    if home == "codec":
        from flashfsm.events import codec as module
    elif home == "errors":
        from flashfsm.events import errors as module
    elif home == "failures":
        from flashfsm.events import failures as module
    elif home == "models":
        from flashfsm.events import models as module
    elif home == "policy":
        from flashfsm.events import policy as module
    elif home == "store":
        from flashfsm.events import store as module
    else:
        from flashfsm.events import text as module
    return module


def __getattr__(name: str) -> Any:
    """A name of the package, loaded from its module on first use and kept here after."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The package's names, those not loaded yet included."""
    return sorted({*globals(), *__all__})


__all__ = [
    "EVENT_TYPES",
    "ChecksumError",
    "Concluded",
    "ConcurrencyError",
    "CorruptLogError",
    "DuplicateEventError",
    "Event",
    "EventBase",
    "EventDecodeError",
    "EventStore",
    "FailureDetailObserved",
    "FailureKind",
    "FlashFsmError",
    "GracePolicy",
    "HealthObserved",
    "HealthProbeFailed",
    "HeartbeatObserved",
    "JobCounts",
    "JobSubmitted",
    "Outside",
    "OutsideTail",
    "StatusFetchFailed",
    "StatusObserved",
    "StoreError",
    "StoreFullError",
    "UnknownEventError",
    "WatchStarted",
    "WorkerCounts",
    "decode",
    "decode_many",
    "encode",
    "register_upcaster",
    "stall_kwargs",
    "upcast",
]
