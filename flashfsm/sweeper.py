"""The idle-endpoint sweeper: the shell around the rules of `flashfsm.fsm.sweep`.

Theory of operation. `IdleSweeper.sweep` lists the account's endpoints, reads the health
of each unprotected flash endpoint, folds the sweeper stream, and asks `plan_sweep` what
to record and what to delete. It appends the timer events first, then deletes each due
endpoint and records `EndpointReaped` for it. State is never kept anywhere but the log:
the object only caches the fold and reads the events appended since, so a new sweeper on
the same store (a restarted control plane) continues every grace window where it was.

Concurrency. Sweeps of one stream in one process take turns (a lock per store object and
stream, held for the whole sweep), so two threads never delete the same endpoint twice.
Across processes the log arbitrates: the sweeper's `StreamWriter` (policy `REBUILD`) names
the seq it expects on every append, and a sweeper that loses the race folds in what the
others appended and re-plans before appending again;
just before each delete it re-reads, and leaves the endpoint alone when another sweeper
has cleared or reaped it meanwhile. A delete that still races another process's is
idempotent: RunPod answers the later one 404, which is recorded as "gone", never as a
second reap.

One stream per account: a sweep sees only its own account's endpoints, so to it another
account's timers belong to endpoints that are gone, and it would clear them. A key pool
gives each account its own `stream` (e.g. `sweeper-<account index>`, never the key).

A sweep never raises for the outside world: a failed listing gives an empty report with
the error noted; a failed health read or delete is noted and that endpoint skipped (a
failed health read clears its timer, as an unconfirmed reading; a health read answered 404
means the endpoint was deleted since the listing: it is gone, not an error); a store that
fails stops the sweep before anything more is deleted. Error texts and endpoint names are
redacted.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from flashfsm.errors import RunpodApiError
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import (
    MESSAGE_CAP,
    NAME_CAP,
    EndpointReaped,
    EventBase,
    IdleCleared,
    IdleSeen,
)
from flashfsm.events.store import EventStore
from flashfsm.fsm.sweep import (
    ClearReason,
    ClearTimer,
    Due,
    Reading,
    StartTimer,
    SweeperState,
    SweepPlan,
    is_flash_endpoint,
    is_protected,
    plan_sweep,
    protected_names,
    read_health,
)
from flashfsm.naming import check_stream
from flashfsm.redact import redact, redact_then_cap
from flashfsm.writer import REBUILD, SWEEPER, Contention, StreamWriter

logger = logging.getLogger("flashfsm")

DEFAULT_STREAM = "sweeper"

Clock = Callable[[], float]
Spec = tuple[type[EventBase], float, dict[str, Any]]  # an event to build: kind, at, fields


class SweepClient(Protocol):
    """What the sweeper needs from a RunPod client (`RunpodClient` has it)."""

    def list_endpoints(self) -> list[dict[str, Any]]: ...

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]: ...

    def delete_endpoint(self, endpoint_id: str) -> bool: ...


class SweepContention(FlashFsmError):
    """Other sweepers kept appending to the stream; this sweep gave up recording."""


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did, by endpoint id.

    `deleted`: deleted by this sweep. `would_delete`: due, in a dry run (which records and
    deletes nothing). `seen_idle`: confirmed idle by this sweep, deleted or not. `cleared`:
    idle timers this sweep cleared (or would have, in a dry run). `errors`: what failed.
    """

    deleted: tuple[str, ...] = ()
    would_delete: tuple[str, ...] = ()
    seen_idle: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.errors


# One lock per (store object, stream): sweeps of the same log in one process take turns.
_registry_lock = threading.Lock()
_locks: weakref.WeakKeyDictionary[Any, dict[str, threading.Lock]] = weakref.WeakKeyDictionary()


def _lock_for(store: Any, stream: str) -> threading.Lock:
    with _registry_lock:
        try:
            per_store = _locks.setdefault(store, {})
        except TypeError:  # a store that cannot be weakly referenced: a lock of its own
            return threading.Lock()
        return per_store.setdefault(stream, threading.Lock())


class IdleSweeper:
    """Deletes flash training endpoints that stayed idle, keeping its timers as events.

    `client` is a `RunpodClient` (or anything with its three endpoint methods), `store`
    the event store holding the `stream` (one per account: see the module notes; a name
    holding a control character is a `ValueError`), `clock` the time source (epoch seconds).
    """

    def __init__(
        self,
        client: SweepClient,
        store: EventStore,
        *,
        stream: str = DEFAULT_STREAM,
        clock: Clock = time.time,
    ):
        if not isinstance(stream, str) or not stream or len(stream) > NAME_CAP:
            raise ValueError(f"a sweeper stream name must be 1 to {NAME_CAP} characters")
        check_stream(stream)
        self.client = client
        self.store = store
        self.stream = stream
        self.clock = clock
        self._writer = StreamWriter(store, stream, SWEEPER, REBUILD)
        self._lock = _lock_for(store, stream)

    def __repr__(self) -> str:
        return f"IdleSweeper(stream={self.stream!r}, store={self.store!r})"

    def timers(self) -> dict[str, float]:
        """The running idle timers as the log has them: endpoint id -> idle since."""
        with self._lock:
            return dict(self._refresh().timers)

    def sweep(
        self,
        protected: Iterable[str] = frozenset(),
        *,
        min_idle_s: float = 0.0,
        reap_warm: bool = True,
        dry_run: bool = False,
    ) -> SweepReport:
        """One sweep: delete every flash endpoint idle for at least `min_idle_s`.

        `protected` names the endpoints of live runs (bare `flash-…` or runpod-flash's
        `live-flash-…`, either matches both); they are never deleted and their timers
        clear. With `reap_warm` False a warm worker counts as busy, so only endpoints
        scaled to zero are deleted. `dry_run` records nothing and deletes nothing; its
        report says what would have happened.
        """
        if not isinstance(min_idle_s, (int, float)) or not math.isfinite(min_idle_s):
            raise ValueError(f"min_idle_s must be a finite number, got {min_idle_s!r}")
        if min_idle_s < 0:
            raise ValueError(f"min_idle_s must be >= 0, got {min_idle_s!r}")
        names = protected_names(protected)
        with self._lock:
            return _Sweep(self, names, float(min_idle_s), reap_warm, dry_run).run()

    # --- the log ---------------------------------------------------------------------

    def _refresh(self) -> SweeperState:
        """The cached fold, brought up to the end of the stream."""
        writer = self._writer
        try:
            writer.catch_up()
        except Exception:
            writer.state = SweeperState()  # never keep a half-folded state
            raise
        return writer.state

    def _record(self, build: Callable[[SweeperState], list[Spec]]) -> None:
        """Append what `build` makes of the folded state; a lost race re-folds and rebuilds."""
        writer = self._writer

        def events(state: SweeperState) -> list[Any]:
            return [
                writer.event(cls, at, offset, **fields)
                for offset, (cls, at, fields) in enumerate(build(state))
            ]

        self._refresh()
        try:
            writer.append(events)
        except Contention as exc:
            raise SweepContention(str(exc)) from None


class _Sweep:
    """One sweep's working data (lives only while the sweeper's lock is held)."""

    def __init__(
        self,
        sweeper: IdleSweeper,
        protected: frozenset[str],
        min_idle_s: float,
        reap_warm: bool,
        dry_run: bool,
    ):
        self.sweeper = sweeper
        self.client = sweeper.client
        self.protected = protected
        self.min_idle_s = min_idle_s
        self.reap_warm = reap_warm
        self.dry_run = dry_run
        self.now = 0.0
        self.listed: dict[str, str] = {}
        self.readings: dict[str, tuple[str, Reading]] = {}
        self.deleted: list[str] = []
        self.cleared: list[str] = []
        self.errors: list[str] = []

    def run(self) -> SweepReport:
        try:
            listing = self.client.list_endpoints()
            if not isinstance(listing, list):
                raise TypeError(f"expected a list of endpoints, got {type(listing).__name__}")
        except Exception as exc:
            self.note("listing endpoints", exc, level=logging.WARNING)
            return self.report()
        self.now = self.sweeper.clock()
        self.observe(listing)
        try:
            if self.dry_run:
                return self.report(self.plan(self.sweeper._refresh()))
            plan = self.record_timers()
        except Exception as exc:
            self.note(f"recording to stream {self.sweeper.stream!r}", exc, level=logging.WARNING)
            return self.report()
        for due in plan.due:
            if not self.reap(due):
                break
        return self.report(plan)

    # --- observing --------------------------------------------------------------------

    def observe(self, listing: list[Any]) -> None:
        """Read every unprotected flash endpoint's health; remember every listed id."""
        for entry in listing:
            if not isinstance(entry, Mapping):
                continue
            endpoint_id, name = entry.get("id"), entry.get("name")
            if not isinstance(endpoint_id, str) or not endpoint_id or len(endpoint_id) > NAME_CAP:
                continue
            name = name if isinstance(name, str) else ""
            self.listed[endpoint_id] = name
            if not is_flash_endpoint(name):
                continue
            if is_protected(name, self.protected):
                self.readings[endpoint_id] = (name, Reading.PROTECTED)
                continue
            try:
                health = self.client.endpoint_health(endpoint_id)
            except RunpodApiError as exc:
                if exc.status_code == 404:  # deleted since the listing (another sweeper?):
                    del self.listed[endpoint_id]  # gone, as if it had not been listed
                    continue
                self.note(f"health of {name} ({endpoint_id})", exc)
                self.readings[endpoint_id] = (name, Reading.UNCONFIRMED)
                continue
            except Exception as exc:
                self.note(f"health of {name} ({endpoint_id})", exc)
                self.readings[endpoint_id] = (name, Reading.UNCONFIRMED)
                continue
            self.readings[endpoint_id] = (name, read_health(health, reap_warm=self.reap_warm))

    # --- recording and deleting -------------------------------------------------------

    def plan(self, state: SweeperState) -> SweepPlan:
        return plan_sweep(state, self.readings, self.listed, self.now, self.min_idle_s)

    def record_timers(self) -> SweepPlan:
        """Append the plan's timer events (re-planned on a lost race); the plan that stuck."""
        chosen: list[SweepPlan] = []

        def build(state: SweeperState) -> list[Spec]:
            plan = self.plan(state)
            chosen[:] = [plan]
            return [self.timer_event(r) for r in plan.records]

        self.sweeper._record(build)
        return chosen[0]

    def timer_event(self, record: StartTimer | ClearTimer) -> Spec:
        if isinstance(record, StartTimer):
            fields = {
                "endpoint_id": record.endpoint_id,
                "endpoint_name": record.endpoint_name,
                "since": record.since,
            }
            return (IdleSeen, self.now, fields)
        return (IdleCleared, self.now, {"endpoint_id": record.endpoint_id, "reason": record.reason})

    def reap(self, due: Due) -> bool:
        """Delete one due endpoint and record it; False when the store failed (stop)."""
        endpoint_id, what = due.endpoint_id, f"{due.endpoint_name} ({due.endpoint_id})"
        try:
            if self.sweeper._refresh().timers.get(endpoint_id) != due.since:
                return True  # another sweeper cleared, restarted or reaped it meanwhile
        except Exception as exc:
            self.note(f"reading stream {self.sweeper.stream!r}", exc, level=logging.WARNING)
            return False
        try:
            deleted_now = self.client.delete_endpoint(endpoint_id)
        except Exception as exc:
            self.note(f"deleting {what}", exc)
            return True  # its timer stays: the next sweep tries again
        at = self.sweeper.clock()
        if deleted_now:
            self.deleted.append(endpoint_id)
            logger.info(
                "idle sweep: deleted %s, idle %.0f s", redact(what), max(0.0, self.now - due.since)
            )
            fields = {
                "endpoint_id": endpoint_id,
                "endpoint_name": due.endpoint_name,
                "idle_s": max(0.0, self.now - due.since),
            }

            def build(state: SweeperState) -> list[Spec]:
                return [] if endpoint_id in state.reaped else [(EndpointReaped, at, fields)]

        else:
            self.cleared.append(endpoint_id)  # already gone: someone else deleted it

            def build(state: SweeperState) -> list[Spec]:
                if endpoint_id not in state.timers:
                    return []
                return [(IdleCleared, at, {"endpoint_id": endpoint_id, "reason": ClearReason.GONE})]

        try:
            self.sweeper._record(build)
        except Exception as exc:
            self.note(f"recording the delete of {what}", exc, level=logging.WARNING)
            return False
        return True

    # --- reporting --------------------------------------------------------------------

    def note(self, what: str, exc: BaseException, *, level: int = logging.DEBUG) -> None:
        """Keep an error for the report (redacted, capped) and log it."""
        text = str(exc) if isinstance(exc, RunpodApiError) else f"{type(exc).__name__}: {exc}"
        message = redact_then_cap(f"{what}: {text}", MESSAGE_CAP) or what
        self.errors.append(message)
        logger.log(level, "idle sweep: %s", message)

    def report(self, plan: SweepPlan | None = None) -> SweepReport:
        if plan is None:
            return SweepReport(errors=tuple(self.errors), dry_run=self.dry_run)
        cleared = [r.endpoint_id for r in plan.records if isinstance(r, ClearTimer)]
        return SweepReport(
            deleted=tuple(self.deleted),
            would_delete=tuple(d.endpoint_id for d in plan.due) if self.dry_run else (),
            seen_idle=plan.idle,
            cleared=tuple(dict.fromkeys(cleared + self.cleared)),
            errors=tuple(self.errors),
            dry_run=self.dry_run,
        )
