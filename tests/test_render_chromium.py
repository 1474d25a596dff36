"""The timeline pictures of real logs, measured in headless Chromium.

Each picture is drawn from logs the simulator wrote (the demo's runs, a run built from
watched scenario jobs, a job log) and opened in Chromium with a measuring script added by
the test (the pictures themselves carry none). The script reports every label's box and
text as laid out by the browser; the tests check the legend, the labels, the detail cell
and the titles against what the picture was drawn from.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flashfsm import render
from flashfsm.adapters.stores import open_store
from flashfsm.demo import demo_run_name, run_demo, watch_scenarios
from tests.test_render import CHROMIUM, RUN_JOBS, build_run_log

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)",
)

#: The start of a measuring script: the page's SVG and `box(el)`, an element's box in the
#: SVG's own units (what every measuring script here reports in).
SVG_BOX_JS = """
<script>
(() => {
  const svg = document.querySelector("svg");
  const vb = svg.viewBox.baseVal;
  const sr = svg.getBoundingClientRect();
  const k = vb.width / sr.width;
  const box = (el) => {
    const r = el.getBoundingClientRect();
    return [(r.left - sr.left) * k, (r.top - sr.top) * k, r.width * k, r.height * k];
  };
"""

#: The end of a measuring script: its `out`, as JSON, into <pre id="measured">.
REPORT_JS = """
  const pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""

#: Reports what the browser laid out, in the SVG's own units, into <pre id="measured">.
MEASURE = (
    SVG_BOX_JS
    + """
  const own = (g, sel) => [...g.children].filter((c) => c.matches(sel));
  const all = (sel, root = svg) => [...root.querySelectorAll(sel)];
  const out = {
    width: vb.width,
    title: document.title,
    spans: all("rect.span").map((r) => ({key: r.dataset.span, state: r.dataset.state,
                                         box: box(r)})),
    spanLabels: all("text.span-label").map((t) => ({key: t.dataset.span, text: t.textContent,
                                                    box: box(t)})),
    labels: all("g.label").map((g) => ({
      full: g.dataset.label,
      width: Number(g.dataset.width),
      tip: own(g, "title").map((t) => t.textContent)[0] ?? null,
      lines: all("text", g).map((t) => ({text: t.textContent, cls: t.getAttribute("class"),
                                         box: box(t)})),
    })),
    texts: all("text").map((t) => ({text: t.textContent, cls: t.getAttribute("class"),
                                    labelled: t.closest("g.label") !== null, box: box(t)})),
    legend: all("g.legend-state").map((g) => g.dataset.state),
    headings: all("text.title, text.lane-title").map((t) => t.textContent),
    details: all("td.detail", document).map((td) => td.innerText),
  };
"""
    + REPORT_JS
)
#: Where a shortened label may end: before one of these, or after one of the last three.
BOUNDARY = " ·-_/"


def chromium_measure(page: str, tmp_path: Path, name: str, script: str = MEASURE) -> dict[str, Any]:
    """Open `page` (an HTML document) with a measuring `script` added in headless Chromium and
    return what the script measured (the JSON it left in `<pre id="measured">`)."""
    path = tmp_path / f"{name}.html"
    path.write_text(page.replace("</body>", script + "</body>"), encoding="utf-8")
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,900",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, done.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def svg_page(svg: str) -> str:
    """A bare HTML page around a standalone SVG."""
    head = '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
    return f'{head}<body style="margin:0">{svg}</body></html>'


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, render.Picture]:
    """Pictures of real logs: each demo run, a run of three watched scenario jobs with
    instant deploys and long lane subtitles, the same lanes side by side under long titles
    (as the demo draws several runs), and one job log."""
    tmp = tmp_path_factory.mktemp("pictures")
    url = f"sqlite:///{tmp}/events.db"
    results = run_demo(url, say=lambda line: None)
    streams = watch_scenarios(url, say=lambda line: None, jobs=RUN_JOBS)
    store = open_store(url)
    try:
        out: dict[str, render.Picture] = {}
        for result in results:
            out[f"demo-{demo_run_name(result.stream)}"] = render.picture(
                store.read(result.stream), store.read
            )
        long_gpus = [
            {"gpu_class": "NVIDIA H100 80GB HBM3 SXM5", "bonus": True, "cache_dropped": True},
            {
                "gpu_class": "NVIDIA-RTX-6000-Ada-Generation-48GB-community-cloud-spot-pool",
                "bonus": True,
                "cache_dropped": True,
            },
        ]
        run = build_run_log(store, streams, "run-wide", deploy_s=0.0, started=long_gpus)
        out["instant-deploys"] = render.picture(store.read(run), store.read)
        out["many-runs"] = render.Picture(
            "flashfsm demo: every run side by side",
            "each run from its own start",
            0.0,
            tuple(
                dataclasses.replace(lane, key=f"{name}-{lane.key}", title=f"{name} · {lane.title}")
                for name, pic in out.items()
                for lane in pic.lanes
            ),
        )
        out["job"] = render.picture(store.read(streams[2]))
    finally:
        store.close()
    return out


@pytest.fixture(scope="module")
def measured(pictures, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Every picture's HTML page as Chromium laid it out."""
    tmp = tmp_path_factory.mktemp("chromium")
    return {name: chromium_measure(render.html(pic), tmp, name) for name, pic in pictures.items()}


NAMES = [
    "demo-clean",
    "demo-walk",
    "demo-crashloop",
    "demo-stall",
    "demo-codeerror",
    "demo-slowpull",
    "instant-deploys",
    "many-runs",
    "job",
]


def test_the_pictures_cover_the_demo_runs(pictures):
    assert sorted(NAMES) == sorted(pictures)


@pytest.mark.parametrize("name", NAMES)
def test_the_legend_lists_exactly_the_states_drawn(measured, pictures, name):
    m = measured[name]
    drawn = {span["state"] for span in m["spans"] if span["box"][2] > 0}
    assert set(m["legend"]) == drawn and len(m["legend"]) == len(drawn)
    in_data = {s.state for lane in pictures[name].lanes for s in lane.spans if s.end > s.start}
    assert drawn == in_data
    if name == "instant-deploys":
        assert render.DEPLOYING not in m["legend"]


def _whole_words(label: dict[str, Any]) -> str | None:
    """Why a label's visible text is not its full text or a cut of it at a word boundary
    with the full text in a tooltip (None: it is)."""
    lines = [line["text"] for line in label["lines"]]
    full = label["full"]
    squeezed, whole = "".join(lines).replace(" ", ""), full.replace(" ", "")
    if squeezed == whole:
        return None if all(line.strip() for line in lines) else f"an empty line in {lines}"
    if not lines[-1].endswith("…"):
        return f"{lines} is neither {full!r} nor ends in …"
    if label["tip"] != full:
        return f"{lines} is shortened but its tooltip is {label['tip']!r}"
    kept = squeezed[:-1]
    if not whole.startswith(kept):
        return f"{lines} is not the start of {full!r}"
    seen, cut = 0, 0
    while seen < len(kept):
        seen += full[cut] != " "
        cut += 1
    if kept and cut < len(full) and full[cut] not in BOUNDARY and full[cut - 1] not in "-_/":
        return f"{lines} cuts {full!r} mid-word at {cut}"
    return None


@pytest.mark.parametrize("name", NAMES)
def test_no_visible_label_is_cut_mid_word(measured, name):
    m = measured[name]
    assert m["labels"], "the picture has no bounded labels"
    problems = [p for p in map(_whole_words, m["labels"]) if p]
    assert not problems
    for text in m["texts"]:  # text outside a bounded label is never shortened
        assert text["labelled"] or not text["text"].endswith("…"), text
    for label in m["spanLabels"]:  # a state's name is written whole on its span or not at all
        [span] = [s for s in m["spans"] if s["key"] == label["key"]]
        assert label["text"] == span["state"]


def test_a_long_subtitle_wraps_or_is_shortened_with_a_tooltip(measured):
    m = measured["instant-deploys"]
    subs = [lab for lab in m["labels"] if lab["lines"][0]["cls"] == "lane-subtitle"]
    wrapped, shortened = subs[0], subs[1]
    assert [line["text"] for line in wrapped["lines"]] == [
        "NVIDIA H100 80GB HBM3 SXM5 · runpod ·",
        "bonus retry · no weight cache",
    ] and wrapped["tip"] is None
    assert len(shortened["lines"]) == 2 and shortened["lines"][-1]["text"].endswith("…")
    assert shortened["tip"] == shortened["full"].strip()
    assert "no weight cache" in shortened["full"]


def _inside(inner: list[float], outer: list[float], slack: float = 0.5) -> bool:
    x, y, w, h = inner
    ox, oy, ow, oh = outer
    return (
        ox - slack <= x
        and x + w <= ox + ow + slack
        and oy - slack <= y
        and y + h <= oy + oh + slack
    )


@pytest.mark.parametrize("name", NAMES)
def test_no_label_overflows_its_span_or_its_room(measured, name):
    m = measured[name]
    for label in m["spanLabels"]:
        [span] = [s for s in m["spans"] if s["key"] == label["key"]]
        assert _inside(label["box"], span["box"]), (label, span)
    for label in m["labels"]:
        for line in label["lines"]:
            assert line["box"][2] <= label["width"] + 0.5, (label["full"], line)
    for text in m["texts"]:
        x, _, w, _ = text["box"]
        assert x >= 0 and x + w <= m["width"] + 0.5, text


def test_every_state_with_room_is_named_on_its_span(measured, pictures):
    m = measured["demo-stall"]
    named = {label["key"] for label in m["spanLabels"]}
    widest = max(m["spans"], key=lambda s: s["box"][2])
    assert widest["state"] == "TRAINING" and widest["key"] in named


def test_a_dict_detail_reads_as_key_value_lines(measured, pictures):
    [lane] = pictures["demo-codeerror"].lanes
    [shown] = measured["demo-codeerror"]["details"]
    for text in (lane.detail, shown):
        assert "\\n" not in text and "{" not in text and "}" not in text
        assert '\\"' not in text
    lines = shown.splitlines()
    assert "error_message: reward model returned NaN" in lines
    assert lines[0] == "[FAILED]" and "error_traceback:" in lines


def _doubled(title: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", title.lower())
    return [a for a, b in itertools.pairwise(words) if a == b]


@pytest.mark.parametrize("name", NAMES)
def test_no_title_has_a_doubled_word(measured, name):
    m = measured[name]
    for title in [m["title"], *m["headings"]]:
        assert not _doubled(title), title


def test_a_job_log_is_titled_by_its_job_id(measured, pictures):
    lane = pictures["job"].lanes[0]
    assert lane.stream is not None and lane.stream.startswith("job-")
    assert measured["job"]["title"] == f"job {lane.stream[4:]}"
