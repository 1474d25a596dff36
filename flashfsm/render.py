"""The picture of a run: attempts as lanes, states as coloured spans over time, verdicts marked.

Theory of operation. `picture(events, load)` turns a log into plain data — a `Picture` of
`Lane`s, each a list of `Span`s (a state from one time to another) and `Mark`s (a verdict,
a reattach, a deploy error) — so tests can inspect the geometry without parsing SVG. A job
log is one lane, its spans the machine states its replay went through (`timeline`); a
reattach after a blind gap leaves an "UNWATCHED" span. A run log is read through the run
fold (`flashfsm.fsm.run.replay_run`) and drawn as one lane per attempt: a DEPLOYING span from
the attempt's start to its job's submission (none when the submission took no time), then the
states of the attempt's job stream, fetched with `load` (the caller's I/O). A sweeper's log is
one lane per endpoint it timed: its IDLE runs, each ended by a clear or a reap.
`flashfsm.views.stream_kind` says which a log is. `svg(picture)` and `html(picture)` build
self-contained documents by string building: no script, no external font or style.

Drawing measures text (`flashfsm.postmortem.diagram.text_width`) instead of guessing: a state's name
is written on its span only when it fits; the plot is narrowed until every verdict label fits
right of its mark; a lane's subtitle wraps onto a second line, and text that still does not
fit is shortened at a word boundary, with the whole text in a tooltip (`<title>`). Every
bounded piece of text is a `<g class="label">` carrying its full text and the width it was
given (`data-label`, `data-width`), so a test can check what was shown against what was meant.
The legend lists the states and verdict kinds the picture shows, no others.

Cost. Each attempt's lane carries its ledger (`flashfsm.postmortem.ledger`: a run's attempts are
priced by its candidates, a job log by the caller's `price_per_hour`): a thin strip under
its bar shows where the billed seconds went, cause by cause, and a label right of the lane
says what it cost; the header says the total. The legend names the causes the strips show.

Why it is long: the picture's model and its two drawings (SVG and HTML) share one drawing
vocabulary and the text fitting; split, each drawing would need all of it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flashfsm.events.models import (
    CancelRequested,
    Concluded,
    DeployFailed,
    Event,
    JobSubmitted,
    SubmitFailed,
    WatchStarted,
)
from flashfsm.fsm.findings import (
    EXPLAIN_LINE_CHARS,
    WorkerLog,
    WorkerSeen,
    cut_line,
    secs,
    worker_evidence,
)
from flashfsm.fsm.run import RETRIABLE_FAILURES, Attempt, RunState, replay_run
from flashfsm.fsm.table import FAILURE_KIND, JobPhase
from flashfsm.postmortem.diagram import (
    FONT,
    OUTCOME_FAILED,
    OUTCOME_OK,
    OUTCOME_RETRIED,
    PHASE_STYLE,
    esc,
    text_width,
)
from flashfsm.postmortem.explain import timeline
from flashfsm.postmortem.ledger import (
    AttemptLedger,
    Cause,
    Ledger,
    job_ledger,
    money_text,
    run_ledger,
)
from flashfsm.views import IdlePeriod, SweeperView, stream_kind, sweeper_view

DEPLOYING = "DEPLOYING"
UNWATCHED = "UNWATCHED"
IDLE = "IDLE"  # a sweeper's lane: the endpoint's idle timer running
REAPED = "REAPED"  # a sweeper's lane: the endpoint was deleted
#: Fill colour and text colour of each span state, in legend order.
STATE_STYLE: dict[str, tuple[str, str]] = {
    DEPLOYING: ("#b9c0c9", "#1d2733"),
    **PHASE_STYLE,  # the state diagram's colours
    UNWATCHED: ("url(#unwatched)", "#333333"),
    IDLE: ("#d8c7a4", "#2b2110"),
}
UNKNOWN_STYLE = ("#cccccc", "#1a1a1a")  # a state this module has no colour for
#: What each span state means, for the legend.
STATE_MEANING: dict[str, str] = {
    DEPLOYING: "deploy and submit",
    JobPhase.QUEUED.value: "IN_QUEUE",
    JobPhase.THROTTLED.value: "IN_QUEUE, worker throttled",
    JobPhase.UNHEALTHY.value: "IN_QUEUE, worker unhealthy",
    JobPhase.SETUP.value: "cold start, no training heartbeat yet",
    JobPhase.TRAINING.value: "training heartbeats",
    UNWATCHED: "nobody watching (blind gap)",
    IDLE: "endpoint idle, the sweeper's timer running",
}
VERDICT_OK = OUTCOME_OK
VERDICT_FAILED = OUTCOME_FAILED  # job_failed: the job's own fault, not retried
VERDICT_RETRIED = OUTCOME_RETRIED  # infra-shaped failures a run retries
REAPED_COLOUR = "#5b4a8a"  # an endpoint the sweeper deleted
WORKER_COLOUR = "#1f5fbf"  # the job's worker starting
#: The worker's last log lines a picture holds: the verdict's tooltip in the SVG shows
#: `TIP_LOG_LINES`; the HTML's lane row shows `HTML_LOG_SHOWN` and folds the earlier ones,
#: up to `HTML_LOG_LINES` in all, each cut at `EXPLAIN_LINE_CHARS` (`flashfsm logs` has all).
TIP_LOG_LINES = 8
HTML_LOG_SHOWN = 12
HTML_LOG_LINES = 40
#: The colour of each billed cause on a lane's cost strip, in legend order.
COST_STYLE: dict[Cause, str] = {
    Cause.COLD_START: "#7fa7d6",
    Cause.TRAINING: "#3f8f5b",
    Cause.STALL: "#e08a2c",
    Cause.PREEMPTED: "#c0392b",
    Cause.FAILED: "#7d2323",
    Cause.IDLE: "#b3a37f",
}


@dataclass(frozen=True, slots=True)
class Span:
    """A lane in one state from `start` to `end` (seconds after the picture's origin)."""

    state: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Mark:
    """A point on a lane: a verdict, a reattach, a deploy or submit error."""

    at: float
    label: str
    kind: str  # "verdict", "open", "reattach", "error", "cancel", "reaped", "cleared", "running",
    # "worker" (the job's worker started: at its start, or at the lane's start when earlier)
    ok: bool | None = None
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class Lane:
    """One attempt (or one job log, or one endpoint a sweeper timed)."""

    key: str
    title: str
    subtitle: str
    spans: tuple[Span, ...]
    marks: tuple[Mark, ...] = ()
    stream: str | None = None
    verdict: str | None = None  # the terminal state, or the attempt's failure kind
    rule: str | None = None
    ok: bool | None = None
    detail: str = ""  # the verdict's detail as people read it (`detail_text`)
    cost: AttemptLedger | None = None  # the attempt's ledger (None: a sweeper's lane)
    cost_origin: float = 0.0  # epoch seconds of the lane's t+0 (the ledger's times are epoch)
    worker: WorkerSeen | None = None  # the worker that took the job
    worker_log: WorkerLog | None = None  # its last log lines, read before the verdict

    @property
    def end(self) -> float:
        """The lane's last instant."""
        ends = [s.end for s in self.spans] + [m.at for m in self.marks]
        return max(ends, default=0.0)


@dataclass(frozen=True, slots=True)
class Picture:
    """Lanes on one time axis."""

    title: str
    subtitle: str
    origin: float  # epoch seconds of t+0
    lanes: tuple[Lane, ...]
    verdict: str | None = None
    ok: bool | None = None
    marks: tuple[Mark, ...] = field(default=())  # run-level marks (a cancel)
    cost: Ledger | None = None  # the ledger of every lane (None: a sweeper's picture)

    @property
    def duration(self) -> float:
        """Seconds from the origin to the last instant of any lane."""
        return max([lane.end for lane in self.lanes] + [m.at for m in self.marks], default=0.0)


def verdict_colour(ok: bool | None, failure: str | None) -> str:
    """Green for a success, orange for a failure a run retries, red for one it does not (the
    job's own failure, a refused key)."""
    if ok:
        return VERDICT_OK
    return VERDICT_RETRIED if _retried(failure) else VERDICT_FAILED


def _retried(failure: str | None) -> bool:
    return failure in RETRIABLE_FAILURES


# --- lanes ------------------------------------------------------------------------------------


def job_spans(events: Sequence[Event], origin: float) -> tuple[list[Span], list[Mark]]:
    """The states a job log went through, and its verdict and reattach marks."""
    spans: list[Span] = []
    marks: list[Mark] = []
    rows = timeline(events)
    if not rows:
        return spans, marks
    state, start = rows[0].state_before, rows[0].at
    previous_at = rows[0].at
    for event, row in zip(events, rows, strict=True):
        if isinstance(event, WatchStarted) and event.reattach:
            gap = event.at - previous_at
            if gap > 0:
                spans.append(Span(state, start - origin, previous_at - origin))
                spans.append(Span(UNWATCHED, previous_at - origin, event.at - origin))
                start = event.at
            marks.append(Mark(event.at - origin, f"reattached by {event.watcher}", "reattach"))
        if isinstance(event, Concluded):
            spans.append(Span(state, start - origin, event.at - origin))
            failure = event.failure
            label = f"{event.state} · {event.rule}"
            marks.append(Mark(event.at - origin, label, "verdict", event.ok, failure))
            return [s for s in spans if s.end > s.start or s is spans[-1]], marks
        if row.moved:
            spans.append(Span(state, start - origin, row.at - origin))
            state, start = row.state_after, row.at
        previous_at = row.at
    spans.append(Span(state, start - origin, previous_at - origin))
    marks.append(Mark(previous_at - origin, f"{state} · no verdict yet", "open"))
    return [s for s in spans if s.end > s.start or s is spans[-1]], marks


def job_lane(
    events: Sequence[Event], origin: float, *, key: str = "job", title: str | None = None
) -> Lane:
    """A job log as one lane."""
    spans, marks = job_spans(events, origin)
    verdict = next((e for e in events if isinstance(e, Concluded)), None)
    stream = events[0].stream if events else None
    submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
    subtitle = stream or ""
    if submitted is not None:
        where = submitted.gpu_class or submitted.endpoint_name or submitted.endpoint_id
        subtitle = f"{where} · attempt {submitted.attempt}"
    worker, worker_log = worker_evidence(events)
    marks.extend(worker_marks(worker, spans, origin))
    return Lane(
        key=key,
        title=title or "job",
        subtitle=subtitle,
        spans=tuple(spans),
        marks=tuple(marks),
        stream=stream,
        verdict=None if verdict is None else verdict.state,
        rule=None if verdict is None else verdict.rule,
        ok=None if verdict is None else verdict.ok,
        detail="" if verdict is None else detail_text(verdict.detail),
        worker=worker,
        worker_log=worker_log,
    )


def inert(text: str) -> str:
    """`text` with every character that is not printable (a control character, an escape
    sequence's ESC, a NUL, a bidirectional override, a line break) written as its Python
    escape: outside text drawn in a picture can neither reorder what is shown nor break
    the document (XML has no NUL). Escape it for HTML (`esc`) after."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def clock_text(epoch_s: float | None) -> str | None:
    """An epoch time as UTC ("2023-11-14 22:13:05 UTC"); None when there is none (or it is
    not a time a calendar holds)."""
    if epoch_s is None:
        return None
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))
    except (OverflowError, OSError, ValueError):
        return None


def worker_marks(worker: WorkerSeen | None, spans: Sequence[Span], origin: float) -> list[Mark]:
    """The mark of the job's worker starting, on its lane: at the worker's start, or at the
    lane's start when the worker was up before it (a warm worker; the label says when)."""
    if worker is None or not worker.found or worker.started_at is None:
        return []
    at = worker.started_at - origin
    lane_start = min((s.start for s in spans), default=at)
    label = f"worker {worker.worker_id or '?'} up"
    if worker.since_submission is not None:
        d = worker.since_submission
        label += f" ({secs(abs(d))} s {'before' if d < 0 else 'after'} submission)"
    return [Mark(max(at, lane_start), inert(label), "worker")]


#: A detail line is tried as JSON from at most this many of its `{` and `[`.
JSON_TRIES = 8


def detail_text(text: str | None) -> str:
    """A recorded detail as people read it: a JSON object in a line (a worker's error, say)
    becomes `key: value` lines, a value's own newlines real ones, nested values indented."""
    lines: list[str] = []
    for line in (text or "").strip().splitlines():
        lines.extend(_readable(line))
    return "\n".join(lines)


def _readable(line: str) -> Iterator[str]:
    starts = [i for i, ch in enumerate(line) if ch in "{["][:JSON_TRIES]
    for start in starts:
        try:
            value, end = json.JSONDecoder().raw_decode(line, start)
        except ValueError:
            continue
        if isinstance(value, (dict, list)) and value:
            head, tail = line[:start].rstrip(), line[end:].strip()
            if head:
                yield head
            yield from _pairs(value, "")
            if tail:
                yield tail
            return
    yield line


def _pairs(value: dict[str, Any] | list[Any], indent: str) -> Iterator[str]:
    """`key: value` lines of a JSON object (`- item` lines of an array), nested ones indented."""
    items = [(f"{k}:", v) for k, v in value.items()] if isinstance(value, dict) else []
    items += [("-", v) for v in value] if isinstance(value, list) else []
    for key, item in items:
        name = f"{indent}{key}"
        if isinstance(item, (dict, list)) and item:
            yield name
            yield from _pairs(item, indent + "  ")
        elif isinstance(item, str) and "\n" in item.strip():
            yield name
            yield from (f"{indent}  {part}" for part in item.strip("\n").splitlines())
        else:
            shown = item if isinstance(item, str) else json.dumps(item)
            yield f"{name} {shown}"


def run_lanes(
    events: Sequence[Event], load: Callable[[str], Sequence[Event]] | None, origin: float
) -> tuple[list[Lane], list[Mark]]:
    """One lane per attempt of a run log (read through the run fold); the job streams come
    from `load`. Also the run's own marks (a cancel)."""
    return _run_lanes(replay_run(events), events, load, origin)


def _run_lanes(
    run: RunState,
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]] | None,
    origin: float,
) -> tuple[list[Lane], list[Mark]]:
    attempt_marks, run_marks = _point_marks(events, origin)
    lanes = []
    for a in run.attempts:
        job = list(load(a.job_stream)) if load is not None and a.job_stream else []
        lanes.append(_attempt_lane(run, a, job, attempt_marks.get(a.started.attempt, []), origin))
    return lanes, run_marks


def _point_marks(
    events: Sequence[Event], origin: float
) -> tuple[dict[int, list[Mark]], list[Mark]]:
    """A run's point events at their times: deploy and submit errors on their attempt's lane,
    cancels on the run."""
    by_attempt: dict[int, list[Mark]] = {}
    run_marks: list[Mark] = []
    for event in events:
        if isinstance(event, CancelRequested):
            run_marks.append(
                Mark(event.at - origin, f"cancel requested {event.by}".strip(), "cancel")
            )
        elif isinstance(event, (DeployFailed, SubmitFailed)):
            what = "deploy" if isinstance(event, DeployFailed) else "submit"
            by_attempt.setdefault(event.attempt, []).append(
                Mark(event.at - origin, f"{what} failed: {event.error_class}", "error")
            )
    return by_attempt, run_marks


def _attempt_lane(
    run: RunState, a: Attempt, job: list[Event], error_marks: list[Mark], origin: float
) -> Lane:
    started = a.started
    spans: list[Span] = []
    marks = list(error_marks)
    if a.submitted_at is not None:
        deploy_end = a.submitted_at
    elif a.ended is not None:
        deploy_end = a.ended.at
    else:  # still deploying or submitting: the run's latest event is this attempt's
        deploy_end = run.last_at if run.last_at is not None else started.at
    if deploy_end > started.at or not job:  # a deploy that took no time is no span
        spans.append(Span(DEPLOYING, started.at - origin, deploy_end - origin))
    verdict: str | None = None
    rule: str | None = None
    ok: bool | None = None
    detail = ""
    worker, worker_log = worker_evidence(job)
    if job:
        job_spans_, job_marks = job_spans(job, origin)
        spans.extend(job_spans_)
        marks.extend(job_marks)
        marks.extend(worker_marks(worker, spans, origin))
        concluded = next((e for e in job if isinstance(e, Concluded)), None)
        if concluded is not None:
            verdict, rule, ok = concluded.state, concluded.rule, concluded.ok
            detail = detail_text(concluded.detail)
    if verdict is None and a.ended is not None:
        e = a.ended
        verdict, rule, ok = ("SUCCEEDED" if e.ok else (e.failure or "failed")), e.rule, e.ok
        detail = detail_text(e.detail)
        if not any(m.kind == "verdict" for m in marks):
            label = f"{verdict} · {rule}" if rule else verdict
            marks.append(Mark(e.at - origin, label, "verdict", e.ok, e.failure))
    extra = [started.gpu_class, started.provider]
    if started.on_last_gpu:
        extra.append("last GPU")
    if started.bonus:
        extra.append("bonus retry")
    if started.cache_dropped:
        extra.append("no weight cache")
    return Lane(
        key=f"attempt-{started.attempt}",
        title=f"attempt {started.attempt}",
        subtitle=" · ".join(x for x in extra if x),
        spans=tuple(spans),
        marks=tuple(marks),
        stream=a.job_stream or started.job_stream or None,
        verdict=verdict,
        rule=rule,
        ok=ok,
        detail=detail,
        worker=worker,
        worker_log=worker_log,
    )


def sweeper_lanes(view: SweeperView, origin: float) -> list[Lane]:
    """One lane per endpoint a sweeper's log timed: its idle runs, each cleared or reaped."""
    by_endpoint: dict[str, list[IdlePeriod]] = {}
    for period in view.periods:
        by_endpoint.setdefault(period.endpoint_id, []).append(period)
    lanes = []
    for endpoint, periods in by_endpoint.items():
        spans: list[Span] = []
        marks: list[Mark] = []
        verdict = None
        detail = ""
        for p in periods:
            end = view.last_at if p.end is None else p.end
            spans.append(Span(IDLE, p.since - origin, end - origin))
            idle = duration_text(p.idle_s(view.last_at))
            if p.outcome == "reaped":
                verdict = REAPED
                detail = f"reaped after {idle} idle"
                marks.append(Mark(end - origin, f"{REAPED} · idle {idle}", "reaped"))
            elif p.outcome == "cleared":
                marks.append(Mark(end - origin, f"timer cleared: {p.reason or '?'}", "cleared"))
            else:
                detail = f"idle {idle}, timer running"
                marks.append(Mark(end - origin, f"idle {idle} · timer running", "running"))
        name = next((p.endpoint_name for p in reversed(periods) if p.endpoint_name), "")
        lanes.append(
            Lane(
                key=f"endpoint-{endpoint}",
                title=name or endpoint,
                subtitle=endpoint,
                spans=tuple(spans),
                marks=tuple(marks),
                stream=view.stream,
                verdict=verdict,
                detail=detail,
            )
        )
    return lanes


def picture(
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]] | None = None,
    *,
    title: str | None = None,
    price_per_hour: float | None = None,
    cost: Ledger | None = None,
) -> Picture:
    """The picture of a job log (one lane), a run log (a lane per attempt) or a sweeper's log
    (a lane per endpoint). Lanes of a job or run carry their ledger: `cost` when given (the
    CLI's, priced as `flashfsm cost` prices it), else the log's own, a job log priced at
    `price_per_hour` (None: its money is unknown). Every text in it from outside (a stream
    name, a title, a verdict's detail, a mark's label) is `inert`: a picture of a hostile
    stream still draws, and draws nothing it names."""
    pic = _picture(events, load, title=title, price_per_hour=price_per_hour, cost=cost)
    return replace(
        pic,
        title=inert(pic.title),
        subtitle=inert(pic.subtitle),
        lanes=tuple(_inert_lane(lane) for lane in pic.lanes),
        marks=tuple(replace(m, label=inert(m.label)) for m in pic.marks),
    )


def _inert_lane(lane: Lane) -> Lane:
    return replace(
        lane,
        title=inert(lane.title),
        subtitle=inert(lane.subtitle),
        stream=None if lane.stream is None else inert(lane.stream),
        detail="\n".join(inert(line) for line in lane.detail.split("\n")),
        marks=tuple(replace(m, label=inert(m.label)) for m in lane.marks),
    )


def _picture(
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]] | None,
    *,
    title: str | None,
    price_per_hour: float | None,
    cost: Ledger | None,
) -> Picture:
    events = list(events)
    if not events:
        return Picture(title or "empty log", "", 0.0, ())
    origin = events[0].at
    stream = events[0].stream
    kind = stream_kind(events)
    if kind == "run":
        run = replay_run(events)
        lanes, marks = _run_lanes(run, events, load, origin)
        cost = cost or run_ledger(events, load or (lambda stream: []))
        lanes = [
            replace(lane, cost=a, cost_origin=origin)
            for lane, a in zip(lanes, cost.attempts, strict=True)
        ]
        result = run.result
        if result is None:
            verdict, ok, sub = None, None, "run in progress"
        else:
            verdict = "SUCCEEDED" if result.ok else (result.failure or "FAILED")
            ok = result.ok
            sub = f"run {verdict} after {result.attempts} attempt(s)"
        run_id = run.started.run_id if run.started is not None else stream
        return Picture(
            title or titled("run", run_id),
            f"{sub} · {len(lanes)} lane(s) · stream {stream}",
            origin,
            tuple(lanes),
            verdict,
            ok,
            tuple(marks),
            cost,
        )
    if kind == "sweeper":
        view = sweeper_view(events)
        origin = min([origin, *(p.since for p in view.periods)])
        lanes = sweeper_lanes(view, origin)
        return Picture(
            title or titled("sweeper", stream),
            f"{view.summary} · {len(lanes)} endpoint(s) · stream {stream}",
            origin,
            tuple(lanes),
        )
    cost = cost or job_ledger(events, price_per_hour)
    lane = replace(job_lane(events, origin), cost=cost.attempts[0], cost_origin=origin)
    sub = "no verdict yet" if lane.verdict is None else f"{lane.verdict} by {lane.rule}"
    return Picture(
        title or titled("job", stream), sub, origin, (lane,), lane.verdict, lane.ok, (), cost
    )


def titled(kind: str, name: str) -> str:
    """A title naming a `kind` of log once: `job abc` for the stream `job-abc`, the name alone
    when it is or starts with the word (`sweeper`, `run_7`), else `<kind> <name>`."""
    if name.startswith(f"{kind}-") and len(name) > len(kind) + 1:
        return f"{kind} {name[len(kind) + 1 :]}"
    first = name.replace("_", " ").replace("-", " ").split(" ", 1)[0]
    return name if first.lower() == kind.lower() else f"{kind} {name}"


# --- drawing ----------------------------------------------------------------------------------

WIDTH = 1200
MARGIN = 16
LEFT_MIN, LEFT_MAX = 150, 320  # the column of lane titles, sized to them within these
TITLE_GAP = 14  # lane titles to the plot
TOP = 92  # title, subtitle, axis labels
LANE_H = 52
BAR_H = 26
SPAN_PAD = 4  # a span's label to its ends
DIAMOND = 8  # half the width of a verdict's diamond
MIN_PLOT = 0.45  # the plot keeps this share of the room right of the titles
LEGEND_COLS = 3
LEGEND_ROW = 26
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
#: Sizes (px) of the picture's text.
SIZE = {"title": 18, "subtitle": 13, "lane-title": 13, "lane-subtitle": 11, "span-label": 11,
        "verdict-label": 13, "mark-label": 11, "legend": 12, "lane-cost": 10,
        "total-cost": 13}  # fmt: skip
COST_H = 5  # the height of a lane's cost strip, under its bar
COST_GAP = 12  # a lane's end to its cost label
#: How far right of its mark a mark's label starts.
MARK_OFFSET = {"verdict": 12.0, "reaped": 12.0, "open": 8.0, "running": 8.0}
_BREAK_AFTER = "-_/"


def tick_step(duration: float, max_ticks: int = 10) -> float:
    """A round tick spacing that puts at most `max_ticks` ticks on the axis."""
    for step in TICK_STEPS:
        if duration / step <= max_ticks:
            return float(step)
    return float(86400 * max(1, int(duration / 86400 / max_ticks) + 1))


def clock_label(seconds: float) -> str:
    """An axis label: 45 s, 5 min, 2:30, 1 h, 1 h 30."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, rest = divmod(s, 60)
        return f"{m} min" if rest == 0 else f"{m}:{rest:02d}"
    h, rest = divmod(s, 3600)
    return f"{h} h" if rest == 0 else f"{h} h {rest // 60:02d}"


def duration_text(seconds: float) -> str:
    """A length of time as people read it: 45 s, 5 min 10 s, 1 h 5 min."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def fit_lines(
    text: str, width: float, size: float, *, bold: bool = False, lines: int = 1
) -> list[str]:
    """`text` in at most `lines` lines, each at most `width` px wide at `size` px.

    Lines break at a space (never just before a `·`) or after a hyphen, underscore or slash,
    after a `·` when that still fits the whole text in. When the text does not fit, its last
    line ends at such a break and with `…`: a word is never cut. (`…` alone when not even
    one word fits.)
    """
    text = " ".join(text.split())
    at_parts = _wrap(text, width, size, bold, lines, at_parts=True)
    if not _shortened(text, at_parts):
        return at_parts
    return _wrap(text, width, size, bold, lines, at_parts=False)


def _wrap(
    text: str, width: float, size: float, bold: bool, lines: int, *, at_parts: bool
) -> list[str]:
    out: list[str] = []
    start = 0
    while text_width(text[start:], size, bold=bold) > width:
        breaks = _breaks(text, start)
        if len(out) < lines - 1:
            fitting = [
                b for b in breaks if text_width(text[start : b[0]], size, bold=bold) <= width
            ]
            parts = [b for b in fitting if text[start : b[0]].endswith("·")]
            if fitting:
                end, after = (parts if at_parts and parts else fitting)[-1]
                out.append(text[start:end])
                start = after
                continue
        cuts = [_cut(text[start:e]) for e, _ in breaks]
        fits = [c for c in cuts if text_width(c, size, bold=bold) <= width and c != "…"]
        out.append(fits[-1] if fits else "…")
        return out
    out.append(text[start:])
    return out


def _breaks(text: str, start: int) -> list[tuple[int, int]]:
    """Where a line of `text` from `start` may end: (end of this line, start of the next)."""
    out = []
    for i in range(start + 1, len(text)):
        if text[i] == " " and text[i + 1 : i + 2] != "·":
            out.append((i, i + 1))
        elif text[i - 1] in _BREAK_AFTER and text[i] != " ":
            out.append((i, i))
    return out


def _cut(piece: str) -> str:
    return piece.rstrip(" ·" + _BREAK_AFTER) + "…"


def _label(
    text: str,
    x: float,
    y: float,
    *,
    width: float,
    cls: str,
    bold: bool = False,
    lines: int = 1,
    anchor: str = "start",
    fill: str = "#1a1a1a",
    extra: str = "",
    shown: list[str] | None = None,
) -> str:
    """Text bounded to `width` px (wrapped and shortened by `fit_lines`) in a
    `<g class="label">` that carries the full text; with a `<title>` tooltip when shortened."""
    full = " ".join(text.split())
    size = SIZE[cls]
    shown = shown or fit_lines(full, width, size, bold=bold, lines=lines)
    weight = ' font-weight="bold"' if bold else ""
    parts = [f'<g class="label" data-label="{esc(full)}" data-width="{width:.1f}">']
    if _shortened(full, shown):
        parts.append(f"<title>{esc(full)}</title>")
    step = round(size * 1.2)
    for i, line in enumerate(shown):
        parts.append(
            f'<text class="{cls}" x="{x:.1f}" y="{y + i * step:.1f}" font-size="{size}"{weight} '
            f'text-anchor="{anchor}" fill="{fill}"{extra}>{esc(line)}</text>'
        )
    parts.append("</g>")
    return "".join(parts)


def _shortened(full: str, shown: list[str]) -> bool:
    return "".join(shown).replace(" ", "") != full.replace(" ", "")


def _drawn(lane: Lane) -> list[Span]:
    """The spans a lane shows: those that last; a lane of instants shows its last."""
    lasting = [s for s in lane.spans if s.end > s.start]
    return lasting or list(lane.spans[-1:])


def _mark_label_width(mark: Mark) -> float:
    bold = mark.kind in ("verdict", "reaped")
    return text_width(mark.label, SIZE["verdict-label"], bold=bold)


def _left_column(pic: Picture) -> float:
    need = max(
        [text_width(lane.title, SIZE["lane-title"], bold=True) for lane in pic.lanes]
        + [text_width(lane.subtitle, SIZE["lane-subtitle"]) for lane in pic.lanes]
        + [0.0]
    )
    return min(LEFT_MAX, max(LEFT_MIN, MARGIN + need + TITLE_GAP))


def _plot_width(pic: Picture, left: float, duration: float) -> float:
    """The widest plot that leaves every mark's label room right of its mark."""
    room = WIDTH - MARGIN - left
    plot = room
    for lane in pic.lanes:
        for mark in lane.marks:
            if mark.kind in MARK_OFFSET and mark.at > 0:
                need = MARK_OFFSET[mark.kind] + _mark_label_width(mark)
                plot = min(plot, (room - need) / (mark.at / duration))
        if lane.cost is not None and lane.end > 0:
            need = COST_GAP + text_width(cost_text(lane.cost), SIZE["lane-cost"])
            plot = min(plot, (room - need) / (lane.end / duration))
    return max(plot, room * MIN_PLOT)


def cost_text(a: AttemptLedger) -> str:
    """A lane's cost label: "cost $0.48 · billed 28 min 50 s · waste $0.42"."""
    return _money_label("cost", a.money(), a.billed_s, a.waste_money)


def total_text(cost: Ledger) -> str:
    """The picture's total: "total $0.53 · billed 31 min 10 s · waste $0.42"."""
    return _money_label("total", cost.money(), cost.billed_s, cost.waste_money)


def _money_label(what: str, money: float | None, billed_s: float, waste: float | None) -> str:
    text = f"{what} {money_text(money)} · billed {duration_text(billed_s)}"
    return f"{text} · waste {money_text(waste)}" if waste else text


def _legend_entries(pic: Picture) -> tuple[list[str], list[tuple[str, str]]]:
    """The span states the picture shows (in legend order), and its kinds of verdict mark."""
    shown = {span.state for lane in pic.lanes for span in _drawn(lane)}
    states = [s for s in STATE_STYLE if s in shown] + sorted(shown - set(STATE_STYLE))
    kinds = [(m.kind, m.ok, m.failure) for lane in pic.lanes for m in lane.marks]
    diamonds: list[tuple[str, str]] = []
    verdicts = [(ok, failure) for kind, ok, failure in kinds if kind == "verdict"]
    if any(ok for ok, _ in verdicts):
        diamonds.append((VERDICT_OK, "verdict: success (state · rule)"))
    if any(not ok and _retried(failure) for ok, failure in verdicts):
        diamonds.append((VERDICT_RETRIED, "verdict: retriable failure (state · rule)"))
    if any(not ok and not _retried(failure) for ok, failure in verdicts):
        diamonds.append((VERDICT_FAILED, "verdict: not retried (state · rule)"))
    if any(kind == "reaped" for kind, _, _ in kinds):
        diamonds.append((REAPED_COLOUR, "endpoint reaped (idle time)"))
    return states, diamonds


def _legend_causes(pic: Picture) -> list[Cause]:
    """The billed causes the lanes' cost strips show, in legend order."""
    shown = {p.cause for lane in pic.lanes if lane.cost for p in lane.cost.pieces if p.billed}
    return [c for c in COST_STYLE if c in shown]


def svg(pic: Picture) -> str:
    """The picture as a standalone SVG document."""
    duration = max(pic.duration, 1.0)
    left = _left_column(pic)
    plot_w = _plot_width(pic, left, duration)

    def x(t: float) -> float:
        return left + plot_w * (t / duration)

    lanes_h = LANE_H * max(1, len(pic.lanes))
    states, diamonds = _legend_entries(pic)
    diamonds += [(COST_STYLE[c], f"cost: {c.value.replace('_', ' ')}") for c in _legend_causes(pic)]
    legend_y = TOP + lanes_h + 34
    legend_rows = -(-len(states) // LEGEND_COLS) + -(-len(diamonds) // LEGEND_COLS)
    height = legend_y + LEGEND_ROW * legend_rows + 16
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flashfsm-timeline" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="{FONT}" '
        f'font-size="13" role="img" aria-label="{esc(pic.title)}">',
        "<defs>",
        '<pattern id="unwatched" width="8" height="8" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="8" height="8" fill="#eeeeee"/>'
        '<line x1="0" y1="0" x2="0" y2="8" stroke="#9a9a9a" stroke-width="3"/></pattern>',
        "</defs>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
    ]
    verdict_w = 0.0
    if pic.verdict is not None:
        colour = verdict_colour(pic.ok, None if pic.ok else pic.verdict)
        verdict_w = text_width(pic.verdict, 16, bold=True)
        out.append(
            f'<text class="verdict-label run-verdict" x="{WIDTH - MARGIN}" y="28" '
            f'text-anchor="end" font-size="16" font-weight="bold" fill="{colour}">'
            f"{esc(pic.verdict)}</text>"
        )
    title_w = WIDTH - 2 * MARGIN - (verdict_w + 24 if verdict_w else 0)
    out.append(_label(pic.title, MARGIN, 28, width=title_w, cls="title", bold=True))
    total_w = 0.0
    if pic.cost is not None:
        total = total_text(pic.cost)
        total_w = text_width(total, SIZE["total-cost"], bold=True)
        out.append(
            _label(
                total,
                WIDTH - MARGIN,
                50,
                width=total_w + 1,
                cls="total-cost",
                bold=True,
                anchor="end",
                fill="#333333",
            )
        )
    sub_w = WIDTH - 2 * MARGIN - (total_w + 24 if total_w else 0)
    out.append(_label(pic.subtitle, MARGIN, 50, width=sub_w, cls="subtitle", fill="#555555"))
    # axis and grid
    step = tick_step(duration)
    axis_y = TOP - 12
    out.append('<g class="axis" fill="#666666" font-size="11">')
    t = 0.0
    while t <= duration + 1e-9:
        xx = x(t)
        out.append(
            f'<line x1="{xx:.1f}" y1="{axis_y + 4}" x2="{xx:.1f}" y2="{TOP + lanes_h}" '
            'stroke="#e3e3e3" stroke-width="1"/>'
            f'<text x="{xx:.1f}" y="{axis_y}" text-anchor="middle">{clock_label(t)}</text>'
        )
        t += step
    out.append("</g>")
    for i, lane in enumerate(pic.lanes):
        out.append(_lane_svg(lane, i, x, left))
    for mark in pic.marks:
        out.append(_run_mark_svg(mark, x(mark.at), left, lanes_h))
    out.append(_legend_svg(states, diamonds, legend_y))
    out.append("</svg>")
    return "\n".join(out)


def _lane_svg(lane: Lane, index: int, x: Callable[[float], float], left: float) -> str:
    y = TOP + index * LANE_H
    bar_y = y + (LANE_H - BAR_H) / 2
    attrs = f'class="lane" data-lane="{esc(lane.key)}"'
    if lane.verdict is not None:
        attrs += f' data-verdict="{esc(lane.verdict)}" data-rule="{esc(lane.rule or "")}"'
    parts = [f"<g {attrs}>"]
    if index % 2:
        parts.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{LANE_H}" fill="#f7f8fa"/>')
    room = left - MARGIN - TITLE_GAP
    sub = fit_lines(lane.subtitle, room, SIZE["lane-subtitle"], lines=2)
    title_y, sub_y = (y + LANE_H / 2 - 3, y + LANE_H / 2 + 13) if len(sub) < 2 else (y + 17, y + 31)
    parts.append(_label(lane.title, MARGIN, title_y, width=room, cls="lane-title", bold=True))
    parts.append(
        _label(
            lane.subtitle, MARGIN, sub_y, width=room, cls="lane-subtitle", fill="#666666", shown=sub
        )
    )
    pointed = [m for m in lane.marks if m.kind in ("verdict", "reaped")]
    for i, span in enumerate(_drawn(lane)):
        fill, ink = STATE_STYLE.get(span.state, UNKNOWN_STYLE)
        x0, x1 = x(span.start), x(span.end)
        w = max(x1 - x0, 1.5)
        key = f"{lane.key}/{i}"
        tip = (
            f"{span.state}: t+{duration_text(span.start)} → t+{duration_text(span.end)} "
            f"({duration_text(span.end - span.start)})"
        )
        parts.append(
            f'<rect class="span" data-span="{esc(key)}" data-state="{esc(span.state)}" '
            f'x="{x0:.1f}" y="{bar_y:.1f}" width="{w:.1f}" height="{BAR_H}" rx="3" fill="{fill}" '
            f'stroke="#ffffff" stroke-width="1"><title>{esc(tip)}</title></rect>'
        )
        # the state's name goes on its span only when it fits (clear of a verdict's diamond
        # on its end); the tooltip and the legend name it anyway
        covered = DIAMOND + SPAN_PAD if any(abs(m.at - span.end) < 1e-6 for m in pointed) else 0
        room = w - 2 * SPAN_PAD - covered
        if text_width(span.state, SIZE["span-label"], bold=True) <= room:
            parts.append(
                f'<text class="span-label" data-span="{esc(key)}" '
                f'x="{x0 + SPAN_PAD + room / 2:.1f}" '
                f'y="{bar_y + BAR_H / 2 + 4:.1f}" text-anchor="middle" '
                f'font-size="{SIZE["span-label"]}" font-weight="bold" fill="{ink}" '
                f'pointer-events="none">{esc(span.state)}</text>'
            )
    if lane.cost is not None:
        parts.append(_cost_svg(lane, x, bar_y + BAR_H + 2, lane.cost_origin))
    for mark in lane.marks:
        if mark.kind == "worker":
            parts.append(_worker_mark_svg(mark, lane, x, bar_y))
        else:
            tip = _log_tip(lane) if mark.kind == "verdict" else ""
            parts.append(_mark_svg(mark, x(mark.at), y, bar_y, tip))
    parts.append("</g>")
    return "".join(parts)


def _log_tip(lane: Lane) -> str:
    """A verdict's tooltip: the worker's last log lines (`TIP_LOG_LINES`), escaped."""
    log = lane.worker_log
    if log is None:
        return ""
    lines = [inert(log.heading(TIP_LOG_LINES))]
    lines += [inert(cut_line(line, EXPLAIN_LINE_CHARS)) for line in log.tail(TIP_LOG_LINES)]
    return f"<title>{esc(chr(10).join(lines))}</title>"


def _worker_mark_svg(mark: Mark, lane: Lane, x: Callable[[float], float], bar_y: float) -> str:
    """The worker's start: a line across the bar with a dot above it, and its label above
    the bar, bounded by the next verdict's line (the whole label in its tooltip)."""
    xx = x(mark.at)
    after = [x(m.at) for m in lane.marks if m.kind in ("verdict", "reaped") and x(m.at) > xx]
    right = min([*(a - DIAMOND - 4 for a in after), WIDTH - MARGIN])
    room = right - (xx + 5)
    label = ""
    if room >= text_width("worker …", SIZE["mark-label"]):
        label = _label(mark.label, xx + 5, bar_y - 3, width=room, cls="mark-label",
                       fill=WORKER_COLOUR)  # fmt: skip
    return (
        f'<g class="mark worker"><title>{esc(mark.label)}</title>'
        f'<line x1="{xx:.1f}" y1="{bar_y - 4:.1f}" x2="{xx:.1f}" y2="{bar_y + BAR_H + 4:.1f}" '
        f'stroke="{WORKER_COLOUR}" stroke-width="2"/>'
        f'<circle cx="{xx:.1f}" cy="{bar_y - 4:.1f}" r="3" fill="{WORKER_COLOUR}"/>{label}</g>'
    )


def _cost_svg(lane: Lane, x: Callable[[float], float], top: float, origin: float) -> str:
    """A lane's cost strip (its billed pieces by cause) and its cost label."""
    cost = lane.cost
    assert cost is not None
    parts = [f'<g class="cost" data-lane="{esc(lane.key)}">']
    for p in cost.pieces:
        if not p.billed:
            continue
        x0, x1 = x(p.start - origin), x(p.end - origin)
        # A second worker billed beside this stretch (an overlap in a requeue, a
        # crash-looping worker) is billed too: its seconds in here are counted in the tip.
        beside = sum(max(0.0, min(o.end, p.end) - max(o.start, p.start)) for o in cost.overlaps)
        seconds = p.seconds + beside
        tip = f"{p.cause.value.replace('_', ' ')}: {duration_text(p.seconds)}"
        if beside > 0:
            tip += f" (+{duration_text(beside)} of a second worker)"
        money = None if cost.price_per_hour is None else seconds * cost.price_per_hour / 3600
        if money is not None:
            tip += f" · {money_text(money)}"
        parts.append(
            f'<rect class="cost-piece" data-cause="{p.cause.value}" x="{x0:.1f}" '
            f'y="{top:.1f}" width="{max(x1 - x0, 1.0):.1f}" height="{COST_H}" '
            f'fill="{COST_STYLE.get(p.cause, "#999999")}"><title>{esc(tip)}</title></rect>'
        )
    lx = x(max(lane.end, cost.end - origin)) + COST_GAP
    parts.append(
        _label(
            cost_text(cost),
            lx,
            top + COST_H + 3,
            width=WIDTH - MARGIN - lx,
            cls="lane-cost",
            fill="#444444",
        )
    )
    parts.append("</g>")
    return "".join(parts)


def _mark_svg(mark: Mark, xx: float, y: float, bar_y: float, tip: str = "") -> str:
    mid = bar_y + BAR_H / 2
    if mark.kind in MARK_OFFSET:
        lx = xx + MARK_OFFSET[mark.kind]
        room = WIDTH - MARGIN - lx
    if mark.kind in ("verdict", "reaped"):
        colour = REAPED_COLOUR if mark.kind == "reaped" else verdict_colour(mark.ok, mark.failure)
        d = DIAMOND
        label = _label(
            mark.label, lx, mid + 4, width=room, cls="verdict-label", bold=True, fill=colour
        )
        return (
            f'<g class="mark {mark.kind}">{tip}<line x1="{xx:.1f}" y1="{y + 4}" x2="{xx:.1f}" '
            f'y2="{y + LANE_H - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<path d="M {xx:.1f} {mid - d:.1f} L {xx + d:.1f} {mid:.1f} L {xx:.1f} {mid + d:.1f} '
            f'L {xx - d:.1f} {mid:.1f} Z" fill="{colour}" stroke="#ffffff" stroke-width="1.5"/>'
            f"{label}</g>"
        )
    if mark.kind in ("open", "running"):
        label = _label(
            mark.label,
            lx,
            mid + 4,
            width=room,
            cls="verdict-label",
            fill="#555555",
            extra=' font-style="italic"',
        )
        return f'<g class="mark {mark.kind}">{label}</g>'
    colour = "#b3261e" if mark.kind == "error" else "#333333"
    return (
        f'<g class="mark {mark.kind}"><line x1="{xx:.1f}" y1="{bar_y - 4:.1f}" x2="{xx:.1f}" '
        f'y2="{bar_y + BAR_H + 4:.1f}" stroke="{colour}" stroke-width="2" '
        f'stroke-dasharray="3 2"/><title>{esc(mark.label)}</title></g>'
    )


def _run_mark_svg(mark: Mark, xx: float, left: float, lanes_h: float) -> str:
    """A run-level mark (a cancel): a dashed line over every lane, its label beside it."""
    width = text_width(mark.label, SIZE["mark-label"])
    fits_right = xx + 4 + width <= WIDTH - MARGIN
    label = _label(
        mark.label,
        xx + 4 if fits_right else xx - 4,
        TOP + 8,
        width=WIDTH - MARGIN - xx - 4 if fits_right else xx - 4 - left,
        cls="mark-label",
        anchor="start" if fits_right else "end",
        fill="#444444",
    )
    return (
        f'<g class="mark run-mark"><line x1="{xx:.1f}" y1="{TOP - 4}" x2="{xx:.1f}" '
        f'y2="{TOP + lanes_h}" stroke="#444444" stroke-dasharray="4 3"/>{label}</g>'
    )


def _legend_svg(states: list[str], diamonds: list[tuple[str, str]], y: float) -> str:
    parts = [f'<g class="legend" transform="translate({MARGIN} {y})">']
    parts.append('<text x="0" y="0" font-weight="bold" fill="#333333">Legend</text>')
    col_w = (WIDTH - 2 * MARGIN) / LEGEND_COLS
    room = col_w - 28 - 12
    size = SIZE["legend"]
    for i, state in enumerate(states):
        row, col = divmod(i, LEGEND_COLS)
        lx, ly = col * col_w, 14 + row * LEGEND_ROW
        fill, _ = STATE_STYLE.get(state, UNKNOWN_STYLE)
        name_w = text_width(state + " ", size, bold=True)
        meaning = STATE_MEANING.get(state, "")
        shown = fit_lines(meaning, room - name_w, size)
        full = f"{state} {meaning}".strip()
        parts.append(
            f'<g class="label legend-state" data-state="{esc(state)}" data-label="{esc(full)}" '
            f'data-width="{room:.1f}">'
            + (f"<title>{esc(full)}</title>" if _shortened(meaning, shown) else "")
            + f'<rect x="{lx:.1f}" y="{ly}" width="22" height="14" rx="2" fill="{fill}" '
            f'stroke="#888888" stroke-width="0.5"/>'
            f'<text class="legend" x="{lx + 28:.1f}" y="{ly + 11}" font-size="{size}" '
            f'fill="#333333"><tspan font-weight="bold">{esc(state)}</tspan> {esc(shown[0])}'
            "</text></g>"
        )
    first = -(-len(states) // LEGEND_COLS)
    for j, (colour, what) in enumerate(diamonds):
        row, col = divmod(j, LEGEND_COLS)
        lx, ly = col * col_w, 14 + (first + row) * LEGEND_ROW
        parts.append(
            f'<g class="legend-verdict"><path d="M {lx + 11:.1f} {ly} L {lx + 18:.1f} {ly + 7} '
            f'L {lx + 11:.1f} {ly + 14} L {lx + 4:.1f} {ly + 7} Z" fill="{colour}"/>'
            + _label(what, lx + 28, ly + 11, width=room, cls="legend", fill="#333333")
            + "</g>"
        )
    parts.append("</g>")
    return "".join(parts)


#: A verdict's detail shows this many lines; the rest fold under a <details>.
DETAIL_LINES = 8


def _detail_html(detail: str) -> str:
    lines = detail.splitlines()
    head = f'<div class="detail-text">{esc(chr(10).join(lines[:DETAIL_LINES]))}</div>'
    if len(lines) <= DETAIL_LINES:
        return head
    rest = lines[DETAIL_LINES:]
    return (
        f"{head}<details><summary>{len(rest)} more line{'s' if len(rest) != 1 else ''}"
        f'</summary><div class="detail-text">{esc(chr(10).join(rest))}</div></details>'
    )


def html(pic: Picture) -> str:
    """The picture as a standalone HTML page: the SVG and a table of the lanes."""
    rows = []
    for lane in pic.lanes:
        colour = (
            REAPED_COLOUR
            if lane.verdict == REAPED
            else verdict_colour(lane.ok, None if lane.ok else _failure_of(lane.verdict))
        )
        verdict = "—" if lane.verdict is None else lane.verdict
        rows.append(
            f'<tr class="lane-row" data-lane="{esc(lane.key)}"><td>{esc(lane.title)}</td>'
            f'<td class="where">{esc(lane.subtitle)}</td>'
            f"<td><code>{esc(lane.stream or '')}</code></td>"
            f'<td class="verdict" style="color:{colour if lane.verdict else "#555"}">'
            f"<b>{esc(verdict)}</b></td><td><code>{esc(lane.rule or '')}</code></td>"
            f"<td>{esc(duration_text(lane.end - (lane.spans[0].start if lane.spans else 0)))}</td>"
            f'<td class="cost">{esc(cost_text(lane.cost) if lane.cost else "")}</td>'
            f'<td class="detail">{_detail_html(lane.detail)}{_worker_html(lane)}</td></tr>'
        )
    if pic.cost is not None:
        rows.append(
            f'<tr class="total-row"><td colspan="6"><b>total</b></td>'
            f'<td class="cost total"><b>{esc(total_text(pic.cost))}</b></td><td></td></tr>'
        )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{esc(pic.title)}</title>",
            "<style>",
            f"body{{font-family:{FONT};margin:24px;color:#1a1a1a;background:#ffffff}}",
            "table{border-collapse:collapse;margin-top:16px;font-size:13px}",
            "th,td{border-bottom:1px solid #dddddd;padding:4px 10px;text-align:left;"
            "vertical-align:top}",
            "th{background:#f3f4f6}",
            "svg{max-width:100%;height:auto}",
            "code{font-size:12px}",
            "td:not(:last-child){white-space:nowrap}",
            "td.where{white-space:normal;min-width:10em;max-width:22em}",
            ".detail-text{white-space:pre-wrap;overflow-wrap:anywhere;min-width:24em}",
            "summary{cursor:pointer;color:#555555}",
            ".worker-log{margin-top:8px}",
            ".worker-head{color:#333333;overflow-wrap:anywhere;min-width:24em}",
            ".log-lines{white-space:pre-wrap;overflow-wrap:anywhere;min-width:24em;"
            "font-family:ui-monospace,monospace;font-size:12px;background:#f6f8fa;"
            "padding:4px 6px;margin-top:2px}",
            "</style></head><body>",
            svg(pic),
            "<table><thead><tr><th>lane</th><th>where</th><th>stream</th><th>verdict</th>"
            "<th>rule</th><th>length</th><th>cost</th><th>detail</th></tr></thead><tbody>",
            *rows,
            "</tbody></table>",
            "</body></html>",
        ]
    )


def _worker_html(lane: Lane) -> str:
    """Below a lane's verdict: the worker that took the job and its last log lines (the
    last `HTML_LOG_SHOWN`, the earlier ones up to `HTML_LOG_LINES` folded), escaped."""
    worker, log = lane.worker, lane.worker_log
    if worker is None and log is None:
        return ""
    parts = ['<div class="worker-log">']
    if worker is not None:
        text = inert(worker.text(clock_text(worker.started_at)))
        parts.append(f'<div class="worker-head"><b>worker:</b> {esc(text)}</div>')
    if log is not None:
        kept = log.tail(HTML_LOG_LINES)
        shown, folded = kept[len(kept) - min(HTML_LOG_SHOWN, len(kept)) :], kept[:-HTML_LOG_SHOWN]
        head = inert(log.heading(HTML_LOG_LINES))
        parts.append(f'<div class="worker-head"><b>worker log:</b> {esc(head)}</div>')

        def block(lines: Sequence[str]) -> str:
            text = "\n".join(inert(cut_line(line, EXPLAIN_LINE_CHARS)) for line in lines)
            return f'<div class="log-lines">{esc(text)}</div>'

        if folded:
            n = len(folded)
            parts.append(
                f"<details><summary>{n} earlier line{'s' if n != 1 else ''}</summary>"
                f"{block(folded)}</details>"
            )
        if shown:
            parts.append(block(shown))
    parts.append("</div>")
    return "".join(parts)


def _failure_of(state: str | None) -> str | None:
    if state is None:
        return None
    try:
        return FAILURE_KIND[JobPhase(state)]
    except ValueError:
        return state  # a run attempt's failure kind
