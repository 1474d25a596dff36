"""The worker's own records as the front ends show them: who took the job and the worker's
last log lines, as `explain` prints them beside its verdict and `logs` alone (`print_worker`),
and as JSON; and the worker evidence of each job a stream stands for (`JobWorker`).

A watch with a worker reader records who took the job (`WorkerObserved`) and, before a
failed, preempted or stalled verdict, the worker's last log lines (`WorkerLogObserved`);
`flashfsm.fsm.findings.worker_evidence` says what a job log holds. The lines are outside
text: each is printed on its own gutter line, its line breaks and every unprintable
character escaped (`styled`), so a worker's log can neither move the cursor nor fake a line
of ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.text import Text

from flashfsm.display.logs import verdict_json
from flashfsm.display.sources import Source
from flashfsm.display.text import console, say, styled
from flashfsm.events.models import Concluded, Event
from flashfsm.fsm.findings import (
    EXPLAIN_LINE_CHARS,
    EXPLAIN_LOG_LINES,
    WorkerLog,
    WorkerSeen,
    cut_line,
    worker_evidence,
)
from flashfsm.fsm.run import replay_run
from flashfsm.render import clock_text
from flashfsm.views import attempt_outcome

#: The gutter a log line is printed after, under its heading (continuation lines hang under it).
GUTTER = "  │ "


def log_line_text(line: str) -> str:
    """One recorded line of a worker's log as one shown line: its line breaks escaped."""
    return line.replace("\r\n", "\\r\\n").replace("\n", "\\n")


def say_log_line(line: str, prefix: str = "  " + GUTTER) -> None:
    """One line of a worker's log after `prefix` (its line breaks already escaped:
    `worker_shown`), escaped, wrapped at the console's width with its continuation lines
    hung under the gutter."""
    text = styled(prefix, line)
    width, hang = console.width, cell_len(prefix)
    if cell_len(text.plain) <= width or hang > width // 2:
        console.print(text, soft_wrap=cell_len(text.plain) > width)
        return
    head, rest = text.divide([len(prefix)])
    for n, part in enumerate(rest.wrap(console, width - hang, overflow="fold")):
        part.rstrip()
        console.print(Text.assemble(head if n == 0 else " " * hang, part))


@dataclass(frozen=True, slots=True)
class WorkerShown:
    """A worker and its log as an explanation shows them: who took the job (a phrase), the
    log's heading, how many earlier lines are left out, and the last lines (each cut and its
    line breaks escaped, so one recorded line is one shown line)."""

    worker: str | None
    heading: str | None
    hidden: int
    lines: tuple[str, ...]


def worker_shown(
    worker: WorkerSeen | None,
    log: WorkerLog | None,
    limit: int | None = EXPLAIN_LOG_LINES,
    chars: int | None = EXPLAIN_LINE_CHARS,
) -> WorkerShown:
    """A worker and its log as the views show them (`limit` lines, each cut at `chars`;
    None: all, whole)."""
    said = None if worker is None else worker.text(clock_text(worker.started_at))
    if log is None:
        return WorkerShown(said, None, 0, ())
    lines = tuple(
        log_line_text(line if chars is None else cut_line(line, chars)) for line in log.tail(limit)
    )
    return WorkerShown(said, log.heading(limit), log.hidden(limit), lines)


def print_worker(
    worker: WorkerSeen | None,
    log: WorkerLog | None,
    *,
    prefix: str = "  ",
    limit: int | None = EXPLAIN_LOG_LINES,
    chars: int | None = EXPLAIN_LINE_CHARS,
) -> None:
    """The worker that took the job and its last log lines (`worker_shown`), printed."""
    shown = worker_shown(worker, log, limit, chars)
    if shown.worker is not None:
        say(f"{prefix}worker: {shown.worker}")
    if shown.heading is None:
        return
    say(f"{prefix}worker log: {shown.heading}")
    if shown.hidden:
        say(f"{prefix}{GUTTER}({shown.hidden} earlier line(s) not shown)")
    for line in shown.lines:
        say_log_line(line, prefix + GUTTER)


def worker_json(w: WorkerSeen | None) -> dict[str, Any] | None:
    """The worker that took the job, field by field."""
    if w is None:
        return None
    return {
        "seq": w.seq,
        "at": w.at,
        "offset_s": w.offset,
        "worker_id": w.worker_id,
        "found": w.found,
        "gpu_type": w.gpu_type,
        "datacenter": w.datacenter,
        "started_at": w.started_at,
        "started_offset_s": w.started_offset,
        "started_since_submission_s": w.since_submission,
        "idle_timeout_s": w.idle_timeout_s,
        "read_error": w.read_error,
        "pickups": w.pickups,
        "text": w.text(clock_text(w.started_at)),
    }


def worker_log_json(log: WorkerLog | None, limit: int | None = None) -> dict[str, Any] | None:
    """The worker's last log lines as recorded: the last `limit` (None: every one)."""
    if log is None:
        return None
    return {
        "seq": log.seq,
        "at": log.at,
        "offset_s": log.offset,
        "worker_id": log.worker_id,
        "worker_status": log.worker_status,
        "job_worker": log.job_worker,
        "truncated": log.truncated,
        "read_error": log.read_error,
        "recorded": len(log.lines),
        "omitted": log.hidden(limit),
        "lines": list(log.tail(limit)),
        "text": log.heading(limit),
    }


# --- the jobs a stream stands for -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobWorker:
    """One job log's worker evidence: the job (a run's attempt number), its verdict, its
    worker and the worker's last log lines."""

    stream: str
    attempt: int | None  # the run's attempt (None: the source is the job log itself)
    outcome: str | None  # the run's word on the attempt
    events: Sequence[Event]
    verdict: Concluded | None
    worker: WorkerSeen | None
    log: WorkerLog | None

    @property
    def found(self) -> bool:
        """Whether the job log recorded anything of its worker."""
        return self.worker is not None or self.log is not None

    def label(self) -> str:
        """The job as a heading: its stream (its attempt) and its verdict."""
        v = self.verdict
        said = "no verdict yet" if v is None else f"{v.state} ({v.failure or 'success'})"
        if v is not None:
            said += f" by {v.rule}"
        head = self.stream if self.attempt is None else f"attempt {self.attempt} ({self.stream})"
        return f"{head}: {said}"

    def json(self, limit: int | None = None) -> dict[str, Any]:
        """The job's worker evidence, field by field."""
        return {
            "stream": self.stream,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "verdict": verdict_json(self.verdict),
            "worker": worker_json(self.worker),
            "worker_log": worker_log_json(self.log, limit),
        }


def job_worker(
    stream: str, events: Sequence[Event], attempt: int | None = None, outcome: str | None = None
) -> JobWorker:
    """A job log's worker evidence."""
    worker, log = worker_evidence(events)
    verdict = next((e for e in events if isinstance(e, Concluded)), None)
    return JobWorker(stream, attempt, outcome, events, verdict, worker, log)


def run_job_workers(src: Source, *, failed_only: bool = False) -> list[JobWorker]:
    """The worker evidence of each attempt's job of a run (its job streams read beside it);
    with `failed_only`, of the attempts that ended in a failure."""
    run = replay_run(src.events)
    out = []
    for a in run.attempts:
        if not a.job_stream or (failed_only and (a.ended is None or a.ended.ok)):
            continue
        events = src.load(a.job_stream)
        outcome = attempt_outcome(a, run)
        out.append(job_worker(a.job_stream, events, a.started.attempt, outcome))
    return out
