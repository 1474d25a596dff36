"""A running job's worker log, followed live on its page (and on its run's page).

A job's page (a run's: its latest attempt's job) carries a "Worker log, live" section while
the job has no verdict; the page's script (`static/ui.js`) asks `/log/<name>` for it every
3 s, and the view's reader keeps each read 5 s (`flashfsm.live_log.LiveLogReader`), so RunPod
is asked at most every 5 s per worker however many pages follow it. The answer is an HTML
fragment: the worker's last lines as RunPod holds them now (`flashfsm.live_log`, as
`flashfsm logs --fetch` reads them: bounded in lines, bytes and time, each line masked), or
one line saying why there are none yet. It is read-only:
nothing is recorded, and the view's key (`RUNPOD_API_KEY`, from its environment) never
reaches the page. A fragment marked `data-done` ends the following: the job has ended (its
log as recorded before the verdict is in its explain), or the view cannot read logs at all
(no key).
"""

from __future__ import annotations

from collections.abc import Sequence

from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Event
from flashfsm.fsm.run import replay_run
from flashfsm.live_log import LiveLogReader, LiveLogUnavailable, live_log_target
from flashfsm.ui.index import Entry, StoreIndex
from flashfsm.ui.pages import render_template
from flashfsm.views import concluded, last_job_stream


def followed_job(index: StoreIndex, entry: Entry) -> tuple[str, Sequence[Event]] | None:
    """The job whose worker log `entry`'s page follows (a job: itself; a run: its latest
    attempt's job) as its stream and events; None for a sweeper, or a run with no job yet."""
    events = index.read(entry.name)
    kind = entry.row["kind"]
    if kind == "job":
        return entry.name, events
    if kind != "run":
        return None
    try:
        last = last_job_stream(replay_run(events))
    except FlashFsmError:
        return None
    if last is None or index.entry(last) is None:
        return None
    return last, index.read(last)


def follows(entry: Entry) -> bool:
    """Whether `entry`'s page offers the followed log: a job or a run still without a
    verdict (a finished job's log, as recorded before its verdict, is in its explain)."""
    row = entry.row
    return row["kind"] in ("job", "run") and row.get("ok") is None


def log_fragment(index: StoreIndex, entry: Entry, reader: LiveLogReader) -> str:
    """The followed log's content now, as an HTML fragment (blocking: it may read RunPod)."""
    job = followed_job(index, entry)
    if job is None:
        return render_template("follow", note="no job has been submitted yet", done=False)
    stream, events = job
    if not follows(entry):
        note = (
            f"{entry.name} has ended: the lines its watch recorded before the verdict are in "
            "its explain (flashfsm logs)"
        )
        return render_template("follow", note=note, done=True)
    if concluded(events):  # (a run between attempts: its next job is not queued yet)
        note = f"{stream} has ended: waiting for the run's next job"
        return render_template("follow", note=note, done=False)
    try:
        log = reader.read(live_log_target([(stream, events)]))
    except LiveLogUnavailable as exc:
        return render_template("follow", note=f"no live log: {exc}", done=exc.final)
    cut = "; the read stopped at its bound" if log.truncated else ""
    note = (
        f"worker {log.target.worker_id} on endpoint {log.target.endpoint_id} ({stream}): "
        f"its last {len(log.lines)} line(s) as RunPod holds them now{cut}; not recorded"
    )
    return render_template("follow", note=note, lines=log.lines, done=False)
