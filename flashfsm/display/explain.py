"""`explain` as the front ends show it: why a stream's verdict fired, in lines.

`flashfsm explain SOURCE` prints it (`print_explain`) and the web view shows it on a
stream's page as the log stands (`explain_text`): one text, so a page and the command never
tell two stories. A job's explanation is its verdict, the rule that fired, its why, the
numbers and facts behind it and its evidence, then the worker that took the job and its last
log lines. A run's is its last job's, then the workers of its failed attempts, the walk's
order of its candidates and what its failures cost (priced as `flashfsm cost` prices it); a
run none of whose attempts queued a job is the run itself. A sweeper's is what it reaped,
what it cleared and what it is timing. `explain --json` is the CLI's alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from flashfsm.display.ledger import print_failure_cost
from flashfsm.display.logs import period_text, print_run
from flashfsm.display.sources import Source, job_log, source_ledger
from flashfsm.display.text import captured, say
from flashfsm.display.workers import JobWorker, print_worker, run_job_workers
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Concluded, RunConcluded
from flashfsm.fsm.capacity import RankReason, ranking_reasons
from flashfsm.fsm.run import RunState, replay_run
from flashfsm.postmortem import explain as ex
from flashfsm.views import last_job_stream, stream_kind, sweeper_view


def print_explain(src: Source, opener: Callable[[], Any]) -> Concluded | RunConcluded | None:
    """Print what `flashfsm explain` prints of `src` (see the module notes); a run's cost is
    priced by `source_ledger`, its store opened by `opener`. Returns what was explained: the
    verdict (a run's last job's), or the run's result when none of its attempts queued a job;
    None when there is none yet, and for a sweeper. A log that cannot be read or folded
    raises (`flashfsm.display.sources`), after the lines printed so far."""
    kind = stream_kind(src.events)
    if kind == "sweeper":
        _print_sweeper(src)
        return None
    walk: tuple[RankReason, ...] = ()
    if kind == "run":
        run = replay_run(src.events)
        walk = walk_reasons(run)
        if last_job_stream(run) is None:
            _print_run_without_job(src, run, opener)
            return run.result
    stream, events = job_log(src)
    if kind == "run":
        say(f"run {src.name}: its last attempt's job stream is {stream}")
    e = ex.explain(events)
    # a run's failed attempts before the one explained: each one's worker and its log
    failed = (
        [j for j in run_job_workers(src, failed_only=True) if j.stream != stream]
        if kind == "run"
        else []
    )
    if e.verdict is None:
        say(f"{stream}: ", (e.facts[0], "yellow"))
        for t in e.timers:
            say(f"  timer {t.text}")
    else:
        _print_verdict_explained(stream, e)
    print_worker(e.worker, e.worker_log)
    _print_failed_workers(src.name, failed)
    _print_walk(src.name, walk)
    if kind == "run":
        print_failure_cost(source_ledger(src, None, opener))
    return e.verdict


def explain_text(src: Source, opener: Callable[[], Any]) -> str:
    """What `print_explain` prints of `src`, as text (its lines as long as they are); a log
    that cannot be read or folded ends it where the printing stopped."""
    with captured() as text, contextlib.suppress(FlashFsmError, ValueError, OSError):
        print_explain(src, opener)
    return text.get()


def walk_reasons(run: RunState) -> tuple[RankReason, ...]:
    """Why each candidate of a walk came in its place (none for a one-attempt run)."""
    started = run.started
    if started is None or started.single_attempt is not None:
        return ()
    return ranking_reasons(started.candidates, run.ranking)


def _print_verdict_explained(stream: str, e: ex.Explanation) -> None:
    """A verdict's explanation as `explain` prints it: the verdict and its rule, the why,
    the numbers and facts behind it, its evidence and its detail's first line."""
    v = e.verdict
    assert v is not None
    colour = "green" if v.ok else "red"
    kind_ = "success" if v.ok else v.failure
    say(
        f"{stream}: ",
        (v.state, f"bold {colour}"),
        f" ({kind_}) at t+{ex.secs(e.offset)} s by rule ",
        (e.rule or "?", "bold"),
        f" (step {e.step or '?'})",
    )
    say(f"  why: {e.why}")
    for line in [*e.numbers, *e.facts]:
        say(f"  because: {line}")
    for item in e.evidence:
        say(f"  evidence: seq {item.seq} at t+{ex.secs(item.offset)} s: {item.summary}")
    first = v.detail.splitlines()[0] if v.detail else ""
    say(f"  detail: {first}")


def _print_failed_workers(stream: str, failed: list[JobWorker]) -> None:
    """The worker and worker log of each failed attempt of a run (those that recorded one)."""
    for job in failed:
        if job.found:
            say(f"run {stream}: {job.label()}")
            print_worker(job.worker, job.log)


def _print_walk(stream: str, walk: tuple[RankReason, ...]) -> None:
    if walk:
        say(f"run {stream}: the walk's order of its candidates")
        for r in walk:
            say(f"  {r.text}")


def _print_run_without_job(src: Source, run: RunState, opener: Callable[[], Any]) -> None:
    """A run none of whose attempts queued a job: the run is all there is to explain."""
    print_run(src.name, run)
    say("  no attempt queued a job: there is no job verdict to explain")
    _print_walk(src.name, walk_reasons(run))
    print_failure_cost(source_ledger(src, None, opener))


def _print_sweeper(src: Source) -> None:
    """What a sweeper did: the endpoints it reaped, the timers it cleared and those running."""
    view = sweeper_view(src.events)
    last = f"t+{ex.secs(view.last_at - view.start)} s"
    say(f"{src.name}: sweeper: {view.summary} (last sweep at {last})")
    for p in view.reaped:
        say(f"  {period_text(p, view)}")
    for p in view.cleared:
        say(f"  {period_text(p, view)}")
    for p in view.timers:
        say(f"  {period_text(p, view)}")
