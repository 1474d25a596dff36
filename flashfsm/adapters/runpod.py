"""A RunPod REST client on httpx: the data plane (jobs) and REST v2 endpoint management.

The protocol itself — the `ROUTES` table, the sans-IO `exchange` with its retry and
deadline rules, `Reading` and `LogTail`, the errors — lives in
`flashfsm.adapters.runpod_protocol` (see its notes); this module holds the two clients that
drive it, the job `policy` helpers, and re-exports the protocol's public names, so
`from flashfsm.adapters.runpod import ROUTES, RetryPolicy, exchange, ...` keeps working.

`RunpodClient` and `AsyncRunpodClient` share one configuration (`_Client`: key, hosts,
headers, bounds, transport choice, `from_env`) and differ only in their own transport and
their driver of `exchange` (`_drive` and `_move`), which moves bytes and nothing else: it
puts the request on an httpx transport, feeds the body's raw chunks to `Reading`, and
sleeps the pauses. Each public call is declared once, on `_Client` (`operation`: the call's
arguments checked and its exchange built), and each client binds it to its driver: the sync
client returns the result, the async one a coroutine of it. So both speak exactly the same
protocol with the same calls, and a change of either (a header, a bound, the retry policy,
an error message, a new call) is made in one place.

Bounds. Every call, its retries and back-off sleeps included, ends within the client's
`deadline_s` (`CALL_DEADLINE_S` by default) whatever the server does: `exchange` sets the
deadline and sends it with every attempt (see `flashfsm.adapters.runpod_protocol`). The sync
client's own transport (`http11.DeadlineTransport`) cuts every socket connect, read and
write at it, so a server trickling headers or body a byte at a time cannot stretch a call;
the async driver runs each attempt under `asyncio.timeout_at` of it. A call that runs out
of time raises `RunpodApiError` ("... call deadline ..."). Response bodies are capped at
`max_response_bytes` (`MAX_RESPONSE_BYTES`, 32 MiB) counted after gzip/deflate decoding.

Transports. Unless a client is given a `transport` or an `http_client`, or the environment
names a proxy (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`: httpx's own transports honour
those, flashfsm's do not), it sends straight through a transport of its own, by httpx's
public transport API: `http11.DeadlineTransport` (sync) or `http11.AsyncH11Transport`
(async: a third of the CPU per request of httpx's default transport), with no client layer
(URL merging, cookies, auth and redirect hooks this API never uses). Otherwise it sends with
`httpx.Client.send` / `httpx.AsyncClient.send`: a caller's client's transports, auth and
event hooks apply, its default headers and timeout do not (the request is `exchange`'s).
With a transport, client or proxy of the caller's the sync client checks the deadline
between body chunks and before each retry only.

The platform's own records (REST v2, management host). `endpoint_workers(endpoint_id)` is
`GET /v2/serverless/{id}/workers`, an ordinary route (idempotent, retried, `workers`
required); every string of its answer is masked for secrets (a worker record may echo its
env). `worker_log(endpoint_id, worker_id, tail=100)` is
`GET /v2/serverless/{id}/workers/{worker}/logs?tail=N`, a Server-Sent Events stream read
by `LogTail` within `LOG_MAX_BYTES`, `LOG_QUIET_S` and `LOG_TIME_BUDGET_S`; it answers
`{"lines": [str, ...], "truncated": bool}` (the rules: `flashfsm.adapters.runpod_protocol`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import math
import os
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Self, TypeVar

import httpx

from flashfsm.adapters.http11 import (
    ACCEPT_ENCODING,
    MAX_RESPONSE_BYTES,
    AsyncH11Transport,
    DeadlineTransport,
)
from flashfsm.adapters.runpod_protocol import AUTH_STATUSES as AUTH_STATUSES
from flashfsm.adapters.runpod_protocol import CALL_DEADLINE_S as CALL_DEADLINE_S
from flashfsm.adapters.runpod_protocol import LOG_MAX_BYTES as LOG_MAX_BYTES
from flashfsm.adapters.runpod_protocol import LOG_QUIET_S as LOG_QUIET_S
from flashfsm.adapters.runpod_protocol import LOG_TAIL_DEFAULT as LOG_TAIL_DEFAULT
from flashfsm.adapters.runpod_protocol import LOG_TAIL_MAX as LOG_TAIL_MAX
from flashfsm.adapters.runpod_protocol import LOG_TIME_BUDGET_S as LOG_TIME_BUDGET_S
from flashfsm.adapters.runpod_protocol import RETRY_STATUSES as RETRY_STATUSES
from flashfsm.adapters.runpod_protocol import ROUTES as ROUTES
from flashfsm.adapters.runpod_protocol import Answer as Answer
from flashfsm.adapters.runpod_protocol import LogTail as LogTail
from flashfsm.adapters.runpod_protocol import Pause as Pause
from flashfsm.adapters.runpod_protocol import Plane as Plane
from flashfsm.adapters.runpod_protocol import Reading as Reading
from flashfsm.adapters.runpod_protocol import RetryPolicy as RetryPolicy
from flashfsm.adapters.runpod_protocol import Route as Route
from flashfsm.adapters.runpod_protocol import RunpodAuthError as RunpodAuthError
from flashfsm.adapters.runpod_protocol import Send as Send
from flashfsm.adapters.runpod_protocol import TailRead as TailRead
from flashfsm.adapters.runpod_protocol import Wire as Wire
from flashfsm.adapters.runpod_protocol import build_request as build_request
from flashfsm.adapters.runpod_protocol import describe as describe
from flashfsm.adapters.runpod_protocol import exchange as exchange
from flashfsm.adapters.runpod_protocol import parse_response as parse_response
from flashfsm.adapters.runpod_protocol import retry_delay as retry_delay
from flashfsm.adapters.runpod_protocol import scrubbed as scrubbed
from flashfsm.adapters.runpod_protocol import transport_failure as transport_failure
from flashfsm.redact import register_secrets

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


# --------------------------------------------------------------------------- clients


def first_key(raw: str | None) -> str | None:
    """The first key of a comma-separated `RUNPOD_API_KEY` pool."""
    for part in (raw or "").split(","):
        if part.strip():
            return part.strip()
    return None


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


def _too_big(limit: int) -> int:
    if not (isinstance(limit, int) and limit > 0):
        raise ValueError(f"max_response_bytes must be a positive int, got {limit!r}")
    return limit


def _positive(deadline_s: float) -> float:
    if not (isinstance(deadline_s, (int, float)) and math.isfinite(deadline_s) and deadline_s > 0):
        raise ValueError(f"deadline_s must be a positive number of seconds, got {deadline_s!r}")
    return float(deadline_s)


def _run_body(
    job_input: Any, ttl_s: float | None, execution_timeout_s: float | None, webhook: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"input": job_input}
    policy = job_policy(ttl_s, execution_timeout_s)
    if policy:
        body["policy"] = policy
    if webhook:
        body["webhook"] = webhook
    return body


TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)
HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


#: A call's exchange: the sans-IO generator a client drives to the call's result (`R`).
Exchange = Generator["Send | Pause", Any, R]


class operation(Generic[R]):
    """A public call of both clients, declared once on `_Client`: the decorated function
    builds the call's `exchange` (and checks its arguments), and each client drives it —
    `RunpodClient` to the call's result, `AsyncRunpodClient` as a coroutine of it (`_bind`).
    The bound call has the declaration's name, docstring and signature (without `self`,
    returning `R`)."""

    def __init__(self, steps: Callable[..., Exchange[R]]) -> None:
        self.steps = steps
        functools.update_wrapper(self, steps)
        sig = inspect.signature(steps)
        returns = sig.return_annotation
        if isinstance(returns, str) and returns.startswith("Exchange[") and returns[-1] == "]":
            returns = returns[len("Exchange[") : -1]
        self.signature = sig.replace(
            parameters=list(sig.parameters.values())[1:], return_annotation=returns
        )

    def __get__(self, client: _Client[Any, Any] | None, owner: type | None = None) -> Any:
        if client is None:
            return self
        # Bound once per client: kept in the instance's dict, which shadows this descriptor
        # from then on (a watch fetches a status thousands of times a minute; binding and
        # naming a call each time is measurable there).
        bound = client.__dict__[self.steps.__name__] = client._bind(self)
        return bound


def _named(bound: F, call: operation[Any]) -> F:
    """`bound` as `call` reads: its name, docstring and signature."""
    functools.update_wrapper(bound, call.steps)
    del bound.__wrapped__  # (`__signature__` is the truth: no `self`, the result type)
    bound.__signature__ = call.signature  # type: ignore[attr-defined]
    return bound


class _Client(Generic[TransportT, HttpT]):
    """What both clients share: the key, the hosts, the `Wire` every call is built from,
    the transport (their own unless one is given) and `from_env`. The subclasses are the
    two drivers of `exchange`.

    `sleep` (the back-off sleeps; `time.sleep` or `asyncio.sleep` unless given) and `rng`
    are injectable for tests; `transport` or `http_client` replace the network layer (a
    passed `http_client` is not closed by `close()`/`aclose()`). TLS verification uses one
    shared default context unless `verify` names another. Each call ends within
    `deadline_s` seconds, retries included, and refuses a body over `max_response_bytes`
    once decoded (see the module notes).
    """

    _http_class: type[HttpT]
    _default_sleep: Callable[[float], Any]

    def __init__(
        self,
        api_key: str,
        *,
        endpoint_base_url: str | None = None,
        api_base_url: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Any] | None = None,
        rng: random.Random | None = None,
        transport: TransportT | None = None,
        http_client: HttpT | None = None,
        verify: ssl.SSLContext | bool | None = None,
        deadline_s: float = CALL_DEADLINE_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        if not isinstance(api_key, str) or not api_key.strip():
            raise RunpodAuthError("a RunPod API key is required (RUNPOD_API_KEY is empty)")
        key = api_key.strip()
        register_secrets(key)
        self._wire = Wire(
            bases={
                "data": _check_url(endpoint_base_url or DEFAULT_ENDPOINT_BASE_URL),
                "management": _check_url(api_base_url or DEFAULT_API_BASE_URL),
            },
            headers={
                "Authorization": f"Bearer {key}",
                "Accept": "application/json",
                "Accept-Encoding": ACCEPT_ENCODING,
                "User-Agent": "flashfsm",
            },
            timeout=httpx.Timeout(timeout),
            retry=retry or RetryPolicy(),
            deadline_s=_positive(deadline_s),
            max_response_bytes=_too_big(max_response_bytes),
        )
        self._sleep = sleep or type(self)._default_sleep
        self._rng = rng or random.Random()
        self._owns_http = http_client is None
        own = None
        if http_client is None and transport is None and not _proxied():
            own = transport = self._own_transport(_verify(verify))
        self._http: HttpT = http_client or self._http_class(
            timeout=timeout, transport=transport, verify=_verify(verify)
        )
        # Straight through our own transport (public transport API, no client layer), or
        # through the httpx client (a caller's transport, client or proxies).
        self._send = self._sender(own) if own is not None else self._via_client

    @classmethod
    def from_env(cls, **kwargs: Any) -> Self:
        """A client keyed by the first key of `RUNPOD_API_KEY`, hosts from the SDKs' env vars."""
        key = first_key(os.environ.get(ENV_API_KEY))
        if key is None:
            raise RunpodAuthError(f"{ENV_API_KEY} is not set")
        kwargs.setdefault("endpoint_base_url", os.environ.get(ENV_ENDPOINT_BASE_URL) or None)
        kwargs.setdefault("api_base_url", os.environ.get(ENV_API_BASE_URL) or None)
        return cls(key, **kwargs)

    @property
    def retry(self) -> RetryPolicy:
        """How idempotent calls are retried."""
        return self._wire.retry

    @property
    def deadline_s(self) -> float:
        """The most one call may take, its retries and pauses included (seconds)."""
        return self._wire.deadline_s

    @property
    def max_response_bytes(self) -> int:
        """The largest response body accepted, once decoded (bytes)."""
        return self._wire.max_response_bytes

    def __repr__(self) -> str:
        bases = self._wire.bases
        return (
            f"{type(self).__name__}(endpoint_base_url={bases['data']!r}, "
            f"api_base_url={bases['management']!r})"
        )

    def _own_transport(self, verify: ssl.SSLContext | bool) -> TransportT:
        raise NotImplementedError

    def _sender(self, transport: TransportT) -> Callable[[httpx.Request], Any]:
        raise NotImplementedError

    def _via_client(self, request: httpx.Request) -> Any:
        return self._http.send(request, stream=True)

    def _call(self, name: str, body: Any = None, *, read: TailRead | None = None, **params: str):
        return exchange(self._wire, ROUTES[name], params, body, self._rng, read)

    def _bind(self, call: operation[R]) -> Callable[..., Any]:
        """`call` bound to this client: its exchange driven by `_drive` (see `operation`)."""
        raise NotImplementedError

    # -- the public calls, declared once for both clients (`operation`) --------------------

    @operation
    def run(
        self,
        endpoint_id: str,
        input: Any,
        *,
        ttl_s: float | None = None,
        execution_timeout_s: float | None = None,
        webhook: str | None = None,
    ) -> Exchange[str]:
        """Queue a job and return its id. Never retried (see the module notes)."""
        body = _run_body(input, ttl_s, execution_timeout_s, webhook)
        return self._call("run", body, endpoint_id=endpoint_id)

    @operation
    def job_status(self, endpoint_id: str, job_id: str) -> Exchange[dict[str, Any]]:
        """The job's status answer; HTTP 404 (job gone) raises with `status_code=404`."""
        return self._call("status", endpoint_id=endpoint_id, job_id=job_id)

    @operation
    def cancel(self, endpoint_id: str, job_id: str) -> Exchange[dict[str, Any]]:
        """Cancel a job; returns RunPod's answer (`{id, status}`)."""
        return self._call("cancel", endpoint_id=endpoint_id, job_id=job_id)

    @operation
    def endpoint_health(self, endpoint_id: str) -> Exchange[dict[str, Any]]:
        """The endpoint's `/health` answer (worker and job counts; keys may be missing)."""
        return self._call("health", endpoint_id=endpoint_id)

    @operation
    def purge_queue(self, endpoint_id: str) -> Exchange[dict[str, Any]]:
        """Remove the endpoint's queued jobs. Not retried."""
        return self._call("purge_queue", endpoint_id=endpoint_id)

    @operation
    def list_endpoints(self) -> Exchange[list[dict[str, Any]]]:
        """Every serverless endpoint of the account (REST v2)."""
        return self._call("list_endpoints")

    @operation
    def get_endpoint(self, endpoint_id: str) -> Exchange[dict[str, Any]]:
        """One endpoint (REST v2)."""
        return self._call("get_endpoint", endpoint_id=endpoint_id)

    @operation
    def delete_endpoint(self, endpoint_id: str) -> Exchange[bool]:
        """Delete an endpoint: True when deleted now, False when it was already gone."""
        return self._call("delete_endpoint", endpoint_id=endpoint_id)

    @operation
    def endpoint_workers(self, endpoint_id: str) -> Exchange[dict[str, Any]]:
        """The endpoint's workers (REST v2 `GET /v2/serverless/{id}/workers`): the answer
        (`{"workers": [...], ...}`), every string masked for secrets."""
        return self._call("list_workers", endpoint_id=endpoint_id)

    @operation
    def worker_log(
        self, endpoint_id: str, worker_id: str, *, tail: int = LOG_TAIL_DEFAULT
    ) -> Exchange[dict[str, Any]]:
        """The last `tail` lines of a worker's log: `{"lines": [str, ...], "truncated":
        bool}`, read within `LOG_MAX_BYTES` and `LOG_TIME_BUDGET_S` (see the module notes)."""
        if isinstance(tail, bool) or not isinstance(tail, int) or not 1 <= tail <= LOG_TAIL_MAX:
            raise ValueError(f"tail must be an int from 1 to {LOG_TAIL_MAX}, got {tail!r}")
        return self._call(
            "worker_logs",
            read=TailRead(lines=tail),
            endpoint_id=endpoint_id,
            worker_id=worker_id,
            tail=str(tail),
        )


class RunpodClient(_Client[httpx.BaseTransport, httpx.Client]):
    """The synchronous client (and `poll_job`'s default `client`); see `_Client` for its
    arguments. Its own transport is `http11.DeadlineTransport`, which cuts every socket
    wait at the call's deadline; with a `transport`, `http_client` or proxy of the caller's
    the deadline is checked between body chunks and before each retry only."""

    _http_class = httpx.Client
    _default_sleep = staticmethod(time.sleep)

    def _own_transport(self, verify: ssl.SSLContext | bool) -> httpx.BaseTransport:
        return DeadlineTransport(verify)

    def _sender(self, transport: httpx.BaseTransport) -> Callable[[httpx.Request], Any]:
        return transport.handle_request

    def _drive(self, steps: Generator[Send | Pause, Any, Any]) -> Any:
        """Run one `exchange` to its end: sleep its pauses, move its sends."""
        step = next(steps)
        while True:
            try:
                if isinstance(step, Pause):
                    self._sleep(step.seconds)
                    step = steps.send(None)
                else:
                    step = steps.send(self._move(step))
            except StopIteration as done:
                return done.value

    def _move(self, step: Send) -> Answer | BaseException:
        """One attempt: the request out, the body's raw chunks into `Reading`."""
        reading = None
        try:
            response = self._send(step.request)
            try:
                reading = Reading(step, response.status_code, response.headers)
                for raw in response.stream:  # (raw bytes: `Reading` decodes)
                    if reading.feed(raw):
                        break
                else:
                    reading.finish()
            finally:
                response.close()
        except httpx.HTTPError as exc:
            return exc if reading is None else reading.broken(exc)
        return reading.answer()

    def _bind(self, call: operation[R]) -> Callable[..., R]:
        steps = call.steps

        def bound(*args: Any, **kwargs: Any) -> R:
            return self._drive(steps(self, *args, **kwargs))

        return _named(bound, call)

    def close(self) -> None:
        """Close the HTTP connection pool (unless it was passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRunpodClient(_Client[httpx.AsyncBaseTransport, httpx.AsyncClient]):
    """The asyncio client: the same routes, rules and errors as `RunpodClient` (see
    `_Client` for its arguments). `sleep` may be a coroutine function (the default,
    `asyncio.sleep`) or a plain one. Its own transport is `http11.AsyncH11Transport`; every
    attempt runs under `asyncio.timeout_at` of the call's deadline, whatever the transport.
    """

    _http_class = httpx.AsyncClient
    _default_sleep = staticmethod(asyncio.sleep)

    def _own_transport(self, verify: ssl.SSLContext | bool) -> httpx.AsyncBaseTransport:
        return AsyncH11Transport(verify=verify, max_response_bytes=None)  # (`Reading` caps)

    def _sender(self, transport: httpx.AsyncBaseTransport) -> Callable[[httpx.Request], Any]:
        return transport.handle_async_request

    async def _drive(self, steps: Generator[Send | Pause, Any, Any]) -> Any:
        """Run one `exchange` to its end: sleep its pauses, move its sends."""
        step = next(steps)
        while True:
            try:
                if isinstance(step, Pause):
                    slept = self._sleep(step.seconds)
                    if inspect.isawaitable(slept):
                        await slept
                    step = steps.send(None)
                else:
                    step = steps.send(await self._move(step))
            except StopIteration as done:
                return done.value

    async def _move(self, step: Send) -> Answer | BaseException:
        """One attempt: the request out, the body's raw chunks into `Reading`, all of it
        before the call's deadline."""
        reading = None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(loop.time() + (step.end - time.monotonic())):
                response: httpx.Response = await self._send(step.request)
                try:
                    reading = Reading(step, response.status_code, response.headers)
                    async with contextlib.aclosing(aiter(response.stream)) as chunks:
                        async for raw in chunks:
                            if reading.feed(raw):
                                break
                        else:
                            reading.finish()
                finally:
                    await response.aclose()
        except (httpx.HTTPError, TimeoutError) as exc:
            return exc if reading is None else reading.broken(exc)
        return reading.answer()

    def _bind(self, call: operation[R]) -> Callable[..., Awaitable[R]]:
        steps = call.steps

        async def bound(*args: Any, **kwargs: Any) -> R:
            return await self._drive(steps(self, *args, **kwargs))

        return _named(bound, call)

    async def aclose(self) -> None:
        """Close the HTTP connection pool (unless it was passed in)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
