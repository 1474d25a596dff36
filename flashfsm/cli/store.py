"""The commands that work on the store: ls, export, import, sweep."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flashfsm.adapters.stores import copy_streams
from flashfsm.cli.common import (
    EXIT_SWEEP_ERRORS,
    JsonOption,
    StoreOption,
    UsageErrors,
    console,
    emit_json,
    fail,
    open_store_or_fail,
    read_events_file,
    read_stream,
    store_url,
    styled,
    sweeper_state,
)
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Event
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import replay_run
from flashfsm.views import run_label, stream_kind, sweeper_view


def stream_row(stream: str, events: list[Event]) -> dict[str, Any]:
    """One stream as `ls` lists it: its kind, its state and its verdict or result."""
    kind = stream_kind(events)
    row: dict[str, Any] = {
        "stream": stream,
        "kind": kind,
        "events": len(events),
        "last_at": events[-1].at if events else None,
        "state": None,
        "ok": None,
        "failure": None,
        "rule": None,
    }
    if not events:
        return row
    try:
        if kind == "run":
            run = replay_run(events)
            row.update(attempts=len(run.attempts), state=run_label(run, failure=False))
            if run.result is not None:
                row.update(ok=run.result.ok, failure=run.result.failure)
        elif kind == "sweeper":
            view = sweeper_view(events)
            row.update(state=sweeper_state(view), timers=len(view.timers))
        else:
            state = replay(events)
            row["state"] = state.state
            if state.verdict is not None:
                v = state.verdict
                row.update(ok=v.ok, failure=v.failure, rule=v.rule)
    except FlashFsmError as exc:
        row.update(state="UNREADABLE", error=str(exc))
    return row


def ls_command(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """The store's streams: job, run or sweeper, with their state and verdict."""
    url = store_url(store)
    opened = open_store_or_fail(url)
    try:
        with UsageErrors():
            rows = [stream_row(name, opened.read(name)) for name in opened.streams()]
    finally:
        opened.close()
    if as_json:
        emit_json({"store": url, "streams": rows})
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
            verdict = styled(("success", "green"))
        else:
            rule = f" by {row['rule']}" if row["rule"] else ""
            verdict = styled((str(row["failure"]), "red"), rule)
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
        raise fail(str(exc)) from None


def export_command(
    streams: Annotated[list[str], typer.Argument(help="Streams to copy.")],
    to: Annotated[str, typer.Option("--to", help="Destination store URL (jsonl:///dir, …).")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy streams to another store (keeping names, seqs and ids); resumable."""
    url = store_url(store)
    missing = [name for name in streams if not read_stream(url, name)]
    if missing:
        raise fail(f"no such stream(s) in {url}: {', '.join(missing)}")
    _report_copy(_copy(url, to, streams), url, to, "to", as_json)


def import_command(
    source: Annotated[str, typer.Argument(help="A store URL, or a .jsonl file.")],
    streams: Annotated[
        list[str] | None, typer.Argument(help="Streams to copy (default: all).")
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy streams from another store (or one .jsonl file) into this one; resumable."""
    url = store_url(store)
    path = Path(source)
    src: Any = source
    if path.suffix == ".jsonl" and path.is_file():
        from flashfsm.adapters.memory import MemoryStore

        events = read_events_file(path)
        src = MemoryStore()
        src.append(events[0].stream, events, 0)
    _report_copy(_copy(src, url, streams or None), source, url, "into", as_json)


def _report_copy(
    copied: dict[str, int], source: str, target: str, preposition: str, as_json: bool
) -> None:
    """What `export` or `import` copied: one JSON object, or a line per stream."""
    if as_json:
        emit_json({"from": source, "to": target, "copied": copied})
        return
    for name, count in copied.items():
        console.print(f"{name}: {count} event(s) copied {preposition} {target}")


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
    from flashfsm.sweeper import IdleSweeper

    url = store_url(store)
    try:
        client = RunpodClient.from_env()
    except (ValueError, FlashFsmError, KeyError) as exc:
        raise fail(f"cannot reach RunPod: {exc}") from None
    try:
        opened = open_store_or_fail(url)
    except typer.Exit:
        client.close()
        raise
    try:
        sweeper = IdleSweeper(client, opened, stream=stream)
        with UsageErrors():
            report = sweeper.sweep(
                protect or (), min_idle_s=min_idle_s, reap_warm=not keep_warm, dry_run=dry_run
            )
    finally:
        opened.close()
        client.close()
    if as_json:
        emit_json(
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
            console.print(styled(("error:", "red"), f" {error}"), soft_wrap=True)
    raise typer.Exit(0 if report.ok else EXIT_SWEEP_ERRORS)
