"""flashfsm's HTTP transports for httpx, and the bounded decoder of response bodies.

The RunPod clients (`flashfsm.adapters.runpod`) hold the protocol: what to send, the call's
deadline, retries, the body cap and the errors. This module only moves bytes, through
httpx's public transport API (`httpx.BaseTransport`, `httpx.AsyncBaseTransport`): a
transport takes an `httpx.Request` and answers an `httpx.Response` as soon as the response
head is in, its body streamed (`iter_raw()` / `aiter_raw()`: raw bytes as they arrive,
`Content-Encoding` kept). It never retries: a request that fails is the caller's to
classify. Failures surface as httpx's own exceptions (`ConnectError`, `ConnectTimeout`,
`ReadTimeout`, `ReadError`, `WriteError`, `RemoteProtocolError`, …), so callers classify
them exactly as with httpx's default transports.

`DeadlineTransport` (sync) is httpcore's connection pool with a network backend of its own:
a request whose extensions carry `DEADLINE` (a `time.monotonic()` instant) has every socket
connect, read and write of its exchange, body included, cut at that instant (besides
httpx's per-operation timeouts), so a server trickling its head or body a byte at a time
cannot stretch a call. A sync client has no other way to stop a read it is blocked in.

Both transports keep idle connections alike: at most `MAX_IDLE_PER_ORIGIN`, each dropped
after `KEEPALIVE_EXPIRY_S` idle (httpx's defaults), and neither makes a request wait for a
connection (a new one is opened instead); both take httpx's per-operation timeouts from
the request, and the call's deadline bounds the whole exchange (the sync one by `DEADLINE`,
the async one under its caller's `asyncio.timeout`).

`AsyncH11Transport` is a lean asyncio one. Why: httpx's default async transport (httpcore
over anyio) costs ~1 ms of CPU per request on this kind of machine, most of it pool
bookkeeping: every request rescans the pool, and every reuse asks anyio for socket details
and polls the socket. A supervisor watching 10,000 jobs at a 10 s interval sends 1,000
requests a second from one event loop, so that bookkeeping, not the network, decides how
many jobs one process can watch. This transport keeps what matters and drops the rest:

- HTTP/1.1 framing is h11's (the sans-IO parser httpcore itself uses), not ours;
- one LIFO stack of idle keep-alive connections per origin, at most `max_idle_per_origin`;
  a connection is reused only when h11 says its previous exchange is complete (the body was
  read to its end) and the server has not closed it, and is dropped after
  `keepalive_expiry` seconds idle; a body left unread closes its connection;
- every socket wait obeys httpx's per-request timeouts (`connect`, `write`, and `read` for
  each read of the head and of the body, so a stream that goes quiet is noticed); `pool`
  has no meaning here: no request ever waits for a connection, a new one is opened instead;
  an asyncio caller bounds a whole exchange with `asyncio.timeout` (the RunPod client does);
- HTTPS through the same `ssl.SSLContext` httpx would build.

Request bodies must be in memory (as the RunPod client's always are). With
`max_response_bytes` set (the default, `MAX_RESPONSE_BYTES`) the transport decodes the body
itself (gzip, deflate, identity) with `BoundedDecoder`, which counts the bytes AFTER decoding
and stops at the cap (`ResponseTooLarge`, an `httpx.DecodingError`) without ever inflating
more than that: a few MiB of gzip can expand to gigabytes; such a response carries no
`Content-Encoding` header. With `max_response_bytes=None` the body is passed on raw, as
httpx's own transports do: the RunPod client decodes and caps it in its protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
import zlib
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import h11
import httpcore
import httpx

#: Read size per socket read.
READ_CHUNK = 64 * 1024
#: The largest response body accepted, counted AFTER Content-Encoding decoding. RunPod
#: status answers are a few KiB, but a COMPLETED one carries the job's output, and the
#: largest output flashfsm reads (a `MAX_PICKLE_BYTES` pickle, base64 in its Flash envelope:
#: about 21.4 MiB) must fit, so that an output over that cap is judged as an output (an
#: `output_error`) rather than refused as an answer.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: The encodings `BoundedDecoder` undoes (what the RunPod clients advertise).
ACCEPT_ENCODING = "gzip, deflate"
#: The request extension `DeadlineTransport` cuts every socket wait at: a `time.monotonic()`
#: instant (httpx hands a request's extensions to its transport; others ignore this one).
DEADLINE = "flashfsm.deadline"

#: How long an idle keep-alive connection is kept before it is dropped (seconds), and the
#: most idle connections kept per origin: both transports' (httpx's own defaults).
KEEPALIVE_EXPIRY_S = 5.0
MAX_IDLE_PER_ORIGIN = 100

_Origin = tuple[bytes, bytes, int]


class ResponseTooLarge(httpx.DecodingError):
    """A response body larger than the cap once decoded (or one that cannot be decoded)."""


class BoundedDecoder:
    """Undo a response's Content-Encoding chunk by chunk, never producing over `limit` bytes.

    `feed(raw)` returns the decoded bytes of one raw chunk; `finish()` the rest. Both raise
    `ResponseTooLarge` as soon as the decoded total would pass `limit`: each zlib step is
    asked for at most the bytes still allowed (plus one, to notice the overflow), so memory
    stays bounded whatever the compression ratio. Encodings other than identity, gzip and
    deflate (the ones `ACCEPT_ENCODING` offers) are refused.

    With `clip=True` the limit is a budget rather than an error: the decoded bytes past it
    are dropped, `full` turns True, and every later call returns nothing (a reader that
    keeps the last lines of a stream stops there and keeps what it has).
    """

    def __init__(
        self, content_encoding: str | None, limit: int = MAX_RESPONSE_BYTES, *, clip: bool = False
    ):
        self.limit = limit
        self.size = 0
        self.clip = clip
        self.full = False
        names = [
            name.strip().lower() for name in (content_encoding or "").split(",") if name.strip()
        ]
        self._stages: list[Any] = []
        for name in reversed(names):  # the last encoding applied is undone first
            if name == "identity":
                continue
            if name in ("gzip", "x-gzip"):
                self._stages.append(zlib.decompressobj(16 + zlib.MAX_WBITS))
            elif name == "deflate":
                self._stages.append(None)  # zlib-wrapped or raw: decided by the first bytes
            else:
                raise ResponseTooLarge(f"unsupported content-encoding {name!r}")

    def _room(self) -> int:
        return self.limit - self.size

    def feed(self, raw: bytes) -> bytes:
        """The decoded bytes of `raw`; raises `ResponseTooLarge` past the limit (or, with
        `clip`, cuts there)."""
        if self.full:
            return b""
        data = raw
        try:
            for index, stage in enumerate(self._stages):
                if not data:
                    return b""
                if stage is None:
                    stage = self._stages[index] = self._deflate(data)
                data = stage.decompress(data, self._room() + 1)
        except zlib.error as exc:
            raise ResponseTooLarge(f"undecodable response body: {exc}") from None
        return self._count(data)

    def finish(self) -> bytes:
        """Whatever the decoders still hold at the end of the body."""
        if self.full:
            return b""
        out = b""
        try:
            for stage in self._stages:
                if stage is not None:
                    if out:
                        out = stage.decompress(out, self._room() + 1)
                    out += stage.flush()  # small: a step that hit its cap raised already
        except zlib.error as exc:
            raise ResponseTooLarge(f"undecodable response body: {exc}") from None
        return self._count(out)

    @staticmethod
    def _deflate(first: bytes) -> Any:
        probe = zlib.decompressobj()
        try:
            probe.decompress(first[:2])
        except zlib.error:
            return zlib.decompressobj(-zlib.MAX_WBITS)  # a raw deflate stream
        return zlib.decompressobj()

    def _count(self, data: bytes) -> bytes:
        if self.clip and len(data) > self.limit - self.size:
            data = data[: self.limit - self.size]
            self.full = True
        self.size += len(data)
        if self.size > self.limit:
            raise ResponseTooLarge(f"response body over {self.limit} bytes once decoded")
        return data


# --------------------------------------------------------------------------- sync


class _Deadline(threading.local):
    """The deadline of the request this thread is exchanging (None: none), per thread."""

    at: float | None = None

    def left(self, timeout: float | None) -> float | None:
        """The smaller of `timeout` and the time left; raises once none is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the call deadline passed")
        return left if timeout is None else min(timeout, left)

    def connect_wait(self, timeout: float | None) -> float | None:
        """`left`, as a connect timeout."""
        try:
            return self.left(timeout)
        except httpcore.ReadTimeout as exc:
            raise httpcore.ConnectTimeout(str(exc)) from None


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every wait is cut at the running request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline):
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            wait = self._deadline.left(timeout)
        except httpcore.ReadTimeout as exc:
            raise httpcore.WriteTimeout(str(exc)) from None
        self._inner.write(buffer, wait)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._deadline.connect_wait(timeout)
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, wait), self._deadline
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every connect, read and write cut at the deadline."""

    def __init__(self, inner: httpcore.NetworkBackend, deadline: _Deadline):
        self._inner = inner
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        wait = self._deadline.connect_wait(timeout)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        wait = self._deadline.connect_wait(timeout)
        stream = self._inner.connect_unix_socket(path, wait, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


#: httpcore's errors as httpx raises them, most specific first (an httpx transport of one's
#: own maps them, as httpx's own transport does).
_HTTPCORE_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Generator[None, None, None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _HTTPCORE_ERRORS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


class _CoreBody(httpx.SyncByteStream):
    """An httpcore response body as httpx reads it: each read cut at the request's deadline,
    httpcore's errors mapped to httpx's."""

    def __init__(self, stream: Any, deadline: _Deadline, at: float | None):
        self._stream = stream
        self._deadline = deadline
        self._at = at

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._stream)
        with _as_httpx_errors():
            while True:
                self._deadline.at = self._at
                try:
                    chunk = next(chunks, None)
                finally:
                    self._deadline.at = None
                if chunk is None:
                    return
                yield chunk

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport over httpcore's connection pool whose network backend cuts every
    connect, read and write of a request at its `DEADLINE` extension (see the module notes).

    Built on public extension points only (`httpx.BaseTransport`, `httpcore.ConnectionPool`'s
    `network_backend`); a test proves the deadline holds against a server trickling its
    headers.
    """

    def __init__(self, verify: ssl.SSLContext | bool = True):
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
        self._deadline = _Deadline()
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=None,  # (as the async transport: no request waits for one)
            max_keepalive_connections=MAX_IDLE_PER_ORIGIN,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
            network_backend=_DeadlineBackend(httpcore.SyncBackend(), self._deadline),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and answer once its response head is in, the body streamed."""
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,  # type: ignore[arg-type]
            extensions=request.extensions,
        )
        at = request.extensions.get(DEADLINE)
        self._deadline.at = at
        try:
            with _as_httpx_errors():
                answer = self._pool.handle_request(core)
        finally:
            self._deadline.at = None
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_CoreBody(answer.stream, self._deadline, at),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()


# --------------------------------------------------------------------------- async


class _Connection:
    """One keep-alive connection: an asyncio stream pair and its h11 state."""

    __slots__ = ("h11", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(our_role=h11.CLIENT)
        self.idle_since = 0.0

    def reusable(self, now: float, expiry: float) -> bool:
        """Still open (the server has not hung up) and not idle for too long."""
        return (
            not self.reader.at_eof()
            and not self.writer.is_closing()
            and now - self.idle_since < expiry
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class AsyncH11Transport(httpx.AsyncBaseTransport):
    """An `httpx.AsyncBaseTransport` over h11 and asyncio streams (see the module notes)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
        max_response_bytes: int | None = MAX_RESPONSE_BYTES,
    ):
        if isinstance(verify, ssl.SSLContext):
            self._ssl: ssl.SSLContext | None = verify
        else:
            self._ssl = None
            self._verify = verify
        self.max_idle_per_origin = max_idle_per_origin
        self.keepalive_expiry = keepalive_expiry
        self.max_response_bytes = max_response_bytes
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._closed = False

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context(verify=self._verify)
        return self._ssl

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and answer once the response head is in, the body streamed.

        The body is read as the caller iterates it, each socket read waiting at most the
        request's `read` timeout (`httpx.ReadTimeout`); decoded and capped when the
        transport has a `max_response_bytes`, raw otherwise. A body read to its end frees
        the connection for reuse; `aclose()` before that closes it.
        """
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}", request=request)
        origin: _Origin = (scheme, url.raw_host, url.port or (443 if scheme == b"https" else 80))
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        conn = self._checkout(origin)
        if conn is None:
            conn = await self._connect(origin, timeouts.get("connect"), request)
        read_s = timeouts.get("read")
        try:
            await self._send(conn, request, body, timeouts.get("write"))
            while True:
                event = await self._next_event(conn, request, read_s)
                if isinstance(event, h11.Response):
                    break
                if event is None:
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection", request=request
                    )
            headers: list[tuple[bytes, bytes]] = list(event.headers)
            decoder = None
            if self.max_response_bytes is not None:
                encoding = b",".join(v for k, v in headers if k == b"content-encoding")
                # The body is handed on decoded: drop what described the encoded one.
                headers = [
                    h for h in headers if h[0] not in (b"content-encoding", b"content-length")
                ]
                try:
                    decoder = BoundedDecoder(encoding.decode("latin-1"), self.max_response_bytes)
                except ResponseTooLarge as exc:
                    raise ResponseTooLarge(str(exc), request=request) from None
        except BaseException:
            conn.close()
            raise
        return httpx.Response(
            event.status_code,
            headers=headers,
            stream=_StreamBody(self, origin, conn, request, read_s, decoder),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _send(
        self, conn: _Connection, request: httpx.Request, body: bytes, write_s: float | None
    ) -> None:
        """Put the whole request on the wire within `write_s`."""
        state = conn.h11
        headers = [(k, v) for k, v in request.headers.raw]
        try:
            out = state.send(
                h11.Request(method=request.method, target=request.url.raw_path, headers=headers)
            )
            if body:
                out += state.send(h11.Data(data=body))
            out += state.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from None
        writer = conn.writer
        try:
            writer.write(out)
            if writer.transport.get_write_buffer_size():  # (else all of it is sent)
                async with asyncio.timeout(write_s):
                    await writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("timed out sending the request", request=request) from None
        except OSError as exc:
            raise httpx.WriteError(f"send failed: {type(exc).__name__}", request=request) from exc

    async def _next_event(
        self, conn: _Connection, request: httpx.Request, read_s: float | None
    ) -> Any:
        """The next response event (informational ones skipped), each socket read waiting
        at most `read_s`; None when the connection is closed or paused."""
        state = conn.h11
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from None
            if event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout(read_s):
                        data = await conn.reader.read(READ_CHUNK)
                except TimeoutError:
                    raise httpx.ReadTimeout(
                        "timed out reading the response", request=request
                    ) from None
                except OSError as exc:
                    raise httpx.ReadError(
                        f"receive failed: {type(exc).__name__}", request=request
                    ) from exc
                if not data and state.their_state is h11.SEND_RESPONSE:
                    raise httpx.RemoteProtocolError(
                        "the server disconnected without sending a response", request=request
                    )
                state.receive_data(data)
                continue
            if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return None
            if isinstance(event, h11.InformationalResponse):
                continue
            return event

    def _checkout(self, origin: _Origin) -> _Connection | None:
        stack = self._idle.get(origin)
        now = time.monotonic()
        while stack:
            conn = stack.pop()
            if conn.reusable(now, self.keepalive_expiry):
                return conn
            conn.close()
        return None

    def _checkin(self, origin: _Origin, conn: _Connection) -> None:
        state = conn.h11
        if self._closed or state.our_state is not h11.DONE or state.their_state is not h11.DONE:
            conn.close()
            return
        state.start_next_cycle()
        stack = self._idle.setdefault(origin, [])
        if len(stack) >= self.max_idle_per_origin:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        stack.append(conn)

    async def _connect(
        self, origin: _Origin, timeout: float | None, request: httpx.Request
    ) -> _Connection:
        scheme, host, port = origin
        hostname = host.decode("ascii")
        tls = self._ssl_context() if scheme == b"https" else None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    hostname,
                    port,
                    ssl=tls,
                    server_hostname=hostname if tls is not None else None,
                    limit=READ_CHUNK,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out connecting", request=request) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(
                f"cannot connect: {type(exc).__name__}", request=request
            ) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        """Close every pooled connection; the transport takes no more requests."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for conn in stack:
                conn.close()


class _StreamBody(httpx.AsyncByteStream):
    """A response's body as it arrives (decoded and capped when `decoder` is given); read to
    its end, it gives its connection back to the pool."""

    def __init__(
        self,
        transport: AsyncH11Transport,
        origin: _Origin,
        conn: _Connection,
        request: httpx.Request,
        read_s: float | None,
        decoder: BoundedDecoder | None,
    ):
        self._transport = transport
        self._origin = origin
        self._conn: _Connection | None = conn
        self._request = request
        self._read_s = read_s
        self._decoder = decoder

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        decoder = self._decoder
        try:
            while True:
                event = await self._transport._next_event(conn, self._request, self._read_s)
                if isinstance(event, h11.Data):
                    data = bytes(event.data)
                    if decoder is not None:
                        data = decoder.feed(data)
                    if data:
                        yield data
                elif isinstance(event, h11.EndOfMessage):
                    rest = b"" if decoder is None else decoder.finish()
                    self._conn = None
                    self._transport._checkin(self._origin, conn)
                    if rest:
                        yield rest
                    return
                elif event is None:
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection mid-body", request=self._request
                    )
        except ResponseTooLarge as exc:
            self._drop(conn)
            raise ResponseTooLarge(str(exc), request=self._request) from None
        except BaseException:
            self._drop(conn)
            raise

    def _drop(self, conn: _Connection) -> None:
        if self._conn is not None:
            self._conn = None
            conn.close()

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # its body was not read to the end
