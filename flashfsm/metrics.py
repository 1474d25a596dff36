"""Prometheus metrics: what a store says, and what a supervising process does.

Theory of operation. There are two sources of numbers, and each is exposed by its own
collector (a `prometheus_client` custom collector, registered in a `CollectorRegistry` of
the process's own, never the library's global one):

- **The store's facts** (`StoreCollector`): every number that is a fact of the log,
  counted by one pure function over what a store holds (`flashfsm.store_facts`: streams by
  kind and state as `flashfsm ls` gives them, verdicts, results, recorded errors, takeovers,
  leases and replicas, snapshot lag, money by cause as `flashfsm cost` bills it). So a
  scrape equals what `ls`, `ls --owner` and `cost --json` say of the same store, whichever
  process serves it, and a replica that restarts loses no count; the web view serves the
  same facts from its index without reading the store again.
- **The process's own doings** (`ReplicaCollector`), which no log records: how late each
  status poll ran against its due time (`LagHistogram`, which the replica's `Supervisor`
  feeds through its `lag_observer`: a bisect and two additions per poll, no lock), and a
  fleet replica's counters (`FleetStats`: claims, releases, leases lost, watches finished
  and failed, failed renewals) and the streams it holds now.

Cost. A scrape of `read_store_facts` reads the whole store, as `ls` and `cost` do, in the
scraping thread; `StoreCollector(max_age_s=...)` serves facts whose read ended less than
`max_age_s` ago (10 s by default: `STORE_FACTS_MAX_AGE_S`) without reading again, so
scrapers that ask often cost one read per `max_age_s`, however long a read takes. A read
that fails is `flashfsm_store_up 0`, and the store's other metrics are left out of that
scrape.

Labels. No label holds a stream name, an error message or any other outside text: a
state, a rule, a failure kind, a cause, an event kind, an exception's class name (one that
is not a plain identifier is counted as `other`) and an HTTP status are all bounded sets.

Serving. A scrape is a GET (or a HEAD); any other method is 405. `serve_metrics` serves a
registry over HTTP in threads of its own (wsgiref's server, a thread per request, around
`prometheus_client.make_wsgi_app`); `metrics_app` gives it as an ASGI app to mount, which
collects in a worker thread so a web app's event loop never waits for a scrape.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import math
import socket
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from flashfsm.store_facts import (
    ERROR_EVENTS,
    StoreFacts,
    StreamTally,
    facts_of,
    read_snapshots,
    read_store_facts,
    store_facts,
    stream_tally,
)

if TYPE_CHECKING:
    from flashfsm.fleet import Fleet

logger = logging.getLogger("flashfsm.metrics")

#: How long a scrape may be served the store's facts read by an earlier one (seconds).
STORE_FACTS_MAX_AGE_S = 10.0
#: The upper bounds of the poll-lag histogram's buckets (seconds).
POLL_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
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
        """The facts to expose now: the last ones read, if read (finished) less than
        `max_age_s` ago, else freshly read (one read at a time, however many scrapes ask)."""
        with self._lock:
            if self._last is not None and self.clock() - self._last[0] < self.max_age_s:
                return self._last[1]
            facts = self.facts()
            # (aged from the read's end: a read that takes longer than `max_age_s` is still
            # served again, and scrapers that ask often cost one read per `max_age_s`)
            self._last = (self.clock(), facts)
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
    yield from _read_metrics(facts)
    yield from _stream_metrics(facts)
    yield from _fleet_metrics(facts)
    yield from _cost_metrics(facts)


def _read_metrics(facts: StoreFacts) -> Iterator[Metric]:
    """The families of the read itself: when, how long, the newest event, damaged streams."""
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


def _stream_metrics(facts: StoreFacts) -> Iterator[Metric]:
    """The families of the streams: by kind and state, verdicts, results, errors, takeovers."""
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


def _fleet_metrics(facts: StoreFacts) -> Iterator[Metric]:
    """The families of a fleet's store: replicas, leases and snapshots (when it keeps them)."""
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


def _cost_metrics(facts: StoreFacts) -> Iterator[Metric]:
    """The families of the money: billed time and dollars, waste, unpriced and open bills."""
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

#: The methods a scrape endpoint answers (any other: 405).
SCRAPE_METHODS = ("GET", "HEAD")
_NOT_ALLOWED = b"405 Method Not Allowed: a scrape is a GET (or a HEAD)\n"


def metrics_registry(
    store_url: str | None = None,
    *,
    facts: Callable[[], StoreFacts] | None = None,
    fleet: Fleet | None = None,
    lag: LagHistogram | None = None,
    max_age_s: float = STORE_FACTS_MAX_AGE_S,
    process: bool = True,
) -> CollectorRegistry:
    """A registry of this process's own (never the global one) with the facts of the store at
    `store_url` (read read-only on a scrape, at most once per `max_age_s`) or, instead, those
    `facts()` gives (a reader that keeps them current, as the web view's index does), this
    process's replica metrics (`fleet`, `lag`) and, with `process`, its CPU and memory
    (`prometheus_client.ProcessCollector`: `process_*`)."""
    registry = CollectorRegistry(auto_describe=False)
    if facts is None and store_url is not None:
        url = store_url

        def facts() -> StoreFacts:
            return read_store_facts(url)

    if facts is not None:
        registry.register(StoreCollector(facts, max_age_s=max_age_s))
    if fleet is not None or lag is not None:
        registry.register(ReplicaCollector(fleet, lag))
    if process:
        ProcessCollector(registry=registry)
    return registry


def exposition(
    registry: CollectorRegistry, accept: str = "", accept_encoding: str = "", query: str = ""
) -> tuple[list[tuple[str, str]], bytes]:
    """A scrape of `registry`: its headers and body, in the format the `Accept` header asks
    for (Prometheus text or OpenMetrics: `prometheus_client.exposition.choose_encoder`),
    gzipped when `Accept-Encoding` allows it, restricted to the `name[]` of the `query`
    string when it names any. Synchronous: it collects (a store read, maybe)."""
    encoder, content_type = choose_encoder(accept)
    names = parse_qs(query).get("name[]")
    body = encoder(registry.restricted_registry(names) if names else registry)
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding):
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    return headers, body


def metrics_app(registry: CollectorRegistry) -> Callable[..., Any]:
    """The registry's scrape endpoint as an ASGI app, for a web app to mount at /metrics: a
    GET or HEAD is collected in a worker thread (`asyncio.to_thread`), so a slow collection
    never holds the event loop and the app's other requests are answered meanwhile; any other
    method is 405."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        method = scope["method"]
        if method not in SCRAPE_METHODS:
            head = [("Allow", ", ".join(SCRAPE_METHODS)), ("Content-Type", "text/plain")]
            await _respond(send, 405, head, _NOT_ALLOWED)
            return
        asked = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        headers, body = await asyncio.to_thread(
            exposition,
            registry,
            asked.get("accept", ""),
            asked.get("accept-encoding", ""),
            scope.get("query_string", b"").decode("latin-1"),
        )
        await _respond(send, 200, headers, b"" if method == "HEAD" else body, len(body))

    return app


async def _respond(
    send: Any, status: int, headers: list[tuple[str, str]], body: bytes, length: int | None = None
) -> None:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append((b"content-length", str(len(body) if length is None else length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def scrape_wsgi_app(registry: CollectorRegistry) -> Callable[..., Any]:
    """The registry's scrape endpoint as a WSGI app (`prometheus_client.make_wsgi_app`) that
    answers GET and HEAD (the headers of a GET, no body) and 405 to any other method."""
    scrape = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in SCRAPE_METHODS:
            start_response(
                "405 Method Not Allowed",
                [
                    ("Allow", ", ".join(SCRAPE_METHODS)),
                    ("Content-Type", "text/plain"),
                    ("Content-Length", str(len(_NOT_ALLOWED))),
                ],
            )
            return [_NOT_ALLOWED]
        if method == "GET":
            return scrape(environ, start_response)
        said: list[Any] = []
        body = b"".join(scrape({**environ, "REQUEST_METHOD": "GET"}, lambda *a: said.append(a)))
        status, headers = said[0][0], list(said[0][1])
        if not any(k.lower() == "content-length" for k, _ in headers):
            headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return []

    return app


class _ThreadingWsgiServer(ThreadingMixIn, WSGIServer):
    """wsgiref's server, each request in a thread of its own (a slow scrape blocks no other)."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """wsgiref's request handler without its access log on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing (a scrape every few seconds is not news)."""


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
    """Serve `registry` on `host`:`port` (0: a free port) in a daemon thread: wsgiref's server,
    a thread per request, serving `scrape_wsgi_app` (GET and HEAD; any other method 405).
    Raises `OSError` when the address cannot be bound (in use, not this host's)."""
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server_class = type("MetricsWsgiServer", (_ThreadingWsgiServer,), {"address_family": family})
    server = make_server(
        sockaddr[0], port, scrape_wsgi_app(registry), server_class, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="flashfsm-metrics", daemon=True)
    thread.start()
    return MetricsServer(host, int(server.server_address[1]), server, thread)


__all__ = [
    "ERROR_EVENTS",
    "POLL_LAG_BUCKETS",
    "SCRAPE_METHODS",
    "STORE_FACTS_MAX_AGE_S",
    "LagHistogram",
    "MetricsServer",
    "ReplicaCollector",
    "StoreCollector",
    "StoreFacts",
    "StreamTally",
    "exposition",
    "facts_metrics",
    "facts_of",
    "metrics_app",
    "metrics_registry",
    "read_snapshots",
    "read_store_facts",
    "scrape_wsgi_app",
    "serve_metrics",
    "store_facts",
    "stream_tally",
]
