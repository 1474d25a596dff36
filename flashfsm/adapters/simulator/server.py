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
That pipeline (`Simulator._serve`) is here, with the simulator's lifecycle and its Python
test API; the route table and each route's handler are `routes.py`'s (`Routes`, which
`Simulator` mixes in), and reading and writing the bytes (a body, a reply, a stream, a
reset, a fault's garbling) is `wire.py`'s.

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
huge (`flood`), slow (`trickle`) or gzip-encoded without holding anything up
(`wire.stream_reply`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from flashfsm.adapters.runpod import AsyncRunpodClient, RunpodClient
from flashfsm.adapters.simulator import graphql
from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.faults import Fault, FaultPlan
from flashfsm.adapters.simulator.hub import HubStore
from flashfsm.adapters.simulator.routes import (
    QUERY_ROUTES,
    STREAM_ROUTES,
    BadJson,
    Routes,
    json_body,
)
from flashfsm.adapters.simulator.scenarios import Scenario
from flashfsm.adapters.simulator.usage import Usage, usage_of
from flashfsm.adapters.simulator.wire import (
    Reply,
    garble,
    gzipped,
    json_reply,
    read_body,
    reset_connection,
    stream_reply,
    write_reply,
)
from flashfsm.adapters.simulator.workers import LOG_SOURCES
from flashfsm.adapters.simulator.world import Account, ApiError, Job, World

DEFAULT_KEY = "sim-runpod-key-0"
SECRET_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})
UNAUTHORIZED_MESSAGE = "Unauthorized: a valid API key is required"


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


class Simulator(Routes):
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
        body = read_body(h)
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
            reset_connection(h)
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
                            account=account, body=json_body(body), **match.params, **extra
                        )
            except ApiError as exc:
                reply = self._error(match.plane, exc.status, exc.message)
            except BadJson:
                reply = self._error(match.plane, 400, "the request body is not valid JSON")
            except Exception as exc:  # a simulator bug: answer 500 and keep it for the test
                self.errors.append(f"{method} {path}: {traceback.format_exc()}")
                reply = self._error(match.plane, 500, f"simulator error: {type(exc).__name__}")
        if match.route == "runsync" and reply[0] == 200:
            reply = self._wait_runsync(reply)
        stream = match.route in STREAM_ROUTES and reply[0] == 200
        if fault is not None and fault.kind != "status":
            if fault.kind == "reset":
                reset_connection(h)
                return
            if not stream:
                reply = garble(reply, fault)
            if fault.kind == "slow":
                time.sleep(fault.delay_s)
        rec.status = reply[0]
        if stream:
            stream_reply(h, method, reply, fault, self.clock, self._stopping)
        elif fault is not None and fault.kind == "gzip":
            write_reply(h, method, gzipped(reply, method))
        else:
            write_reply(h, method, reply)

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
        return json_reply(200, answer)


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
