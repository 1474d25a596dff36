"""The simulator as a process, for an orchestrator's tests in another process: what
`flashfsm simulator` (and its delegate `python -m flashfsm.adapters.simulator`) runs.

`serve(options, out)` starts a `Simulator` on 127.0.0.1, writes through `out` the
`export NAME=value` lines that point the RunPod SDKs, runpod-flash, flashfsm and
huggingface_hub at it (shell-quoted, the accepted RunPod key included: it is one of the
simulator's own test keys, never a real one), then `# ` comment lines saying what it
serves: its URL and clock, its accounts, the scenarios a job can ask for and the faults
it injects. Then it serves until interrupted. With `fleet > 0` it first queues that many
jobs and writes one JSON line per job (`{"endpoint_id", "endpoint_name", "job_id"}`) to
`fleet_file` (then a `# fleet: …` line) or to `out`: what a load test of a supervisor
needs.

Faults come from the command line as `ROUTE=KIND[,times=N][,after=N][,retry_after=S]
[,delay_s=S][,handled=1]` (`parse_fault`), e.g. `status=429,times=3,retry_after=2`: the
module notes of `faults.py` say what each kind does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import signal
import textwrap
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flashfsm.adapters.simulator.faults import _ALIASES, KINDS, Fault
from flashfsm.adapters.simulator.scenarios import builtin_scenarios
from flashfsm.adapters.simulator.server import DEFAULT_KEY, Simulator

DEFAULT_PORT = 8765

#: Route names a fault can name (`graphql:<rootField>` names one GraphQL operation).
FAULT_ROUTES: tuple[str, ...] = (
    "*",
    "run",
    "runsync",
    "status",
    "cancel",
    "retry",
    "health",
    "purge_queue",
    "graphql",
    "list_endpoints",
    "get_endpoint",
    "update_endpoint",
    "delete_endpoint",
    "list_workers",
    "worker_logs",
    "list_volumes",
    "create_volume",
    "get_volume",
    "delete_volume",
    "hub_resolve",
    "hub_telemetry",
)
FAULT_KINDS_TEXT = (
    "an HTTP status (429, 500, 503, …), "
    + ", ".join(sorted(KINDS - {"status"}))
    + ", or an alias ("
    + ", ".join(sorted(_ALIASES))
    + ")"
)
FAULT_SYNTAX = (
    "ROUTE=KIND[,times=N|always][,after=N][,retry_after=S][,delay_s=S][,handled=1]"
    "[,size_bytes=N][,gzip=1]"
)

#: Each option's help, shared by both command lines.
HELP = {
    "port": "Port on 127.0.0.1 (0: any free one).",
    "speed": (
        "Simulated seconds per real second (60: a scripted hour in a minute). "
        "0: a manual clock that only moves when a client POSTs /_sim/clock "
        '{"advance": <seconds>} (GET /_sim/clock reads it).'
    ),
    "scenario": "The scenario a job runs when its input names none.",
    "key": (
        f"A RunPod API key the simulator accepts, one account each; repeat for several "
        f"(default {DEFAULT_KEY}). These are test keys: they are printed."
    ),
    "quota": "Workers per account (a deploy beyond it is refused, as RunPod does).",
    "fleet": "Jobs to queue at start (a load test's fleet).",
    "per_endpoint": "Fleet jobs per endpoint.",
    "fleet_file": "Where to write the fleet's jobs, one JSON line each (default: stdout).",
    "fault": "Inject a fault: ROUTE=KIND[,setting=value…]; repeatable (see Faults).",
}


@dataclass(frozen=True)
class ServeOptions:
    """What `serve` starts (the command line's options)."""

    port: int = DEFAULT_PORT
    speed: float = 1.0
    scenario: str = "success"
    keys: tuple[str, ...] = (DEFAULT_KEY,)
    quota: int = 5
    fleet: int = 0
    per_endpoint: int = 50
    fleet_file: str | None = None
    faults: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise `ValueError` naming the first option that cannot work."""
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be 0..65535, got {self.port}")
        if self.speed < 0:
            raise ValueError(f"--speed must be >= 0, got {self.speed:g}")
        if self.scenario not in builtin_scenarios():
            raise ValueError(
                f"unknown --scenario {self.scenario!r} (known: {', '.join(builtin_scenarios())})"
            )
        if not self.keys or any(not key.strip() or "," in key for key in self.keys):
            raise ValueError("--key must be a non-empty key without commas")
        if self.quota < 0:
            raise ValueError(f"--quota must be >= 0, got {self.quota}")
        if self.fleet < 0 or self.per_endpoint < 1:
            raise ValueError("--fleet must be >= 0 and --per-endpoint >= 1")
        for spec in self.faults:
            parse_fault(spec)


def parse_fault(spec: str) -> Fault:
    """A `Fault` from its command-line form (see the module notes); `ValueError` if bad."""
    head, *rest = [part.strip() for part in spec.split(",")]
    route, sep, kind = head.partition("=")
    route, kind = route.strip(), kind.strip()
    if not sep or not route or not kind:
        raise ValueError(f"--fault {spec!r}: expected {FAULT_SYNTAX}")
    if route not in FAULT_ROUTES and not route.startswith("graphql:"):
        raise ValueError(f"--fault {spec!r}: unknown route {route!r} ({', '.join(FAULT_ROUTES)})")
    kw: dict[str, Any] = {}
    for part in rest:
        name, sep, value = part.partition("=")
        try:
            if name == "times":
                kw["times"] = None if value in ("always", "forever") else int(value)
            elif name == "after":
                kw["after"] = int(value)
            elif name == "retry_after":
                float(value)  # seconds, sent in the header as written
                kw[name] = value.strip()
            elif name == "delay_s":
                kw[name] = float(value)
            elif name in ("handled", "gzip"):
                kw[name] = value.lower() in ("1", "true", "yes")
            elif name == "size_bytes":
                kw[name] = int(value)
            else:
                raise ValueError(f"unknown setting {name!r}")
        except ValueError as exc:
            raise ValueError(f"--fault {spec!r}: {exc}") from None
    times = kw.get("times", 1)
    if (times is not None and times < 1) or kw.get("after", 0) < 0:
        raise ValueError(f"--fault {spec!r}: times must be >= 1 and after >= 0")
    try:
        return Fault(route, kind, **kw)
    except ValueError as exc:
        raise ValueError(f"--fault {spec!r}: {exc}") from None


def help_epilog() -> str:
    """The scenarios and the faults, as the command's help lists them."""
    names = ", ".join(builtin_scenarios())
    return (
        f'Scenarios (a job\'s input {{"scenario": NAME}} picks one, else --scenario): {names}.'
        f"\n\nFaults (--fault, repeatable): {FAULT_SYNTAX}. KIND is {FAULT_KINDS_TEXT}; "
        f"ROUTE is {', '.join(FAULT_ROUTES)} (* is every route) or graphql:<operation>. "
        "E.g. --fault status=429,times=3,retry_after=2 or --fault health=reset,times=always."
    )


def export_lines(env: dict[str, str]) -> list[str]:
    """`export NAME=value` lines, shell-quoted, in the order given."""
    return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]


def describe(sim: Simulator, options: ServeOptions) -> list[str]:
    """What a running simulator serves, as `# ` comment lines (safe to paste into a shell)."""
    clock = (
        'a manual clock: POST /_sim/clock {"advance": <s>} moves it, GET /_sim/clock reads it'
        if sim.clock.manual
        else f"its clock runs {sim.clock.speed:g}x real time"
    )
    keys = ", ".join(a.key for a in sim.accounts)
    lines = [
        f"# flashfsm simulator on {sim.url}; {clock}",
        f"# accepted RunPod keys (test keys, one account of {options.quota} workers each): {keys}",
        "# GET /_sim/usage: every endpoint created (deleted ones too), its jobs, every worker"
        " and the worker-seconds billed",
        '# a job runs the scenario its input names ({"scenario": NAME}), else its endpoint\'s,'
        f" else {options.scenario!r}:",
    ]
    width = max(len(name) for name in sim.scenarios)
    lines += [f"#   {name:<{width}}  {s.description}" for name, s in sim.scenarios.items()]
    lines += [
        f"# faults (--fault {FAULT_SYNTAX}):",
        f"#   kinds: {FAULT_KINDS_TEXT}",
        f"#   routes: {', '.join(FAULT_ROUTES)}, graphql:<operation>",
    ]
    for fault in sim.faults.faults:
        times = "always" if fault.times is None else f"{fault.times} time(s)"
        what = f"{fault.status}" if fault.kind == "status" else fault.kind
        lines.append(f"#   active: {fault.route} -> {what}, {times} after {fault.after}")
    return lines


def serve(
    options: ServeOptions,
    out: Callable[[str], Any],
    *,
    stop: threading.Event | None = None,
) -> None:
    """Run a simulator until `stop` is set or the process is interrupted (Ctrl-C, SIGTERM).

    Raises `ValueError` for options that cannot work and `OSError` when the port is taken.
    """
    options.check()
    sim = Simulator(
        port=options.port,
        speed=options.speed,
        default_scenario=options.scenario,
        api_keys=options.keys,
        worker_quota=options.quota,
        record=False,
    )
    for spec in options.faults:
        sim.faults.add(parse_fault(spec))
    with sim:
        for line in export_lines(sim.env()):
            out(line)
        for line in describe(sim, options):
            out(line)
        if options.fleet:
            jobs = queue_fleet(sim, options.fleet, options.per_endpoint, options.scenario)
            if options.fleet_file:
                with open(options.fleet_file, "w") as f:
                    f.writelines(line + "\n" for line in jobs)
                out(f"# fleet: {options.fleet} jobs in {options.fleet_file}")
            else:
                for line in jobs:
                    out(line)
        out("# serving; Ctrl-C stops it")
        stop = stop or threading.Event()
        previous = None
        if threading.current_thread() is threading.main_thread():  # SIGTERM: a clean stop too
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def queue_fleet(sim: Simulator, jobs: int, per_endpoint: int, scenario: str) -> list[str]:
    """Queue `jobs` jobs of `scenario`, `per_endpoint` to an endpoint (whose `workersMax`
    is `per_endpoint`: every job has a worker, none waits for another's); one JSON line
    each."""
    lines: list[str] = []
    endpoint_id = name = ""
    for n in range(jobs):
        if n % per_endpoint == 0:
            name = f"flash-fleet-{n // per_endpoint}"
            endpoint_id = sim.add_endpoint(name, check_quota=False, workers_max=per_endpoint)
        job_id = sim.submit(endpoint_id, {"scenario": scenario})
        lines.append(
            json.dumps({"endpoint_id": endpoint_id, "endpoint_name": name, "job_id": job_id})
        )
    return lines


def parse_args(argv: Sequence[str] | None = None) -> ServeOptions:
    """`python -m flashfsm.adapters.simulator`'s command line (the options of
    `flashfsm simulator`), as `ServeOptions`."""
    parser = argparse.ArgumentParser(
        prog="python -m flashfsm.adapters.simulator",
        description="Serve the RunPod + Hugging Face simulator (the same as `flashfsm simulator`).",
        epilog="\n\n".join(textwrap.fill(part, 79) for part in help_epilog().split("\n\n")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = ServeOptions()
    parser.add_argument("--port", type=int, default=defaults.port, help=HELP["port"])
    parser.add_argument("--speed", type=float, default=defaults.speed, help=HELP["speed"])
    parser.add_argument("--scenario", default=defaults.scenario, help=HELP["scenario"])
    parser.add_argument("--key", action="append", help=HELP["key"])
    parser.add_argument("--quota", type=int, default=defaults.quota, help=HELP["quota"])
    parser.add_argument("--fleet", type=int, default=defaults.fleet, help=HELP["fleet"])
    parser.add_argument(
        "--per-endpoint", type=int, default=defaults.per_endpoint, help=HELP["per_endpoint"]
    )
    parser.add_argument("--fleet-file", help=HELP["fleet_file"])
    parser.add_argument("--fault", action="append", help=HELP["fault"])
    args = parser.parse_args(argv)
    options = ServeOptions(
        port=args.port,
        speed=args.speed,
        scenario=args.scenario,
        keys=tuple(args.key or defaults.keys),
        quota=args.quota,
        fleet=args.fleet,
        per_endpoint=args.per_endpoint,
        fleet_file=args.fleet_file,
        faults=tuple(args.fault or ()),
    )
    try:
        options.check()
    except ValueError as exc:
        parser.error(str(exc))
    return options
