"""Events: the immutable record of every observation and verdict (pure: no I/O, no clock)."""

from flashfsm.events.codec import decode, decode_many, encode, register_upcaster, upcast
from flashfsm.events.errors import (
    ConcurrencyError,
    CorruptLogError,
    DuplicateEventError,
    EventDecodeError,
    FlashFsmError,
    StoreError,
    UnknownEventError,
)
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
from flashfsm.events.store import EventStore

__all__ = [
    "EVENT_TYPES",
    "Concluded",
    "ConcurrencyError",
    "CorruptLogError",
    "DuplicateEventError",
    "Event",
    "EventBase",
    "EventDecodeError",
    "EventStore",
    "FailureDetailObserved",
    "FlashFsmError",
    "HealthObserved",
    "HealthProbeFailed",
    "HeartbeatObserved",
    "JobCounts",
    "JobSubmitted",
    "StatusFetchFailed",
    "StatusObserved",
    "StoreError",
    "UnknownEventError",
    "WatchStarted",
    "WorkerCounts",
    "decode",
    "decode_many",
    "encode",
    "register_upcaster",
    "upcast",
]
