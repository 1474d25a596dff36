"""The simulator's route table and what each route answers (`Routes`, mixed into `Simulator`).

What it holds, and how it relates to `server.py`: the regex table that names every route
the SDKs talk to (the data plane, REST v2 and v1, GraphQL, the Hub, the `/_sim/*` control
routes) and the handler of each, which asks the `World` (under the simulator's lock, which
`server.py` holds) and answers a `Reply`; and the error shapes of each plane. `Simulator`
(`server.py`) inherits them from `Routes`: its request pipeline (`_serve`: parse, record,
fault, authenticate, tick) finds the handler with `_route` and calls it. This module does
not import `server.py`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from flashfsm.adapters.simulator import graphql
from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.faults import Fault
from flashfsm.adapters.simulator.hub import HubStore
from flashfsm.adapters.simulator.usage import Usage
from flashfsm.adapters.simulator.wire import Reply, json_reply
from flashfsm.adapters.simulator.workers import (
    LOG_SOURCES,
    LOG_TAIL_DEFAULT,
    LOG_TAIL_MAX,
    sse_event,
)
from flashfsm.adapters.simulator.world import Account, ApiError, Endpoint, Job, World

#: Every status code HTTP names (a fault may carry another: it then has no phrase).
_STATUS_CODES = frozenset(s.value for s in HTTPStatus)
STREAM_ROUTES = frozenset({"worker_logs"})  # answered as a chunked stream (`wire.stream_reply`)
QUERY_ROUTES = frozenset({"worker_logs"})  # handlers that read the query string


@dataclass
class Match:
    """The route a request matched: its name, plane, handler and path parameters."""

    route: str
    plane: str  # "data", "rest2", "rest1", "graphql", "hub", "misc"
    handler: Callable[..., Reply]
    params: dict[str, str] = field(default_factory=dict)


class BadJson(Exception):
    """A request body that is not JSON."""


def json_body(body: bytes) -> Any:
    """The request body parsed as JSON (None when empty); `BadJson` when it is not JSON."""
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except ValueError:
        raise BadJson from None


class Routes:
    """The route table and the handler of each route; `Simulator` is the one class that
    mixes it in (it sets `clock`, `world` and `hub`, and defines `usage`)."""

    clock: SimClock
    world: World
    hub: HubStore
    usage: Callable[[], Usage]

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

    def _route(self, method: str, raw_path: str) -> Match:
        for regex, plane, name, methods in self._COMPILED:
            m = regex.fullmatch(raw_path)
            if not m:
                continue
            params = {k: unquote(v) for k, v in m.groupdict().items() if v is not None}
            handler_name = methods.get(method)
            if handler_name is None:
                return Match(name, "control" if plane == "control" else "misc", self._not_allowed)
            if name == "endpoint":
                name = {"GET": "get_endpoint", "DELETE": "delete_endpoint"}.get(
                    method, "update_endpoint"
                )
            if name == "networkvolumes":
                name = "create_volume" if method == "POST" else "list_volumes"
            if name == "networkvolume":
                name = "delete_volume" if method == "DELETE" else "get_volume"
            return Match(name, plane, getattr(self, handler_name), params)
        return Match("unknown", "misc", self._not_found)

    # ------------------------------------------------------------------ answers

    @staticmethod
    def _error(plane: str, status: int, message: str) -> Reply:
        if plane == "rest2":
            title = HTTPStatus(status).phrase if status in _STATUS_CODES else ""
            problem = {"type": "about:blank", "title": title, "status": status, "detail": message}
            return json_reply(status, problem, content_type="application/problem+json")
        if plane == "graphql":
            return json_reply(status, {"errors": [{"message": message}], "data": None})
        if plane == "hub":
            return status, {"X-Error-Message": message}, message.encode()
        return json_reply(status, {"error": message, "status": status})

    def _fault_reply(self, match: Match, fault: Fault) -> Reply:
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
        return json_reply(404, {"error": "not found"})

    def _not_allowed(self, **_: Any) -> Reply:
        return json_reply(405, {"error": "method not allowed"})

    def _ok(self, **_: Any) -> Reply:
        return 200, {}, b""

    # ------------------------------------------------------------------ control

    def _sim_clock(self, method: str, body: bytes) -> Reply:
        """Read (GET) or advance (POST `{"advance": s}`) a manual sim clock."""
        if not self.clock.manual:
            return json_reply(409, {"error": "the sim clock is not manual (speed > 0)"})
        if method == "POST":
            try:
                seconds = json_body(body).get("advance")  # type: ignore[union-attr]
            except (BadJson, AttributeError):
                seconds = None
            if (
                not isinstance(seconds, (int, float))
                or isinstance(seconds, bool)
                or not 0 <= seconds < float("inf")
            ):
                return json_reply(400, {"error": 'expected {"advance": <seconds >= 0>}'})
            self.clock.advance(seconds)
        return json_reply(200, {"now": self.clock.now()})

    def _sim_usage(self, method: str, body: bytes) -> Reply:
        """What the platform created and billed (`usage()`), as JSON."""
        return json_reply(200, self.usage().model_dump(mode="json"))

    # ------------------------------------------------------------------ data plane

    def _run(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        job = self.world.submit(self.world.endpoint(account, endpoint_id), body)
        return json_reply(200, {"id": job.id, "status": job.status})

    def _job(self, account: Account, endpoint_id: str, job_id: str) -> Job:
        return self.world.job(self.world.endpoint(account, endpoint_id), job_id)

    def _status(self, account: Account, body: Any, endpoint_id: str, job_id: str) -> Reply:
        return json_reply(200, self._job(account, endpoint_id, job_id).status_answer())

    def _cancel(self, account: Account, body: Any, endpoint_id: str, job_id: str) -> Reply:
        job = self._job(account, endpoint_id, job_id)
        self.world.cancel(job)
        return json_reply(200, {"id": job.id, "status": job.status})

    def _retry(self, account: Account, body: Any, endpoint_id: str, job_id: str) -> Reply:
        job = self._job(account, endpoint_id, job_id)
        self.world.retry(job)
        return json_reply(200, {"id": job.id, "status": job.status})

    def _health(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        return json_reply(200, self.world.endpoint(account, endpoint_id).health(self.clock.now()))

    def _purge_queue(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        removed = self.world.purge(self.world.endpoint(account, endpoint_id))
        return json_reply(200, {"removed": removed, "status": "completed"})

    # ------------------------------------------------------------------ REST v2 management

    def _mine(self, account: Account) -> list[Endpoint]:
        return [e for e in self.world.endpoints.values() if e.account is account]

    def _list_endpoints(self, account: Account, body: Any) -> Reply:
        return json_reply(200, {"endpoints": [e.rest(self.world) for e in self._mine(account)]})

    def _get_endpoint(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        return json_reply(200, self.world.endpoint(account, endpoint_id).rest(self.world))

    def _delete_endpoint(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        self.world.delete_endpoint(account, endpoint_id)
        return 204, {}, b""

    def _patch_endpoint(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        if not isinstance(body, Mapping):
            raise ApiError(400, "expected a JSON object")
        endpoint = self.world.save_endpoint(account, {**body, "id": endpoint_id})
        return json_reply(200, endpoint.rest(self.world))

    def _list_workers(self, account: Account, body: Any, endpoint_id: str) -> Reply:
        endpoint = self.world.endpoint(account, endpoint_id)
        return json_reply(200, endpoint.listing(self.clock.now()))

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
        return json_reply(200, mine)

    def _create_volume(self, account: Account, body: Any) -> Reply:
        return json_reply(200, self.world.create_volume(account, body).rest())

    def _volume(self, account: Account, volume_id: str):
        volume = self.world.volumes.get(volume_id)
        if volume is None or volume.account is not account:
            raise ApiError(404, f"network volume {volume_id} not found")
        return volume

    def _get_volume(self, account: Account, body: Any, volume_id: str) -> Reply:
        return json_reply(200, self._volume(account, volume_id).rest())

    def _delete_volume(self, account: Account, body: Any, volume_id: str) -> Reply:
        volume = self._volume(account, volume_id)
        if any(volume.id in e.volume_ids for e in self.world.endpoints.values()):
            raise ApiError(400, f"network volume {volume_id} is attached to an endpoint")
        del self.world.volumes[volume.id]
        return 204, {}, b""

    # ------------------------------------------------------------------ GraphQL

    def _graphql(self, account: Account, operation: Any, body: bytes) -> Reply:
        if isinstance(operation, str):
            return json_reply(400, {"errors": [{"message": operation}], "data": None})
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
        return json_reply(200, graphql.execute(operation, variables, resolvers))

    # ------------------------------------------------------------------ Hub

    def _hub_resolve(
        self, method: str, repo: str, revision: str, file: str, prefix: str = ""
    ) -> Reply:
        repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(prefix, "model")
        status, headers, data = self.hub.resolve(repo_type, repo, revision, file)
        if status == 200:
            headers["Content-Length"] = str(len(data))
        return status, headers, data
