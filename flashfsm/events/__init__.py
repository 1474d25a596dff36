"""Events: the immutable record of every observation and verdict (pure: no I/O, no clock).

The recorded format: the models, their codec, the grace policy a job is judged by, the
failure kinds, outside text (masked, then capped) and the store protocol.
"""

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
