"""The picture of a run: attempts as lanes, states as coloured spans over time, verdicts marked.

Theory of operation. `picture(events, load)` turns a log into plain data — a `Picture` of
`Lane`s, each a list of `Span`s (a state from one time to another) and `Mark`s (a verdict,
a reattach, a deploy error) — so tests can inspect the geometry without parsing SVG. A job
log is one lane, its spans the machine states its replay went through (`timeline`); a
reattach after a blind gap leaves an "UNWATCHED" span. A run log is read through the run
fold (`flashfsm.fsm.run.replay_run`) and drawn as one lane per attempt: a DEPLOYING span from
the attempt's start to its job's submission, then the states of the attempt's job stream,
fetched with `load` (the caller's I/O). A sweeper's log is one lane per endpoint it timed:
its IDLE runs, each ended by a clear or a reap. `flashfsm.views.stream_kind` says which a
log is. `svg(picture)` and `html(picture)` build self-contained documents by string
building: no script, no external font or style.
"""

from __future__ import annotations

import html as _html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flashfsm.events.models import (
    CancelRequested,
    Concluded,
    DeployFailed,
    Event,
    JobSubmitted,
    SubmitFailed,
    WatchStarted,
)
from flashfsm.fsm.explain import timeline
from flashfsm.fsm.run import Attempt, RunState, replay_run
from flashfsm.fsm.table import FAILURE_KIND, JobPhase
from flashfsm.views import IdlePeriod, SweeperView, stream_kind, sweeper_view

DEPLOYING = "DEPLOYING"
UNWATCHED = "UNWATCHED"
IDLE = "IDLE"  # a sweeper's lane: the endpoint's idle timer running
REAPED = "REAPED"  # a sweeper's lane: the endpoint was deleted
#: Fill colour and text colour of each span state, in legend order.
STATE_STYLE: dict[str, tuple[str, str]] = {
    DEPLOYING: ("#b9c0c9", "#1d2733"),
    JobPhase.QUEUED.value: ("#8db4e2", "#10243d"),
    JobPhase.THROTTLED.value: ("#f4b942", "#3d2a00"),
    JobPhase.UNHEALTHY.value: ("#e4572e", "#ffffff"),
    JobPhase.SETUP.value: ("#9d87d8", "#1e1238"),
    JobPhase.TRAINING.value: ("#37a168", "#ffffff"),
    UNWATCHED: ("url(#unwatched)", "#333333"),
    IDLE: ("#d8c7a4", "#2b2110"),
}
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
VERDICT_OK = "#1b7a3d"
VERDICT_FAILED = "#b3261e"  # job_failed: the job's own fault, not retried
VERDICT_RETRIED = "#b85c00"  # infra-shaped failures a run retries
REAPED_COLOUR = "#5b4a8a"  # an endpoint the sweeper deleted
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


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
    kind: str  # "verdict", "open", "reattach", "error", "cancel", "reaped", "cleared", "running"
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
    detail: str = ""

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

    @property
    def duration(self) -> float:
        """Seconds from the origin to the last instant of any lane."""
        return max([lane.end for lane in self.lanes] + [m.at for m in self.marks], default=0.0)


def verdict_colour(ok: bool | None, failure: str | None) -> str:
    """Green for a success, red for the job's own failure, orange for a retriable one."""
    if ok:
        return VERDICT_OK
    return VERDICT_FAILED if failure == "job_failed" else VERDICT_RETRIED


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
        detail="" if verdict is None else _first_line(verdict.detail),
    )


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:160] if lines else ""


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
    spans.append(Span(DEPLOYING, started.at - origin, deploy_end - origin))
    verdict: str | None = None
    rule: str | None = None
    ok: bool | None = None
    detail = ""
    if job:
        job_spans_, job_marks = job_spans(job, origin)
        spans.extend(job_spans_)
        marks.extend(job_marks)
        concluded = next((e for e in job if isinstance(e, Concluded)), None)
        if concluded is not None:
            verdict, rule, ok = concluded.state, concluded.rule, concluded.ok
            detail = _first_line(concluded.detail)
    if verdict is None and a.ended is not None:
        e = a.ended
        verdict, rule, ok = ("SUCCEEDED" if e.ok else (e.failure or "failed")), e.rule, e.ok
        detail = _first_line(e.detail)
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
) -> Picture:
    """The picture of a job log (one lane), a run log (a lane per attempt) or a sweeper's log
    (a lane per endpoint)."""
    events = list(events)
    if not events:
        return Picture(title or "empty log", "", 0.0, ())
    origin = events[0].at
    stream = events[0].stream
    kind = stream_kind(events)
    if kind == "run":
        run = replay_run(events)
        lanes, marks = _run_lanes(run, events, load, origin)
        result = run.result
        if result is None:
            verdict, ok, sub = None, None, "run in progress"
        else:
            verdict = "SUCCEEDED" if result.ok else (result.failure or "FAILED")
            ok = result.ok
            sub = f"run {verdict} after {result.attempts} attempt(s)"
        run_id = run.started.run_id if run.started is not None else stream
        return Picture(
            title or f"run {run_id}",
            f"{sub} · {len(lanes)} lane(s) · stream {stream}",
            origin,
            tuple(lanes),
            verdict,
            ok,
            tuple(marks),
        )
    if kind == "sweeper":
        view = sweeper_view(events)
        origin = min([origin, *(p.since for p in view.periods)])
        lanes = sweeper_lanes(view, origin)
        return Picture(
            title or f"sweeper {stream}",
            f"{view.summary} · {len(lanes)} endpoint(s) · stream {stream}",
            origin,
            tuple(lanes),
        )
    lane = job_lane(events, origin)
    sub = "no verdict yet" if lane.verdict is None else f"{lane.verdict} by {lane.rule}"
    return Picture(title or f"job {stream}", sub, origin, (lane,), lane.verdict, lane.ok)


# --- drawing ----------------------------------------------------------------------------------

WIDTH = 1200
LEFT = 200  # lane titles
RIGHT = 230  # room for the last verdict label
TOP = 92  # title, subtitle, axis labels
LANE_H = 52
BAR_H = 26
LEGEND_COLS = 3
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


def _esc(text: object) -> str:
    return _html.escape(str(text), quote=True)


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


def svg(pic: Picture) -> str:
    """The picture as a standalone SVG document."""
    duration = max(pic.duration, 1.0)
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + plot_w * (t / duration)

    lanes_h = LANE_H * max(1, len(pic.lanes))
    states = [s for s in STATE_STYLE if any(sp.state == s for ln in pic.lanes for sp in ln.spans)]
    legend_y = TOP + lanes_h + 34
    legend_rows = (len(states) + LEGEND_COLS - 1) // LEGEND_COLS + 1
    height = legend_y + 26 * legend_rows + 16
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flashfsm-timeline" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="{FONT}" '
        f'font-size="13" role="img" aria-label="{_esc(pic.title)}">',
        "<defs>",
        '<pattern id="unwatched" width="8" height="8" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="8" height="8" fill="#eeeeee"/>'
        '<line x1="0" y1="0" x2="0" y2="8" stroke="#9a9a9a" stroke-width="3"/></pattern>',
        "</defs>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text class="title" x="16" y="28" font-size="18" font-weight="bold" '
        f'fill="#1a1a1a">{_esc(pic.title)}</text>',
        f'<text class="subtitle" x="16" y="50" fill="#555555">{_esc(pic.subtitle)}</text>',
    ]
    if pic.verdict is not None:
        colour = verdict_colour(pic.ok, None if pic.ok else pic.verdict)
        out.append(
            f'<text class="verdict-label run-verdict" x="{WIDTH - 16}" y="28" '
            f'text-anchor="end" font-size="16" font-weight="bold" fill="{colour}">'
            f"{_esc(pic.verdict)}</text>"
        )
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
        out.append(_lane_svg(lane, i, x))
    for mark in pic.marks:
        xx = x(mark.at)
        out.append(
            f'<g class="mark run-mark"><line x1="{xx:.1f}" y1="{TOP - 4}" x2="{xx:.1f}" '
            f'y2="{TOP + lanes_h}" stroke="#444444" stroke-dasharray="4 3"/>'
            f'<text x="{xx + 4:.1f}" y="{TOP + 8}" font-size="11" fill="#444444">'
            f"{_esc(mark.label)}</text></g>"
        )
    kinds = {m.kind for lane in pic.lanes for m in lane.marks}
    out.append(_legend_svg(states, legend_y, kinds))
    out.append("</svg>")
    return "\n".join(out)


def _lane_svg(lane: Lane, index: int, x: Callable[[float], float]) -> str:
    y = TOP + index * LANE_H
    bar_y = y + (LANE_H - BAR_H) / 2
    attrs = f'class="lane" data-lane="{_esc(lane.key)}"'
    if lane.verdict is not None:
        attrs += f' data-verdict="{_esc(lane.verdict)}" data-rule="{_esc(lane.rule or "")}"'
    parts = [f"<g {attrs}>"]
    if index % 2:
        parts.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{LANE_H}" fill="#f7f8fa"/>')
    parts.append(
        f'<text class="lane-title" x="16" y="{y + LANE_H / 2 - 3}" font-weight="bold" '
        f'fill="#1a1a1a">{_esc(lane.title)}</text>'
        f'<text class="lane-subtitle" x="16" y="{y + LANE_H / 2 + 13}" font-size="11" '
        f'fill="#666666">{_esc(_clip(lane.subtitle, 28))}</text>'
    )
    for span in lane.spans:
        fill, ink = STATE_STYLE.get(span.state, ("#cccccc", "#1a1a1a"))
        x0, x1 = x(span.start), x(span.end)
        w = max(x1 - x0, 1.5)
        tip = (
            f"{span.state}: t+{duration_text(span.start)} → t+{duration_text(span.end)} "
            f"({duration_text(span.end - span.start)})"
        )
        parts.append(
            f'<rect class="span" data-state="{_esc(span.state)}" x="{x0:.1f}" y="{bar_y:.1f}" '
            f'width="{w:.1f}" height="{BAR_H}" rx="3" fill="{fill}" stroke="#ffffff" '
            f'stroke-width="1"><title>{_esc(tip)}</title></rect>'
        )
        if w > 8 * len(span.state) + 10:
            parts.append(
                f'<text class="span-label" x="{x0 + w / 2:.1f}" y="{bar_y + BAR_H / 2 + 4:.1f}" '
                f'text-anchor="middle" font-size="11" font-weight="bold" fill="{ink}">'
                f"{_esc(span.state)}</text>"
            )
    for mark in lane.marks:
        parts.append(_mark_svg(mark, x(mark.at), y, bar_y))
    parts.append("</g>")
    return "".join(parts)


def _mark_svg(mark: Mark, xx: float, y: float, bar_y: float) -> str:
    mid = bar_y + BAR_H / 2
    if mark.kind in ("verdict", "reaped"):
        colour = REAPED_COLOUR if mark.kind == "reaped" else verdict_colour(mark.ok, mark.failure)
        d = 8
        return (
            f'<g class="mark {mark.kind}"><line x1="{xx:.1f}" y1="{y + 4}" x2="{xx:.1f}" '
            f'y2="{y + LANE_H - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<path d="M {xx:.1f} {mid - d:.1f} L {xx + d:.1f} {mid:.1f} L {xx:.1f} {mid + d:.1f} '
            f'L {xx - d:.1f} {mid:.1f} Z" fill="{colour}" stroke="#ffffff" stroke-width="1.5"/>'
            f'<text class="verdict-label" x="{xx + 12:.1f}" y="{mid + 4:.1f}" font-weight="bold" '
            f'fill="{colour}">{_esc(mark.label)}</text></g>'
        )
    if mark.kind in ("open", "running"):
        return (
            f'<g class="mark {mark.kind}"><text class="verdict-label" x="{xx + 8:.1f}" '
            f'y="{mid + 4:.1f}" font-style="italic" fill="#555555">{_esc(mark.label)}</text></g>'
        )
    colour = "#b3261e" if mark.kind == "error" else "#333333"
    return (
        f'<g class="mark {mark.kind}"><line x1="{xx:.1f}" y1="{bar_y - 4:.1f}" x2="{xx:.1f}" '
        f'y2="{bar_y + BAR_H + 4:.1f}" stroke="{colour}" stroke-width="2" '
        f'stroke-dasharray="3 2"/><title>{_esc(mark.label)}</title></g>'
    )


def _legend_svg(states: list[str], y: float, mark_kinds: set[str] | None = None) -> str:
    parts = [f'<g class="legend" transform="translate(16 {y})">']
    parts.append('<text x="0" y="0" font-weight="bold" fill="#333333">Legend</text>')
    col_w = (WIDTH - 32) / LEGEND_COLS
    for i, state in enumerate(states):
        row, col = divmod(i, LEGEND_COLS)
        lx, ly = col * col_w, 14 + row * 26
        fill, _ = STATE_STYLE[state]
        parts.append(
            f'<rect x="{lx:.1f}" y="{ly}" width="22" height="14" rx="2" fill="{fill}" '
            f'stroke="#888888" stroke-width="0.5"/>'
            f'<text x="{lx + 28:.1f}" y="{ly + 11}" font-size="12" fill="#333333">'
            f'<tspan font-weight="bold">{_esc(state)}</tspan> {_esc(STATE_MEANING[state])}'
            "</text>"
        )
    row = (len(states) + LEGEND_COLS - 1) // LEGEND_COLS
    ly = 14 + row * 26
    kinds = mark_kinds or set()
    diamonds: list[tuple[str, str]] = []
    if not kinds or kinds & {"verdict", "open"}:
        diamonds += [
            (VERDICT_OK, "verdict: success (state · rule)"),
            (VERDICT_RETRIED, "verdict: retriable failure (state · rule)"),
            (VERDICT_FAILED, "verdict: job failed (state · rule)"),
        ]
    if "reaped" in kinds:
        diamonds.append((REAPED_COLOUR, "endpoint reaped (idle time)"))
    for j, (colour, what) in enumerate(diamonds[:LEGEND_COLS]):  # one row: a picture is
        lx = j * col_w  # a job's or a run's (verdicts) or a sweeper's (reaps), never both
        parts.append(
            f'<path d="M {lx + 11:.1f} {ly} L {lx + 18:.1f} {ly + 7} L {lx + 11:.1f} {ly + 14} '
            f'L {lx + 4:.1f} {ly + 7} Z" fill="{colour}"/>'
            f'<text x="{lx + 28:.1f}" y="{ly + 11}" font-size="12" fill="#333333">'
            f"{_esc(what)}</text>"
        )
    parts.append("</g>")
    return "".join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


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
            f'<tr class="lane-row" data-lane="{_esc(lane.key)}"><td>{_esc(lane.title)}</td>'
            f"<td>{_esc(lane.subtitle)}</td><td><code>{_esc(lane.stream or '')}</code></td>"
            f'<td class="verdict" style="color:{colour if lane.verdict else "#555"}">'
            f"<b>{_esc(verdict)}</b></td><td><code>{_esc(lane.rule or '')}</code></td>"
            f"<td>{_esc(duration_text(lane.end - (lane.spans[0].start if lane.spans else 0)))}</td>"
            f"<td>{_esc(lane.detail)}</td></tr>"
        )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_esc(pic.title)}</title>",
            "<style>",
            f"body{{font-family:{FONT};margin:24px;color:#1a1a1a;background:#ffffff}}",
            "table{border-collapse:collapse;margin-top:16px;font-size:13px}",
            "th,td{border-bottom:1px solid #dddddd;padding:4px 10px;text-align:left;"
            "vertical-align:top}",
            "th{background:#f3f4f6}",
            "svg{max-width:100%;height:auto}",
            "code{font-size:12px}",
            "td:not(:last-child){white-space:nowrap}",
            "</style></head><body>",
            svg(pic),
            "<table><thead><tr><th>lane</th><th>where</th><th>stream</th><th>verdict</th>"
            "<th>rule</th><th>length</th><th>detail</th></tr></thead><tbody>",
            *rows,
            "</tbody></table>",
            "</body></html>",
        ]
    )


def _failure_of(state: str | None) -> str | None:
    if state is None:
        return None
    try:
        return FAILURE_KIND[JobPhase(state)]
    except ValueError:
        return state  # a run attempt's failure kind
