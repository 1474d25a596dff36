"""The `flashfsm` command: the demo and the post-mortem tools.

Every command that reads a log takes `--store URL` (default: `$FLASHFSM_STORE`, else the
user's SQLite file) and prints with rich; `--json` prints machine-readable output instead.
Exit codes: 0 for success (and for a successful verdict), 1 for a usage or input error,
and one code per failure kind so a script can route on it (`EXIT_CODES`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from flashfsm.adapters.jsonl import read_jsonl_file
from flashfsm.adapters.stores import default_store_url, open_store
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Concluded, Event
from flashfsm.fsm.explain import TimelineRow, timeline
from flashfsm.fsm.job import replay, verify

app = typer.Typer(
    name="flashfsm",
    help="An event-sourced state machine for GPU training jobs on RunPod serverless.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(highlight=False)

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
EXIT_NO_VERDICT = 2  # the log holds no verdict yet
EXIT_DISAGREES = 3  # `replay --verify` found a disagreement

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
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():
        return path.name, read_jsonl_file(path)
    opened = open_store(store or default_store_url())
    try:
        events = opened.read(source)
    finally:
        opened.close()
    if not events:
        raise _fail(f"stream {source!r} is empty or missing in {store or default_store_url()}")
    return source, events


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
    """Run simulated jobs against the bundled simulator, then show their post-mortems."""
    from flashfsm.demo import run_demo

    url = store or default_store_url()
    results = run_demo(url, say=console.print)
    for stream in results:
        opened = open_store(url)
        try:
            events = opened.read(stream)
        finally:
            opened.close()
        console.print()
        print_timeline(stream, events)
    console.print(
        f"\nevent log: {url}; replay any job with: flashfsm replay <stream> --store {url}"
    )


def main() -> None:
    """Console-script entry point."""
    app()
