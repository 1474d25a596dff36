"""What a store says, counted: the facts `flashfsm.metrics` exposes, and how they are read.

Theory of operation. The log is the record, so every number that is a fact of the log is
derived from it, by one pure function (`store_facts`) over what a store holds: the streams
by kind and state (the state as `flashfsm ls` gives it: `flashfsm.display.listing.stream_row`),
job verdicts by rule and failure, run results by failure, the errors the watches recorded by
kind, takeovers (a job's watch passing to another watcher), the open-streams index's leases
and live replicas, how far the open jobs' snapshots lag their logs, and the money billed and
wasted by cause (the ledgers `flashfsm cost` prints: `flashfsm.postmortem.ledger`).
`store_facts` is the sum (`facts_of`) of one part per stream (`stream_tally`, which a
stream's new events extend) and of the store's ledgers, so a reader that keeps the streams
current (the web view's index, `flashfsm.ui.index.StoreIndex.facts`) gives the same facts
without reading the store again. `read_store_facts` reads a store for them read-only, as
every reader does; reads never write.

Labels. No fact is keyed by a stream name, an error message or any other outside text: a
state, a rule, a failure kind, a cause, an event kind, an exception's class name (one that
is not a plain identifier is counted as `other`) and an HTTP status are all bounded sets.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flashfsm.adapters.stores import open_store
from flashfsm.display.listing import stream_row
from flashfsm.events.errors import CorruptLogError, EventDecodeError
from flashfsm.events.models import Event
from flashfsm.events.store import CLOSED_BY, OpenStream, Replica, capabilities
from flashfsm.fsm.snapshot import FOLD_VERSION
from flashfsm.postmortem.ledger import CAUSES, WASTE_CAUSES, Ledger, store_ledgers

#: The events whose fields record a failed call, and where the error's class is: the
#: `error_class` field, or the first word of the `read_error` text ("Class HTTP code: …").
ERROR_EVENTS: Mapping[str, str] = {
    "StatusFetchFailed": "error_class",
    "HealthProbeFailed": "error_class",
    "DeployFailed": "error_class",
    "SubmitFailed": "error_class",
    "HeartbeatObserved": "read_error",
    "WorkerObserved": "read_error",
    "WorkerLogObserved": "read_error",
}
#: The label value of a failure kind, an HTTP status or a snapshot when there is none.
NONE = "none"
#: The state label of a sweeper's stream (which never concludes; `ls` shows how many
#: endpoints it reaped, a number that would make a new series at every reap).
SWEEPING = "sweeping"
#: The lease states of a handed-off stream (`flashfsm_leases`).
LEASE_STATES = ("held", "expired", "free", "failed")
#: The snapshot states of an open job stream (`flashfsm_snapshots`).
SNAPSHOT_STATES = ("current", "other_version", NONE)


_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
_READ_ERROR = re.compile(r"([^\s:]+)(?: HTTP (\d{3}))?")


# --- the store's facts (pure) -----------------------------------------------------------------


@dataclass(frozen=True)
class StoreFacts:
    """What a store says, counted: every number `StoreCollector` exposes of it.

    A field that is None is one the store cannot say (no open-streams index: `replicas`,
    `leases`; no snapshots: `snapshots`): its metric is left out, never shown as zero.
    """

    #: every stream, by (kind, state): the kind and state `flashfsm ls` lists
    streams: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: the job and run streams with no verdict or result yet, by (kind, state)
    open_streams: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: job verdicts by (rule, failure kind or "none")
    verdicts: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: run results by failure kind (or "none")
    run_results: Mapping[str, int] = field(default_factory=dict)
    #: recorded errors by (event kind, exception class, HTTP status or "none")
    errors: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    #: job watches started by another watcher than the stream's previous one
    takeovers: int = 0
    #: streams skipped because an event of theirs cannot be read
    damaged: int = 0
    #: the newest event's time (Unix seconds), None for an empty store
    newest_at: float | None = None
    #: live replicas (an unexpired heartbeat)
    replicas: int | None = None
    #: handed-off streams by lease state (`LEASE_STATES`)
    leases: Mapping[str, int] | None = None
    #: the least time a held lease has left, by the database's clock (None: none held)
    lease_min_remaining_s: float | None = None
    #: the longest time an expired lease has lain unclaimed (None: none expired)
    lease_max_expired_s: float | None = None
    #: open job streams by snapshot state (`SNAPSHOT_STATES`)
    snapshots: Mapping[str, int] | None = None
    #: the most events a replay of an open job stream folds past its snapshot
    snapshot_max_lag: int | None = None
    #: billed seconds by cause (every attempt, priced or not)
    billed_s: Mapping[str, float] = field(default_factory=dict)
    #: money billed by cause, over the attempts that have a price
    billed_dollars: Mapping[str, float] = field(default_factory=dict)
    #: money thrown away by cause (`flashfsm.postmortem.ledger.WASTE_CAUSES`), priced attempts
    wasted_dollars: Mapping[str, float] = field(default_factory=dict)
    #: billed attempts without a price (their money is in no dollar figure)
    unpriced_attempts: int = 0
    #: attempts whose worker is still billing (no stop recorded)
    open_bills: int = 0
    #: what the priced open bills accrue per hour, together
    open_bills_dollars_per_hour: float = 0.0
    #: when the facts were read (Unix seconds) and how long the read took
    read_at: float | None = None
    read_s: float | None = None


@dataclass(frozen=True, slots=True)
class StreamTally:
    """One readable stream's part of the store's facts: how `flashfsm ls` lists it, and what
    its events record (errors, takeovers). `stream_tally` makes it from a stream's events,
    or extends one by the events appended since; `facts_of` adds a store's tallies up. A
    live reader (the web view's index) keeps one per stream and reads each event once."""

    #: the kind and state `flashfsm ls` lists (a sweeper's state: `SWEEPING`)
    kind: str
    state: str
    #: a job or run with no verdict or result yet (never a sweeper)
    open: bool
    #: a job's verdict rule (None: no verdict) and the failure kind of its verdict or of a
    #: run's result ("none": a success or none yet)
    rule: str | None
    failure: str
    #: the seq and time of the stream's last event
    head: int
    last_at: float
    #: errors recorded, by (event kind, exception class, HTTP status or "none")
    errors: Mapping[tuple[str, str, str], int]
    #: job watches started by another watcher than the previous watch's
    takeovers: int
    #: the watcher of the stream's last `WatchStarted` (None: none yet)
    watcher: str | None


def stream_tally(
    row: Mapping[str, Any], events: Sequence[Event], before: StreamTally | None = None
) -> StreamTally:
    """A stream's tally: `row` is `ls`'s row of the whole stream (`stream_row`), `events`
    are its events (with `before`, the tally of what came earlier: only those after it).
    Pure."""
    kind = str(row["kind"])
    errors: Counter[tuple[str, str, str]] = Counter(before.errors if before else {})
    takeovers = before.takeovers if before else 0
    watcher = before.watcher if before else None
    for event in events:
        kind_ = event.kind
        where = ERROR_EVENTS.get(kind_)
        if where == "error_class":
            status = getattr(event, "http_status", None)
            label = error_class_label(getattr(event, "error_class", None))
            errors[kind_, label, NONE if status is None else str(status)] += 1
        elif where == "read_error":
            text = getattr(event, "read_error", None)
            if text is not None:
                match = _READ_ERROR.match(text)
                name = match.group(1) if match else None
                code = match.group(2) if match else None
                errors[kind_, error_class_label(name), code or NONE] += 1
        elif kind_ == "WatchStarted":
            now_watching = event.watcher  # type: ignore[union-attr]
            if watcher is not None and now_watching != watcher:
                takeovers += 1
            watcher = now_watching
    last = events[-1] if events else None
    return StreamTally(
        kind=kind,
        state=SWEEPING if kind == "sweeper" else str(row["state"]),
        open=kind != "sweeper" and row["ok"] is None,
        rule=None if row.get("rule") is None else str(row["rule"]),
        failure=_failure(row.get("failure")),
        head=last.seq if last is not None else (before.head if before else -1),
        last_at=last.at if last is not None else (before.last_at if before else 0.0),
        errors=dict(errors),
        takeovers=takeovers,
        watcher=watcher,
    )


def store_facts(
    logs: Mapping[str, Sequence[Event]],
    *,
    open_streams: Sequence[OpenStream] | None = None,
    replicas: Sequence[Replica] | None = None,
    snapshots: Mapping[str, tuple[int, int]] | None = None,
    damaged: int = 0,
    price_per_hour: float | None = None,
) -> StoreFacts:
    """The facts of a store that holds `logs` (stream name to events, every readable stream),
    the open-streams index `open_streams` and the live `replicas` (None: a store without an
    index), and `snapshots` (stream to the `(seq, fold version)` of its snapshot; None: a
    store that keeps none). `damaged` counts the streams that could not be read. Bare job
    logs are priced at `price_per_hour` (None: their money is unknown), as `cost --price`.

    The tallies of the streams (`stream_tally`) and the ledgers of the store, added up by
    `facts_of`. Pure: it reads no clock (lease times are the index's, by the database's
    clock)."""
    tallies = {
        name: stream_tally(stream_row(name, list(events)), events) for name, events in logs.items()
    }
    return facts_of(
        tallies,
        store_ledgers(logs, price_per_hour),
        open_streams=open_streams,
        replicas=replicas,
        snapshots=snapshots,
        damaged=damaged,
    )


def facts_of(
    tallies: Mapping[str, StreamTally],
    ledgers: Sequence[Ledger],
    *,
    open_streams: Sequence[OpenStream] | None = None,
    replicas: Sequence[Replica] | None = None,
    snapshots: Mapping[str, tuple[int, int]] | None = None,
    damaged: int = 0,
) -> StoreFacts:
    """The facts of a store from the tally of each readable stream (by name) and the ledger
    of each run and of each job no run queued (`flashfsm.postmortem.ledger.store_ledgers`),
    with its index, replicas, snapshots and damaged streams as `store_facts` takes them.
    Pure."""
    streams: Counter[tuple[str, str]] = Counter()
    open_: Counter[tuple[str, str]] = Counter()
    verdicts: Counter[tuple[str, str]] = Counter()
    results: Counter[str] = Counter()
    errors: Counter[tuple[str, str, str]] = Counter()
    takeovers = 0
    open_jobs: dict[str, int] = {}
    newest_at: float | None = None
    for name, tally in tallies.items():
        kind, state = tally.kind, tally.state
        streams[kind, state] += 1
        errors.update(tally.errors)
        takeovers += tally.takeovers
        newest_at = tally.last_at if newest_at is None else max(newest_at, tally.last_at)
        if kind == "sweeper":
            continue
        if tally.open:
            open_[kind, state] += 1
            if kind == "job":
                open_jobs[name] = tally.head
        elif kind == "job":
            verdicts[str(tally.rule), tally.failure] += 1
        else:
            results[tally.failure] += 1
    leases, remaining, expired = _leases(open_streams)
    snap_states, lag = _snapshots(open_jobs, snapshots)
    return StoreFacts(
        streams=dict(streams),
        open_streams=dict(open_),
        verdicts=dict(verdicts),
        run_results=dict(results),
        errors=dict(errors),
        takeovers=takeovers,
        damaged=damaged,
        newest_at=newest_at,
        replicas=None if replicas is None else len(replicas),
        leases=leases,
        lease_min_remaining_s=remaining,
        lease_max_expired_s=expired,
        snapshots=snap_states,
        snapshot_max_lag=lag,
        **_money(ledgers),
    )


def _failure(failure: Any) -> str:
    return NONE if failure is None else str(failure)


def error_class_label(text: str | None) -> str:
    """An exception's class name as a label value: itself when it is a plain identifier
    (dots allowed, at most 64 characters), else "other" (never outside text)."""
    if text and _CLASS.fullmatch(text):
        return text
    return "other"


def _leases(
    rows: Sequence[OpenStream] | None,
) -> tuple[dict[str, int] | None, float | None, float | None]:
    """The handed-off streams of the index (`rows`; a run's attempts, leased with their run,
    and streams watched by their opener are left out) by lease state, the least time a
    held lease has left, and the longest an expired one has lain unclaimed."""
    if rows is None:
        return None, None, None
    states = dict.fromkeys(LEASE_STATES, 0)
    remaining: float | None = None
    expired: float | None = None
    for row in rows:
        if not row.handoff or row.parent is not None:
            continue
        if row.failed is not None:
            states["failed"] += 1
        elif row.held:
            states["held"] += 1
            left = float(row.expires_in)  # type: ignore[arg-type]
            remaining = left if remaining is None else min(remaining, left)
        elif row.owner is not None and row.expires_in is not None:
            states["expired"] += 1
            ago = -row.expires_in
            expired = ago if expired is None else max(expired, ago)
        else:
            states["free"] += 1
    return states, remaining, expired


def _snapshots(
    open_jobs: Mapping[str, int], snapshots: Mapping[str, tuple[int, int]] | None
) -> tuple[dict[str, int] | None, int | None]:
    """The open job streams (name to the seq of its last event) by snapshot state, and the
    most events a replay of one folds past its snapshot (its whole log when it has none of
    this library's fold version)."""
    if snapshots is None:
        return None, None
    states = dict.fromkeys(SNAPSHOT_STATES, 0)
    lag = 0
    for name, head in open_jobs.items():
        kept = snapshots.get(name)
        if kept is None:
            states[NONE] += 1
            behind = head + 1
        elif kept[1] != FOLD_VERSION:
            states["other_version"] += 1
            behind = head + 1
        else:
            states["current"] += 1
            behind = max(0, head - kept[0])
        lag = max(lag, behind)
    return states, lag


def _money(ledgers: Sequence[Ledger]) -> dict[str, Any]:
    """Billed seconds and money by cause, the waste by cause and the open bills of
    `ledgers`, summed in the order `flashfsm cost` sums them."""
    attempts = [a for led in ledgers for a in led.attempts]
    billed_s = {c.value: sum((a.billed_seconds(c) for a in attempts), 0.0) for c in CAUSES}
    dollars = {
        c.value: sum(
            (m for a in attempts if a.billed_seconds(c) and (m := a.money(c)) is not None), 0.0
        )
        for c in CAUSES
    }
    wasted = {c.value: dollars[c.value] for c in CAUSES if c in WASTE_CAUSES}
    open_bills = [a for a in attempts if a.billing_open]
    return {
        "billed_s": billed_s,
        "billed_dollars": dollars,
        "wasted_dollars": wasted,
        "unpriced_attempts": sum(
            1 for a in attempts if a.billed_s > 0 and a.price_per_hour is None
        ),
        "open_bills": len(open_bills),
        "open_bills_dollars_per_hour": sum(
            (a.price_per_hour for a in open_bills if a.price_per_hour is not None), 0.0
        ),
    }


# --- reading a store for them ---------------------------------------------------------------


def read_store_facts(url: str, *, price_per_hour: float | None = None) -> StoreFacts:
    """The facts of the store at `url`, opened read-only (nothing is created or written):
    every stream read (a damaged one counted and skipped, as `ls` and `cost` skip it), its
    open-streams index and live replicas, and the snapshots of its open job streams, when
    the store keeps them. Raises what opening or listing the store raises."""
    started, clock = time.perf_counter(), time.time()
    store = open_store(url, read_only=True)
    try:
        logs: dict[str, list[Event]] = {}
        damaged = 0
        for name in store.streams():
            try:
                events = store.read(name)
            except (CorruptLogError, EventDecodeError):
                damaged += 1
                continue
            if events:
                logs[name] = events
        leases = capabilities(store).leases
        index = None if leases is None else leases.open_streams()
        replicas = None if leases is None else leases.replicas()
        # (the streams whose last event is no verdict: the open job streams among them)
        snapshots = read_snapshots(
            store, [n for n, ev in logs.items() if ev[-1].kind not in CLOSED_BY]
        )
    finally:
        store.close()
    facts = store_facts(
        logs,
        open_streams=index,
        replicas=replicas,
        snapshots=snapshots,
        damaged=damaged,
        price_per_hour=price_per_hour,
    )
    return _stamped(facts, clock, time.perf_counter() - started)


def read_snapshots(store: Any, names: Sequence[str]) -> dict[str, tuple[int, int]] | None:
    """`(seq, fold version)` of the snapshot of each of the streams `names` that has one, or
    None when the store keeps no snapshots (one query where the store reads in bulk)."""
    caps = capabilities(store)
    if caps.bulk_reads is None and caps.snapshots is None:
        return None
    if caps.bulk_reads is not None:
        kept = caps.bulk_reads.load_snapshots(list(names))
    else:
        assert caps.snapshots is not None
        kept = {n: got for n in names if (got := caps.snapshots.load_snapshot(n)) is not None}
    return {name: (int(seq), int(version)) for name, (seq, version, _body) in kept.items()}


def _stamped(facts: StoreFacts, at: float, took: float) -> StoreFacts:
    return replace(facts, read_at=at, read_s=took)
