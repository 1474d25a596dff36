"""Run the simulator until interrupted: `python -m flashfsm.adapters.simulator --speed 60`."""

from __future__ import annotations

import argparse
import contextlib
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
    args = parser.parse_args(argv)
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
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
