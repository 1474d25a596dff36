"""`flashfsm logs`: the worker log lines a job's stream recorded, with the worker that took
the job (a run: each attempt's job).

`logs` prints every recorded line (or the last `--lines N`), each whole; `explain` prints the
last `EXPLAIN_LOG_LINES` beside its verdict. How they are printed, escaped on their own
gutter lines, is `flashfsm.display.workers`'s.

`logs --fetch` also reads the worker's live log from RunPod (`RunpodClient.worker_log`,
`RUNPOD_API_KEY` from the environment): printed, masked (`flashfsm.redact.redact`), never
recorded. `logs` is a read command: its store is opened read-only, nothing is written.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from flashfsm.cli.common import (
    JsonOption,
    StoreOption,
    UsageErrors,
    emit_json,
    fail,
    open_source,
)
from flashfsm.display.text import say
from flashfsm.display.workers import (
    JobWorker,
    job_worker,
    log_line_text,
    print_worker,
    run_job_workers,
    say_log_line,
)
from flashfsm.events.models import WatchStarted
from flashfsm.live_log import (
    FETCH_TAIL_DEFAULT,
    LiveLogUnavailable,
    live_log_target,
    read_live_log,
)
from flashfsm.views import stream_kind


def _no_log_reason(job: JobWorker) -> str:
    """Why a job log holds no worker log, as a parenthesis."""
    if not job.events:
        return " (its log is empty or missing)"
    watches = [e for e in job.events if isinstance(e, WatchStarted)]
    if not any(w.has_worker_reader for w in watches):
        return " (no worker reader: the watch read no worker records)"
    v = job.verdict
    if v is None:
        return " (no verdict yet: the log is read before a failed, preempted or stalled verdict)"
    if v.ok or v.failure not in ("job_failed", "job_preempted", "stalled"):
        return f" (its verdict, {v.state}, is not one a worker log is read for)"
    return ""


# --- flashfsm logs --------------------------------------------------------------------------


def logs_command(
    source: Annotated[
        str,
        typer.Argument(
            metavar="STREAM", help="A job or run stream of the store, or a .jsonl file."
        ),
    ],
    store: StoreOption = None,
    as_json: JsonOption = False,
    lines: Annotated[
        int | None,
        typer.Option(
            "--lines",
            metavar="N",
            min=1,
            help="Only the last N lines of each log (default: every recorded line).",
        ),
    ] = None,
    fetch: Annotated[
        bool,
        typer.Option(
            "--fetch",
            help="Also read the worker's live log from RunPod (RUNPOD_API_KEY from the "
            "environment): printed, masked, never recorded.",
        ),
    ] = False,
) -> None:
    """The worker log lines a job's stream recorded before its verdict, with the worker that
    took the job (a run: each attempt's job). Only reads."""
    src = open_source(source, store)
    kind = stream_kind(src.events)
    if kind == "sweeper":
        raise fail(f"{src.name} is a sweeper stream: it records no worker log")
    with UsageErrors():
        jobs = run_job_workers(src) if kind == "run" else [job_worker(src.name, src.events)]
    fetched = _fetch(jobs, lines) if fetch else None
    with_log = [j for j in jobs if j.log is not None]
    note = None if with_log else _nothing(src.name, kind, jobs)
    if as_json:
        out: dict[str, Any] = {
            "stream": src.name,
            "kind": kind,
            "found": bool(with_log),
            "message": note,
            "jobs": [j.json(lines) for j in jobs],
        }
        if fetch:
            out["fetched"] = fetched
        emit_json(out)
        raise typer.Exit(0)
    if note is not None:
        say(note)
    for job in jobs:
        if job.log is not None:
            say(job.label())
            print_worker(job.worker, job.log, limit=lines, chars=None)
        elif note is None:  # a run's other attempts: one line each
            say(f"{job.label()}: no worker log recorded{_no_log_reason(job)}")
    if fetched is not None:
        _print_fetched(fetched)
    raise typer.Exit(0)


def _nothing(name: str, kind: str, jobs: list[JobWorker]) -> str:
    """The one line that says a stream holds no worker log, and why."""
    if kind == "run":
        if not jobs:
            return f"run {name}: no worker log recorded (no attempt queued a job)"
        reasons = {_no_log_reason(j) for j in jobs}
        why = reasons.pop() if len(reasons) == 1 else ""
        return f"run {name}: no worker log recorded by any of its {len(jobs)} job(s){why}"
    return f"{name}: no worker log recorded{_no_log_reason(jobs[0])}"


def _fetch(jobs: list[JobWorker], lines: int | None) -> dict[str, Any]:
    """The live log of the latest job's worker, from RunPod: masked, never recorded."""
    try:
        target = live_log_target((j.stream, j.events) for j in jobs)
        return read_live_log(target, tail=lines or FETCH_TAIL_DEFAULT).json()
    except LiveLogUnavailable as exc:
        raise fail(f"--fetch: {exc}") from None


def _print_fetched(fetched: dict[str, Any]) -> None:
    cut = "; the read stopped at its bound" if fetched["truncated"] else ""
    say(
        f"live log of worker {fetched['worker_id']} on endpoint {fetched['endpoint_id']} "
        f"({fetched['stream']}; read now, not recorded): {len(fetched['lines'])} line(s){cut}"
    )
    for line in fetched["lines"]:
        say_log_line(log_line_text(line))
