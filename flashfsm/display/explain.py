"""`explain` as the front ends show it: why a stream's verdict fired, as one structured view.

`explain_view` gathers, once, everything an explanation shows (`ExplainView`), and each
front end renders that one view: `flashfsm explain SOURCE` prints it (`print_explain_view`,
and `print_explain` gathers and prints), `explain --json` writes it as data
(`flashfsm.cli.logs`), and the web view renders it in a stream's page through its template
(`flashfsm.ui.pages`). No front end reads a log again, so a page and the command never tell
two stories.

A job's explanation is its verdict, the rule that fired, its why, the numbers and facts
behind it and its evidence, then the worker that took the job and its last log lines. A
run's is its last job's, then the workers of its failed attempts, the walk's order of its
candidates and what its failures cost (priced as `flashfsm cost` prices it); a run none of
whose attempts queued a job is the run itself. A sweeper's is what it reaped, what it
cleared and what it is timing.

The phrases both text and HTML say are here, or on the folds they come from (a measure's
`text`, a worker's `text`, a log's `heading`), so the two renderings word them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flashfsm.display.ledger import failure_cost_lines, print_failure_cost
from flashfsm.display.logs import attempt_line, period_text, print_run
from flashfsm.display.sources import Source, job_log, source_ledger
from flashfsm.display.text import say
from flashfsm.display.workers import (
    JobWorker,
    WorkerShown,
    print_worker,
    run_job_workers,
    worker_shown,
)
from flashfsm.errors import message
from flashfsm.events.models import Concluded, RunConcluded
from flashfsm.fsm.capacity import RankReason, ranking_reasons
from flashfsm.fsm.findings import (
    first_line,
)
from flashfsm.fsm.run import RunState, replay_run
from flashfsm.postmortem import explain as ex
from flashfsm.postmortem.ledger import Ledger
from flashfsm.views import SweeperView, last_job_stream, run_label, stream_kind, sweeper_view

# --- the view -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerdictLine:
    """A verdict as an explanation heads it: its state (a success or not), its kind
    ("success" or the failure), when (`t+90 s`), the rule that fired and its step."""

    state: str
    ok: bool
    kind: str
    at: str
    rule: str  # "?" when none is recorded
    step: str


@dataclass(frozen=True)
class ExplainView:
    """Everything `explain` shows of one stream, gathered once (`explain_view`).

    `name` is the source as named, `kind` its stream kind. A job's, and a run's whose last
    attempt queued a job: `stream` (the job stream explained: the source itself or the run's
    last attempt's) and its `explanation` (which holds its worker and worker log). A run's:
    its fold (`run`), the workers of its failed attempts before the one explained
    (`failed`), the walk's reasons (`walk`) and its failure-cost `ledger`; a run none of
    whose attempts queued a job has no `stream`. A ledger that could not be priced is
    `ledger_error` (the text says all the rest before it raises it). A sweeper's: its
    `sweeper` view."""

    name: str
    kind: str  # "job", "run" or "sweeper"
    stream: str | None = None
    explanation: ex.Explanation | None = None
    run: RunState | None = None
    failed: tuple[JobWorker, ...] = ()
    walk: tuple[RankReason, ...] = ()
    ledger: Ledger | None = None
    ledger_error: Exception | None = None
    sweeper: SweeperView | None = None

    @property
    def told(self) -> Concluded | RunConcluded | None:
        """What was explained: the verdict (a run's last job's), or the run's result when
        none of its attempts queued a job; None when there is none yet, and for a sweeper."""
        if self.explanation is not None:
            return self.explanation.verdict
        return self.run.result if self.run is not None else None

    def cost(self) -> Ledger | None:
        """A run's failure-cost ledger (None: not a run); raises what pricing it raised."""
        if self.ledger_error is not None:
            raise self.ledger_error
        return self.ledger

    @property
    def verdict(self) -> VerdictLine | None:
        """The explained verdict's heading (None: no verdict yet, or no job explained)."""
        e = self.explanation
        if e is None or e.verdict is None:
            return None
        v = e.verdict
        kind = "success" if v.ok else str(v.failure)
        return VerdictLine(v.state, v.ok, kind, at_text(e.offset), e.rule or "?", e.step or "?")

    @property
    def because(self) -> tuple[str, ...]:
        """The numbers and facts behind the verdict, one phrase each."""
        e = self.explanation
        return () if e is None else (*e.numbers, *e.facts)

    @property
    def evidence(self) -> tuple[tuple[int, str, str], ...]:
        """The events the verdict rests on: each one's seq, when (`t+90 s`) and summary."""
        e = self.explanation
        items = () if e is None else e.evidence
        return tuple((i.seq, at_text(i.offset), i.summary) for i in items)

    @property
    def detail(self) -> str:
        """The verdict's detail's first line."""
        e = self.explanation
        v = e.verdict if e is not None else None
        return v.detail.splitlines()[0] if v is not None and v.detail else ""

    @property
    def worker(self) -> WorkerShown:
        """The explained job's worker and its last log lines."""
        e = self.explanation
        return worker_shown(None, None) if e is None else worker_shown(e.worker, e.worker_log)

    @property
    def failed_workers(self) -> tuple[tuple[JobWorker, WorkerShown], ...]:
        """The failed attempts that recorded their worker, each with it shown."""
        return tuple((j, worker_shown(j.worker, j.log)) for j in self.failed if j.found)

    @property
    def run_state(self) -> str:
        """The run's state as its heading says it (empty: not a run)."""
        return run_label(self.run) if self.run is not None else ""

    @property
    def attempt_lines(self) -> tuple[tuple[str, str | None, str], ...]:
        """A run's attempts, each as its line, its job stream and its failure's first line
        (a run none of whose attempts queued a job shows them)."""
        run = self.run
        if run is None:
            return ()
        return tuple(
            (
                attempt_line(a, run),
                a.job_stream or None,
                first_line(a.ended.detail, 160)
                if a.ended is not None and not a.ended.ok and a.ended.detail
                else "",
            )
            for a in run.attempts
        )

    @property
    def result_detail(self) -> str:
        """The first line of the run's result's detail (empty: none)."""
        result = self.run.result if self.run is not None else None
        return first_line(result.detail, 160) if result is not None and result.detail else ""

    @property
    def failure_cost(self) -> tuple[str, tuple[str, ...]] | None:
        """What the run cost and each failed attempt's cost, as lines (`failure_cost_lines`;
        None: not priced, or not a run)."""
        return None if self.ledger is None else failure_cost_lines(self.ledger)

    @property
    def ledger_problem(self) -> str:
        """Why the run's cost could not be priced, in one line (empty: it was)."""
        return "" if self.ledger_error is None else message(self.ledger_error)

    @property
    def sweeper_lines(self) -> tuple[str, ...]:
        """A sweeper's idle runs: those reaped, those cleared, then the timers running."""
        view = self.sweeper
        if view is None:
            return ()
        return tuple(period_text(p, view) for p in (*view.reaped, *view.cleared, *view.timers))

    @property
    def last_sweep(self) -> str:
        """When the sweeper last swept (`t+600 s`)."""
        view = self.sweeper
        return "" if view is None else at_text(view.last_at - view.start)


def explain_view(src: Source, opener: Callable[[], Any]) -> ExplainView:
    """Gather what `explain` shows of `src` (see the module notes); a run's cost is priced by
    `source_ledger`, its store opened by `opener` (what pricing raises is kept in the view:
    `ledger_error`). A log that cannot be read or folded raises
    (`flashfsm.display.sources`)."""
    kind = stream_kind(src.events)
    if kind == "sweeper":
        return ExplainView(src.name, kind, sweeper=sweeper_view(src.events))
    if kind != "run":
        stream, events = job_log(src)
        return ExplainView(src.name, kind, stream, ex.explain(events))
    run = replay_run(src.events)
    walk = walk_reasons(run)
    if last_job_stream(run) is None:
        return ExplainView(src.name, kind, run=run, walk=walk, **_priced(src, opener))
    stream, events = job_log(src)
    explanation = ex.explain(events)
    # a run's failed attempts before the one explained: each one's worker and its log
    failed = tuple(j for j in run_job_workers(src, failed_only=True) if j.stream != stream)
    return ExplainView(
        src.name, kind, stream, explanation, run, failed, walk, **_priced(src, opener)
    )


def _priced(src: Source, opener: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"ledger": source_ledger(src, None, opener)}
    except Exception as exc:  # (said after the rest, as the text always did: `cost`)
        return {"ledger_error": exc}


def walk_reasons(run: RunState) -> tuple[RankReason, ...]:
    """Why each candidate of a walk came in its place (none for a one-attempt run)."""
    started = run.started
    if started is None or started.single_attempt is not None:
        return ()
    return ranking_reasons(started.candidates, run.ranking)


def at_text(offset: float) -> str:
    """A time since the log's first event as an explanation says it: `t+90 s`."""
    return f"t+{ex.secs(offset)} s"


# --- text ---------------------------------------------------------------------------------


def print_explain(src: Source, opener: Callable[[], Any]) -> Concluded | RunConcluded | None:
    """Gather what `explain` shows of `src` and print it (`explain_view`,
    `print_explain_view`); returns what was explained (`ExplainView.told`)."""
    return print_explain_view(explain_view(src, opener))


def print_explain_view(view: ExplainView) -> Concluded | RunConcluded | None:
    """Print `view` as `flashfsm explain` prints it; returns what was explained
    (`ExplainView.told`). A run's ledger that could not be priced raises, after the rest."""
    if view.sweeper is not None:
        say(f"{view.name}: sweeper: {view.sweeper.summary} (last sweep at {view.last_sweep})")
        for line in view.sweeper_lines:
            say(f"  {line}")
        return None
    if view.run is not None and view.stream is None:
        print_run(view.name, view.run)
        say("  no attempt queued a job: there is no job verdict to explain")
        _print_walk(view)
        _print_cost(view)
        return view.told
    e = view.explanation
    assert e is not None
    if view.kind == "run":
        say(f"run {view.name}: its last attempt's job stream is {view.stream}")
    if e.verdict is None:
        say(f"{view.stream}: ", (e.facts[0], "yellow"))
        for t in e.timers:
            say(f"  timer {t.text}")
    else:
        _print_verdict_explained(view)
    print_worker(e.worker, e.worker_log)
    for job in view.failed:
        if job.found:
            say(f"run {view.name}: {job.label()}")
            print_worker(job.worker, job.log)
    _print_walk(view)
    if view.kind == "run":
        _print_cost(view)
    return view.told


def _print_verdict_explained(view: ExplainView) -> None:
    """A verdict's explanation: the verdict and its rule, the why, the numbers and facts
    behind it, its evidence and its detail's first line."""
    v, e = view.verdict, view.explanation
    assert v is not None and e is not None
    say(
        f"{view.stream}: ",
        (v.state, f"bold {'green' if v.ok else 'red'}"),
        f" ({v.kind}) at {v.at} by rule ",
        (v.rule, "bold"),
        f" (step {v.step})",
    )
    say(f"  why: {e.why}")
    for line in view.because:
        say(f"  because: {line}")
    for seq, at, summary in view.evidence:
        say(f"  evidence: seq {seq} at {at}: {summary}")
    say(f"  detail: {view.detail}")


def _print_walk(view: ExplainView) -> None:
    if view.walk:
        say(f"run {view.name}: the walk's order of its candidates")
        for r in view.walk:
            say(f"  {r.text}")


def _print_cost(view: ExplainView) -> None:
    led = view.cost()
    if led is not None:
        print_failure_cost(led)
