"""The transport decision: the fleet supervisor on `AsyncH11Transport` versus plain httpx.

Runs `fleet.run_supervisor` (one `Supervisor`, one `AsyncRunpodClient`, a simulator in its
own process) once per transport per round, interleaved (h11, httpx, h11, httpx, ...) so the
noise of a shared machine falls on both alike, each run in a fresh child process. The
`httpx` side passes `transport=httpx.AsyncHTTPTransport()` to the client, which is how any
caller gets httpx's default transport and client layer; nothing in the library changes.

    PYTHONPATH=.:bench python bench/transport.py --jobs 2500 --window 40 --rounds 2

prints one JSON line per run and a summary (the CPU of every run, the mean per transport and
the ratio httpx / h11). Not part of `bench/run.py`: it is a one-off decision aid.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TRANSPORTS = ("h11", "httpx")


def _child(transport: str, jobs: int, window_s: float) -> None:
    import fleet
    import httpx

    from flashfsm.adapters.runpod import AsyncRunpodClient

    if transport == "httpx":

        class _PlainHttpx(AsyncRunpodClient):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.setdefault("transport", httpx.AsyncHTTPTransport())
                super().__init__(*args, **kwargs)

        fleet.AsyncRunpodClient = _PlainHttpx  # type: ignore[misc]
    with tempfile.TemporaryDirectory(prefix="flashfsm-transport-") as tmp:
        result = fleet.run_supervisor(jobs, window_s, Path(tmp))
    result["transport"] = transport
    print(json.dumps(result))


def _run_child(transport: str, jobs: int, window_s: float) -> dict[str, Any]:
    env = dict(os.environ)
    here = Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent), str(here)])
    argv = [sys.executable, __file__, "--child", transport, "--jobs", str(jobs)]
    out = subprocess.run(
        [*argv, "--window", str(window_s)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run the interleaved comparison and print every run and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2500)
    parser.add_argument("--window", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=TRANSPORTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.jobs, args.window)
        return
    cpu: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    for _ in range(args.rounds):
        for transport in TRANSPORTS:
            result = _run_child(transport, args.jobs, args.window)
            cpu[transport].append(result["cpu"])
            print(json.dumps(result), flush=True)
    means = {t: sum(v) / len(v) for t, v in cpu.items()}
    summary = {"cpu": cpu, "mean": means, "ratio_httpx_over_h11": means["httpx"] / means["h11"]}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
