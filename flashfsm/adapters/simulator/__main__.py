"""Run the simulator until interrupted: `python -m flashfsm.adapters.simulator --speed 60`.

`--fleet N` starts it with N jobs already queued (on endpoints of `--per-endpoint` jobs each,
running `--scenario`) and writes one JSON line per job, `{"endpoint_id", "endpoint_name",
"job_id"}`, to `--fleet-file` (or stdout): what a load test of a supervisor needs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import threading

from flashfsm.adapters.simulator.server import DEFAULT_KEY, Simulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashfsm.adapters.simulator")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--speed", type=float, default=1.0, help="sim seconds per real second")
    parser.add_argument("--scenario", default="success", help="default job scenario")
    parser.add_argument("--key", action="append", help=f"accepted API key (default {DEFAULT_KEY})")
    parser.add_argument("--quota", type=int, default=5, help="workers per account")
    parser.add_argument("--fleet", type=int, default=0, help="jobs to queue at start")
    parser.add_argument("--per-endpoint", type=int, default=50, help="fleet jobs per endpoint")
    parser.add_argument("--fleet-file", help="where to write the fleet's jobs (default stdout)")
    args = parser.parse_args(argv)
    if args.fleet < 0 or args.per_endpoint < 1:
        parser.error("--fleet must be >= 0 and --per-endpoint >= 1")
    sim = Simulator(
        port=args.port,
        speed=args.speed,
        default_scenario=args.scenario,
        api_keys=tuple(args.key or (DEFAULT_KEY,)),
        worker_quota=args.quota,
        record=False,
    )
    with sim:
        for name, value in sim.env().items():
            print(f"export {name}={shlex.quote(value)}")
        print(f"# simulator on {sim.url}; scenarios: {', '.join(sorted(sim.scenarios))}")
        if args.fleet:
            lines = _queue_fleet(sim, args.fleet, args.per_endpoint, args.scenario)
            if args.fleet_file:
                with open(args.fleet_file, "w") as f:
                    f.writelines(line + "\n" for line in lines)
                print(f"# fleet: {args.fleet} jobs in {args.fleet_file}")
            else:
                print("\n".join(lines))
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


def _queue_fleet(sim: Simulator, jobs: int, per_endpoint: int, scenario: str) -> list[str]:
    """Queue `jobs` jobs of `scenario`, `per_endpoint` to an endpoint; one JSON line each."""
    lines: list[str] = []
    endpoint_id = name = ""
    for n in range(jobs):
        if n % per_endpoint == 0:
            name = f"flash-fleet-{n // per_endpoint}"
            endpoint_id = sim.add_endpoint(name, check_quota=False)
        job_id = sim.submit(endpoint_id, {"scenario": scenario})
        lines.append(
            json.dumps({"endpoint_id": endpoint_id, "endpoint_name": name, "job_id": job_id})
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
