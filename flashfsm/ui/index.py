"""What the web view knows of a store: one row per stream, kept current by reading only what
changed, and the changes handed to whoever follows them.

Theory of operation. `StoreIndex` opens the store read-only and builds, once, the row
`flashfsm ls` lists for every stream (`flashfsm.display.listing.stream_row`, so the page and the
command never disagree), plus what a page wants beside it: the GPU class, the replica that
watched it, its cost and what of it was wasted (the ledger `flashfsm cost` prices with,
`flashfsm.postmortem.ledger`). After that each `refresh` reads only the new: the stream names,
then every open stream's events after the seq it has (`read_tails` in one query where the
store offers it). A concluded stream rarely changes, so it is re-read on a slower sweep; an
open one is kept in memory with its events, a concluded one only as its row.

Money. A run's cost needs its job streams, and every open bill is billed up to the store's
newest event and ended by a sweeper's reap: a run (or a job no run queued) is priced again
when it, one of its job streams, the reaps or (while a bill of it is open) the store's
newest event change, at most once every `PRICE_EVERY_S` (a pricing due sooner waits for a
later refresh). A job a run queued shows its attempt's share of the run's bill.

A store of thousands of streams. The first read of 10,000 streams takes seconds, so the
web view serves at once and the index reads in the background: `refresh(chunk=N)` reads
the streams N at a time, taking the lock only to fold each chunk in, and hands each chunk's
rows to the subscribers as it goes, then prices the runs in slices of `HOLD_S`; until the
first read is whole, `progress` says how far it has got (`ready` is set when it is). The
full logs read for the first time are kept until they are priced, so pricing a run reads
none of its job streams again.

Metrics. Each entry keeps its stream's part of the store's facts (`flashfsm.metrics
.StreamTally`: `ls`'s state, the errors and takeovers its events record), extended by each
refresh's new events, so `facts()` adds up the metrics `flashfsm.metrics.read_store_facts`
would read, from memory: the index's rows, ledgers and open-streams view, and the snapshots
of the open job streams (one query).

Who reads it. Pages read `rows()` and `entry()`; the live feed takes the `Change`s each
`refresh` returns (`subscribe`); `/metrics` reads `facts()`. The index never writes: a page
cannot create, repair or change anything in the store.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flashfsm.adapters.stores import open_store
from flashfsm.display.listing import stream_row
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
from flashfsm.store_facts import StoreFacts, StreamTally, facts_of, read_snapshots, stream_tally
from flashfsm.views import stream_kind

#: The least time (wall clock, seconds) between two pricings of one open stream: its bill
#: moves with every event the store takes, and pricing folds its whole log.
PRICE_EVERY_S = 1.0
#: How often a concluded stream is read again (one in this many refreshes): a concluded
#: log is final but for the rare late event (a worker log read after a verdict).
SLOW_SWEEP_EVERY = 20
#: How many streams a refresh in chunks (the web view's: `refresh(chunk=...)`) reads and folds
#: in at a time before handing them to the pages (a SQLite store's `read_tails` asks for 400
#: streams a query).
FILL_CHUNK = 400
#: The longest a refresh in chunks holds the lock pricing (seconds): a pricing folds a run's
#: job streams, so runs are priced a few at a time, and a page waits this long at most.
HOLD_S = 0.05
#: How long the web view waits for its first read before it serves (seconds): a small store
#: is served whole from the first page; a large one is served at once, filling in.
SERVE_WAIT_S = 1.0


class StillReading(FlashFsmError):
    """The index has not read the whole store yet (its first read is under way)."""


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
    tally: StreamTally | None = None  # its part of the store's metrics


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the index's first read has got: the streams read of those the store lists,
    then the runs (and jobs no run queued) priced of those to price."""

    streams: int = 0
    read: int = 0
    to_price: int = 0
    priced: int = 0


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
        self.version = 0  # counts the refreshes (and chunks of one) that changed something
        self.damaged: dict[str, str] = {}  # stream: why it cannot be read
        self._cache: dict[str, tuple[int, Any]] = {}
        #: How far the first read has got; None once it is whole (`ready` is set then).
        self.progress: Progress | None = Progress()
        self.ready = threading.Event()
        self._read_at: float | None = None  # when (wall clock) the last refresh done began
        self._to_price: set[str] = set()  # read but not priced yet (a refresh cut short)
        self._deferred: set[str] = set()  # due, but priced less than PRICE_EVERY_S ago
        self._whole: dict[str, list[Event]] = {}  # logs read whole by this refresh, to price

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

    def facts(self) -> StoreFacts:
        """The store's facts (`flashfsm.metrics.StoreFacts`, what `read_store_facts` reads)
        from the index: each stream's tally, the ledgers, the open-streams index and live
        replicas as the last refresh read them, and the snapshots of the open job streams
        (read now: one query). `read_at` is when the last refresh began, `read_s` what
        this took. Raises `StillReading` until the first read is whole."""
        if not self.ready.is_set():
            progress = self.progress or Progress()
            raise StillReading(
                f"the view is still reading the store ({progress.read} of "
                f"{progress.streams} streams read)"
            )
        started = time.perf_counter()
        with self._lock:
            tallies = {
                name: entry.tally
                for name, entry in self._entries.items()
                if entry.tally is not None and name not in self.damaged
            }
            ledgers = self.ledgers()
            fleet, read_at, damaged = self.fleet, self._read_at, len(self.damaged)
        open_jobs = [n for n, t in tallies.items() if t.open and t.kind == "job"]
        facts = facts_of(
            tallies,
            ledgers,
            open_streams=fleet.open_streams if fleet.indexed else None,
            replicas=fleet.replicas if fleet.indexed else None,
            snapshots=read_snapshots(self._store, open_jobs),
            damaged=damaged,
        )
        return replace(facts, read_at=read_at, read_s=time.perf_counter() - started)

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

    def refresh(
        self, *, chunk: int | None = None, stop: threading.Event | None = None
    ) -> list[Change]:
        """Read what changed in the store since the last refresh (everything, the first time),
        update the rows and return the changes (also handed to every subscriber).

        With `chunk`, a refresh that has more than `chunk` streams to read (the first) reads
        and folds them in `chunk` at a time, and prices the runs a few at a time (for
        `HOLD_S` at most), handing each chunk's changes to the subscribers as it goes and
        holding the lock only while it folds one in; `stop`, once set, ends it between two
        chunks (what it read is kept, and the next refresh goes on from there)."""
        with self._refreshing:
            return self._refresh(chunk, stop)

    def _refresh(self, chunk: int | None, stop: threading.Event | None) -> list[Change]:
        began = self.wall()
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
            if self.progress is not None:
                self.progress = Progress(len(names), len(names) - len(afters))
        order = list(afters)
        step = len(order) if chunk is None or len(order) <= chunk else chunk
        in_chunks = step < len(order)
        published: list[Change] = []
        taken: dict[str, tuple[Event, ...]] = {}  # (unchunked: published together at the end)
        for start in range(0, len(order), max(step, 1)):
            if stop is not None and stop.is_set():
                return published
            part = {n: afters[n] for n in order[start : start + step]}
            tails = self._tails(part)
            with self._lock:
                new = sorted(n for n, events in tails.items() if events)
                for name in new:
                    self._take(name, tails[name])
                    if part[name] < 0:
                        self._whole[name] = tails[name]
                self._to_price.update(new)
                if self.progress is not None:
                    self.progress = replace(self.progress, read=self.progress.read + len(part))
                batch = [Change(n, tuple(tails[n]), self._entries[n].row) for n in new]
            if not in_chunks:
                taken.update((c.stream, c.events) for c in batch)
            elif batch:
                published += self._publish(batch)
        with self._lock:
            self._read_fleet()
            due = sorted(self._due(self._to_price) | self._deferred)
            if self.progress is not None:
                self.progress = replace(self.progress, to_price=len(due))
        priced: set[str] = set()
        done = 0
        while done < len(due):  # (in chunks: the lock held HOLD_S at most, a pricing at least)
            if stop is not None and stop.is_set():
                return published
            with self._lock:
                until = time.perf_counter() + HOLD_S
                changed: set[str] = set()
                while done < len(due) and (not in_chunks or time.perf_counter() < until):
                    changed |= self._price(due[done : done + 1])
                    done += 1
                if self.progress is not None:
                    self.progress = replace(self.progress, priced=done)
                batch = [Change(n, (), self._entries[n].row) for n in sorted(changed)]
            if not in_chunks:
                priced |= changed
            elif batch:
                published += self._publish(batch)
        with self._lock:
            self._to_price.clear()
            whole, self._whole = self._whole, {}
            self._read_at = began
            self.progress = None
        self.ready.set()
        while whole:  # (a stream at a time: freeing all of a first read at once holds the GIL)
            whole.popitem()
        if in_chunks:
            return published
        changes = [
            Change(n, taken.get(n, ()), self._entries[n].row) for n in sorted(taken.keys() | priced)
        ]
        return self._publish(changes)

    def _publish(self, changes: list[Change]) -> list[Change]:
        """Hand `changes` to every subscriber (the index's version moves first)."""
        with self._lock:
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
        tally = stream_tally(row, scan, None if fresh or entry is None else entry.tally)
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
            tally,
        )
        for job_stream in jobs:
            self._run_of[job_stream] = name
            job_entry = self._entries.get(job_stream)
            if job_entry is not None and job_entry.run != name:
                job_entry.run = name
                # (priced alone before its run was read: its share of the run's bill is its
                # money now, and the run's ledger holds it, as `store_ledgers` has it)
                job_entry.ledger = None

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

    def _due(self, touched: set[str]) -> set[str]:
        """What to price again for what `touched` changes (see the module docstring): the
        run of each touched job (or the job itself, when no run queued it), and every open
        bill when the store's newest event moved or a sweeper reaped."""
        due: set[str] = set()
        reaped = any(
            n in self._entries and self._entries[n].row["kind"] == "sweeper" for n in touched
        )
        for name in touched:
            entry = self._entries.get(name)
            if entry is not None:
                due.add(entry.run if entry.run is not None else name)
        for name, entry in self._entries.items():
            led = entry.ledger
            if led is not None and led.open_attempts and (reaped or led.as_of != self._newest):
                due.add(name)  # an open bill runs up to the store's newest event
        return due

    def _price(self, due: Sequence[str]) -> set[str]:
        """Price the streams `due` again; the names whose cost changed. An open bill moves
        with every event the store takes, so a stream whose verdict has not changed is
        priced at most once every `PRICE_EVERY_S`: one priced less than that ago waits for
        a later refresh (`_deferred`), never dropped."""
        now = self.wall()
        changed: set[str] = set()
        for name in due:
            entry = self._entries.get(name)
            if entry is None:
                continue
            if entry.priced_at is not None and now - entry.priced_at < PRICE_EVERY_S:
                self._deferred.add(name)
                continue
            self._deferred.discard(name)
            changed |= self._price_one(name)
            entry.priced_at = now
        return changed

    def _load(self, stream: str) -> list[Event]:
        entry = self._entries.get(stream)
        if entry is not None and entry.events is not None:
            return entry.events
        whole = self._whole.get(stream)  # (read whole by this refresh: not read again)
        if whole is not None:
            return whole
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
