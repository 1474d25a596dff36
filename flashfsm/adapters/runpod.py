"""A RunPod REST client on httpx: the data plane (jobs) and REST v2 endpoint management.

Theory of operation. Every call is one `Route` from the `ROUTES` table (method, host,
path, whether it is idempotent, what a good answer must hold). One generator,
`exchange`, holds the whole request/response protocol without doing any I/O: it yields
a `Send` (a built request) and receives an `Answer` or the transport exception, decides
with `parse_response` whether the answer is a value or an error, and with `retry_delay`
whether to try again; it yields a `Pause` to ask for the back-off sleep. `RunpodClient`
(httpx.Client) and `AsyncRunpodClient` (httpx.AsyncClient) each only drive that
generator, so both speak exactly the same protocol.

Rules the table and the two functions encode:

- 429 (honouring `Retry-After` seconds), 408, any 5xx, timeouts, resets and other network
  errors are retried with jittered exponential back-off, on idempotent routes only
  (status, health, cancel, endpoint list/get/delete). `run` and `purge_queue` are never
  retried: a lost answer may hide a job that was created, and a blind retry would start
  a second one.
- 401 and 403 raise `RunpodAuthError` at once, on every route.
- 404 on `status` raises `RunpodApiError(status_code=404)`: the job is gone (its TTL or
  the result retention passed); the core maps it to LOST. `delete_endpoint` answers
  False on 404 (already gone) so a retried delete stays idempotent.
- A body that is not JSON, or not an object, or lacks a key the route promises, raises
  `RunpodApiError` with `status_code=None` and a message starting "malformed".

Messages name the route, the ids and the HTTP status; they never hold the API key (it
lives only in the Authorization header) and pass through `redact` besides.

Bounds. Every call, its retries and back-off sleeps included, ends within the client's
`deadline_s` (`CALL_DEADLINE_S` by default) whatever the server does: a retry whose pause
would cross the deadline is not made, and each attempt gets only the time left. The sync
client enforces it in its network layer (every socket connect, read and write waits at most
the time left, so a server trickling headers or body a byte at a time cannot stretch a
call); the async client runs each attempt under `asyncio.timeout`. A call that runs out of
time raises `RunpodApiError` ("... call deadline ..."). Response bodies are capped at
`max_response_bytes` (`MAX_RESPONSE_BYTES`, 32 MiB) counted after gzip/deflate decoding and
decoded in bounded steps (`flashfsm.adapters.http11.BoundedDecoder`); a bigger body is a
`RunpodApiError` too, and is not retried.

The platform's own records (REST v2, management host). `endpoint_workers(endpoint_id)` is
`GET /v2/serverless/{id}/workers`, an ordinary route (idempotent, retried, `workers`
required); every string of its answer is masked for secrets (a worker record may echo its
env). `worker_log(endpoint_id, worker_id, tail=100)` is
`GET /v2/serverless/{id}/workers/{worker}/logs?tail=N`, a Server-Sent Events stream that
the real API never ends (it backfills the last `tail` lines, then streams live ones). It
goes through the same `exchange` as every route (same retries on 408/429/5xx and network
errors, same 401/403/404 errors), but a 2xx body is read by `LogTail`, a sans-IO reader
that parses the SSE framing (CRLF, LF or CR line ends, comments, multi-line `data`) and
keeps each event's `data.line`, and the read STOPS, closing the connection, at the first of:

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

import asyncio
import contextlib
import functools
import inspect
import json
import math
import os
import random
import re
import ssl
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import httpcore
import httpx

from flashfsm.adapters.http11 import (
    ACCEPT_ENCODING,
    MAX_RESPONSE_BYTES,
    AsyncH11Transport,
    BoundedDecoder,
)
from flashfsm.errors import RunpodApiError
from flashfsm.events.text import valid_utf8
from flashfsm.redact import redact, redact_then_cap, register_secrets

# Where the RunPod SDKs look (runpod/__init__.py, runpod/api/graphql.py and
# runpod_flash/core/urls.py): the data plane, and the control-plane host that serves
# GraphQL at /graphql and REST v2 management at /v2/serverless.
ENV_API_KEY = "RUNPOD_API_KEY"
ENV_ENDPOINT_BASE_URL = "RUNPOD_ENDPOINT_BASE_URL"
ENV_API_BASE_URL = "RUNPOD_API_BASE_URL"
DEFAULT_ENDPOINT_BASE_URL = "https://api.runpod.ai/v2"
DEFAULT_API_BASE_URL = "https://api.runpod.io"

MAX_TTL_S = 7 * 24 * 3600  # RunPod's ceiling for a job's policy.ttl
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
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


@dataclass(frozen=True)
class Route:
    """One RunPod call: how to build it and what a good answer looks like."""

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


ROUTES: dict[str, Route] = {
    r.name: r
    for r in (
        Route("run", "POST", "data", "/{endpoint_id}/run", idempotent=False, required=("id",)),
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


# --------------------------------------------------------------------------- policy


def policy_for_budget(
    wall_clock_s: float, *, queue_allowance_s: float = 7200.0
) -> dict[str, float]:
    """`run` keyword arguments (`ttl_s`, `execution_timeout_s`) for a job's wall-clock budget.

    The execution timeout gives the worker its budget plus 10 % (at least 10 minutes) so
    RunPod never kills a job the supervisor still considers in time; the TTL adds
    `queue_allowance_s` for queueing and cold start on top, because TTL counts from
    submission and a job whose TTL passes is deleted even mid-run. The TTL is capped at
    RunPod's 7 days, and the execution timeout at the TTL.
    """
    if not (isinstance(wall_clock_s, (int, float)) and math.isfinite(wall_clock_s)):
        raise ValueError(f"wall_clock_s must be a finite number, got {wall_clock_s!r}")
    if wall_clock_s <= 0:
        raise ValueError(f"wall_clock_s must be positive, got {wall_clock_s!r}")
    execution = wall_clock_s + max(600.0, 0.1 * wall_clock_s)
    ttl = min(float(MAX_TTL_S), execution + max(0.0, queue_allowance_s))
    return {"ttl_s": ttl, "execution_timeout_s": min(execution, ttl)}


def job_policy(ttl_s: float | None, execution_timeout_s: float | None) -> dict[str, int] | None:
    """The wire `policy` object for a job (milliseconds), or None when nothing is set."""
    policy: dict[str, int] = {}
    for key, value in (("ttl", ttl_s), ("executionTimeout", execution_timeout_s)):
        if value is None:
            continue
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"policy {key} must be a positive number of seconds, got {value!r}")
        policy[key] = round(value * 1000)
    if policy.get("ttl", 0) > MAX_TTL_S * 1000:
        raise ValueError(f"policy ttl may be at most {MAX_TTL_S} s (7 days), got {ttl_s!r}")
    return policy or None


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
class Send:
    """A request to put on the wire (`tail` set: a 2xx body is read by `LogTail`)."""

    method: str
    url: str
    json: Any = None
    tail: TailRead | None = None


@dataclass(frozen=True)
class Pause:
    """Sleep this many seconds before the next try."""

    seconds: float


class _Expired:
    """Sent back for a `Pause` that the call's deadline leaves no time for."""


EXPIRED = _Expired()


@dataclass(frozen=True)
class Answer:
    """What came back: status, headers and the raw body (or, for a streamed read, what
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
    route: Route,
    bases: Mapping[str, str],
    params: Mapping[str, str],
    body: Any,
    tail: TailRead | None = None,
) -> Send:
    """The `Send` for one call; path parameters are percent-encoded. A streamed route's
    `Send` carries its `TailRead` (the default one unless `tail` is given)."""
    path = route.path.format(**{k: quote(str(v), safe="") for k, v in params.items()})
    if route.streamed and tail is None:
        tail = TailRead()
    return Send(route.method, bases[route.plane].rstrip("/") + path, body, tail)


def describe(route: Route, params: Mapping[str, str]) -> str:
    """How messages name a call: the route and its ids."""
    ids = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"RunPod {route.name}" + (f" ({ids})" if ids else "")


def parse_response(route: Route, params: Mapping[str, str], answer: Answer) -> Any:
    """The value of a good answer, or raise `RunpodApiError` (a `_Failure`)."""
    what = describe(route, params)
    code = answer.status_code
    if 200 <= code < 300:
        return _parse_success(route, what, answer)
    detail = _error_detail(answer.content)
    message = f"{what}: HTTP {code}" + (f": {detail}" if detail else "")
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


def transport_failure(route: Route, params: Mapping[str, str], exc: BaseException) -> _Failure:
    """The error for a request that got no HTTP answer (timeout, reset, refused, …)."""
    transient = isinstance(
        exc, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
    )
    text = str(exc) or "no detail"
    return _Failure(
        _clean(f"{describe(route, params)}: {type(exc).__name__}: {text[:_DETAIL_CAP]}"),
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
    route: Route,
    bases: Mapping[str, str],
    params: Mapping[str, str],
    body: Any,
    policy: RetryPolicy,
    rng: random.Random,
    tail: TailRead | None = None,
) -> Generator[Send | Pause, Answer | BaseException | None, Any]:
    """One call with its retries, as a generator the sync and async drivers run.

    Yields `Send` (send back the `Answer` or the transport exception) and `Pause` (send
    back None after sleeping, or `EXPIRED` when the call's deadline leaves no time for
    it); returns the parsed value or raises `RunpodApiError`. A `Send` with a `tail` asks
    the driver to read a 2xx body with `LogTail` and put its result in `Answer.streamed`.
    """
    request = build_request(route, bases, params, body, tail)
    attempt = 0
    while True:
        attempt += 1
        got = yield request
        try:
            if isinstance(got, Answer):
                return parse_response(route, params, got)
            raise transport_failure(route, params, got or RuntimeError("no answer"))
        except _Failure as error:
            delay = retry_delay(route, error, attempt, policy, rng)
            if delay is not None and (yield Pause(delay)) is not EXPIRED:
                continue
            raise _public(error) from (got if isinstance(got, BaseException) else None)


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


# --------------------------------------------------------------------------- bounds


class _CallClock(threading.local):
    """The running call's deadline (a `time.monotonic()` instant), per thread."""

    at: float | None = None
    budget: float = CALL_DEADLINE_S

    def left(self, timeout: float | None) -> float | None:
        """The smaller of `timeout` and the time left; raises once none is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout(self.message())
        return left if timeout is None else min(timeout, left)

    def message(self) -> str:
        return f"no complete answer within the {self.budget:g} s call deadline"


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every wait is cut at the running call's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, clock: _CallClock):
        self._inner = inner
        self._clock = clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._clock.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            wait = self._clock.left(timeout)
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
        try:
            wait = self._clock.left(timeout)
        except httpcore.ReadTimeout as exc:
            raise httpcore.ConnectTimeout(str(exc)) from None
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, wait), self._clock
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every connect, read and write cut at the deadline."""

    def __init__(self, inner: httpcore.NetworkBackend, clock: _CallClock):
        self._inner = inner
        self._clock = clock

    def _wait(self, timeout: float | None) -> float | None:
        try:
            return self._clock.left(timeout)
        except httpcore.ReadTimeout as exc:
            raise httpcore.ConnectTimeout(str(exc)) from None

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, self._wait(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self._clock)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, self._wait(timeout), socket_options)
        return _DeadlineStream(stream, self._clock)

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
    """An httpcore response body as httpx reads it (its errors mapped to httpx's)."""

    def __init__(self, stream: Any):
        self._stream = stream

    def __iter__(self) -> Generator[bytes, None, None]:
        with _as_httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class _BoundedTransport(httpx.BaseTransport):
    """An httpx transport over httpcore's connection pool with `_DeadlineBackend` as its
    network backend: every connect, read and write is cut at the running call's deadline.

    Built on public extension points only (`httpx.BaseTransport`, `httpcore.ConnectionPool`'s
    `network_backend`); a test proves the deadline holds against a server trickling its
    headers.
    """

    def __init__(self, verify: ssl.SSLContext | bool, clock: _CallClock):
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
        self._pool = httpcore.ConnectionPool(
            ssl_context=context, network_backend=_DeadlineBackend(httpcore.SyncBackend(), clock)
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the pool (see the class notes)."""
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
        with _as_httpx_errors():
            answer = self._pool.handle_request(core)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_CoreBody(answer.stream),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()


def _too_big(limit: int) -> int:
    if not (isinstance(limit, int) and limit > 0):
        raise ValueError(f"max_response_bytes must be a positive int, got {limit!r}")
    return limit


def _positive(deadline_s: float) -> float:
    if not (isinstance(deadline_s, (int, float)) and math.isfinite(deadline_s) and deadline_s > 0):
        raise ValueError(f"deadline_s must be a positive number of seconds, got {deadline_s!r}")
    return float(deadline_s)


# --------------------------------------------------------------------------- clients


def first_key(raw: str | None) -> str | None:
    """The first key of a comma-separated `RUNPOD_API_KEY` pool."""
    for part in (raw or "").split(","):
        if part.strip():
            return part.strip()
    return None


class _Base:
    """Configuration shared by both clients."""

    def __init__(
        self,
        api_key: str,
        *,
        endpoint_base_url: str | None,
        api_base_url: str | None,
        retry: RetryPolicy | None,
        rng: random.Random | None,
    ):
        if not isinstance(api_key, str) or not api_key.strip():
            raise RunpodAuthError("a RunPod API key is required (RUNPOD_API_KEY is empty)")
        register_secrets(api_key.strip())
        self._bases = {
            "data": _check_url(endpoint_base_url or DEFAULT_ENDPOINT_BASE_URL),
            "management": _check_url(api_base_url or DEFAULT_API_BASE_URL),
        }
        self._headers = {
            "Authorization": f"Bearer {api_key.strip()}",
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
            "User-Agent": "flashfsm",
        }
        self._stream_headers = {**self._headers, "Accept": "text/event-stream"}
        self.retry = retry or RetryPolicy()
        self._rng = rng or random.Random()

    @staticmethod
    def _env_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
        key = first_key(os.environ.get(ENV_API_KEY))
        if key is None:
            raise RunpodAuthError(f"{ENV_API_KEY} is not set")
        kwargs.setdefault("endpoint_base_url", os.environ.get(ENV_ENDPOINT_BASE_URL) or None)
        kwargs.setdefault("api_base_url", os.environ.get(ENV_API_BASE_URL) or None)
        return {"api_key": key, **kwargs}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(endpoint_base_url={self._bases['data']!r}, "
            f"api_base_url={self._bases['management']!r})"
        )

    def _call(self, name: str, body: Any = None, *, read: TailRead | None = None, **params: str):
        return exchange(ROUTES[name], self._bases, params, body, self.retry, self._rng, read)

    def _budget(self, name: str) -> float:
        """The time one call of route `name` may take: `deadline_s`, or the route's less."""
        own = ROUTES[name].budget_s
        deadline: float = self.deadline_s  # type: ignore[attr-defined]
        return deadline if own is None else min(deadline, own)

    def _log_call(self, endpoint_id: str, worker_id: str, tail: int):
        """The `worker_log` exchange for the last `tail` lines (1 to `LOG_TAIL_MAX`)."""
        if isinstance(tail, bool) or not isinstance(tail, int) or not 1 <= tail <= LOG_TAIL_MAX:
            raise ValueError(f"tail must be an int from 1 to {LOG_TAIL_MAX}, got {tail!r}")
        return self._call(
            "worker_logs",
            read=TailRead(lines=tail),
            endpoint_id=endpoint_id,
            worker_id=worker_id,
            tail=str(tail),
        )

    def _stream_timeout(self, read: TailRead) -> httpx.Timeout:
        """A streamed read's timeouts: every socket read waits at most `read.quiet_s` (or
        the client's own read timeout, when that is shorter)."""
        base: httpx.Timeout = self._timeout  # type: ignore[attr-defined]
        wait = read.quiet_s if base.read is None else min(base.read, read.quiet_s)
        return httpx.Timeout(connect=base.connect, read=wait, write=base.write, pool=base.pool)

    @staticmethod
    def _run_body(
        job_input: Any,
        ttl_s: float | None,
        execution_timeout_s: float | None,
        webhook: str | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"input": job_input}
        policy = job_policy(ttl_s, execution_timeout_s)
        if policy:
            body["policy"] = policy
        if webhook:
            body["webhook"] = webhook
        return body

    @staticmethod
    def _job_id(answer: dict[str, Any]) -> str:
        job_id = answer["id"]
        if not isinstance(job_id, str) or not job_id:
            raise RunpodApiError(
                "RunPod run: malformed answer: id is not a string", status_code=None, route="run"
            )
        return job_id

    @staticmethod
    def _endpoints(answer: dict[str, Any]) -> list[dict[str, Any]]:
        endpoints = answer["endpoints"]
        if not isinstance(endpoints, list):
            raise RunpodApiError(
                "RunPod list_endpoints: malformed answer: endpoints is not a list",
                status_code=None,
                route="list_endpoints",
            )
        return [e for e in endpoints if isinstance(e, dict)]


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """One verifying SSL context per process: building one costs ~25 ms (loading CAs)."""
    return httpx.create_ssl_context()


def _verify(verify: ssl.SSLContext | bool | None) -> ssl.SSLContext | bool:
    return default_ssl_context() if verify is None or verify is True else verify


def _proxied() -> bool:
    """Whether the environment names a proxy (httpx's own transport honours those)."""
    return any(
        os.environ.get(name) or os.environ.get(name.lower())
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
    )


def _check_url(url: str) -> str:
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return url.rstrip("/")


class RunpodClient(_Base):
    """The synchronous client (and `poll_job`'s default `client`).

    `sleep` and `rng` are injectable for tests; `transport` or `http_client` replace the
    network layer (a passed `http_client` is not closed by `close()`). TLS verification
    uses one shared default context unless `verify` names another.

    Each call ends within `deadline_s` seconds, retries included, and refuses a body over
    `max_response_bytes` once decoded (see the module notes). The deadline cuts every
    socket wait of the client's own transport; with a `transport`, `http_client` or proxy
    of the caller's it is checked between body chunks and before each retry only.
    """

    def __init__(
        self,
        api_key: str,
        *,
        endpoint_base_url: str | None = None,
        api_base_url: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        rng: random.Random | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
        verify: ssl.SSLContext | bool | None = None,
        deadline_s: float = CALL_DEADLINE_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        super().__init__(
            api_key,
            endpoint_base_url=endpoint_base_url,
            api_base_url=api_base_url,
            retry=retry,
            rng=rng,
        )
        self.deadline_s = _positive(deadline_s)
        self.max_response_bytes = _too_big(max_response_bytes)
        self._timeout = httpx.Timeout(timeout)
        self._clock = _CallClock()
        self._clock.budget = self.deadline_s
        self._sleep = sleep
        self._owns_http = http_client is None
        if http_client is None and transport is None and not _proxied():
            transport = _BoundedTransport(_verify(verify), self._clock)
        self._http = http_client or httpx.Client(
            timeout=timeout, transport=transport, verify=_verify(verify)
        )

    @classmethod
    def from_env(cls, **kwargs: Any) -> RunpodClient:
        """A client keyed by the first key of `RUNPOD_API_KEY`, hosts from the SDKs' env vars."""
        return cls(**cls._env_kwargs(kwargs))

    def _drive(
        self, steps: Generator[Send | Pause, Any, Any], budget_s: float | None = None
    ) -> Any:
        budget = self.deadline_s if budget_s is None else budget_s
        self._clock.budget = budget
        end = time.monotonic() + budget
        step = next(steps)
        while True:
            try:
                if isinstance(step, Pause):
                    if time.monotonic() + step.seconds >= end:
                        step = steps.send(EXPIRED)
                        continue
                    self._sleep(step.seconds)
                    step = steps.send(None)
                    continue
                try:
                    got: Any = self._attempt(step, end)
                except httpx.HTTPError as exc:
                    got = exc
                step = steps.send(got)
            except StopIteration as done:
                return done.value

    def _attempt(self, step: Send, end: float) -> Answer:
        """One request, its body read raw and decoded within the cap, before `end` (a
        streamed 2xx body: read by `LogTail`, within its bounds)."""
        clock = self._clock
        clock.at = end
        try:
            if step.tail is None:
                request = self._http.build_request(
                    step.method, step.url, json=step.json, headers=self._headers
                )
            else:
                request = self._http.build_request(
                    step.method,
                    step.url,
                    json=step.json,
                    headers=self._stream_headers,
                    timeout=self._stream_timeout(step.tail),
                )
            response = self._http.send(request, stream=True)
            try:
                if step.tail is not None and response.is_success:
                    return self._read_tail(response, step.tail, end)
                decoder = BoundedDecoder(
                    response.headers.get("content-encoding"), self.max_response_bytes
                )
                parts = []
                for raw in response.iter_raw():
                    parts.append(decoder.feed(raw))
                    if time.monotonic() >= end:
                        raise httpx.ReadTimeout(clock.message(), request=request)
                parts.append(decoder.finish())
            finally:
                response.close()
            return Answer(response.status_code, response.headers, b"".join(parts))
        except httpx.TimeoutException as exc:
            if time.monotonic() < end - 0.05:
                raise  # one of httpx's own timeouts, well before the deadline
            raise httpx.ReadTimeout(clock.message(), request=exc.request) from None
        finally:
            clock.at = None

    @staticmethod
    def _read_tail(response: httpx.Response, read: TailRead, end: float) -> Answer:
        """Read a streamed body with `LogTail` until it says stop, the stream ends or goes
        quiet (a read timeout before `end`), or `end` comes."""
        tail = LogTail(read, response.headers.get("content-encoding"))
        try:
            for raw in response.iter_raw():
                if tail.feed(raw):
                    break
                if time.monotonic() >= end:
                    tail.cut()
                    break
            else:
                tail.end()
        except httpx.TimeoutException:
            if time.monotonic() >= end - _LATE_S:
                tail.cut()  # the time budget, not a quiet stream
            else:
                tail.end()
        except httpx.TransportError:
            if not tail.seen:
                raise
            tail.cut()
        return Answer(response.status_code, response.headers, b"", tail.result())

    def run(
        self,
        endpoint_id: str,
        input: Any,
        *,
        ttl_s: float | None = None,
        execution_timeout_s: float | None = None,
        webhook: str | None = None,
    ) -> str:
        """Queue a job and return its id. Never retried (see the module notes)."""
        body = self._run_body(input, ttl_s, execution_timeout_s, webhook)
        return self._job_id(self._drive(self._call("run", body, endpoint_id=endpoint_id)))

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        """The job's status answer; HTTP 404 (job gone) raises with `status_code=404`."""
        return self._drive(self._call("status", endpoint_id=endpoint_id, job_id=job_id))

    def cancel(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        """Cancel a job; returns RunPod's answer (`{id, status}`)."""
        return self._drive(self._call("cancel", endpoint_id=endpoint_id, job_id=job_id))

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        """The endpoint's `/health` answer (worker and job counts; keys may be missing)."""
        return self._drive(self._call("health", endpoint_id=endpoint_id))

    def purge_queue(self, endpoint_id: str) -> dict[str, Any]:
        """Remove the endpoint's queued jobs. Not retried."""
        return self._drive(self._call("purge_queue", endpoint_id=endpoint_id))

    def list_endpoints(self) -> list[dict[str, Any]]:
        """Every serverless endpoint of the account (REST v2)."""
        return self._endpoints(self._drive(self._call("list_endpoints")))

    def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        """One endpoint (REST v2)."""
        return self._drive(self._call("get_endpoint", endpoint_id=endpoint_id))

    def delete_endpoint(self, endpoint_id: str) -> bool:
        """Delete an endpoint: True when deleted now, False when it was already gone."""
        try:
            self._drive(self._call("delete_endpoint", endpoint_id=endpoint_id))
        except RunpodApiError as exc:
            if exc.status_code == 404:
                return False
            raise
        return True

    def endpoint_workers(self, endpoint_id: str) -> dict[str, Any]:
        """The endpoint's workers (REST v2 `GET /v2/serverless/{id}/workers`): the answer
        (`{"workers": [...], ...}`), every string masked for secrets."""
        return self._drive(self._call("list_workers", endpoint_id=endpoint_id))

    def worker_log(
        self, endpoint_id: str, worker_id: str, *, tail: int = LOG_TAIL_DEFAULT
    ) -> dict[str, Any]:
        """The last `tail` lines of a worker's log: `{"lines": [str, ...], "truncated":
        bool}`, read within `LOG_MAX_BYTES` and `LOG_TIME_BUDGET_S` (see the module notes)."""
        return self._drive(
            self._log_call(endpoint_id, worker_id, tail), self._budget("worker_logs")
        )

    def close(self) -> None:
        """Close the HTTP connection pool (unless it was passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> RunpodClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRunpodClient(_Base):
    """The asyncio client: the same routes, rules and errors as `RunpodClient`.

    `sleep` may be a coroutine function (the default, `asyncio.sleep`) or a plain one.
    Unless `transport` or `http_client` is passed, or the environment names a proxy, the
    requests go through `AsyncH11Transport` (h11 over asyncio streams), which costs about a
    third of httpx's default transport in CPU per request. Each call ends within
    `deadline_s` seconds, retries included (every attempt runs under `asyncio.timeout`),
    and refuses a body over `max_response_bytes` once decoded.
    """

    def __init__(
        self,
        api_key: str,
        *,
        endpoint_base_url: str | None = None,
        api_base_url: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[Any] | Any] = asyncio.sleep,
        rng: random.Random | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
        verify: ssl.SSLContext | bool | None = None,
        deadline_s: float = CALL_DEADLINE_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        super().__init__(
            api_key,
            endpoint_base_url=endpoint_base_url,
            api_base_url=api_base_url,
            retry=retry,
            rng=rng,
        )
        self.deadline_s = _positive(deadline_s)
        self.max_response_bytes = _too_big(max_response_bytes)
        self._timeout = httpx.Timeout(timeout)
        self._sleep = sleep
        self._owns_http = http_client is None
        # With no transport, client or proxy given, requests go straight to the lean
        # transport (see `http11`): a third of httpx's default CPU per request, and no
        # client layer (URL merging, cookies, auth and redirect hooks) this API never uses.
        self._lean: AsyncH11Transport | None = None
        if http_client is None and transport is None and not _proxied():
            transport = self._lean = AsyncH11Transport(
                verify=_verify(verify), max_response_bytes=self.max_response_bytes
            )
        self._http = http_client or httpx.AsyncClient(
            timeout=timeout, transport=transport, verify=_verify(verify)
        )
        self._extensions = {"timeout": httpx.Timeout(timeout).as_dict()}

    async def _send(self, step: Send) -> Answer:
        if self._lean is None:
            request = self._http.build_request(
                step.method, step.url, json=step.json, headers=self._headers
            )
            response = await self._http.send(request, stream=True)
            try:
                decoder = BoundedDecoder(
                    response.headers.get("content-encoding"), self.max_response_bytes
                )
                parts = [decoder.feed(raw) async for raw in response.aiter_raw()]
                parts.append(decoder.finish())
            finally:
                await response.aclose()
            return Answer(response.status_code, response.headers, b"".join(parts))
        request = httpx.Request(
            step.method,
            step.url,
            json=step.json,
            headers=self._headers,
            extensions=self._extensions,
        )
        response = await self._lean.handle_async_request(request)  # decoded and bounded
        return Answer(response.status_code, response.headers, await response.aread())

    async def _attempt(self, step: Send, end: float, budget: float) -> Answer:
        if step.tail is not None:
            return await self._attempt_stream(step, end, budget)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(loop.time() + (end - time.monotonic())):
                return await self._send(step)
        except TimeoutError:
            message = f"no complete answer within the {budget:g} s call deadline"
            raise httpx.ReadTimeout(message) from None

    async def _open_stream(self, step: Send, read: TailRead) -> httpx.Response:
        """Send a streamed read's request; the response's body is left unread."""
        timeout = self._stream_timeout(read)
        if self._lean is not None:
            request = httpx.Request(
                step.method,
                step.url,
                json=step.json,
                headers=self._stream_headers,
                extensions={"timeout": timeout.as_dict()},
            )
            return await self._lean.open_stream(request)
        request = self._http.build_request(
            step.method, step.url, json=step.json, headers=self._stream_headers, timeout=timeout
        )
        return await self._http.send(request, stream=True)

    async def _attempt_stream(self, step: Send, end: float, budget: float) -> Answer:
        """One streamed read: the head before `end`, then a 2xx body read by `LogTail`
        (which stops on its own at `end`), another body read whole within the cap."""
        assert step.tail is not None
        loop = asyncio.get_running_loop()
        at = loop.time() + (end - time.monotonic())
        message = f"no complete answer within the {budget:g} s call deadline"
        try:
            async with asyncio.timeout_at(at):
                response = await self._open_stream(step, step.tail)
        except TimeoutError:
            raise httpx.ReadTimeout(message) from None
        try:
            if response.is_success:
                return await self._read_tail(response, step.tail, end)
            async with asyncio.timeout_at(at):
                decoder = BoundedDecoder(
                    response.headers.get("content-encoding"), self.max_response_bytes
                )
                parts = [decoder.feed(raw) async for raw in response.aiter_raw()]
                parts.append(decoder.finish())
            return Answer(response.status_code, response.headers, b"".join(parts))
        except TimeoutError:
            raise httpx.ReadTimeout(message) from None
        finally:
            await response.aclose()

    @staticmethod
    async def _read_tail(response: httpx.Response, read: TailRead, end: float) -> Answer:
        """`RunpodClient._read_tail`'s twin: each chunk awaited at most until `end`."""
        tail = LogTail(read, response.headers.get("content-encoding"))
        try:
            async with contextlib.aclosing(response.aiter_raw()) as chunks:
                while True:
                    left = end - time.monotonic()
                    if left <= 0:
                        tail.cut()
                        break
                    try:
                        async with asyncio.timeout(left):
                            raw = await anext(chunks)
                    except StopAsyncIteration:
                        tail.end()
                        break
                    except TimeoutError:
                        tail.cut()  # the time budget
                        break
                    if tail.feed(raw):
                        break
        except httpx.TimeoutException:
            if time.monotonic() >= end - _LATE_S:
                tail.cut()
            else:
                tail.end()  # a quiet stream: its backfill is in
        except httpx.TransportError:
            if not tail.seen:
                raise
            tail.cut()
        return Answer(response.status_code, response.headers, b"", tail.result())

    @classmethod
    def from_env(cls, **kwargs: Any) -> AsyncRunpodClient:
        """A client keyed by the first key of `RUNPOD_API_KEY`, hosts from the SDKs' env vars."""
        return cls(**cls._env_kwargs(kwargs))

    async def _drive(
        self, steps: Generator[Send | Pause, Any, Any], budget_s: float | None = None
    ) -> Any:
        budget = self.deadline_s if budget_s is None else budget_s
        end = time.monotonic() + budget
        step = next(steps)
        while True:
            try:
                if isinstance(step, Pause):
                    if time.monotonic() + step.seconds >= end:
                        step = steps.send(EXPIRED)
                        continue
                    slept = self._sleep(step.seconds)
                    if inspect.isawaitable(slept):
                        await slept
                    step = steps.send(None)
                    continue
                try:
                    got: Any = await self._attempt(step, end, budget)
                except httpx.HTTPError as exc:
                    got = exc
                step = steps.send(got)
            except StopIteration as done:
                return done.value

    async def run(
        self,
        endpoint_id: str,
        input: Any,
        *,
        ttl_s: float | None = None,
        execution_timeout_s: float | None = None,
        webhook: str | None = None,
    ) -> str:
        """Queue a job and return its id. Never retried."""
        body = self._run_body(input, ttl_s, execution_timeout_s, webhook)
        return self._job_id(await self._drive(self._call("run", body, endpoint_id=endpoint_id)))

    async def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        """The job's status answer; HTTP 404 (job gone) raises with `status_code=404`."""
        return await self._drive(self._call("status", endpoint_id=endpoint_id, job_id=job_id))

    async def cancel(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        """Cancel a job."""
        return await self._drive(self._call("cancel", endpoint_id=endpoint_id, job_id=job_id))

    async def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        """The endpoint's `/health` answer."""
        return await self._drive(self._call("health", endpoint_id=endpoint_id))

    async def purge_queue(self, endpoint_id: str) -> dict[str, Any]:
        """Remove the endpoint's queued jobs. Not retried."""
        return await self._drive(self._call("purge_queue", endpoint_id=endpoint_id))

    async def list_endpoints(self) -> list[dict[str, Any]]:
        """Every serverless endpoint of the account (REST v2)."""
        return self._endpoints(await self._drive(self._call("list_endpoints")))

    async def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        """One endpoint (REST v2)."""
        return await self._drive(self._call("get_endpoint", endpoint_id=endpoint_id))

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        """Delete an endpoint: True when deleted now, False when it was already gone."""
        try:
            await self._drive(self._call("delete_endpoint", endpoint_id=endpoint_id))
        except RunpodApiError as exc:
            if exc.status_code == 404:
                return False
            raise
        return True

    async def endpoint_workers(self, endpoint_id: str) -> dict[str, Any]:
        """The endpoint's workers (REST v2): the answer, every string masked for secrets."""
        return await self._drive(self._call("list_workers", endpoint_id=endpoint_id))

    async def worker_log(
        self, endpoint_id: str, worker_id: str, *, tail: int = LOG_TAIL_DEFAULT
    ) -> dict[str, Any]:
        """The last `tail` lines of a worker's log: `{"lines": [str, ...], "truncated":
        bool}`, read within `LOG_MAX_BYTES` and `LOG_TIME_BUDGET_S` (see the module notes)."""
        return await self._drive(
            self._log_call(endpoint_id, worker_id, tail), self._budget("worker_logs")
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool (unless it was passed in)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncRunpodClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
