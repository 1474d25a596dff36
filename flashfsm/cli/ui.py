"""`flashfsm ui`: the store as a local web page (`flashfsm.ui`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from flashfsm import sigint
from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    StoreOption,
    UsageErrors,
    fail,
    open_reader,
    parse_duration,
    store_url,
)
from flashfsm.display.text import say
from flashfsm.events.text import register_secrets

if TYPE_CHECKING:
    import uvicorn

#: The environment variable a token may come from (so it stays out of the process list).
TOKEN_ENV = "FLASHFSM_UI_TOKEN"
DEFAULT_PORT = 8766
#: How long a request still running when the view stops may finish (seconds; a live feed
#: ends at once).
GRACE_S = 1
#: The line a stopped view says (on stderr).
STOPPED = "flashfsm ui: stopped"
#: What a refused port (in use, or not allowed) says to do.
PORT_HINT = "--port 0 picks a free port, or --port N"
#: The shortest token taken: a guessable token guards nothing.
TOKEN_MIN = 16


def ui_command(
    store: StoreOption = None,
    host: Annotated[
        str,
        typer.Option(
            metavar="HOST",
            help="Address to serve on. Anything but loopback needs a token.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(metavar="PORT", min=0, max=65535, help="Port (0: any free one)."),
    ] = DEFAULT_PORT,
    token: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN",
            help=f"Every request must carry it (?token= once, or a bearer header); default "
            f"${TOKEN_ENV}.",
        ),
    ] = None,
    allow_cancel: Annotated[
        bool,
        typer.Option(
            "--allow-cancel",
            help="Let the page cancel runs (a CancelRequested naming who asked). "
            "Without it the view only reads.",
        ),
    ] = False,
    poll: Annotated[
        str, typer.Option(metavar="DURATION", help="How often to read the store for changes.")
    ] = "0.5s",
    trusted_proxy: Annotated[
        str | None,
        typer.Option(
            metavar="ADDR",
            help="The reverse proxy's IP address: its X-Forwarded-* headers are believed "
            "(from anyone else they are ignored).",
        ),
    ] = None,
) -> None:
    """Serve a web view of the store: runs and jobs, a run's picture and explanations, costs,
    the fleet, updated live; read-only unless --allow-cancel."""
    from flashfsm.ui.app import UiConfig, create_app, ip_of, is_loopback

    url = store_url(store, reading=True)
    token = token or os.environ.get(TOKEN_ENV) or None
    if token is not None:
        register_secrets(token)
        if len(token) < TOKEN_MIN:
            raise fail(f"the token is too short: at least {TOKEN_MIN} characters")
    if not is_loopback(host) and token is None:
        raise fail(
            f"--host {host} serves other machines: give a token (--token or ${TOKEN_ENV}), "
            "or serve on 127.0.0.1"
        )
    if trusted_proxy is not None and ip_of(trusted_proxy) is None:
        raise fail(f"--trusted-proxy {trusted_proxy}: give the proxy's IP address (127.0.0.1)")
    poll_s = parse_duration(poll, "--poll")
    if not 0.05 <= poll_s <= 60:
        raise fail(f"--poll {poll}: between 0.05 s and 60 s")
    opened = open_reader(url)  # a missing or unreadable store is one line, before serving
    try:
        with UsageErrors():
            opened.streams()
    finally:
        opened.close()
    config = UiConfig(
        url,
        host=host,
        token=token,
        allow_cancel=allow_cancel,
        poll_s=poll_s,
        trusted_proxy=trusted_proxy,
    )
    app = create_app(config)
    sock = _bound_socket(host, port, guarded=token is not None)
    bound = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    mode = "cancel allowed" if allow_cancel else "read-only"
    guard = ", token required" if token else ""
    serve(
        app,
        sock,
        f"flashfsm ui: {display_url(url)} at http://{shown_host}:{bound}/ "
        f"({mode}{guard}; Ctrl-C stops)",
    )


def _bound_socket(host: str, port: int, *, guarded: bool) -> socket.socket:
    """A socket bound to `host:port` and listening (from then on the address printed takes
    connections); a busy port, or a name that is not loopback for an unguarded view (without
    a token), is one line."""
    from flashfsm.ui.app import is_loopback

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise fail(f"cannot serve on {host}:{port}: {exc.strerror or exc} ({PORT_HINT})") from None
    address = sock.getsockname()[0]
    if not guarded and not is_loopback(address):  # (`localhost` named something else)
        sock.close()
        raise fail(
            f"--host {host} is {address}, which serves other machines: give a token "
            f"(--token or ${TOKEN_ENV}), or serve on 127.0.0.1"
        )
    sock.listen()
    return sock


def serve(app: object, sock: socket.socket, announce: str | None = None) -> None:
    """Say `announce`, then serve `app` on the bound `sock` with uvicorn until Ctrl-C or
    SIGTERM (uvicorn's own reading of forwarded headers off: the app believes them only from
    its trusted proxy).

    Ctrl-C stops it within a second, live feeds open or not: when uvicorn's shutdown starts,
    every open feed ends (`Feeds.end_all`: a page's feed is a response that never completes,
    and uvicorn waits for every response), and any other request still running after
    `GRACE_S` is cancelled (quietly: `_Quiet`). Then `STOPPED` is said, and Ctrl-C's
    `KeyboardInterrupt` goes on (exit 130, `flashfsm.cli.main`). A second Ctrl-C while it
    stops exits 130 at once, saying the same; so does a Ctrl-C from `announce` on, before
    uvicorn has started."""
    quiet = _Quiet()
    logger = logging.getLogger("uvicorn.error")
    logger.addFilter(quiet)
    try:
        if announce is not None:
            say(announce)
        _server(app).run(sockets=[sock])
    except KeyboardInterrupt:
        say(STOPPED, err=True)
        raise
    finally:
        logger.removeFilter(quiet)


def _server(app: object) -> uvicorn.Server:
    """A uvicorn server of `app` that ends the live feeds when its shutdown starts, and
    exits at once on a second Ctrl-C."""
    import uvicorn

    from flashfsm.ui.app import Feeds

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if sig == signal.SIGINT and self.should_exit:  # a second Ctrl-C: stop now
                _stop_now(sig, frame)
            super().handle_exit(sig, frame)
            if self.force_exit:  # (the second came while this one was being handled)
                _stop_now(sig, frame)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            Feeds.end_all()
            await super().shutdown(sockets)

    return Server(
        uvicorn.Config(
            app,  # type: ignore[arg-type]
            log_level="warning",
            access_log=False,
            lifespan="on",
            proxy_headers=False,
            timeout_graceful_shutdown=GRACE_S,
        )
    )


def _stop_now(sig: int, frame: FrameType | None) -> None:
    """Say `STOPPED` and exit 130 at once (a signal handler's: nothing but a write)."""
    with contextlib.suppress(OSError):
        os.write(2, f"{STOPPED}\n".encode())
    sigint.exit_interrupted(sig, frame)


class _Quiet(logging.Filter):
    """Drops uvicorn's records of the requests its shutdown cancels (still running after
    `GRACE_S`): a stop is no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether `record` is kept: not when it is a request's cancellation."""
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, asyncio.CancelledError):
            return False
        return "timeout graceful shutdown exceeded" not in record.getMessage()
