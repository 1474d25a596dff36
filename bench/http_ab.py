"""A/B of the RunPod clients' HTTP layer in one run: CPU per poll and per request, on the code
of a baseline commit (A) and on this tree (B).

The baseline is checked out into a temporary `git worktree`; every measurement runs in a
fresh child process whose `PYTHONPATH` puts one tree or the other first, and the runs are
interleaved (A, B, B, A, ...) so the noise of a shared machine falls on both alike. The
servers run in their own processes, started once from this tree and shared by both sides,
so only the client's CPU is measured (`time.process_time()` of the child, every thread):

- `sync_poll`: `RunpodClient.job_status` against the bundled simulator
  (`python -m flashfsm.adapters.simulator`, a fleet of queued jobs, its clock standing still)
  — what `poll_job` spends on one status fetch;
- `sync_request`: the same call against a minimal keep-alive HTTP server (an asyncio one in
  its own process answering every request with a fixed status body), which leaves the
  simulator's own latency out;
- `async_poll` / `async_request`: `AsyncRunpodClient.job_status` the same two ways, with
  `--concurrency` calls in flight on one event loop (as the `Supervisor` sends them).

Each figure is µs of client CPU per call; a run reports the median of `--repeats` timed
batches of `--calls` calls (after a warm-up), and the summary the median over runs of each
side and the B / A ratio (below 1: B is cheaper).

    PYTHONPATH=.:bench python bench/http_ab.py --base 33508bf [--rounds 3] [--quick]

Not part of `bench/run.py`: it compares two trees, so it needs the git history.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ab

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: The minimal server's answer: a typical in-progress status (about 150 bytes of JSON).
STATUS = json.dumps(
    {
        "id": "bench-job-0001",
        "status": "IN_PROGRESS",
        "delayTime": 2150,
        "workerId": "bench-worker-01",
        "executionTime": 120345,
    }
).encode()
KEY = "rp_bench_http_ab_key_0123456789"
FIGURES = ("sync_poll", "sync_request", "async_poll", "async_request")


# --------------------------------------------------------------------------- servers


def _serve_raw() -> None:
    """The minimal server: HTTP/1.1 keep-alive, one fixed JSON answer to every request."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    reply = head % len(STATUS) + STATUS

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length:
                    await reader.readexactly(length)
                writer.write(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        async with server:
            await stop.wait()

    asyncio.run(main())


@contextmanager
def _servers(directory: Path) -> Iterator[dict[str, Any]]:
    """The simulator (its URL, key and a list of queued jobs) and the minimal server."""
    fleet_file = directory / "fleet.jsonl"
    log = open(directory / "simulator.log", "w")  # noqa: SIM115 - closed below
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = ["-m", "flashfsm.adapters.simulator", "--port", "0", "--speed", "0", "--fleet", "64"]
    sim = subprocess.Popen(
        [sys.executable, *argv, "--per-endpoint", "64", "--fleet-file", str(fleet_file)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    raw = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert sim.stdout is not None and raw.stdout is not None
        exports: dict[str, str] = {}
        for line in sim.stdout:
            if line.startswith("export "):
                name, _, value = line[len("export ") :].strip().partition("=")
                exports[name] = value.strip("'")
            elif line.startswith("# fleet:"):
                break
        else:
            tail = (directory / "simulator.log").read_text()[-2000:]
            raise RuntimeError(f"the simulator exited before queueing its fleet:\n{tail}")
        jobs = [json.loads(line) for line in fleet_file.read_text().splitlines()]
        yield {
            "sim_url": exports["RUNPOD_ENDPOINT_BASE_URL"],
            "sim_key": exports["RUNPOD_API_KEY"].split(",")[0],
            "jobs": [(j["endpoint_id"], j["job_id"]) for j in jobs],
            "raw_url": raw.stdout.readline().strip() + "/v2",
        }
    finally:
        for proc in (sim, raw):
            proc.send_signal(signal.SIGINT if proc is sim else signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


# --------------------------------------------------------------------------- measuring


def _median_us(batch: Callable[[], None], calls: int, repeats: int) -> float:
    """Median over `repeats` batches of the process CPU per call (µs)."""
    batch()  # warm-up: connections open, code paths hot
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        batch()
        samples.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(samples)


def _sync_us(url: str, key: str, jobs: list[tuple[str, str]], calls: int, repeats: int) -> float:
    from flashfsm.adapters.runpod import RunpodClient

    with RunpodClient(key, endpoint_base_url=url, api_base_url=url.removesuffix("/v2")) as client:

        def batch() -> None:
            for n in range(calls):
                endpoint_id, job_id = jobs[n % len(jobs)]
                client.job_status(endpoint_id, job_id)

        return _median_us(batch, calls, repeats)


def _async_us(
    url: str, key: str, jobs: list[tuple[str, str]], calls: int, repeats: int, concurrency: int
) -> float:
    from flashfsm.adapters.runpod import AsyncRunpodClient

    async def main() -> float:
        async with AsyncRunpodClient(
            key, endpoint_base_url=url, api_base_url=url.removesuffix("/v2")
        ) as client:

            async def worker(first: int) -> None:
                for n in range(first, calls, concurrency):
                    endpoint_id, job_id = jobs[n % len(jobs)]
                    await client.job_status(endpoint_id, job_id)

            async def batch() -> None:
                await asyncio.gather(*(worker(i) for i in range(concurrency)))

            await batch()  # warm-up
            samples = []
            for _ in range(repeats):
                start = time.process_time()
                await batch()
                samples.append((time.process_time() - start) / calls * 1e6)
            return statistics.median(samples)

    return asyncio.run(main())


def _child(label: str, servers: dict[str, Any], calls: int, repeats: int, concurrency: int) -> None:
    import flashfsm

    jobs = [tuple(j) for j in servers["jobs"]]
    sim, key, raw = servers["sim_url"], servers["sim_key"], servers["raw_url"]
    result: dict[str, Any] = {"tree": label, "flashfsm": str(Path(flashfsm.__file__).parent)}
    result["sync_poll"] = _sync_us(sim, key, jobs, calls, repeats)
    result["sync_request"] = _sync_us(raw, KEY, jobs, calls, repeats)
    result["async_poll"] = _async_us(sim, key, jobs, calls, repeats, concurrency)
    result["async_request"] = _async_us(raw, KEY, jobs, calls, repeats, concurrency)
    print(json.dumps(result))


def main() -> None:
    """Check the baseline out, run the interleaved comparison, print runs and the summary."""
    parser = ab.arguments(__doc__, rounds=3, quick="500 calls, 3 batches, 1 round")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=5, help="timed batches per figure")
    parser.add_argument("--concurrency", type=int, default=32, help="async calls in flight")
    parser.add_argument("--servers", help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve_raw()
        return
    if args.child:
        _child(args.child, json.loads(args.servers), args.calls, args.repeats, args.concurrency)
        return
    if args.quick:
        args.calls, args.repeats, args.rounds = 500, 3, 1
    argv = ["--calls", str(args.calls), "--repeats", str(args.repeats)]
    argv += ["--concurrency", str(args.concurrency)]
    with (
        tempfile.TemporaryDirectory(prefix="flashfsm-http-ab-") as tmp,
        ab.baseline(args.base, Path(tmp)) as base,
        _servers(Path(tmp)) as servers,
    ):
        runs = ab.interleaved(
            args.rounds,
            base,
            lambda side, tree: ab.run_child(
                __file__,
                tree,
                ["--child", side, "--servers", json.dumps(servers), *argv],
                no_proxy=True,
            ),
        )
    figures = {f"{figure} µs/call": (figure,) for figure in FIGURES}
    summary = ab.ratios(runs, figures, statistics.median, digits=1)
    config = {k: getattr(args, k) for k in ("calls", "repeats", "rounds", "concurrency")}
    report = {"base": args.base, **config, "summary": summary}
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
