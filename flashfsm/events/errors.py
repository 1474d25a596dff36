"""Typed errors of the event layer. Each message names where the problem is."""

from __future__ import annotations


class FlashFsmError(Exception):
    """Base class of every error flashfsm raises on purpose."""


class EventDecodeError(FlashFsmError, ValueError):
    """Bytes that are not a valid event: bad JSON, a wrong field, a wrong type."""

    def __init__(self, message: str, *, stream: str | None = None, seq: int | None = None):
        where = f"stream {stream!r} seq {seq}" if stream is not None else "an event"
        if stream is not None and seq is None:
            where = f"stream {stream!r}"
        super().__init__(f"cannot decode {where}: {message}")
        self.stream = stream
        self.seq = seq


class ChecksumError(EventDecodeError):
    """Stored bytes that do not match their checksum, or (strict mode) carry none."""


class UnknownEventError(EventDecodeError):
    """An event kind, or a version of a kind, this library does not know and cannot upcast."""


class StoreError(FlashFsmError):
    """Base class of event-store errors."""


class ConcurrencyError(StoreError):
    """An append whose `expected_seq` is not the stream's next seq: another writer got there."""

    def __init__(self, stream: str, expected_seq: int, actual_seq: int):
        super().__init__(
            f"stream {stream!r}: append expected next seq {expected_seq}, "
            f"but the stream's next seq is {actual_seq}"
        )
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class DuplicateEventError(StoreError):
    """An append carrying an event id the store already holds."""

    def __init__(self, stream: str, event_id: str):
        super().__init__(f"stream {stream!r}: event id {event_id!r} is already stored")
        self.stream = stream
        self.event_id = event_id


class CorruptLogError(StoreError):
    """A stored log that cannot be read: names the file or table, the stream and the line or seq."""

    def __init__(
        self,
        where: str,
        stream: str | None,
        message: str,
        *,
        line: int | None = None,
        seq: int | None = None,
    ):
        position = f" stream {stream!r}" if stream is not None else ""
        position += f" line {line}" if line is not None else ""
        position += f" seq {seq}" if seq is not None else ""
        super().__init__(f"{where}:{position}: {message}" if position else f"{where}: {message}")
        self.where = where
        self.stream = stream
        self.line = line
        self.seq = seq


class StoreFullError(StoreError):
    """An append the disk had no room for (ENOSPC, "database or disk is full").

    Nothing of the batch is stored and nothing acknowledged before it is lost; the store
    can be appended to again once there is room.
    """

    def __init__(self, where: str, stream: str, detail: str = "no space left on the device"):
        super().__init__(f"{where}: cannot append to stream {stream!r}: {detail}")
        self.where = where
        self.stream = stream


class StaleLease(StoreError):
    """An append under a lease another replica has taken since (its fencing token is stale).

    Raised by the store inside the append's own transaction, so nothing of the batch is
    stored: a paused or partitioned replica can never write after losing its lease.
    """

    def __init__(self, stream: str, leased: str, token: int, current: int | None):
        now = "closed" if current is None else f"token {current}"
        super().__init__(
            f"stream {stream!r}: the lease on {leased!r} with token {token} is stale ({now})"
        )
        self.stream = stream
        self.leased = leased
        self.token = token
        self.current = current
