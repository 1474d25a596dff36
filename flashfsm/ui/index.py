"""What the web view knows of a store: one row per stream, kept current by reading only what
changed, and the changes handed to whoever follows them.

Theory of operation. `StoreIndex` opens the store read-only and builds, once, the row
`flashfsm ls` lists for every stream (`flashfsm.cli.store.stream_row`, so the page and the
command never disagree), plus what a page wants beside it: the GPU class, the replica that
watched it, its cost and what of it was wasted (the ledger `flashfsm cost` prices with,
`flashfsm.postmortem.ledger`). After that each `refresh` reads only the new: the stream names,
then every open stream's events after the seq it has (`read_tails` in one query where the
store offers it). A concluded stream rarely changes, so it is re-read on a slower sweep; an
open one is kept in memory with its events, a concluded one only as its row.

Money. A run's cost needs its job streams, and every open bill is billed up to the store's
newest event and ended by a sweeper's reap: a run (or a job no run queued) is priced again
when it, one of its job streams, the reaps or (while a bill of it is open) the store's
newest event change. A job a run queued shows its attempt's share of the run's bill.

Who reads it. Pages read `rows()` and `entry()`; the live feed takes the `Change`s each
`refresh` returns (`subscribe`). The index never writes: a page cannot create, repair or
change anything in the store.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flashfsm.adapters.stores import open_store
from flashfsm.cli.store import stream_row
from flashfsm.events.errors import CorruptLogError, EventDecodeError, FlashFsmError
from flashfsm.events.models import (
    AttemptStarted,
    Concluded,
    Event,
    JobSubmitted,
    RunConcluded,
    WatchStarted,
)
from flashfsm.events.store import OpenStream, Replica, capabilities, undriven
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import replay_run
from flashfsm.fsm.state import JobState
from flashfsm.postmortem.ledger import Ledger, ledger, reaps_of
from flashfsm.views import stream_kind

#: The least time (wall clock, seconds) between two pricings of one open stream: its bill
#: moves with every event the store takes, and pricing folds its whole log.
PRICE_EVERY_S = 1.0
#: How often a concluded stream is read again (one in this many refreshes): a concluded
#: log is final but for the rare late event (a worker log read after a verdict).
SLOW_SWEEP_EVERY = 20


@dataclass
class Entry:
    """One stream as the pages show it: `ls`'s row and what a page adds."""

    name: str
    seq: int  # the seq of the last event read (-1: none)
    row: dict[str, Any]
    events: list[Event] | None = None  # kept while the stream is open (or a sweeper's)
    ledger: Ledger | None = None  # a run's, or a job's that no run queued
    run: str | None = None  # the run that queued this job
    jobs: tuple[str, ...] = ()  # a run's job streams
    job: JobState | None = None  # an open job's state, folded up to `seq`
    done: bool = False  # it holds its verdict or result
    priced_at: float | None = None  # when (wall clock) its money was last worked out


@dataclass(frozen=True, slots=True)
class Change:
    """What one refresh read of one stream: its new events and its row after them."""

    stream: str
    events: tuple[Event, ...]
    row: dict[str, Any]


@dataclass
class FleetView:
    """The open-streams index and the live replicas (empty for a store that keeps none)."""

    open_streams: list[OpenStream] = field(default_factory=list)
    replicas: list[Replica] = field(default_factory=list)
    indexed: bool = False  # whether the store keeps an open-streams index at all


def _gpu(events: Sequence[Event]) -> str | None:
    gpu = None
    for e in events:
        if isinstance(e, AttemptStarted | JobSubmitted) and e.gpu_class:
            gpu = e.gpu_class
    return gpu


def _with(before: Event | None, events: list[Event]) -> list[Event]:
    return events if before is None else [before, *events]


def unwatched_gaps(events: Sequence[Event]) -> list[tuple[float, float, str]]:
    """Where a watch resumed a stream (a reattach: a crash, a takeover, a restart): when,
    how long nobody appended to it before (from the event before), and who resumed it."""
    gaps = []
    for before, e in itertools.pairwise(events):
        if isinstance(e, WatchStarted) and e.reattach:
            gaps.append((e.at, max(0.0, e.at - before.at), e.watcher))
    return gaps


def _watcher(events: Sequence[Event]) -> str | None:
    owner = None
    for e in events:
        if isinstance(e, WatchStarted):
            owner = e.watcher
    return owner


class StoreIndex:
    """Every stream of the store at `url` as a row, kept current by `refresh` (see the
    module docstring). Thread-safe: one thread refreshes, any reads."""

    def __init__(self, url: str, *, wall: Callable[[], float] = time.time) -> None:
        self.url = url
        self.wall = wall
        self._store = open_store(url, read_only=True)
        self._caps = capabilities(self._store)
        self._lock = threading.RLock()
        self._refreshing = threading.Lock()  # one refresh at a time, whoever asks
        self._entries: dict[str, Entry] = {}
        self._reaps: dict[str, float] = {}
        self._run_of: dict[str, str] = {}  # a job stream: the run that queued it
        self._newest: float | None = None
        self._refreshes = 0
        self._subscribers: list[Callable[[list[Change]], None]] = []
        self.fleet = FleetView()
        self.version = 0  # counts the refreshes that changed something
        self.damaged: dict[str, str] = {}  # stream: why it cannot be read
        self._cache: dict[str, tuple[int, Any]] = {}

    # --- reading ---------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """Every stream's row, by name."""
        with self._lock:
            return [self._entries[n].row for n in sorted(self._entries)]

    def entry(self, name: str) -> Entry | None:
        """The stream `name`'s entry, or None."""
        with self._lock:
            return self._entries.get(name)

    def ledgers(self) -> list[Ledger]:
        """The ledger of every run and of every job no run queued, as `flashfsm cost` has them."""
        with self._lock:
            return [e.ledger for _, e in sorted(self._entries.items()) if e.ledger is not None]

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()`, kept until the index next changes (what a page derives from every row:
        totals, a filter's choices)."""
        version = self.version
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = make()
        with self._lock:
            self._cache[key] = (version, value)
        return value

    @property
    def newest(self) -> float | None:
        """The store's newest event time (what open bills are billed up to)."""
        return self._newest

    def read(self, name: str) -> list[Event]:
        """A stream's events, read from the store now (a page that shows them all)."""
        entry = self.entry(name)
        if entry is not None and entry.events is not None:
            return list(entry.events)
        return self._store.read(name)

    def subscribe(self, callback: Callable[[list[Change]], None]) -> Callable[[], None]:
        """Call `callback` with every refresh's changes (from the refreshing thread); returns
        the function that stops it."""
        with self._lock:
            self._subscribers.append(callback)

        def stop() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return stop

    def close(self) -> None:
        """Release the store."""
        self._store.close()

    # --- refreshing --------------------------------------------------------------------------

    def refresh(self) -> list[Change]:
        """Read what changed in the store since the last refresh (everything, the first time),
        update the rows and return the changes (also handed to every subscriber)."""
        with self._refreshing:
            return self._refresh()

    def _refresh(self) -> list[Change]:
        self._refreshes += 1
        names = self._store.streams()
        with self._lock:
            known = self._entries
            sweep = self._refreshes % SLOW_SWEEP_EVERY == 0
            afters = {
                n: (known[n].seq if n in known else -1)
                for n in names
                if n not in known or known[n].events is not None or sweep
            }
        tails = self._tails(afters)
        changes: list[Change] = []
        with self._lock:
            touched = {n for n, new in tails.items() if new}
            for name in touched:
                self._take(name, tails[name])
            self._read_fleet()
            touched |= self._price(touched)
            for name in sorted(touched):
                entry = self._entries[name]
                changes.append(Change(name, tuple(tails.get(name, ())), entry.row))
            if changes:
                self.version += 1
            subscribers = list(self._subscribers)
        for callback in subscribers:
            callback(changes)
        return changes

    def _tails(self, afters: Mapping[str, int]) -> dict[str, list[Event]]:
        bulk = self._caps.bulk_reads
        out: dict[str, list[Event]] = {}
        if bulk is not None:
            try:
                return bulk.read_tails(dict(afters))
            except (CorruptLogError, EventDecodeError):
                pass  # one damaged stream: read them one by one to name it
        for name, after in afters.items():
            if name in self.damaged:
                continue
            try:
                out[name] = self._store.read(name, None if after < 0 else after)
            except (CorruptLogError, EventDecodeError) as exc:
                self.damaged[name] = str(exc)
        return out

    def _take(self, name: str, new: list[Event]) -> None:
        """Fold a stream's new events into its entry: an open stream's kept events and job
        state grow by what is new (nothing is folded twice); a concluded one read again (the
        slow sweep found a late event) is folded whole."""
        entry = self._entries.get(name)
        fresh = entry is None or entry.events is None
        if fresh:
            events = new if entry is None else self._store.read(name)
            scan = events
            before: Event | None = None
        else:
            assert entry is not None and entry.events is not None
            before = entry.events[-1] if entry.events else None
            events = entry.events
            events.extend(new)
            scan = new
        kind = stream_kind(events)
        job = None
        if kind == "job":
            try:
                job = replay(scan, None if fresh or entry is None else entry.job)
            except FlashFsmError:
                job = None  # `stream_row` says it is unreadable
        row = stream_row(name, events, job_state=job)
        old = None if fresh or entry is None else entry.row
        priced = {} if entry is None else entry.row
        for key in MONEY_CELLS:  # (worked out by `_price`, on its own cadence)
            row[key] = priced.get(key)
        row.update(
            gpu=_gpu(scan) or (old or {}).get("gpu"),
            owner=_watcher(scan) or (old or {}).get("owner"),
            gaps=[
                *(old or {}).get("gaps", ()),
                *unwatched_gaps([before, *scan] if before else scan),
            ],
        )
        jobs: tuple[str, ...] = ()
        if kind == "run":
            try:
                jobs = tuple(a.job_stream for a in replay_run(events).attempts if a.job_stream)
            except FlashFsmError:
                jobs = ()
        if kind == "sweeper":
            self._reaps = reaps_of(e for e in events)
        last = max(e.at for e in scan)
        self._newest = last if self._newest is None else max(self._newest, last)
        done = kind != "sweeper" and (
            (not fresh and entry is not None and entry.done)
            or any(isinstance(e, Concluded | RunConcluded) for e in scan)
        )
        keep = kind == "sweeper" or not done
        self._entries[name] = Entry(
            name,
            events[-1].seq,
            row,
            events if keep else None,
            None if entry is None else entry.ledger,
            self._run_of.get(name),
            jobs,
            job if keep else None,
            done,
            None if entry is None or done != entry.done else entry.priced_at,
        )
        for job_stream in jobs:
            self._run_of[job_stream] = name
            if job_stream in self._entries:
                self._entries[job_stream].run = name

    def _read_fleet(self) -> None:
        leases = self._caps.leases
        if leases is None:
            self.fleet = FleetView()
            return
        try:
            rows = leases.open_streams()
            replicas = leases.replicas()
        except FlashFsmError:
            return
        self.fleet = FleetView(rows, replicas, True)
        opened = {r.stream: r for r in rows}
        for entry in self._entries.values():
            row = entry.row
            info = opened.get(entry.name)
            row.pop("failed_to_start", None)
            row.pop("waiting", None)
            row["lease_owner"] = info.owner if info is not None and info.held else None
            if info is None:
                continue
            if info.failed is not None:
                row["failed_to_start"] = info.failed
            elif (why := undriven(info, replicas)) is not None:
                row["waiting"] = why

    # --- money -----------------------------------------------------------------------------

    def _price(self, touched: set[str]) -> set[str]:
        """Price again what `touched` changes (see the module docstring); the names whose
        cost changed. An open bill moves with every event the store takes, so a stream
        whose verdict has not changed is priced at most once every `PRICE_EVERY_S`."""
        due: set[str] = set()
        reaped = any(self._entries[n].row["kind"] == "sweeper" for n in touched)
        for name in touched:
            entry = self._entries[name]
            due.add(entry.run if entry.run is not None else name)
        for name, entry in self._entries.items():
            led = entry.ledger
            if led is not None and led.open_attempts and (reaped or led.as_of != self._newest):
                due.add(name)  # an open bill runs up to the store's newest event
        now = self.wall()
        changed: set[str] = set()
        for name in due:
            entry = self._entries.get(name)
            if entry is None:
                continue
            if entry.priced_at is not None and now - entry.priced_at < PRICE_EVERY_S:
                continue
            changed |= self._price_one(name)
            entry.priced_at = now
        return changed

    def _load(self, stream: str) -> list[Event]:
        entry = self._entries.get(stream)
        if entry is not None and entry.events is not None:
            return entry.events
        try:
            return self._store.read(stream)
        except FlashFsmError:
            return []

    def _price_one(self, name: str) -> set[str]:
        entry = self._entries.get(name)
        if entry is None or entry.row["kind"] == "sweeper" or entry.run is not None:
            return set()
        events = self._load(name)
        try:
            led = ledger(events, self._load, None, reaps=self._reaps, as_of=self._newest)
        except FlashFsmError:
            return set()
        led = replace(led, stream=name)
        before = entry.row.get("cost"), entry.row.get("wasted"), entry.row.get("billing_open")
        entry.ledger = led
        _money_cells(entry.row, led)
        changed = set() if before == _money_key(entry.row) else {name}
        for a in led.attempts:
            job_entry = self._entries.get(a.stream) if a.stream else None
            if job_entry is None:
                continue
            job_before = _money_key(job_entry.row)
            _money_cells(job_entry.row, Ledger(a.stream, "job", (a,), None, led.as_of))
            if _money_key(job_entry.row) != job_before:
                changed.add(job_entry.name)
        return changed


#: A row's money cells (`_money_cells`), None until it is priced.
MONEY_CELLS = ("cost", "wasted", "billed_s", "billing_open", "open_rate_per_hour")


def _money_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row.get("cost"), row.get("wasted"), row.get("billing_open")


def _money_cells(row: dict[str, Any], led: Ledger) -> None:
    """A row's money: billed, wasted, and whether a bill is still open (and its rate)."""
    row["cost"] = led.money()
    row["wasted"] = led.waste_money
    row["billed_s"] = led.billed_s
    row["billing_open"] = bool(led.open_attempts)
    row["open_rate_per_hour"] = led.open_rate_per_hour if led.open_attempts else None
