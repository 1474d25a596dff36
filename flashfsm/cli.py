"""The `flashfsm` command: the demo and the post-mortem tools.

Every command that reads a log takes `--store URL` (default: `$FLASHFSM_STORE`, else the
user's SQLite file) and prints with rich; `--json` prints machine-readable output instead.
SOURCE is a stream of the store or a `.jsonl` file; a run's stream stands for the job
stream of its last attempt where a command reads one job (`explain`, `why-not`, `whatif`).
Exit codes: 0 for success (and for a successful verdict), 1 for a usage or input error,
and one code per failure kind so a script can route on it (`EXIT_CODES`): the commands
that report a verdict (`replay`, `explain`, `watch`) exit with its code. Credentials (the
RunPod key for `sweep`) come only from the environment.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from flashfsm import render
from flashfsm.adapters.jsonl import read_jsonl_file, stream_file_name
from flashfsm.adapters.stores import copy_streams, default_store_url, open_store
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import (
    AttemptEnded,
    AttemptStarted,
    Concluded,
    Event,
    JobQueued,
    RunConcluded,
    RunStarted,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm import explain as ex
from flashfsm.fsm.explain import TimelineRow, timeline
from flashfsm.fsm.job import replay, verify
from flashfsm.fsm.rules import RULE_NAMES

app = typer.Typer(
    name="flashfsm",
    help="An event-sourced state machine for GPU training jobs on RunPod serverless.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(highlight=False, soft_wrap=True)

#: Exit code of a command that reports a verdict, by failure kind.
EXIT_CODES: dict[str | None, int] = {
    None: 0,
    "job_failed": 10,
    "job_preempted": 11,
    "no_capacity": 12,
    "stalled": 13,
    "poll_error": 14,
    "lost": 15,
}
EXIT_USAGE = 1
EXIT_NO_VERDICT = 5  # the log holds no verdict yet (2 is the parser's usage error)
EXIT_DISAGREES = 3  # `replay --verify` found a disagreement
EXIT_SWEEP_ERRORS = 4  # `sweep` ran, but a listing, a health read or a delete failed

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", help="Store URL (default: $FLASHFSM_STORE, else the user's SQLite file)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(EXIT_USAGE)


def load_events(source: str, store: str | None) -> tuple[str, list[Event]]:
    """The events SOURCE names: a JSONL file, or a stream of the store."""
    src = open_source(source, store)
    return src.name, src.events


@dataclass
class Source:
    """A log and a way to read the streams next to it (a run's job streams)."""

    name: str
    events: list[Event]
    load: Callable[[str], list[Event]]
    where: str  # the store URL or the file's directory


def _store_url(store: str | None) -> str:
    return store or default_store_url()


def _read_stream(url: str, stream: str) -> list[Event]:
    try:
        opened = open_store(url)
    except (ValueError, ImportError) as exc:
        raise _fail(str(exc)) from None
    try:
        return opened.read(stream)
    finally:
        opened.close()


def open_source(source: str, store: str | None) -> Source:
    """SOURCE as a `Source`: a `.jsonl` file (its directory holds its siblings) or a stream."""
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():

        def load_file(stream: str) -> list[Event]:
            sibling = path.parent / stream_file_name(stream)
            return read_jsonl_file(sibling) if sibling.is_file() else []

        try:
            events = read_jsonl_file(path)
        except FlashFsmError as exc:
            raise _fail(str(exc)) from None
        if not events:
            raise _fail(f"{path} holds no events")
        return Source(path.name, events, load_file, str(path.parent))
    url = _store_url(store)
    events = _read_stream(url, source)
    if not events:
        raise _fail(f"stream {source!r} is empty or missing in {url}")
    return Source(source, events, lambda stream: _read_stream(url, stream), url)


def job_source(src: Source, *, quiet: bool = False) -> tuple[str, list[Event]]:
    """The job log a command reads: SOURCE itself, or a run's last attempt's job stream."""
    if not render.is_run_log(src.events):
        return src.name, src.events
    queued = [e for e in src.events if isinstance(e, JobQueued) and e.job_stream]
    if not queued:
        raise _fail(f"run {src.name!r} has no job stream yet (no JobQueued event)")
    stream = queued[-1].job_stream
    events = src.load(stream)
    if not events:
        raise _fail(f"run {src.name!r}: job stream {stream!r} is empty or missing")
    if not quiet:
        console.print(f"run {src.name}: its last attempt's job stream is {stream}")
    return stream, events


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _row_json(row: TimelineRow) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "at": row.at,
        "offset_s": row.offset,
        "kind": row.kind,
        "summary": row.summary,
        "state": row.state_after,
        "moved_from": row.state_before if row.moved else None,
        "armed": list(row.armed),
        "cleared": list(row.cleared),
        "progress": row.progress,
    }


def _verdict_json(verdict: Concluded | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {
        "state": verdict.state,
        "ok": verdict.ok,
        "failure": verdict.failure,
        "rule": verdict.rule,
        "detail": verdict.detail,
        "evidence": list(verdict.evidence),
        "metrics": verdict.metrics,
        "at": verdict.at,
    }


def _notable(row: TimelineRow) -> bool:
    return (
        row.moved
        or bool(row.armed or row.cleared)
        or row.kind in ("JobSubmitted", "WatchStarted", "Concluded", "StatusFetchFailed")
        or (row.kind == "HeartbeatObserved" and row.progress)
        or (row.kind == "StatusObserved" and row.progress)
    )


def print_timeline(stream: str, events: list[Event], *, full: bool = False) -> None:
    """The post-mortem view of one log: its timeline and its verdict."""
    rows = timeline(events)
    shown = rows if full else [r for r in rows if _notable(r)]
    table = Table(title=f"{stream}: {len(rows)} events", title_justify="left", expand=False)
    table.add_column("t+s", justify="right")
    table.add_column("seq", justify="right")
    table.add_column("event")
    table.add_column("state")
    table.add_column("timers")
    for row in shown:
        state = f"{row.state_before} → {row.state_after}" if row.moved else row.state_after
        timers = " ".join([f"+{t}" for t in row.armed] + [f"-{t}" for t in row.cleared])
        table.add_row(f"{row.offset:.0f}", str(row.seq), row.summary, state, timers)
    console.print(table)
    if len(shown) < len(rows):
        console.print(
            f"  ({len(rows) - len(shown)} routine observations not shown; --full shows all)"
        )
    print_verdict(replay(events).verdict)


def print_verdict(verdict: Concluded | None) -> None:
    """One verdict, its rule and its evidence."""
    if verdict is None:
        console.print("  [yellow]no verdict yet[/yellow]")
        return
    colour = "green" if verdict.ok else "red"
    kind = "success" if verdict.ok else verdict.failure
    console.print(f"  [bold {colour}]{verdict.state}[/] ({kind}) by rule [bold]{verdict.rule}[/]")
    console.print(f"  evidence: seqs {list(verdict.evidence)}")
    first = verdict.detail.splitlines()[0] if verdict.detail else ""
    console.print(f"  detail: {first}")


def _exit_for(verdict: Concluded | None) -> int:
    if verdict is None:
        return EXIT_NO_VERDICT
    return EXIT_CODES.get(verdict.failure, EXIT_USAGE)


@app.command("replay")
def replay_command(
    source: Annotated[str, typer.Argument(help="A stream of the store, or a .jsonl file.")],
    store: StoreOption = None,
    verify_: Annotated[
        bool, typer.Option("--verify", help="Re-decide the log with today's rules.")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="Show every event.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Replay a job log: its timeline, timers and verdict (exit code by failure kind)."""
    try:
        stream, events = load_events(source, store)
        state = replay(events)
        report = verify(events) if verify_ else None
    except FlashFsmError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        out: dict[str, Any] = {
            "stream": stream,
            "events": len(events),
            "state": state.state,
            "timeline": [_row_json(r) for r in timeline(events)],
            "verdict": _verdict_json(state.verdict),
        }
        if report is not None:
            d = report.first_disagreement
            out["verify"] = {
                "ok": report.ok,
                "seq": None if d is None else d.seq,
                "reason": None if d is None else d.reason,
                "text": str(report),
            }
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        print_timeline(stream, events, full=full)
        if report is not None:
            colour = "green" if report.ok else "red"
            console.print(f"  verify: [{colour}]{report}[/]")
    if report is not None and not report.ok:
        raise typer.Exit(EXIT_DISAGREES)
    raise typer.Exit(_exit_for(state.verdict))


@app.command("diagram")
def diagram_command(
    fmt: Annotated[str, typer.Option("--format", help="mermaid or dot")] = "mermaid",
) -> None:
    """The job state machine, drawn from the transition table the machine is built from."""
    from flashfsm.fsm import diagram

    if fmt not in ("mermaid", "dot"):
        raise _fail(f"unknown format {fmt!r} (mermaid, dot)")
    sys.stdout.write((diagram.mermaid() if fmt == "mermaid" else diagram.dot()) + "\n")


@app.command("simulator")
def simulator_command(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free one).")] = 0,
    speed: Annotated[float, typer.Option(help="Simulated seconds per real second.")] = 1.0,
) -> None:
    """Serve the RunPod + Hugging Face simulator for an orchestrator's tests (Ctrl-C stops)."""
    from flashfsm.adapters.simulator import Simulator

    with Simulator(port=port, speed=speed) as sim:
        for name, value in sim.env().items():
            shown = "<simulator keys>" if name == "RUNPOD_API_KEY" else value
            console.print(f"export {name}={shown}")
        console.print(f"simulator on {sim.url} (speed {speed:g}×); Ctrl-C stops it")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


@app.command("demo")
def demo_command(store: StoreOption = None) -> None:
    """Run a small fleet through `supervise_run` against the bundled simulator, then show
    each run's attempts and each attempt's post-mortem."""
    from flashfsm.demo import run_demo
    from flashfsm.events.models import AttemptEnded, AttemptStarted

    url = store or default_store_url()
    results = run_demo(url, say=console.print)
    opened = open_store(url)
    try:
        for result in results:
            run_events = opened.read(result.stream)
            outcome = "[green]succeeded[/]" if result.ok else f"[red]{result.failure}[/]"
            console.print(
                f"\n[bold]{result.stream}[/]: {outcome} after {result.attempts} attempt(s)"
            )
            started = {e.attempt: e for e in run_events if isinstance(e, AttemptStarted)}
            for ended in (e for e in run_events if isinstance(e, AttemptEnded)):
                attempt = started[ended.attempt]
                what = "ok" if ended.ok else f"{ended.failure} ({ended.rule or 'no job'})"
                last = " (last GPU)" if attempt.on_last_gpu else ""
                console.print(f"  attempt {ended.attempt} on {attempt.gpu_class}{last}: {what}")
                job_events = opened.read(attempt.job_stream)
                if job_events:
                    print_timeline(attempt.job_stream, job_events)
    finally:
        opened.close()
    console.print(
        f"\nevent log: {url}\nreplay a job: flashfsm replay <job stream> --store {url}"
        f"\ndraw a run: flashfsm timeline <run stream> --out run.html --store {url}"
    )


# --- explanations -------------------------------------------------------------------------


def _measure_json(m: ex.Measure) -> dict[str, Any]:
    return {
        "quantity": m.quantity,
        "value": m.value,
        "op": m.op,
        "limit_name": m.limit_name,
        "limit": m.limit,
        "unit": m.unit,
        "fired": m.fired,
        "note": m.note,
        "text": m.text,
    }


def _timer_json(t: ex.TimerView) -> dict[str, Any]:
    return {
        "rule": t.rule,
        "name": t.name,
        "since": t.since,
        "elapsed_s": t.elapsed,
        "limit_s": t.limit,
        "left_s": t.left,
        "text": t.text,
    }


class _UsageErrors:
    """Errors reading or replaying a log (or a bad value) become exit 1 naming the problem."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, (FlashFsmError, ValueError)):
            raise _fail(_message(exc)) from None
        return False


def _message(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "value"
            parts.append(f"{where}: {err.get('msg')}")
        return "; ".join(parts)
    return str(exc)


@app.command("explain")
def explain_command(
    source: Annotated[str, typer.Argument(help="A stream of the store, or a .jsonl file.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why the verdict fired: the rule, its why, its evidence and the numbers behind it."""
    src = open_source(source, store)
    stream, events = job_source(src, quiet=as_json)
    with _UsageErrors():
        e = ex.explain(events)
    if as_json:
        _emit_json(
            {
                "stream": stream,
                "state": e.state,
                "verdict": _verdict_json(e.verdict),
                "rule": e.rule,
                "step": e.step,
                "why": e.why,
                "at": e.at,
                "offset_s": e.offset,
                "evidence": [
                    {
                        "seq": i.seq,
                        "at": i.at,
                        "offset_s": i.offset,
                        "kind": i.kind,
                        "summary": i.summary,
                    }
                    for i in e.evidence
                ],
                "numbers": [_measure_json(m) for m in e.measures],
                "facts": list(e.facts),
                "timers": [_timer_json(t) for t in e.timers],
            }
        )
        raise typer.Exit(_exit_for(e.verdict))
    if e.verdict is None:
        console.print(f"{stream}: [yellow]{e.facts[0]}[/yellow]")
        for t in e.timers:
            console.print(f"  timer {t.text}")
        raise typer.Exit(EXIT_NO_VERDICT)
    v = e.verdict
    colour = "green" if v.ok else "red"
    kind = "success" if v.ok else v.failure
    console.print(
        f"{stream}: [bold {colour}]{v.state}[/] ({kind}) at t+{ex.secs(e.offset)} s "
        f"by rule [bold]{e.rule}[/] (step {e.step or '?'})",
        soft_wrap=True,
    )
    console.print(f"  why: {e.why}", soft_wrap=True)
    for line in [*e.numbers, *e.facts]:
        console.print(f"  because: {line}", soft_wrap=True)
    for item in e.evidence:
        console.print(
            f"  evidence: seq {item.seq} at t+{ex.secs(item.offset)} s: {item.summary}",
            soft_wrap=True,
        )
    first = v.detail.splitlines()[0] if v.detail else ""
    console.print(f"  detail: {first}", soft_wrap=True)
    raise typer.Exit(_exit_for(v))


@app.command("why-not")
def why_not_command(
    source: Annotated[str, typer.Argument(help="A stream of the store, or a .jsonl file.")],
    rule: Annotated[str, typer.Argument(help=f"One of: {', '.join(RULE_NAMES)}.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why RULE did not fire at the verdict (or by the end of the log), with its numbers."""
    if rule not in RULE_NAMES:
        raise _fail(f"unknown rule {rule!r}; the rules are: {', '.join(RULE_NAMES)}")
    src = open_source(source, store)
    stream, events = job_source(src, quiet=as_json)
    with _UsageErrors():
        w = ex.why_not_report(events, rule)
    if as_json:
        _emit_json(
            {
                "stream": stream,
                "rule": w.rule,
                "fired": w.fired,
                "held": w.held,
                "verdict_rule": w.verdict_rule,
                "at": w.at,
                "offset_s": w.offset,
                "numbers": [_measure_json(m) for m in w.measures],
                "facts": list(w.facts),
                "text": w.text,
            }
        )
        return
    console.print(f"{stream}: {w.text}", soft_wrap=True)


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """`--set name=value` pairs as policy overrides; names are checked against GracePolicy."""
    known = list(GracePolicy.model_fields)
    out: dict[str, Any] = {}
    for item in settings:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise _fail(f"--set {item!r}: write NAME=VALUE, e.g. --set queue_grace_s=600")
        if name not in known:
            raise _fail(f"--set {name}: unknown policy field; GracePolicy has: {', '.join(known)}")
        value = value.strip()
        out[name] = None if value.lower() in ("none", "null", "") else value
    return out


@app.command("whatif")
def whatif_command(
    source: Annotated[str, typer.Argument(help="A stream of the store, or a .jsonl file.")],
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", help="A policy override NAME=VALUE (repeatable)."),
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay the recorded observations under another policy; report the first difference."""
    overrides = parse_settings(settings or [])
    src = open_source(source, store)
    stream, events = job_source(src, quiet=as_json)
    with _UsageErrors():
        w = ex.what_if(events, **overrides)
    if as_json:
        v = w.verdict
        _emit_json(
            {
                "stream": stream,
                "overrides": {k: getattr(w.policy, k) for k in overrides},
                "policy": w.policy.model_dump(),
                "recorded_policy": w.recorded_policy.model_dump(),
                "outcome": w.outcome,
                "recorded": _verdict_json(w.recorded),
                "verdict": None
                if v is None
                else {
                    "state": v.state.value,
                    "ok": v.ok,
                    "failure": v.failure,
                    "rule": v.rule,
                    "detail": v.detail,
                    "evidence": list(v.evidence),
                },
                "at": w.at,
                "offset_s": w.offset,
                "after_seq": w.after_seq,
                "instead_of_seq": w.instead_of_seq,
                "end_at": w.end_at,
                "end_offset_s": w.end_offset,
                "timers": [_timer_json(t) for t in w.timers],
                "text": w.text,
            }
        )
        return
    colour = {"earlier": "yellow", "different": "yellow", "same": "green"}.get(w.outcome, "cyan")
    console.print(f"{stream}: [{colour}]{w.outcome}[/]", soft_wrap=True)
    console.print(f"  {w.text}", soft_wrap=True)


# --- the picture ----------------------------------------------------------------------------


@app.command("timeline")
def timeline_command(
    source: Annotated[str, typer.Argument(help="A job or run stream, or a .jsonl file.")],
    out: Annotated[Path, typer.Option("--out", help="FILE.svg or FILE.html to write.")],
    store: StoreOption = None,
    title: Annotated[str | None, typer.Option(help="The picture's title.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Draw a run (attempts as lanes) or a job log as a self-contained SVG or HTML file."""
    suffix = out.suffix.lower()
    if suffix not in (".svg", ".html", ".htm"):
        raise _fail(f"--out {out}: the file must end in .svg or .html")
    src = open_source(source, store)
    with _UsageErrors():
        pic = render.picture(src.events, src.load, title=title)
        document = render.svg(pic) if suffix == ".svg" else render.html(pic)
    try:
        out.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc}") from None
    if as_json:
        _emit_json(
            {
                "out": str(out),
                "format": "svg" if suffix == ".svg" else "html",
                "title": pic.title,
                "verdict": pic.verdict,
                "ok": pic.ok,
                "duration_s": pic.duration,
                "lanes": [
                    {
                        "key": lane.key,
                        "title": lane.title,
                        "subtitle": lane.subtitle,
                        "stream": lane.stream,
                        "verdict": lane.verdict,
                        "rule": lane.rule,
                        "ok": lane.ok,
                        "spans": [
                            {"state": sp.state, "start_s": sp.start, "end_s": sp.end}
                            for sp in lane.spans
                        ],
                        "marks": [
                            {"at_s": m.at, "kind": m.kind, "label": m.label} for m in lane.marks
                        ],
                    }
                    for lane in pic.lanes
                ],
            }
        )
        return
    verdict = pic.verdict or "no verdict yet"
    console.print(f"wrote {out}: {len(pic.lanes)} lane(s), {verdict}")


# --- the live view ----------------------------------------------------------------------------


def _view_json(view: ex.WatchView) -> dict[str, Any]:
    nxt = view.next_timer
    return {
        "stream": view.stream,
        "state": view.state,
        "since": view.since,
        "in_state_s": view.in_state_s,
        "now": view.now,
        "last_at": view.last_at,
        "quiet_s": None if view.last_at is None else view.now - view.last_at,
        "status": view.status,
        "events": view.events,
        "poll_errors": view.poll_errors,
        "verdict": _verdict_json(view.verdict),
        "next_timer": None if nxt is None else _timer_json(nxt),
        "timers": [_timer_json(t) for t in view.timers],
    }


def _print_view(view: ex.WatchView, *, prefix: str = "") -> None:
    name = view.stream or "?"
    if view.verdict is not None:
        v = view.verdict
        colour = "green" if v.ok else "red"
        console.print(f"{prefix}{name}: [bold {colour}]{v.state}[/] by {v.rule}", soft_wrap=True)
        return
    quiet = "" if view.last_at is None else f", last event {ex.secs(view.now - view.last_at)} s ago"
    console.print(
        f"{prefix}{name}: [bold]{view.state}[/] for {render.duration_text(view.in_state_s)} "
        f"(status {view.status or '-'}{quiet})",
        soft_wrap=True,
    )
    nxt = view.next_timer
    if nxt is not None:
        console.print(f"{prefix}  next timer: {nxt.text}", soft_wrap=True)
    if view.poll_errors:
        console.print(f"{prefix}  {view.poll_errors} consecutive status errors")


@dataclass
class _RunView:
    stream: str
    state: str
    attempts: int
    job_stream: str | None
    result: RunConcluded | None
    job: ex.WatchView | None

    def as_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "stream": self.stream,
            "kind": "run",
            "state": self.state,
            "attempts": self.attempts,
            "job_stream": self.job_stream,
            "result": None
            if r is None
            else {"ok": r.ok, "failure": r.failure, "attempts": r.attempts, "at": r.at},
            "job": None if self.job is None else _view_json(self.job),
        }


def _run_view(stream: str, events: list[Event], load: Callable[[str], list[Event]], now: float):
    attempts = sum(isinstance(e, AttemptStarted) for e in events)
    result = next((e for e in events if isinstance(e, RunConcluded)), None)
    queued = [e for e in events if isinstance(e, JobQueued) and e.job_stream]
    ended = [e for e in events if isinstance(e, AttemptEnded)]
    job_stream = queued[-1].job_stream if queued else None
    job = None
    if job_stream is not None:
        job_events = load(job_stream)
        if job_events:
            job = ex.watch_view(job_events, now)
    if result is not None:
        state = "SUCCEEDED" if result.ok else f"FAILED ({result.failure})"
    elif attempts == 0:
        state = "STARTING"
    elif ended and ended[-1].attempt == attempts - 1:
        state = "BETWEEN ATTEMPTS"
    elif queued and queued[-1].attempt == attempts - 1:
        state = "WATCHING"
    else:
        state = "DEPLOYING"
    return _RunView(stream, state, attempts, job_stream, result, job)


def _print_run_view(rv: _RunView) -> None:
    colour = "green" if rv.result is not None and rv.result.ok else "bold"
    if rv.result is not None and not rv.result.ok:
        colour = "red"
    console.print(
        f"run {rv.stream}: [{colour}]{rv.state}[/], {rv.attempts} attempt(s)", soft_wrap=True
    )
    if rv.job is not None:
        _print_view(rv.job, prefix="  ")


def _run_exit(result: RunConcluded | None) -> int:
    if result is None:
        return EXIT_NO_VERDICT
    return 0 if result.ok else EXIT_CODES.get(result.failure, EXIT_USAGE)


@app.command("watch")
def watch_command(
    stream: Annotated[str, typer.Argument(help="A job or run stream of the store.")],
    store: StoreOption = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep printing as events land, until a verdict.")
    ] = False,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Only read the log: never write to it or call RunPod (what watch does today).",
        ),
    ] = False,
    as_json: JsonOption = False,
    now: Annotated[
        float | None, typer.Option(help="The time to view the log at (default: now).")
    ] = None,
    poll_s: Annotated[float, typer.Option(help="How often --follow looks for events.")] = 0.5,
) -> None:
    """A live view of a job or run: state, time in state, and time left on the next timer."""
    url = _store_url(store)
    clock: Callable[[], float] = (lambda: now) if now is not None else time.time  # type: ignore[assignment]
    try:
        opened = open_store(url)
    except (ValueError, ImportError) as exc:
        raise _fail(str(exc)) from None
    try:
        with _UsageErrors():
            events = opened.read(stream)
        if not events:
            raise _fail(f"stream {stream!r} is empty or missing in {url}")
        if render.is_run_log(events):
            code = _watch_run(opened, stream, events, clock, follow, as_json, poll_s)
        else:
            code = _watch_job(opened, stream, events, clock, follow, as_json, poll_s)
    finally:
        opened.close()
    raise typer.Exit(code)


def _watch_job(
    opened: Any,
    stream: str,
    events: list[Event],
    clock: Callable[[], float],
    follow: bool,
    as_json: bool,
    poll_s: float,
) -> int:
    with _UsageErrors():
        view = ex.watch_view(events, clock())
    if as_json:
        sys.stdout.write(json.dumps(_view_json(view)) + "\n")
    else:
        _print_view(view)
    if not follow or view.verdict is not None:
        return _exit_for(view.verdict)
    try:
        for event in opened.follow(stream, after=events[-1].seq, poll_s=poll_s):
            events.append(event)
            with _UsageErrors():
                view = ex.watch_view(events, max(clock(), event.at))
            if as_json:
                sys.stdout.write(json.dumps(_view_json(view)) + "\n")
                sys.stdout.flush()
            else:
                rows = timeline(events)
                console.print(
                    f"t+{ex.secs(rows[-1].offset)} s seq {event.seq} {rows[-1].summary}",
                    soft_wrap=True,
                )
                _print_view(view, prefix="  ")
            if view.verdict is not None:
                break
    except KeyboardInterrupt:
        return EXIT_NO_VERDICT
    return _exit_for(view.verdict)


def _watch_run(
    opened: Any,
    stream: str,
    events: list[Event],
    clock: Callable[[], float],
    follow: bool,
    as_json: bool,
    poll_s: float,
) -> int:
    seen: dict[str, int] = {}

    def load(name: str) -> list[Event]:
        got = opened.read(name)
        seen[name] = len(got)
        return got

    def show(rv: _RunView) -> None:
        if as_json:
            sys.stdout.write(json.dumps(rv.as_json()) + "\n")
            sys.stdout.flush()
        else:
            _print_run_view(rv)

    with _UsageErrors():
        rv = _run_view(stream, events, load, clock())
    show(rv)
    if not follow:
        return _run_exit(rv.result)
    last = (len(events), dict(seen))
    try:
        while rv.result is None:
            time.sleep(poll_s)
            events = opened.read(stream)
            with _UsageErrors():
                rv = _run_view(stream, events, load, clock())
            if (len(events), dict(seen)) != last:
                last = (len(events), dict(seen))
                show(rv)
    except KeyboardInterrupt:
        return EXIT_NO_VERDICT
    return _run_exit(rv.result)


# --- the store ----------------------------------------------------------------------------


def _stream_row(stream: str, events: list[Event]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "stream": stream,
        "kind": "job",
        "events": len(events),
        "last_at": events[-1].at if events else None,
        "state": None,
        "ok": None,
        "failure": None,
        "rule": None,
    }
    if not events:
        return row
    first = events[0]
    if isinstance(first, RunStarted):
        result = next((e for e in events if isinstance(e, RunConcluded)), None)
        attempts = sum(isinstance(e, AttemptStarted) for e in events)
        row.update(kind="run", attempts=attempts)
        if result is None:
            row["state"] = "RUNNING"
        else:
            row.update(
                state="SUCCEEDED" if result.ok else "FAILED", ok=result.ok, failure=result.failure
            )
        return row
    if first.kind in ("IdleSeen", "IdleCleared", "EndpointReaped"):
        timers = {e.endpoint_id for e in events if e.kind == "IdleSeen"}  # type: ignore[attr-defined]
        reaped = sum(e.kind == "EndpointReaped" for e in events)
        row.update(kind="sweeper", state=f"{reaped} reaped", timers=len(timers))
        return row
    try:
        state = replay(events)
    except FlashFsmError as exc:
        row.update(state="UNREADABLE", error=str(exc))
        return row
    row["state"] = state.state
    if state.verdict is not None:
        v = state.verdict
        row.update(ok=v.ok, failure=v.failure, rule=v.rule)
    return row


@app.command("ls")
def ls_command(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """The store's streams: job, run or sweeper, with their state and verdict."""
    url = _store_url(store)
    try:
        opened = open_store(url)
    except (ValueError, ImportError) as exc:
        raise _fail(str(exc)) from None
    try:
        with _UsageErrors():
            rows = [_stream_row(name, opened.read(name)) for name in opened.streams()]
    finally:
        opened.close()
    if as_json:
        _emit_json({"store": url, "streams": rows})
        return
    table = Table(title=f"{url}: {len(rows)} stream(s)", title_justify="left")
    table.add_column("stream", overflow="fold")
    table.add_column("kind")
    table.add_column("events", justify="right")
    table.add_column("state")
    table.add_column("verdict", overflow="fold")
    table.add_column("last event", no_wrap=True)
    for row in rows:
        if row["ok"] is None:
            verdict = ""
        elif row["ok"]:
            verdict = "[green]success[/green]"
        else:
            verdict = f"[red]{row['failure']}[/red]" + (f" by {row['rule']}" if row["rule"] else "")
        when = (
            time.strftime("%m-%d %H:%M", time.localtime(row["last_at"])) if row["last_at"] else ""
        )
        table.add_row(
            row["stream"], row["kind"], str(row["events"]), row["state"] or "", verdict, when
        )
    console.print(table)


def _copy(src: Any, dst: str, streams: list[str] | None) -> dict[str, int]:
    try:
        return copy_streams(src, dst, streams)
    except (FlashFsmError, ValueError, ImportError, OSError) as exc:
        raise _fail(str(exc)) from None


@app.command("export")
def export_command(
    streams: Annotated[list[str], typer.Argument(help="Streams to copy.")],
    to: Annotated[str, typer.Option("--to", help="Destination store URL (jsonl:///dir, …).")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy streams to another store (keeping names, seqs and ids); resumable."""
    url = _store_url(store)
    missing = [name for name in streams if not _read_stream(url, name)]
    if missing:
        raise _fail(f"no such stream(s) in {url}: {', '.join(missing)}")
    copied = _copy(url, to, streams)
    if as_json:
        _emit_json({"from": url, "to": to, "copied": copied})
        return
    for name, count in copied.items():
        console.print(f"{name}: {count} event(s) copied to {to}")


@app.command("import")
def import_command(
    source: Annotated[str, typer.Argument(help="A store URL, or a .jsonl file.")],
    streams: Annotated[
        list[str] | None, typer.Argument(help="Streams to copy (default: all).")
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy streams from another store (or one .jsonl file) into this one; resumable."""
    url = _store_url(store)
    path = Path(source)
    src: Any = source
    if path.suffix == ".jsonl" and path.is_file():
        from flashfsm.adapters.memory import MemoryStore

        try:
            events = read_jsonl_file(path)
        except FlashFsmError as exc:
            raise _fail(str(exc)) from None
        if not events:
            raise _fail(f"{path} holds no events")
        src = MemoryStore()
        src.append(events[0].stream, events, 0)
    copied = _copy(src, url, streams or None)
    if as_json:
        _emit_json({"from": source, "to": url, "copied": copied})
        return
    for name, count in copied.items():
        console.print(f"{name}: {count} event(s) copied into {url}")


@app.command("sweep")
def sweep_command(
    store: StoreOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Record and delete nothing; say what would go.")
    ] = False,
    protect: Annotated[
        list[str] | None,
        typer.Option("--protect", help="An endpoint name never to delete (repeatable)."),
    ] = None,
    min_idle_s: Annotated[
        float, typer.Option(help="Delete only endpoints idle at least this long.")
    ] = 0.0,
    keep_warm: Annotated[
        bool, typer.Option("--keep-warm", help="Count a warm idle worker as busy.")
    ] = False,
    stream: Annotated[str, typer.Option(help="The sweeper's stream.")] = "sweeper",
    as_json: JsonOption = False,
) -> None:
    """Delete flash endpoints that stayed idle (RUNPOD_API_KEY from the environment)."""
    from flashfsm.adapters.runpod import RunpodClient
    from flashfsm.adapters.sweeper import IdleSweeper

    url = _store_url(store)
    try:
        client = RunpodClient.from_env()
    except (ValueError, FlashFsmError, KeyError) as exc:
        raise _fail(f"cannot reach RunPod: {exc}") from None
    try:
        opened = open_store(url)
    except (ValueError, ImportError) as exc:
        client.close()
        raise _fail(str(exc)) from None
    try:
        sweeper = IdleSweeper(client, opened, stream=stream)
        with _UsageErrors():
            report = sweeper.sweep(
                protect or (), min_idle_s=min_idle_s, reap_warm=not keep_warm, dry_run=dry_run
            )
    finally:
        opened.close()
        client.close()
    if as_json:
        _emit_json(
            {
                "store": url,
                "stream": stream,
                "dry_run": report.dry_run,
                "ok": report.ok,
                "deleted": list(report.deleted),
                "would_delete": list(report.would_delete),
                "seen_idle": list(report.seen_idle),
                "cleared": list(report.cleared),
                "errors": list(report.errors),
            }
        )
    else:
        gone = report.would_delete if report.dry_run else report.deleted
        verb = "would delete" if report.dry_run else "deleted"
        console.print(f"{verb} {len(gone)} endpoint(s): {', '.join(gone) or '-'}")
        console.print(f"idle: {', '.join(report.seen_idle) or '-'}")
        if report.cleared:
            console.print(f"timers cleared: {', '.join(report.cleared)}")
        for error in report.errors:
            console.print(f"[red]error:[/red] {error}", soft_wrap=True)
    raise typer.Exit(0 if report.ok else EXIT_SWEEP_ERRORS)


def main() -> None:
    """Console-script entry point."""
    app()
