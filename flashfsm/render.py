"""The picture of a run: attempts as lanes, states as coloured spans over time, verdicts marked.

Theory of operation. `picture(events, load)` turns a log into plain data — a `Picture` of
`Lane`s, each a list of `Span`s (a state from one time to another) and `Mark`s (a verdict,
a reattach, a deploy error) — so tests can inspect the geometry without parsing SVG. A job
log is one lane, its spans the machine states its replay went through (`timeline`); a
reattach after a blind gap leaves an "UNWATCHED" span. A run log (`RunStarted`,
`AttemptStarted`, `JobQueued`, `AttemptEnded`, `RunConcluded`) is one lane per attempt: a
DEPLOYING span from the attempt's start to its `JobQueued`, then the states of the job stream
that event names, fetched with `load` (the caller's I/O). `svg(picture)` and `html(picture)`
build self-contained documents by string building: no script, no external font or style.
"""

from __future__ import annotations

import html as _html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    CancelRequested,
    Concluded,
    DeployFailed,
    Event,
    JobQueued,
    JobSubmitted,
    RunConcluded,
    RunStarted,
    SubmitFailed,
    WatchStarted,
)
from flashfsm.fsm.explain import timeline
from flashfsm.fsm.table import FAILURE_KIND, JobPhase

DEPLOYING = "DEPLOYING"
UNWATCHED = "UNWATCHED"
#: Fill colour and text colour of each span state, in legend order.
STATE_STYLE: dict[str, tuple[str, str]] = {
    DEPLOYING: ("#b9c0c9", "#1d2733"),
    JobPhase.QUEUED.value: ("#8db4e2", "#10243d"),
    JobPhase.THROTTLED.value: ("#f4b942", "#3d2a00"),
    JobPhase.UNHEALTHY.value: ("#e4572e", "#ffffff"),
    JobPhase.SETUP.value: ("#9d87d8", "#1e1238"),
    JobPhase.TRAINING.value: ("#37a168", "#ffffff"),
    UNWATCHED: ("url(#unwatched)", "#333333"),
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
}
VERDICT_OK = "#1b7a3d"
VERDICT_FAILED = "#b3261e"  # job_failed: the job's own fault, not retried
VERDICT_RETRIED = "#b85c00"  # infra-shaped failures a run retries
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
    kind: str  # "verdict", "reattach", "error", "cancel"
    ok: bool | None = None
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class Lane:
    """One attempt (or one job log)."""

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


def is_run_log(events: Sequence[Event]) -> bool:
    """True for a run's stream (its first event is `RunStarted`)."""
    return bool(events) and isinstance(events[0], RunStarted)


@dataclass
class _AttemptDraft:
    started: AttemptStarted
    queued: JobQueued | None = None
    job: list[Event] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ended: AttemptEnded | None = None
    last_at: float = 0.0


def run_lanes(
    events: Sequence[Event], load: Callable[[str], Sequence[Event]] | None, origin: float
) -> tuple[list[Lane], list[Mark]]:
    """One lane per attempt of a run log; the job streams come from `load`."""
    drafts: list[_AttemptDraft] = []
    run_marks: list[Mark] = []
    for event in events:
        current = drafts[-1] if drafts else None
        if isinstance(event, AttemptStarted):
            drafts.append(_AttemptDraft(event, last_at=event.at))
            continue
        if isinstance(event, CancelRequested):
            run_marks.append(
                Mark(event.at - origin, f"cancel requested {event.by}".strip(), "cancel")
            )
        if current is None:
            continue
        current.last_at = max(current.last_at, event.at)
        if isinstance(event, JobQueued):
            current.queued = event
            if load is not None and event.job_stream:
                current.job = list(load(event.job_stream))
        elif isinstance(event, (DeployFailed, SubmitFailed)):
            what = "deploy" if isinstance(event, DeployFailed) else "submit"
            current.marks.append(
                Mark(event.at - origin, f"{what} failed: {event.error_class}", "error")
            )
        elif isinstance(event, AttemptEnded):
            current.ended = event
    lanes = [_attempt_lane(d, origin) for d in drafts]
    return lanes, run_marks


def _attempt_lane(d: _AttemptDraft, origin: float) -> Lane:
    a = d.started
    spans: list[Span] = []
    marks = list(d.marks)
    deploy_end = d.queued.at if d.queued is not None else d.last_at
    if d.ended is not None and d.queued is None:
        deploy_end = d.ended.at
    spans.append(Span(DEPLOYING, a.at - origin, deploy_end - origin))
    verdict: str | None = None
    rule: str | None = None
    ok: bool | None = None
    detail = ""
    stream = d.queued.job_stream if d.queued is not None else (a.job_stream or None)
    if d.job:
        job_spans_, job_marks = job_spans(d.job, origin)
        spans.extend(job_spans_)
        marks.extend(job_marks)
        concluded = next((e for e in d.job if isinstance(e, Concluded)), None)
        if concluded is not None:
            verdict, rule, ok = concluded.state, concluded.rule, concluded.ok
            detail = _first_line(concluded.detail)
    if verdict is None and d.ended is not None:
        e = d.ended
        verdict, rule, ok = ("SUCCEEDED" if e.ok else (e.failure or "failed")), e.rule, e.ok
        detail = _first_line(e.detail)
        if not any(m.kind == "verdict" for m in marks):
            label = f"{verdict} · {rule}" if rule else verdict
            marks.append(Mark(e.at - origin, label, "verdict", e.ok, e.failure))
    extra = [a.gpu_class, a.provider]
    if a.on_last_gpu:
        extra.append("last GPU")
    if a.bonus:
        extra.append("bonus retry")
    if a.cache_dropped:
        extra.append("no weight cache")
    return Lane(
        key=f"attempt-{a.attempt}",
        title=f"attempt {a.attempt}",
        subtitle=" · ".join(x for x in extra if x),
        spans=tuple(spans),
        marks=tuple(marks),
        stream=stream,
        verdict=verdict,
        rule=rule,
        ok=ok,
        detail=detail,
    )


def picture(
    events: Sequence[Event],
    load: Callable[[str], Sequence[Event]] | None = None,
    *,
    title: str | None = None,
) -> Picture:
    """The picture of a job log (one lane) or of a run log (a lane per attempt)."""
    events = list(events)
    if not events:
        return Picture(title or "empty log", "", 0.0, ())
    origin = events[0].at
    stream = events[0].stream
    if is_run_log(events):
        lanes, marks = run_lanes(events, load, origin)
        result = next((e for e in events if isinstance(e, RunConcluded)), None)
        started = events[0]
        assert isinstance(started, RunStarted)
        if result is None:
            verdict, ok, sub = None, None, "run in progress"
        else:
            verdict = "SUCCEEDED" if result.ok else (result.failure or "FAILED")
            ok = result.ok
            sub = f"run {verdict} after {result.attempts} attempt(s)"
        return Picture(
            title or f"run {started.run_id}",
            f"{sub} · {len(lanes)} lane(s) · stream {stream}",
            origin,
            tuple(lanes),
            verdict,
            ok,
            tuple(marks),
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
    out.append(_legend_svg(states, legend_y))
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
    if mark.kind == "verdict":
        colour = verdict_colour(mark.ok, mark.failure)
        d = 8
        return (
            f'<g class="mark verdict"><line x1="{xx:.1f}" y1="{y + 4}" x2="{xx:.1f}" '
            f'y2="{y + LANE_H - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<path d="M {xx:.1f} {mid - d:.1f} L {xx + d:.1f} {mid:.1f} L {xx:.1f} {mid + d:.1f} '
            f'L {xx - d:.1f} {mid:.1f} Z" fill="{colour}" stroke="#ffffff" stroke-width="1.5"/>'
            f'<text class="verdict-label" x="{xx + 12:.1f}" y="{mid + 4:.1f}" font-weight="bold" '
            f'fill="{colour}">{_esc(mark.label)}</text></g>'
        )
    if mark.kind == "open":
        return (
            f'<g class="mark open"><text class="verdict-label" x="{xx + 8:.1f}" '
            f'y="{mid + 4:.1f}" font-style="italic" fill="#555555">{_esc(mark.label)}</text></g>'
        )
    colour = "#b3261e" if mark.kind == "error" else "#333333"
    return (
        f'<g class="mark {mark.kind}"><line x1="{xx:.1f}" y1="{bar_y - 4:.1f}" x2="{xx:.1f}" '
        f'y2="{bar_y + BAR_H + 4:.1f}" stroke="{colour}" stroke-width="2" '
        f'stroke-dasharray="3 2"/><title>{_esc(mark.label)}</title></g>'
    )


def _legend_svg(states: list[str], y: float) -> str:
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
    for j, (colour, what) in enumerate(
        (
            (VERDICT_OK, "verdict: success"),
            (VERDICT_RETRIED, "verdict: retriable failure"),
            (VERDICT_FAILED, "verdict: job failed"),
        )
    ):
        lx = j * col_w
        parts.append(
            f'<path d="M {lx + 11:.1f} {ly} L {lx + 18:.1f} {ly + 7} L {lx + 11:.1f} {ly + 14} '
            f'L {lx + 4:.1f} {ly + 7} Z" fill="{colour}"/>'
            f'<text x="{lx + 28:.1f}" y="{ly + 11}" font-size="12" fill="#333333">'
            f"{_esc(what)} (state · rule)</text>"
        )
    parts.append("</g>")
    return "".join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def html(pic: Picture) -> str:
    """The picture as a standalone HTML page: the SVG and a table of the lanes."""
    rows = []
    for lane in pic.lanes:
        colour = verdict_colour(lane.ok, None if lane.ok else _failure_of(lane.verdict))
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
