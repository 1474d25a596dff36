"""A lean asyncio HTTP/1.1 transport for httpx: h11 over asyncio streams, keep-alive pooled.

Why. httpx's default async transport (httpcore over anyio) costs ~1 ms of CPU per request
on this kind of machine, most of it pool bookkeeping: every request rescans the pool, and
every reuse asks anyio for socket details and polls the socket. A supervisor watching
10,000 jobs at a 10 s interval sends 1,000 requests a second from one event loop, so that
bookkeeping, not the network, decides how many jobs one process can watch. This transport
keeps what matters and drops the rest:

- HTTP/1.1 framing is h11's (the sans-IO parser httpcore itself uses), not ours;
- one LIFO stack of idle keep-alive connections per origin, at most `max_idle_per_origin`;
  a connection is reused only when h11 says its previous exchange is complete and the
  server has not closed it, and is dropped after `keepalive_expiry` seconds idle;
- every phase obeys httpx's per-request timeouts (`connect`, `write`, `read`; `pool` has
  no meaning here: no request ever waits for a connection, a new one is opened instead);
- failures surface as httpx's own exceptions (`ConnectError`, `ConnectTimeout`,
  `ReadTimeout`, `ReadError`, `WriteError`, `RemoteProtocolError`), so callers classify
  them exactly as they do with the default transport;
- HTTPS through the same `ssl.SSLContext` httpx would build.

It never retries: a request that fails is the caller's to classify (the RunPod client's
retry policy decides). Request bodies must be in memory (as the RunPod client's always
are). Response bodies are read whole and decoded here (gzip, deflate, identity) by
`BoundedDecoder`, which counts the bytes AFTER decoding and stops at `max_response_bytes`
(`ResponseTooLarge`, an `httpx.DecodingError`) without ever inflating more than that: a few
MiB of gzip can expand to gigabytes. The `httpx.Response` it returns carries the decoded body
and no `Content-Encoding` header.

Streams. `open_stream(request)` is the one exception: it returns as soon as the response
head has arrived, with a body the caller reads chunk by chunk (`aiter_raw()`, raw bytes,
`Content-Encoding` kept: the caller decodes, bounded, with `BoundedDecoder`) and stops
whenever it likes (`aclose()` drops the connection unless the body was read to its end).
Each socket read of the head and of the body waits at most the request's `read` timeout
(`httpx.ReadTimeout`), so a stream that goes quiet is noticed. This is how the RunPod
client reads a worker's log, an event stream that never ends on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import h11
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
    """An `httpx.AsyncBaseTransport` over h11 and asyncio streams (see the module doc)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        max_idle_per_origin: int = 100,
        keepalive_expiry: float = 5.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
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

    async def _open(
        self, request: httpx.Request
    ) -> tuple[_Origin, _Connection, dict[str, Any], bytes]:
        """A pooled or new connection for `request`'s origin: (origin, connection, the
        request's timeouts, its body)."""
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}", request=request)
        port = url.port or (443 if scheme == b"https" else 80)
        origin: _Origin = (scheme, url.raw_host, port)
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        conn = self._checkout(origin)
        if conn is None:
            conn = await self._connect(origin, timeouts.get("connect"), request)
        return origin, conn, timeouts, body

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        origin, conn, timeouts, body = await self._open(request)
        try:
            status, headers, content = await self._exchange(conn, request, body, timeouts)
        except BaseException:
            conn.close()
            raise
        self._checkin(origin, conn)
        # Already decoded (and bounded) by `_receive`, which dropped Content-Encoding.
        return httpx.Response(
            status,
            headers=headers,
            stream=httpx.ByteStream(content),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def open_stream(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and return once the response head is in, the body left unread.

        The response's `aiter_raw()` yields the body as it arrives, raw (its
        `Content-Encoding` is kept, and nothing bounds its size: the caller decodes and
        bounds it); each socket read, of the head and of the body, waits at most the
        request's `read` timeout and raises `httpx.ReadTimeout` past it. `aclose()` closes
        the connection, unless the body was read to its end (then it is pooled for reuse).
        """
        origin, conn, timeouts, body = await self._open(request)
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
        except BaseException:
            conn.close()
            raise
        return httpx.Response(
            event.status_code,
            headers=list(event.headers),
            stream=_StreamBody(self, origin, conn, request, read_s),
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
        try:
            async with asyncio.timeout(write_s):
                conn.writer.write(out)
                await conn.writer.drain()
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

    async def _exchange(
        self,
        conn: _Connection,
        request: httpx.Request,
        body: bytes,
        timeouts: dict[str, float | None],
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        await self._send(conn, request, body, timeouts.get("write"))
        try:
            async with asyncio.timeout(timeouts.get("read")):
                return await self._receive(conn, request)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out reading the response", request=request) from None

    async def _receive(
        self, conn: _Connection, request: httpx.Request
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        status = 0
        headers: list[tuple[bytes, bytes]] = []
        parts: list[bytes] = []
        decoder: BoundedDecoder | None = None
        async for event in self._events(conn, request):
            if isinstance(event, h11.Response):
                status = event.status_code
                encoding = b",".join(v for k, v in event.headers if k == b"content-encoding")
                # The body is handed on decoded: drop what described the encoded one.
                headers = [
                    (k, v)
                    for k, v in event.headers
                    if k not in (b"content-encoding", b"content-length")
                ]
                try:
                    decoder = BoundedDecoder(encoding.decode("latin-1"), self.max_response_bytes)
                except ResponseTooLarge as exc:
                    raise ResponseTooLarge(str(exc), request=request) from None
            elif isinstance(event, h11.Data) and decoder is not None:
                try:
                    parts.append(decoder.feed(bytes(event.data)))
                except ResponseTooLarge as exc:
                    raise ResponseTooLarge(str(exc), request=request) from None
            elif isinstance(event, h11.EndOfMessage) and decoder is not None:
                try:
                    parts.append(decoder.finish())
                except ResponseTooLarge as exc:
                    raise ResponseTooLarge(str(exc), request=request) from None
                return status, headers, b"".join(parts)
        raise httpx.RemoteProtocolError("the server closed the connection", request=request)

    async def _events(self, conn: _Connection, request: httpx.Request) -> AsyncIterator[Any]:
        state = conn.h11
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from None
            if event is h11.NEED_DATA:
                try:
                    data = await conn.reader.read(READ_CHUNK)
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
                return
            if isinstance(event, h11.InformationalResponse):
                continue
            yield event

    async def aclose(self) -> None:
        """Close every pooled connection; the transport takes no more requests."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for conn in stack:
                conn.close()


class _StreamBody(httpx.AsyncByteStream):
    """The unread body of an `open_stream` response: raw chunks as they arrive."""

    def __init__(
        self,
        transport: AsyncH11Transport,
        origin: _Origin,
        conn: _Connection,
        request: httpx.Request,
        read_s: float | None,
    ):
        self._transport = transport
        self._origin = origin
        self._conn: _Connection | None = conn
        self._request = request
        self._read_s = read_s
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            while True:
                event = await self._transport._next_event(conn, self._request, self._read_s)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._done = True
                    return
                elif event is None:
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection mid-body", request=self._request
                    )
        except BaseException:
            self._conn = None
            conn.close()
            raise

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done:
            self._transport._checkin(self._origin, conn)
        else:
            conn.close()
