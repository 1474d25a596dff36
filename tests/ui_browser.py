"""Helpers of the web view's browser tests (`tests/test_ui_browser.py`): the stores they
serve, a `flashfsm ui` process, and the scripts that measure a page in Chromium.

The stores hold what a page must cope with beside the demo's finished runs: a run whose
attempt is still open (its job watched, billing, nothing concluded), and streams whose names,
error texts and log lines are hostile (HTML, script, terminal escapes, a bidirectional
override, quotes). Every event is built from the event models and appended with the store's
own `append`, as a watch would write it; the hostile job's verdict is the one today's rules
reach on its log (`decide_before`), so every page folds it as it would a real one.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashfsm.events.models import (
    AttemptStarted,
    Candidate,
    Concluded,
    DeployAttempted,
    EndpointDeployed,
    Event,
    HeartbeatObserved,
    JobQueued,
    JobSubmitted,
    RunStarted,
    StatusObserved,
    WatchStarted,
    WorkerLogObserved,
    WorkerObserved,
)
from flashfsm.events.store import EventStore
from flashfsm.fsm.commands import Conclude, ReadHeartbeat, ReadWorkerLog
from flashfsm.fsm.job import concluded_fields, decide_before, replay
from flashfsm.ids import new_id

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: The command the tests serve with (the installed entry point, next to this Python).
COMMAND = Path(sys.executable).with_name("flashfsm")
#: Where a human may ask for the screenshots (they always go to a tmp dir too).
SHOTS_ENV = "FLASHFSM_UI_SHOTS"

#: Hostile outside text: markup that would run or inject if written raw, terminal escapes, a
#: bidirectional override, both quotes and an ampersand.
EVIL_RUN = "run-<script>alert(1)</script>-\"q'-\x1b[31mred\u202eevil"
EVIL_JOB = "job-<img src=x onerror=alert(2)>-\x1b[31m\u202e-a0"
EVIL_WATCHER = "vm:<b onmouseover=alert(3)>w</b>\x1b[0m"
EVIL_ERROR = (
    "CUDA <img src=x onerror=alert(4)> <script>alert(5)</script> \"double\" 'single' "
    "\x1b[2J\x1b[Hwiped\x07 \u202eesrever & &amp; done"
)
EVIL_LINES = (
    "<script>alert(6)</script>",
    '"><svg onload=alert(7)>',
    "\x1b[31mred line\x1b[0m \u202e reversed",
    "tok=" + "A" * 240,  # one long unbreakable token
)
#: Raw characters that must never reach a page (they are shown as their escapes).
RAW = ("\x1b", "\x07", "\u202e")

PRICE = 0.69  # $/h of the open run's GPU


def append(store: EventStore, stream: str, model: type[Any], at: float, **fields: Any) -> Event:
    """Append one `model` event at `at` to the end of `stream`; returns it."""
    seq = len(store.read(stream))
    event = model(stream=stream, seq=seq, id=new_id(at), at=at, **fields)
    store.append(stream, [event], seq)
    return event


@dataclass(frozen=True)
class OpenRun:
    """A run whose first attempt's job is running: nothing concluded, its bill open."""

    run: str
    job: str


def write_open_run(
    store: EventStore,
    tag: str,
    start: float,
    *,
    run: str = "",
    endpoint_id: str = "ep1",
    job_id: str = "",
    worker_id: str | None = None,
) -> OpenRun:
    """A run `run-live-<tag>` (or `run`) deployed at `start` on `endpoint_id` whose job
    (`job_id`) started 60 s later and has been training since; its job stream
    `job-live-<tag>-a0`. With `worker_id`, its watch reads worker records and recorded that
    worker taking the job."""
    run = run or f"run-live-{tag}"
    job = f"job-live-{tag}-a0"
    endpoint, job_id = f"flash-live-{tag}", job_id or f"jid-{tag}"
    append(
        store,
        run,
        RunStarted,
        start,
        run_id=f"live-{tag}",
        candidates=(Candidate(gpu_class="L40S", price_per_hour=PRICE, vram_gb=48.0),),
    )
    append(
        store,
        run,
        AttemptStarted,
        start,
        attempt=0,
        candidate=0,
        provider="runpod",
        gpu_class="L40S",
        endpoint_name=endpoint,
        job_stream=job,
    )
    append(store, run, DeployAttempted, start, attempt=0, account=0, endpoint_name=endpoint)
    append(
        store, run, EndpointDeployed, start + 30, attempt=0, endpoint_id=endpoint_id,
        endpoint_name=endpoint,
    )  # fmt: skip
    append(
        store, run, JobQueued, start + 30, attempt=0, endpoint_id=endpoint_id, job_id=job_id,
        job_stream=job, submitted_at=start + 30,
    )  # fmt: skip
    append(
        store, job, JobSubmitted, start + 30, endpoint_id=endpoint_id, endpoint_name=endpoint,
        job_id=job_id, gpu_class="L40S", submitted_at=start + 30,
    )  # fmt: skip
    readers: dict[str, Any] = {"v": 3, "has_worker_reader": True} if worker_id else {}
    append(
        store, job, WatchStarted, start + 30, watcher="vm:live", has_heartbeat_reader=True,
        **readers,
    )  # fmt: skip
    append(store, job, StatusObserved, start + 30, status="IN_QUEUE")
    append(store, job, StatusObserved, start + 60, status="IN_PROGRESS")
    if worker_id:
        append(store, job, WorkerObserved, start + 60, worker_id=worker_id, status="running")
    append(store, job, HeartbeatObserved, start + 90, stage="train", step=10, ts=start + 85)
    append(store, job, StatusObserved, start + 90, status="IN_PROGRESS")
    return OpenRun(run, job)


def conclude(
    store: EventStore, job: str, at: float, *, stage: str = "done", lines: tuple[str, ...] = ()
) -> Concluded:
    """Record at `at` the reads a watch makes before its verdict on `job` (a forced heartbeat
    read answering `stage`, a worker log read answering `lines`), then the rules' verdict."""
    for _ in range(5):
        command = decide_before(replay(store.read(job)), None, at)
        if isinstance(command, Conclude):
            break
        if isinstance(command, ReadHeartbeat):
            append(store, job, HeartbeatObserved, at, stage=stage, forced=True)
        elif isinstance(command, ReadWorkerLog):
            append(store, job, WorkerLogObserved, at, worker_id="w", lines=lines)
        else:
            raise AssertionError(f"the watch of {job} asks {command!r}")
    assert isinstance(command, Conclude), command
    return append(store, job, Concluded, at, **concluded_fields(command.verdict))


def write_hostile(store: EventStore, tag: str, start: float) -> None:
    """A job named `EVIL_JOB` watched by `EVIL_WATCHER`, failed with `EVIL_ERROR` and the log
    lines `EVIL_LINES` (its verdict the rules' own), and an open run named `EVIL_RUN` whose
    attempt is that job."""
    job = EVIL_JOB
    append(
        store, job, JobSubmitted, start, endpoint_id="ep-evil", endpoint_name="flash-evil",
        job_id="jid-evil", gpu_class="L40S", submitted_at=start,
    )  # fmt: skip
    append(
        store, job, WatchStarted, start, v=3, watcher=EVIL_WATCHER, has_heartbeat_reader=True,
        has_worker_reader=True,
    )  # fmt: skip
    append(store, job, StatusObserved, start, status="IN_PROGRESS")
    append(
        store, job, WorkerObserved, start, worker_id="w-<i>evil</i>", gpu_type="NVIDIA L40S",
        started_at=start - 10,
    )  # fmt: skip
    append(store, job, HeartbeatObserved, start + 20, stage=EVIL_LINES[0], step=3, ts=start + 15)
    append(
        store, job, StatusObserved, start + 30, status="FAILED", error=EVIL_ERROR,
        stdout_tail="\n".join(EVIL_LINES),
    )  # fmt: skip
    conclude(store, job, start + 31, stage=EVIL_ERROR, lines=EVIL_LINES)
    append(
        store,
        EVIL_RUN,
        RunStarted,
        start - 30,
        run_id="evil-<u>run</u>",
        candidates=(Candidate(gpu_class="L40S", price_per_hour=PRICE),),
    )
    append(
        store, EVIL_RUN, AttemptStarted, start - 30, attempt=0, candidate=0, provider="runpod",
        gpu_class="L40S", endpoint_name="flash-evil", job_stream=job,
    )  # fmt: skip


# --- a `flashfsm ui` process ---------------------------------------------------------------

_SERVING = re.compile(r"at http://127\.0\.0\.1:(\d+)/")


class UiServer:
    """`flashfsm ui --store URL --port 0 --poll 0.1s` (and `extra` options) in a process:
    `base` is its address once it said where it serves."""

    def __init__(self, url: str, *extra: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("FLASHFSM_STORE",)} | (env or {})
        env.update(PYTHONUNBUFFERED="1", COLUMNS="300", NO_COLOR="1")
        argv = [str(COMMAND), "ui", "--store", url, "--port", "0", "--poll", "0.1s", *extra]
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.base = f"http://127.0.0.1:{self._port(timeout=30.0)}"
        self._wait_ready(timeout=30.0)

    def _port(self, timeout: float) -> int:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        seen = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 4096)
                seen += chunk
                found = _SERVING.search(seen.decode(errors="replace"))
                if found:
                    return int(found.group(1))
                if not chunk:
                    break
            elif self.process.poll() is not None:
                break
        self.stop()
        err = self.process.stderr.read() if self.process.stderr else b""
        raise AssertionError(f"flashfsm ui never said where it serves: {seen!r} {err!r}")

    def _wait_ready(self, timeout: float) -> None:
        """Wait for the first page (the socket is bound before the index's first read)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url("/rows.json"), timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise
            time.sleep(0.05)

    def url(self, path: str) -> str:
        """The address of `path` on this server."""
        return self.base + path

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 5 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


# --- measuring a page ------------------------------------------------------------------------

#: Reports what the browser laid out: the document's width, every text run that is drawn
#: smaller than `min` px, or outside a box that holds it (its element's, or any ancestor's
#: up to the nearest horizontally scrolling one: a text wider than its cell, a heading pushed
#: past the page), or past the viewport without a scrolling box around it; and every box
#: whose content is wider than it while its overflow is visible (`scrollWidth > clientWidth`).
LAYOUT_JS = """
(min) => {
  const problems = [];
  const style = (el) => getComputedStyle(el);
  const scrolls = (el) => ["auto", "scroll"].includes(style(el).overflowX);
  const inline = (el) => ["inline", "contents"].includes(style(el).display);
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + [...el.classList].map((c) => "." + c).join("");
  const path = (el) => {
    const out = [];
    for (let e = el; e && e !== document.body; e = e.parentElement) out.unshift(name(e));
    return out.join(" > ");
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let texts = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.trim();
    const el = node.parentElement;
    if (!text || el.closest("select, script, style, template")) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
    const cs = style(el);
    if (!rects.length || cs.visibility !== "visible" || Number(cs.opacity) === 0) continue;
    texts += 1;
    const what = {el: path(el), text: text.slice(0, 60)};
    const size = parseFloat(cs.fontSize);
    if (size < min) problems.push({problem: `font-size ${size}px < ${min}px`, ...what});
    let scroller = null;
    for (let box = el; box && box !== document.documentElement; box = box.parentElement) {
      if (inline(box)) continue;
      if (scrolls(box)) { scroller = box; break; }  // it scrolls to what it holds
      const b = box.getBoundingClientRect();
      const out = rects.find((r) => r.left < b.left - 1 || r.right > b.right + 1
                                    || r.top < b.top - 1 || r.bottom > b.bottom + 1);
      if (out) {
        problems.push({problem: `text outside its box ${name(box)}`, ...what,
                       text_box: [out.left, out.top, out.right, out.bottom],
                       box: [b.left, b.top, b.right, b.bottom]});
        break;
      }
    }
    if (!scroller && rects.some((r) => r.left < -1 || r.right > innerWidth + 1)) {
      problems.push({problem: "text past the viewport", ...what});
    }
  }
  for (const el of document.body.querySelectorAll("*")) {
    if (inline(el) || scrolls(el) || style(el).display === "none") continue;
    if (["table", "tbody", "thead", "tr", "select", "input", "button", "option", "img"]
        .includes(el.tagName.toLowerCase())) continue;
    if (el.scrollWidth > el.clientWidth + 1) {
      problems.push({problem: `content ${el.scrollWidth}px wider than its box `
                     + `${el.clientWidth}px`, el: path(el),
                     text: (el.innerText || "").trim().slice(0, 60)});
    }
  }
  for (const el of document.body.querySelectorAll("input, select, button")) {
    const size = parseFloat(style(el).fontSize);
    if (el.getClientRects().length && size < min) {
      problems.push({problem: `font-size ${size}px < ${min}px`, el: path(el), text: ""});
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth, texts, problems};
}
"""

#: What of a document could run code: a script but the view's own, an attribute that runs
#: code (on…, javascript: links).
SCRIPTS_JS = """
() => {
  const out = [];
  for (const el of document.querySelectorAll("*")) {
    for (const a of el.attributes) {
      if (a.name.startsWith("on")) out.push(`${el.tagName} ${a.name}=${a.value}`);
      if (/^\\s*javascript:/i.test(a.value)) out.push(`${el.tagName} ${a.name}=${a.value}`);
    }
  }
  for (const s of document.querySelectorAll("script")) {
    if (s.getAttribute("src") !== "/static/ui.js") out.push("script " + s.outerHTML.slice(0, 80));
  }
  return out;
}
"""

#: What of a page came from its data and is not inert: what `SCRIPTS_JS` finds, and images
#: but the timeline, inline SVG, frames, objects and the tags the hostile texts carry.
INJECTED_JS = (
    "() => { const out = ("
    + SCRIPTS_JS.strip()
    + """)();
  const tags = "img:not(#picture), svg, iframe, object, embed, u, i";
  for (const el of document.querySelectorAll(tags)) out.push(el.outerHTML.slice(0, 80));
  return out;
}"""
)
