"""The timeline picture: lanes and spans as data, self-contained SVG/HTML, headless Chromium."""

from __future__ import annotations

import itertools
import json
import struct
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashfsm import render
from flashfsm.adapters.stores import open_store
from flashfsm.demo import watch_scenarios
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Candidate,
    Concluded,
    DeployAttempted,
    DeployFailed,
    EndpointDeployed,
    EndpointReaped,
    Event,
    IdleCleared,
    IdleSeen,
    JobQueued,
    RunConcluded,
    RunStarted,
    WatchStarted,
)
from flashfsm.events.store import EventStore

CHROMIUM = Path("/usr/bin/chromium")
RUN_JOBS = (
    ("no_capacity", "attempt 0: no capacity"),
    ("crash_loop", "attempt 1: crash loop"),
    ("success", "attempt 2: success"),
)
CANDIDATES = (
    Candidate(gpu_class="A100-80GB", price_per_hour=1.9),
    Candidate(gpu_class="H100-80GB", price_per_hour=2.9),
    Candidate(gpu_class="L40S", price_per_hour=0.9),
)


def build_run_log(
    store: EventStore,
    job_streams: list[str],
    run: str = "run-demo",
    *,
    deploy_s: float = 40.0,
    started: Sequence[dict[str, object]] = (),
) -> str:
    """A run's stream whose attempts are copies of `job_streams`, one after another.

    Each job log is copied into `<run>-job<n>` with its times shifted so the attempts follow
    each other, with a `deploy_s` deploy before each; the run concludes as the last job did.
    `started[n]` overrides fields of attempt n's `AttemptStarted` (its GPU class, a bonus...).
    """
    t = 1_800_000_000.0
    run_events: list[Event] = []

    def add(cls: type, at: float, **fields: object) -> None:
        n = len(run_events)
        run_events.append(cls(stream=run, seq=n, id=f"{run}-{n:04d}", at=at, **fields))

    add(RunStarted, t, run_id=run, candidates=CANDIDATES)
    last: Concluded | None = None
    for n, source in enumerate(job_streams):
        events = store.read(source)
        job_stream = f"{run}-job{n}"
        t += 5
        gpu = CANDIDATES[n % len(CANDIDATES)].gpu_class
        on_last = n == len(job_streams) - 1
        fields: dict[str, object] = {
            "attempt": n,
            "candidate": n % len(CANDIDATES),
            "provider": "runpod",
            "gpu_class": gpu,
            "on_last_gpu": on_last,
            "endpoint_name": f"flash-{run}-{n}",
        }
        add(AttemptStarted, t, **(fields | dict(started[n] if n < len(started) else {})))
        t += deploy_s
        add(EndpointDeployed, t, attempt=n, endpoint_id=f"ep{n}", endpoint_name=f"flash-{run}-{n}")
        shift = t - events[0].at
        copied = [
            e.model_copy(
                update={"stream": job_stream, "at": e.at + shift, "id": f"{job_stream}-{i}"}
            )
            for i, e in enumerate(events)
        ]
        store.append(job_stream, copied, 0)
        add(
            JobQueued,
            t,
            attempt=n,
            endpoint_id=f"ep{n}",
            job_id=f"j{n}",
            job_stream=job_stream,
            submitted_at=t,
        )
        last = copied[-1]
        assert isinstance(last, Concluded)
        t = last.at
        add(AttemptEnded, t, attempt=n, ok=last.ok, failure=last.failure, rule=last.rule)
    assert last is not None
    add(RunConcluded, t, ok=last.ok, failure=last.failure, attempts=len(job_streams))
    store.append(run, run_events, 0)
    return run


@pytest.fixture(scope="module")
def run_store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('render')}/events.db"
    streams = watch_scenarios(url, say=lambda line: None, jobs=RUN_JOBS)
    store = open_store(url)
    run = build_run_log(store, streams)
    yield store, run, streams
    store.close()


def _contiguous(spans: tuple[render.Span, ...]) -> bool:
    return all(a.end == pytest.approx(b.start) for a, b in itertools.pairwise(spans))


def test_a_job_log_is_one_lane_of_contiguous_states_ending_at_its_verdict(run_store):
    store, _, streams = run_store
    events = store.read(streams[2])  # success
    pic = render.picture(events)
    [lane] = pic.lanes
    assert [s.state for s in lane.spans] == ["QUEUED", "SETUP", "TRAINING"]
    assert lane.spans[0].start == 0.0 and _contiguous(lane.spans)
    assert lane.spans[-1].end == pytest.approx(events[-1].at - events[0].at)
    [mark] = [m for m in lane.marks if m.kind == "verdict"]
    assert mark.label == "SUCCEEDED · completed" and mark.ok is True
    assert (pic.verdict, pic.ok, lane.rule) == ("SUCCEEDED", True, "completed")


def test_a_run_log_has_one_lane_per_attempt_with_the_job_states_and_verdicts(run_store):
    store, run, _ = run_store
    pic = render.picture(store.read(run), store.read)
    assert [lane.key for lane in pic.lanes] == ["attempt-0", "attempt-1", "attempt-2"]
    assert [lane.verdict for lane in pic.lanes] == ["NO_CAPACITY", "STALLED", "SUCCEEDED"]
    assert [lane.rule for lane in pic.lanes] == ["queue_grace", "unhealthy_worker", "completed"]
    assert (pic.verdict, pic.ok) == ("SUCCEEDED", True)
    for lane in pic.lanes:
        assert lane.spans[0].state == render.DEPLOYING
        assert lane.spans[0].end - lane.spans[0].start == pytest.approx(40.0)
        assert _contiguous(lane.spans)
    assert [s.state for s in pic.lanes[1].spans] == [render.DEPLOYING, "UNHEALTHY"]
    assert pic.lanes[2].subtitle == "L40S · runpod · last GPU"
    # lanes follow each other on one axis
    assert pic.lanes[0].end <= pic.lanes[1].spans[0].start <= pic.lanes[1].end
    assert pic.duration == pytest.approx(pic.lanes[2].end)


def test_a_reattach_after_a_blind_gap_leaves_an_unwatched_span(run_store):
    store, _, streams = run_store
    events = store.read(streams[2])
    k = 8
    gap = 500.0
    head = events[:k]
    reattach = WatchStarted(
        stream=head[0].stream,
        seq=k,
        id="reattach",
        at=head[-1].at + gap,
        watcher="b",
        reattach=True,
    )
    tail = [e.model_copy(update={"seq": e.seq + 1, "at": e.at + gap}) for e in events[k:]]
    pic = render.picture([*head, reattach, *tail])
    spans = pic.lanes[0].spans
    [blind] = [s for s in spans if s.state == render.UNWATCHED]
    assert blind.end - blind.start == pytest.approx(gap)
    assert _contiguous(spans)
    assert any(m.kind == "reattach" for m in pic.lanes[0].marks)


def test_an_open_log_ends_its_lane_with_no_verdict_yet(run_store):
    store, _, streams = run_store
    events = store.read(streams[0])[:12]  # no_capacity, still queued
    pic = render.picture(events)
    [lane] = pic.lanes
    assert lane.verdict is None and pic.verdict is None and pic.subtitle == "no verdict yet"
    assert lane.spans[-1].end == pytest.approx(events[-1].at - events[0].at)
    assert [m.label for m in lane.marks] == ["QUEUED · no verdict yet"]
    ET.fromstring(render.svg(pic))


def test_svg_and_html_are_self_contained(run_store):
    store, run, _ = run_store
    pic = render.picture(store.read(run), store.read)
    svg = render.svg(pic)
    root = ET.fromstring(svg)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    lanes = [g for g in root.iter(f"{ns}g") if g.get("class") == "lane"]
    assert [g.get("data-lane") for g in lanes] == ["attempt-0", "attempt-1", "attempt-2"]
    assert [g.get("data-verdict") for g in lanes] == ["NO_CAPACITY", "STALLED", "SUCCEEDED"]
    page = render.html(pic)
    for doc in (svg, page):
        lowered = doc.lower()
        for needle in ("<script", "<link", "src=", "href=", "@import", "http://", "https://"):
            if needle == "http://":
                lowered = lowered.replace("http://www.w3.org/2000/svg", "")
            assert needle not in lowered, needle
    assert page.startswith("<!DOCTYPE html>") and svg in page


def test_render_escapes_text():
    pic = render.Picture(
        "a <b> & c", "sub", 0.0, (render.Lane("x", "t<", "s&", (render.Span("QUEUED", 0, 5),)),)
    )
    ET.fromstring(render.svg(pic))
    assert "a &lt;b&gt; &amp; c" in render.html(pic)


def _log(stream: str, *specs: tuple[type, float, dict[str, object]]) -> list[Event]:
    return [
        cls(stream=stream, seq=n, id=f"{stream}-{n}", at=at, **fields)
        for n, (cls, at, fields) in enumerate(specs)
    ]


def test_a_run_is_drawn_from_its_fold_with_errors_marked_and_the_open_attempt_to_its_end():
    t = 1_000.0
    events = _log(
        "run-open",
        (RunStarted, t, {"run_id": "open", "candidates": CANDIDATES}),
        (AttemptStarted, t, {"attempt": 0, "candidate": 0, "provider": "runpod", "gpu_class": "A"}),
        (DeployFailed, t + 20, {"attempt": 0, "error_class": "DeployError", "message": "quota"}),
        (AttemptEnded, t + 20, {"attempt": 0, "ok": False, "failure": "poll_error"}),
        (
            AttemptStarted,
            t + 50,
            {"attempt": 1, "candidate": 1, "provider": "runpod", "gpu_class": "B"},
        ),
        (DeployAttempted, t + 80, {"attempt": 1, "account": 0, "endpoint_name": "flash-b"}),
    )
    pic = render.picture(events)
    first, second = pic.lanes
    assert [(s.state, s.start, s.end) for s in first.spans] == [(render.DEPLOYING, 0.0, 20.0)]
    assert [(m.kind, m.label) for m in first.marks] == [
        ("error", "deploy failed: DeployError"),
        ("verdict", "poll_error"),
    ]
    assert (first.verdict, first.ok) == ("poll_error", False)
    # still deploying: its span reaches the run's latest event, and it has no verdict yet
    assert [(s.state, s.start, s.end) for s in second.spans] == [(render.DEPLOYING, 50.0, 80.0)]
    assert second.verdict is None and second.marks == ()
    assert (pic.verdict, pic.subtitle.split(" · ")[0]) == (None, "run in progress")


def test_a_sweeper_log_is_a_lane_per_endpoint_of_idle_runs():
    t = 5_000.0
    events = _log(
        "sweeper",
        (IdleSeen, t, {"endpoint_id": "e1", "endpoint_name": "flash-a", "since": t}),
        (IdleSeen, t, {"endpoint_id": "e2", "endpoint_name": "flash-b", "since": t}),
        (IdleCleared, t + 120, {"endpoint_id": "e2", "reason": "busy"}),
        (IdleSeen, t + 300, {"endpoint_id": "e2", "endpoint_name": "flash-b", "since": t + 300}),
        (EndpointReaped, t + 600, {"endpoint_id": "e1", "endpoint_name": "flash-a", "idle_s": 600}),
    )
    pic = render.picture(events)
    reaped, busy = pic.lanes
    assert (reaped.title, reaped.subtitle, reaped.verdict) == ("flash-a", "e1", render.REAPED)
    assert [(s.state, s.start, s.end) for s in reaped.spans] == [(render.IDLE, 0.0, 600.0)]
    assert [m.label for m in reaped.marks] == ["REAPED · idle 10 min"]
    assert busy.verdict is None
    assert [(s.start, s.end) for s in busy.spans] == [(0.0, 120.0), (300.0, 600.0)]
    assert [m.kind for m in busy.marks] == ["cleared", "running"]
    assert pic.subtitle.startswith("1 reaped, 1 cleared, 1 timer(s) running")
    svg = render.svg(pic)
    ET.fromstring(svg)
    assert "endpoint reaped (idle time)" in svg and "verdict: success" not in svg


def test_ticks_and_labels():
    assert render.tick_step(310) == 60 and render.tick_step(45) == 5
    assert render.clock_label(150) == "2:30" and render.clock_label(3600) == "1 h"
    assert render.duration_text(310) == "5 min 10 s"


def _svg_legend_and_spans(svg: str) -> tuple[list[str], set[str]]:
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    legend = [
        g.get("data-state", "")
        for g in root.iter(f"{ns}g")
        if "legend-state" in (g.get("class") or "")
    ]
    drawn = {r.get("data-state", "") for r in root.iter(f"{ns}rect") if r.get("class") == "span"}
    return legend, drawn


def test_a_deploy_that_took_no_time_is_no_span_and_no_legend_entry(run_store):
    store, _, streams = run_store
    run = build_run_log(store, streams, "run-instant", deploy_s=0.0)
    pic = render.picture(store.read(run), store.read)
    assert [lane.spans[0].state for lane in pic.lanes] == ["QUEUED", "UNHEALTHY", "QUEUED"]
    legend, drawn = _svg_legend_and_spans(render.svg(pic))
    assert render.DEPLOYING not in legend and set(legend) == drawn
    assert legend == ["QUEUED", "UNHEALTHY", "SETUP", "TRAINING"]


def test_a_deploy_that_took_time_is_in_the_legend(run_store):
    store, run, _ = run_store
    legend, drawn = _svg_legend_and_spans(render.svg(render.picture(store.read(run), store.read)))
    assert legend[0] == render.DEPLOYING and set(legend) == drawn


def test_the_legend_names_only_the_verdict_kinds_shown(run_store):
    store, _, streams = run_store
    success = render.svg(render.picture(store.read(streams[2])))
    assert "verdict: success" in success
    assert "retriable failure" not in success and "not retried (state" not in success
    run = render.svg(render.picture(store.read(run_store[1]), store.read))
    assert "verdict: success" in run and "retriable failure" in run
    assert "not retried (state" not in run


@pytest.mark.parametrize(
    ("kind", "name", "title"),
    [
        ("job", "job-abc-s0-a1", "job abc-s0-a1"),
        ("run", "run-demo", "run demo"),
        ("run", "demo-7f3a-walk", "run demo-7f3a-walk"),
        ("sweeper", "sweeper", "sweeper"),
        ("sweeper", "sweeper-1", "sweeper 1"),
        ("job", "jobless", "job jobless"),
    ],
)
def test_titles_name_the_kind_of_log_once(kind, name, title):
    assert render.titled(kind, name) == title


def test_a_job_picture_is_titled_by_its_job_id(run_store):
    store, _, streams = run_store
    pic = render.picture(store.read(streams[2]))
    assert streams[2].startswith("job-") and pic.title == f"job {streams[2][4:]}"
    assert render.html(pic).count(f"<title>job {streams[2][4:]}</title>") == 1


def test_fit_lines_wraps_after_a_separator_and_keeps_it_on_the_line_before():
    text = "A100-80GB · runpod · last GPU · bonus retry"
    width = render.text_width("A100-80GB · runpod ·", 11) + 1
    lines = render.fit_lines(text, width, 11, lines=3)
    assert lines == ["A100-80GB · runpod ·", "last GPU ·", "bonus retry"]
    assert render.fit_lines(text, width, 11, lines=2) == [
        "A100-80GB · runpod ·",
        "last GPU · bonus…",
    ]
    # when breaking only after a separator would lose words, any space will do
    other = "L40S · runpod last GPU bonus"
    tight = render.text_width("L40S · runpod last", 11) + 1
    assert render.fit_lines(other, tight, 11, lines=2) == ["L40S · runpod last", "GPU bonus"]
    assert render.fit_lines(text, 10_000, 11) == [text]


def test_fit_lines_shortens_at_a_word_boundary_with_an_ellipsis():
    text = "L40S · runpod · last GPU · bonus retry"
    width = render.text_width("L40S · runpod · last GPU · bonus re…", 11)
    assert render.fit_lines(text, width, 11) == ["L40S · runpod · last GPU · bonus…"]
    name = "flash-demo-20260101-walk-l40s-s1"
    shown = render.fit_lines(name, render.text_width("flash-demo-2026", 13), 13)
    assert shown == ["flash-demo…"]
    assert render.fit_lines("supercalifragilistic", 20, 13) == ["…"]


WORDS = st.lists(
    st.sampled_from(["GPU", "L40S", "·", "runpod", "last", "no-weight-cache", "a", "bonus_retry"]),
    min_size=1,
    max_size=12,
)


@given(words=WORDS, width=st.floats(min_value=5, max_value=400), lines=st.integers(1, 3))
def test_fit_lines_never_cuts_a_word_nor_exceeds_the_width(words, width, lines):
    text = " ".join(words)
    shown = render.fit_lines(text, width, 11, lines=lines)
    assert 1 <= len(shown) <= lines
    for line in shown:
        assert line == "…" or render.text_width(line, 11) <= width
    assert not any(line.startswith("·") for line in shown[1:])
    squeezed = "".join(shown).replace(" ", "")
    if squeezed == text.replace(" ", ""):
        return
    assert shown[-1].endswith("…") and all(not line.endswith("…") for line in shown[:-1])
    kept = squeezed[:-1]
    assert text.replace(" ", "").startswith(kept)
    # where the kept text ends in the full text, a word ends: a space, a `·` or a hyphen
    seen, cut = 0, 0
    while seen < len(kept):
        seen += text[cut] != " "
        cut += 1
    assert kept == "" or cut == len(text) or text[cut] in " ·-_/" or text[cut - 1] in "-_/"


def test_detail_text_reads_a_json_error_as_key_value_lines():
    error = {
        "error_type": "<class 'ValueError'>",
        "error_message": "reward model returned NaN",
        "error_traceback": 'Traceback (most recent call last):\n  File "t.py"\nValueError: NaN',
        "context": {"step": 7, "tags": ["a", "b"]},
    }
    detail = f"[FAILED] {json.dumps(error)}\n--- error_sft.txt ---\nValueError: NaN\n"
    assert render.detail_text(detail).splitlines() == [
        "[FAILED]",
        "error_type: <class 'ValueError'>",
        "error_message: reward model returned NaN",
        "error_traceback:",
        "  Traceback (most recent call last):",
        '    File "t.py"',
        "  ValueError: NaN",
        "context:",
        "  step: 7",
        "  tags:",
        "    - a",
        "    - b",
        "--- error_sft.txt ---",
        "ValueError: NaN",
    ]
    plain = "[CANCELLED] the job was cancelled {by the user}"
    assert render.detail_text(plain) == plain


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("suffix", [".html", ".svg"])
def test_chromium_renders_the_timeline_with_its_lanes_and_verdict(run_store, tmp_path, suffix):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    store, run, _ = run_store
    pic = render.picture(store.read(run), store.read)
    page = tmp_path / f"timeline{suffix}"
    page.write_text(render.html(pic) if suffix == ".html" else render.svg(pic))
    png = tmp_path / "timeline.png"
    # One launch: the screenshot and the DOM after load.
    done = _chromium(
        f"--screenshot={png}",
        "--dump-dom",
        "--window-size=1200,800",
        page.as_uri(),
        profile=tmp_path / "profile",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert _png_size(png) == (1200, 800) and png.stat().st_size > 10_000
    text = done.stdout
    assert "parsererror" not in text and "This page contains the following errors" not in text
    for key in ("attempt-0", "attempt-1", "attempt-2"):
        assert f'data-lane="{key}"' in text
    assert 'class="verdict-label"' in text
    for label in (
        "NO_CAPACITY · queue_grace",
        "STALLED · unhealthy_worker",
        "SUCCEEDED · completed",
    ):
        assert label in text
