"""The simulator's HTTP plumbing: a request's body read, a reply written, a stream sent.

What it holds, and how it relates to `server.py`: the bytes on the socket and nothing of
RunPod — a request body read (`Content-Length` or chunked), a reply written
(`write_reply`), a worker log's Server-Sent Events sent in HTTP chunks (`stream_reply`,
outside the simulator's lock, with the `flood`, `trickle` and `gzip` faults), a
connection dropped with a TCP RST (`reset_connection`), and how a fault spoils a reply's
body (`garble`, `garble_events`, `gzipped`). `server.py`'s `Simulator._serve` decides what
to answer (with `routes.py`) and hands the reply to these functions; this module imports
neither of them.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import socket
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.faults import Fault
from flashfsm.adapters.simulator.workers import flood_events, live_events

#: An answer: status, headers, body.
Reply = tuple[int, dict[str, str], bytes]
STREAM_CHUNK = 64 * 1024
STREAM_WRITE_TIMEOUT_S = 30.0  # a stream to a client that stopped reading gives up


def json_reply(status: int, value: Any, *, content_type: str = "application/json") -> Reply:
    """A reply whose body is `value` as JSON."""
    return status, {"Content-Type": content_type}, json.dumps(value).encode()


def read_body(h: BaseHTTPRequestHandler) -> bytes:
    """The request's body (`Content-Length` bytes, or its chunks joined)."""
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                h.rfile.readline()
                return b"".join(chunks)
            chunks.append(h.rfile.read(size))
            h.rfile.readline()
    length = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(length) if length > 0 else b""


def write_reply(h: BaseHTTPRequestHandler, method: str, reply: Reply) -> None:
    """Write `reply` (its body unless the method is HEAD or the status has none)."""
    status, headers, body = reply
    try:
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if method != "HEAD" and body and status not in (204, 304):
            h.wfile.write(body)
        h.wfile.flush()
    except (BrokenPipeError, ConnectionResetError, OSError):
        h.close_connection = True


def stream_reply(
    h: BaseHTTPRequestHandler,
    method: str,
    reply: Reply,
    fault: Fault | None,
    clock: SimClock,
    stopping: threading.Event,
) -> None:
    """Send a streaming answer in HTTP chunks: the reply's body (SSE events), then, with
    a `flood` fault, filler events up to `size_bytes`; a `trickle` fault sends one event
    at a time, `delay_s` real seconds apart, and goes on with live lines until the client
    leaves or `stopping` is set; `gzip=True` (or a `gzip` fault) encodes it all."""
    status, headers, body = reply
    kind = fault.kind if fault is not None else None
    if fault is not None and kind in ("malformed", "non_object", "missing_keys"):
        body = garble_events(body, fault)
    events: Iterable[bytes]
    if kind == "trickle":
        events = itertools.chain(split_events(body), live_events(clock.now))
    elif kind == "flood":
        assert fault is not None
        events = itertools.chain(
            batches(split_events(body)),
            flood_events(clock.now(), max(0, fault.size_bytes - len(body))),
        )
    else:
        events = batches(split_events(body))
    encode = kind == "gzip" or (fault is not None and fault.gzip)
    compressor = zlib.compressobj(wbits=31) if encode else None  # 31: a gzip wrapper
    h.close_connection = h.close_connection or kind == "trickle"
    try:
        h.connection.settimeout(STREAM_WRITE_TIMEOUT_S)
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        if compressor is not None:
            h.send_header("Content-Encoding", "gzip")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        if method == "HEAD":
            return
        for n, event in enumerate(events):
            if kind == "trickle" and n and stopping.wait(fault.delay_s):  # type: ignore[union-attr]
                h.close_connection = True
                return
            data = (
                compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH)
                if (compressor is not None)
                else event
            )
            if data:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                h.wfile.flush()
        tail = compressor.flush() if compressor is not None else b""
        if tail:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(tail), tail))
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
    except (OSError, ValueError):
        h.close_connection = True


def reset_connection(h: BaseHTTPRequestHandler) -> None:
    """Drop the connection with a TCP RST (linger 0), answering nothing."""
    h.close_connection = True
    with contextlib.suppress(OSError):
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.connection.close()


def split_events(body: bytes) -> Iterator[bytes]:
    """The SSE events of a body, one at a time (each with its blank line; a last part
    without one, half an event, as it is)."""
    *whole, rest = body.split(b"\n\n")
    for part in whole:
        if part:
            yield part + b"\n\n"
    if rest:
        yield rest


def batches(events: Iterable[bytes], size: int = STREAM_CHUNK) -> Iterator[bytes]:
    """Events joined into chunks of about `size` bytes."""
    batch: list[bytes] = []
    held = 0
    for event in events:
        batch.append(event)
        held += len(event)
        if held >= size:
            yield b"".join(batch)
            batch, held = [], 0
    if batch:
        yield b"".join(batch)


def garble_events(body: bytes, fault: Fault) -> bytes:
    """A log stream spoilt as a fault says: `malformed` ends in half an event whose data is
    not JSON, `non_object` sends data that is a JSON list, `missing_keys` drops `keys`
    (default: every key) from each event's data."""
    if fault.kind == "malformed":
        return body + b'id: x\ndata: {"source": "container", "line": "trunc'
    if fault.kind == "non_object":
        return body + b'data: ["unexpected", "list"]\n\n'
    out = []
    for event in split_events(body):
        head, _, data = event.rstrip(b"\n").partition(b"\ndata: ")
        value = json.loads(data)
        drop = set(value) if fault.keys is None else set(fault.keys)
        kept = {k: v for k, v in value.items() if k not in drop}
        out.append(head + b"\ndata: " + json.dumps(kept).encode() + b"\n\n")
    return b"".join(out)


def gzipped(reply: Reply, method: str) -> Reply:
    """The reply with its body gzip-encoded (its length then the encoded one's)."""
    status, headers, body = reply
    if not body or method == "HEAD":
        return reply
    kept = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    return status, {**kept, "Content-Encoding": "gzip"}, gzip.compress(body)


def garble(reply: Reply, fault: Fault) -> Reply:
    """The reply spoilt as a `malformed`, `non_object` or `missing_keys` fault says."""
    status, _, body = reply
    if fault.kind == "malformed":
        return 200, {"Content-Type": "application/json"}, b'{"id": "truncated'
    if fault.kind == "non_object":
        return 200, {"Content-Type": "application/json"}, b'["unexpected", "list"]'
    if fault.kind == "missing_keys":
        try:
            value = json.loads(body) if body else None
        except ValueError:
            return reply
        if isinstance(value, dict):
            drop = set(value) if fault.keys is None else set(fault.keys)
            value = {k: v for k, v in value.items() if k not in drop}
            return json_reply(200 if status == 204 else status, value)
    return reply
