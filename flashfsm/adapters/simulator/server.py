"""The simulator's HTTP server: RunPod's data plane, REST and GraphQL APIs, and the Hub.

One multi-threaded HTTP/1.1 server on 127.0.0.1 serves every host the SDKs talk to,
each under its own path prefix, so `Simulator.env()` can point all of them at it:

    RUNPOD_ENDPOINT_BASE_URL = {url}/v2     data plane: /v2/{endpoint}/run, /status/{job}, …
    RUNPOD_API_BASE_URL      = {url}        GraphQL at /graphql, REST v2 at /v2/serverless
    RUNPOD_REST_API_URL      = {url}/v1     REST v1: /v1/networkvolumes
    HF_ENDPOINT              = {url}        Hub: /{datasets/}{repo}/resolve/{rev}/{path}

Each request is parsed, recorded (without its Authorization header), matched against
the fault plan, authenticated (RunPod routes: `Authorization: Bearer <a simulator key>`),
and handled under one lock after `World.tick()` has replayed what the sim clock made due.

One control route lets another process share a manual sim clock (`speed=0`), so a watcher
in a child process judges by the simulator's time and its waits move that time:

    GET  {url}/_sim/clock                       → {"now": <sim epoch seconds>}
    POST {url}/_sim/clock  {"advance": <s ≥ 0>}  → {"now": <the new time>}

A clock that runs by itself (`speed > 0`) refuses it with 409: only a manual clock is a
clock a client may move. Another reads what the platform created and billed (`usage.py`):

    GET  {url}/_sim/usage                       → `Simulator.usage()` as JSON

Control routes need no API key and no fault ever fires on them.

One route streams: a worker's log (`GET /v2/serverless/{id}/workers/{worker}/logs`) is
Server-Sent Events sent in HTTP chunks, written outside the lock, so a fault can make it
huge (`flood`), slow (`trickle`) or gzip-encoded without holding anything up.

Why it is long: every route the SDKs talk to (the data plane, REST v2, GraphQL, the Hub) and
their faults, served by one server so one URL stands for RunPod.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import re
import socket
import struct
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from flashfsm.adapters.runpod import AsyncRunpodClient, RunpodClient
from flashfsm.adapters.simulator import graphql
from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.faults import Fault, FaultPlan
from flashfsm.adapters.simulator.hub import HubStore
from flashfsm.adapters.simulator.scenarios import Scenario
from flashfsm.adapters.simulator.usage import Usage, usage_of
from flashfsm.adapters.simulator.workers import (
    LOG_SOURCES,
    LOG_TAIL_DEFAULT,
    LOG_TAIL_MAX,
    flood_events,
    live_events,
    sse_event,
)
from flashfsm.adapters.simulator.world import (
    Account,
    ApiError,
    Endpoint,
    Job,
    World,
)

DEFAULT_KEY = "sim-runpod-key-0"
SECRET_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})
UNAUTHORIZED_MESSAGE = "Unauthorized: a valid API key is required"
#: Every status code HTTP names (a fault may carry another: it then has no phrase).
_STATUS_CODES = frozenset(s.value for s in HTTPStatus)
Reply = tuple[int, dict[str, str], bytes]
STREAM_ROUTES = frozenset({"worker_logs"})  # answered as a chunked stream (see `_stream`)
QUERY_ROUTES = frozenset({"worker_logs"})  # handlers that read the query string
STREAM_CHUNK = 64 * 1024
STREAM_WRITE_TIMEOUT_S = 30.0  # a stream to a client that stopped reading gives up


@dataclass
class RecordedRequest:
    """One request as the simulator saw it (credentials removed)."""

    method: str
    path: str
    route: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float
    operations: tuple[str, ...] = ()  # GraphQL root fields
    account: str | None = None
    authenticated: bool = False
    status: int | None = None  # the HTTP status answered (None: connection reset)
    fault: str | None = None

    @property
    def json(self) -> Any:
        """The body parsed as JSON (None when it is not JSON)."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


@dataclass
class _Match:
    route: str
    plane: str  # "data", "rest2", "rest1", "graphql", "hub", "misc"
    handler: Callable[..., Reply]
    params: dict[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024
    allow_reuse_address = True
    sim: Simulator

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-request (a process stopped by Ctrl-C) is no error to print."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.sim._serve(self, "GET")

    def do_HEAD(self) -> None:
        self.server.sim._serve(self, "HEAD")

    def do_POST(self) -> None:
        self.server.sim._serve(self, "POST")

    def do_PUT(self) -> None:
        self.server.sim._serve(self, "PUT")

    def do_PATCH(self) -> None:
        self.server.sim._serve(self, "PATCH")

    def do_DELETE(self) -> None:
        self.server.sim._serve(self, "DELETE")

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without NODELAY, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every answer.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().finish()


class Simulator:
    """A RunPod + Hugging Face Hub simulator on loopback HTTP.

    ```
    with Simulator(speed=0) as sim:           # a manual clock
        os.environ.update(sim.env())
        endpoint_id = sim.add_endpoint("flash-demo", scenario="throttled")
        ...
        sim.clock.advance(600)
        assert sim.requests_for("status")
    ```

    `api_keys` are the accepted RunPod keys, one account each (`worker_quota` workers
    per account). `speed`/`clock` set the sim clock; `default_scenario` is what a job
    runs when neither its input nor its endpoint names one.
    """

    def __init__(
        self,
        *,
        speed: float = 1.0,
        clock: SimClock | None = None,
        api_keys: tuple[str, ...] | list[str] = (DEFAULT_KEY,),
        worker_quota: int = 5,
        default_scenario: str = "success",
        volume_rejecting_datacenters: tuple[str, ...] = ("US-MO-1",),
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        runsync_wait_s: float = 0.5,
    ):
        if not api_keys:
            raise ValueError("the simulator needs at least one API key")
        self.clock = clock or SimClock(speed=speed)
        self.hub = HubStore()
        accounts = [
            Account(name=f"account{i}", key=key, worker_quota=worker_quota)
            for i, key in enumerate(api_keys)
        ]
        self.world = World(
            self.clock,
            self.hub,
            accounts,
            default_scenario=default_scenario,
            volume_rejecting_datacenters=frozenset(volume_rejecting_datacenters),
        )
        if default_scenario not in self.world.scenarios:
            raise ValueError(f"unknown scenario {default_scenario!r}")
        self.faults = FaultPlan()
        self.record = record
        self.runsync_wait_s = runsync_wait_s
        self._requests: list[RecordedRequest] = []
        self.errors: list[str] = []  # tracebacks of simulator bugs (answered with HTTP 500)
        self._requests_lock = threading.Lock()
        self._lock = threading.RLock()
        self._host, self._port = host, port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # ends trickling streams when the simulator stops

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Simulator:
        """Bind and serve in a background thread."""
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self._host, self._port), _Handler)
        server.sim = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.01},  # how fast stop() returns
            name="flashfsm-simulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._server else "stopped"
        return f"Simulator({where}, {len(self.world.endpoints)} endpoints)"

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        if self._server is None:
            raise RuntimeError("the simulator is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self, *, hf: bool = True) -> dict[str, str]:
        """Environment variables that point the RunPod SDKs, flashfsm and huggingface_hub here.

        Set them before importing `runpod`, `runpod_flash` or `huggingface_hub`: all three
        read their hosts once, at import.
        """
        url = self.url
        env = {
            "RUNPOD_API_KEY": ",".join(a.key for a in self.world.accounts),
            "RUNPOD_ENDPOINT_BASE_URL": f"{url}/v2",
            "RUNPOD_API_BASE_URL": url,
            "RUNPOD_REST_API_URL": f"{url}/v1",
            "RUNPOD_HAPI_URL": f"{url}/hapi",
            "RUNPOD_CONSOLE_URL": f"{url}/console",
        }
        if hf:
            env["HF_ENDPOINT"] = url
            env["HF_HUB_DISABLE_TELEMETRY"] = "1"
        return env

    def client(self, account: int = 0, **options: Any) -> RunpodClient:
        """A RunPod client on this simulator with account `account`'s key, without
        touching the environment; `options` go to `RunpodClient` (e.g. `sleep`). Close it,
        or use it in a `with`."""
        return RunpodClient(self.accounts[account].key, **self._routes(), **options)

    def async_client(self, account: int = 0, **options: Any) -> AsyncRunpodClient:
        """The async twin of `client`."""
        return AsyncRunpodClient(self.accounts[account].key, **self._routes(), **options)

    def _routes(self) -> dict[str, Any]:
        env = self.env(hf=False)
        return {
            "endpoint_base_url": env["RUNPOD_ENDPOINT_BASE_URL"],
            "api_base_url": env["RUNPOD_API_BASE_URL"],
        }

    # ------------------------------------------------------------------ test API

    @property
    def accounts(self) -> list[Account]:
        """The simulated accounts, one per API key (quota editable)."""
        return self.world.accounts

    @property
    def scenarios(self) -> dict[str, Scenario]:
        """Known scenarios by name (built-ins plus registered ones)."""
        return self.world.scenarios

    def revoke_key(self, account: int = 0) -> None:
        """Revoke an account's API key: from now on every RunPod route it calls answers 401
        (its endpoints and jobs live on). The `key_revoked` scenario does it mid-job."""
        with self._python_api():
            self.world.accounts[account].revoked = True

    def register_scenario(self, scenario: Scenario) -> None:
        """Make a custom scenario selectable by name."""
        with self._lock:
            self.world.scenarios[scenario.name] = scenario

    def add_endpoint(
        self,
        name: str = "flash-sim",
        *,
        account: int = 0,
        scenario: str | None = None,
        hf_repo: str | None = None,
        workers_max: int = 1,
        check_quota: bool = True,
        startup_s: float | None = None,
        **config: Any,
    ) -> str:
        """Create an endpoint directly (no GraphQL) and return its id.

        `config` is its saveEndpoint fields (`idleTimeout=60`, `gpuIds="ADA_48_PRO"`,
        `locations="EU-RO-1"`, …); `startup_s` is how long before its pickup a job's
        worker starts (None: the scenario's, else 20 s).
        """
        with self._python_api():
            endpoint = self.world.add_endpoint(
                self.world.accounts[account],
                name,
                config={"workersMax": workers_max, **config},
                scenario=scenario,
                hf_repo=hf_repo,
                check_quota=check_quota,
            )
            endpoint.startup_s = _startup(startup_s)
            return endpoint.id

    def configure_endpoint(
        self,
        endpoint_id: str,
        *,
        scenario: str | None = None,
        hf_repo: str | None = None,
        startup_s: float | None = None,
        **workers: int,
    ) -> None:
        """Set an endpoint's default scenario, Hub repo, workers' start-up before their
        pickup (for jobs queued from now), and standing worker counts by state (`idle=2`:
        two idle workers that started now, listed and counted on `/health` too)."""
        with self._python_api():
            self.world.tick()
            endpoint = self.world.endpoint(None, endpoint_id)
            if scenario is not None:
                self.world._scenario(scenario)
                endpoint.scenario = scenario
            if hf_repo is not None:
                endpoint.hf_repo = hf_repo
            if startup_s is not None:
                endpoint.startup_s = _startup(startup_s)
            if workers:
                self.world.set_standing(endpoint, workers)

    def endpoints(self, account: int | None = None) -> list[dict[str, Any]]:
        """Every live endpoint (REST v2 shape), optionally of one account."""
        with self._lock:
            self.world.tick()
            return [
                e.rest(self.world)
                for e in self.world.endpoints.values()
                if account is None or e.account is self.world.accounts[account]
            ]

    def workers(self, endpoint_id: str | None = None) -> list[dict[str, Any]]:
        """Every worker the simulator ever started (of one endpoint, or all, deleted ones
        too), oldest first, as it knows them: `id`, `endpoint_id`, `job_id`, `status`
        (`starting` before its start, `stopped` after its stop), `started_at`,
        `picked_up_at` and `stopped_at` (sim epoch seconds), `stop_reason`. What a test of
        a bill compares with."""
        with self._lock:
            self.world.tick()
            now = self.clock.now()
            return [
                w.record(now)
                for (eid, _), w in self.world.workers.items()
                if endpoint_id is None or eid == endpoint_id
            ]

    def plant_log(self, target: str, *lines: str, source: str = "container") -> str:
        """Write `lines` to a worker's log at the sim clock's now (at its start when that is
        ahead) and return the worker's id. `target` is a worker id or a job id (the job's
        worker). A test plants a secret this way and checks that what reads the log masks
        it; a scenario does it with `Step(log=...)`, a job's input with `{"sim": {"log":
        [...]}}` (printed when its worker starts)."""
        if source not in LOG_SOURCES:
            raise ValueError(f"source must be one of {LOG_SOURCES}, not {source!r}")
        with self._python_api():
            self.world.tick()
            return self.world.plant_log(target, list(lines), source).id

    def volumes(self) -> list[dict[str, Any]]:
        """Every network volume."""
        with self._lock:
            return [v.rest() for v in self.world.volumes.values()]

    def submit(self, endpoint_id: str, job_input: Any, **policy: Any) -> str:
        """Queue a job without HTTP (as `/run` would) and return its id."""
        with self._python_api():
            self.world.tick()
            body = {"input": job_input, **({"policy": policy} if policy else {})}
            return self.world.submit(self.world.endpoint(None, endpoint_id), body).id

    def usage(self) -> Usage:
        """What the platform created and billed up to now (see `usage.py`): every endpoint
        ever created (deleted ones too) with the ids of the jobs submitted to it, and every
        worker it started, with its start, its stop and the seconds it was billed. What a
        test of a bill compares with; `GET /_sim/usage` answers the same as JSON."""
        with self._lock:
            self.world.tick()
            return usage_of(self.world, self.clock.now())

    def job(self, job_id: str) -> Job:
        """A job's live record (read it under no assumptions of stability)."""
        with self._lock:
            self.world.tick()
            return self.world.jobs[job_id]

    @contextlib.contextmanager
    def _python_api(self) -> Iterator[None]:
        """The lock, with the API's refusals raised as `ValueError`."""
        with self._lock:
            try:
                yield
            except ApiError as exc:
                raise ValueError(exc.message) from None

    def add_fault(self, route: str, kind: str | int, *, times: int | None = 1, **kw: Any) -> Fault:
        """Schedule a fault (see `faults.py`) and return it (its `fired` count is live)."""
        return self.faults.add(Fault(route, kind, times=times, **kw))  # type: ignore[arg-type]

    def clear_faults(self) -> None:
        self.faults.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far, oldest first (a copy)."""
        with self._requests_lock:
            return list(self._requests)

    def requests_for(self, route: str) -> list[RecordedRequest]:
        """Recorded requests of one route (or `graphql:<rootField>`)."""
        base, _, operation = route.partition(":")
        return [
            r
            for r in self.requests
            if r.route == base and (not operation or operation in r.operations)
        ]

    def clear_requests(self) -> None:
        with self._requests_lock:
            self._requests.clear()

    # ------------------------------------------------------------------ HTTP plumbing

    def _serve(self, h: _Handler, method: str) -> None:
        raw_path, _, raw_query = h.path.partition("?")
        path = unquote(raw_path)
        body = self._read_body(h)
        match = self._route(method, raw_path)
        headers = {k.lower(): v for k, v in h.headers.items()}
        key = _bearer(headers.get("authorization"))
        account = self.world.account_for(key)
        operations: tuple[str, ...] = ()
        parsed_gql = None
        if match.plane == "graphql":
            parsed_gql = _parse_graphql(body)
            if isinstance(parsed_gql, graphql.Operation):
                operations = tuple(f.name for f in parsed_gql.selections)
        rec = RecordedRequest(
            method=method,
            path=path,
            route=match.route,
            query=dict(parse_qsl(raw_query)),
            headers={k: v for k, v in headers.items() if k not in SECRET_HEADERS},
            body=body,
            at=self.clock.now(),
            operations=operations,
            account=account.name if account else None,
            authenticated=account is not None,
        )
        if self.record:
            with self._requests_lock:
                self._requests.append(rec)
        names = (match.route, *(f"{match.route}:{op}" for op in operations))
        fault = None if match.plane == "control" else self.faults.take(names, rec)
        rec.fault = fault.kind if fault else None
        if fault and fault.kind == "reset" and not fault.handled:
            self._reset(h)
            return
        if fault and fault.kind == "status":
            reply = self._fault_reply(match, fault)
        elif match.plane == "control":
            reply = match.handler(method=method, body=body)
        elif match.plane in ("hub", "misc"):
            with self._lock:
                self.world.tick()  # writes the heartbeats that are due before they are read
            reply = match.handler(method=method, **match.params)
        elif account is None:
            reply = self._error(match.plane, 401, UNAUTHORIZED_MESSAGE)
        else:
            try:
                with self._lock:
                    self.world.tick()
                    if self.world.account_for(key) is None:  # a step due by now revoked it
                        raise ApiError(401, UNAUTHORIZED_MESSAGE)
                    if match.plane == "graphql":
                        reply = match.handler(account, parsed_gql, body)
                    else:
                        extra = {"query": rec.query} if match.route in QUERY_ROUTES else {}
                        reply = match.handler(
                            account=account, body=_json(body), **match.params, **extra
                        )
            except ApiError as exc:
                reply = self._error(match.plane, exc.status, exc.message)
            except _BadJson:
                reply = self._error(match.plane, 400, "the request body is not valid JSON")
            except Exception as exc:  # a simulator bug: answer 500 and keep it for the test
                self.errors.append(f"{method} {path}: {traceback.format_exc()}")
                reply = self._error(match.plane, 500, f"simulator error: {type(exc).__name__}")
        if match.route == "runsync" and reply[0] == 200:
            reply = self._wait_runsync(reply)
        stream = match.route in STREAM_ROUTES and reply[0] == 200
        if fault is not None and fault.kind != "status":
            if fault.kind == "reset":
                self._reset(h)
                return
            if not stream:
                reply = _garble(reply, fault)
            if fault.kind == "slow":
                time.sleep(fault.delay_s)
        rec.status = reply[0]
        if stream:
            self._stream(h, method, reply, fault)
        elif fault is not None and fault.kind == "gzip":
            self._write(h, method, _gzipped(reply, method))
        else:
            self._write(h, method, reply)

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
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

    @staticmethod
    def _write(h: _Handler, method: str, reply: Reply) -> None:
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

    def _stream(self, h: _Handler, method: str, reply: Reply, fault: Fault | None) -> None:
        """Send a streaming answer in HTTP chunks: the reply's body (SSE events), then, with
        a `flood` fault, filler events up to `size_bytes`; a `trickle` fault sends one event
        at a time, `delay_s` real seconds apart, and goes on with live lines until the client
        leaves or the simulator stops; `gzip=True` (or a `gzip` fault) encodes it all."""
        status, headers, body = reply
        kind = fault.kind if fault is not None else None
        if fault is not None and kind in ("malformed", "non_object", "missing_keys"):
            body = _garble_events(body, fault)
        events: Iterable[bytes]
        if kind == "trickle":
            events = itertools.chain(_split_events(body), live_events(self.clock.now))
        elif kind == "flood":
            assert fault is not None
            events = itertools.chain(
                _batches(_split_events(body)),
                flood_events(self.clock.now(), max(0, fault.size_bytes - len(body))),
            )
        else:
            events = _batches(_split_events(body))
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
                if kind == "trickle" and n and self._stopping.wait(fault.delay_s):  # type: ignore[union-attr]
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

    @staticmethod
    def _reset(h: _Handler) -> None:
        """Drop the connection with a TCP RST (linger 0), answering nothing."""
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()

    def _wait_runsync(self, reply: Reply) -> Reply:
        answer = json.loads(reply[2])
        deadline = time.monotonic() + self.runsync_wait_s
        while answer.get("status") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
            with self._lock:
                self.world.tick()
                job = self.world.jobs.get(answer["id"])
                if job is None or job.gone:
                    break
                answer = job.status_answer()
        return _json_reply(200, answer)

    # ------------------------------------------------------------------ routing

    _ROUTES: tuple[tuple[str, str, str, dict[str, str]], ...] = (
        # (regex, plane, route name, {method: handler name})
        (r"/v2/serverless", "rest2", "list_endpoints", {"GET": "_list_endpoints"}),
        (
            r"/v2/serverless/(?P<endpoint_id>[^/]+)",
            "rest2",
            "endpoint",
            {"GET": "_get_endpoint", "DELETE": "_delete_endpoint", "PATCH": "_patch_endpoint"},
        ),
        (
            r"/v2/serverless/(?P<endpoint_id>[^/]+)/workers",
            "rest2",
            "list_workers",
            {"GET": "_list_workers"},
        ),
        (
            r"/v2/serverless/(?P<endpoint_id>[^/]+)/workers/(?P<worker_id>[^/]+)/logs",
            "rest2",
            "worker_logs",
            {"GET": "_worker_logs"},
        ),
        (r"/v2/(?P<endpoint_id>[^/]+)/run", "data", "run", {"POST": "_run"}),
        (r"/v2/(?P<endpoint_id>[^/]+)/runsync", "data", "runsync", {"POST": "_run"}),
        (
            r"/v2/(?P<endpoint_id>[^/]+)/status/(?P<job_id>[^/]+)",
            "data",
            "status",
            {"GET": "_status", "POST": "_status"},
        ),
        (
            r"/v2/(?P<endpoint_id>[^/]+)/cancel/(?P<job_id>[^/]+)",
            "data",
            "cancel",
            {"POST": "_cancel"},
        ),
        (
            r"/v2/(?P<endpoint_id>[^/]+)/retry/(?P<job_id>[^/]+)",
            "data",
            "retry",
            {"POST": "_retry"},
        ),
        (r"/v2/(?P<endpoint_id>[^/]+)/health", "data", "health", {"GET": "_health"}),
        (
            r"/v2/(?P<endpoint_id>[^/]+)/purge-queue",
            "data",
            "purge_queue",
            {"POST": "_purge_queue"},
        ),
        (r"/graphql", "graphql", "graphql", {"POST": "_graphql"}),
        (
            r"/v1/networkvolumes",
            "rest1",
            "networkvolumes",
            {"GET": "_list_volumes", "POST": "_create_volume"},
        ),
        (
            r"/v1/networkvolumes/(?P<volume_id>[^/]+)",
            "rest1",
            "networkvolume",
            {"GET": "_get_volume", "DELETE": "_delete_volume"},
        ),
        (
            r"/(?P<prefix>datasets/|spaces/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)",
            "hub",
            "hub_resolve",
            {"GET": "_hub_resolve", "HEAD": "_hub_resolve"},
        ),
        (r"/api/telemetry/.*", "misc", "hub_telemetry", {"GET": "_ok", "HEAD": "_ok"}),
        (r"/_sim/clock", "control", "sim_clock", {"GET": "_sim_clock", "POST": "_sim_clock"}),
        (r"/_sim/usage", "control", "sim_usage", {"GET": "_sim_usage"}),
    )
    _COMPILED = tuple((re.compile(p + r"/?"), *rest) for p, *rest in _ROUTES)

    def _route(self, method: str, raw_path: str) -> _Match:
        for regex, plane, name, methods in self._COMPILED:
            m = regex.fullmatch(raw_path)
            if not m:
                continue
            params = {k: unquote(v) for k, v in m.groupdict().items() if v is not None}
            handler_name = methods.get(method)
            if handler_name is None:
                return _Match(name, "control" if plane == "control" else "misc", self._not_allowed)
            if name == "endpoint":
                name = {"GET": "get_endpoint", "DELETE": "delete_endpoint"}.get(
                    method, "update_endpoint"
                )
            if name == "networkvolumes":
                name = "create_volume" if method == "POST" else "list_volumes"
            if name == "networkvolume":
                name = "delete_volume" if method == "DELETE" else "get_volume"
            return _Match(name, plane, getattr(self, handler_name), params)
        return _Match("unknown", "misc", self._not_found)

    # ------------------------------------------------------------------ answers

    @staticmethod
    def _error(plane: str, status: int, message: str) -> Reply:
        if plane == "rest2":
            title = HTTPStatus(status).phrase if status in _STATUS_CODES else ""
            problem = {"type": "about:blank", "title": title, "status": status, "detail": message}
            return _json_reply(status, problem, content_type="application/problem+json")
        if plane == "graphql":
            return _json_reply(status, {"errors": [{"message": message}], "data": None})
        if plane == "hub":
            return status, {"X-Error-Message": message}, message.encode()
        return _json_reply(status, {"error": message, "status": status})

    def _fault_reply(self, match: _Match, fault: Fault) -> Reply:
        status = int(fault.status or 500)
        if fault.body is not None:
            body = fault.body
            data = (
                body
                if isinstance(body, bytes)
                else str(body).encode()
                if isinstance(body, str)
                else json.dumps(body).encode()
            )
            reply: Reply = (status, {"Content-Type": "application/json"}, data)
        else:
            phrase = HTTPStatus(status).phrase if status in _STATUS_CODES else ""
            reply = self._error(match.plane, status, f"simulated fault: {status} {phrase}".strip())
        if fault.retry_after is not None:
            reply[1]["Retry-After"] = str(fault.retry_after)
        return reply

    def _not_found(self, **_: Any) -> Reply:
        return _json_reply(404, {"error": "not found"})

    def _not_allowed(self, **_: Any) -> Reply:
        return _json_reply(405, {"error": "method not allowed"})

    def _ok(self, **_: Any) -> Reply:
        return 200, {}, b""

    # ------------------------------------------------------------------ control

    def _sim_clock(self, method: str, body: bytes) -> Reply:
        """Read (GET) or advance (POST `{"advance": s}`) a manual sim clock."""
        if not self.clock.manual:
            return _json_reply(409, {"error": "the sim clock is not manual (speed > 0)"})
        if method == "POST":
            try:
                seconds = _json(body).get("advance")  # type: ignore[union-attr]
            except (_BadJson, AttributeError):
                seconds = None
            if (
                not isinstance(seconds, (int, float))
                or isinstance(seconds, bool)
                or not 0 <= seconds < float("inf")
            ):
                return _json_reply(400, {"error": 'expected {"advance": <seconds >= 0>}'})
            self.clock.advance(seconds)
        return _json_reply(200, {"now": self.clock.now()})

    def _sim_usage(self, method: str, body: bytes) -> Reply:
        """What the platform created and billed (`usage()`), as JSON."""
        return _json_reply(200, self.usage().model_dump(mode="json"))

    # ------------------------------------------------------------------ data plane

    def _run(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        job = self.world.submit(self.world.endpoint(account, endpoint_id), body)
        return _json_reply(200, {"id": job.id, "status": job.status})

    def _job(self, account: Account, endpoint_id: str, job_id: str) -> Job:
        return self.world.job(self.world.endpoint(account, endpoint_id), job_id)

    def _status(self, account: Account, body: Any, endpoint_id: str, job_id: str) -> Reply:
        return _json_reply(200, self._job(account, endpoint_id, job_id).status_answer())

    def _cancel(self, account: Account, body: Any, endpoint_id: str, job_id: str) -> Reply:
        job = self._job(account, endpoint_id, job_id)
        self.world.cancel(job)
        return _json_reply(200, {"id": job.id, "status": job.status})

    def _retry(self, account: Account, body: Any, endpoint_id: str, job_id: str) -> Reply:
        job = self._job(account, endpoint_id, job_id)
        self.world.retry(job)
        return _json_reply(200, {"id": job.id, "status": job.status})

    def _health(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        return _json_reply(200, self.world.endpoint(account, endpoint_id).health(self.clock.now()))

    def _purge_queue(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        removed = self.world.purge(self.world.endpoint(account, endpoint_id))
        return _json_reply(200, {"removed": removed, "status": "completed"})

    # ------------------------------------------------------------------ REST v2 management

    def _mine(self, account: Account) -> list[Endpoint]:
        return [e for e in self.world.endpoints.values() if e.account is account]

    def _list_endpoints(self, account: Account, body: Any) -> Reply:
        return _json_reply(200, {"endpoints": [e.rest(self.world) for e in self._mine(account)]})

    def _get_endpoint(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        return _json_reply(200, self.world.endpoint(account, endpoint_id).rest(self.world))

    def _delete_endpoint(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        self.world.delete_endpoint(account, endpoint_id)
        return 204, {}, b""

    def _patch_endpoint(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        if not isinstance(body, Mapping):
            raise ApiError(400, "expected a JSON object")
        endpoint = self.world.save_endpoint(account, {**body, "id": endpoint_id})
        return _json_reply(200, endpoint.rest(self.world))

    def _list_workers(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        endpoint = self.world.endpoint(account, endpoint_id)
        return _json_reply(200, endpoint.listing(self.clock.now()))

    def _worker_logs(
        self, account: Account, body: Any, endpoint_id: str, worker_id: str, query: dict[str, str]
    ) -> Reply:
        """The worker's last `tail` log lines (of `source`, or both) as Server-Sent Events."""
        raw_tail = query.get("tail")
        try:
            tail = LOG_TAIL_DEFAULT if raw_tail is None else int(raw_tail)
        except ValueError:
            tail = -1
        if not 0 <= tail <= LOG_TAIL_MAX:
            raise ApiError(400, f"tail must be an integer from 0 to {LOG_TAIL_MAX}")
        source = query.get("source")
        if source is not None and source not in LOG_SOURCES:
            raise ApiError(400, f"source must be one of {', '.join(LOG_SOURCES)}")
        endpoint = self.world.endpoint(account, endpoint_id)
        worker = self.world.worker(endpoint, worker_id)
        lines = worker.tail(self.clock.now(), tail, source)
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        return 200, headers, b"".join(sse_event(line) for line in lines)

    # ------------------------------------------------------------------ REST v1 volumes

    def _list_volumes(self, account: Account, body: Any) -> Reply:
        mine = [v.rest() for v in self.world.volumes.values() if v.account is account]
        return _json_reply(200, mine)

    def _create_volume(self, account: Account, body: Any) -> Reply:
        return _json_reply(200, self.world.create_volume(account, body).rest())

    def _volume(self, account: Account, volume_id: str):
        volume = self.world.volumes.get(volume_id)
        if volume is None or volume.account is not account:
            raise ApiError(404, f"network volume {volume_id} not found")
        return volume

    def _get_volume(self, account: Account, body: Any, volume_id: str) -> Reply:
        return _json_reply(200, self._volume(account, volume_id).rest())

    def _delete_volume(self, account: Account, body: Any, volume_id: str) -> Reply:
        volume = self._volume(account, volume_id)
        if any(volume.id in e.volume_ids for e in self.world.endpoints.values()):
            raise ApiError(400, f"network volume {volume_id} is attached to an endpoint")
        del self.world.volumes[volume.id]
        return 204, {}, b""

    # ------------------------------------------------------------------ GraphQL

    def _graphql(self, account: Account, operation: Any, body: bytes) -> Reply:
        if isinstance(operation, str):
            return _json_reply(400, {"errors": [{"message": operation}], "data": None})
        payload = json.loads(body)
        variables = payload.get("variables") if isinstance(payload.get("variables"), dict) else {}
        world = self.world

        def wrap(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
            def call(args: dict[str, Any]) -> Any:
                try:
                    return fn(args)
                except ApiError as exc:
                    raise graphql.GraphQLError(exc.message) from None

            return call

        def save_endpoint(args: dict[str, Any]) -> Any:
            return world.save_endpoint(account, args.get("input")).graphql(world)

        def delete_endpoint(args: dict[str, Any]) -> Any:
            world.delete_endpoint(account, str(args.get("id")))
            return None

        def save_template(args: dict[str, Any]) -> Any:
            return world.save_template(account, args.get("input")).graphql()

        def pod_template(args: dict[str, Any]) -> Any:
            template = world.templates.get(str(args.get("id")))
            return template.graphql() if template and template.account is account else None

        def endpoint_of(args: dict[str, Any]) -> Any:
            endpoint = world.endpoints.get(str(args.get("id")))
            return endpoint.graphql(world) if endpoint and endpoint.account is account else None

        def myself(args: dict[str, Any]) -> Any:
            return {
                "id": account.user_id,
                "email": f"{account.name}@sim.invalid",
                "pubKey": "",
                "clientBalance": 100.0,
                "endpoints": [e.graphql(world) for e in self._mine(account)],
                "endpoint": endpoint_of,
                "networkVolumes": [
                    v.rest() for v in world.volumes.values() if v.account is account
                ],
            }

        def gpu_types(args: dict[str, Any]) -> Any:
            spec = args.get("input") if isinstance(args.get("input"), dict) else {}
            ids = spec.get("ids") or ["NVIDIA A100 80GB PCIe"]
            return [
                {
                    "id": gpu,
                    "displayName": gpu,
                    "memoryInGb": 80,
                    "lowestPrice": lambda _a: {"stockStatus": world.gpu_stock},
                }
                for gpu in ids
            ]

        resolvers = {
            "mutation": {
                "saveEndpoint": wrap(save_endpoint),
                "deleteEndpoint": wrap(delete_endpoint),
                "saveTemplate": wrap(save_template),
            },
            "query": {
                "myself": wrap(myself),
                "podTemplate": wrap(pod_template),
                "gpuTypes": wrap(gpu_types),
            },
        }
        return _json_reply(200, graphql.execute(operation, variables, resolvers))

    # ------------------------------------------------------------------ Hub

    def _hub_resolve(
        self, method: str, repo: str, revision: str, file: str, prefix: str = ""
    ) -> Reply:
        repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(prefix, "model")
        status, headers, data = self.hub.resolve(repo_type, repo, revision, file)
        if status == 200:
            headers["Content-Length"] = str(len(data))
        return status, headers, data


class _BadJson(Exception):
    pass


def _json(body: bytes) -> Any:
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except ValueError:
        raise _BadJson from None


def _json_reply(status: int, value: Any, *, content_type: str = "application/json") -> Reply:
    return status, {"Content-Type": content_type}, json.dumps(value).encode()


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()
    return header.strip()  # runpod's SDK also sends the bare key


def _parse_graphql(body: bytes) -> graphql.Operation | str:
    """The operation of a GraphQL POST, or an error message."""
    try:
        payload = json.loads(body)
    except ValueError:
        return "the request body is not valid JSON"
    if not isinstance(payload, dict):
        return "expected a JSON object with a query"
    try:
        return graphql.parse(payload.get("query"))
    except graphql.GraphQLError as exc:
        return str(exc)


def _startup(value: float | None) -> float | None:
    if value is not None and not (isinstance(value, (int, float)) and value >= 0):
        raise ValueError(f"startup_s must be a number >= 0, not {value!r}")
    return None if value is None else float(value)


def _split_events(body: bytes) -> Iterator[bytes]:
    """The SSE events of a body, one at a time (each with its blank line; a last part
    without one, half an event, as it is)."""
    *whole, rest = body.split(b"\n\n")
    for part in whole:
        if part:
            yield part + b"\n\n"
    if rest:
        yield rest


def _batches(events: Iterable[bytes], size: int = STREAM_CHUNK) -> Iterator[bytes]:
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


def _garble_events(body: bytes, fault: Fault) -> bytes:
    """A log stream spoilt as a fault says: `malformed` ends in half an event whose data is
    not JSON, `non_object` sends data that is a JSON list, `missing_keys` drops `keys`
    (default: every key) from each event's data."""
    if fault.kind == "malformed":
        return body + b'id: x\ndata: {"source": "container", "line": "trunc'
    if fault.kind == "non_object":
        return body + b'data: ["unexpected", "list"]\n\n'
    out = []
    for event in _split_events(body):
        head, _, data = event.rstrip(b"\n").partition(b"\ndata: ")
        value = json.loads(data)
        drop = set(value) if fault.keys is None else set(fault.keys)
        kept = {k: v for k, v in value.items() if k not in drop}
        out.append(head + b"\ndata: " + json.dumps(kept).encode() + b"\n\n")
    return b"".join(out)


def _gzipped(reply: Reply, method: str) -> Reply:
    """The reply with its body gzip-encoded (its length then the encoded one's)."""
    status, headers, body = reply
    if not body or method == "HEAD":
        return reply
    kept = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    return status, {**kept, "Content-Encoding": "gzip"}, gzip.compress(body)


def _garble(reply: Reply, fault: Fault) -> Reply:
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
            return _json_reply(200 if status == 204 else status, value)
    return reply
