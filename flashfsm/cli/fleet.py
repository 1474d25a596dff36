"""The fleet's commands: `supervise` (one replica) and `runs add` (intake).

`supervise` writes (it is a replica: heartbeats, leases, every watch's events), so its
store is created when missing, as `sweep`'s is. `runs add` records one hand-off. The
listing of who holds what is `ls --owner` (a read, in `flashfsm.cli.store`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    EXIT_FENCED,
    JsonOption,
    StoreOption,
    UsageErrors,
    emit_json,
    fail,
    message,
    open_store_or_fail,
    store_url,
)
from flashfsm.display.text import say
from flashfsm.events.errors import FlashFsmError
from flashfsm.fleet import (
    DEFAULT_LEASE_S,
    MAX_INTAKE_BYTES,
    MAX_INTERVAL_S,
    MAX_LEASE_S,
    Fleet,
    FleetStats,
    hand_off_job,
    job_intake,
    load_intake,
    run_intake,
)
from flashfsm.naming import check_plain

if TYPE_CHECKING:
    from flashfsm.metrics import LagHistogram, MetricsServer

#: The highest TCP port (`--metrics-port`).
MAX_PORT = 65535
#: The most a `runs add` file may hold (a handle or a run description is a few hundred bytes).
MAX_ADD_BYTES = MAX_INTAKE_BYTES
#: Why a replica drives no runs when nothing says otherwise.
_NO_RUN_ADAPTERS = "no run adapters"


def _factory(spec: str) -> Any:
    """The `module:function` named by `--run-adapters`."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise fail(f"--run-adapters {spec!r}: expected MODULE:FUNCTION")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise fail(f"--run-adapters {spec!r}: {type(exc).__name__}: {exc}") from None


class _LogLines(logging.Handler):
    """A log record as one time-stamped line on stderr, printed the CLI's way (`say`): its
    outside text (a stream name, an error) escaped."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "raised", False):  # (else the error line says it, once)
            say(self.format(record), err=True)


@contextmanager
def _watches_logged() -> Iterator[None]:
    """Show the replica's log of its watches (each one it stops, and why: `flashfsm.fleet`
    at INFO) on stderr, one time-stamped line each; its warnings go the CLI's way."""
    logger = logging.getLogger("flashfsm.fleet")
    level = logger.level
    handler = _LogLines()
    handler.addFilter(lambda record: record.levelno < logging.WARNING)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def supervise_command(
    store: StoreOption = None,
    lease_s: Annotated[
        float, typer.Option("--lease", metavar="SECONDS", help="How long a lease lasts.")
    ] = DEFAULT_LEASE_S,
    interval_s: Annotated[
        float, typer.Option("--interval", metavar="SECONDS", help="Poll interval of each job.")
    ] = 10.0,
    owner: Annotated[
        str | None, typer.Option(metavar="NAME", help="This replica's name (default: unique).")
    ] = None,
    max_streams: Annotated[
        int | None, typer.Option(metavar="N", help="Hold at most N streams.")
    ] = None,
    run_adapters: Annotated[
        str | None,
        typer.Option(
            metavar="MODULE:FUNCTION",
            help="Drive handed-off runs with the adapters this makes (default: deploy each "
            "run's recorded spec with runpod-flash).",
        ),
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Stop once no handed-off stream is open.")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            metavar="PORT",
            help="Serve Prometheus metrics of this replica and its store on PORT (/metrics).",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(metavar="HOST", help="The address --metrics-port listens on.")
    ] = "127.0.0.1",
) -> None:
    """Run one fleet replica: watch the store's open jobs and runs (SIGTERM drains).

    RUNPOD_API_KEY (and RUNPOD_*_BASE_URL) come from the environment. Runs handed off
    with a spec are deployed with runpod-flash, configured by its own environment
    variables; --run-adapters drives runs with adapters of your own instead.
    """
    from flashfsm.adapters.runpod import AsyncRunpodClient

    _check_supervise_options(lease_s, interval_s, max_streams, metrics_port, owner)
    factory = _factory(run_adapters) if run_adapters else None
    url = store_url(store)
    opened = open_store_or_fail(url)
    no_runs = _NO_RUN_ADAPTERS
    if factory is None:
        factory, no_runs = _spec_run_adapters(opened, interval_s)

    lag: LagHistogram | None = None
    if metrics_port is not None:
        from flashfsm.metrics import LagHistogram

        lag = LagHistogram()
    served: list[MetricsServer] = []

    async def main() -> FleetStats:
        async with AsyncRunpodClient.from_env() as client:
            fleet = Fleet(
                opened,
                client,
                owner=owner,
                lease_s=lease_s,
                interval_s=interval_s,
                max_streams=max_streams,
                run_adapters=factory,
                no_runs_reason=no_runs,
                lag_observer=None if lag is None else lag.observe,
            )
            fleet.install_signal_handlers()
            if metrics_port is not None:  # (before joining: a port in use claims nothing)
                served.append(_serve(url, fleet, lag, metrics_host, metrics_port))
            await fleet.join()  # (OwnerInUse: one line, exit 1, nothing claimed)
            say(f"replica {fleet.owner} on {display_url(url)}: lease {lease_s:g} s")
            if served:
                say(f"metrics on {served[0].url}")
            return await fleet.run(until=_idle(fleet) if until_idle else None)

    try:
        with UsageErrors(), _watches_logged():
            stats = asyncio.run(main())
    except (ValueError, FlashFsmError) as exc:
        raise fail(message(exc)) from None
    finally:
        for server in served:
            server.close()
        opened.close()
    _say_stopped(stats)


def _check_supervise_options(
    lease_s: float,
    interval_s: float,
    max_streams: int | None,
    metrics_port: int | None,
    owner: str | None,
) -> None:
    """Refuse `supervise` options out of range (a usage error, one line, before anything)."""
    for name, value, most in (
        ("--lease", lease_s, MAX_LEASE_S),
        ("--interval", interval_s, MAX_INTERVAL_S),
    ):
        if not 0 < value <= most:  # (NaN is no number in range either)
            raise fail(f"{name} must be positive and at most {most:g} seconds, not {value!r}")
    if max_streams is not None and max_streams < 1:
        raise fail(f"--max-streams must be at least 1, not {max_streams}")
    if metrics_port is not None and not 1 <= metrics_port <= MAX_PORT:
        raise fail(f"--metrics-port must be a port from 1 to {MAX_PORT}, not {metrics_port}")
    if owner:  # (it is written in every log line and lease of the replica)
        try:
            check_plain(owner, "--owner")
        except ValueError as exc:
            raise fail(str(exc)) from None


def _spec_run_adapters(opened: Any, interval_s: float) -> tuple[Any, str]:
    """The default run adapters (each run's recorded spec deployed with runpod-flash) and
    why there are none when they cannot be made (None, the reason)."""
    from flashfsm.submit import fleet_run_adapters

    try:
        return fleet_run_adapters(opened, interval_s=interval_s), _NO_RUN_ADAPTERS
    except (ImportError, ValueError) as exc:
        return None, message(exc)  # (jobs are still watched; the replica says which runs wait)


def _idle(fleet: Fleet) -> Callable[[], bool]:
    """`--until-idle`'s stop: the last heartbeat's census has no handed-off stream open and
    nothing held, but the streams this replica holds unwatched (each failed on every claim)."""
    census = lambda: fleet.stats.census  # noqa: E731
    failed = lambda: set(fleet.stats.failed_streams)  # noqa: E731
    return lambda: (
        (c := census()) is not None and c.claimable <= len(failed()) and set(fleet.held) <= failed()
    )


def _say_stopped(stats: FleetStats) -> None:
    """Say how the replica stopped: drained (its counts), or fenced (exit 8, one line)."""
    if stats.fenced:  # (a newer incarnation of its name took over: exit 8, one line)
        say(("error:", "red"), f" {_fenced_line(stats)}", err=True)
        raise typer.Exit(EXIT_FENCED)
    say(
        f"drained: {stats.claimed} claimed, {stats.finished} finished, {stats.lost} lost, "
        f"{stats.failed} failed"
    )


def _fenced_line(stats: FleetStats) -> str:
    """What a fenced replica says as it exits (one line)."""
    return (
        "fenced: a newer incarnation of this replica's name took over, and this one stopped "
        f"({stats.claimed} claimed, {stats.finished} finished, {stats.lost} lost)"
    )


def _serve(url: str, fleet: Fleet, lag: LagHistogram | None, host: str, port: int) -> MetricsServer:
    """Serve the metrics of `fleet` (this replica) and of the store at `url` on host:port;
    an address that cannot be bound is a `ValueError` naming it."""
    from flashfsm.metrics import metrics_registry, serve_metrics

    registry = metrics_registry(url, fleet=fleet, lag=lag)
    try:
        return serve_metrics(registry, host, port)
    except OSError as exc:
        raise ValueError(
            f"--metrics-port: cannot listen on {host}:{port} ({exc.strerror or exc})"
        ) from None


def runs_command(
    action: Annotated[str, typer.Argument(metavar="ACTION", help="add")],
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="A JSON job handle or run description.")
    ],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Hand a job or a run to the fleet: record it and return (`runs add FILE.json`).

    A job handle has endpoint_id and job_id; a run has run_id and candidates (as
    supervise_run takes them), and may set max_retries, budget_s, phase and seed.
    """
    if action != "add":
        raise fail(f"unknown action {action!r}: the one action is 'add'")
    try:  # the whole document is checked before the store is opened (or created)
        with file.open("rb") as handle:
            data = load_intake(handle.read(MAX_ADD_BYTES + 1))
        kind = _kind(data)
        if kind == "job":
            job_intake(data)
        elif kind == "run":
            run_intake(data)
        else:
            from flashfsm.submit import spec_intake

            spec_intake(data)
    except (OSError, ValueError) as exc:
        raise fail(f"{file}: {message(exc)}") from None
    url = store_url(store)
    opened = open_store_or_fail(url)
    try:
        with UsageErrors():
            stream, kind = _add(opened, data)
    except (ValueError, FlashFsmError, TypeError) as exc:
        raise fail(f"{file}: {message(exc)}") from None
    finally:
        opened.close()
    if as_json:
        emit_json({"store": display_url(url), "stream": stream, "kind": kind})
    else:
        say(f"{kind} handed to the fleet as {stream} in {display_url(url)}")


def _add(store: Any, data: dict[str, Any]) -> tuple[str, str]:
    """Record one hand-off from a `runs add` file: (stream, kind)."""
    from flashfsm.runs import supervise_run

    kind = _kind(data)
    if kind == "spec":  # a RunSpec (and seed, candidates, max_retries): deployed by the fleet
        from flashfsm.submit import hand_off_spec

        return hand_off_spec(data, store).stream, "run"
    if kind == "run":
        run = run_intake(data)
        result = supervise_run(
            run.run_id,
            run.candidates,
            None,  # type: ignore[arg-type]  (a hand-off deploys nothing)
            max_retries=run.max_retries,
            budget_s=run.budget_s,
            phase=run.phase,
            seed=run.seed,
            store=store,
            stream=run.stream,
            detach=True,
        )
        return result.stream, "run"
    return hand_off_job(data, store), "job"


def _kind(data: dict[str, Any]) -> str:
    """What a `runs add` document hands off: a job handle (it has `job_id`, or no
    `run_id`), a run spec (`run_id` and `gpu_class`: the fleet deploys it) or a run."""
    if "job_id" in data or "run_id" not in data:
        return "job"
    return "spec" if "gpu_class" in data else "run"
