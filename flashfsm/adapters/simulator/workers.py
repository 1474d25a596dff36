"""Simulated workers: which worker took a job, when the platform started it, what it printed.

A `Worker` is one container the platform started for an endpoint. Its life is recorded on
the sim clock as plain times: `started_at` (the bill starts), `picked_up_at` (it took the
job), `stopped_at` (the bill stops). Views filter by the time they are asked at: a worker is
listed while `started_at <= now < stopped_at`, so a worker whose start lies ahead (the
start-up before a scripted pickup) or whose stop was settled in advance (an idle timeout)
needs no timer of its own, and the world stays lazy (see `world.py`). A worker that goes
round states forever (a container that starts, crashes and restarts: `initializing`, then
`unhealthy`, again and again) holds its round as `cycle`, from `cycle_since`: `status_at(now)`
says where the round stands at `now`, so the list and `/health`, which both ask it, agree
at every instant, and no timer turns it.

Its log is a list of `LogLine`s in time order, written when the world replays what
happened (a start, a pickup, a heartbeat, an error, a stop), some with times ahead of the
clock (a start-up's image pull): a read keeps only the lines whose time has come. A state
that prints forever (a crash loop's restarts, a throttled worker's waits) is a `LogLoop`,
a period of lines repeated from one time to another, of which a read makes only the last
cycles it needs: a day of crash loop costs a tail no more than a minute of it.

This module holds the data and the text; `world.py` decides when things happen, and
`server.py` answers `GET /v2/serverless/{id}/workers` and `.../workers/{worker}/logs`
(Server-Sent Events, `sse_event`).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from flashfsm.events.models import END_STAGE

#: A worker starts this long before it picks its job up, unless the job's input
#: (`{"sim": {"startup_s": s}}`), its endpoint (`startup_s=`) or its scenario says otherwise.
DEFAULT_STARTUP_S = 20.0
#: The statuses `GET /v2/serverless/{id}/workers` lists (a `ready` worker lists as `idle`).
LISTED_STATES = ("running", "idle", "initializing", "throttled", "unhealthy")
#: The `tail` a log read backfills when it names none, and the most it may ask for.
LOG_TAIL_DEFAULT = 100
LOG_TAIL_MAX = 5000
LOG_SOURCES = ("container", "system")
CRASH_PERIOD_S = 30.0  # a crash-looping container restarts this often
THROTTLE_PERIOD_S = 60.0  # a throttled worker says it still waits this often
DEFAULT_IMAGE = "runpod/worker-flash:sim"
DEFAULT_GPU = "NVIDIA L40S"
DEFAULT_DATACENTER = "EU-RO-1"
#: runpod-flash's GPU pools (`gpuIds`), each as the GPU a worker of that pool gets here.
POOL_GPUS = {
    "ADA_24": "NVIDIA GeForce RTX 4090",
    "ADA_32_PRO": "NVIDIA GeForce RTX 5090",
    "ADA_48_PRO": "NVIDIA L40S",
    "ADA_80_PRO": "NVIDIA H100 80GB HBM3",
    "AMPERE_16": "NVIDIA RTX A4000",
    "AMPERE_24": "NVIDIA RTX A5000",
    "AMPERE_48": "NVIDIA A40",
    "AMPERE_80": "NVIDIA A100 80GB PCIe",
    "HOPPER_141": "NVIDIA H200",
    "BLACKWELL_96": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "BLACKWELL_180": "NVIDIA B200",
}
CRASH_TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/app/handler.py", line 7, in <module>',
    "    from trainer import build_model",
    '  File "/app/trainer.py", line 3, in <module>',
    "    import flash_attn",
    "ModuleNotFoundError: No module named 'flash_attn'",
)


class LogLine(NamedTuple):
    """One line of a worker's log: when (sim epoch seconds), which stream, what."""

    ts: float
    source: str  # "container" (the worker's stdout/stderr) or "system" (the host's)
    line: str


@dataclass(frozen=True)
class LogLoop:
    """Lines that repeat every `period` seconds from `since` until `until` (None: on).

    Each line is `(offset in the period, source, text)`; `{n}` in a text is the cycle's
    number, from 1.
    """

    since: float
    period: float
    lines: tuple[tuple[float, str, str], ...]
    until: float | None = None

    def last(self, end: float, count: int, source: str | None) -> list[LogLine]:
        """The last `count` lines at or before `end` (of one source, or both)."""
        if self.until is not None:
            end = min(end, self.until)
        per = [entry for entry in self.lines if source is None or entry[1] == source]
        if count <= 0 or not per or end < self.since:
            return []
        newest = math.floor((end - self.since) / self.period)
        first = max(0, newest - count // len(per) - 1)
        out = []
        for k in range(first, newest + 1):
            base = self.since + k * self.period
            for offset, src, text in per:
                ts = base + offset
                if ts <= end and (self.until is None or ts < self.until):
                    out.append(LogLine(ts, src, text.replace("{n}", str(k + 1))))
        return out[-count:]

    def ended(self, at: float) -> LogLoop:
        """This loop, stopped at `at`."""
        until = at if self.until is None else min(self.until, at)
        return LogLoop(self.since, self.period, self.lines, until)


@dataclass(eq=False)
class Worker:
    """One worker of an endpoint: its life on the sim clock and its log."""

    id: str
    endpoint_id: str
    job_id: str | None  # the job it was started for (None: a standing worker set by a test)
    status: str  # its state since its last change (health words: `ready` included)
    started_at: float
    version: int  # the endpoint's configuration version it started with
    gpu_type: str = DEFAULT_GPU
    datacenter: str = DEFAULT_DATACENTER
    gpu_count: int = 1
    image: str = DEFAULT_IMAGE
    picked_up_at: float | None = None
    stopped_at: float | None = None
    stop_reason: str | None = None
    #: The states it goes round from `cycle_since`, each `(state, seconds)`; () while its
    #: state changes only when the world changes it (`status`).
    cycle: tuple[tuple[str, float], ...] = ()
    cycle_since: float = 0.0
    log: list[LogLine] = field(default_factory=list, repr=False)
    loops: list[LogLoop] = field(default_factory=list, repr=False)

    def status_at(self, now: float) -> str:
        """Its state at `now` (health words: `ready` included): where its `cycle` stands
        then, else `status`. A phase's end belongs to the next phase."""
        if not self.cycle or now < self.cycle_since:
            return self.status
        offset = (now - self.cycle_since) % sum(span for _, span in self.cycle)
        for state, span in self.cycle:
            if offset < span:
                return state
            offset -= span
        return self.cycle[-1][0]  # float rounding at the round's very end

    def listed(self, now: float) -> bool:
        """True while the platform lists the worker: started, and not stopped yet."""
        return self.started_at <= now and (self.stopped_at is None or now < self.stopped_at)

    def say(self, at: float, source: str, text: str) -> None:
        """Write `text` (one line per line of it) to the log at `at`."""
        for line in str(text).splitlines() or [""]:
            bisect.insort_right(self.log, LogLine(at, source, line), key=lambda x: x.ts)

    def loop(self, since: float, period: float, lines: Iterable[tuple[float, str, str]]) -> None:
        """Start printing `lines` every `period` seconds from `since`."""
        self.end_loops(since)
        self.loops.append(LogLoop(since, period, tuple(lines)))

    def end_loops(self, at: float) -> None:
        """Stop every repeating part of the log at `at`."""
        self.loops = [loop.ended(at) for loop in self.loops]

    def cut(self, at: float) -> None:
        """Forget what the log would have said after `at` (the worker stops, or its job
        ended before the start-up written ahead was over)."""
        self.log = [line for line in self.log if line.ts <= at]
        self.end_loops(at)

    def tail(self, now: float, count: int, source: str | None = None) -> list[LogLine]:
        """The last `count` lines written by `now` (of one source, or both), oldest first."""
        if count <= 0:
            return []
        end = bisect.bisect_right(self.log, now, key=lambda x: x.ts)
        lines = [x for x in self.log[:end] if source is None or x.source == source][-count:]
        for loop in self.loops:
            lines += loop.last(now, count, source)
        lines.sort(key=lambda x: x.ts)
        return lines[-count:]

    def answer(self, now: float, endpoint_version: int) -> dict[str, Any]:
        """The worker as `GET /v2/serverless/{id}/workers` lists it."""
        status = self.status_at(now)
        return {
            "id": self.id,
            "status": "idle" if status == "ready" else status,
            "gpuTypeId": self.gpu_type,
            "dataCenterId": self.datacenter,
            "startedAt": rfc3339(self.started_at),
            "uptimeSeconds": max(0, int(now - self.started_at)),
            "gpuCount": self.gpu_count,
            "isStale": self.version != endpoint_version,
            "version": self.version,
            "image": self.image,
        }

    def record(self, now: float) -> dict[str, Any]:
        """The worker's life as the simulator knows it (for tests that check a bill)."""
        if self.started_at > now:
            state = "starting"
        elif self.stopped_at is not None and self.stopped_at <= now:
            state = "stopped"
        else:
            state = self.status_at(now)
        return {
            "id": self.id,
            "endpoint_id": self.endpoint_id,
            "job_id": self.job_id,
            "status": state,
            "started_at": self.started_at,
            "picked_up_at": self.picked_up_at,
            "stopped_at": self.stopped_at if state == "stopped" else None,
            "stop_reason": self.stop_reason if state == "stopped" else None,
        }


def listing(workers: Iterable[Worker], now: float, endpoint_version: int) -> dict[str, Any]:
    """RunPod's `ListEndpointWorkersResponse` for the workers listed at `now`."""
    answers = [w.answer(now, endpoint_version) for w in workers if w.listed(now)]
    summary = dict.fromkeys(LISTED_STATES, 0)
    for answer in answers:
        summary[answer["status"]] = summary.get(answer["status"], 0) + 1
    summary["total"] = len(answers)
    return {"workers": answers, "summary": summary, "endpointVersion": endpoint_version}


def gpu_of(gpu_ids: Any) -> str:
    """The GPU a worker of an endpoint gets: the first pool or type its `gpuIds` allows."""
    if isinstance(gpu_ids, str):
        for entry in gpu_ids.split(","):
            entry = entry.strip()
            if entry and not entry.startswith("-") and entry.lower() != "any":
                return POOL_GPUS.get(entry, entry)
    return DEFAULT_GPU


# ---------------------------------------------------------------------- what a worker prints


def startup_lines(worker: Worker, ready_at: float) -> list[tuple[float, str, str]]:
    """A start-up from `worker.started_at` to `ready_at`: the host's image pull and
    container start, then the worker runtime's first line."""
    start = worker.started_at
    span = max(0.0, ready_at - start)
    created = f"worker {worker.id} created on {worker.datacenter}: "
    created += f"{worker.gpu_count} x {worker.gpu_type}"
    return [
        (start, "system", created),
        (start, "system", f"pulling image {worker.image}"),
        (start + 0.6 * span, "system", f"image {worker.image} pulled"),
        (start + 0.8 * span, "system", "starting container"),
        (start + 0.9 * span, "container", "--- Starting Serverless Worker | simulated ---"),
        (ready_at, "container", "worker ready; waiting for jobs"),
    ]


def crash_loop_lines() -> list[tuple[float, str, str]]:
    """One cycle of a crash loop: the container starts, its import fails, it exits."""
    return [
        (0.0, "system", "starting container (attempt {n})"),
        *((2.0, "container", text) for text in CRASH_TRACEBACK),
        (3.0, "system", "container exited with code 1; restarting (attempt {n} crashed)"),
    ]


def cycle_lines(worker: Worker, cycle: Iterable[tuple[str, float]]) -> list[tuple[float, str, str]]:
    """One round of a worker that goes round `cycle` (`(state, seconds)` phases), as a
    `LogLoop`'s lines: what it prints as it enters each phase. A container restarts as it
    turns `initializing` and crashes as it turns `unhealthy` (the crash's count is `{n}`,
    the round's number); a `throttled` phase waits for its host; another state is named."""
    lines: list[tuple[float, str, str]] = []
    offset = 0.0
    for state, span in cycle:
        if state == "initializing":
            lines.append((offset, "system", "restarting container"))
        elif state == "unhealthy":
            lines += [(offset, "container", text) for text in CRASH_TRACEBACK]
            exited = f"container exited with code 1 (crash {{n}}); restarting in {span:g} s"
            lines.append((offset, "system", exited))
        elif state == "throttled":
            lines += [(offset + at, source, text) for at, source, text in throttle_lines(worker)]
        else:
            lines.append((offset, "system", f"worker {state}"))
        offset += span
    return lines


def throttle_lines(worker: Worker) -> list[tuple[float, str, str]]:
    """One cycle of a throttled worker's wait for its host's GPU."""
    waiting = f"waiting for capacity: no {worker.gpu_type} free on the host (throttled)"
    return [(0.0, "system", waiting)]


def heartbeat_line(heartbeat: Any) -> str:
    """The line a training worker prints when it writes a heartbeat."""
    if not isinstance(heartbeat, dict):
        return "heartbeat written"
    stage, step = heartbeat.get("stage"), heartbeat.get("step")
    if stage == "boot":
        return "boot: loading the model and the datasets"
    if stage == "train" and isinstance(step, int):
        return f"train step {step}: loss {2.0 / (1 + step / 50):.4f}"
    if stage == END_STAGE:  # the end record
        return f"training done at step {step}; metrics written"
    return f"{stage}: step {step}" if step is not None else f"{stage}"


def error_lines(error: Any) -> list[str]:
    """What a worker printed for a job's `error` (a JSON error's traceback when it has one)."""
    if isinstance(error, str):
        try:
            parsed = json.loads(error)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error_traceback"), str):
            return parsed["error_traceback"].splitlines()
        return error.splitlines() or [""]
    return [json.dumps(error)] if error is not None else []


def output_error_lines(output: Any) -> list[str]:
    """What a worker printed for a COMPLETED output that carries an error (and stdout)."""
    if not isinstance(output, dict) or output.get("error") is None:
        return []
    lines = []
    if isinstance(output.get("stdout"), str):
        lines += output["stdout"].splitlines()
    lines += error_lines(output["error"])
    return lines


# ---------------------------------------------------------------------- the log route's wire


def rfc3339(ts: float) -> str:
    """Epoch seconds as RFC 3339 UTC, fractions only when there are any
    (`2026-03-26T00:00:00Z`, `2026-03-26T00:00:00.25Z`)."""
    moment = datetime.fromtimestamp(ts, UTC)
    whole = moment.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


def sse_event(line: LogLine) -> bytes:
    """One log line as one Server-Sent Event: `id: <ts>`, `data: {source, line, ts}`, blank."""
    ts = rfc3339(line.ts)
    data = json.dumps({"source": line.source, "line": line.line, "ts": ts}, ensure_ascii=False)
    return f"id: {ts}\ndata: {data}\n\n".encode()


def flood_events(start: float, size_bytes: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """Filler log events, `chunk` bytes at a time, until `size_bytes` were made (a huge log
    that is never held whole)."""
    made, n = 0, 0
    pad = "x" * 160
    while made < size_bytes:
        parts = []
        size = 0
        while size < chunk and made + size < size_bytes:
            event = sse_event(LogLine(start, "container", f"flood line {n:09d} {pad}"))
            parts.append(event)
            size += len(event)
            n += 1
        made += size
        yield b"".join(parts)


def live_events(clock: Any) -> Iterator[bytes]:
    """Endless live log events stamped with `clock()` (a trickling stream's tail)."""
    n = 0
    while True:
        n += 1
        yield sse_event(LogLine(clock(), "container", f"live line {n}"))
