"""`/metrics` never stalls the web view, and the view serves before it has read the store.

The store's facts the view serves come from its index (`StoreIndex.facts`), and must be
what `read_store_facts` reads of the same store (the streams, verdicts, errors, takeovers,
leases, snapshots and money), after the first read and after appends the index folded in
one by one. A scrape is collected off the event loop: a page asked for while a scrape is
being collected answers at once. A scrape is a GET or a HEAD, in the view and in
`serve_metrics`. The view's first read goes in chunks while it already serves: a page shows
what was read so far and says how far the read has got. The cache of a store read is aged
from the read's end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import flashfsm.ui.app as app_module
from flashfsm import open_store
from flashfsm.cli.store import stream_row
from flashfsm.demo import run_demo
from flashfsm.events.models import (
    Concluded,
    HeartbeatObserved,
    StatusFetchFailed,
    WatchStarted,
)
from flashfsm.metrics import (
    StoreCollector,
    StoreFacts,
    metrics_registry,
    read_store_facts,
    serve_metrics,
    stream_tally,
)
from flashfsm.postmortem.ledger import store_ledgers
from flashfsm.ui.app import UiConfig, create_app
from flashfsm.ui.index import PRICE_EVERY_S, StoreIndex
from flashfsm.writer import JOB, NEWER_WATCH_WINS, StreamWriter
from tests.test_metrics import (
    errors_url,  # noqa: F401 (a fixture: failed calls, takeovers)
    hand_off_and_lease,
    write_snapshot_streams,
)

T0 = 1_700_000_000.0
MONEY = ("billed_s", "billed_dollars", "wasted_dollars", "open_bills_dollars_per_hour")
LEASE_TIMES = ("lease_min_remaining_s", "lease_max_expired_s")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, through the Prometheus text parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def assert_same_facts(got: StoreFacts, expected: StoreFacts) -> None:
    """`got` says what `expected` says: every count equal, the money to the last few bits
    (summed in another order), the lease times within the seconds between the two reads."""
    mine, theirs = dataclasses.asdict(got), dataclasses.asdict(expected)
    for key in ("read_at", "read_s"):
        mine.pop(key), theirs.pop(key)
    for key in MONEY:
        a, b = mine.pop(key), theirs.pop(key)
        if isinstance(a, dict):
            assert a.keys() == b.keys(), key
            assert a == pytest.approx(b, rel=1e-9, abs=1e-9), key
        else:
            assert a == pytest.approx(b, rel=1e-9, abs=1e-9), key
    for key in LEASE_TIMES:
        a, b = mine.pop(key), theirs.pop(key)
        assert (a is None) == (b is None), key
        if a is not None:
            assert a == pytest.approx(b, abs=2.0), key
    assert mine == theirs


def facts_read(url: str) -> StoreFacts:
    return read_store_facts(url)


def index_of(url: str, **refresh: Any) -> StoreIndex:
    index = StoreIndex(url)
    index.refresh(**refresh)
    return index


# --- stores -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo's store: runs and their jobs, every kind of verdict, money, a sweeper."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo')}/demo.db"
    run_demo(url, say=lambda _line: None, tag="fedcba")
    return url


@pytest.fixture
def fleet_url(tmp_path: Path) -> str:
    """Handed-off jobs with a held, an expired, a failed and a free lease, two replicas, and
    open jobs with a current, an old and no snapshot, one concluded."""
    url = f"sqlite:///{tmp_path}/fleet.db"
    store = open_store(url)
    try:
        hand_off_and_lease(store)
        write_snapshot_streams(store)
        time.sleep(0.4)  # job-b's lease lapses
    finally:
        store.close()
    return url


# --- the index's facts are the store's ---------------------------------------------------------


@pytest.mark.parametrize("which", ["demo_url", "errors_url", "fleet_url"])
def test_the_index_s_facts_are_what_a_read_of_the_store_says(which: str, request) -> None:
    url = request.getfixturevalue(which)
    index = index_of(url)
    try:
        got = index.facts()
    finally:
        index.close()
    expected = facts_read(url)
    assert_same_facts(got, expected)
    assert sum(expected.streams.values()) > 0
    if which == "errors_url":
        assert expected.takeovers == 2 and sum(expected.errors.values()) == 6
    if which == "fleet_url":
        assert expected.leases == {"held": 1, "expired": 1, "free": 4, "failed": 1}
        assert expected.snapshots == {"current": 1, "other_version": 1, "none": 5}
    if which == "demo_url":
        assert expected.verdicts and expected.run_results and sum(expected.billed_s.values())


def test_facts_follow_appends_the_index_folds_in(errors_url: str) -> None:  # noqa: F811
    index = index_of(errors_url)
    store = open_store(errors_url)
    try:
        writer = StreamWriter(store, "job-j1", JOB, NEWER_WATCH_WINS)
        writer.open()
        at = T0 + 500
        writer.record(WatchStarted, at, watcher="replica-c", reattach=True)  # a takeover
        assert index.refresh()
        writer.record(StatusFetchFailed, at + 1, error_class="ReadTimeout")
        writer.record(HeartbeatObserved, at + 2, found=False, read_error="OSError HTTP 504")
        assert index.refresh()
        assert_same_facts(index.facts(), facts_read(errors_url))
        writer.record(Concluded, at + 3, state="POLL_ERROR", ok=False, rule="poll_errors")
        assert index.refresh()
        got = index.facts()
    finally:
        store.close()
        index.close()
    expected = facts_read(errors_url)
    assert_same_facts(got, expected)
    assert expected.takeovers == 3 and sum(expected.errors.values()) == 8
    assert [rule for rule, _failure in expected.verdicts] == ["poll_errors"]
    assert not expected.open_streams


@pytest.mark.parametrize("runs_first", [False, True])
def test_a_run_and_its_jobs_read_by_different_refreshes_are_billed_as_cost_bills_them(
    demo_url: str, tmp_path, runs_first: bool
) -> None:
    source = open_store(demo_url, read_only=True)
    try:
        logs = {name: source.read(name) for name in source.streams()}
    finally:
        source.close()
    url = f"sqlite:///{tmp_path}/staged.db"
    store = open_store(url)
    wall = [T0]
    index = StoreIndex(url, wall=lambda: wall[0])
    try:
        runs = {n for n, events in logs.items() if stream_row(n, events)["kind"] == "run"}
        assert runs and len(runs) < len(logs)
        for runs_now in (runs_first, not runs_first):  # the runs, or the rest, first
            for name, events in logs.items():
                if (name in runs) == runs_now:
                    store.append(name, events, 0)
            index.refresh()
        # a run priced a moment ago waits for a later refresh: never dropped
        wall[0] += PRICE_EVERY_S
        index.refresh()
        got, ledgers = index.facts(), index.ledgers()
    finally:
        store.close()
        index.close()
    assert sorted(led.stream for led in ledgers) == sorted(
        led.stream for led in store_ledgers(logs)
    )
    expected = facts_read(url)
    assert sum(expected.billed_s.values()) > 0
    assert_same_facts(got, expected)


def test_a_stream_s_tally_extended_by_its_new_events_is_its_tally_read_whole(
    errors_url: str,  # noqa: F811
) -> None:
    store = open_store(errors_url, read_only=True)
    try:
        events = store.read("job-j1")
    finally:
        store.close()
    row = stream_row("job-j1", events)
    whole = stream_tally(row, events)
    assert whole.takeovers == 2 and sum(whole.errors.values()) == 6
    for cut in range(len(events) + 1):
        before = stream_tally(stream_row("job-j1", events[:cut]), events[:cut])
        assert stream_tally(row, events[cut:], before) == whole, cut


# --- a first read in chunks ------------------------------------------------------------------


def test_a_first_read_in_chunks_ends_as_one_read_and_hands_each_chunk_on(demo_url: str) -> None:
    whole = index_of(demo_url)
    chunked = StoreIndex(demo_url)
    batches: list[list[str]] = []
    seen_progress: list[Any] = []

    def took(changes: list[Any]) -> None:
        batches.append([c.stream for c in changes])
        seen_progress.append(chunked.progress)

    chunked.subscribe(took)
    try:
        assert not chunked.ready.is_set() and chunked.progress is not None
        chunked.refresh(chunk=4)
        assert chunked.ready.is_set() and chunked.progress is None
        assert chunked.rows() == whole.rows()
        assert [led.stream for led in chunked.ledgers()] == [led.stream for led in whole.ledgers()]
        assert_same_facts(chunked.facts(), whole.facts())
    finally:
        whole.close()
        chunked.close()
    streams = len(whole.rows())
    assert len(batches) > streams // 4  # each chunk of streams handed on as it was read
    assert all(len(b) <= 4 for b in batches[: streams // 4])
    assert chunked.version == len(batches)
    read = [p.read for p in seen_progress if p is not None and p.read < p.streams]
    assert read == sorted(read) and read[0] == 4


# --- the view: served at once, filling in -------------------------------------------------------


def test_the_view_serves_its_first_page_before_its_first_read_is_whole(
    demo_url: str, monkeypatch
) -> None:
    monkeypatch.setattr(app_module, "FILL_CHUNK", 3)
    monkeypatch.setattr(app_module, "SERVE_WAIT_S", 0.0)
    index = StoreIndex(demo_url)
    held, gate = threading.Event(), threading.Event()

    def hold(_changes: list[Any]) -> None:  # the read stops after its first chunk
        held.set()
        gate.wait(30)

    index.subscribe(hold)
    try:
        with TestClient(
            create_app(UiConfig(demo_url, poll_s=0.05), index=index),
            base_url="http://127.0.0.1",
        ) as client:
            assert held.wait(30)  # (served: the first chunk is read, the rest waits)
            start = time.monotonic()
            page = client.get("/")
            assert time.monotonic() - start < 5
            assert page.status_code == 200
            assert "reading the store… 3 of " in page.text
            assert '<meta http-equiv="refresh"' in page.text
            assert re.search(r"\b3(</span>)? stream\(s\)", page.text)  # the 3 read so far
            scrape = samples(client.get("/metrics").text)
            assert scrape["flashfsm_store_up", ()] == 0
            unread = client.get("/s/job-not-read-yet")  # (perhaps a stream still to read)
            assert unread.status_code == 503 and unread.headers["retry-after"] == "2"
            assert "is not read yet: reading the store… 3 of " in unread.text
            assert '<meta http-equiv="refresh"' in unread.text
            gate.set()
            assert index.ready.wait(30)
            assert client.get("/s/job-not-read-yet").status_code == 404  # read: none such
            page = client.get("/")
            assert "reading the store" not in page.text and "http-equiv" not in page.text
            total = len(index.rows())
            assert re.search(rf"\b{total}(</span>)? stream\(s\)", page.text)
            scrape = samples(client.get("/metrics").text)
            assert scrape["flashfsm_store_up", ()] == 1
            streams = sum(v for (n, _), v in scrape.items() if n == "flashfsm_streams")
            assert streams == total > 3
    finally:
        gate.set()
        index.close()


# --- /metrics: GET and HEAD only, off the event loop ---------------------------------------------


def test_the_view_s_metrics_answer_get_and_head_only(demo_url: str) -> None:
    with TestClient(
        create_app(UiConfig(demo_url, poll_s=0.05)), base_url="http://127.0.0.1"
    ) as client:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            refused = client.request(method, "/metrics")
            assert refused.status_code == 405, method
            assert "GET" in refused.headers["allow"]
        got = client.get("/metrics")
        assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain")
        assert samples(got.text)["flashfsm_store_up", ()] == 1
        head = client.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
        open_metrics = client.get(
            "/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
        assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
        assert open_metrics.text.rstrip().endswith("# EOF")
        zipped = client.get("/metrics", headers={"Accept-Encoding": "gzip"})
        assert zipped.headers.get("content-encoding") == "gzip"
        assert zipped.status_code == 200 and "flashfsm_streams" in zipped.text  # (unzipped)


def test_serve_metrics_answers_get_and_head_only() -> None:
    registry = metrics_registry(facts=lambda: StoreFacts(takeovers=7), process=False)
    server = serve_metrics(registry, "127.0.0.1", 0)
    try:
        with httpx.Client(timeout=10) as client:
            got = client.get(server.url)
            assert got.status_code == 200
            assert samples(got.text)["flashfsm_takeovers_total", ()] == 7
            head = client.head(server.url)
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-length"] == got.headers["content-length"]
            assert head.headers["content-type"] == got.headers["content-type"]
            for method in ("POST", "PUT", "DELETE", "OPTIONS"):
                refused = client.request(method, server.url, content=b"x")
                assert refused.status_code == 405, method
                assert refused.headers["allow"] == "GET, HEAD"
    finally:
        server.close()


class SlowFacts(StoreIndex):
    """An index whose facts take as long as the test says (a store read that is slow)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.asked = threading.Event()
        self.release = threading.Event()

    def facts(self) -> StoreFacts:
        self.asked.set()
        self.release.wait(30)
        return super().facts()


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on a free loopback port in a thread; yields its address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the view did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_a_page_asked_for_during_a_scrape_answers_at_once(demo_url: str) -> None:
    index = SlowFacts(demo_url)
    index.refresh()
    scraped: list[httpx.Response] = []
    try:
        with served(create_app(UiConfig(demo_url), index=index)) as base:
            scrape = threading.Thread(
                target=lambda: scraped.append(httpx.get(f"{base}/metrics", timeout=60))
            )
            scrape.start()
            assert index.asked.wait(30)  # the scrape is being collected
            start = time.monotonic()
            page = httpx.get(f"{base}/", timeout=30)
            took = time.monotonic() - start
            still_collecting = not index.release.is_set() and scrape.is_alive()
            index.release.set()
            scrape.join(60)
    finally:
        index.release.set()
        index.close()
    assert page.status_code == 200 and still_collecting
    assert took <= 0.5, f"GET / took {took:.2f} s during a scrape"
    assert scraped and scraped[0].status_code == 200
    assert samples(scraped[0].text)["flashfsm_store_up", ()] == 1


# --- the cache of a read ------------------------------------------------------------------------


def test_the_cache_of_a_read_ages_from_the_read_s_end() -> None:
    now = [0.0]
    reads: list[float] = []

    def facts() -> StoreFacts:
        now[0] += 15.0  # a read longer than the max age (a big store)
        reads.append(now[0])
        return StoreFacts(takeovers=len(reads))

    collector = StoreCollector(facts, max_age_s=10.0, clock=lambda: now[0])
    assert collector.current().takeovers == 1 and now[0] == 15.0
    now[0] = 24.9  # 9.9 s after the read ended (24.9 s after it began): served again
    assert collector.current().takeovers == 1 and reads == [15.0]
    now[0] = 25.0  # 10 s after: read again
    assert collector.current().takeovers == 2 and reads == [15.0, 40.0]
