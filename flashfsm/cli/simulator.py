"""`flashfsm simulator`: serve the RunPod + Hugging Face simulator in its own process.

Its options' help and defaults are the simulator's own (`serve.HELP`, `serve.ServeOptions`,
shared with `python -m flashfsm.adapters.simulator`), so this module loads the simulator's
server: a module of its own, loaded only when this command runs.
"""

from __future__ import annotations

import inspect
import sys
from typing import Annotated

import typer

from flashfsm.adapters.simulator import serve
from flashfsm.cli.common import fail
from flashfsm.cli.ui import PORT_HINT

_SERVE = serve.ServeOptions()  # the defaults, shared with `python -m`


def simulator_command(
    port: Annotated[int, typer.Option(help=serve.HELP["port"])] = _SERVE.port,
    speed: Annotated[float, typer.Option(help=serve.HELP["speed"])] = _SERVE.speed,
    scenario: Annotated[str, typer.Option(help=serve.HELP["scenario"])] = _SERVE.scenario,
    key: Annotated[list[str] | None, typer.Option("--key", help=serve.HELP["key"])] = None,
    quota: Annotated[int, typer.Option(help=serve.HELP["quota"])] = _SERVE.quota,
    fleet: Annotated[int, typer.Option(help=serve.HELP["fleet"])] = _SERVE.fleet,
    per_endpoint: Annotated[
        int, typer.Option(help=serve.HELP["per_endpoint"])
    ] = _SERVE.per_endpoint,
    fleet_file: Annotated[str | None, typer.Option(help=serve.HELP["fleet_file"])] = None,
    fault: Annotated[list[str] | None, typer.Option("--fault", help=serve.HELP["fault"])] = None,
) -> None:
    """Serve the RunPod + Hugging Face simulator for an orchestrator's tests, in another
    process, until Ctrl-C. It prints the `export NAME=value` lines that point the RunPod SDKs,
    runpod-flash, flashfsm and huggingface_hub at it (the RunPod key included: a test key
    of the simulator's own), then what it serves."""
    options = serve.ServeOptions(
        port=port,
        speed=speed,
        scenario=scenario,
        keys=tuple(key or _SERVE.keys),
        quota=quota,
        fleet=fleet,
        per_endpoint=per_endpoint,
        fleet_file=fleet_file,
        faults=tuple(fault or ()),
    )

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        serve.serve(options, out)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        if exc.filename is not None:  # (the --fleet-file, not the port)
            raise fail(f"{exc.filename}: {exc.strerror or exc}") from None
        raise fail(
            f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc} ({PORT_HINT})"
        ) from None


simulator_command.__doc__ = (
    f"{inspect.cleandoc(simulator_command.__doc__ or '')}\n\n{serve.help_epilog()}"
)
