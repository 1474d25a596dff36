"""One stream writer: every append the library makes goes through `StreamWriter`.

Theory of operation. A stream has one folded state (a job's `JobState`, a run's `RunState`,
the sweeper's `SweeperState`, or just its length). A writer keeps that state, builds the
next events *from* it, appends them with the seq the state expects, and folds them in only
once the store took them, so the state never knows anything the log does not.

Appends are optimistic. When another writer got there first the store raises
`ConcurrencyError`; the writer reads what was appended meanwhile and asks its *conflict
policy* what that means (`ConflictPolicy`, three of them, named below). A policy either
stops the writer with an error, or lets it fold the newer events in and try again: the
events are then built anew from the updated state (a sweep re-plans, a claim is rebuilt),
never replayed blindly at a new seq.

The protocol is written once, as sans-IO generators (`StreamWriter.open_steps`,
`StreamWriter.append_steps`, `StreamWriter.catch_up_steps`) that yield store requests
(`Replay`, `Append`, `ReadAfter`) and receive their results (a store's error is thrown
back into the generator). `perform` runs one request on a store, so `drive` runs a whole
generator synchronously; the asyncio supervisor runs the same generators with `Append`
going through its group commit and the reads in worker threads.

Snapshots. A fold may have a snapshot codec (`Fold.snapshots`; the job fold has
`flashfsm.fsm.snapshot.JOB_SNAPSHOTS`). Then a `Replay` on a store that keeps snapshots
(`capabilities(store).snapshots`, `flashfsm.events.store`) starts from the latest one and
folds only the events after its seq; a snapshot of another fold version, or one that fails
its checksum or does not decode, is ignored with a warning and the stream replayed in
full, so the state is always the one a full replay gives. A writer with `snapshot_every`
set asks for a new snapshot (`SaveSnapshot`, a copy of its state) once that many events
have passed since the last one; the driver writes it after the append that made it due
(the sync driver in line, the supervisor in a worker thread), and a failed write is a
warning, never the watch's error. A driver replaying many streams at once (a fleet
replica's claims) first makes their reads in bulk (`preload`, on a store with `BulkReads`:
the snapshots in one query, the events after each in another) and replays each stream on
that view, exactly as it would alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from flashfsm.errors import JobOwnedElsewhere
from flashfsm.events.errors import ConcurrencyError, FlashFsmError
from flashfsm.events.light import light_reads, settle_fields
from flashfsm.events.models import CancelRequested, Event, EventBase, WatchStarted
from flashfsm.events.store import EventStore, capabilities, iter_events
from flashfsm.fsm.job import JobState, evolve
from flashfsm.fsm.run import RunState, evolve_run
from flashfsm.fsm.snapshot import JOB_SNAPSHOTS, SnapshotCodec
from flashfsm.fsm.sweep import SweeperState, evolve_sweeper
from flashfsm.ids import new_id

S = TypeVar("S")
R = TypeVar("R")

logger = logging.getLogger("flashfsm")

#: Appends tried while other writers keep getting there first (each try re-reads).
APPEND_TRIES = 20


# --- folds ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fold(Generic[S]):
    """How a kind of stream folds: a fresh state, one event into it (in place), how its
    state is snapshotted (None: never), and how a state folded from light events is made
    whole (`settle`; None: this fold only ever sees models, see `flashfsm.events.light`)."""

    name: str
    new: Callable[[], S]
    evolve: Callable[[S, Event], Any]
    snapshots: SnapshotCodec[S] | None = None
    settle: Callable[[S], S] | None = None

    def replay(self, events: Iterable[Event], state: S | None = None) -> S:
        """`events` folded into `state` (a fresh one by default)."""
        s = self.new() if state is None else state
        evolve_one = self.evolve
        for event in events:
            evolve_one(s, event)
        return s


@dataclass(slots=True)
class Tail:
    """The state of a stream a writer only appends to: how long it is."""

    next_seq: int = 0


def _count(s: Tail, event: Event) -> Tail:
    s.next_seq = event.seq + 1
    return s


JOB = Fold("job", JobState, evolve, JOB_SNAPSHOTS, settle_fields)
RUN = Fold("run", RunState, evolve_run)
SWEEPER = Fold("sweeper", SweeperState, evolve_sweeper)
TAIL = Fold("tail", Tail, _count)


# --- conflict policies --------------------------------------------------------------------


class Contention(FlashFsmError):
    """Other writers kept appending to the stream; this writer gave up."""


@dataclass(frozen=True, slots=True)
class ConflictPolicy:
    """What a writer does when another one appended first.

    `resolve(stream, newer)` sees the events appended meanwhile: it raises to stop the
    writer, or returns to have them folded in and the append built anew and tried again.
    """

    name: str
    resolve: Callable[[str, Sequence[Event]], None]
    tries: int = APPEND_TRIES


def _newer_watch_wins(stream: str, newer: Sequence[Event]) -> None:
    watches = [e for e in newer if isinstance(e, WatchStarted)]
    if watches:
        raise JobOwnedElsewhere(stream, watches[-1].watcher)


def _fold_cancels(stream: str, newer: Sequence[Event]) -> None:
    if not newer or not all(isinstance(e, CancelRequested) for e in newer):
        raise JobOwnedElsewhere(stream, None)


def _fold_anything(stream: str, newer: Sequence[Event]) -> None:
    return None


#: Job watches: a newer watch owns the job, so a `WatchStarted` appended by another process
#: stops this one (`JobOwnedElsewhere`); anything else is folded in and the append rebuilt.
NEWER_WATCH_WINS = ConflictPolicy("newer watch wins", _newer_watch_wins)
#: Runs: only one process drives a run; a user's `CancelRequested` from another process is
#: folded in (the run then winds down), anything else means another driver
#: (`JobOwnedElsewhere`).
FOLD_CANCELS = ConflictPolicy("fold cancels", _fold_cancels)
#: Shared streams (the idle sweeper's, a cancel request): whatever others appended is folded
#: in and the events are built anew from the new state, `tries` times at most (`Contention`).
REBUILD = ConflictPolicy("rebuild", _fold_anything)


# --- store requests -------------------------------------------------------------------------
# (Plain slotted dataclasses, as the watch's requests are: made on every append.)


@dataclass(slots=True)
class Replay(Generic[S]):
    """Read the whole stream and fold it: answers with the state.

    When the store keeps a valid snapshot of the stream, the fold starts from it: whoever
    performs the request sets `loaded` to the seq of that snapshot (-1: a full replay).
    """

    stream: str
    fold: Fold[S]
    loaded: int = -1


@dataclass(slots=True)
class SaveSnapshot(Generic[S]):
    """Write `state` (a copy, the stream's state at `seq`) as the stream's snapshot: answers
    None; a failure is logged, never thrown back (a snapshot is only a cache)."""

    stream: str
    seq: int
    state: S
    codec: SnapshotCodec[S]


@dataclass(slots=True)
class Append:
    """Append `events` at `expected_seq`: answers None, or a store error is thrown back."""

    stream: str
    events: Sequence[Event]
    expected_seq: int


@dataclass(slots=True)
class ReadAfter:
    """The stream's events after seq `after`: answers with the list."""

    stream: str
    after: int | None


StoreRequest = Replay[Any] | Append | ReadAfter | SaveSnapshot[Any]


def perform(store: EventStore, request: StoreRequest) -> Any:
    """Run one store request on `store` (the synchronous way)."""
    match request:
        case Append(stream=stream, events=events, expected_seq=expected):
            store.append(stream, events, expected)
            return None
        case ReadAfter(stream=stream, after=after):
            return store.read(stream, after)
        case Replay():
            return replay_stream(store, request)
        case SaveSnapshot():
            save_snapshot(store, request)
            return None
    raise TypeError(f"not a store request: {request!r}")


def snapshot_interval(store: Any) -> int | None:
    """How many events a watch on `store` lets pass between two snapshots: the store's
    `snapshot_every` (the `SnapshotStore` setting, read through its capability), or None
    when it keeps no snapshots (or is not asked to write them)."""
    return capabilities(store).snapshot_every


def replay_stream(store: EventStore, request: Replay[S]) -> S:
    """Perform a `Replay`: from the store's latest valid snapshot and the events after it
    when there is one (setting `request.loaded` to its seq), else the whole stream.

    A fold that can settle its state reads on the fast path (`flashfsm.events.light`): the
    store decodes trusted lines into light events, and the state is settled before it is
    returned, equal to what the validating path folds.
    """
    settle = request.fold.settle
    if settle is None:
        return _replay_stream(store, request)
    with light_reads():
        state = _replay_stream(store, request)
    return settle(state)


def replay_job(store: EventStore, stream: str) -> JobState:
    """A job stream's state, read from `store`: from its latest valid snapshot when the
    store keeps one, and on the fast path (`flashfsm.events.light`).

    Equal to `replay(store.read(stream))`, the validating path, which a post-mortem that
    also wants the events themselves still takes.
    """
    return replay_stream(store, Replay(stream, JOB))


def _replay_stream(store: EventStore, request: Replay[S]) -> S:
    stream, fold = request.stream, request.fold
    codec, snapshots = fold.snapshots, capabilities(store).snapshots
    request.loaded = -1
    if codec is not None and snapshots is not None:
        try:
            kept = snapshots.load_snapshot(stream)
            state = None if kept is None else codec.decode(kept[2], stream, kept[0], kept[1])
        except Exception as exc:  # another version, a bad checksum, a store hiccup
            logger.warning("stream %s: snapshot ignored, replaying in full (%s)", stream, exc)
        else:
            if state is not None and kept is not None:
                # The log must still hold the snapshot's last event (a log deleted or
                # rewritten under its snapshot is replayed as it is now).
                seq = kept[0]
                events = iter_events(store, stream, seq - 1)
                last = next(events, None)
                if last is not None and last.seq == seq and last.at == _last_at(state):
                    request.loaded = seq
                    return fold.replay(events, state)
                logger.warning(
                    "stream %s: the snapshot at seq %d does not match the log; replaying in full",
                    stream,
                    seq,
                )
    return fold.replay(iter_events(store, stream))


class Preloaded:
    """A store seen with a batch of replays' reads already made.

    `preload` fetches the snapshots of many streams, and each one's events after its
    snapshot, in two queries (a store's `load_snapshots` and `read_tails`); then
    `replay_stream` on this view finds them (`load_snapshot`, `iter_read` with the same
    `after`) instead of asking the store twice per stream. Anything else goes to the store.
    """

    def __init__(
        self,
        store: EventStore,
        snapshots: dict[str, tuple[int, int, bytes]],
        tails: dict[str, tuple[int, list[Event]]],
        streams: Iterable[str],
    ):
        self.inner = store
        self.snapshots = snapshots
        self.tails = tails
        self.streams = set(streams)

    def load_snapshot(self, stream: str) -> tuple[int, int, bytes] | None:
        if stream in self.streams:
            return self.snapshots.get(stream)
        snapshots = capabilities(self.inner).snapshots
        return None if snapshots is None else snapshots.load_snapshot(stream)

    def iter_read(self, stream: str, after: int | None = None) -> Iterator[Event]:
        tail = self.tails.get(stream)
        if tail is not None and tail[0] == after:
            return iter(tail[1])
        return iter_events(self.inner, stream, after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def preload(store: EventStore, streams: Sequence[str], fold: Fold[Any]) -> EventStore:
    """`store` with the reads of replaying `streams` by `fold` made in bulk, when the store
    can (`BulkReads`: `load_snapshots`, `read_tails`) and the fold keeps snapshots; else
    `store`."""
    bulk = capabilities(store).bulk_reads
    if fold.snapshots is None or bulk is None or not streams:
        return store
    kept = bulk.load_snapshots(streams)
    afters = {stream: seq - 1 for stream, (seq, _version, _body) in kept.items()}
    with light_reads(fold.settle is not None):  # only `replay_stream` reads them: it settles
        tails = bulk.read_tails(afters) if afters else {}
    return Preloaded(  # type: ignore[return-value]
        store, kept, {s: (afters[s], events) for s, events in tails.items()}, streams
    )


def _last_at(state: Any) -> Any:
    return getattr(state, "last_at", None)


def save_snapshot(store: EventStore, request: SaveSnapshot[Any]) -> bool:
    """Perform a `SaveSnapshot`: encode the state and keep it in the store. False (and a
    warning) when it could not be written; a store without snapshots just says False."""
    return save_snapshots(store, [request]) == 1


def save_snapshots(store: EventStore, requests: Sequence[SaveSnapshot[Any]]) -> int:
    """Perform many `SaveSnapshot`s: encode each state, keep them in the store in one
    transaction when it can (`save_snapshots`), and say how many were written. One that
    cannot be encoded, or a batch that cannot be written, is a warning, never an error."""
    caps = capabilities(store)
    snapshots = caps.snapshots
    if snapshots is None or not requests:
        return 0
    rows = []
    for request in requests:
        try:
            body = request.codec.encode(request.state, request.stream)
        except Exception as exc:
            _unsaved([(request.stream, request.seq)], exc)
        else:
            rows.append((request.stream, request.seq, request.codec.version, body))
    together = caps.snapshot_batches
    if together is None:  # (one at a time: one that fails leaves the others written)
        batches, write = [[row] for row in rows], lambda batch: snapshots.save_snapshot(*batch[0])
    else:
        batches, write = [rows], together.save_snapshots
    written = 0
    for batch in batches:
        try:
            write(batch)
        except Exception as exc:
            _unsaved([(row[0], row[1]) for row in batch], exc)
        else:
            written += len(batch)
    return written


def _unsaved(snapshots: Sequence[tuple[str, int]], exc: Exception) -> None:
    """Warn that `(stream, seq)` snapshots were not written: one line, however many."""
    kind = type(exc).__name__
    if len(snapshots) == 1:
        [(stream, seq)] = snapshots
        logger.warning("stream %s: snapshot at seq %d not written (%s: %s)", stream, seq, kind, exc)
        return
    names = ", ".join(stream for stream, _ in snapshots[:3]) + (", …" if len(snapshots) > 3 else "")
    count = len(snapshots)
    logger.warning("%d snapshots (streams %s) not written (%s: %s)", count, names, kind, exc)


# --- driving a sans-IO generator ------------------------------------------------------------


@dataclass(slots=True)
class Done(Generic[R]):
    """A generator has finished: its result."""

    value: R


def advance(steps: Generator[Any, Any, R], reply: Any, error: BaseException | None) -> Any:
    """Hand a generator the answer to its last request (or throw the error that request
    raised into it): its next request, or `Done` with its result."""
    try:
        return steps.throw(error) if error is not None else steps.send(reply)
    except StopIteration as stop:
        return Done(stop.value)


def run_steps(steps: Generator[Any, Any, R], perform_one: Callable[[Any], Any]) -> R:
    """Drive a generator in this thread: each request is `perform_one(request)`; an
    exception it raises is thrown back into the generator, which decides what it means."""
    reply: Any = None
    error: BaseException | None = None
    while not isinstance(request := advance(steps, reply, error), Done):
        reply, error = None, None
        try:
            reply = perform_one(request)
        except Exception as exc:
            error = exc
    return request.value


def drive(steps: Generator[StoreRequest, Any, R], store: EventStore) -> R:
    """Run a store-request generator to its end on `store`; return its result."""
    return run_steps(steps, lambda request: perform(store, request))


# --- the writer -----------------------------------------------------------------------------

Build = Callable[[S], Sequence[EventBase]]


@dataclass(slots=True)
class StreamWriter(Generic[S]):
    """Appends to one stream, keeping its folded state, under one conflict policy.

    `store` is where `open`, `append` and `catch_up` (the synchronous conveniences) go;
    a driver that reaches the store another way runs the `*_steps` generators itself.
    `snapshot_every` (None: never) is how many events pass before `snapshot_due`;
    `snapshot_seq` is the seq of the latest snapshot known (the one the replay started
    from, or the last one asked for; -1: none).
    """

    store: EventStore | None
    stream: str
    fold: Fold[S]
    on_conflict: ConflictPolicy
    state: S = field(default=None)  # type: ignore[assignment]
    snapshot_every: int | None = None
    snapshot_seq: int = -1

    def __post_init__(self) -> None:
        if self.state is None:
            self.state = self.fold.new()

    @property
    def next_seq(self) -> int:
        """The seq the next appended event takes."""
        return int(self.state.next_seq)  # type: ignore[attr-defined]

    def event(self, cls: type[EventBase], at: float, offset: int = 0, **fields: Any) -> Any:
        """The next event of this stream (built, not appended): seq, id and time filled in."""
        seq = self.state.next_seq + offset  # type: ignore[attr-defined]
        return cls(stream=self.stream, seq=seq, id=new_id(at), at=at, **fields)

    # -- the protocol, sans I/O --------------------------------------------------------------

    def open_steps(self) -> Generator[StoreRequest, Any, S]:
        """Replay the stream into a fresh state (from its latest valid snapshot, if any)."""
        request = Replay(self.stream, self.fold)
        self.state = yield request
        self.snapshot_seq = request.loaded
        return self.state

    def snapshot_due(self) -> bool:
        """Whether `snapshot_every` events have passed since the latest snapshot known."""
        every = self.snapshot_every
        return (
            every is not None
            and self.fold.snapshots is not None
            and self.state.next_seq - 1 - self.snapshot_seq >= every  # type: ignore[attr-defined]
        )

    def snapshot_request(self) -> SaveSnapshot[S]:
        """The request that writes a snapshot of the current state (a copy of it, so the
        driver may encode it elsewhere); it counts as the latest snapshot from now on."""
        codec = self.fold.snapshots
        if codec is None:
            raise RuntimeError(f"the {self.fold.name} fold takes no snapshots")
        seq = self.state.next_seq - 1  # type: ignore[attr-defined]
        self.snapshot_seq = seq
        return SaveSnapshot(self.stream, seq, codec.copy(self.state), codec)

    def catch_up_steps(self) -> Generator[StoreRequest, Any, list[Event]]:
        """Fold in whatever other writers appended since this writer last looked."""
        newer = yield ReadAfter(self.stream, self.next_seq - 1)
        self.took(newer)
        return newer

    def append_steps(
        self, build: Build[S] | Sequence[EventBase]
    ) -> Generator[StoreRequest, Any, list[EventBase]]:
        """Append what `build(state)` makes (or the given events), under the conflict policy.

        Returns the events appended (none when `build` made none). Given events (not a
        function) cannot be rebuilt: a conflict that the policy would retry re-raises the
        `ConcurrencyError` instead.
        """
        events = list(build(self.state) if callable(build) else build)
        if not events:
            return []
        try:
            yield self.request(events)
        except ConcurrencyError as conflict:
            return (yield from self.retry_steps(build, conflict))
        self.took(events)
        return events

    def request(self, events: Sequence[EventBase]) -> Append:
        """The first try of appending `events`, built from the current state (a caller on
        a hot path yields it itself, then calls `took`, or `retry_steps` on a conflict)."""
        return Append(self.stream, events, self.state.next_seq)  # type: ignore[attr-defined]

    def took(self, events: Iterable[Event]) -> None:
        """The store took `events` (or another writer appended them): fold them in."""
        evolve_one, state = self.fold.evolve, self.state
        for event in events:
            evolve_one(state, event)

    def retry_steps(
        self, build: Build[S] | Sequence[EventBase], conflict: ConcurrencyError
    ) -> Generator[StoreRequest, Any, list[EventBase]]:
        """After `conflict` (another writer appended first): what the policy says, then the
        append tried again with events built anew, `tries` tries in all."""
        tries = self.on_conflict.tries
        for attempt in range(1, tries + 1):
            newer = yield ReadAfter(self.stream, self.next_seq - 1)
            self.on_conflict.resolve(self.stream, newer)  # raises to stop this writer
            self.took(newer)
            if not callable(build):
                raise conflict
            if attempt == tries:
                break
            events = list(build(self.state))
            if not events:
                return []
            try:
                yield Append(self.stream, events, self.next_seq)
            except ConcurrencyError as again:
                conflict = again
                continue
            self.took(events)
            return events
        raise Contention(f"stream {self.stream!r}: other writers got there first {tries} times")

    # -- the synchronous conveniences --------------------------------------------------------

    def open(self) -> S:
        """`open_steps` on this writer's store."""
        return drive(self.open_steps(), self._store())

    def catch_up(self) -> list[Event]:
        """`catch_up_steps` on this writer's store."""
        return drive(self.catch_up_steps(), self._store())

    def append(self, build: Build[S] | Sequence[EventBase]) -> list[EventBase]:
        """`append_steps` on this writer's store."""
        return drive(self.append_steps(build), self._store())

    def record(self, cls: type[EventBase], at: float, **fields: Any) -> Any:
        """Build one event at `at` from the current state, append it, and return it."""
        [event] = self.append(lambda _state: [self.event(cls, at, **fields)])
        return event

    def _store(self) -> EventStore:
        if self.store is None:
            raise RuntimeError(f"the writer of {self.stream!r} has no store of its own")
        return self.store
