"""A SOURCE as the front ends read it: a stream of a store or a `.jsonl` file, with a way to
read the streams next to it (`Source`); the job log it stands for (`job_log`); and its bill,
priced as `flashfsm cost` prices it (`source_ledger`).

The front end opens the source (the CLI from its store or a file, the web view from its
index) and says how its store is opened when the sweeper streams are read (an `opener`).
Nothing here writes; a log that cannot be read or folded raises the library's error (a
`FlashFsmError`, `OSError`, or `ValueError` naming the problem), which the CLI says in one
line, exit 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashfsm.adapters.jsonl import read_jsonl_file
from flashfsm.events.models import Event
from flashfsm.fsm.run import replay_run
from flashfsm.postmortem.ledger import Ledger, ledger, log_kind, newest, reaps_of
from flashfsm.views import last_job_stream, stream_kind


@dataclass
class Source:
    """A log and a way to read the streams next to it (a run's job streams)."""

    name: str
    events: list[Event]
    load: Callable[[str], list[Event]]
    where: str  # the store URL (as printed: `display_url`) or the file's directory


def is_file_source(source: str) -> bool:
    """Whether SOURCE names a `.jsonl` file (by its suffix) rather than a stream."""
    return Path(source).suffix.lower() == ".jsonl"


def job_log(src: Source) -> tuple[str, list[Event]]:
    """The job log a source stands for, and its stream: the source itself, or a run's last
    attempt's job stream. A `ValueError` saying why when there is none: a sweeper's stream,
    a run with no job stream yet, or one whose job stream is empty or missing."""
    kind = stream_kind(src.events)
    if kind == "sweeper":
        raise ValueError(f"{src.name} is a sweeper stream: job rules do not apply")
    if kind == "job":
        return src.name, src.events
    stream = last_job_stream(replay_run(src.events))
    if stream is None:
        raise ValueError(f"run {src.name!r} has no job stream yet (no JobQueued event)")
    events = src.load(stream)
    if not events:
        raise ValueError(f"run {src.name!r}: job stream {stream!r} is empty or missing")
    return stream, events


def sweeper_logs(src: Source, opener: Callable[[], Any]) -> list[list[Event]]:
    """The sweeper streams next to a source (their reaps end bills): the `sweeper*.jsonl`
    files of a `.jsonl` file's directory, or the streams named `sweeper…` of its store,
    which `opener()` opens (read-only) and this closes."""
    found: list[list[Event]] = []
    if is_file_source(src.name):
        for path in sorted(Path(src.where).glob("sweeper*.jsonl")):
            events = read_jsonl_file(path)
            if events and log_kind(events) == "sweeper":
                found.append(events)
        return found
    opened = opener()
    try:
        for name in opened.streams():
            if name.startswith("sweeper"):
                events = opened.read(name)
                if events and log_kind(events) == "sweeper":
                    found.append(events)
    finally:
        opened.close()
    return found


def source_ledger(src: Source, price: float | None, opener: Callable[[], Any]) -> Ledger:
    """The ledger of an opened source, priced as `flashfsm cost` prices it: its job streams
    read beside it, the sweeper streams' reaps ending bills (`sweeper_logs`, its store opened
    by `opener`), open bills counted up to the newest event read; a bare job log at `price`.
    `cost`, `explain`, `timeline` and the web view price through it, so they agree to the
    cent."""
    kind = stream_kind(src.events)
    jobs: dict[str, list[Event]] = {}

    def load(stream: str) -> list[Event]:
        if stream not in jobs:
            jobs[stream] = src.load(stream)
        return jobs[stream]

    sweepers = sweeper_logs(src, opener)
    if kind == "run":
        for a in replay_run(src.events).attempts:
            if a.job_stream:
                load(a.job_stream)
    as_of = newest(src.events, *jobs.values(), *sweepers)
    reaps = reaps_of(e for events in sweepers for e in events)
    led = ledger(src.events, load, price, reaps=reaps, as_of=as_of)
    return Ledger(src.name, led.kind, led.attempts, led.state, led.as_of)
