"""The worker's own records in the post-mortem: `explain`, `replay`, `timeline` and `logs`.

A watch with a worker reader records who took the job (`WorkerObserved`) and, before a
failed, preempted or stalled verdict, the worker's last log lines (`WorkerLogObserved`).
These tests check what the views make of them, on two kinds of log:

- synthetic job logs built with the event models, whose worker log holds hostile lines
  (HTML and script, ANSI escapes, NUL and other control characters, bidi overrides, a line
  break inside a line, a very long line): every view shows them, and none lets them act —
  the terminal sees them escaped, the picture HTML-escaped and inert;
- the example run in worker/ of the example logs (`flashfsm.example_logs()`: in the
  checkout, flashfsm/examples/worker/; `make_worker_example`): a run whose attempt 0
  crash-loops on an L40S (its log is the endpoint's unhealthy worker's) and whose attempt 1
  runs out of GPU memory on an A100 (its log is the job's own worker's), recorded by
  `supervise_run` over a scripted RunPod on a manual clock — the watch the library runs,
  with a client that answers the worker routes. The docs' transcripts run over it.

Regenerate the example with `python -m tests.test_worker_evidence_views --write` (or with
everything else, `python -m tests.test_docs_generated --write`), then review the diff.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from flashfsm import example_logs, read_jsonl_file, render, replay, supervise_run, verify
from flashfsm.adapters.stores import open_store
from flashfsm.cli import COMMANDS, app
from flashfsm.demo import GPUS
from flashfsm.events.models import (
    Concluded,
    Event,
    HealthObserved,
    JobSubmitted,
    StatusObserved,
    WatchStarted,
    WorkerCounts,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.fsm.findings import EXPLAIN_LOG_LINES, summarize, worker_evidence
from flashfsm.postmortem.explain import explain
from flashfsm.runs import Deployed, RunpodRunAdapters
from tests.store_support import jsonl_copied_to
from tests.test_render_chromium import REPORT_JS, SVG_BOX_JS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = example_logs() / "worker"  # what the tests read: the installed package's
SOURCE = ROOT / "flashfsm" / "examples" / "worker"  # what `--write` regenerates
START = 1_700_100_000.0  # the example's manual clock (2023-11-16 02:00:00 UTC)
T0 = 1_700_000_000.0

# --- the example run: a scripted RunPod ------------------------------------------------------


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """A manual clock: it moves only when the watch sleeps."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


#: endpoint name suffix -> what its worker does
CRASH_LINES = [
    "2023-11-16 02:01:05 worker boot: image flash-train:2.4.1-cu124",
    "2023-11-16 02:01:09 loading handler train.handler",
    "Traceback (most recent call last):",
    '  File "/app/handler.py", line 3, in <module>',
    "    import torch",
    "ImportError: libcudnn_cnn.so.9: cannot open shared object file: No such file or directory",
    "2023-11-16 02:01:12 worker exited with code 1; restarting (attempt 6)",
]
OOM_LINES = [
    *(
        f"2023-11-16 02:0{7 + n // 10}:{(n * 6) % 60:02d} step {n * 10} loss "
        f"{2.9 - n * 0.05:.2f} lr 2.0e-05 tokens/s 4410"
        for n in range(24)
    ),
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 88, in main',
    "    trainer.train()",
    '  File "/app/train.py", line 141, in train',
    "    loss.backward()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.25 GiB of which 1.12 GiB is free.",
]
OOM_ERROR = json.dumps(
    {
        "error_type": "<class 'torch.OutOfMemoryError'>",
        "error_message": "CUDA out of memory. Tried to allocate 2.00 GiB",
        "error_traceback": 'Traceback (most recent call last):\n  File "/app/train.py", '
        "line 88, in main\n    trainer.train()\ntorch.OutOfMemoryError: CUDA out of memory.",
    }
)


class ScriptedRunPod:
    """RunPod, scripted on a manual clock: the L40S endpoint's only worker crash-loops (the
    job stays IN_QUEUE), the A100 endpoint's worker takes the job 20 s after submission,
    trains, and fails with CUDA out of memory at 180 s. It answers the worker routes a
    watch with a worker reader calls (`endpoint_workers`, `get_endpoint`, `worker_log`)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.endpoints: dict[str, str] = {}  # endpoint id -> GPU class
        self.jobs: dict[str, tuple[str, float]] = {}  # job id -> (endpoint id, submitted)
        self.deployed: dict[str, float] = {}

    def deploy(self, run: Any, attempt: Any, record: Any) -> Deployed:
        gpu = attempt.started.gpu_class
        endpoint_id = f"ep-{gpu.lower()}-{len(self.endpoints)}"
        self.endpoints[endpoint_id] = gpu
        self.clock.sleep(45.0)  # the deploy takes a while
        self.deployed[endpoint_id] = self.clock()
        return Deployed(endpoint_id, attempt.started.endpoint_name, idle_timeout_s=5)

    def run(self, endpoint_id: str, job_input: Any, **budget: Any) -> str:
        job_id = f"job-{len(self.jobs)}-{endpoint_id}"
        self.jobs[job_id] = (endpoint_id, self.clock())
        return job_id

    def _crash(self, endpoint_id: str) -> bool:
        return self.endpoints[endpoint_id] == "L40S"

    def _worker(self, endpoint_id: str) -> dict[str, Any]:
        if self._crash(endpoint_id):
            return {
                "id": "wkr-l40s-q2m9",
                "status": "UNHEALTHY",
                "gpuTypeId": "NVIDIA L40S",
                "dataCenterId": "US-TX-3",
                "startedAt": iso(self.deployed[endpoint_id] + 3),
            }
        submitted = next(t for e, t in self.jobs.values() if e == endpoint_id)
        return {
            "id": "wkr-a100-7f3k",
            "status": "RUNNING",
            "gpuTypeId": "NVIDIA A100 80GB PCIe",
            "dataCenterId": "EU-RO-1",
            "startedAt": iso(submitted + 4),
        }

    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        _, submitted = self.jobs[job_id]
        t = self.clock() - submitted
        if self._crash(endpoint_id) or t < 20:
            return {"id": job_id, "status": "IN_QUEUE"}
        worker = self._worker(endpoint_id)["id"]
        if t < 180:
            return {"id": job_id, "status": "IN_PROGRESS", "workerId": worker}
        return {"id": job_id, "status": "FAILED", "workerId": worker, "error": OOM_ERROR}

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        workers = {"unhealthy": 1} if self._crash(endpoint_id) else {"running": 1}
        return {"workers": workers, "jobs": {}}

    def endpoint_workers(self, endpoint_id: str) -> dict[str, Any]:
        return {"workers": [self._worker(endpoint_id)]}

    def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        return {"id": endpoint_id, "idleTimeout": 5}

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int = 100) -> dict[str, Any]:
        lines = CRASH_LINES if self._crash(endpoint_id) else OOM_LINES
        return {"lines": lines[-tail:], "truncated": False}

    def cancel(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        return {"id": job_id, "status": "CANCELLED"}

    def delete_endpoint(self, endpoint_id: str) -> bool:
        return True


def make_worker_example(directory: Path) -> None:
    """Record the example run into a JSONL store in `directory` (which must not exist)."""
    with jsonl_copied_to(directory) as (store, _):
        clock = Clock(START)
        platform = ScriptedRunPod(clock)
        adapters = RunpodRunAdapters(
            platform,
            platform.deploy,
            lambda run, attempt: {"phase": "sft", "seed": 0},
            budget_s=6 * 3600,
            clock=clock,
            sleep=clock.sleep,
            watcher="docs-example",
        )
        supervise_run(
            "oom",
            [GPUS["L40S"], GPUS["A100-80GB"]],
            adapters,
            max_retries=2,
            phase="sft",
            seed=0,
            store=store,
            clock=clock,
            sleep=clock.sleep,
        )


def canonical_events(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every stream file's events as dicts, without their ids and checksums."""
    return {
        p.name: [
            {k: v for k, v in json.loads(line).items() if k not in ("id", "_c")}
            for line in p.read_text().splitlines()
        ]
        for p in sorted(directory.glob("*.jsonl"))
    }


def write_worker_example(directory: Path = SOURCE) -> bool:
    """Regenerate the example when what it records has changed; True when it had."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "worker"
        make_worker_example(fresh)
        if directory.is_dir() and canonical_events(directory) == canonical_events(fresh):
            return False
        if directory.is_dir():
            shutil.rmtree(directory)
        shutil.copytree(fresh, directory)
        return True


# --- synthetic logs -------------------------------------------------------------------------

SECRET = "rpa_PLANTEDKEY0123456789abcdef"
HOSTILE = [
    "<script>alert(1)</script><img src=x onerror=alert(2)>",
    "\x1b[31mRED\x1b[0m \x1b]0;owned\x07 after",
    "nul\x00byte and a bell\x07 and a carriage\rreturn",
    "bidi \u202egnp.exe\u202c end",
    "fake\n  detail: injected",
    "x" * 1000,
]
RAW = ("\x1b", "\x00", "\x07", "\u202e", "\u202c", "\r")


def _event(cls: type, n: int, at: float, stream: str, **fields: Any) -> Event:
    return cls(stream=stream, seq=n, id=f"{stream}-{n:03d}", at=at, **fields)


def failed_job(
    lines: list[str] | tuple[str, ...] = tuple(HOSTILE),
    *,
    stream: str = "job-hostile",
    started: float = T0 - 15,
    truncated: bool = False,
    read_error: str | None = None,
) -> list[Event]:
    """A job picked up by w-1 (up since `started`) that FAILED, its worker's last lines read."""
    specs: list[tuple[type, float, dict[str, Any]]] = [
        (JobSubmitted, T0, {"endpoint_id": "ep-1", "job_id": "j-1", "gpu_class": "L40S",
                            "submitted_at": T0}),
        (WatchStarted, T0, {"watcher": "test", "has_worker_reader": True}),
        (StatusObserved, T0, {"status": "IN_QUEUE"}),
        (StatusObserved, T0 + 20, {"status": "IN_PROGRESS"}),
        (WorkerObserved, T0 + 20, {"worker_id": "w-1", "gpu_type": "NVIDIA L40S",
                                   "datacenter": "EU-RO-1", "started_at": started,
                                   "idle_timeout_s": 7}),
        (StatusObserved, T0 + 70, {"status": "FAILED", "error": "boom"}),
        (WorkerLogObserved, T0 + 70, {"worker_id": "w-1", "lines": tuple(lines),
                                      "truncated": truncated, "read_error": read_error}),
        (Concluded, T0 + 70, {"state": "FAILED", "ok": False, "failure": "job_failed",
                              "rule": "worker_failed", "evidence": (5,),
                              "detail": "[FAILED] boom"}),
    ]  # fmt: skip
    return [_event(cls, n, at, stream, **f) for n, (cls, at, f) in enumerate(specs)]


def crash_loop_job(stream: str = "job-crash") -> list[Event]:
    """A job no worker took: the endpoint's unhealthy worker's log was read."""
    unhealthy = WorkerCounts(unhealthy=1)
    specs: list[tuple[type, float, dict[str, Any]]] = [
        (JobSubmitted, T0, {"endpoint_id": "ep-2", "job_id": "j-2", "submitted_at": T0}),
        (WatchStarted, T0, {"watcher": "test", "has_worker_reader": True}),
        (StatusObserved, T0, {"status": "IN_QUEUE"}),
        (HealthObserved, T0, {"workers": unhealthy}),
        (StatusObserved, T0 + 250, {"status": "IN_QUEUE"}),
        (HealthObserved, T0 + 250, {"workers": unhealthy}),
        (WorkerLogObserved, T0 + 250, {"worker_id": "w-crash", "worker_status": "unhealthy",
                                       "lines": ("ImportError: libcudnn", "restarting")}),
        (Concluded, T0 + 250, {"state": "STALLED", "ok": False, "failure": "stalled",
                               "rule": "unhealthy_worker", "evidence": (3, 5),
                               "detail": "worker unhealthy"}),
    ]  # fmt: skip
    return [_event(cls, n, at, stream, **f) for n, (cls, at, f) in enumerate(specs)]


def write_log(directory: Path, events: list[Event]) -> Path:
    """The events as a JSONL store's file in `directory`; its path."""
    store = open_store(f"jsonl://{directory}")
    try:
        store.append(events[0].stream, events, 0)
    finally:
        store.close()
    [path] = [p for p in directory.glob("*.jsonl") if events[0].stream in p.name]
    return path


def invoke(args: list[str], **env: str) -> Any:
    """The command at 80 columns (or `COLUMNS=...` given), in UTC."""
    return CliRunner().invoke(app, args, env={"COLUMNS": "80", "TZ": "UTC", **env})


def assert_inert(text: str) -> None:
    """No raw control character, escape sequence or bidi override in `text`."""
    for ch in RAW:
        assert ch not in text, repr(ch)


# --- what explain knows ------------------------------------------------------------------------


def test_the_explanation_carries_the_worker_and_its_log():
    e = explain(failed_job())
    assert e.worker is not None and e.worker_log is not None
    assert (e.worker.worker_id, e.worker.gpu_type, e.worker.datacenter) == (
        "w-1",
        "NVIDIA L40S",
        "EU-RO-1",
    )
    assert e.worker.started_at == T0 - 15 and e.worker.since_submission == -15
    assert e.worker.started_offset == -15 and e.worker.offset == 20
    assert e.worker_log.lines == tuple(HOSTILE) and e.worker_log.job_worker
    assert e.rule == "worker_failed" and e.evidence[0].seq == 5  # the old fields as they were
    assert "15 s before submission" in e.worker.text()


def test_a_crash_loop_names_the_unhealthy_worker_it_read():
    e = explain(crash_loop_job())
    assert e.worker is None and e.worker_log is not None
    assert not e.worker_log.job_worker
    assert e.worker_log.whose == (
        "w-crash, the endpoint's unhealthy worker (no worker took the job)"
    )


def test_a_log_without_worker_records_explains_as_before():
    events = [e for e in failed_job() if e.kind not in ("WorkerObserved", "WorkerLogObserved")]
    events = [e.model_copy(update={"seq": n}) for n, e in enumerate(events)]
    assert worker_evidence(events) == (None, None)
    e = explain(events)
    assert e.worker is None and e.worker_log is None


def test_replay_gives_each_worker_event_one_line():
    events = failed_job()
    worker, log = summarize(events[4]), summarize(events[6])
    assert worker == ("worker w-1 took the job: NVIDIA L40S in EU-RO-1, up 35 s, idle timeout 7 s")
    assert log.startswith("worker w-1 log: 6 line(s); last: xxxx") and len(log) < 100
    failed = WorkerLogObserved(stream="s", seq=0, id="i", at=T0, read_error="HTTPError 404")
    assert summarize(failed) == "worker log read failed: HTTPError 404"
    assert summarize(crash_loop_job()[6]).startswith("worker w-crash (unhealthy) log: 2 line(s)")


# --- explain and replay on the command line ----------------------------------------------------


def test_explain_prints_the_worker_and_its_escaped_lines(tmp_path):
    path = write_log(tmp_path, failed_job())
    result = invoke(["explain", str(path)])
    assert result.exit_code == 10, result.output
    out = result.output
    assert_inert(out)
    assert "started 2023-11-14 22:13:05 UTC" in " ".join(out.split())
    assert "worker log: w-1, the job's worker, read at t+70 s (seq 6): 6 lines" in " ".join(
        out.split()
    )
    lines = out.splitlines()
    assert "    │ <script>alert(1)</script><img src=x onerror=alert(2)>" in lines
    assert "    │ \\x1b[31mRED\\x1b[0m \\x1b]0;owned\\x07 after" in lines
    assert "    │ bidi \\u202egnp.exe\\u202c end" in lines
    assert "    │ fake\\n  detail: injected" in lines  # a line break cannot fake a line
    assert not any(line.startswith("  detail: injected") for line in lines)
    assert "… (+760 characters)" in out  # a long line is cut in the text
    assert all(len(line) <= 80 for line in lines)


def test_explain_shows_the_last_lines_and_says_what_it_left_out(tmp_path):
    many = [f"line {n}" for n in range(30)]
    path = write_log(tmp_path, failed_job(many, truncated=True))
    out = " ".join(invoke(["explain", str(path)]).output.split())
    assert f"the last {EXPLAIN_LOG_LINES} of 30 lines recorded" in out
    assert "the read stopped at its bound (older lines were not read)" in out
    assert "(10 earlier line(s) not shown)" in out
    assert "│ line 10 │" in out and "│ line 29" in out and "│ line 9 " not in out


def test_explain_says_why_a_read_failed(tmp_path):
    path = write_log(tmp_path, failed_job((), read_error="ConnectionError: reset \x1b[2J"))
    out = invoke(["explain", str(path)]).output
    assert_inert(out)
    assert "the read failed: ConnectionError: reset \\x1b[2J" in " ".join(out.split())


def test_explain_json_has_every_recorded_line_and_keeps_its_old_keys(tmp_path):
    path = write_log(tmp_path, failed_job())
    result = invoke(["explain", str(path), "--json"])
    data = json.loads(result.output)
    old = {"stream", "state", "verdict", "rule", "step", "why", "at", "offset_s", "evidence",
           "numbers", "facts", "timers"}  # fmt: skip
    assert old | {"worker", "worker_log"} == set(data)
    assert data["worker_log"]["lines"] == HOSTILE  # raw, as recorded: JSON escapes them
    assert data["worker_log"]["recorded"] == 6 and data["worker_log"]["omitted"] == 0
    assert "\x1b" not in result.output  # JSON writes \u001b
    w = data["worker"]
    assert (w["worker_id"], w["started_at"], w["started_since_submission_s"]) == (
        "w-1",
        T0 - 15,
        -15,
    )


def test_replay_lists_the_worker_events(tmp_path):
    path = write_log(tmp_path, failed_job())
    result = invoke(["replay", str(path)], COLUMNS="200")
    assert result.exit_code == 10
    out = result.output
    assert "worker w-1 took the job: NVIDIA L40S in EU-RO-1, up 35 s, idle timeout 7 s" in out
    assert "worker w-1 log: 6 line(s); last: xxx" in out
    rows = json.loads(invoke(["replay", str(path), "--json"]).output)["timeline"]
    assert [r["kind"] for r in rows][4:7] == [
        "WorkerObserved",
        "StatusObserved",
        "WorkerLogObserved",
    ]


# --- the picture ------------------------------------------------------------------------------


def test_the_picture_marks_the_worker_start_before_the_pickup():
    events = failed_job(started=T0 + 6)
    pic = render.picture(events)
    [lane] = pic.lanes
    [mark] = [m for m in lane.marks if m.kind == "worker"]
    assert mark.at == 6 and mark.label == "worker w-1 up (6 s after submission)"
    pickup = next(s for s in lane.spans if s.state == "SETUP")
    assert mark.at < pickup.start
    warm = render.picture(failed_job()).lanes[0]  # up before the job: at the lane's start
    [mark] = [m for m in warm.marks if m.kind == "worker"]
    assert mark.at == 0 and "15 s before submission" in mark.label


def test_the_picture_shows_the_last_lines_escaped_and_bounded(tmp_path):
    import xml.etree.ElementTree as ET

    pic = render.picture(failed_job([*HOSTILE, *(f"tail {n}" for n in range(50))]))
    page, drawing = render.html(pic), render.svg(pic)
    for doc in (page, drawing):
        assert_inert(doc)
        assert "<script" not in doc and "onerror=alert" not in doc.replace(
            "onerror=alert(2)&gt;", ""
        )
    ET.fromstring(drawing)  # still a well-formed XML document
    assert '<g class="mark worker">' in drawing
    assert "tail 49" in page and "tail 10" in page and "tail 9\n" not in page
    assert "worker log:</b> w-1, the job&#x27;s worker" in page
    assert "the last 40 of 56 lines recorded" in page
    assert "28 earlier lines</summary>" in page  # 40 drawn: 12 shown, 28 folded
    small = render.html(render.picture(failed_job()))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in small
    assert "\\x1b[31mRED" in small and "bidi \\u202egnp.exe" in small
    assert "fake\\n  detail: injected" in small
    # the verdict's tooltip in the SVG carries the last lines too
    assert "<title>w-1, the job&#x27;s worker" in render.svg(render.picture(failed_job()))


def test_timeline_writes_the_worker_into_its_json(tmp_path):
    path = write_log(tmp_path, failed_job())
    out = tmp_path / "t.html"
    data = json.loads(invoke(["timeline", str(path), "--out", str(out), "--json"]).output)
    [lane] = data["lanes"]
    assert lane["worker"]["worker_id"] == "w-1" and lane["worker_log"]["recorded"] == 6
    assert any(m["kind"] == "worker" for m in lane["marks"])


CHROMIUM = Path("/usr/bin/chromium")
MEASURE_LOG = (
    SVG_BOX_JS
    + """
  const out = {
    width: vb.width,
    logs: [...document.querySelectorAll(".log-lines")].map((d) => d.textContent),
    scripts: document.scripts.length,
    images: document.images.length,
    worker: [...document.querySelectorAll("g.mark.worker g.label")].map((g) => ({
      width: Number(g.dataset.width), lines: [...g.querySelectorAll("text")].map(box)})),
  };
"""
    + REPORT_JS
)


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing")
def test_chromium_lays_out_the_hostile_lines_as_inert_text(tmp_path):
    from tests.test_render_chromium import chromium_measure

    pic = render.picture(failed_job(started=T0 + 6))
    m = chromium_measure(render.html(pic), tmp_path, "hostile", MEASURE_LOG)
    assert m["scripts"] == 1 and m["images"] == 0  # ours only: the page's lines ran nothing
    [shown] = m["logs"]
    assert "<script>alert(1)</script>" in shown and "\\x1b[31mRED" in shown
    assert "\u202e" not in shown and "\x00" not in shown
    [label] = m["worker"]
    for x, _, w, _ in label["lines"]:
        assert w <= label["width"] + 0.5 and x >= 0 and x + w <= m["width"] + 0.5


# --- flashfsm logs ------------------------------------------------------------------------------


def test_logs_is_a_command():
    assert "logs" in dict(COMMANDS)


def test_logs_prints_every_recorded_line_escaped(tmp_path):
    path = write_log(tmp_path, failed_job())
    before = path.read_bytes()
    result = invoke(["logs", str(path)])
    assert result.exit_code == 0, result.output
    assert_inert(result.output)
    lines = result.output.splitlines()
    assert lines[0] == "job-hostile.jsonl: FAILED (job_failed) by worker_failed"
    assert "  │ \\x1b[31mRED\\x1b[0m \\x1b]0;owned\\x07 after" in "\n".join(lines)
    assert "x" * 60 in result.output and "characters)" not in result.output  # whole lines
    assert path.read_bytes() == before
    tail = invoke(["logs", str(path), "--lines", "2"]).output
    assert "the last 2 of 6 lines recorded" in " ".join(tail.split())
    assert "<script>" not in tail and "(4 earlier line(s) not shown)" in tail


def test_logs_json_and_a_crash_loop(tmp_path):
    path = write_log(tmp_path, crash_loop_job())
    data = json.loads(invoke(["logs", str(path), "--json", "--lines", "1"]).output)
    assert data["found"] and data["message"] is None
    [job] = data["jobs"]
    log = job["worker_log"]
    assert (log["worker_id"], log["worker_status"], log["job_worker"]) == (
        "w-crash",
        "unhealthy",
        False,
    )
    assert log["lines"] == ["restarting"] and log["omitted"] == 1 and log["recorded"] == 2


def test_logs_without_a_worker_log_says_so_in_one_line(tmp_path):
    events = [e for e in failed_job() if e.kind != "WorkerLogObserved"]
    events = [e.model_copy(update={"seq": n}) for n, e in enumerate(events)]
    path = write_log(tmp_path, events)
    result = invoke(["logs", str(path)])
    assert result.exit_code == 0
    assert result.output == "job-hostile.jsonl: no worker log recorded\n"
    # a log whose watch had no worker reader (as every log before it existed)
    plain = [
        e.model_copy(update={"has_worker_reader": False, "v": 1}) if e.kind == "WatchStarted" else e
        for e in events
        if e.kind != "WorkerObserved"
    ]
    plain = [e.model_copy(update={"seq": n}) for n, e in enumerate(plain)]
    old = write_log(tmp_path / "plain", plain)
    result = invoke(["logs", str(old)], COLUMNS="200")
    assert result.exit_code == 0 and len(result.output.splitlines()) == 1
    assert "no worker reader" in result.output


def test_logs_reads_only(tmp_path):
    missing = tmp_path / "nowhere.db"
    result = invoke(["logs", "job-x", "--store", f"sqlite:///{missing}"])
    assert result.exit_code == 1 and result.output.startswith("error: ")
    assert not missing.exists()
    result = invoke(["logs", "job-x", "--store", f"jsonl:///{tmp_path}/nodir"])
    assert result.exit_code == 1 and not (tmp_path / "nodir").exists()
    store = tmp_path / "s"
    store.mkdir()
    path = write_log(store, failed_job())
    before, names = path.read_bytes(), sorted(p.name for p in store.iterdir())
    result = invoke(["logs", "job-hostile", "--store", f"jsonl:///{store}"])
    assert result.exit_code == 0 and path.read_bytes() == before
    assert sorted(p.name for p in store.iterdir()) == names
    result = invoke(["logs", "job-nosuch", "--store", f"jsonl:///{store}"], COLUMNS="300")
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1


class FakeRunPod:
    """`RunpodClient.from_env()`'s stand-in: a worker log with the key in it."""

    calls: ClassVar[list[tuple[str, str, int]]] = []

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int) -> dict[str, Any]:
        self.calls.append((endpoint_id, worker_id, tail))
        return {"lines": ["live 1", f"token={SECRET} \x1b[2J"], "truncated": True}

    def close(self) -> None:
        pass


def test_logs_fetch_prints_the_live_log_masked_and_records_nothing(tmp_path, monkeypatch):
    from flashfsm.adapters import runpod

    monkeypatch.setattr(runpod.RunpodClient, "from_env", classmethod(lambda cls: FakeRunPod()))
    FakeRunPod.calls.clear()
    path = write_log(tmp_path, failed_job())
    before = path.read_bytes()
    result = invoke(["logs", str(path), "--fetch", "--lines", "7"], RUNPOD_API_KEY=SECRET)
    assert result.exit_code == 0, result.output
    assert FakeRunPod.calls == [("ep-1", "w-1", 7)]
    assert SECRET not in result.output and "token=[REDACTED] \\x1b[2J" in result.output
    assert "live log of worker w-1 on endpoint ep-1" in result.output
    assert path.read_bytes() == before
    data = json.loads(
        invoke(["logs", str(path), "--fetch", "--json"], RUNPOD_API_KEY=SECRET).output
    )
    assert data["fetched"]["lines"][0] == "live 1" and data["fetched"]["tail"] == 100


def test_logs_fetch_failures_are_one_line(tmp_path, monkeypatch):
    from flashfsm.adapters import runpod

    path = write_log(tmp_path, failed_job())
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["logs", str(path), "--fetch"], env={"RUNPOD_API_KEY": ""})
    assert result.exit_code == 1 and result.output.startswith("error: --fetch: cannot reach")

    class Broken(FakeRunPod):
        def worker_log(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise ConnectionError(f"reset (key {SECRET})")

    monkeypatch.setattr(runpod.RunpodClient, "from_env", classmethod(lambda cls: Broken()))
    result = invoke(["logs", str(path), "--fetch"], RUNPOD_API_KEY=SECRET, COLUMNS="200")
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert SECRET not in result.output and "ConnectionError" in result.output


def test_logs_on_a_sweeper_stream_is_an_input_error(tmp_path):
    from flashfsm.events.models import IdleSeen

    store = tmp_path / "s"
    store.mkdir()
    write_log(store, [_event(IdleSeen, 0, T0, "sweeper", endpoint_id="ep-9", since=T0)])
    result = invoke(["logs", "sweeper", "--store", f"jsonl:///{store}"])
    assert result.exit_code == 1 and "records no worker log" in result.output


# --- the example run -------------------------------------------------------------------------


def test_the_example_is_what_the_library_records_today(tmp_path):
    fresh = tmp_path / "worker"
    make_worker_example(fresh)
    assert canonical_events(EXAMPLE) == canonical_events(fresh), (
        "regenerate: python -m tests.test_worker_evidence_views --write"
    )


def test_the_example_job_logs_verify_and_hold_their_workers():
    a0 = read_jsonl_file(EXAMPLE / "job-oom-s0-a0.jsonl")
    a1 = read_jsonl_file(EXAMPLE / "job-oom-s0-a1.jsonl")
    for events in (a0, a1):
        assert verify(events).ok, str(verify(events))
    assert (replay(a0).verdict.rule, replay(a1).verdict.rule) == (
        "unhealthy_worker",
        "worker_failed",
    )
    crash, oom = explain(a0), explain(a1)
    # No worker took the crash loop's job: its records, read while it waited, name the
    # endpoint's crash-looping worker (whose log was read too).
    assert crash.worker is not None and crash.worker.queued
    assert (crash.worker.worker_id, crash.worker.status) == ("wkr-l40s-q2m9", "unhealthy")
    assert crash.worker_log.worker_id == "wkr-l40s-q2m9" and not crash.worker_log.job_worker
    assert oom.worker.worker_id == oom.worker_log.worker_id == "wkr-a100-7f3k"
    assert oom.worker_log.lines[-1].startswith("torch.OutOfMemoryError")


def test_explain_on_the_example_run_shows_its_failed_attempts_workers():
    result = invoke(["explain", str(EXAMPLE / "run-oom.jsonl"), "--json"])
    data = json.loads(result.output)
    assert result.exit_code == 10
    assert data["worker"]["worker_id"] == "wkr-a100-7f3k"
    [first] = data["failed_attempts"]
    assert first["attempt"] == 0 and first["worker_log"]["worker_status"] == "UNHEALTHY"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print(__doc__)
        sys.exit(2)
    print(f"regenerated {SOURCE}/" if write_worker_example() else "unchanged")
    sys.exit(0)
