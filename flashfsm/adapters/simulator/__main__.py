"""`python -m flashfsm.adapters.simulator`: the same simulator as `flashfsm simulator`.

A thin delegate to `flashfsm.adapters.simulator.serve` (the one implementation, with the
same options), kept for what launches the simulator as a plain Python module (the fleet
benchmark does).
"""

from __future__ import annotations

import sys

from flashfsm.adapters.simulator.serve import parse_args, serve


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until interrupted; the exit code."""
    options = parse_args(argv)

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        serve(options, out)
    except OSError as exc:
        sys.stderr.write(f"error: cannot serve on 127.0.0.1:{options.port}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
