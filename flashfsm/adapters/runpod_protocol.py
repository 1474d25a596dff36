"""The RunPod REST protocol, sans I/O: the route table, one call's exchange, reading answers.

What it holds, and how it relates to `flashfsm.adapters.runpod`: everything a RunPod call
decides without touching the network — the `ROUTES` table, the `exchange` generator with
its retry and deadline rules, `Reading` and `LogTail` (what an answer's body is), the
errors. The clients of `flashfsm.adapters.runpod` (`RunpodClient`, `AsyncRunpodClient`)
only drive it: they put each `Send` on an httpx transport, feed the body's raw chunks to
`Reading`, and sleep each `Pause`. That module re-exports this one's public names, so
`from flashfsm.adapters.runpod import ROUTES, exchange, ...` keeps working; this module
never imports it.

Theory of operation. Every call is one `Route` from the `ROUTES` table (method, host,
path, whether it is idempotent, what a good answer must hold and what the caller gets of
it). One generator, `exchange`, holds the whole request/response protocol without doing
any I/O: it builds the call's `httpx.Request` (URL, headers, timeouts) once and starts the
call's deadline, yields a `Send` and receives an `Answer` or the exception the exchange
raised, decides with `parse_response` whether the answer is a value or an error, with
`transport_failure` what a failed exchange was (a network error, or the deadline), and with
`retry_delay` whether to try again, and whether the pause fits before the deadline; it
yields a `Pause` to ask for the back-off sleep. An answer's body is read by `Reading`,
the protocol's too: decoded and capped, or read by `LogTail` for a streamed route, the
deadline checked between chunks, and what a body cut short still answers.

Rules the table and the functions encode:

- 429 (honouring `Retry-After` seconds), 408, any 5xx, timeouts, resets and other network
  errors are retried with jittered exponential back-off, on idempotent routes only
  (status, health, cancel, endpoint list/get/delete, workers, worker logs). `run` and
  `purge_queue` are never retried: a lost answer may hide a job that was created, and a
  blind retry would start a second one.
- 401 and 403 raise `RunpodAuthError` at once, on every route.
- 404 on `status` raises `RunpodApiError(status_code=404)`: the job is gone (its TTL or
  the result retention passed); the core maps it to LOST. `delete_endpoint` answers
  False on 404 (already gone) so a retried delete stays idempotent.
- A body that is not JSON, or not an object, or lacks a key the route promises, raises
  `RunpodApiError` with `status_code=None` and a message starting "malformed".

Messages name the route, the ids and the HTTP status; they never hold the API key (it
lives only in the Authorization header) and pass through `redact` besides.

Bounds. `exchange` sets the call's deadline once (`Wire.deadline_s`, `CALL_DEADLINE_S` by
default, or a route's own smaller `budget_s`), makes no retry whose pause would cross it,
and sends it with every attempt (`Send.end`, and the request's
`flashfsm.adapters.http11.DEADLINE` extension); a call that runs out of time raises
`RunpodApiError` ("... call deadline ..."). `Reading` caps a body at `Send.limit`
(`MAX_RESPONSE_BYTES`, 32 MiB) counted after gzip/deflate decoding, decoded in bounded
steps (`flashfsm.adapters.http11.BoundedDecoder`); a bigger body is a `RunpodApiError` too,
and is not retried.

Worker logs. The `worker_logs` route (`GET /v2/serverless/{id}/workers/{worker}/logs?tail=N`)
is a Server-Sent Events stream that the real API never ends (it backfills the last `tail`
lines, then streams live ones). It goes through the same `exchange` as every route (same
retries on 408/429/5xx and network errors, same 401/403/404 errors), but a 2xx body is read
by `LogTail`, a sans-IO reader that parses the SSE framing (CRLF, LF or CR line ends,
comments, multi-line `data`) and keeps each event's `data.line`, and the read STOPS, closing
the connection, at the first of:

- `tail` lines read (the backfill is in);
- `LOG_MAX_BYTES` (1 MiB) of body read, counted raw and again after gzip/deflate decoding;
- `LOG_QUIET_S` (1 s) with no byte (the stream went quiet: the backfill is over). Every
  socket read of the call, the response head's included, waits at most that long (or the
  client's read timeout, when shorter), so a head slower than that is a read timeout,
  retried like any other;
- `LOG_TIME_BUDGET_S` (10 s) since the call began, all its attempts and pauses included
  (the call's deadline is the smaller of it and `deadline_s`);
- the end of the stream (the simulator closes it after the backfill).

It answers `{"lines": [str, ...], "truncated": bool}`: at most `tail` lines, the last ones
read, each masked for secrets; `truncated` is True when a bound (bytes, time, or more lines
than `tail` in what was read) cut something off, False when the stream ended, went quiet or
gave exactly `tail` lines. Malformed events (no `data`, not JSON, no string `line`) are
skipped. A body cut short by a network error after some lines keeps them (`truncated`);
before any line it is a transport error (retried). No response head within the time
budget is the usual "call deadline" `RunpodApiError`. Limit: a server that ignores `tail`
and sends a longer log at once is cut after `tail` lines (or the byte budget), which then
are not the log's last lines.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx

from flashfsm.adapters.http11 import DEADLINE, MAX_RESPONSE_BYTES, BoundedDecoder
from flashfsm.errors import RunpodApiError
from flashfsm.events.text import valid_utf8
from flashfsm.redact import redact, redact_then_cap

#: The most one client call may take, all its attempts and back-off sleeps included.
CALL_DEADLINE_S = 60.0
_DETAIL_CAP = 300
_LATE_S = 0.05  # a read timeout this close to the call's end is the end

#: `worker_log`'s default number of lines, and the most the API backfills.
LOG_TAIL_DEFAULT = 100
LOG_TAIL_MAX = 5000
#: The most of a worker log's body one `worker_log` call reads, raw and decoded (bytes).
LOG_MAX_BYTES = 1024 * 1024
#: The most one `worker_log` call takes, all its attempts and pauses included (seconds).
LOG_TIME_BUDGET_S = 10.0
#: A worker log's stream that sends no byte for this long has given its backfill (seconds).
LOG_QUIET_S = 1.0

Plane = Literal["data", "management"]


class RunpodAuthError(RunpodApiError):
    """The key was refused (HTTP 401/403) or is missing; retrying will not help."""


def _job_id(answer: dict[str, Any]) -> str:
    job_id = answer["id"]
    if not isinstance(job_id, str) or not job_id:
        raise ValueError("id is not a string")
    return job_id


def _endpoints(answer: dict[str, Any]) -> list[dict[str, Any]]:
    endpoints = answer["endpoints"]
    if not isinstance(endpoints, list):
        raise ValueError("endpoints is not a list")
    return [e for e in endpoints if isinstance(e, dict)]


def _deleted(answer: Any) -> bool:
    return True


@dataclass(frozen=True)
class Route:
    """One RunPod call: how to build it, what a good answer looks like, what it answers."""

    name: str
    method: str
    plane: Plane
    path: str  # a template over the call's parameters, relative to the plane's base URL
    idempotent: bool
    required: tuple[str, ...] = ()  # keys a good answer must carry
    empty_ok: bool = False  # a good answer may have no body (204)
    scrub: bool = False  # mask secrets in every string of a good answer
    streamed: bool = False  # a good answer is an event stream, read by `LogTail`
    budget_s: float | None = None  # the call's own time budget, when below `deadline_s`
    # What the caller gets of a good answer (raising ValueError: a malformed answer).
    shape: Callable[[Any], Any] | None = None
    gone_ok: bool = False  # a 404 answers False: what the call would remove is gone


ROUTES: dict[str, Route] = {
    r.name: r
    for r in (
        Route(
            "run",
            "POST",
            "data",
            "/{endpoint_id}/run",
            idempotent=False,
            required=("id",),
            shape=_job_id,
        ),
        Route(
            "status",
            "GET",
            "data",
            "/{endpoint_id}/status/{job_id}",
            idempotent=True,
            required=("status",),
        ),
        Route("cancel", "POST", "data", "/{endpoint_id}/cancel/{job_id}", idempotent=True),
        Route("health", "GET", "data", "/{endpoint_id}/health", idempotent=True),
        Route("purge_queue", "POST", "data", "/{endpoint_id}/purge-queue", idempotent=False),
        Route(
            "list_endpoints",
            "GET",
            "management",
            "/v2/serverless",
            idempotent=True,
            required=("endpoints",),
            shape=_endpoints,
        ),
        Route(
            "get_endpoint",
            "GET",
            "management",
            "/v2/serverless/{endpoint_id}",
            idempotent=True,
            required=("id",),
            scrub=True,  # (runpod-flash copies the API key into the template's env)
        ),
        Route(
            "delete_endpoint",
            "DELETE",
            "management",
            "/v2/serverless/{endpoint_id}",
            idempotent=True,
            empty_ok=True,
            shape=_deleted,
            gone_ok=True,
        ),
        Route(
            "list_workers",
            "GET",
            "management",
            "/v2/serverless/{endpoint_id}/workers",
            idempotent=True,
            required=("workers",),
            scrub=True,
        ),
        Route(
            "worker_logs",
            "GET",
            "management",
            "/v2/serverless/{endpoint_id}/workers/{worker_id}/logs?tail={tail}",
            idempotent=True,
            streamed=True,
            budget_s=LOG_TIME_BUDGET_S,
        ),
    )
}

AUTH_STATUSES = frozenset({401, 403})
RETRY_STATUSES = frozenset({408, 429})  # plus every 5xx


@dataclass(frozen=True)
class RetryPolicy:
    """How idempotent calls are retried: `attempts` tries in all, full-jitter back-off.

    A `Retry-After` longer than `max_retry_after_s` is not waited for: the call fails
    and the caller's own loop backs off instead.
    """

    attempts: int = 4
    base_s: float = 0.5
    cap_s: float = 20.0
    max_retry_after_s: float = 60.0


# --------------------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class TailRead:
    """How a streamed answer (a worker log) is read: the bounds `LogTail` stops at."""

    lines: int = LOG_TAIL_DEFAULT
    max_bytes: int = LOG_MAX_BYTES
    quiet_s: float = LOG_QUIET_S


@dataclass(frozen=True)
class Wire:
    """What every call of one client shares: the planes' base URLs, the headers each
    request carries, httpx's per-operation timeouts, and the call's bounds."""

    bases: Mapping[str, str]
    headers: Mapping[str, str] = field(repr=False)  # (the Authorization header)
    timeout: httpx.Timeout
    retry: RetryPolicy
    deadline_s: float = CALL_DEADLINE_S
    max_response_bytes: int = MAX_RESPONSE_BYTES

    def budget(self, route: Route) -> float:
        """The time one call of `route` may take: `deadline_s`, or the route's own less."""
        own = route.budget_s
        return self.deadline_s if own is None else min(self.deadline_s, own)


@dataclass(frozen=True, slots=True)
class Send:
    """A request to put on the wire (the same one for every attempt of a call); `end`, the
    call's deadline (a `time.monotonic()` instant) the attempt must not pass; `limit` and
    `tail`, how its answer's body is read (see `Reading`)."""

    request: httpx.Request
    end: float
    limit: int = MAX_RESPONSE_BYTES
    tail: TailRead | None = None


@dataclass(frozen=True, slots=True)
class Pause:
    """Sleep this many seconds before the next try (it fits before the deadline)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back: status, headers and the decoded body (or, for a streamed read, what
    `LogTail.result` made of it)."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    streamed: dict[str, Any] | None = None


_EOL = re.compile(rb"\r\n|\r|\n")


class LogTail:
    """A sans-IO reader of a worker log's event stream (Server-Sent Events), bounded.

    `feed(raw)` takes the body's raw chunks (undoing gzip/deflate within `max_bytes` of
    decoded output, and counting raw bytes against the same budget) and answers True once
    reading should stop (`lines` lines read, or the byte budget used). `end()` closes a
    stream that ended or went quiet (an event not yet closed by a blank line still counts),
    `cut()` one that a bound or an error stopped (a partial event is dropped, `truncated`).
    `result()` is `{"lines": [...], "truncated": bool}`: the last `lines` lines, masked.

    Framing as the SSE specification has it: lines end in CRLF, LF or CR; a blank line
    dispatches the event; a line starting with ':' is a comment; `field: value` loses one
    space after the colon; several `data` lines join with LF. An event counts when its data
    is a JSON object whose `line` is a string (trailing CR/LF stripped); others are skipped.
    """

    def __init__(self, read: TailRead, content_encoding: str | None):
        self.want = read.lines
        self.max_bytes = read.max_bytes
        self.decoder = BoundedDecoder(content_encoding, read.max_bytes, clip=True)
        self.kept: deque[str] = deque(maxlen=read.lines)
        self.seen = 0  # lines read (kept or dropped from the front)
        self.raw = 0  # raw bytes read
        self.truncated = False
        self._partial = b""  # the current line, not yet ended
        self._data: list[bytes] = []  # the current event's data lines
        self._skip_lf = False  # the last chunk ended in CR: a leading LF is its pair

    def feed(self, raw: bytes) -> bool:
        """Take one raw chunk; True when reading should stop."""
        self.raw += len(raw)
        self._scan(self.decoder.feed(raw))
        if self.decoder.full or self.raw > self.max_bytes:
            self.truncated = True
            return True
        return self.seen >= self.want

    def end(self) -> None:
        """The stream ended (or went quiet): the last line and event count."""
        self._scan(self.decoder.finish())
        if self.decoder.full:
            self.truncated = True
            return
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        self._dispatch()

    def cut(self) -> None:
        """A bound or an error stopped the read: what is unfinished is dropped."""
        self.truncated = True
        self._partial = b""
        self._data = []

    def result(self) -> dict[str, Any]:
        """`{"lines": [...], "truncated": bool}`: the last lines, each masked for secrets."""
        return {
            "lines": [redact(valid_utf8(line)) or "" for line in self.kept],
            "truncated": self.truncated or self.seen > len(self.kept),
        }

    def _scan(self, data: bytes) -> None:
        if self._skip_lf and data[:1] == b"\n":
            data = data[1:]
        if not data:
            return
        self._skip_lf = data.endswith(b"\r")
        parts = _EOL.split(self._partial + data)
        self._partial = parts.pop()
        for line in parts:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
        elif not line.startswith(b":"):
            field, _, value = line.partition(b":")
            if field == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)

    def _dispatch(self) -> None:
        if not self._data:
            return
        data, self._data = b"\n".join(self._data), []
        try:
            event = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return
        line = event.get("line") if isinstance(event, dict) else None
        if isinstance(line, str):
            self.seen += 1
            self.kept.append(line.rstrip("\r\n"))


class Reading:
    """One answer's body, read as the protocol says; a driver feeds it the raw chunks.

    `feed(raw)` takes one chunk and answers True when the driver should stop reading; at
    the end of the body the driver calls `finish()`, then takes `answer()`. A 2xx answer to a
    streamed `Send` (one with a `tail`) goes to a `LogTail` and stops at its bounds or at the
    deadline; any other body is decoded within `Send.limit` bytes (`BoundedDecoder`:
    `ResponseTooLarge` past it) and must end before the deadline (`httpx.ReadTimeout`).
    When the read fails, `broken(exc)` says what it still answers: a streamed read keeps the
    lines it has (a timeout before the deadline is a stream gone quiet: its backfill is in);
    anything else is the exception, for `exchange` to classify.
    """

    __slots__ = ("_decoder", "_end", "_parts", "_tail", "headers", "status_code")

    def __init__(self, send: Send, status_code: int, headers: Mapping[str, str]):
        self.status_code = status_code
        self.headers = headers
        self._end = send.end
        encoding = headers.get("content-encoding")
        self._tail: LogTail | None = None
        if send.tail is not None and 200 <= status_code < 300:
            self._tail = LogTail(send.tail, encoding)
        else:
            self._decoder = BoundedDecoder(encoding, send.limit)
            self._parts: list[bytes] = []

    def feed(self, raw: bytes) -> bool:
        """Take one raw chunk of the body; True when reading should stop."""
        tail = self._tail
        if tail is not None:
            if tail.feed(raw):
                return True
            if time.monotonic() >= self._end:
                tail.cut()  # the time budget
                return True
            return False
        self._parts.append(self._decoder.feed(raw))
        if time.monotonic() >= self._end:
            raise httpx.ReadTimeout("the call deadline passed mid-body")
        return False

    def finish(self) -> None:
        """The body ended."""
        if self._tail is not None:
            self._tail.end()
        else:
            self._parts.append(self._decoder.finish())

    def broken(self, exc: BaseException) -> Answer | BaseException:
        """What a read that raised `exc` answers: the lines of a streamed read, or `exc`."""
        tail = self._tail
        if tail is None:
            return exc
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            if isinstance(exc, TimeoutError) or time.monotonic() >= self._end - _LATE_S:
                tail.cut()  # the time budget, not a quiet stream
            else:
                tail.end()  # a quiet stream: its backfill is in
        elif isinstance(exc, httpx.TransportError) and tail.seen:
            tail.cut()  # dropped after some lines: they are kept
        else:
            return exc
        return self.answer()

    def answer(self) -> Answer:
        """The `Answer` for `exchange`."""
        if self._tail is not None:
            return Answer(self.status_code, self.headers, b"", self._tail.result())
        return Answer(self.status_code, self.headers, b"".join(self._parts))


class _Failure(RunpodApiError):
    """A `RunpodApiError` that also carries what retrying needs to know."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        route: str,
        transient: bool = False,
        retry_after: float | None = None,
        auth: bool = False,
    ):
        super().__init__(message, status_code=status_code, route=route)
        self.transient = transient
        self.retry_after = retry_after
        self.auth = auth


def build_request(
    wire: Wire,
    route: Route,
    params: Mapping[str, str],
    body: Any,
    end: float,
    tail: TailRead | None = None,
) -> httpx.Request:
    """The request for one call: path parameters percent-encoded, the wire's headers, its
    timeouts, and the call's deadline `end` as the `DEADLINE` extension. A streamed read
    (`tail`) asks for an event stream, and its every socket read waits at most
    `tail.quiet_s` (or the read timeout, when that is shorter)."""
    path = route.path.format(**{k: quote(str(v), safe="") for k, v in params.items()})
    timeouts = wire.timeout.as_dict()
    headers = wire.headers
    if tail is not None:
        headers = {**headers, "Accept": "text/event-stream"}
        read = timeouts["read"]
        timeouts["read"] = tail.quiet_s if read is None else min(read, tail.quiet_s)
    return httpx.Request(
        route.method,
        wire.bases[route.plane] + path,
        json=body,
        headers=headers,
        extensions={"timeout": timeouts, DEADLINE: end},
    )


def describe(route: Route, params: Mapping[str, str]) -> str:
    """How messages name a call: the route and its ids."""
    ids = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"RunPod {route.name}" + (f" ({ids})" if ids else "")


def parse_response(route: Route, params: Mapping[str, str], answer: Answer) -> Any:
    """What the caller gets of a good answer, or raise `RunpodApiError` (a `_Failure`)."""
    code = answer.status_code
    if 200 <= code < 300:
        what = describe(route, params)
        value = _parse_success(route, what, answer)
        if route.shape is None:
            return value
        try:
            return route.shape(value)
        except ValueError as exc:
            raise _malformed(f"{what}: malformed answer: {exc}", route) from None
    if code == 404 and route.gone_ok:
        return False
    detail = _error_detail(answer.content)
    message = f"{describe(route, params)}: HTTP {code}" + (f": {detail}" if detail else "")
    if code in AUTH_STATUSES:
        raise _Failure(_clean(message), status_code=code, route=route.name, auth=True)
    transient = code in RETRY_STATUSES or 500 <= code < 600
    retry_after = _retry_after(answer.headers) if code in (429, 503) else None
    raise _Failure(
        _clean(message),
        status_code=code,
        route=route.name,
        transient=transient,
        retry_after=retry_after,
    )


def transport_failure(
    route: Route, params: Mapping[str, str], exc: BaseException, end: float, budget: float
) -> _Failure:
    """The error for an attempt that got no usable answer: the call's deadline when a
    timeout came at its `end` (the attempt had all the time left), else the exception
    (timeouts, resets and other network errors are transient; a body over the cap is not)."""
    what = describe(route, params)
    timeout = isinstance(exc, httpx.TimeoutException | TimeoutError)
    if timeout and time.monotonic() >= end - _LATE_S:
        message = f"{what}: no complete answer within the {budget:g} s call deadline"
        return _Failure(_clean(message), status_code=None, route=route.name)
    transient = timeout or isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError)
    text = str(exc) or "no detail"
    return _Failure(
        _clean(f"{what}: {type(exc).__name__}: {text[:_DETAIL_CAP]}"),
        status_code=None,
        route=route.name,
        transient=transient,
    )


def retry_delay(
    route: Route, error: _Failure, attempt: int, policy: RetryPolicy, rng: random.Random
) -> float | None:
    """Seconds to wait before try `attempt + 1`, or None to give up with `error`."""
    if not (route.idempotent and error.transient) or attempt >= policy.attempts:
        return None
    if error.retry_after is not None:
        if error.retry_after > policy.max_retry_after_s:
            return None
        return error.retry_after + rng.uniform(0.0, policy.base_s)
    return rng.uniform(0.0, min(policy.cap_s, policy.base_s * 2 ** (attempt - 1)))


def exchange(
    wire: Wire,
    route: Route,
    params: Mapping[str, str],
    body: Any,
    rng: random.Random,
    tail: TailRead | None = None,
) -> Generator[Send | Pause, Answer | BaseException | None, Any]:
    """One call with its retries, within its deadline, as a generator the drivers run.

    Yields `Send` (send back the `Answer`, which `Reading` makes, or the exception the
    attempt raised) and `Pause` (send back None once slept); returns what the caller gets
    or raises `RunpodApiError`. A streamed route's `Send` carries its `TailRead` (the
    default one unless `tail` is given).
    """
    if route.streamed and tail is None:
        tail = TailRead()
    budget = wire.budget(route)
    end = time.monotonic() + budget
    request = build_request(wire, route, params, body, end, tail)
    send = Send(request, end, wire.max_response_bytes, tail)
    attempt = 0
    while True:
        attempt += 1
        got = yield send
        try:
            if isinstance(got, Answer):
                return parse_response(route, params, got)
            raise transport_failure(route, params, got or RuntimeError("no answer"), end, budget)
        except _Failure as error:
            delay = retry_delay(route, error, attempt, wire.retry, rng)
            if delay is None or time.monotonic() + delay >= end:
                raise _public(error) from (got if isinstance(got, BaseException) else None)
        yield Pause(delay)


def _parse_success(route: Route, what: str, answer: Answer) -> Any:
    if route.streamed:
        if answer.streamed is None:
            raise _malformed(f"{what}: malformed answer: no event stream was read", route)
        return answer.streamed
    text = answer.content.strip()
    if not text:
        if route.empty_ok:
            return None
        raise _malformed(f"{what}: malformed answer: empty body (HTTP {answer.status_code})", route)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _malformed(
            f"{what}: malformed answer: not JSON (HTTP {answer.status_code})", route
        ) from None
    if route.empty_ok:
        return value
    if not isinstance(value, dict):
        raise _malformed(
            f"{what}: malformed answer: a JSON {type(value).__name__}, not an object", route
        )
    missing = [k for k in route.required if k not in value or value[k] is None]
    if missing:
        raise _malformed(f"{what}: malformed answer: missing {', '.join(missing)}", route)
    return scrubbed(value) if route.scrub else value


def scrubbed(value: Any, depth: int = 0) -> Any:
    """A parsed JSON value with every string (keys too) masked for secrets."""
    if isinstance(value, str):
        return redact(valid_utf8(value)) or value
    if depth > 64:
        return None
    if isinstance(value, dict):
        return {scrubbed(k, depth + 1): scrubbed(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v, depth + 1) for v in value]
    return value


def _malformed(message: str, route: Route) -> _Failure:
    return _Failure(_clean(message), status_code=None, route=route.name)


def _public(error: _Failure) -> RunpodApiError:
    """The error callers see: a plain `RunpodApiError` or `RunpodAuthError`."""
    cls = RunpodAuthError if error.auth else RunpodApiError
    return cls(str(error), status_code=error.status_code, route=error.route)


def _error_detail(content: bytes) -> str:
    """A short human detail from an error body: RFC 9457 `detail`/`title`, or `error`."""
    text = content.decode("utf-8", "replace").strip()
    if not text:
        return ""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return redact_then_cap(" ".join(text.split()), _DETAIL_CAP)
    if isinstance(value, dict):
        for key in ("detail", "error", "message", "title"):
            item = value.get(key)
            if isinstance(item, str) and item.strip():
                return redact_then_cap(" ".join(item.split()), _DETAIL_CAP)
    return redact_then_cap(" ".join(json.dumps(value, default=str).split()), _DETAIL_CAP)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after") or headers.get("Retry-After")
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None  # an HTTP-date: fall back to our own back-off
    return value if math.isfinite(value) and value >= 0 else None


def _clean(message: str) -> str:
    return redact(message) or message
