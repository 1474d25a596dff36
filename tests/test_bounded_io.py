"""Bounded I/O: call deadlines, decoded-size caps and a fuzzed h11 parser, all on loopback.

A raw socket server on 127.0.0.1 plays the hostile RunPod: it trickles its headers or its
body one byte at a time, or answers a small gzip body that inflates to hundreds of MiB.
Whatever it does, a client call ends within its deadline (plus slack) as a `RunpodApiError`,
and memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashfsm import JobHandle, RunpodApiError, poll_job
from flashfsm.adapters.http11 import (
    DEADLINE,
    AsyncH11Transport,
    BoundedDecoder,
    DeadlineTransport,
    ResponseTooLarge,
)
from flashfsm.adapters.runpod import AsyncRunpodClient, RetryPolicy, RunpodClient

KEY = "rp_bounded_io_test_key_0123456789"
STATUS = b'{"id": "j1", "status": "IN_QUEUE"}'
DEADLINE_S = 2.0
SLACK_S = 1.5
#: 256 MiB of zeros gzipped: ~250 KiB on the wire.
BOMB_DECODED = 256 * 1024 * 1024


def _bomb() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    return b"".join(packer.compress(block) for _ in range(BOMB_DECODED // len(block))) + (
        packer.flush()
    )


def _head(body_len: int, extra: str = "") -> bytes:
    return (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {body_len}\r\n{extra}\r\n"
    ).encode()


class LorisServer:
    """A thread-per-connection loopback server that answers with `reply(conn)`."""

    def __init__(self, reply: Callable[[socket.socket, threading.Event], None]):
        self.reply = reply
        self.requests = 0
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.requests += 1
            with contextlib.suppress(OSError):
                self.reply(conn, self.stop)

    def __enter__(self) -> LorisServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(2)


def trickle(data: bytes, every_s: float = 0.5) -> Callable[[socket.socket, threading.Event], None]:
    def reply(conn: socket.socket, stop: threading.Event) -> None:
        for byte in data:
            if stop.wait(every_s):
                return
            conn.sendall(bytes([byte]))

    return reply


def header_trickle() -> Callable[[socket.socket, threading.Event], None]:
    return trickle(_head(len(STATUS)) + STATUS)


def body_trickle() -> Callable[[socket.socket, threading.Event], None]:
    def reply(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(_head(len(STATUS)))
        trickle(STATUS)(conn, stop)

    return reply


def answer(data: bytes) -> Callable[[socket.socket, threading.Event], None]:
    def reply(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(data)

    return reply


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb()


def _hosts(url: str) -> dict[str, str]:
    """Both of the client's hosts (data plane and management) on the loopback server `url`."""
    return {"endpoint_base_url": url + "/v2", "api_base_url": url}


def _sync_status(url: str, **options: object) -> None:
    with RunpodClient(KEY, **_hosts(url), **options) as client:  # type: ignore[arg-type]
        client.job_status("ep1", "j1")


def _async_status(url: str, **options: object) -> None:
    async def go() -> None:
        async with AsyncRunpodClient(KEY, **_hosts(url), **options) as client:  # type: ignore[arg-type]
            await client.job_status("ep1", "j1")

    asyncio.run(go())


CLIENTS = {"sync": _sync_status, "async": _async_status}


@pytest.mark.parametrize("flavor", sorted(CLIENTS))
@pytest.mark.parametrize("make", [header_trickle, body_trickle], ids=["headers", "body"])
def test_a_trickling_server_cannot_stretch_a_call_past_its_deadline(no_proxy, flavor, make):
    with LorisServer(make()) as server:
        started = time.monotonic()
        with pytest.raises(RunpodApiError) as caught:
            CLIENTS[flavor](server.url, deadline_s=DEADLINE_S)
        took = time.monotonic() - started
    assert took < DEADLINE_S + SLACK_S, took
    assert "call deadline" in str(caught.value)
    assert KEY not in str(caught.value)


@pytest.mark.parametrize("make", [header_trickle, body_trickle], ids=["headers", "body"])
def test_the_deadline_transport_cuts_a_request_at_its_deadline_extension(make):
    with LorisServer(make()) as server, httpx.Client(transport=DeadlineTransport()) as client:
        started = time.monotonic()
        request = client.build_request(
            "GET", server.url, extensions={DEADLINE: started + DEADLINE_S}, timeout=30.0
        )
        with pytest.raises(httpx.TimeoutException):
            client.send(request).read()
        assert time.monotonic() - started < DEADLINE_S + SLACK_S


@pytest.mark.parametrize("flavor", sorted(CLIENTS))
def test_retries_stop_at_the_deadline_instead_of_sleeping_past_it(no_proxy, flavor):
    # A 503 with Retry-After 5 would be waited for, but the deadline leaves no time.
    reply = answer(_head(2, "Retry-After: 5\r\n").replace(b"200 OK", b"503 Busy") + b"{}")
    with LorisServer(reply) as server:
        started = time.monotonic()
        with pytest.raises(RunpodApiError) as caught:
            CLIENTS[flavor](server.url, deadline_s=DEADLINE_S)
        assert time.monotonic() - started < 1.0
        assert caught.value.status_code == 503 and server.requests == 1


def refused_with_peak(flavor: str, url: str) -> tuple[RunpodApiError, int]:
    """The error a client of `flavor` ("async-httpx": the async client on httpx's own
    transport), allowed 3 tries, raises on a call to `url`; and the peak memory traced."""
    options: dict[str, object] = {"retry": RetryPolicy(attempts=3)}
    if flavor == "async-httpx":
        options["transport"] = httpx.AsyncHTTPTransport()
    tracemalloc.start()
    try:
        with pytest.raises(RunpodApiError) as caught:
            CLIENTS[flavor.split("-")[0]](url, **options)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return caught.value, peak


@pytest.mark.parametrize(
    "flavor", ["sync", "async", "async-httpx"], ids=["sync", "async-h11", "async-httpx"]
)
def test_a_gzip_bomb_is_refused_once_decoded_bytes_pass_the_cap(no_proxy, flavor, bomb):
    reply = answer(_head(len(bomb), "Content-Encoding: gzip\r\n") + bomb)
    with LorisServer(reply) as server:
        error, peak = refused_with_peak(flavor, server.url)
        assert "once decoded" in str(error) and error.status_code is None
        assert server.requests == 1  # not retried: the same body would come back
    assert peak < 100 * 1024 * 1024, peak  # the cap is 32 MiB; the body inflates to 256 MiB


def gigabyte_body() -> Callable[[socket.socket, threading.Event], None]:
    """A plain (identity) 1 GiB answer, sent as fast as the client reads it."""

    def reply(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(_head(1 << 30))
        block = bytes(1 << 20)
        for _ in range(1 << 10):
            if stop.is_set():
                return
            conn.sendall(block)  # raises once the client hangs up

    return reply


@pytest.mark.parametrize("flavor", [*sorted(CLIENTS), "async-httpx"])
def test_a_1_gib_body_is_refused_at_the_cap_with_memory_bounded(no_proxy, flavor):
    with LorisServer(gigabyte_body()) as server:
        started = time.monotonic()
        error, peak = refused_with_peak(flavor, server.url)
        assert error.status_code is None
        assert server.requests == 1  # not retried
    assert peak < 100 * 1024 * 1024, peak  # the cap is 32 MiB of a 1 GiB body
    assert time.monotonic() - started < 30  # it stopped reading at the cap


@pytest.mark.parametrize("flavor", sorted(CLIENTS))
def test_a_gzip_answer_under_the_cap_reads_normally(no_proxy, flavor):
    body = gzip.compress(STATUS)
    got: list[dict] = []
    with LorisServer(answer(_head(len(body), "Content-Encoding: gzip\r\n") + body)) as server:
        if flavor == "sync":
            with RunpodClient(KEY, **_hosts(server.url)) as client:
                got.append(client.job_status("ep1", "j1"))
        else:

            async def go() -> None:
                async with AsyncRunpodClient(KEY, **_hosts(server.url)) as c:
                    got.append(await c.job_status("ep1", "j1"))

            asyncio.run(go())
    assert got == [{"id": "j1", "status": "IN_QUEUE"}]


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send
        ("identity", lambda b: b),
        (None, lambda b: b),
    ],
)
def test_the_bounded_decoder_undoes_each_encoding_in_chunks(encoding, pack):
    original = bytes(range(256)) * 400
    packed = pack(original)
    decoder = BoundedDecoder(encoding, limit=len(original))
    out = b"".join(decoder.feed(packed[i : i + 7]) for i in range(0, len(packed), 7))
    assert out + decoder.finish() == original
    over = BoundedDecoder(encoding, limit=len(original) - 1)
    with pytest.raises(ResponseTooLarge):
        for i in range(0, len(packed), 7):
            over.feed(packed[i : i + 7])
        over.finish()


def test_an_unknown_encoding_is_refused():
    with pytest.raises(ResponseTooLarge, match="unsupported"):
        BoundedDecoder("br")


def test_poll_job_reaches_its_client_deadline_against_a_slow_loris(no_proxy):
    deadline_s = 5.0
    with LorisServer(header_trickle()) as server:
        client = RunpodClient(KEY, **_hosts(server.url), deadline_s=DEADLINE_S)
        started = time.time()
        with client:
            result = poll_job(
                JobHandle("ep1", "flash-loris", "j1", submitted_at=started),
                interval_s=0.5,
                deadline_s=deadline_s,
                client=client,
            )
        took = time.time() - started
    assert (result.state, result.rule) == ("STALLED", "client_deadline"), result.detail
    assert took < deadline_s + DEADLINE_S + SLACK_S + 1.0, took


# --------------------------------------------------------------------------- fuzzing h11

_VALID = _head(len(STATUS)) + STATUS
_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'5\r\n{"id"\r\n1e\r\n: "j1", "status": "IN_QUEUE"}\r\n0\r\n\r\n'
)
_GZIP = _head(len(gzip.compress(STATUS)), "Content-Encoding: gzip\r\n") + gzip.compress(STATUS)


@st.composite
def garbled(draw: st.DrawFn) -> bytes:
    """A response: random bytes, or a good one truncated, bit-flipped or spliced."""
    kind = draw(st.sampled_from(["random", "truncate", "flip", "splice"]))
    if kind == "random":
        return draw(st.binary(max_size=400))
    base = bytearray(draw(st.sampled_from([_VALID, _CHUNKED, _GZIP])))
    if kind == "truncate":
        return bytes(base[: draw(st.integers(0, len(base)))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 6))):
            base[draw(st.integers(0, len(base) - 1))] = draw(st.integers(0, 255))
        return bytes(base)
    at = draw(st.integers(0, len(base)))
    return bytes(base[:at]) + draw(st.binary(max_size=60)) + bytes(base[at:])


async def _fetch(payload: bytes) -> httpx.Response | httpx.HTTPError:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(payload)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = AsyncH11Transport(max_response_bytes=4096)
    request = httpx.Request(
        "GET",
        f"http://127.0.0.1:{port}/v2/ep1/status/j1",
        extensions={"timeout": {"connect": 1.0, "read": 1.0, "write": 1.0}},
    )
    try:
        response = await transport.handle_async_request(request)
        await response.aread()
        return response
    except httpx.HTTPError as exc:
        return exc
    finally:
        await transport.aclose()
        server.close()


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(payload=garbled())
def test_the_h11_transport_turns_any_garbled_answer_into_a_response_or_a_clean_error(payload):
    started = time.monotonic()
    got = asyncio.run(_fetch(payload))  # anything but httpx's errors fails the test
    assert time.monotonic() - started < 3.0
    if isinstance(got, httpx.Response):
        assert 100 <= got.status_code < 1000 and len(got.content) <= 4096
    else:
        assert isinstance(got, httpx.HTTPError)
