"""The state diagram as an SVG: laid out from the transition table, checked as geometry and
as Chromium draws it."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from flashfsm.fsm.table import ACTIVE, RUNNING, TERMINAL, TRANSITIONS, WAITING, JobPhase
from flashfsm.postmortem import diagram
from flashfsm.postmortem.diagram import GROUPS, Box
from tests.test_render import CHROMIUM
from tests.test_render_chromium import REPORT_JS, SVG_BOX_JS, chromium_measure, svg_page

#: Every (trigger, source, destination) the table allows.
TABLE = {(t, s.value, d.value) for t, sources, d in TRANSITIONS for s in sources}
EPS = 1e-6


@pytest.fixture(scope="module")
def layout() -> diagram.Layout:
    return diagram.layout()


def _on_border(point: tuple[float, float], box: Box) -> bool:
    x, y = point
    within_x = box.x - EPS <= x <= box.right + EPS
    within_y = box.y - EPS <= y <= box.bottom + EPS
    on_side = min(abs(x - box.x), abs(x - box.right)) < EPS and within_y
    on_edge = min(abs(y - box.y), abs(y - box.bottom)) < EPS and within_x
    return on_side or on_edge


def test_every_state_is_drawn_once(layout):
    assert sorted(layout.states) == sorted(p.value for p in JobPhase)
    root = ET.fromstring(diagram.svg())
    ns = "{http://www.w3.org/2000/svg}"
    drawn = [g.get("data-state") for g in root.iter(f"{ns}g") if g.get("class") == "state"]
    assert sorted(drawn) == sorted(layout.states)


def test_every_transition_of_the_table_is_drawn_exactly_once(layout):
    drawn = [(e.trigger, s, e.dest) for e in layout.edges for s in e.sources]
    assert set(drawn) == TABLE and len(drawn) == len(TABLE)
    # a row from a whole stage is one arrow; any other row, an arrow per source
    groups = [set(g.states) for g in GROUPS]
    arrows = sum(1 if set(src) in groups else len(src) for _, src, _ in TRANSITIONS)
    assert len(layout.edges) == arrows == 20


def test_an_edge_leaving_a_box_stands_for_exactly_the_states_in_it(layout):
    groups = {g.name: {s.value for s in g.states} for g in GROUPS}
    boxed = {e.trigger: e.group for e in layout.edges if e.group}
    assert boxed == {
        "picked_up": "waiting",
        "resumed": "waiting",
        "requeued": "running",
        **{t: "active" for t, _, d in TRANSITIONS if d in TERMINAL},
    }
    for edge in layout.edges:
        if edge.group:
            assert set(edge.sources) == groups[edge.group]


def test_each_edge_runs_from_its_source_to_its_destination(layout):
    for edge in layout.edges:
        start, end = edge.points[0], edge.points[-1]
        assert _on_border(end, layout.states[edge.dest]), edge
        source = layout.groups[edge.group] if edge.group else layout.states[edge.sources[0]]
        assert _on_border(start, source), edge
        for a, b in itertools.pairwise(edge.points):  # straight runs, across or down
            assert abs(a[0] - b[0]) < EPS or abs(a[1] - b[1]) < EPS, edge


def test_no_edge_label_overlaps_another_or_a_state(layout):
    labels = [e.label for e in layout.edges]
    for a, b in itertools.combinations(labels, 2):
        assert not a.overlaps(b), (a, b)
    for label in labels:
        for name, box in layout.states.items():
            assert not label.overlaps(box), (label, name)


def test_states_stand_in_columns_by_lifecycle_stage(layout):
    s = layout.states
    waiting = [s[p.value] for p in WAITING]
    assert len({b.cx for b in waiting}) == 1  # one column, stacked
    assert [b.y for b in waiting] == sorted(b.y for b in waiting)
    setup, training = (s[p.value] for p in RUNNING)
    terminal = [s[p.value] for p in TERMINAL]
    assert max(b.right for b in waiting) < setup.x < setup.right < training.x
    assert training.right < min(b.x for b in terminal)
    assert len({b.x for b in terminal}) == 1
    for group in GROUPS:
        box = layout.groups[group.name]
        for state in group.states:
            inner = s[state.value]
            assert box.x < inner.x and inner.right < box.right
            assert box.y < inner.y and inner.bottom < box.bottom
    assert all(not layout.groups["active"].overlaps(b) for b in terminal)
    assert set(ACTIVE) == set(WAITING) | set(RUNNING)


def test_everything_fits_the_picture(layout):
    boxes = [*layout.states.values(), *layout.groups.values(), *(e.label for e in layout.edges)]
    for box in boxes:
        assert box.x >= 0 and box.y >= 0
        assert box.right <= layout.width and box.bottom <= layout.height


def test_text_width_is_the_sum_of_the_advances():
    assert diagram.text_width("", 12) == 0
    assert diagram.text_width("ii", 20) == pytest.approx(2 * 569 * 20 / 2048)
    assert diagram.text_width("W", 10, bold=True) > diagram.text_width("W", 10)
    assert diagram.text_width("·", 12) == pytest.approx(651 * 12 / 2048)
    assert diagram.text_width("\u4e00", 12) == 12  # unknown: one em


MEASURE_DIAGRAM = (
    SVG_BOX_JS
    + """
  const out = {
    width: vb.width,
    height: vb.height,
    states: [...svg.querySelectorAll("g.state")].map((g) => ({
      state: g.dataset.state, text: g.querySelector("text").textContent,
      box: box(g.querySelector("rect"))})),
    edges: [...svg.querySelectorAll("g.edge")].map((g) => ({
      trigger: g.dataset.trigger, from: g.dataset.from.split(" "), to: g.dataset.to,
      text: g.querySelector("text.edge-label").textContent,
      label: box(g.querySelector("text.edge-label")), path: box(g.querySelector("path"))})),
    texts: [...svg.querySelectorAll("text")].map((t) => box(t)),
  };
"""
    + REPORT_JS
)


def _overlap(a: list[float], b: list[float]) -> bool:
    return Box(*a).overlaps(Box(*b))


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing")
def test_chromium_draws_every_state_and_transition_with_no_overlapping_labels(tmp_path):
    m: dict[str, Any] = chromium_measure(
        svg_page(diagram.svg()), tmp_path, "diagram", MEASURE_DIAGRAM
    )
    assert sorted(s["state"] for s in m["states"]) == sorted(p.value for p in JobPhase)
    assert all(s["text"] == s["state"] for s in m["states"])
    drawn = {(e["trigger"], s, e["to"]) for e in m["edges"] for s in e["from"]}
    assert drawn == TABLE
    assert all(e["text"] == e["trigger"] for e in m["edges"])
    # the layout's measure of each label is never narrower than the browser's
    planned = {(e.trigger, e.sources, e.dest): e.label for e in diagram.layout().edges}
    for e in m["edges"]:
        box = planned[(e["trigger"], tuple(e["from"]), e["to"])]
        assert 0 < e["label"][2] <= box.w + 0.5 and abs(e["label"][0] - box.x) < 1.0
    labels = [e["label"] for e in m["edges"]]
    for a, b in itertools.combinations(labels, 2):
        assert not _overlap(a, b), (a, b)
    for label in labels:
        for state in m["states"]:
            assert not _overlap(label, state["box"]), (label, state)
    for x, y, w, h in m["texts"]:  # nothing drawn off the picture
        assert x >= 0 and y >= 0 and x + w <= m["width"] + 0.5 and y + h <= m["height"] + 0.5
    for state in m["states"]:  # a state's name fits its box
        [text] = [t for t in m["texts"] if _overlap(t, state["box"])]
        assert text[0] >= state["box"][0] and text[0] + text[2] <= sum(state["box"][::2])
