"""Prometheus metrics: what a store says, and what a supervising process does.

Theory of operation. There are two sources of numbers, and each is exposed by its own
collector (a `prometheus_client` custom collector, registered in a `CollectorRegistry` of
the process's own, never the library's global one):

- **The store's facts** (`StoreCollector`). The log is the record, so every number that is
  a fact of the log is derived from it on each scrape, by one pure function
  (`store_facts`) over what a store holds: the streams by kind and state (the state as
  `flashfsm ls` gives it: `flashfsm.cli.store.stream_row`), job verdicts by rule and
  failure, run results by failure, the errors the watches recorded by kind, takeovers
  (a job's watch passing to another watcher), the open-streams index's leases and live
  replicas, how far the open jobs' snapshots lag their logs, and the money billed and
  wasted by cause (the ledgers `flashfsm cost` prints: `flashfsm.postmortem.ledger`). So a scrape
  equals what `ls`, `ls --owner` and `cost --json` say of the same store, whichever
  process serves it, and a replica that restarts loses no count. `read_store_facts` reads
  a store for it read-only, as every reader does; reads never write.
- **The process's own doings** (`ReplicaCollector`), which no log records: how late each
  status poll ran against its due time (`LagHistogram`, which the replica's `Supervisor`
  feeds through its `lag_observer`: a bisect and two additions per poll, no lock), and a
  fleet replica's counters (`FleetStats`: claims, releases, leases lost, watches finished
  and failed, failed renewals) and the streams it holds now.

Cost. A scrape of the store's facts reads the whole store, as `ls` and `cost` do, in the
scraping thread; `StoreCollector(max_age_s=...)` serves facts read less than `max_age_s`
ago (10 s by default: `STORE_FACTS_MAX_AGE_S`) without reading again, so scrapers that ask
often cost one read per `max_age_s`. A read that fails is `flashfsm_store_up 0`, and the
store's other metrics are left out of that scrape.

Labels. No label holds a stream name, an error message or any other outside text: a
state, a rule, a failure kind, a cause, an event kind, an exception's class name (one that
is not a plain identifier is counted as `other`) and an HTTP status are all bounded sets.
`serve_metrics` serves a registry over HTTP (`prometheus_client.start_http_server`);
`metrics_app` gives it as an ASGI app to mount (`prometheus_client.make_asgi_app`).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector, make_asgi_app
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from flashfsm.adapters.stores import open_store
from flashfsm.cli.store import stream_row
from flashfsm.events.errors import CorruptLogError, EventDecodeError
from flashfsm.events.models import Event
from flashfsm.events.store import CLOSED_BY, OpenStream, Replica, capabilities
from flashfsm.fsm.snapshot import FOLD_VERSION
from flashfsm.postmortem.ledger import CAUSES, WASTE_CAUSES, Ledger, newest, store_ledgers

if TYPE_CHECKING:
    from flashfsm.fleet import Fleet

logger = logging.getLogger("flashfsm.metrics")

#: How long a scrape may be served the store's facts read by an earlier one (seconds).
STORE_FACTS_MAX_AGE_S = 10.0
#: The upper bounds of the poll-lag histogram's buckets (seconds).
POLL_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
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

#: A fleet replica's counters: (metric, `FleetStats` field, help).
REPLICA_COUNTERS = (
    ("flashfsm_replica_claims", "claimed", "Streams this replica claimed."),
    (
        "flashfsm_replica_releases",
        "released",
        "Leases this replica gave back (rebalancing, draining).",
    ),
    (
        "flashfsm_replica_leases_lost",
        "lost",
        "Streams this replica lost to another (a lease not renewed, a newer watch).",
    ),
    ("flashfsm_replica_finished", "finished", "Watches this replica drove to their verdict."),
    (
        "flashfsm_replica_watch_failures",
        "failed",
        "Watches that failed as they started (a damaged log, a run it cannot deploy).",
    ),
    (
        "flashfsm_replica_renew_failures",
        "renew_failures",
        "Heartbeats or lease renewals the store did not answer.",
    ),
)

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

    Pure: it reads no clock (lease times are the index's, by the database's clock)."""
    streams: Counter[tuple[str, str]] = Counter()
    open_: Counter[tuple[str, str]] = Counter()
    verdicts: Counter[tuple[str, str]] = Counter()
    results: Counter[str] = Counter()
    open_jobs: list[str] = []
    for name, events in logs.items():
        row = stream_row(name, list(events))
        kind = row["kind"]
        state = SWEEPING if kind == "sweeper" else str(row["state"])
        streams[kind, state] += 1
        if kind == "sweeper":
            continue
        if row["ok"] is None:
            open_[kind, state] += 1
            if kind == "job":
                open_jobs.append(name)
        elif kind == "job":
            verdicts[str(row["rule"]), _failure(row["failure"])] += 1
        else:
            results[_failure(row["failure"])] += 1
    errors, takeovers = _recorded(logs)
    leases, remaining, expired = _leases(open_streams)
    snap_states, lag = _snapshots(logs, open_jobs, snapshots)
    money = _money(store_ledgers(logs, price_per_hour))
    return StoreFacts(
        streams=dict(streams),
        open_streams=dict(open_),
        verdicts=dict(verdicts),
        run_results=dict(results),
        errors=errors,
        takeovers=takeovers,
        damaged=damaged,
        newest_at=newest(*logs.values()),
        replicas=None if replicas is None else len(replicas),
        leases=leases,
        lease_min_remaining_s=remaining,
        lease_max_expired_s=expired,
        snapshots=snap_states,
        snapshot_max_lag=lag,
        **money,
    )


def _failure(failure: Any) -> str:
    return NONE if failure is None else str(failure)


def error_class_label(text: str | None) -> str:
    """An exception's class name as a label value: itself when it is a plain identifier
    (dots allowed, at most 64 characters), else "other" (never outside text)."""
    if text and _CLASS.fullmatch(text):
        return text
    return "other"


def _recorded(logs: Mapping[str, Sequence[Event]]) -> tuple[dict[tuple[str, str, str], int], int]:
    """The errors recorded in `logs` by (event kind, class, HTTP status), and the takeovers:
    job watches (`WatchStarted`) whose watcher is not the previous watch's."""
    errors: Counter[tuple[str, str, str]] = Counter()
    takeovers = 0
    for events in logs.values():
        watcher: str | None = None
        for event in events:
            kind = event.kind
            where = ERROR_EVENTS.get(kind)
            if where == "error_class":
                status = getattr(event, "http_status", None)
                label = error_class_label(getattr(event, "error_class", None))
                errors[kind, label, NONE if status is None else str(status)] += 1
            elif where == "read_error":
                text = getattr(event, "read_error", None)
                if text is not None:
                    match = _READ_ERROR.match(text)
                    name = match.group(1) if match else None
                    code = match.group(2) if match else None
                    errors[kind, error_class_label(name), code or NONE] += 1
            elif kind == "WatchStarted":
                now_watching = event.watcher  # type: ignore[union-attr]
                if watcher is not None and now_watching != watcher:
                    takeovers += 1
                watcher = now_watching
    return dict(errors), takeovers


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
    logs: Mapping[str, Sequence[Event]],
    open_jobs: Iterable[str],
    snapshots: Mapping[str, tuple[int, int]] | None,
) -> tuple[dict[str, int] | None, int | None]:
    """The open job streams by snapshot state, and the most events a replay of one folds
    past its snapshot (its whole log when it has none of this library's fold version)."""
    if snapshots is None:
        return None, None
    states = dict.fromkeys(SNAPSHOT_STATES, 0)
    lag = 0
    for name in open_jobs:
        head = logs[name][-1].seq
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
        snapshots = _read_snapshots(store, logs)
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


def _read_snapshots(
    store: Any, logs: Mapping[str, Sequence[Event]]
) -> dict[str, tuple[int, int]] | None:
    """`(seq, version)` of the snapshot of each stream of `logs` whose last event is no
    verdict (the open job streams among them), or None when the store keeps none."""
    caps = capabilities(store)
    if caps.bulk_reads is None and caps.snapshots is None:
        return None
    names = [n for n, ev in logs.items() if ev[-1].kind not in CLOSED_BY]
    if caps.bulk_reads is not None:
        kept = caps.bulk_reads.load_snapshots(names)
    else:
        assert caps.snapshots is not None
        kept = {n: got for n in names if (got := caps.snapshots.load_snapshot(n)) is not None}
    return {name: (int(seq), int(version)) for name, (seq, version, _body) in kept.items()}


def _stamped(facts: StoreFacts, at: float, took: float) -> StoreFacts:
    return replace(facts, read_at=at, read_s=took)


# --- the collectors ---------------------------------------------------------------------------


class StoreCollector(Collector):
    """The store's facts as metrics: `facts()` is called on a scrape (in the scraping
    thread), at most once per `max_age_s` (a scrape sooner is served the last facts read).
    A `facts()` that raises is `flashfsm_store_up 0`, and nothing else of the store."""

    def __init__(
        self,
        facts: Callable[[], StoreFacts],
        *,
        max_age_s: float = STORE_FACTS_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.facts = facts
        self.max_age_s = max_age_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, StoreFacts] | None = None

    def current(self) -> StoreFacts:
        """The facts to expose now: the last ones read, if younger than `max_age_s`, else
        freshly read (one read at a time, however many scrapes ask)."""
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last[0] < self.max_age_s:
                return self._last[1]
            facts = self.facts()
            self._last = (now, facts)
            return facts

    def collect(self) -> Iterator[Metric]:
        """The metric families of the store's facts (Prometheus calls this on each scrape)."""
        try:
            facts = self.current()
        except Exception as exc:  # an unreachable store is a metric, not a failed scrape
            logger.warning("metrics: the store could not be read (%s)", type(exc).__name__)
            yield _gauge("flashfsm_store_up", "Whether the last read of the store worked.", 0)
            return
        yield _gauge("flashfsm_store_up", "Whether the last read of the store worked.", 1)
        yield from facts_metrics(facts)


def _gauge(name: str, doc: str, value: float, unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value, unit=unit)


def _labelled(
    family: GaugeMetricFamily | CounterMetricFamily, rows: Mapping[Any, float]
) -> GaugeMetricFamily | CounterMetricFamily:
    for key, value in sorted(rows.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def facts_metrics(facts: StoreFacts) -> Iterator[Metric]:
    """The metric families of `facts` (see docs/fleet.md, "Metrics", for each one)."""
    if facts.read_at is not None:
        yield _gauge(
            "flashfsm_store_read_timestamp_seconds",
            "When the store's facts were read (Unix time): scrapes within the collector's "
            "max age are served the same read.",
            facts.read_at,
        )
    if facts.read_s is not None:
        yield _gauge(
            "flashfsm_store_read_seconds", "How long reading the store's facts took.", facts.read_s
        )
    if facts.newest_at is not None:
        yield _gauge(
            "flashfsm_store_newest_event_timestamp_seconds",
            "The time of the store's newest event (Unix time, by its writer's clock).",
            facts.newest_at,
        )
    yield _gauge(
        "flashfsm_damaged_streams",
        "Streams skipped because an event of theirs cannot be read (see flashfsm ls).",
        facts.damaged,
    )
    yield _labelled(
        GaugeMetricFamily(
            "flashfsm_streams",
            "Streams of the store by kind (job, run, sweeper) and state, as flashfsm ls "
            "lists them.",
            labels=["kind", "state"],
        ),
        facts.streams,
    )
    yield _labelled(
        GaugeMetricFamily(
            "flashfsm_open_streams",
            "Job and run streams with no verdict or result yet, by kind and state.",
            labels=["kind", "state"],
        ),
        facts.open_streams,
    )
    yield _labelled(
        CounterMetricFamily(
            "flashfsm_job_verdicts",
            "Job verdicts recorded, by the rule that reached them and the failure kind "
            "(none: a success).",
            labels=["rule", "failure"],
        ),
        facts.verdicts,
    )
    yield _labelled(
        CounterMetricFamily(
            "flashfsm_run_results",
            "Run results recorded, by failure kind (none: a success).",
            labels=["failure"],
        ),
        facts.run_results,
    )
    yield _labelled(
        CounterMetricFamily(
            "flashfsm_errors",
            "Failed calls recorded in the logs, by the event that records them, the "
            "exception's class and the HTTP status (none: no status).",
            labels=["event", "error_class", "http_status"],
        ),
        facts.errors,
    )
    yield CounterMetricFamily(
        "flashfsm_takeovers",
        "Job watches started by another watcher than the stream's previous one (a replica "
        "taking over a dead, paused or draining replica's stream, or a rebalance).",
        value=facts.takeovers,
    )
    if facts.replicas is not None:
        yield _gauge(
            "flashfsm_replicas", "Live fleet replicas (an unexpired heartbeat).", facts.replicas
        )
    if facts.leases is not None:
        yield _labelled(
            GaugeMetricFamily(
                "flashfsm_leases",
                "Handed-off streams by lease: held (unexpired), expired (not yet claimed "
                "again), free (never claimed, or given back), failed (marked failed to start).",
                labels=["state"],
            ),
            facts.leases,
        )
    if facts.lease_min_remaining_s is not None:
        yield _gauge(
            "flashfsm_lease_min_remaining_seconds",
            "The least time a held lease has left before it expires (by the database's "
            "clock): it sinks toward 0 when renewals are late.",
            facts.lease_min_remaining_s,
        )
    if facts.lease_max_expired_s is not None:
        yield _gauge(
            "flashfsm_lease_max_expired_seconds",
            "The longest time an expired lease has lain unclaimed: how long the stalest "
            "stream has gone unwatched since its owner stopped renewing.",
            facts.lease_max_expired_s,
        )
    if facts.snapshots is not None:
        yield _labelled(
            GaugeMetricFamily(
                "flashfsm_snapshots",
                "Open job streams by snapshot: current (this library's fold version), "
                "other_version (ignored: replayed in full), none.",
                labels=["state"],
            ),
            facts.snapshots,
        )
    if facts.snapshot_max_lag is not None:
        yield _gauge(
            "flashfsm_snapshot_max_lag_events",
            "The most events a reattach to an open job stream folds past its snapshot "
            "(its whole log when it has no usable snapshot).",
            facts.snapshot_max_lag,
        )
    yield _labelled(
        GaugeMetricFamily(
            "flashfsm_billed_seconds",
            "Billed worker seconds by cause, every attempt (as flashfsm cost).",
            labels=["cause"],
        ),
        facts.billed_s,
    )
    yield _labelled(
        GaugeMetricFamily(
            "flashfsm_billed_dollars",
            "Money billed by cause, over the attempts with a price (as flashfsm cost).",
            labels=["cause"],
        ),
        facts.billed_dollars,
    )
    yield _labelled(
        GaugeMetricFamily(
            "flashfsm_wasted_dollars",
            "Money billed for work thrown away (stall, preempted, failed), by cause.",
            labels=["cause"],
        ),
        facts.wasted_dollars,
    )
    yield _gauge(
        "flashfsm_unpriced_attempts",
        "Billed attempts without a price (a bare job log): their money is in no dollar metric.",
        facts.unpriced_attempts,
    )
    yield _gauge(
        "flashfsm_open_bills",
        "Attempts whose worker is still billing: no release, teardown or reap recorded.",
        facts.open_bills,
    )
    yield _gauge(
        "flashfsm_open_bills_dollars_per_hour",
        "What the priced open bills accrue per hour, together.",
        facts.open_bills_dollars_per_hour,
    )


class LagHistogram:
    """How late each status poll ran against its due time, in histogram buckets
    (`POLL_LAG_BUCKETS`). `observe` is called by the supervisor's loop on every poll (its
    `lag_observer`): a bisect and two additions, no lock. A scrape reads the counts from
    another thread; it may miss the poll being observed at that moment, never count one
    twice."""

    def __init__(self, bounds: Sequence[float] = POLL_LAG_BUCKETS):
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        """Count one poll that ran `seconds` after it was due."""
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def family(self) -> HistogramMetricFamily:
        """The histogram as a metric family (cumulative buckets, as Prometheus reads them)."""
        counts, total = list(self.counts), self.total
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), running))
        return HistogramMetricFamily(
            "flashfsm_poll_lag_seconds",
            "How late each status poll of this process ran after it was due.",
            buckets=buckets,
            sum_value=total,
        )


class ReplicaCollector(Collector):
    """What this process does: its poll lag (`lag`, when given) and, for a fleet replica
    (`fleet`, when given), its counters (`FleetStats`) and the streams it holds now."""

    def __init__(self, fleet: Fleet | None = None, lag: LagHistogram | None = None):
        self.fleet = fleet
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        """The metric families of this process (Prometheus calls this on each scrape)."""
        if self.lag is not None:
            yield self.lag.family()
        fleet = self.fleet
        if fleet is None:
            return
        info = GaugeMetricFamily(
            "flashfsm_replica_info", "This process's fleet replica, by name.", labels=["owner"]
        )
        info.add_metric([fleet.owner], 1)
        yield info
        yield _gauge(
            "flashfsm_replica_streams_held", "Streams this replica holds now.", len(fleet.held)
        )
        for name, stat, doc in REPLICA_COUNTERS:
            yield CounterMetricFamily(name, doc, value=getattr(fleet.stats, stat))


# --- registries and serving -------------------------------------------------------------------


def metrics_registry(
    store_url: str | None = None,
    *,
    fleet: Fleet | None = None,
    lag: LagHistogram | None = None,
    max_age_s: float = STORE_FACTS_MAX_AGE_S,
    process: bool = True,
) -> CollectorRegistry:
    """A registry of this process's own (never the global one) with the facts of the store at
    `store_url` (read read-only on a scrape, at most once per `max_age_s`), this process's
    replica metrics (`fleet`, `lag`) and, with `process`, its CPU and memory
    (`prometheus_client.ProcessCollector`: `process_*`)."""
    registry = CollectorRegistry(auto_describe=False)
    if store_url is not None:
        url = store_url
        registry.register(StoreCollector(lambda: read_store_facts(url), max_age_s=max_age_s))
    if fleet is not None or lag is not None:
        registry.register(ReplicaCollector(fleet, lag))
    if process:
        ProcessCollector(registry=registry)
    return registry


def metrics_app(registry: CollectorRegistry) -> Callable[..., Any]:
    """The registry's scrape endpoint as an ASGI app (`prometheus_client.make_asgi_app`),
    for a web app to mount at /metrics."""
    return make_asgi_app(registry)


@dataclass
class MetricsServer:
    """A registry served over HTTP in a thread (`serve_metrics`); `close()` stops it."""

    host: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """Where to scrape it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(
    registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0
) -> MetricsServer:
    """Serve `registry` on `host`:`port` (0: a free port) in a daemon thread, with
    `prometheus_client.start_http_server`. Raises `OSError` when the address cannot be
    bound (in use, not this host's)."""
    server, thread = _start_http_server(port, addr=host, registry=registry)
    return MetricsServer(host, int(server.server_address[1]), server, thread)


__all__ = [
    "ERROR_EVENTS",
    "POLL_LAG_BUCKETS",
    "STORE_FACTS_MAX_AGE_S",
    "LagHistogram",
    "MetricsServer",
    "ReplicaCollector",
    "StoreCollector",
    "StoreFacts",
    "facts_metrics",
    "metrics_app",
    "metrics_registry",
    "read_store_facts",
    "serve_metrics",
    "store_facts",
]
