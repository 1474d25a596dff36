"""The state diagram, drawn from the same table the shared Machine is built from.

Theory of operation. Two drawings come out of `flashfsm.fsm.table`: `mermaid()` (the README's
block, laid out by whoever renders it) and `svg()`, a standalone picture laid out here so it
reads the same everywhere. The picture puts the states in columns by lifecycle stage — the
waiting states (IN_QUEUE) stacked in the first column, then each running state, then the
terminal outcomes — and draws each row of the table once. A row whose sources are exactly
one of the stage groups (`GROUPS`: every active state, the waiting ones, the running ones)
leaves from that group's box: "every verdict is reachable from every active state" is one
arrow per verdict, not thirty-five. Any other row is an arrow per source. `layout()` returns
the geometry as data (boxes, polylines, label boxes), so tests check it without parsing SVG,
and places every edge label where it overlaps no other label and no state.

Text is measured with the advance widths of DejaVu Sans, the first face of the pictures'
font stack and the widest of its faces, so a measured label is never wider when drawn.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from flashfsm.fsm.run import RETRIABLE_FAILURES
from flashfsm.fsm.table import (
    ACTIVE,
    FAILURE_KIND,
    INITIAL,
    RUNNING,
    TERMINAL,
    TRANSITIONS,
    WAITING,
    JobPhase,
)


def mermaid() -> str:
    """The job machine as a Mermaid `stateDiagram-v2`.

    The active states sit in one composite state, `Active`, from which every terminal
    trigger leaves (the table allows each of them from every active state).
    """
    lines = ["stateDiagram-v2", "    [*] --> Active", "    state Active {"]
    lines.append(f"        [*] --> {INITIAL.value}")
    for trigger, sources, dest in TRANSITIONS:
        if dest not in TERMINAL:
            lines.extend(f"        {s.value} --> {dest.value}: {trigger}" for s in sources)
    lines.append("    }")
    for trigger, sources, dest in TRANSITIONS:
        if dest in TERMINAL:
            assert set(sources) == set(ACTIVE), f"{trigger} must leave every active state"
            lines.append(f"    Active --> {dest.value}: {trigger}")
            lines.append(f"    {dest.value} --> [*]")
    return "\n".join(lines)


# --- text -------------------------------------------------------------------------------------

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
#: Advance widths of DejaVu Sans for " " to "~", in 1/2048 em: regular (and oblique) faces.
_REGULAR = (
    651, 821, 942, 1716, 1303, 1946, 1597, 563, 799, 799, 1024, 1716, 651, 739, 651, 690, 1303,
    1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 1303, 690, 690, 1716, 1716, 1716, 1087,
    2048, 1401, 1405, 1430, 1577, 1294, 1178, 1587, 1540, 604, 604, 1343, 1141, 1767, 1532,
    1612, 1235, 1612, 1423, 1300, 1251, 1499, 1401, 2025, 1403, 1251, 1403, 799, 690, 799, 1716,
    1024, 1024, 1255, 1300, 1126, 1300, 1260, 721, 1300, 1298, 569, 569, 1186, 569, 1995, 1298,
    1253, 1300, 1300, 842, 1067, 803, 1298, 1212, 1675, 1212, 1212, 1075, 1303, 690, 1303, 1716,
)  # fmt: skip
#: The same for the bold face.
_BOLD = (
    713, 934, 1067, 1716, 1425, 2052, 1786, 627, 936, 936, 1071, 1716, 778, 850, 778, 748, 1425,
    1425, 1425, 1425, 1425, 1425, 1425, 1425, 1425, 1425, 819, 819, 1716, 1716, 1716, 1188,
    2048, 1585, 1561, 1503, 1700, 1399, 1399, 1681, 1714, 762, 762, 1587, 1305, 2038, 1714,
    1741, 1501, 1741, 1577, 1475, 1397, 1663, 1585, 2259, 1579, 1483, 1485, 936, 748, 936, 1716,
    1024, 1024, 1382, 1466, 1214, 1466, 1389, 891, 1466, 1458, 702, 702, 1362, 702, 2134, 1458,
    1407, 1466, 1466, 1010, 1219, 979, 1458, 1335, 1892, 1321, 1335, 1192, 1458, 748, 1458, 1716,
)  # fmt: skip
#: Characters past "~" the pictures use: (regular, bold) advance in 1/2048 em.
_OTHER = {
    "·": (651, 778),
    "→": (1716, 1716),
    "←": (1716, 1716),
    "…": (2048, 2048),
    "—": (2048, 2048),
    "–": (1024, 1024),
    "×": (1716, 1716),
}
#: A line of text is this many ems tall (DejaVu's ascent and descent), its baseline this far
#: below its top.
LINE_EM = 1.164
ASCENT_EM = 0.928


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """How wide `text` is drawn at `size` px: its advance in DejaVu Sans (no kerning, which
    only narrows it); a character the table lacks counts one em."""
    table = _BOLD if bold else _REGULAR
    units = 0
    for ch in text:
        code = ord(ch)
        if 32 <= code <= 126:
            units += table[code - 32]
        else:
            units += _OTHER.get(ch, (2048, 2048))[1 if bold else 0]
    return units * size / 2048


def esc(text: object) -> str:
    """Text escaped for XML and HTML, quotes included."""
    return html.escape(str(text), quote=True)


# --- geometry ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Box:
    """An axis-aligned rectangle: top-left corner, width, height."""

    x: float
    y: float
    w: float
    h: float

    @property
    def right(self) -> float:
        """The right edge."""
        return self.x + self.w

    @property
    def bottom(self) -> float:
        """The bottom edge."""
        return self.y + self.h

    @property
    def cx(self) -> float:
        """The horizontal centre."""
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        """The vertical centre."""
        return self.y + self.h / 2

    def overlaps(self, other: Box) -> bool:
        """Whether the two rectangles share any area (touching edges do not count)."""
        return (
            self.x < other.right
            and other.x < self.right
            and self.y < other.bottom
            and other.y < self.bottom
        )

    def moved(self, dx: float, dy: float) -> Box:
        """The same rectangle shifted by (dx, dy)."""
        return Box(self.x + dx, self.y + dy, self.w, self.h)


Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Group:
    """A stage of the lifecycle drawn as a box around its states."""

    name: str
    caption: str
    states: tuple[JobPhase, ...]


#: The stage boxes, outermost first. A row of the table whose sources are exactly a group's
#: states is drawn as one arrow leaving the group's box.
GROUPS: tuple[Group, ...] = (
    Group("active", "active: the job is being watched", ACTIVE),
    Group("waiting", "IN_QUEUE", WAITING),
    Group("running", "a worker has the job", RUNNING),
)


@dataclass(frozen=True, slots=True)
class Edge:
    """One row of the table as drawn: the trigger, where it leaves from, where it leads."""

    trigger: str
    sources: tuple[str, ...]
    dest: str
    group: str | None  # the group box it leaves, or None: from its one source state
    points: tuple[Point, ...]  # a polyline; the arrowhead is at the last point
    label: Box  # where the trigger's name is drawn


@dataclass(frozen=True, slots=True)
class Layout:
    """Everything the SVG draws, as geometry."""

    width: float
    height: float
    states: dict[str, Box]
    groups: dict[str, Box]
    edges: tuple[Edge, ...]
    initial: tuple[Point, Point]  # the start dot and where its arrow lands


NODE_H = 34.0
NODE_PAD = 16.0  # a state's name to its box's sides
STATE_SIZE = 13.0
LABEL_SIZE = 12.0
CAPTION_SIZE = 12.0
LABEL_H = LABEL_SIZE * LINE_EM
GAP = 6.0  # a label to its line
TRACK = 18.0  # an up or down arrow between two waiting states, off their centre line
ROW_PITCH = 100.0  # between the waiting states' centres
TERMINAL_PITCH = 52.0
PAD = 16.0  # inside a group box
MARGIN = 16.0
TITLE = "flashfsm: the job state machine"
SUBTITLE = (
    "drawn from flashfsm/fsm/table.py · an arrow leaving a box (from a dot on its edge) "
    "leaves every state in the box"
)


def _label_w(text: str) -> float:
    return text_width(text, LABEL_SIZE)


def _above(x0: float, x1: float, y: float, text: str) -> Box:
    """A label centred over the horizontal segment (x0..x1, y)."""
    w = _label_w(text)
    return Box((x0 + x1) / 2 - w / 2, y - GAP / 2 - LABEL_H, w, LABEL_H)


def _beside(x: float, y: float, text: str, *, left: bool) -> Box:
    """A label vertically centred on y, ending GAP left of x (or starting GAP right of it)."""
    w = _label_w(text)
    return Box(x - GAP - w if left else x + GAP, y - LABEL_H / 2, w, LABEL_H)


def _group_of(sources: Sequence[JobPhase]) -> Group | None:
    return next((g for g in GROUPS if set(g.states) == set(sources)), None)


def _place(candidates: Iterable[Box], taken: list[Box]) -> Box:
    """The first candidate clear of every box taken; it is taken in turn."""
    listed = list(candidates)
    chosen = next((c for c in listed if not any(c.overlaps(t) for t in taken)), listed[0])
    taken.append(chosen)
    return chosen


def _nudged(box: Box) -> Iterable[Box]:
    """A label's spot, then spots further and further from it (down, then up)."""
    yield box
    for k in range(1, 12):
        yield box.moved(0, k * (LABEL_H + 2))
        yield box.moved(0, -k * (LABEL_H + 2))


#: A row of the table: its trigger, its sources' and destination's names, the group it leaves.
_Row = tuple[str, tuple[str, ...], str, Group | None]
#: An edge as drawn before the shift: trigger, sources, dest, group, polyline, label box.
_Drawn = tuple[str, tuple[str, ...], str, str | None, tuple[Point, ...], Box]
#: A single-source edge: trigger, source, destination.
_Single = tuple[str, str, str]


@dataclass(slots=True)
class _Sketch:
    """The picture as it is laid out, before it is shifted into place: the states' boxes so
    far, every box a label must keep clear of, and the edges drawn, in drawing order."""

    node_w: float
    table: list[_Row]
    singles: list[_Single]
    states: dict[str, Box]
    taken: list[Box]
    drawn: list[_Drawn]


def layout() -> Layout:
    """Where every state, stage box and edge of the transition table is drawn.

    Coordinates are computed with the waiting column's centre line at x = 0 and its first
    state's centre at y = 0, then shifted into the picture.
    """
    node_w = max(text_width(p.value, STATE_SIZE, bold=True) for p in JobPhase) + 2 * NODE_PAD
    states: dict[str, Box] = {
        p.value: Box(-node_w / 2, i * ROW_PITCH - NODE_H / 2, node_w, NODE_H)
        for i, p in enumerate(WAITING)
    }
    table = [
        (trigger, tuple(s.value for s in sources), dest.value, _group_of(sources))
        for trigger, sources, dest in TRANSITIONS
    ]
    singles = [(t, s, d) for t, srcs, d, g in table if g is None for s in srcs]
    sketch = _Sketch(node_w, table, singles, states, list(states.values()), [])
    waiting_box = _waiting_column(sketch)
    running_box, top_track = _running_columns(sketch, waiting_box)
    initial_dot = (-TRACK, top_track)
    initial_end = (-TRACK, states[INITIAL.value].y)
    active_box = _terminal_column(sketch, waiting_box, running_box, top_track)
    # Anything else the table may grow: a straight arrow between the two states.
    drawn, taken = sketch.drawn, sketch.taken
    listed = {(t, s, d) for t, srcs, d, _, _, _ in drawn for s in srcs}
    for t, s, d in [(t, s, d) for t, srcs, d, _ in table for s in srcs]:
        if (t, s, d) not in listed:
            a, b = states[s], states[d]
            pts = ((a.cx, a.cy), (b.cx, b.cy))
            mid = ((a.cx + b.cx) / 2, (a.cy + b.cy) / 2)
            label = _place(_nudged(_beside(mid[0], mid[1], t, left=False)), taken)
            drawn.append((t, (s,), d, None, pts, label))
    groups = {"active": active_box, "waiting": waiting_box, "running": running_box}
    return _shifted(sketch, groups, (initial_dot, initial_end))


def _waiting_column(sketch: _Sketch) -> Box:
    """Draw the arrows within the waiting column; the waiting group's box."""
    node_w, states, taken, drawn = sketch.node_w, sketch.states, sketch.taken, sketch.drawn
    waiting = [p.value for p in WAITING]
    row = {name: i for i, name in enumerate(waiting)}
    # Within the waiting column: neighbours get a straight arrow (down on the left track, up
    # on the right), others a bracket round the column (down on the left, up on the right).
    inner = [(t, s, d) for t, s, d in sketch.singles if s in row and d in row and s != d]
    adjacent = [(t, s, d) for t, s, d in inner if abs(row[s] - row[d]) == 1]
    skips = [(t, s, d) for t, s, d in inner if abs(row[s] - row[d]) > 1]
    side_reach = {
        left: max(
            [TRACK + GAP + _label_w(t) for t, s, d in adjacent if (row[d] > row[s]) == left]
            + [node_w / 2]
        )
        for left in (True, False)
    }
    for t, s, d in adjacent:
        down = row[d] > row[s]
        x = -TRACK if down else TRACK
        y0 = states[s].bottom if down else states[s].y
        y1 = states[d].y if down else states[d].bottom
        label = _place(_nudged(_beside(x, (y0 + y1) / 2, t, left=down)), taken)
        drawn.append((t, (s,), d, None, ((x, y0), (x, y1)), label))
    bracket = {True: -side_reach[True], False: side_reach[False]}
    for t, s, d in skips:
        down = row[d] > row[s]
        w = _label_w(t)
        # the label sits between the bracket and the column, at a row the bracket passes
        out = max(abs(bracket[down]) + GAP, node_w / 2 + 2 * GAP + w)
        bx = -out if down else out
        bracket[down] = bx
        edge_x = -node_w / 2 if down else node_w / 2
        ys, yd = states[s].cy, states[d].cy
        mid = states[waiting[(row[s] + row[d]) // 2]].cy
        label = _place(_nudged(_beside(bx, mid, t, left=not down)), taken)
        drawn.append((t, (s,), d, None, ((edge_x, ys), (bx, ys), (bx, yd), (edge_x, yd)), label))
    waiting_box = Box(
        min(bracket[True], -side_reach[True]) - PAD,
        states[waiting[0]].y - PAD - CAPTION_SIZE * LINE_EM - GAP,
        0.0,
        0.0,
    )
    w_right = max(bracket[False], side_reach[False]) + PAD
    return Box(
        waiting_box.x,
        waiting_box.y,
        w_right - waiting_box.x,
        states[waiting[-1]].bottom + PAD - waiting_box.y,
    )


def _running_columns(sketch: _Sketch, waiting_box: Box) -> tuple[Box, float]:
    """Place the running states and draw the arrows between them and the waiting column;
    the running group's box, and the height of the track over the waiting column."""
    node_w, table, states, taken = sketch.node_w, sketch.table, sketch.states, sketch.taken
    drawn = sketch.drawn
    waiting = [p.value for p in WAITING]
    running = [p.value for p in RUNNING]
    # The running states, one column each, on the row of the middle waiting state.
    run_y = states[waiting[len(waiting) // 2]].cy
    out_of_waiting = [(t, d) for t, _, d, g in table if g is GROUPS[1] and d in running]
    into_waiting = [(t, d) for t, _, d, g in table if g is GROUPS[2] and d in waiting]
    lead = max([_label_w(t) for t, _ in out_of_waiting] + [0.0]) + 2 * GAP + 2 * PAD
    running_x = waiting_box.right + lead
    x = running_x + PAD
    between = {(s, d): _label_w(t) for t, s, d in sketch.singles if s in running and d in running}
    for i, name in enumerate(running):
        if i:
            width = max([w for (s, d), w in between.items() if {s, d} <= set(running)] + [0.0])
            x += width + 2 * GAP + 2 * PAD
        states[name] = Box(x, run_y - NODE_H / 2, node_w, NODE_H)
        x += node_w
    taken.extend(states[name] for name in running)
    top_track = waiting_box.y - LABEL_H - 2 * GAP
    middle = len(waiting) // 2
    gaps = [(states[a].cy + states[b].cy) / 2 for a, b in pairwise(waiting)]
    low_tracks = gaps[middle:] or [waiting_box.bottom - PAD]
    running_box = Box(
        running_x,
        run_y - NODE_H / 2 - PAD - CAPTION_SIZE * LINE_EM - GAP,
        x + PAD - running_x,
        0.0,
    )
    lowest = run_y + NODE_H / 2 + PAD
    for t, d in out_of_waiting:
        dest = states[d]
        if d == running[0] or not low_tracks:
            pts: tuple[Point, ...] = ((waiting_box.right, dest.cy), (dest.x, dest.cy))
            y = dest.cy
        else:  # under the columns before it, then up into it
            y = low_tracks.pop(0)
            pts = ((waiting_box.right, y), (dest.cx, y), (dest.cx, dest.bottom))
            lowest = max(lowest, y + PAD)
        label = _place(_nudged(_above(waiting_box.right, running_box.x, y, t)), taken)
        drawn.append((t, tuple(waiting), d, "waiting", pts, label))
    running_box = Box(running_box.x, running_box.y, running_box.w, lowest - running_box.y)
    for t, d in into_waiting:  # back over the top into the state
        dest = states[d]
        start_x = running_box.x + PAD
        pts = ((start_x, running_box.y), (start_x, top_track), (TRACK, top_track), (TRACK, dest.y))
        label = _place(_nudged(_above(waiting_box.right, running_box.x, top_track, t)), taken)
        drawn.append((t, tuple(running), d, "running", pts, label))
    for t, s, d in sketch.singles:
        if s in running and d in running:
            a, b = states[s], states[d]
            pts = ((a.right, a.cy), (b.x, b.cy))
            label = _place(_nudged(_above(a.right, b.x, a.cy, t)), taken)
            drawn.append((t, (s,), d, None, pts, label))
    return running_box, top_track


def _terminal_column(sketch: _Sketch, waiting_box: Box, running_box: Box, top_track: float) -> Box:
    """Place the terminal outcomes in a column right of everything the active box holds and
    draw the arrows into them; the active group's box."""
    states, taken = sketch.states, sketch.taken
    active_top = top_track - LABEL_H - 2 * GAP - CAPTION_SIZE * LINE_EM - GAP
    active_box = Box(
        waiting_box.x - PAD,
        active_top,
        max(waiting_box.right, running_box.right) + PAD - (waiting_box.x - PAD),
        0.0,
    )
    to_terminal = [(t, d) for t, _, d, g in sketch.table if g is GROUPS[0] and d in _TERMINAL]
    lead = max([_label_w(t) for t, _ in to_terminal] + [0.0]) + 2 * GAP + 2 * PAD
    term_x = active_box.right + lead
    terminals = [p.value for p in TERMINAL]
    first_y = active_top + CAPTION_SIZE * LINE_EM + 2 * GAP + NODE_H / 2 + LABEL_H
    for i, name in enumerate(terminals):
        states[name] = Box(term_x, first_y + i * TERMINAL_PITCH - NODE_H / 2, sketch.node_w, NODE_H)
    taken.extend(states[name] for name in terminals)
    inner_bottom = max(waiting_box.bottom, running_box.bottom)
    active_bottom = max(inner_bottom, states[terminals[-1]].bottom) + PAD
    active_box = Box(active_box.x, active_box.y, active_box.w, active_bottom - active_box.y)
    for t, d in to_terminal:
        dest = states[d]
        pts = ((active_box.right, dest.cy), (dest.x, dest.cy))
        label = _place(_nudged(_above(active_box.right, dest.x, dest.cy, t)), taken)
        sketch.drawn.append((t, tuple(p.value for p in ACTIVE), d, "active", pts, label))
    return active_box


def _shifted(sketch: _Sketch, groups: dict[str, Box], initial: tuple[Point, Point]) -> Layout:
    """The sketch shifted so the active box starts at the margin, under the title."""
    states, active_box = sketch.states, groups["active"]
    dx = MARGIN - active_box.x
    dy = MARGIN + 18 * LINE_EM + 12 * LINE_EM + 2 * GAP - active_box.y

    def shift(p: Point) -> Point:
        return (p[0] + dx, p[1] + dy)

    edges = tuple(
        Edge(t, srcs, d, g, tuple(shift(p) for p in pts), label.moved(dx, dy))
        for t, srcs, d, g, pts, label in sketch.drawn
    )
    width = max(b.right for b in states.values()) + dx + MARGIN
    width = max(width, MARGIN + text_width(SUBTITLE, 12) + MARGIN)
    height = max(active_box.bottom, max(b.bottom for b in states.values())) + dy + MARGIN
    return Layout(
        width=width,
        height=height,
        states={k: v.moved(dx, dy) for k, v in states.items()},
        groups={k: v.moved(dx, dy) for k, v in groups.items()},
        edges=edges,
        initial=(shift(initial[0]), shift(initial[1])),
    )


#: Fill and text colour of each active state (the timeline draws its spans in the same).
PHASE_STYLE: dict[str, tuple[str, str]] = {
    JobPhase.QUEUED.value: ("#8db4e2", "#10243d"),
    JobPhase.THROTTLED.value: ("#f4b942", "#3d2a00"),
    JobPhase.UNHEALTHY.value: ("#e4572e", "#ffffff"),
    JobPhase.SETUP.value: ("#9d87d8", "#1e1238"),
    JobPhase.TRAINING.value: ("#37a168", "#ffffff"),
}
OUTCOME_OK = "#1b7a3d"
OUTCOME_FAILED = "#b3261e"  # the job's own failure, not retried
OUTCOME_RETRIED = "#b85c00"  # infra-shaped failures a run retries


def outcome_colour(state: str) -> str:
    """The colour of a terminal outcome: green success, orange a failure a run retries, red
    one it does not (the job's own failure, a refused key)."""
    phase = JobPhase(state)
    if phase is JobPhase.SUCCEEDED:
        return OUTCOME_OK
    return OUTCOME_RETRIED if FAILURE_KIND.get(phase) in RETRIABLE_FAILURES else OUTCOME_FAILED


def _path(points: Sequence[Point]) -> str:
    head, *rest = points
    return f"M {head[0]:.1f} {head[1]:.1f} " + " ".join(f"L {x:.1f} {y:.1f}" for x, y in rest)


def _text(box: Box, text: str, size: float, cls: str, **attrs: str) -> str:
    """A line of text whose top-left corner is the box's (attribute names: `_` for `-`)."""
    extra = "".join(f' {k.replace("_", "-")}="{esc(v)}"' for k, v in attrs.items())
    return (
        f'<text class="{cls}" x="{box.x:.1f}" y="{box.y + size * ASCENT_EM:.1f}" '
        f'font-size="{size:g}"{extra}>{esc(text)}</text>'
    )


def svg() -> str:
    """The job machine as a standalone SVG document, laid out by `layout()`."""
    lay = layout()
    w, h = lay.width, lay.height
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flashfsm-diagram" width="{w:.0f}" '
        f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" font-family="{FONT}" role="img" '
        f'aria-label="{esc(TITLE)}">',
        f"<title>{esc(TITLE)}</title>",
        "<defs>",
        *(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
            f'markerHeight="8" orient="auto-start-reverse"><path d="M 0 1 L 9 5 L 0 9 z" '
            f'fill="{colour}"/></marker>'
            for name, colour in _ARROWS.items()
        ),
        "</defs>",
        f'<rect x="0" y="0" width="{w:.0f}" height="{h:.0f}" fill="#ffffff"/>',
        _text(Box(MARGIN, MARGIN, 0, 0), TITLE, 18, "title", font_weight="bold", fill="#1a1a1a"),
        _text(Box(MARGIN, MARGIN + 18 * LINE_EM + 2, 0, 0), SUBTITLE, 12, "subtitle", fill="#555"),
    ]
    for group in GROUPS:
        box = lay.groups[group.name]
        dash = "" if group.name == "active" else ' stroke-dasharray="5 4"'
        fill = "#f6f7f9" if group.name == "active" else "none"
        out.append(
            f'<g class="group" data-group="{esc(group.name)}">'
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
            f'rx="8" fill="{fill}" stroke="#9aa3ad" stroke-width="1.2"{dash}/>'
            + _text(
                Box(box.x + 10, box.y + GAP, 0, 0),
                group.caption,
                CAPTION_SIZE,
                "group-caption",
                fill="#555555",
                font_style="italic",
            )
            + "</g>"
        )
    (dx, dy), (ex, ey) = lay.initial
    out.append(
        f'<g class="initial" data-to="{INITIAL.value}"><circle cx="{dx:.1f}" cy="{dy:.1f}" r="6" '
        f'fill="#1a1a1a"/><path d="M {dx:.1f} {dy + 6:.1f} L {ex:.1f} {ey:.1f}" stroke="#1a1a1a" '
        f'stroke-width="1.5" fill="none" marker-end="url(#arrow-plain)"/></g>'
    )
    for edge in lay.edges:
        colour = outcome_colour(edge.dest) if edge.dest in _TERMINAL else "#3b4450"
        marker = _marker(edge.dest)
        out.append(
            f'<g class="edge" data-trigger="{esc(edge.trigger)}" '
            f'data-from="{esc(" ".join(edge.sources))}" data-to="{esc(edge.dest)}"'
            + (f' data-group="{esc(edge.group)}"' if edge.group else "")
            + f'><path d="{_path(edge.points)}" stroke="{colour}" stroke-width="1.5" '
            f'fill="none" marker-end="url(#arrow-{marker})"/>'
            + (
                f'<circle class="edge-start" cx="{edge.points[0][0]:.1f}" '
                f'cy="{edge.points[0][1]:.1f}" r="3.5" fill="{colour}"/>'
                if edge.group
                else ""
            )
            + _text(edge.label, edge.trigger, LABEL_SIZE, "edge-label", fill=colour)
            + "</g>"
        )
    for name, box in lay.states.items():
        out.append(_state_svg(name, box))
    out.append("</svg>")
    return "\n".join(out)


_TERMINAL = {p.value for p in TERMINAL}
_ARROWS = {
    "plain": "#3b4450",
    "ok": OUTCOME_OK,
    "failed": OUTCOME_FAILED,
    "retried": OUTCOME_RETRIED,
}


def _marker(dest: str) -> str:
    if dest not in _TERMINAL:
        return "plain"
    colour = outcome_colour(dest)
    return {OUTCOME_OK: "ok", OUTCOME_FAILED: "failed"}.get(colour, "retried")


def _state_svg(name: str, box: Box) -> str:
    terminal = name in _TERMINAL
    if terminal:
        ink = outcome_colour(name)
        frame = (
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
            f'rx="8" fill="#ffffff" stroke="{ink}" stroke-width="1.5"/>'
            f'<rect x="{box.x + 3:.1f}" y="{box.y + 3:.1f}" width="{box.w - 6:.1f}" '
            f'height="{box.h - 6:.1f}" rx="6" fill="none" stroke="{ink}" stroke-width="1"/>'
        )
    else:
        fill, ink = PHASE_STYLE.get(name, ("#dddddd", "#1a1a1a"))
        frame = (
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
            f'rx="8" fill="{fill}" stroke="#ffffff" stroke-width="1"/>'
        )
    width = text_width(name, STATE_SIZE, bold=True)
    spot = Box(box.cx - width / 2, box.cy - STATE_SIZE * LINE_EM / 2, width, 0)
    return (
        f'<g class="state" data-state="{esc(name)}" data-terminal="{str(terminal).lower()}">'
        + frame
        + _text(spot, name, STATE_SIZE, "state-label", font_weight="bold", fill=ink)
        + "</g>"
    )
