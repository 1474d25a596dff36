"""The lean HTTP/1.1 transport against raw loopback servers that behave and misbehave."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest

from flashfsm.adapters.http11 import AsyncH11Transport, ResponseTooLarge
from flashfsm.adapters.runpod import AsyncRunpodClient, RetryPolicy, RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.errors import RunpodApiError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's head and body (Content-Length bodies only); None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return head + body


def _reply(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


class RawServer:
    """A loopback server whose every connection runs `handler`; counts connections."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.tls: ssl.SSLContext | None = None
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self._server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"


def keep_alive(server_body: Callable[[bytes], bytes]) -> Callable[[RawServer], Handler]:
    def make(server: RawServer) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while (request := await _read_request(reader)) is not None:
                server.requests.append(request)
                writer.write(server_body(request))
                await writer.drain()

        return handler

    return make


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def serving(make: Callable[[RawServer], Handler]) -> RawServer:
    server = RawServer(lambda r, w: asyncio.sleep(0))
    server.handler = make(server)
    return server


def test_sequential_requests_reuse_one_keep_alive_connection() -> None:
    async def main() -> None:
        async with serving(keep_alive(lambda req: _reply(b'{"ok": true}'))) as server:
            async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
                for _ in range(5):
                    response = await client.get(server.url + "/status/x?a=1")
                    assert response.status_code == 200
                    assert response.json() == {"ok": True}
            assert server.connections == 1
            assert server.requests[0].startswith(b"GET /status/x?a=1 HTTP/1.1\r\n")
            assert b"\r\nhost: 127.0.0.1:" in server.requests[0].lower()

    run(main())


def test_concurrent_requests_open_parallel_connections_then_reuse_them() -> None:
    async def main() -> None:
        async with serving(keep_alive(lambda req: _reply(b"{}"))) as server:
            async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
                await asyncio.gather(*(client.get(server.url) for _ in range(4)))
                opened = server.connections
                await asyncio.gather(*(client.get(server.url) for _ in range(4)))
            assert 1 <= opened <= 4
            assert server.connections == opened  # the second round reused them all

    run(main())


def test_post_body_and_headers_arrive_intact() -> None:
    async def main() -> None:
        async with serving(keep_alive(lambda req: _reply(req.split(b"\r\n\r\n", 1)[1]))) as server:
            async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
                payload = {"input": {"text": "é" * 1000}}
                response = await client.post(
                    server.url + "/run", json=payload, headers={"Authorization": "Bearer k"}
                )
            assert response.json() == payload
            assert b"authorization: bearer k" in server.requests[0].lower()

    run(main())


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    def make(server: RawServer) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            request = await _read_request(reader)
            assert request is not None
            server.requests.append(request)
            writer.write(_reply(b"{}"))  # HTTP/1.1 keep-alive, but it hangs up anyway
            await writer.drain()

        return handler

    async def main() -> None:
        async with serving(make) as server:
            async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
                for _ in range(3):
                    assert (await client.get(server.url)).status_code == 200
                    await asyncio.sleep(0.05)  # the hang-up reaches the client's reader
            assert server.connections == 3

    run(main())


def test_connection_close_header_is_honoured() -> None:
    async def main() -> None:
        body = lambda req: _reply(b"{}", extra=b"Connection: close\r\n")  # noqa: E731
        async with serving(keep_alive(body)) as server:
            async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
                for _ in range(3):
                    assert (await client.get(server.url)).status_code == 200
            assert server.connections == 3

    run(main())


def test_chunked_response_is_reassembled() -> None:
    chunked = (
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n'
    )

    async def main() -> None:
        async with serving(keep_alive(lambda req: chunked)) as server:
            async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
                assert (await client.get(server.url)).json() == {"a": 1}
                assert (await client.get(server.url)).json() == {"a": 1}
            assert server.connections == 1

    run(main())


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"", httpx.RemoteProtocolError),  # hung up without a response
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", httpx.RemoteProtocolError),
        (b"NOT HTTP AT ALL\r\n\r\n", httpx.RemoteProtocolError),
    ],
    ids=["no-response", "truncated-body", "garbage"],
)
def test_broken_answers_raise_httpx_protocol_errors(answer: bytes, error: type) -> None:
    def make(server: RawServer) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _read_request(reader)
            writer.write(answer)
            await writer.drain()

        return handler

    async def main() -> None:
        transport = AsyncH11Transport()
        async with serving(make) as server, httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(error):
                await client.get(server.url)
            # the transport is still usable afterwards
            with pytest.raises(error):
                await client.get(server.url)

    run(main())


def test_a_silent_server_raises_read_timeout() -> None:
    def make(server: RawServer) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _read_request(reader)
            await asyncio.sleep(5)

        return handler

    async def main() -> None:
        transport = AsyncH11Transport()
        async with (
            serving(make) as server,
            httpx.AsyncClient(transport=transport, timeout=0.2) as client,
        ):
            with pytest.raises(httpx.ReadTimeout):
                await client.get(server.url)

    run(main())


def test_refused_connection_raises_connect_error() -> None:
    async def main() -> None:
        async with serving(keep_alive(lambda req: b"")) as server:
            url = server.url
        await asyncio.sleep(0.05)
        async with httpx.AsyncClient(transport=AsyncH11Transport()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)

    run(main())


def test_oversized_body_is_refused() -> None:
    big = json.dumps({"x": "y" * 5000}).encode()

    async def main() -> None:
        async with serving(keep_alive(lambda req: _reply(big))) as server:
            transport = AsyncH11Transport(max_response_bytes=1000)
            async with httpx.AsyncClient(transport=transport) as client:
                with pytest.raises(ResponseTooLarge, match="over 1000 bytes"):
                    await client.get(server.url)

    run(main())


def test_closed_transport_refuses_requests() -> None:
    async def main() -> None:
        transport = AsyncH11Transport()
        await transport.aclose()
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(RuntimeError, match="closed"):
                await client.get("http://127.0.0.1:9/")

    run(main())


@pytest.mark.usefixtures("no_proxy")
def test_async_runpod_client_uses_the_lean_transport_by_default() -> None:
    with Simulator(speed=0) as sim:
        endpoint_id = sim.add_endpoint("flash-lean", scenario="success")

        async def main() -> dict:
            client = sim.async_client()
            assert isinstance(client._http._transport, AsyncH11Transport)
            try:
                job_id = await client.run(endpoint_id, {"x": 1})
                return await client.job_status(endpoint_id, job_id)
            finally:
                await client.aclose()

        answer = asyncio.run(main())
    assert answer["status"] in {"IN_QUEUE", "IN_PROGRESS", "COMPLETED"}


def test_a_proxy_in_the_environment_keeps_httpx_default_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = AsyncRunpodClient("k", endpoint_base_url="https://api.runpod.ai/v2")
    assert not isinstance(client._http._transport, AsyncH11Transport)
    asyncio.run(client.aclose())


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A throwaway self-signed certificate for 127.0.0.1 (made by the openssl CLI)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed: HTTPS tests need a certificate")
    directory = tmp_path_factory.mktemp("tls")
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def _tls_server(cert: str, key: str) -> tuple[RawServer, ssl.SSLContext]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return serving(keep_alive(lambda req: _reply(b'{"tls": true}'))), context


def test_https_with_a_trusted_certificate_keeps_alive(tls_files: tuple[str, str]) -> None:
    cert, key = tls_files
    server, context = _tls_server(cert, key)
    server.tls = context

    async def main() -> None:
        async with server:
            trust = ssl.create_default_context(cafile=cert)
            async with httpx.AsyncClient(transport=AsyncH11Transport(verify=trust)) as client:
                for _ in range(3):
                    response = await client.get(server.url.replace("http:", "https:"))
                    assert response.json() == {"tls": True}
            assert server.connections == 1

    run(main())


def test_https_with_an_untrusted_certificate_fails_to_connect(
    tls_files: tuple[str, str],
) -> None:
    cert, key = tls_files
    server, context = _tls_server(cert, key)
    server.tls = context

    async def main() -> None:
        async with server, httpx.AsyncClient(transport=AsyncH11Transport()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(server.url.replace("http:", "https:"))

    run(main())


#: A JSON body gzip-encoded, and an answer that carries it (`Content-Encoding: gzip`).
GZIPPED = gzip.compress(b'{"status": "IN_QUEUE"}')
GZIPPED_ANSWER = _reply(GZIPPED, extra=b"Content-Encoding: gzip\r\n")


def test_a_gzip_encoded_answer_is_decoded_as_httpx_would() -> None:
    async def main() -> None:
        async with serving(keep_alive(lambda req: GZIPPED_ANSWER)) as server:
            transport = AsyncH11Transport()
            async with httpx.AsyncClient(transport=transport) as client:
                assert (await client.get(server.url)).json() == {"status": "IN_QUEUE"}
            direct = await AsyncH11Transport().handle_async_request(
                httpx.Request("GET", server.url)
            )
            assert json.loads(await direct.aread()) == {"status": "IN_QUEUE"}

    run(main())


@pytest.mark.usefixtures("no_proxy")
def test_the_async_client_sends_straight_through_the_lean_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        seen: list[bytes] = []

        def answer(request: bytes) -> bytes:
            seen.append(request)
            return _reply(b'{"id": "j1", "status": "IN_PROGRESS"}')

        async with serving(keep_alive(answer)) as server:
            client = AsyncRunpodClient(
                "rp-key-direct", endpoint_base_url=server.url + "/v2", api_base_url=server.url
            )
            monkeypatch.setattr(
                client._http, "request", lambda *a, **k: pytest.fail("went through httpx")
            )
            try:
                assert (await client.job_status("ep1", "j1"))["status"] == "IN_PROGRESS"
            finally:
                await client.aclose()
        head = seen[0].split(b"\r\n\r\n")[0].lower()
        assert head.startswith(b"get /v2/ep1/status/j1 http/1.1")
        assert b"authorization: bearer rp-key-direct" in head

    run(main())


def test_the_async_client_times_out_on_a_silent_server() -> None:
    def make(server: RawServer) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await _read_request(reader) is not None:
                await asyncio.sleep(5)

        return handler

    async def main() -> None:
        async with serving(make) as server:
            client = AsyncRunpodClient(
                "k",
                endpoint_base_url=server.url + "/v2",
                api_base_url=server.url,
                timeout=0.2,
                retry=RetryPolicy(attempts=1),
            )
            started = time.monotonic()
            try:
                with pytest.raises(RunpodApiError):
                    await client.job_status("ep1", "j1")
            finally:
                await client.aclose()
            assert time.monotonic() - started < 2

    run(main())


def test_a_raw_transport_streams_the_body_and_reuses_only_a_connection_read_to_its_end() -> None:
    async def main() -> None:
        async with serving(keep_alive(lambda req: GZIPPED_ANSWER)) as server:
            transport = AsyncH11Transport(max_response_bytes=None)
            try:
                response = await transport.handle_async_request(httpx.Request("GET", server.url))
                assert response.headers["content-encoding"] == "gzip"  # raw: the caller decodes
                assert b"".join([raw async for raw in response.aiter_raw()]) == GZIPPED
                await response.aclose()
                again = await transport.handle_async_request(httpx.Request("GET", server.url))
                await again.aclose()  # its body left unread: the connection is dropped
                assert server.connections == 1
                last = await transport.handle_async_request(httpx.Request("GET", server.url))
                assert json.loads(await last.aread()) == {"status": "IN_QUEUE"}
                assert server.connections == 2
            finally:
                await transport.aclose()

    run(main())


@pytest.mark.usefixtures("no_proxy")
def test_the_sync_client_sends_straight_through_its_own_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        answer = _reply(b'{"id": "j1", "status": "IN_PROGRESS"}')
        async with serving(keep_alive(lambda req: answer)) as server:
            client = RunpodClient(
                "rp-key-sync-direct", endpoint_base_url=server.url + "/v2", api_base_url=server.url
            )
            monkeypatch.setattr(
                client._http, "send", lambda *a, **k: pytest.fail("went through httpx")
            )
            with client:
                for _ in range(3):
                    got = await asyncio.to_thread(client.job_status, "ep1", "j1")
                    assert got["status"] == "IN_PROGRESS"
            assert server.connections == 1
            head = server.requests[0].split(b"\r\n\r\n")[0].lower()
            assert head.startswith(b"get /v2/ep1/status/j1 http/1.1")
            assert b"authorization: bearer rp-key-sync-direct" in head

    run(main())
