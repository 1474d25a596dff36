"""The web view (`flashfsm ui`, issue 29): the runs page of a store of 10,000 streams, and
the live feed at 1,000 appends/s, beside `flashfsm ls` on the same store in the same run.

The store is made of copies of the demo's 13 streams (`flashfsm demo`: five runs, eight job
streams, every verdict concluded), each copy renamed (its tag in every stream name, job
stream, endpoint name and run id), given fresh event ids and moved later in time, until the
store holds at least N streams (quick 1,000, full 10,000). The newest copies
(`OPEN_SHARE`) are cut half-way through each run, so their runs and jobs are open, as the
runs of a fleet that is still working are. The store is built once per size and recipe,
cached in the temporary directory, and copied before each run (the feed writes to it).

- `index`: the view's first read of the store, `StoreIndex(url).refresh()` (every stream's
  row, cost and owner), against the in-process `flashfsm ls` (`ls_command`, its table
  rendered into a captured console: what the command costs without its interpreter's
  start; the subprocess `flashfsm ls --store URL` is timed once besides, as a detail);
- `page`: `pages.runs_page` on the built index (the default query; a filtered and sorted one;
  a search; a page deep in the list), median of `ROUNDS`; then `GET /` through the app on a
  real uvicorn server on 127.0.0.1 (the round trip over loopback, an upper bound of the
  server's time); goal ≤ 0.5 s, compared with `ls`;
- `metrics` (issue 38): `GET /metrics` through the served app (the store's facts from the
  view's index: `StoreIndex.facts`), each scrape past the cache's age (the view's poll), goal
  ≤ 2 s; the old scrape's cost besides (`read_store_facts`: the whole store read); a
  `GET /` sent while a scrape is being collected (the scrape's facts collected in a worker
  thread, off the event loop), goal ≤ 0.5 s; and a view started on the store with no index
  built (`flashfsm ui` as it starts): the time from its start to its first page answered
  (it serves at once and reads the store in the background, in chunks), goal ≤ 3 s, with
  the time until its first read is whole and what a page costs meanwhile;
- `refresh`: a refresh that finds nothing new (what every poll costs, the store idle), the
  median of the ordinary ones and the slow sweep's (one in `SLOW_SWEEP_EVERY` re-reads the
  concluded streams), and its share of a core at the default poll;
- `feed`: the app served by uvicorn in a thread (poll `FEED_POLL_S`), two live feeds read
  with httpx (`/feed`, and `/feed?stream=NAME` of one written stream), while a writer in
  its own process appends 1,000 events a second (a `StatusObserved` per poll and a
  `HeartbeatObserved` every sixth, one group commit per 10 ms, as the `Supervisor` writes)
  for `FEED_S` (quick `FEED_S_QUICK`), to every open job stream of an open run, then to
  `FEED_STREAMS` of them (which grow long: every refresh after folds them again). Each feed
  message counts the stream's new events (`"events": n`); an event's lag is from its
  append's commit to the message that carries it (both on the monotonic clock, which the
  processes share). "Holds" means: the writer kept the rate, the feed delivered every event
  at ≥ the rate, and the lag did not grow (the last fifth's median lag ≤ the first fifth's
  + `LAG_GROWTH_S`). The window is a minute, not a few seconds, because the view's cost per
  refresh grows with the length of the open streams written to: a few seconds would not
  show whether the lag stays bounded;
- `long`: an open job stream of a 7-day watch (quick: 1 day) added to the store, and what a
  refresh costs beside it, with nothing new and with an event appended to it.

Usage: python bench/ui.py [--quick]
Goals (issue 29): the runs page in ≤ 0.5 s server time; the live feed holds 1,000 appends/s.
Goals (issue 38): a scrape in ≤ 2 s; a page asked for during a scrape in ≤ 0.5 s; the first
page of a view just started in ≤ 3 s.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import Row, Section, bench_main, fmt, median, percentile, times

#: The command line's entry point (`flashfsm ...`), with this interpreter.
CLI = (sys.executable, "-c", "from flashfsm.cli import main; main()")
#: The goals (issue 29).
PAGE_GOAL_S = 0.5
FEED_GOAL_PER_S = 1000.0
#: The goals of issue 38: a scrape, a page asked for during one, a view's first page.
SCRAPE_GOAL_S = 2.0
CONCURRENT_GOAL_S = 0.5
FIRST_PAGE_GOAL_S = 3.0
#: How long after a scrape is sent the concurrent `GET /` is sent (seconds).
CONCURRENT_AFTER_S = 0.002
#: The recipe's version: a cached store of another recipe is built again.
RECIPE = 1
#: The share of the copies (the newest) cut half-way, so their runs and jobs are open.
OPEN_SHARE = 0.05
#: How far apart in time two copies start (seconds).
COPY_EVERY_S = 600.0
#: Timed rounds of each page.
ROUNDS = 15
#: The view's poll during the feed's test (`flashfsm ui --poll`), seconds.
FEED_POLL_S = 0.25
#: The open job streams the writer appends to (the first of the two feeds' tests).
FEED_STREAMS = 4
#: How long the writer appends in each of the feed's tests (seconds), and with --quick.
FEED_S = 60.0
FEED_S_QUICK = 2.0
#: How much the median lag may grow from the first fifth of the test to the last (seconds).
LAG_GROWTH_S = FEED_POLL_S
#: The writer's group-commit window (seconds).
WRITE_EVERY_S = 0.01
#: How late the writer's last commit may come after its window's end and the writer still
#: counts as having kept the rate (seconds).
WRITER_SLACK_S = 2 * WRITE_EVERY_S

QUERIES: dict[str, dict[str, str]] = {
    "default (all, newest first)": {},
    "filtered + sorted (succeeded jobs by cost)": {
        "kind": "job",
        "state": "SUCCEEDED",
        "sort": "cost",
        "desc": "1",
    },
    "search + sort (q=stall, by wasted)": {"q": "stall", "sort": "wasted", "desc": "1"},
    "page 20, by name": {"sort": "stream", "page": "20"},
}


# --- the store ------------------------------------------------------------------------------


def cache_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "flashfsm-bench-ui"
    path.mkdir(exist_ok=True)
    return path


def demo_events(work: Path) -> tuple[str, list[dict[str, Any]]]:
    """The demo's events as JSON objects, and its tag (written once into `work`)."""
    db = work / "demo.db"
    if not db.exists():
        subprocess.run(
            [*CLI, "demo", "--store", f"sqlite:///{db}"],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"},
        )
    from flashfsm.adapters.stores import open_store

    store = open_store(f"sqlite:///{db}", read_only=True)
    try:
        out = [e.model_dump(mode="json") for n in store.streams() for e in store.read(n)]
    finally:
        store.close()
    match = re.search(r"demo-([0-9a-f]+)-", out[0]["stream"])
    assert match is not None, out[0]["stream"]
    return match.group(1), out


def _shifted(value: Any, lo: float, hi: float, by: float) -> Any:
    """`value` with every number in [lo, hi] (a time of the demo's) moved by `by`."""
    if isinstance(value, dict):
        return {k: _shifted(v, lo, hi, by) for k, v in value.items()}
    if isinstance(value, list):
        return [_shifted(v, lo, hi, by) for v in value]
    if isinstance(value, float | int) and not isinstance(value, bool) and lo <= value <= hi:
        return value + by
    return value


def _group(stream: str) -> str:
    """A run and its job streams share a group: the name without its kind and attempt."""
    return re.sub(r"-a\d+$", "", stream.split("-", 1)[1])


def build_store(path: Path, size: int) -> tuple[int, int]:
    """Write a store of at least `size` streams at `path` (see the module docstring); returns
    (streams, events)."""
    from flashfsm.adapters.stores import open_store
    from flashfsm.events.codec import decode
    from flashfsm.ids import new_id

    tag, template = demo_events(path.parent)
    ats = [e["at"] for e in template]
    lo, hi = min(ats) - 7 * 86400, max(ats) + 7 * 86400
    by_stream: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in template:
        by_stream[e["stream"]].append(e)
    # each group (a run and its jobs) is cut half-way through its own span when open
    spans: dict[str, tuple[float, float]] = {}
    for name, events in by_stream.items():
        first, last = spans.get(_group(name), (events[0]["at"], events[-1]["at"]))
        spans[_group(name)] = (min(first, events[0]["at"]), max(last, events[-1]["at"]))

    def kept(name: str, events: list[dict[str, Any]], cut: bool) -> list[dict[str, Any]]:
        start, end = spans[_group(name)]
        return [e for e in events if not cut or e["at"] <= (start + end) / 2]

    whole = len(by_stream)
    half = sum(1 for n, events in by_stream.items() if kept(n, events, True))
    copies = opened = 0
    while (copies - opened) * whole + opened * half < size:
        copies += 1
        opened = round(copies * OPEN_SHARE)
    if path.exists():
        path.unlink()
    store = open_store(f"sqlite:///{path}")
    streams = events_written = 0
    try:
        for copy in range(copies):
            new_tag = f"b{copy:05d}"
            by = (copy + 1) * COPY_EVERY_S
            cut = copy >= copies - opened
            batches = []
            for name, events in by_stream.items():
                keep = kept(name, events, cut)
                if not keep:
                    continue
                text = json.dumps(_shifted(keep, lo, hi, by)).replace(tag, new_tag)
                rebuilt = []
                for e in json.loads(text):
                    e["id"] = new_id(e["at"])
                    rebuilt.append(decode(json.dumps(e)))
                batches.append((rebuilt[0].stream, rebuilt, 0))
                events_written += len(rebuilt)
            outcomes = store.append_many(batches)
            failed = [o for o in outcomes if o is not None]
            if failed:
                raise failed[0]
            streams += len(batches)
    finally:
        store.close()
    return streams, events_written


def cached_store(size: int) -> tuple[Path, int, int]:
    """The cached store of `size` streams (built when missing): path, streams, events."""
    work = cache_dir()
    path = work / f"streams-{size}-r{RECIPE}.db"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        counts = json.loads(meta.read_text())
        return path, counts["streams"], counts["events"]
    streams, events = build_store(path, size)
    meta.write_text(json.dumps({"streams": streams, "events": events}))
    return path, streams, events


def working_copy(path: Path, name: str) -> str:
    """A copy of the cached store (it is written to), as a URL."""
    target = path.with_name(f"{name}.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(path, target)
    return f"sqlite:///{target}"


# --- the measurements -----------------------------------------------------------------------


def ls_in_process(url: str) -> float:
    """Seconds of one `flashfsm ls --store URL`, in this process (its table rendered into a
    captured console)."""
    import typer

    from flashfsm.cli.common import console
    from flashfsm.cli.store import ls_command

    start = time.perf_counter()
    with console.capture() as captured, contextlib.suppress(typer.Exit):
        ls_command(store=url)
    seconds = time.perf_counter() - start
    assert "stream(s)" in captured.get(), captured.get()[:200]
    return seconds


def ls_subprocess(url: str) -> float:
    """Seconds of `flashfsm ls --store URL` as a command (its interpreter's start included)."""
    start = time.perf_counter()
    subprocess.run([*CLI, "ls", "--store", url], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def build_index(url: str) -> tuple[Any, float]:
    """A `StoreIndex` of the store after its first refresh, and that refresh's seconds (the
    store opened included)."""
    from flashfsm.ui.index import StoreIndex

    start = time.perf_counter()
    index = StoreIndex(url)
    index.refresh()
    return index, time.perf_counter() - start


@contextlib.contextmanager
def serving(url: str, index: Any, poll_s: float) -> Iterator[str]:
    """The view of `url` on the built `index` (None: its own, read as `flashfsm ui` reads it
    when it starts), served by uvicorn on 127.0.0.1 in a thread (as `flashfsm ui` serves
    it); yields its base address."""
    import uvicorn

    from flashfsm.ui.app import UiConfig, create_app

    app = create_app(UiConfig(url, poll_s=poll_s), index=index)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the view did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@dataclass
class Message:
    """One live-feed message as read: when, whose, how many new events."""

    at: float  # time.monotonic() at receipt
    stream: str
    events: int
    event_rows: int


@dataclass
class FeedReader:
    """Reads live feeds (server-sent events) with httpx in a thread of its own."""

    urls: list[str]
    messages: dict[str, list[Message]] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> None:
        self.messages = {url: [] for url in self.urls}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(30):
            self.check()
            raise RuntimeError("the live feeds did not open")

    def check(self) -> None:
        """Raise what stopped a feed's reading, if anything did."""
        if self.error is not None:
            raise RuntimeError(f"a live feed failed: {self.error!r}") from self.error

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
        self.check()

    def _run(self) -> None:
        import asyncio

        import httpx

        opened: set[str] = set()

        async def one(client: httpx.AsyncClient, url: str) -> None:
            sink = self.messages[url]
            kind = ""  # the server-sent event's type (`event:`), "" before one is named
            async with client.stream("GET", url) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    now = time.monotonic()
                    opened.add(url)
                    if len(opened) == len(self.urls):
                        self.ready.set()
                    if not line:
                        kind = ""
                    elif line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:") and kind == "change":
                        p = json.loads(line[5:])
                        rows = len(p.get("event_rows", ()))
                        sink.append(Message(now, p["stream"], p["events"], rows))

        async def main() -> None:
            async with httpx.AsyncClient(timeout=None) as client:
                tasks = [asyncio.create_task(one(client, url)) for url in self.urls]
                while not self.stop.is_set() and not any(t.done() for t in tasks):
                    await asyncio.sleep(0.05)
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task  # (a feed that failed raises here)

        try:
            asyncio.run(main())
        except BaseException as exc:
            self.error = exc


def write_load(url: str, conn: Any) -> None:
    """The writer (a process of its own): for each task it is sent (`streams`, `rate`,
    `seconds`), says "ready", takes the start (a time.monotonic() reading), then appends
    `rate` events a second for `seconds` to `streams` in turn, one group commit per
    `WRITE_EVERY_S`, and sends back each event's (stream, seq, commit time). None ends it."""
    from flashfsm.adapters.stores import open_store
    from flashfsm.events.models import HeartbeatObserved, StatusObserved
    from flashfsm.ids import new_id

    store = open_store(url)
    while (task := conn.recv()) is not None:
        streams, rate, seconds = task
        nexts: dict[str, int] = {}
        base = 0.0
        for name in streams:
            events = store.read(name)
            nexts[name] = events[-1].seq + 1
            base = max(base, max(e.at for e in events))
        log: list[tuple[str, int, float]] = []
        turn = written = window = 0
        total = round(rate * seconds)
        conn.send("ready")
        start = conn.recv()
        while time.monotonic() < start:
            time.sleep(0.001)
        while written < total:
            elapsed = time.monotonic() - start
            due = min(total, int(elapsed * rate) + 1) - written
            batches: dict[str, list[Any]] = {}
            for _ in range(due):
                name = streams[turn % len(streams)]
                turn += 1
                seq = nexts[name]
                nexts[name] += 1
                at = base + elapsed
                fields = {"stream": name, "seq": seq, "id": new_id(at), "at": at}
                if seq % 6 == 0:
                    event: Any = HeartbeatObserved(**fields, stage="sft_train", step=seq, ts=at - 3)
                else:
                    event = StatusObserved(**fields, status="IN_PROGRESS")
                batches.setdefault(name, []).append(event)
            if not batches:
                time.sleep(0.0005)
                continue
            outcomes = store.append_many([(n, evs, evs[0].seq) for n, evs in batches.items()])
            done = time.monotonic()
            for outcome in outcomes:
                if outcome is not None:
                    raise outcome
            log += [(n, e.seq, done) for n, evs in batches.items() for e in evs]
            written += due
            window += 1
            time.sleep(max(0.0, start + window * WRITE_EVERY_S - time.monotonic()))
        conn.send(log)
    store.close()
    conn.close()


@dataclass
class Writer:
    """The writer's process and this end of its pipe."""

    conn: Any
    process: Any

    def send(self, value: Any) -> None:
        self.conn.send(value)

    def recv(self, timeout: float) -> Any:
        """The writer's next message; a `RuntimeError` if it died or took over `timeout`."""
        deadline = time.monotonic() + timeout
        while not self.conn.poll(0.1):
            if not self.process.is_alive():
                raise RuntimeError(f"the writer exited ({self.process.exitcode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the writer said nothing for {timeout:g} s")
        return self.conn.recv()


@contextlib.contextmanager
def writer_process(url: str) -> Iterator[Writer]:
    """The writer's process (`write_load`), started."""
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    process = ctx.Process(target=write_load, args=(url, theirs), daemon=True)
    process.start()
    try:
        yield Writer(mine, process)
    finally:
        with contextlib.suppress(OSError):
            mine.send(None)
        process.join(30)
        if process.is_alive():
            process.terminate()


@dataclass
class FeedFigures:
    """What one live feed delivered of the writer's events."""

    delivered: int
    lags: list[tuple[float, float]]  # (commit time, lag) per delivered event, by commit
    messages: int
    event_rows: int

    def lag(self, q: float) -> float:
        return percentile([lag for _, lag in self.lags], q)

    def growth(self) -> float:
        """The median lag of the last fifth of the events minus the first fifth's."""
        fifth = max(1, len(self.lags) // 5)
        first = median([lag for _, lag in self.lags[:fifth]]) if self.lags else 0.0
        last = median([lag for _, lag in self.lags[-fifth:]]) if self.lags else 0.0
        return last - first


def feed_figures(messages: list[Message], log: list[tuple[str, int, float]]) -> FeedFigures:
    """Match each message's new events with the writer's commits of its stream, in order."""
    commits: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for name, seq, done in log:
        commits[name].append((seq, done))
    for entries in commits.values():
        entries.sort()
    taken: dict[str, int] = defaultdict(int)
    lags: list[tuple[float, float]] = []
    count = rows = 0
    for m in messages:
        if m.stream not in commits or not m.events:
            continue
        first = taken[m.stream]
        mine = commits[m.stream][first : first + m.events]
        taken[m.stream] += m.events
        lags += [(done, m.at - done) for _, done in mine]
        count += 1
        rows += m.event_rows
    lags.sort()
    return FeedFigures(sum(min(n, len(commits[s])) for s, n in taken.items()), lags, count, rows)


def per_second(got: FeedFigures) -> list[int]:
    """The events received in each whole second from the first receipt (the last partial
    second left out)."""
    if not got.lags:
        return []
    received = sorted(done + lag for done, lag in got.lags)
    first = received[0]
    counts = [0] * int(received[-1] - first)
    for at in received:
        second = int(at - first)
        if second < len(counts):
            counts[second] += 1
    return counts


def writer_streams(index: Any, count: int | None) -> list[str]:
    """The newest `count` open job streams of open runs (None: all of them), those the
    writer appends to."""
    rows = {r["stream"]: r for r in index.rows()}
    chosen = []
    for row in rows.values():
        entry = index.entry(row["stream"])
        if row["kind"] != "job" or row["ok"] is not None or entry.events is None:
            continue
        run = rows.get(entry.run or "")
        if run is not None and run["ok"] is None:
            chosen.append(row)
    chosen.sort(key=lambda r: r["first_at"] or 0.0, reverse=True)
    if len(chosen) < (count or 2):
        raise RuntimeError(f"the store has {len(chosen)} open job streams of open runs")
    return [r["stream"] for r in chosen[:count]]


def timed_refresh(index: Any) -> list[float]:
    """Record every later refresh's seconds (the view's refreshing thread calls it)."""
    spent: list[float] = []
    plain = index.refresh

    def refresh(**options: Any) -> Any:
        start = time.perf_counter()
        try:
            return plain(**options)
        finally:
            spent.append(time.perf_counter() - start)

    index.refresh = refresh
    return spent


def shortfall(seconds: float) -> str:
    """What a page's time misses the goal by ("" when it meets it)."""
    if seconds <= PAGE_GOAL_S:
        return ""
    return f"; NOT MET: {(seconds - PAGE_GOAL_S) * 1e3:.0f} ms over the goal"


def versus_ls(metric: str, seconds: float, goal_s: float, ls_s: float) -> Row:
    """A time in ms, held to `goal_s`, against `flashfsm ls` in process (`ls_s`)."""
    return Row(
        metric,
        seconds * 1e3,
        "ms",
        f"≤ {goal_s * 1e3:g} ms",
        seconds <= goal_s,
        baseline="`flashfsm ls`, in process",
        baseline_value=ls_s * 1e3,
        ratio=f"{seconds / ls_s:.4f}× ls",
    )


def page_rows(url: str, index: Any, ls_s: float, rounds: int) -> tuple[list[Row], list[str]]:
    """`runs_page` timed directly on the built index, per query."""
    from flashfsm.adapters.urls import display_url
    from flashfsm.ui import pages

    frame = pages.Frame(display_url(url), True)
    rows, details = [], []
    for n, (name, query) in enumerate(QUERIES.items()):
        text = ""

        def render(query: dict[str, str] = query) -> None:
            nonlocal text
            text = pages.runs_page(frame, index, query)

        spent = times(render, rounds)
        value = median(spent)
        row = versus_ls(f"runs page, {name}: `runs_page` (median)", value, PAGE_GOAL_S, ls_s)
        row.summary = n < 2
        rows.append(row)
        details.append(
            f"`runs_page` {name}: median {fmt(value * 1e3)} ms, max {fmt(max(spent) * 1e3)} ms "
            f"over {rounds}; {len(text) / 1024:.0f} KiB of HTML{shortfall(value)}"
        )
    return rows, details


def http_rows(base: str, ls_s: float, rounds: int) -> tuple[list[Row], list[str]]:
    """`GET /` (and `/rows.json`) through the served app, over loopback."""
    import httpx

    rows, details = [], []
    with httpx.Client(base_url=base, timeout=60) as client:
        for path, label, goal in (
            ("/", "GET / (the runs page)", True),
            ("/rows.json", "GET /rows.json (every row)", False),
        ):
            size = 0

            def get(path: str = path) -> None:
                nonlocal size
                response = client.get(path)
                response.raise_for_status()
                size = len(response.content)

            spent = times(get, rounds if goal else max(3, rounds // 3))
            value = median(spent)
            rows.append(
                Row(
                    f"{label} over HTTP, uvicorn on loopback (median round trip)",
                    value * 1e3,
                    "ms",
                    f"≤ {PAGE_GOAL_S * 1e3:g} ms" if goal else "—",
                    value <= PAGE_GOAL_S if goal else None,
                    baseline="`flashfsm ls`, in process",
                    baseline_value=ls_s * 1e3,
                    ratio=f"{value / ls_s:.4f}× ls",
                    summary=goal,
                )
            )
            details.append(
                f"{label}: median {fmt(value * 1e3)} ms, max {fmt(max(spent) * 1e3)} ms over "
                f"{len(spent)} (the view's refresh running every {FEED_POLL_S:g} s); "
                f"{size / 1024:.0f} KiB{shortfall(value) if goal else ''}"
            )
    return rows, details


def run_feed(
    writer: Writer,
    base: str,
    streams: list[str],
    rate: float,
    seconds: float,
    ls_s: float,
    spent: list[float],
) -> tuple[list[Row], list[str]]:
    """The live feeds while the `writer` (`writer_process`) appends `rate` events a second
    for `seconds` to `streams` (`spent`: the view's refreshes' seconds, as `timed_refresh`
    records them)."""
    from urllib.parse import quote

    followed = streams[0]
    shape = f"{len(streams)} streams"
    reader = FeedReader([f"{base}/feed", f"{base}/feed?stream={quote(followed, safe='')}"])
    reader.start()
    try:
        writer.send((streams, rate, seconds))
        if writer.recv(60) != "ready":
            raise RuntimeError("the writer did not start")
        before = len(spent)
        start = time.monotonic() + 0.2
        writer.send(start)
        log: list[tuple[str, int, float]] = writer.recv(seconds * 10 + 60)
        end = max(done for _, _, done in log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # let the feed catch up
            got = feed_figures(reader.messages[reader.urls[0]], log)
            if got.delivered >= len(log):
                break
            time.sleep(0.05)
        under_load = spent[before:]
    finally:
        reader.close()
    late = end - start - seconds  # the last commit after the window's end (on time: ≤ 0)
    window = seconds
    everyone = feed_figures(reader.messages[reader.urls[0]], log)
    own = feed_figures(reader.messages[reader.urls[1]], [x for x in log if x[0] == followed])
    own_written = sum(1 for x in log if x[0] == followed)
    written_rate = len(log) / window
    on_time = late <= WRITER_SLACK_S
    seconds_got = per_second(everyone)
    rows: list[Row] = []
    notes: list[str] = []
    for label, got, written, goal in (
        (f"{shape}, `/feed`", everyone, len(log), rate),
        (f"{shape}, `/feed?stream=` (one of them)", own, own_written, rate / len(streams)),
    ):
        delivered_rate = got.delivered / window
        growth = got.growth()
        want = FEED_GOAL_PER_S * goal / rate
        shortfalls = [
            f"the writer's last commit came {late * 1e3:.0f} ms after its window (the rate "
            "was not offered in time)"
            if not on_time
            else "",
            f"the writer offered {written / window:,.4g}/s" if written / window < want else "",
            f"{written - got.delivered:,} of {written:,} events not delivered"
            if got.delivered < written
            else "",
            f"delivered {delivered_rate:,.4g}/s, {want - delivered_rate:,.4g}/s short"
            if delivered_rate < want
            else "",
            f"the lag grew {growth * 1e3:.0f} ms ({(growth - LAG_GROWTH_S) * 1e3:.0f} ms over "
            "the bound)"
            if growth > LAG_GROWTH_S
            else "",
        ]
        shortfalls = [text for text in shortfalls if text]
        held = not shortfalls
        if shortfalls:
            notes.append(f"{label} did not hold: {'; '.join(shortfalls)}")
        rows.append(
            Row(
                f"live feed {label}: events delivered per second",
                delivered_rate,
                "events/s",
                f"≥ {FEED_GOAL_PER_S * goal / rate:,.4g}/s, all delivered, lag not growing",
                held,
                summary=goal == rate,
            )
        )
        ls_name = "`flashfsm ls`"
        for tag, name, baseline in (
            ("p50", "lag append → receipt, p50", f"{ls_name}, in process (one look at the store)"),
            ("p99", "lag p99", f"{ls_name}, in process"),
        ):
            lag = got.lag(int(tag[1:]) / 100)
            rows.append(
                Row(
                    f"live feed {label}: {name}",
                    lag * 1e3,
                    "ms",
                    baseline=baseline,
                    baseline_value=ls_s * 1e3,
                    ratio=f"ls takes {ls_s / lag:.0f}× the feed's {tag}" if lag else "—",
                    summary=goal == rate,
                )
            )
        rows.append(
            Row(
                f"live feed {label}: lag growth, last fifth's median − first fifth's",
                growth * 1e3,
                "ms",
                f"≤ {LAG_GROWTH_S * 1e3:g} ms",
                growth <= LAG_GROWTH_S,
                summary=False,
            )
        )
    details = [
        f"{shape}: the writer (its own process) appended {len(log):,} events to {len(streams)} "
        f"open job streams in {window:g} s ({written_rate:,.0f}/s, its last commit "
        f"{abs(late) * 1e3:.1f} ms {'after' if late > 0 else 'before'} the window's end; one "
        f"group commit per {WRITE_EVERY_S * 1e3:g} ms); the view polled every "
        f"{FEED_POLL_S:g} s; a rate is the events delivered ÷ the writer's window",
        f"{shape}: `/feed`, the writer's events received per whole second from the first: "
        + (
            f"min {min(seconds_got):,}, median {median(seconds_got):,.0f}, max "
            f"{max(seconds_got):,} over {len(seconds_got)} s"
            if seconds_got
            else "no whole second"
        ),
        f"{shape}: `/feed` had {everyone.delivered:,} of the writer's events in "
        f"{everyone.messages} messages of their streams; `/feed?stream=` {own.delivered:,} of "
        f"{own_written:,} in {own.messages} messages, with {own.event_rows:,} event rows",
        f"{shape}: the view's refresh under the load: median "
        f"{fmt(median(under_load) * 1e3)} ms, p99 {fmt(percentile(under_load, 0.99) * 1e3)} "
        f"ms, max {fmt(max(under_load) * 1e3)} ms over {len(under_load)} refreshes"
        if under_load
        else "no refresh ran under the load",
        *notes,
    ]
    return rows, details


def long_stream_rows(url: str, index: Any, days: int, rounds: int) -> Section:
    """An open job stream of a `days`-day watch added to the store: what a refresh that finds
    nothing new costs then, and one after an event is appended to that stream, beside the
    refresh without it."""
    from common import fill, seven_day_events, training_log

    from flashfsm.adapters.stores import open_store
    from flashfsm.events.models import StatusObserved
    from flashfsm.ids import new_id

    began = time.perf_counter()
    name = f"job-bench-ui-{days}d"
    count = seven_day_events() * days // 7
    section = Section(f"ui: a refresh beside an open job stream of a {days}-day watch")

    def refresh() -> float:
        start = time.perf_counter()
        index.refresh()
        return time.perf_counter() - start

    without = [refresh() for _ in range(rounds)]
    store = open_store(url)
    try:
        fill(store, name, training_log(name, count))
        first = refresh()  # (reads the new stream whole)
        entry = index.entry(name)
        assert entry is not None and entry.events is not None, entry
        last = entry.events[-1]
        idle = [refresh() for _ in range(rounds)]
        written = []
        for i in range(rounds):
            seq, at = last.seq + 1 + i, last.at + 10.0 * (i + 1)
            event = StatusObserved(stream=name, seq=seq, id=new_id(at), at=at, status="IN_PROGRESS")
            store.append(name, [event], seq)
            written.append(refresh())
    finally:
        store.close()
    base = median(without)
    for label, values in (
        ("a refresh that finds nothing new", idle),
        ("a refresh after one event is appended to it", written),
    ):
        value = median(values)
        section.rows.append(
            Row(
                f"{label}, an open {days}-day job stream ({count:,} events) in the store",
                value * 1e3,
                "ms",
                baseline="a refresh that finds nothing new without it",
                baseline_value=base * 1e3,
                ratio=f"{value / base:.1f}× without it",
            )
        )
    section.details += [
        f"the stream: `common.training_log` (a poll every 10 s, a heartbeat every sixth), a job "
        f"no run queued, its bill open; read whole by the view's next refresh in "
        f"{fmt(first * 1e3)} ms",
        f"refreshes, ms (median of {rounds}): without it {fmt(base * 1e3)}; with it, nothing "
        f"new {fmt(median(idle) * 1e3)}; one event appended to it each time "
        f"{fmt(median(written) * 1e3)} (max {fmt(max(written) * 1e3)})",
    ]
    section.seconds = time.perf_counter() - began
    return section


def goal_text(seconds: float, goal: float) -> str:
    """What a figure misses its goal by ("" when it meets it)."""
    if seconds <= goal:
        return ""
    return f"; NOT MET: {(seconds - goal) * 1e3:.0f} ms over the goal"


def scrape_once(client: Any) -> tuple[float, str]:
    """One `GET /metrics`: its seconds and its text (asserted to have read the store)."""
    start = time.perf_counter()
    response = client.get("/metrics")
    spent = time.perf_counter() - start
    response.raise_for_status()
    assert "flashfsm_store_up 1.0" in response.text, response.text[:300]
    return spent, response.text


def metrics_rows(
    base: str, url: str, ls_s: float, rounds: int, max_age_s: float
) -> tuple[list[Row], list[str]]:
    """`GET /metrics` through the served app, and a `GET /` sent while a scrape is being
    collected (each scrape past the cache's age, `max_age_s`: it collects anew)."""
    import httpx

    from flashfsm.metrics import read_store_facts

    rows, details = [], []
    scrapes: list[float] = []
    pages: list[float] = []
    overlapped = 0
    with httpx.Client(base_url=base, timeout=120) as client:
        scrape_once(client)  # (warm: the first collection also starts the process collector)
        size = 0
        for _ in range(rounds):
            time.sleep(max_age_s + 0.05)
            spent, text = scrape_once(client)
            scrapes.append(spent)
            size = len(text)
        for _ in range(rounds):
            time.sleep(max_age_s + 0.05)
            with httpx.Client(base_url=base, timeout=120) as other:
                scrape = threading.Thread(target=scrape_once, args=(other,))
                scrape.start()
                time.sleep(CONCURRENT_AFTER_S)
                start = time.perf_counter()
                page = client.get("/")
                answered = time.perf_counter()
                page.raise_for_status()
                overlapped += scrape.is_alive()
                scrape.join(120)
            pages.append(answered - start)
    started = time.perf_counter()
    old = read_store_facts(url)
    old_s = time.perf_counter() - started
    assert sum(old.streams.values()) > 0
    scrape_s, worst = median(scrapes), max(scrapes)
    title = f"GET /metrics (the store's facts from the view's index; worst of {len(scrapes)})"
    rows.append(versus_ls(title, worst, SCRAPE_GOAL_S, ls_s))
    page_s = max(pages)
    title = f"GET / sent {CONCURRENT_AFTER_S * 1e3:g} ms into a scrape (worst of {len(pages)})"
    rows.append(versus_ls(title, page_s, CONCURRENT_GOAL_S, ls_s))
    details += [
        f"GET /metrics: median {fmt(scrape_s * 1e3)} ms, worst {fmt(worst * 1e3)} ms over "
        f"{len(scrapes)} ({size / 1024:.0f} KiB); before issue 38 a scrape read the whole "
        f"store (`read_store_facts`, in process): {old_s:.2f} s "
        f"({old_s / max(scrape_s, 1e-9):.0f}× the scrape now, {old_s / ls_s:.2f}× ls)"
        f"{goal_text(worst, SCRAPE_GOAL_S)}",
        f"GET / during a scrape: median {fmt(median(pages) * 1e3)} ms, worst "
        f"{fmt(page_s * 1e3)} ms over {len(pages)}; the scrape was still being collected "
        f"when the page answered in {overlapped} of {len(pages)}"
        f"{goal_text(page_s, CONCURRENT_GOAL_S)}",
    ]
    return rows, details


def first_page_rows(url: str, ls_s: float) -> tuple[list[Row], list[str]]:
    """A view started with no index built, as `flashfsm ui` starts: the time from its start
    to its first page answered, then until its first read is whole (the page stops saying
    "reading the store"), and what each page cost meanwhile."""
    import httpx

    start = time.perf_counter()
    polls: list[float] = []
    with serving(url, None, FEED_POLL_S) as base, httpx.Client(base_url=base, timeout=120) as c:
        served = time.perf_counter() - start
        asked = time.perf_counter()
        page = c.get("/")
        page.raise_for_status()
        first = time.perf_counter() - start
        polls.append(time.perf_counter() - asked)
        counted = re.search(r'id="total-count">(\d+)<', page.text)
        shown = int(counted.group(1)) if counted else -1
        reading = "reading the store" in page.text
        whole = first
        text = page.text
        deadline = time.perf_counter() + 600
        while "reading the store" in text and time.perf_counter() < deadline:
            time.sleep(0.5)
            asked = time.perf_counter()
            response = c.get("/")
            response.raise_for_status()
            polls.append(time.perf_counter() - asked)
            text = response.text
            whole = time.perf_counter() - start
        counted = re.search(r'id="total-count">(\d+)<', text)
        total = int(counted.group(1)) if counted else -1
    rows = [
        Row(
            "a view just started (no index built): its start to its first page answered",
            first,
            "s",
            f"≤ {FIRST_PAGE_GOAL_S:g} s",
            first <= FIRST_PAGE_GOAL_S,
            baseline="`flashfsm ls`, in process",
            baseline_value=ls_s,
            ratio=f"{first / ls_s:.2f}× ls",
        ),
        Row(
            "— and until its first read of the store is whole (the page stops saying so)",
            whole,
            "s",
            baseline="`flashfsm ls`, in process",
            baseline_value=ls_s,
            ratio=f"{whole / ls_s:.2f}× ls",
            summary=False,
        ),
    ]
    details = [
        f"a view just started: serving after {served:.2f} s, its first page answered at "
        f"{first:.2f} s ({shown:,} stream(s) read by then"
        f"{', saying it is reading the store' if reading else ''}), the whole store "
        f"({total:,} streams) read and priced at {whole:.2f} s; the runs page meanwhile: "
        f"median {fmt(median(polls) * 1e3)} ms, worst {fmt(max(polls) * 1e3)} ms over "
        f"{len(polls)}{goal_text(first, FIRST_PAGE_GOAL_S)}"
    ]
    return rows, details


def refresh_rows(index: Any, ls_s: float) -> tuple[list[Row], list[str]]:
    """Refreshes that find nothing new: the ordinary ones and the slow sweep's."""
    from flashfsm.ui.index import SLOW_SWEEP_EVERY

    ordinary: list[float] = []
    sweeps: list[float] = []
    for k in range(1, 2 * SLOW_SWEEP_EVERY + 1):
        start = time.perf_counter()
        changes = index.refresh()
        spent = time.perf_counter() - start
        assert not changes, changes[:3]
        # (the index's first refresh was the build; every SLOW_SWEEP_EVERY-th sweeps)
        (sweeps if (k + 1) % SLOW_SWEEP_EVERY == 0 else ordinary).append(spent)
    value = median(ordinary)
    rows = [
        Row(
            "a refresh that finds nothing new (median): the cost of every poll",
            value * 1e3,
            "ms",
            baseline="`flashfsm ls`, in process",
            baseline_value=ls_s * 1e3,
            ratio=f"{value / ls_s:.4f}× ls",
        ),
        Row(
            f"the slow sweep's refresh (one in {SLOW_SWEEP_EVERY}: concluded streams read again)",
            median(sweeps) * 1e3,
            "ms",
            summary=False,
        ),
    ]
    details = [
        f"refreshes with nothing new: median {fmt(value * 1e3)} ms, max "
        f"{fmt(max(ordinary) * 1e3)} ms over {len(ordinary)}; the sweep's "
        f"{', '.join(fmt(s * 1e3) for s in sweeps)} ms; at the default poll (0.5 s) an idle "
        f"view spends {value / 0.5:.0%} of a core polling ({value / FEED_POLL_S:.0%} at "
        f"{FEED_POLL_S:g} s)"
    ]
    return rows, details


def run(quick: bool) -> list[Section]:
    size = 1_000 if quick else 10_000
    rounds = 5 if quick else ROUNDS
    feed_s = FEED_S_QUICK if quick else FEED_S
    start = time.perf_counter()
    path, streams, events = cached_store(size)
    made = time.perf_counter() - start
    url = working_copy(path, f"work-{size}")
    page = Section(f"ui: the runs page, {streams:,} streams ({events:,} events)")
    feed = Section(
        f"ui: the live feed, {FEED_GOAL_PER_S:,.0f} appends/s for {feed_s:g} s, to every open "
        "job stream and to a few"
    )
    try:
        builds, lss = [], []
        index: Any = None
        for _ in range(1 if quick else 2):  # interleaved: the view's first read, then ls
            if index is not None:
                index.close()
            index, built = build_index(url)
            builds.append(built)
            lss.append(ls_in_process(url))
        ls_s, build_s = median(lss), median(builds)
        command_s = None if quick else ls_subprocess(url)
        page.rows.append(
            Row(
                f"the view's first read: `StoreIndex(url).refresh()` (mean of {len(builds)})",
                build_s,
                "s",
                baseline=f"`flashfsm ls`, in process (mean of {len(lss)})",
                baseline_value=ls_s,
                ratio=f"{build_s / ls_s:.2f}× ls",
            )
        )
        rows, details = page_rows(url, index, ls_s, rounds)
        page.rows += rows
        page.details += details
        rows, details = refresh_rows(index, ls_s)
        page.rows += rows
        page.details += details
        rows, details = first_page_rows(url, ls_s)
        page.rows += rows
        page.details += details
        with serving(url, index, FEED_POLL_S) as base:
            rows, details = http_rows(base, ls_s, rounds)
            page.rows += rows
            page.details += details
            rows, details = metrics_rows(base, url, ls_s, rounds, FEED_POLL_S)
            page.rows += rows
            page.details += details
            page.seconds = time.perf_counter() - start
            began = time.perf_counter()
            spent = timed_refresh(index)
            with writer_process(url) as writer:
                for count in (None, FEED_STREAMS):  # (the few streams grow long: last)
                    streams = writer_streams(index, count)
                    rows, details = run_feed(
                        writer, base, streams, FEED_GOAL_PER_S, feed_s, ls_s, spent
                    )
                    feed.rows += rows
                    feed.details += details
            feed.seconds = time.perf_counter() - began
        long = long_stream_rows(url, index, 1 if quick else 7, rounds)
        index.close()
        page.details += [
            f"the store: copies of the demo's 13 streams, the newest {OPEN_SHARE:.0%} cut "
            f"half-way (open); "
            f"{sum(1 for r in index.rows() if r['ok'] is None):,} open streams; "
            f"{'cached' if made < 1 else 'built'} in {made:.1f} s",
            f"`flashfsm ls` in process: {', '.join(f'{s:.2f}' for s in lss)} s; as a command "
            f"(`flashfsm ls --store URL`, its interpreter's start included): "
            + ("not timed (quick)" if command_s is None else f"{command_s:.2f} s"),
            f"the view's first read: {', '.join(f'{s:.2f}' for s in builds)} s",
        ]
    finally:
        target = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
    return [page, feed, long]


def main() -> None:
    bench_main(__doc__, run)


if __name__ == "__main__":
    main()
