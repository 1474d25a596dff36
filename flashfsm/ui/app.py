"""The web view's application: routes, the live feed, the cancel action and its guards.

Theory of operation. `create_app` builds a Starlette application around one `StoreIndex`: a
background thread refreshes the index every `poll_s` and hands each refresh's changes to the
open live feeds (server-sent events, `/feed`), so a page follows the fleet's appends without
reloading. Every page reads the index, which opened the store read-only; the only write the
process can make is a cancel, and only when it was started with `allow_cancel`: the same
`flashfsm.runs.request_cancel` a program calls, its `CancelRequested` naming who asked.

Guards. Loopback is judged by address (127.0.0.0/8, ::1, or the name `localhost`): any other
bind needs a token. A request must name a loopback host, or the host the app was bound to (a
web page elsewhere cannot reach it through DNS rebinding); with a token, every request carries
it (a bearer header, or once as `?token=`, which sets a cookie and redirects to a path of this
site, never `//elsewhere`). A cancel must come from this site's own page (its Origin, else its
Referer) and carry the nonce of the form it was asked in: one per form, for that run, good
once (`FormNonces`). The address a cancel records is the connection's; forwarded headers count
only from the `trusted_proxy`. Pages are served with a Content-Security-Policy that runs only
the app's own script. A stream is served only when the index lists it (a name never becomes a
path).

Worker logs. A running job's page follows its worker's log (`flashfsm.ui.follow`): the
page asks `/log/<name>` every few seconds, and the answer is read from RunPod with the view's
own `RUNPOD_API_KEY`, masked, never recorded, on threads of its own (`LOG_READERS`), each
read kept 5 s for every page that asks.

Metrics. `/metrics` serves the store's Prometheus metrics (`flashfsm.metrics`) behind the
same guards, GET or HEAD only: the facts come from the index (`StoreIndex.facts`, what
`read_store_facts` would read, without reading the store again), collected in a worker
thread, so a scrape never holds the pages and feeds; until the index's first read is whole,
`flashfsm_store_up` is 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import ipaddress
import json
import re
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar
from urllib.parse import quote, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from flashfsm.adapters.urls import display_url
from flashfsm.display.text import shown
from flashfsm.events.models import NAME_CAP
from flashfsm.events.text import redact_then_cap
from flashfsm.live_log import LIVE_LOG_CACHE_S, LiveLogReader
from flashfsm.metrics import metrics_app, metrics_registry
from flashfsm.runs import request_cancel
from flashfsm.ui import follow, pages, store_pages
from flashfsm.ui.index import FILL_CHUNK, SERVE_WAIT_S, Change, StoreIndex
from flashfsm.views import concluded

#: How often the index reads the store for what changed, by default (seconds).
DEFAULT_POLL_S = 0.5
#: A live feed sends a comment this often when nothing changes, so a dead client is noticed.
KEEPALIVE_S = 15.0
#: How many worker-log reads (`/log/<name>`) may wait on RunPod at once: they have threads
#: of their own, so a slow platform never holds a page's rendering.
LOG_READERS = 4
#: How many refreshes a slow live feed may fall behind before it is dropped (the page
#: reconnects and renders afresh).
FEED_BACKLOG = 256
#: The most characters of a cancel's reason and of its asker's name the event keeps.
REASON_CAP = 400
#: How long a cancel form's nonce stays good (seconds), and the most forms whose nonces are
#: kept at once (the oldest are forgotten first).
FORM_TTL_S = 3600.0
FORMS_KEPT = 1000
COOKIE = "flashfsm_ui"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)


@dataclass
class UiConfig:
    """How a `flashfsm ui` process serves a store."""

    url: str
    host: str = "127.0.0.1"
    token: str | None = None
    allow_cancel: bool = False
    poll_s: float = DEFAULT_POLL_S
    wall: Callable[[], float] = time.time
    #: The IP address of the reverse proxy whose X-Forwarded-For/-Proto/-Host are believed
    #: (from it alone); None: forwarded headers are ignored.
    trusted_proxy: str | None = None
    #: How long a worker's live log read is kept for every page that follows it (seconds).
    log_cache_s: float = LIVE_LOG_CACHE_S


class Feeds:
    """The open live feeds: each an asyncio queue filled from the refreshing thread.

    `end` ends them all, and every feed opened after: the server calls it (every app's at
    once: `Feeds.end_all`) when its shutdown starts, as an open feed is a response that never
    completes, and would hold the server open until the page went away. A feed ends on an
    empty list of changes in its queue (`publish` never offers one)."""

    #: Every `Feeds` of this process (weakly: an app that is gone is forgotten).
    _every: ClassVar[weakref.WeakSet[Feeds]] = weakref.WeakSet()

    def __init__(self) -> None:
        self._queues: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[list[Change]]]] = set()
        self._lock = threading.Lock()
        self._ended = False
        Feeds._every.add(self)

    def open(self) -> asyncio.Queue[list[Change]]:
        """A new feed's queue (on the running loop); an ended one once `end` was called."""
        queue: asyncio.Queue[list[Change]] = asyncio.Queue(FEED_BACKLOG)
        with self._lock:
            if self._ended:
                queue.put_nowait([])
            else:
                self._queues.add((asyncio.get_running_loop(), queue))
        return queue

    def close(self, queue: asyncio.Queue[list[Change]]) -> None:
        """Stop filling `queue`."""
        with self._lock:
            self._queues = {(lp, q) for lp, q in self._queues if q is not queue}

    def publish(self, changes: list[Change]) -> None:
        """Hand a refresh's changes to every feed (called from the refreshing thread)."""
        if not changes:
            return
        with self._lock:
            targets = list(self._queues)
        for loop, queue in targets:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(_offer, queue, changes)

    def end(self) -> None:
        """End every open feed (what it had not sent yet is dropped) and every feed opened
        from now on; from any thread."""
        with self._lock:
            self._ended = True
            targets = list(self._queues)
            self._queues = set()
        for loop, queue in targets:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(Feeds._end_queue, queue)

    @classmethod
    def end_all(cls) -> None:
        """`end` every app's feeds in this process (a server shutting down)."""
        for feeds in list(cls._every):
            feeds.end()

    @staticmethod
    def _end_queue(queue: asyncio.Queue[list[Change]]) -> None:
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait([])


def _offer(queue: asyncio.Queue[list[Change]], changes: list[Change]) -> None:
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(changes)


def _allowed_hosts(host: str) -> list[str]:
    hosts = ["127.0.0.1", "localhost", "[::1]", "::1"]
    if host not in ("0.0.0.0", "::", ""):
        hosts.append(host if ":" not in host or host.startswith("[") else f"[{host}]")
        return hosts
    return ["*"]  # every address: the token guards it


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def ip_of(text: str) -> IpAddress | None:
    """`text` as an IP address (IPv6 in brackets or not), or None when it is not one."""
    try:
        return ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether binding to `host` serves this machine alone: an address in 127.0.0.0/8 or ::1,
    or the name `localhost` (reserved for loopback, RFC 6761; `flashfsm ui` also checks the
    address it bound). Any other name is not loopback, whatever it starts with: its owner
    says where `127.evil.example` points."""
    if host.lower() == "localhost":
        return True
    address = ip_of(host)
    return address is not None and address.is_loopback


class FormNonces:
    """The nonces of the cancel forms served: one per form, for the run it asks about, good
    once (spent when presented, whatever the answer), for `FORM_TTL_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._issued: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, run: str) -> str:
        """A new form's nonce, good for one cancel of `run`."""
        nonce = secrets.token_urlsafe(24)
        with self._lock:
            self._issued[nonce] = (run, self._clock())
            while len(self._issued) > FORMS_KEPT:
                self._issued.popitem(last=False)
        return nonce

    def spend(self, nonce: str, run: str) -> bool:
        """Whether `nonce` was issued for a cancel of `run` and is still good; it is spent."""
        with self._lock:
            issued = self._issued.pop(nonce, None)
        if issued is None:
            return False
        return issued[0] == run and self._clock() - issued[1] <= FORM_TTL_S


def _from_proxy(request: Request, proxy: IpAddress | None) -> bool:
    return proxy is not None and request.client is not None and ip_of(request.client.host) == proxy


def asker_address(request: Request, proxy: IpAddress | None) -> str:
    """Where a request came from, as a cancel records it: the connection's address; through
    the trusted `proxy`, the address the proxy says it served (the last X-Forwarded-For) and
    the proxy's. Forwarded headers from anyone else are ignored."""
    peer = request.client.host if request.client is not None else "unknown"
    if not _from_proxy(request, proxy):
        return peer
    hops = ",".join(request.headers.getlist("x-forwarded-for")).split(",")
    behind = ip_of(hops[-1])
    return peer if behind is None else f"{behind} via {peer}"


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """The (scheme, host, port) of an http(s) `url`, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def from_this_site(request: Request, proxy: IpAddress | None) -> bool:
    """Whether a request says it comes from a page of this site: its Origin (or, without one,
    its Referer) names this site's scheme, host and port (the ones the trusted `proxy`
    forwards, through it). A request that names no site, or `null`, does not."""
    scheme, host = request.url.scheme, request.headers.get("host", "")
    if _from_proxy(request, proxy):
        scheme = request.headers.get("x-forwarded-proto", scheme).split(",")[0].strip()
        host = request.headers.get("x-forwarded-host", host).split(",")[0].strip()
    origin = request.headers.get("origin")
    source = origin if origin is not None else request.headers.get("referer", "")
    given = _origin(source)
    return given is not None and given == _origin(f"{scheme}://{host}")


#: The bytes a redirect's path may not hold raw: controls, spaces, backslashes (a browser
#: reads `/\host` as `//host`, and drops tabs and line breaks) and anything not ASCII.
_UNSAFE_IN_PATH = re.compile(rb"[^\x21-\x7e]|\\")


def same_site_path(scope: Any) -> str:
    """The request's path (as the client sent it, still percent-encoded) as a redirect that
    stays on this site: its leading slashes one slash, nothing a browser reads as a slash."""
    raw = scope.get("raw_path") or quote(scope.get("path", "/")).encode()
    path = _UNSAFE_IN_PATH.sub(lambda m: b"%%%02X" % m.group()[0], raw.split(b"?", 1)[0])
    return "/" + path.decode("ascii").lstrip("/")


def create_app(config: UiConfig, index: StoreIndex | None = None) -> Starlette:
    """The web view of the store `config.url` (see the module docstring)."""
    if not is_loopback(config.host) and not config.token:
        raise ValueError(
            f"binding to {config.host} serves other machines: give a token (--token or "
            "$FLASHFSM_UI_TOKEN) or bind to 127.0.0.1"
        )
    proxy = None
    if config.trusted_proxy is not None:
        proxy = ip_of(config.trusted_proxy)
        if proxy is None:
            raise ValueError(
                f"trusted proxy {config.trusted_proxy!r}: give its IP address (127.0.0.1)"
            )
    view = _View(config, index, proxy)
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=_allowed_hosts(config.host))]
    if config.token:
        middleware.append(Middleware(TokenGuard, token=config.token))
    return Starlette(routes=view.routes(), middleware=middleware, lifespan=view.lifespan)


class _View:
    """The view's routes over one index, and what they share: the index (made at start-up
    unless one is given), the live feeds, the cancel forms' nonces, the worker-log reader
    and the last read's error."""

    def __init__(self, config: UiConfig, index: StoreIndex | None, proxy: IpAddress | None):
        self.config, self.index, self.proxy = config, index, proxy
        self.nonces = FormNonces()
        self.state: dict[str, Any] = {}
        self.feeds = Feeds()
        self.frame = pages.Frame(
            display_url(config.url),
            not config.allow_cancel,
            trouble=lambda: self.state.get("error"),
        )
        self.logs = LiveLogReader(cache_s=config.log_cache_s)

    def the_index(self) -> StoreIndex:
        return self.state["index"]

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # Served at once: the index reads the store in the background, in chunks, each handed
        # to the pages and feeds as it is read; a small store is read whole before the first
        # page (it waits up to SERVE_WAIT_S for it), a large one fills in while served.
        ix = (
            self.index
            if self.index is not None
            else StoreIndex(self.config.url, wall=self.config.wall)
        )
        self.state["index"] = ix
        stop = threading.Event()
        unsubscribe = ix.subscribe(self.feeds.publish)

        def refresher() -> None:
            while not stop.is_set():
                try:
                    ix.refresh(chunk=FILL_CHUNK, stop=stop)
                except Exception as exc:  # a store that went away: said on every page, retried
                    self.state["error"] = redact_then_cap(f"{type(exc).__name__}: {exc}", 300)
                else:
                    self.state.pop("error", None)
                stop.wait(self.config.poll_s)

        thread = threading.Thread(target=refresher, name="flashfsm-ui-refresh", daemon=True)
        thread.start()
        self.state["log_pool"] = concurrent.futures.ThreadPoolExecutor(
            LOG_READERS, thread_name_prefix="flashfsm-ui-log"
        )
        await asyncio.to_thread(ix.ready.wait, SERVE_WAIT_S)
        try:
            yield
        finally:
            stop.set()
            unsubscribe()
            self.state["log_pool"].shutdown(wait=False, cancel_futures=True)
            self.logs.close()
            await asyncio.to_thread(thread.join, 5.0)
            if self.index is None:
                ix.close()

    def html(self, text: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(text, status, headers=_HEADERS)

    def entry_or_404(self, request: Request) -> Any:
        name = request.path_params["name"]
        entry = self.the_index().entry(name)
        if entry is None:
            return None
        return entry

    def not_found(self, request: Request) -> HTMLResponse:
        name = request.path_params.get("name", "")
        progress = self.the_index().progress
        if progress is not None:  # (the first read is under way: perhaps not read yet)
            text = f"{name!r} is not read yet: {pages.reading_text(progress)}"
            title = "reading the store"
            answer = self.html(
                pages.message_page(self.frame, title, text, bad=False, reading=progress), 503
            )
            answer.headers["Retry-After"] = "2"
            return answer
        text = f"no stream {name!r} in this store"
        return self.html(pages.message_page(self.frame, "not found", text, back=None), 404)

    def cancel_button(self, entry: Any) -> str:
        if entry.row["kind"] != "run" or entry.row.get("ok") is not None:
            return ""  # (a finished run offers no cancel)
        if entry.row.get("cancel_pending"):
            return (
                '<span class="note pending">cancel pending: the run winds down as soon as '
                "a replica drives it</span>"
            )
        href = pages.stream_url(entry.name, "cancel")
        if not self.config.allow_cancel:
            return (
                '<span class="note">read-only: start <code>flashfsm ui --allow-cancel</code> '
                "to cancel runs from here</span>"
            )
        return f'<a class="button danger" href="{href}">cancel this run…</a>'

    async def runs(self, request: Request) -> Response:
        query = dict(request.query_params)
        part = query.pop("part", None)
        if part == "attempts":  # a run row opened: its attempts' rows
            rows = await asyncio.to_thread(
                pages.attempt_rows, self.the_index(), query.get("run", "")
            )
            return self.html(rows) if rows is not None else Response("no such run", 404)
        if part == "rows":
            rows, counts = await asyncio.to_thread(pages.runs_rows, self.the_index(), query)
            response = self.html(rows)
            response.headers["X-Flashfsm-Counts"] = json.dumps(counts)  # (ASCII)
            return response
        return self.html(
            await asyncio.to_thread(pages.runs_page, self.frame, self.the_index(), query)
        )

    async def stream(self, request: Request) -> Response:
        entry = self.entry_or_404(request)
        if entry is None:
            return self.not_found(request)
        wall = self.config.wall()
        if request.query_params.get("part") == "events":
            try:
                after = int(request.query_params.get("after", "-1"))
            except ValueError:
                after = -1
            return self.html(
                await asyncio.to_thread(pages.events_rows, self.the_index(), entry, after)
            )
        if request.query_params.get("part") == "live":
            events = await asyncio.to_thread(self.the_index().read, entry.name)
            text = await asyncio.to_thread(
                pages.live_html,
                self.the_index(),
                entry,
                events,
                wall,
                cancel=self.cancel_button(entry),
            )
            return self.html(text)
        text = await asyncio.to_thread(
            pages.stream_page,
            self.frame,
            self.the_index(),
            entry,
            wall,
            self.cancel_button(entry),
            follow=follow.follows(entry),
        )
        return self.html(text)

    async def worker_log(self, request: Request) -> Response:
        entry = self.entry_or_404(request)
        if entry is None:
            return self.not_found(request)
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(
            self.state["log_pool"], follow.log_fragment, self.the_index(), entry, self.logs
        )
        return self.html(text)

    async def picture(self, request: Request) -> Response:
        entry = self.entry_or_404(request)
        if entry is None:
            return self.not_found(request)
        svg = await asyncio.to_thread(pages.picture_svg, self.the_index(), entry)
        return Response(svg, media_type="image/svg+xml", headers=_HEADERS)

    async def costs(self, request: Request) -> Response:
        if request.query_params.get("part") == "body":
            return self.html(await asyncio.to_thread(store_pages.costs_body, self.the_index()))
        return self.html(
            await asyncio.to_thread(store_pages.costs_page, self.frame, self.the_index())
        )

    async def fleet(self, request: Request) -> Response:
        wall = self.config.wall()
        if request.query_params.get("part") == "body":
            return self.html(
                await asyncio.to_thread(store_pages.fleet_body, self.frame, self.the_index(), wall)
            )
        return self.html(
            await asyncio.to_thread(store_pages.fleet_page, self.frame, self.the_index(), wall)
        )

    async def rows_json(self, request: Request) -> Response:
        f = pages.Filters.parse(dict(request.query_params))
        try:
            chosen = pages.select(self.the_index().rows(), f, self.the_index().newest)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        return JSONResponse({"store": self.frame.store, "streams": chosen})

    async def cancel(self, request: Request) -> Response:
        entry = self.entry_or_404(request)
        if entry is None:
            return self.not_found(request)
        back = entry.name
        if not self.config.allow_cancel:
            text = "cancel is off: this view is read-only (start it with --allow-cancel)"
            return self.html(pages.message_page(self.frame, "refused", text, back=back), 403)
        if entry.row["kind"] != "run":
            text = "only a run can be cancelled from here (this stream is a " + entry.row["kind"]
            return self.html(pages.message_page(self.frame, "refused", text + ")", back=back), 409)
        if request.method == "GET":  # (no form for a run that ended or whose cancel waits)
            if entry.row.get("ok") is not None:
                text = f"{entry.name} has already concluded: nothing to cancel"
                return self.html(pages.message_page(self.frame, "refused", text, back=back), 409)
            if entry.row.get("cancel_pending"):
                text = f"{entry.name}: its cancel is pending (it ends when a replica drives it)"
                return self.html(pages.message_page(self.frame, "refused", text, back=back), 409)
            return self.html(
                pages.cancel_form(self.frame, entry.name, self.nonces.issue(entry.name))
            )
        if not from_this_site(request, self.proxy):
            text = (
                "this cancel comes from another site, or names none (Origin, Referer): "
                "cancel from the run's page in this view"
            )
            return self.html(pages.message_page(self.frame, "refused", text, back=back), 403)
        form = await request.form()
        if not self.nonces.spend(str(form.get("csrf", "")), entry.name):
            text = "the form is stale, used or from elsewhere: open the run's page and try again"
            return self.html(pages.message_page(self.frame, "refused", text, back=back), 403)
        who = str(form.get("by", "")).strip()
        if not who:
            return self.html(
                pages.message_page(self.frame, "refused", "say who asks", back=back), 400
            )
        events = await asyncio.to_thread(self.the_index().read, entry.name)
        if concluded(events):
            text = f"{entry.name} has already concluded: nothing to cancel"
            return self.html(pages.message_page(self.frame, "refused", text, back=back), 409)
        client = asker_address(request, self.proxy)
        by = redact_then_cap(f"{who} (flashfsm ui, from {client})", NAME_CAP)
        reason = redact_then_cap(str(form.get("reason", "")), REASON_CAP)
        last = max(e.at for e in events)
        await asyncio.to_thread(
            request_cancel,
            self.config.url,
            entry.name,
            by=by,
            reason=reason,
            clock=lambda: max(self.config.wall(), last),
        )
        await asyncio.to_thread(self.the_index().refresh)  # the page it leads to shows the cancel
        return RedirectResponse(pages.stream_url(entry.name), 303)

    async def feed(self, request: Request) -> Response:
        wanted = request.query_params.get("stream")
        queue = self.feeds.open()
        version = self.the_index().version  # (read after the queue opened: nothing falls between)

        async def events() -> AsyncIterator[str]:
            try:
                yield "retry: 2000\n\n"
                yield f"event: hello\ndata: {json.dumps({'version': version})}\n\n"
                while True:
                    try:
                        changes = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if not changes:  # ended (`Feeds.end`): the server is shutting down
                        return
                    for change in changes:
                        if wanted is not None and change.stream != wanted:
                            continue
                        yield _message(change, full=wanted is not None)
            finally:
                self.feeds.close(queue)

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={**_HEADERS, "Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return Response("not found", 404)
        body = resources.files("flashfsm.ui").joinpath("static", name).read_bytes()
        return Response(body, media_type=_STATIC[name], headers=_HEADERS)

    async def no_icon(self, request: Request) -> Response:
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        """Every route of the view (the metrics collected off the event loop; GET and HEAD
        only)."""
        facts = lambda: self.the_index().facts()  # noqa: E731
        metrics = metrics_app(metrics_registry(facts=facts, max_age_s=self.config.poll_s))
        return [
            Route("/metrics", _Asgi(metrics), methods=["GET", "HEAD"]),
            Route("/", self.runs),
            Route("/favicon.ico", self.no_icon),
            Route("/rows.json", self.rows_json),
            Route("/costs", self.costs),
            Route("/fleet", self.fleet),
            Route("/feed", self.feed),
            Route("/static/{name}", self.static),
            Route("/picture/{name:path}", self.picture),
            Route("/cancel/{name:path}", self.cancel, methods=["GET", "POST"]),
            Route("/log/{name:path}", self.worker_log),
            Route("/s/{name:path}", self.stream),
        ]


_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # (same-origin: a form posted to this site says it came from here, in its Origin and
    # Referer; no address of this view ever goes elsewhere)
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC = {"ui.js": "text/javascript; charset=utf-8", "ui.css": "text/css; charset=utf-8"}


def _message(change: Change, *, full: bool) -> str:
    """One change as a server-sent event: the row's new HTML, and with `full` (a stream's own
    feed) each new event's row too."""
    payload: dict[str, Any] = {
        "stream": change.stream,
        "key": shown(change.stream),
        "events": len(change.events),
        "row": pages.row_html(change.row),
    }
    if full and change.events:
        origin = change.row["first_at"] or 0.0
        payload["event_rows"] = [pages.event_html(e, origin) for e in change.events]
    return f"event: change\ndata: {json.dumps(payload)}\n\n"


class _Asgi:
    """An ASGI app as a route's endpoint (Starlette treats a plain function as a handler)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class TokenGuard:
    """Let through only the requests that carry the token (see the module docstring)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given, self.token):
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            target = same_site_path(scope) + (f"?{urlencode(rest)}" if rest else "")
            response: Response = RedirectResponse(target, 303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else ""
        cookie = request.cookies.get(COOKIE, "")
        if any(hmac.compare_digest(c, self.token) for c in (bearer, cookie) if c):
            await self.app(scope, receive, send)
            return
        text = "this view needs its token: open it with ?token=… or send Authorization: Bearer"
        await Response(text, 401, media_type="text/plain")(scope, receive, send)
