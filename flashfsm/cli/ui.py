"""`flashfsm ui`: the store as a local web page (`flashfsm.ui`)."""

from __future__ import annotations

import os
import socket
from typing import Annotated

import typer

from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    StoreOption,
    UsageErrors,
    fail,
    open_reader,
    parse_duration,
    say,
    store_url,
)
from flashfsm.events.text import register_secrets

#: The environment variable a token may come from (so it stays out of the process list).
TOKEN_ENV = "FLASHFSM_UI_TOKEN"
DEFAULT_PORT = 8765
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

    url = store_url(store)
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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    address, bound = sock.getsockname()[:2]
    if token is None and not is_loopback(address):  # (`localhost` named something else)
        sock.close()
        raise fail(
            f"--host {host} is {address}, which serves other machines: give a token "
            f"(--token or ${TOKEN_ENV}), or serve on 127.0.0.1"
        )
    shown_host = f"[{host}]" if ":" in host else host
    mode = "cancel allowed" if allow_cancel else "read-only"
    guard = ", token required" if token else ""
    say(
        f"flashfsm ui: {display_url(url)} at http://{shown_host}:{bound}/ "
        f"({mode}{guard}; Ctrl-C stops)"
    )
    serve(app, sock)


def serve(app: object, sock: socket.socket) -> None:
    """Serve `app` on the bound `sock` with uvicorn until interrupted (uvicorn's own reading
    of forwarded headers off: the app believes them only from its trusted proxy)."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(
            app,  # type: ignore[arg-type]
            log_level="warning",
            access_log=False,
            lifespan="on",
            proxy_headers=False,
        )
    )
    server.run(sockets=[sock])
