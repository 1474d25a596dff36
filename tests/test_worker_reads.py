"""Issue 28, the client side: reading the platform's own records of a job's worker.

Parsers first (`flashfsm.adapters.observations`: hostile payloads never raise), then the
sans-IO SSE reader (`LogTail`) byte by byte, then both RunPod clients against a tiny
loopback HTTP server (`http.server` in a thread on 127.0.0.1) that plays the worker-log
route's edge cases: SSE framing, gzip, chunked bodies, a 50 MiB log, a trickle, a stream
that never closes, and the usual 401/404/429/5xx answers. Byte and time bounds are
measured with generous margins (the machine is shared).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashfsm.adapters import observations as obs
from flashfsm.adapters.runpod import (
    LOG_MAX_BYTES,
    LOG_QUIET_S,
    LOG_TAIL_MAX,
    LOG_TIME_BUDGET_S,
    ROUTES,
    AsyncRunpodClient,
    LogTail,
    RetryPolicy,
    RunpodAuthError,
    RunpodClient,
    TailRead,
)
from flashfsm.adapters.simulator import Simulator
from flashfsm.errors import RunpodApiError
from flashfsm.events.models import (
    LOG_LINE_CAP,
    LOG_LINES_MAX,
    MESSAGE_CAP,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.events.text import MASK
from flashfsm.redact import register_secrets

KEY = "rp_worker_reads_test_key_0123456789abcdef"
FLAVORS = ("sync", "async")
EP, WK = "ep-1", "wk-1"
LOG_PATH = f"/v2/serverless/{EP}/workers/{WK}/logs"
MiB = 1024 * 1024
SLACK_S = 2.5  # scheduling slack on a loaded 2-core machine
register_secrets(KEY)  # as a client does: the parser tests mask it too

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["running", "unhealthy", "idle", WK, "2024-05-01T12:00:00Z"]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=25,
)


# ======================================================================= parsers


def test_status_worker_id_takes_only_an_id_string():
    assert obs.status_worker_id({"status": "IN_PROGRESS", "workerId": WK}) == WK
    for bad in (
        None,
        [],
        "x",
        {},
        {"workerId": None},
        {"workerId": 7},
        {"workerId": "  "},
        {"workerId": ["w"]},
        {"workerId": "w" * 10_000},
    ):
        assert obs.status_worker_id(bad) is None


WORKERS = {
    "workers": [
        {
            "id": "wk-0",
            "status": "idle",
            "gpuTypeId": "NVIDIA A40",
            "dataCenterId": "EU-RO-1",
            "startedAt": "2024-05-01T11:00:00Z",
        },
        {
            "id": WK,
            "status": "running",
            "gpuTypeId": "NVIDIA H100 80GB HBM3",
            "dataCenterId": "US-KS-2",
            "startedAt": "2024-05-01T12:00:00.250+02:00",
            "uptimeSeconds": 42,
        },
    ],
    "summary": {"running": 1, "idle": 1},
    "endpointVersion": 3,
}


def test_worker_fields_read_the_listed_worker_and_the_idle_timeout():
    fields = obs.worker_fields(WORKERS, {"id": EP, "idleTimeout": 5}, WK)
    assert fields == {
        "worker_id": WK,
        "found": True,
        "gpu_type": "NVIDIA H100 80GB HBM3",
        "datacenter": "US-KS-2",
        "started_at": 1714557600.25,  # 10:00:00.25 UTC
        "idle_timeout_s": 5.0,
        "read_error": None,
        "status": "running",
    }
    event = WorkerObserved(stream="s", seq=0, id="e", at=1.0, **fields)
    assert event.started_at == 1714557600.25 and event.found and event.status == "running"


def test_worker_fields_of_an_unlisted_or_unnamed_worker_are_not_found():
    gone = obs.worker_fields(WORKERS, None, "wk-gone")
    assert gone["found"] is False and gone["worker_id"] == "wk-gone"
    assert gone["gpu_type"] is None and gone["started_at"] is None
    assert gone["idle_timeout_s"] is None
    assert obs.worker_fields({"workers": []}, {}, None)["found"] is False
    assert obs.worker_fields(None, {}, None)["found"] is False


def test_with_no_worker_named_the_endpoints_worker_is_picked_crash_loop_first():
    # (the job is queued: no status names a worker, the endpoint's list is read)
    picked = obs.worker_fields(WORKERS, {}, None)
    assert (picked["worker_id"], picked["status"], picked["found"]) == (WK, "running", True)
    listing = {
        "workers": [
            {"id": "a", "status": "IDLE"},
            {"id": "b", "status": "initializing"},
            {"id": "c", "status": "Unhealthy", "startedAt": "2024-05-01T12:00:00Z"},
            {"status": "unhealthy"},  # (no id: never picked)
        ]
    }
    crash = obs.worker_fields(listing, {}, None)
    assert (crash["worker_id"], crash["status"], crash["started_at"]) == (
        "c",
        "unhealthy",
        1714564800.0,
    )
    listing["workers"] = listing["workers"][:2]
    assert obs.worker_fields(listing, {}, None)["worker_id"] == "b"


@pytest.mark.parametrize(
    "started",
    [
        None,
        7,
        "",
        "yesterday",
        "2024-05-01",  # a date, no time
        "2024-05-01T12:00:00",  # no offset: ambiguous
        "2024-13-01T12:00:00Z",
        "2024-05-01T12:00:60Z",
        "2024-05-01T12:00:00Z" + " " * 100,
        ["2024-05-01T12:00:00Z"],
        "9" * 5000,
    ],
)
def test_a_bad_start_time_is_none(started):
    payload = {"workers": [{"id": WK, "startedAt": started}]}
    fields = obs.worker_fields(payload, None, WK)
    assert fields["found"] is True and fields["started_at"] is None


def test_rfc3339_forms():
    assert obs.rfc3339_epoch("2024-05-01T10:00:00Z") == 1714557600.0
    assert obs.rfc3339_epoch("2024-05-01t10:00:00.5z") == 1714557600.5
    assert obs.rfc3339_epoch("2024-05-01 12:00:00+02:00") == 1714557600.0
    assert obs.rfc3339_epoch("2024-05-01T10:00:00.123456789Z") == pytest.approx(1714557600.123456)


@pytest.mark.parametrize(
    "idle", [None, "5", True, -1, float("nan"), float("inf"), {"s": 5}, 10**400]
)
def test_a_bad_idle_timeout_is_none(idle):
    assert obs.worker_fields(WORKERS, {"idleTimeout": idle}, WK)["idle_timeout_s"] is None


def test_worker_error_fields_are_short_masked_and_not_found():
    error = RunpodApiError(
        f"RunPod endpoint_workers: HTTP 500: {KEY} " + "x" * 5000, status_code=500
    )
    fields = obs.worker_error_fields(error, WK)
    assert fields["found"] is False and fields["worker_id"] == WK
    assert fields["read_error"].startswith("RunpodApiError HTTP 500: ")
    assert KEY not in fields["read_error"] and len(fields["read_error"]) <= MESSAGE_CAP
    event = WorkerObserved(stream="s", seq=0, id="e", at=1.0, **fields)
    assert event.read_error == fields["read_error"]


def test_pick_worker_prefers_the_jobs_worker_then_unhealthy_then_running():
    assert obs.pick_worker(WORKERS, WK) == (WK, "running")
    assert obs.pick_worker(WORKERS, "wk-gone") == ("wk-gone", None)
    crash = {
        "workers": [
            {"id": "a", "status": "idle"},
            {"id": "b", "status": "running"},
            {"id": "c", "status": "UNHEALTHY"},
            {"id": "d", "status": "unhealthy"},
        ]
    }
    assert obs.pick_worker(crash, None) == ("c", "UNHEALTHY")
    assert obs.pick_worker({"workers": crash["workers"][:2]}, None) == ("b", "running")
    assert obs.pick_worker({"workers": [{"id": "a"}, {"id": "b"}]}, None) == ("a", None)
    for empty in (None, {}, {"workers": []}, {"workers": "x"}, {"workers": [{"id": 3}, "w"]}):
        assert obs.pick_worker(empty, None) is None


def test_worker_log_fields_keep_the_last_lines_and_build_an_event():
    secret_line = f"token={KEY} " + "y" * (LOG_LINE_CAP + 500)
    answer = {
        "lines": [f"{i} {secret_line}" for i in range(LOG_LINES_MAX + 50)],
        "truncated": False,
    }
    fields = obs.worker_log_fields(answer, WK, "unhealthy")
    assert len(fields["lines"]) == LOG_LINES_MAX and fields["truncated"] is True
    assert fields["lines"][0].startswith("50 ") and fields["lines"][-1].startswith(
        f"{LOG_LINES_MAX + 49} "
    )
    event = WorkerLogObserved(stream="s", seq=0, id="e", at=1.0, **fields)
    assert len(event.lines) == LOG_LINES_MAX
    assert all(len(line) <= LOG_LINE_CAP and KEY not in line for line in event.lines)
    assert MASK in event.lines[0]
    assert WorkerLogObserved.model_validate_json(event.model_dump_json()) == event

    exact = obs.worker_log_fields({"lines": ["a", 3, None, "b"], "truncated": True}, WK, None)
    assert exact["lines"] == ("a", "b") and exact["truncated"] is True
    assert obs.worker_log_fields({"lines": ["a"]}, WK, None)["truncated"] is False


@pytest.mark.parametrize("answer", [None, "lines", [], {}, {"lines": "abc"}, {"lines": {"a": 1}}])
def test_worker_log_fields_of_an_odd_answer_are_empty(answer):
    fields = obs.worker_log_fields(answer, WK, "running")
    assert fields["lines"] == () and fields["truncated"] is False
    WorkerLogObserved(stream="s", seq=0, id="e", at=1.0, **fields)


def test_worker_log_error_fields():
    fields = obs.worker_log_error_fields(httpx.ReadTimeout("slow"), WK, "unhealthy")
    assert fields["read_error"] == "ReadTimeout: slow" and fields["lines"] == ()
    assert fields["worker_status"] == "unhealthy"
    WorkerLogObserved(stream="s", seq=0, id="e", at=1.0, **fields)

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise KeyError("no")

    assert obs.worker_log_error_fields(Unprintable(), WK, None)["read_error"] == "Unprintable"


@settings(max_examples=300, deadline=None)
@given(workers=json_values, endpoint=json_values, wid=json_values, log=json_values)
def test_the_platform_parsers_never_raise_and_always_build_events(workers, endpoint, wid, log):
    if isinstance(workers, dict) and isinstance(wid, str) and workers:
        workers = {"workers": [workers, {"id": wid, **workers}]}
    obs.status_worker_id(workers)
    fields = obs.worker_fields(workers, endpoint, wid)
    WorkerObserved(stream="s", seq=0, id="e", at=1.0, **fields)
    picked = obs.pick_worker(workers, wid)
    assert picked is None or isinstance(picked[0], str)
    status = picked[1] if picked else None
    log_fields = obs.worker_log_fields(log, wid, status)
    WorkerLogObserved(stream="s", seq=0, id="e", at=1.0, **log_fields)


def test_huge_payloads_stay_cheap():
    many = {"workers": [{"id": f"w{i}", "status": "idle"} for i in range(100_000)]}
    start = time.monotonic()
    assert obs.pick_worker(many, None) == ("w0", "idle")
    assert obs.worker_fields(many, None, "w99999")["found"] is True
    lines = obs.worker_log_fields({"lines": ["x" * 100] * 1_000_000}, WK, None)["lines"]
    assert len(lines) == LOG_LINES_MAX
    assert time.monotonic() - start < 5


# ======================================================================= LogTail (sans-IO)


def sse(*lines: str, eol: str = "\n", source: str = "container") -> bytes:
    """Events, one per line, each with an id and a JSON data field."""
    out = []
    for i, line in enumerate(lines):
        data = json.dumps({"source": source, "line": line, "ts": "2024-05-01T10:00:00Z"})
        out.append(f"id: {i}{eol}data: {data}{eol}{eol}")
    return "".join(out).encode()


FRAMING = (
    b": a comment first\r\n"
    b"retry: 1000\r\n\r\n"
    b'id: 1\r\ndata: {"source": "system", "line": "crlf \xc3\xa9t\xc3\xa9"}\r\n\r\n'
    b'id: 2\rdata: {"line": "cr only"}\r\r'
    b'event: log\ndata:{"line": "no space\\n"}\n\n'
    b'data: {"source": "container",\ndata:  "line": "two data lines"}\n\n'
    b"data: not json\n\n"
    b'data: {"no_line": 1}\n\n'
    b'data: {"line": 42}\n\n'
    b"data: [1, 2]\n\n"
    b"id: 99\n\n"
    b": keep-alive\n\n"
    b'data: {"line": "last, no blank line"}'
)
FRAMED = [
    "crlf été",
    "cr only",
    "no space",
    "two data lines",
    "last, no blank line",
]


@pytest.mark.parametrize("step", [1, 2, 3, 7, len(FRAMING)])
def test_log_tail_framing_whatever_the_chunking(step):
    tail = LogTail(TailRead(lines=100), None)
    for at in range(0, len(FRAMING), step):
        assert tail.feed(FRAMING[at : at + step]) is False
    tail.end()
    assert tail.result() == {"lines": FRAMED, "truncated": False}


def test_log_tail_cut_drops_the_unfinished_event():
    tail = LogTail(TailRead(lines=100), None)
    tail.feed(FRAMING)
    tail.cut()
    assert tail.result() == {"lines": FRAMED[:-1], "truncated": True}


def test_log_tail_stops_at_tail_lines_and_keeps_the_last():
    tail = LogTail(TailRead(lines=3), None)
    assert tail.feed(sse("a", "b")) is False
    assert tail.feed(sse("c")) is True
    assert tail.result() == {"lines": ["a", "b", "c"], "truncated": False}
    more = LogTail(TailRead(lines=3), None)
    assert more.feed(sse("a", "b", "c", "d", "e")) is True
    assert more.result() == {"lines": ["c", "d", "e"], "truncated": True}


def test_log_tail_bounds_bytes_raw_and_decoded_and_masks():
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = sse(*(f"{KEY} {i:06d} " + "z" * 200 for i in range(2000)))  # ~0.5 MiB
    tail = LogTail(TailRead(lines=LOG_TAIL_MAX, max_bytes=MiB), "gzip")
    stopped = False
    for _ in range(40):  # 20 MiB decoded, a few hundred KiB on the wire
        if tail.feed(packer.compress(block) + packer.flush(zlib.Z_SYNC_FLUSH)):
            stopped = True
            break
    assert stopped and tail.decoder.size == MiB
    got = tail.result()
    assert got["truncated"] is True and 2000 < len(got["lines"]) < 5000
    assert all(line.startswith(f"{MASK} ") and KEY not in line for line in got["lines"])

    raw = LogTail(TailRead(lines=10, max_bytes=1000), None)
    assert raw.feed(b"data: " + b"x" * 999) is False or raw.truncated
    assert raw.feed(b"x") is True and raw.result() == {"lines": [], "truncated": True}


# ======================================================================= loopback server


class Loopback:
    """A threaded `http.server` on 127.0.0.1 whose every GET is answered by `handle`."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler, Loopback], None], *, http11=False):
        self.handle = handle
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.sent = 0  # body bytes the handlers managed to write
        self.stop = threading.Event()
        self.finished = threading.Event()  # set each time a handler returns
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if http11 else "HTTP/1.0"

            def do_GET(self) -> None:
                outer.paths.append(self.path)
                outer.headers.append(dict(self.headers))
                try:
                    outer.handle(self, outer)
                except OSError:
                    self.close_connection = True  # the client went away: that is the point
                finally:
                    outer.finished.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def write(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        h.wfile.write(data)
        self.sent += len(data)

    def hold(self, seconds: float = 60.0) -> None:
        """Keep the connection open, sending nothing (until the test ends)."""
        self.stop.wait(seconds)

    def __enter__(self) -> Loopback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def head(h: BaseHTTPRequestHandler, status: int = 200, **headers: str) -> None:
    h.send_response(status)
    h.send_header("Content-Type", headers.pop("content_type", "text/event-stream"))
    for name, value in headers.items():
        h.send_header(name.replace("_", "-"), value)
    h.end_headers()


def answer_json(h: BaseHTTPRequestHandler, status: int, body: Any, **headers: str) -> None:
    data = json.dumps(body).encode()
    head(h, status, content_type="application/json", Content_Length=str(len(data)), **headers)
    h.wfile.write(data)


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    elapsed: float = 0.0
    sleeps: list[float] = field(default_factory=list)


def call(flavor: str, url: str, op: str, *args: Any, lean: bool = True, **kwargs: Any) -> Outcome:
    """One client call on a fresh client (its construction not timed); never raises."""
    out = Outcome()
    options: dict[str, Any] = {
        "endpoint_base_url": f"{url}/v2",
        "api_base_url": url,
        "rng": random.Random(7),
        "sleep": out.sleeps.append,
    }
    for name in ("deadline_s", "retry"):
        if name in kwargs:
            options[name] = kwargs.pop(name)
    try:
        if flavor == "sync":
            with RunpodClient(KEY, **options) as client:
                start = time.monotonic()
                try:
                    out.value = getattr(client, op)(*args, **kwargs)
                finally:
                    out.elapsed = time.monotonic() - start
        else:
            if not lean:
                options["http_client"] = httpx.AsyncClient()

            async def go() -> Any:
                async with AsyncRunpodClient(KEY, **options) as client:
                    start = time.monotonic()
                    try:
                        return await getattr(client, op)(*args, **kwargs)
                    finally:
                        out.elapsed = time.monotonic() - start
                        if not lean:
                            await options["http_client"].aclose()

            out.value = asyncio.run(go())
    except Exception as exc:  # the tests inspect it
        out.error = exc
    return out


@pytest.fixture
def serve() -> Iterator[Callable[..., Loopback]]:
    servers: list[Loopback] = []

    def start(handle: Callable[[BaseHTTPRequestHandler, Loopback], None], **kw: Any) -> Loopback:
        server = Loopback(handle, **kw).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


# ----------------------------------------------------------------------- routes


def test_the_routes_are_idempotent_management_routes():
    workers, log = ROUTES["list_workers"], ROUTES["worker_logs"]
    assert (workers.method, workers.plane, workers.idempotent) == ("GET", "management", True)
    assert workers.required == ("workers",)
    assert (log.method, log.plane, log.idempotent, log.streamed) == (
        "GET",
        "management",
        True,
        True,
    )
    assert log.budget_s == LOG_TIME_BUDGET_S


@pytest.mark.parametrize("flavor", FLAVORS)
def test_endpoint_workers_returns_the_answer_masked(serve, flavor):
    planted = {**WORKERS, "env": {"RUNPOD_API_KEY": KEY, KEY: [f"x{KEY}y"]}}
    srv = serve(lambda h, s: answer_json(h, 200, planted))
    out = call(flavor, srv.url, "endpoint_workers", EP)
    assert out.error is None, out.error
    assert srv.paths == [f"/v2/serverless/{EP}/workers"]
    assert out.value["workers"] == WORKERS["workers"] and out.value["endpointVersion"] == 3
    assert KEY not in json.dumps(out.value)
    assert out.value["env"] == {"RUNPOD_API_KEY": MASK, MASK: [f"x{MASK}y"]}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_endpoint_workers_without_workers_is_malformed(serve, flavor):
    srv = serve(lambda h, s: answer_json(h, 200, {"summary": {}}))
    out = call(flavor, srv.url, "endpoint_workers", EP)
    assert isinstance(out.error, RunpodApiError) and out.error.status_code is None
    assert "malformed" in str(out.error) and out.error.route == "list_workers"


@pytest.mark.parametrize("flavor", FLAVORS)
def test_worker_log_reads_the_backfill_of_a_closing_stream(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        s.write(h, sse("boot", f"HF_TOKEN? no: {KEY}", "Traceback (most recent call last):"))

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, tail=7)
    assert out.error is None, out.error
    assert out.value == {
        "lines": ["boot", f"HF_TOKEN? no: {MASK}", "Traceback (most recent call last):"],
        "truncated": False,
    }
    assert srv.paths == [f"{LOG_PATH}?tail=7"]
    sent = {k.lower(): v for k, v in srv.headers[0].items()}
    assert sent["accept"] == "text/event-stream" and sent["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("flavor", FLAVORS)
def test_worker_log_parses_odd_framing_in_a_chunked_body(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h, Transfer_Encoding="chunked")
        for at in range(0, len(FRAMING), 5):  # chunk edges inside CRLFs and UTF-8
            piece = FRAMING[at : at + 5]
            s.write(h, b"%x\r\n%s\r\n" % (len(piece), piece))
        s.write(h, b"0\r\n\r\n")

    srv = serve(handle, http11=True)
    out = call(flavor, srv.url, "worker_log", EP, WK)
    assert out.error is None, out.error
    assert out.value == {"lines": FRAMED, "truncated": False}


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("lean", [True, False], ids=["lean", "httpx"])
def test_a_stream_that_never_closes_stops_once_quiet(serve, flavor, lean):
    if flavor == "sync" and not lean:
        pytest.skip("one sync transport")

    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h, Transfer_Encoding="chunked")
        body = sse("one", "two", "three")
        s.write(h, b"%x\r\n%s\r\n" % (len(body), body))
        s.hold()  # the real API: live lines would follow, none do

    srv = serve(handle, http11=True)
    out = call(flavor, srv.url, "worker_log", EP, WK, lean=lean)
    assert out.error is None, out.error
    assert out.value == {"lines": ["one", "two", "three"], "truncated": False}
    assert LOG_QUIET_S * 0.9 <= out.elapsed < LOG_QUIET_S + SLACK_S


@pytest.mark.parametrize("flavor", FLAVORS)
def test_an_empty_log_that_never_closes_is_empty_after_the_quiet(serve, flavor):
    srv = serve(lambda h, s: (head(h), h.wfile.flush(), s.hold()))
    out = call(flavor, srv.url, "worker_log", EP, WK)
    assert out.value == {"lines": [], "truncated": False}, out.error
    assert out.elapsed < LOG_QUIET_S + SLACK_S


@pytest.mark.parametrize("flavor", FLAVORS)
def test_tail_lines_end_the_read_of_a_chatty_stream(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        s.write(h, sse(*(f"backfill {i}" for i in range(5))))
        while not s.stop.wait(0.2):  # live lines and keep-alives, forever
            s.write(h, b": keep-alive\n\n" + sse("live"))

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, tail=5, deadline_s=6)
    assert out.error is None, out.error
    assert out.value["lines"][-1] in ("backfill 4", "live")
    assert len(out.value["lines"]) == 5
    assert out.elapsed < 3  # not the 6 s budget


@pytest.mark.parametrize("flavor", FLAVORS)
def test_keep_alive_comments_alone_end_at_the_time_budget(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        s.write(h, sse("a", "b"))
        while not s.stop.wait(0.3):
            s.write(h, b": ping\n\n")

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, deadline_s=2)
    assert out.value == {"lines": ["a", "b"], "truncated": True}, out.error
    assert 1.8 <= out.elapsed < 2 + SLACK_S


def _big_log(srv: Loopback, h: BaseHTTPRequestHandler, total: int, block: bytes) -> None:
    while srv.sent < total and not srv.stop.is_set():
        srv.write(h, block)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_50_mib_log_costs_a_bounded_read(serve, flavor):
    block = sse(*(f"line {i:05d} " + "q" * 990 for i in range(64)))  # ~66 KiB

    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        _big_log(s, h, 50 * MiB, block)

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, tail=LOG_TAIL_MAX)
    assert out.error is None, out.error
    assert out.value["truncated"] is True
    assert 500 < len(out.value["lines"]) <= LOG_MAX_BYTES // 1000
    assert out.elapsed < 5
    assert srv.finished.wait(10), "the server kept writing"
    assert srv.sent < 20 * MiB, srv.sent  # 1 MiB read, the rest in socket buffers at most


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_50_mib_line_costs_a_bounded_read(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        s.write(h, b'data: {"line": "')
        _big_log(s, h, 50 * MiB, b"x" * 65536)

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK)
    assert out.value == {"lines": [], "truncated": True}, out.error
    assert out.elapsed < 5
    assert srv.finished.wait(10) and srv.sent < 20 * MiB


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_gzip_log_is_decoded_and_bounded_after_decoding(serve, flavor):
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = sse(*(f"g {i:05d} " + "z" * 500 for i in range(100)))
    wire = [packer.compress(block) + packer.flush(zlib.Z_SYNC_FLUSH) for _ in range(1000)]
    assert sum(map(len, wire)) < 2 * MiB  # ~50 MiB once decoded

    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h, Content_Encoding="gzip")
        for piece in wire:
            s.write(h, piece)
        s.hold()

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, tail=LOG_TAIL_MAX)
    assert out.error is None, out.error
    assert out.value["truncated"] is True and out.value["lines"][0].startswith("g ")
    assert 1000 < len(out.value["lines"]) <= LOG_MAX_BYTES // 500
    assert out.elapsed < 5

    small = serve(
        lambda h, s: (
            head(h, Content_Encoding="gzip"),
            s.write(h, zlib.compress(sse("zipped"), wbits=31)),
        )
    )
    assert call(flavor, small.url, "worker_log", EP, WK).value == {
        "lines": ["zipped"],
        "truncated": False,
    }


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_trickling_body_ends_at_the_time_budget(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        s.write(h, sse("first"))
        for byte in sse("never whole") * 100:
            if s.stop.wait(0.5):  # a byte every half second: never quiet
                return
            s.write(h, bytes([byte]))

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, deadline_s=3)
    assert out.value == {"lines": ["first"], "truncated": True}, out.error
    assert 2.8 <= out.elapsed < 3 + SLACK_S


def test_the_default_time_budget_holds_for_both_clients_at_once(serve):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        while not s.stop.wait(0.5):
            s.write(h, b":")  # a byte per half second, forever

    srv = serve(handle)
    outs: dict[str, Outcome] = {}
    threads = [
        threading.Thread(
            target=lambda f=flavor: outs.__setitem__(f, call(f, srv.url, "worker_log", EP, WK))
        )
        for flavor in FLAVORS
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LOG_TIME_BUDGET_S + 10)
    for flavor in FLAVORS:
        out = outs[flavor]
        assert out.value == {"lines": [], "truncated": True}, out.error
        assert LOG_TIME_BUDGET_S - 0.5 <= out.elapsed < LOG_TIME_BUDGET_S + SLACK_S


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_trickling_head_is_a_call_deadline_error(serve, flavor):
    reply = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + sse("late")

    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        for byte in reply:
            if s.stop.wait(0.4):
                return
            h.wfile.write(bytes([byte]))

    srv = serve(handle)
    out = call(flavor, srv.url, "worker_log", EP, WK, deadline_s=2)
    assert isinstance(out.error, RunpodApiError) and "call deadline" in str(out.error), out.error
    assert out.elapsed < 2 + SLACK_S


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_dropped_stream_keeps_its_lines_as_truncated(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h, Transfer_Encoding="chunked")
        body = sse("kept") + b'data: {"line": "half'
        s.write(h, b"%x\r\n%s\r\n" % (len(body), body))
        h.wfile.flush()
        h.close_connection = True  # a chunked body that never ends: a protocol error

    srv = serve(handle, http11=True)
    out = call(flavor, srv.url, "worker_log", EP, WK)
    assert out.value == {"lines": ["kept"], "truncated": True}, out.error


# ----------------------------------------------------------------------- errors and retries


@pytest.mark.parametrize("flavor", FLAVORS)
def test_worker_log_404_and_401_are_not_retried_and_hold_no_key(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        code = 404 if "wk-gone" in h.path else 401
        answer_json(h, code, {"title": "no", "status": code, "detail": f"bad key {KEY}"})

    srv = serve(handle)
    gone = call(flavor, srv.url, "worker_log", EP, "wk-gone")
    assert isinstance(gone.error, RunpodApiError) and gone.error.status_code == 404
    assert gone.error.route == "worker_logs" and KEY not in str(gone.error)
    denied = call(flavor, srv.url, "worker_log", EP, WK)
    assert isinstance(denied.error, RunpodAuthError) and denied.error.status_code == 401
    assert KEY not in str(denied.error)
    assert len(srv.paths) == 2 and gone.sleeps == denied.sleeps == []
    workers = call(flavor, srv.url, "endpoint_workers", EP)
    assert isinstance(workers.error, RunpodAuthError) and KEY not in str(workers.error)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("op", ["worker_log", "endpoint_workers"])
def test_429_and_5xx_are_retried(serve, flavor, op):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        n = len(s.paths)
        if n == 1:
            answer_json(h, 429, {"detail": "slow down"}, Retry_After="0")
        elif n == 2:
            answer_json(h, 503, {"detail": "busy"})
        elif "logs" in h.path:
            head(h)
            s.write(h, sse("ok"))
        else:
            answer_json(h, 200, WORKERS)

    srv = serve(handle)
    args = (EP, WK) if op == "worker_log" else (EP,)
    out = call(flavor, srv.url, op, *args)
    assert out.error is None, out.error
    assert len(srv.paths) == 3 and len(out.sleeps) == 2
    assert out.value == ({"lines": ["ok"], "truncated": False} if op == "worker_log" else WORKERS)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_5xx_without_end_gives_up_after_the_attempts(serve, flavor):
    srv = serve(lambda h, s: answer_json(h, 500, {"detail": "down"}))
    out = call(flavor, srv.url, "worker_log", EP, WK, retry=RetryPolicy(attempts=3))
    assert isinstance(out.error, RunpodApiError) and out.error.status_code == 500
    assert len(srv.paths) == 3


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("tail", [0, -1, LOG_TAIL_MAX + 1, True, 1.5, "10"])
def test_a_bad_tail_is_refused_before_any_request(serve, flavor, tail):
    srv = serve(lambda h, s: None)
    out = call(flavor, srv.url, "worker_log", EP, WK, tail=tail)
    assert isinstance(out.error, ValueError) and srv.paths == []


@pytest.mark.parametrize("flavor", FLAVORS)
def test_ids_are_percent_encoded_in_the_path(serve, flavor):
    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        head(h)
        s.write(h, sse("x"))

    srv = serve(handle)
    call(flavor, srv.url, "worker_log", "e/p", "w?k", tail=1)
    assert srv.paths == ["/v2/serverless/e%2Fp/workers/w%3Fk/logs?tail=1"]


def test_the_async_client_reuses_a_connection_whose_stream_ended(serve):
    ports: list[int] = []

    def handle(h: BaseHTTPRequestHandler, s: Loopback) -> None:
        ports.append(h.client_address[1])
        body = sse(f"call {len(ports)}")
        head(h, Content_Length=str(len(body)))
        s.write(h, body)

    srv = serve(handle, http11=True)

    async def go() -> list[dict[str, Any]]:
        async with AsyncRunpodClient(KEY, api_base_url=srv.url) as client:
            return [await client.worker_log(EP, WK) for _ in range(3)]

    got = asyncio.run(go())
    assert [g["lines"] for g in got] == [["call 1"], ["call 2"], ["call 3"]]
    assert len(set(ports)) == 1  # the body was read to its end: the connection was pooled


# ======================================================================= the simulator


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(speed=0, api_keys=(KEY,)) as s:
        yield s
        assert s.errors == [], s.errors[0]


def on_sim(sim: Simulator, flavor: str, op: str, *args: Any, **kwargs: Any) -> Outcome:
    """`call` on the simulator (its REST v2 host is the management base)."""
    return call(flavor, sim.url, op, *args, **kwargs)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_simulators_failed_worker_read_as_the_watch_reads_it(sim, flavor):
    endpoint = sim.add_endpoint("flash-wr", scenario="failed", idleTimeout=30, startup_s=45)
    job = sim.submit(endpoint, {})
    sim.clock.advance(75)  # picked up at 45 s, failed since
    status = on_sim(sim, flavor, "job_status", endpoint, job).value
    worker = obs.status_worker_id(status)
    assert status["status"] == "FAILED" and worker is not None
    sim.plant_log(worker, f"echo $RUNPOD_API_KEY -> {KEY}")

    workers = on_sim(sim, flavor, "endpoint_workers", endpoint)
    record = on_sim(sim, flavor, "get_endpoint", endpoint)
    assert workers.error is None and record.error is None, (workers.error, record.error)
    fields = obs.worker_fields(workers.value, record.value, worker)
    (life,) = sim.workers(endpoint)
    assert fields["found"] and fields["idle_timeout_s"] == 30
    assert fields["started_at"] == pytest.approx(life["started_at"])
    assert fields["gpu_type"] and fields["datacenter"]
    WorkerObserved(stream="s", seq=0, id="e", at=1.0, **fields)
    assert obs.pick_worker(workers.value, worker) == (worker, "idle")

    log = on_sim(sim, flavor, "worker_log", endpoint, worker, tail=5)
    assert log.error is None, log.error
    assert len(log.value["lines"]) == 5 and log.value["truncated"] is False
    assert log.value["lines"][-1] == f"echo $RUNPOD_API_KEY -> {MASK}"
    whole = on_sim(sim, flavor, "worker_log", endpoint, worker).value
    assert "ValueError: reward model returned NaN" in whole["lines"]
    assert KEY not in json.dumps(whole)
    event = WorkerLogObserved(
        stream="s", seq=0, id="e", at=1.0, **obs.worker_log_fields(whole, worker, "idle")
    )
    assert event.lines[-1].endswith(MASK)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_crash_loop_names_no_worker_so_the_unhealthy_one_is_read(sim, flavor):
    endpoint = sim.add_endpoint("flash-crash", scenario="crash_loop")
    job = sim.submit(endpoint, {})
    sim.clock.advance(300)
    assert obs.status_worker_id(on_sim(sim, flavor, "job_status", endpoint, job).value) is None
    listed = on_sim(sim, flavor, "endpoint_workers", endpoint).value
    chosen = obs.pick_worker(listed, None)
    assert chosen is not None and chosen[1] == "unhealthy"
    log = on_sim(sim, flavor, "worker_log", endpoint, chosen[0], tail=50).value
    assert any("ModuleNotFoundError" in line for line in log["lines"])
    fields = obs.worker_log_fields(log, *chosen)
    assert fields["worker_status"] == "unhealthy" and fields["lines"]


def _sim_worker(sim: Simulator) -> tuple[str, str]:
    endpoint = sim.add_endpoint("flash-stream", scenario="training")
    job = sim.submit(endpoint, {})
    sim.clock.advance(600)
    worker = obs.status_worker_id(sim.job(job).status_answer())
    assert worker is not None
    return endpoint, worker


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
def test_a_simulated_50_mib_flood_is_read_bounded(sim, flavor, gzip):
    endpoint, worker = _sim_worker(sim)
    sim.add_fault("worker_logs", "flood", gzip=gzip)
    out = on_sim(sim, flavor, "worker_log", endpoint, worker, tail=LOG_TAIL_MAX)
    assert out.error is None, out.error
    assert out.value["truncated"] is True and 0 < len(out.value["lines"]) <= LOG_TAIL_MAX
    assert out.elapsed < 5
    again = on_sim(sim, flavor, "worker_log", endpoint, worker, tail=3)
    assert again.value["truncated"] is False and len(again.value["lines"]) == 3


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_simulated_trickle_ends_at_the_budget_and_a_stall_once_quiet(sim, flavor):
    endpoint, worker = _sim_worker(sim)
    sim.add_fault("worker_logs", "trickle", delay_s=0.3)
    out = on_sim(sim, flavor, "worker_log", endpoint, worker, deadline_s=2, tail=LOG_TAIL_MAX)
    assert out.error is None, out.error
    assert out.value["truncated"] is True and len(out.value["lines"]) >= 2
    assert 1.8 <= out.elapsed < 2 + SLACK_S

    sim.add_fault("worker_logs", "trickle", delay_s=3600)  # a line, then nothing
    stalled = on_sim(sim, flavor, "worker_log", endpoint, worker)
    assert stalled.value is not None, stalled.error
    assert len(stalled.value["lines"]) == 1 and stalled.value["truncated"] is False
    assert stalled.elapsed < LOG_QUIET_S + SLACK_S


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("kind", ["malformed", "non_object", "missing_keys"])
def test_spoiled_simulated_events_are_skipped(sim, flavor, kind):
    endpoint, worker = _sim_worker(sim)
    clean = on_sim(sim, flavor, "worker_log", endpoint, worker).value
    sim.add_fault("worker_logs", kind)
    out = on_sim(sim, flavor, "worker_log", endpoint, worker)
    assert out.error is None, out.error
    if kind == "missing_keys":  # every event lost its line
        assert out.value["lines"] == []
    else:
        assert out.value["lines"] == clean["lines"]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_simulated_errors_and_retries(sim, flavor):
    endpoint, worker = _sim_worker(sim)
    gone = on_sim(sim, flavor, "worker_log", endpoint, "w-nobody")
    assert isinstance(gone.error, RunpodApiError) and gone.error.status_code == 404
    assert isinstance(on_sim(sim, flavor, "endpoint_workers", "ep-nowhere").error, RunpodApiError)
    sim.add_fault("worker_logs", 503)
    sim.add_fault("list_workers", 429, retry_after=0)
    log = on_sim(sim, flavor, "worker_log", endpoint, worker, tail=2)
    listed = on_sim(sim, flavor, "endpoint_workers", endpoint)
    assert log.error is None and len(log.value["lines"]) == 2 and len(log.sleeps) == 1
    assert listed.error is None and len(listed.sleeps) == 1
    assert len(sim.requests_for("worker_logs")) == 3 and len(sim.requests_for("list_workers")) == 3
