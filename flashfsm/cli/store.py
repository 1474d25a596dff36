"""The commands that work on the store: ls, export, import, sweep.

`ls` lists each stream as `flashfsm.display.listing.stream_row` has it (the web view's runs
list shows the same rows), in a table fitted to the terminal (`ls_table`).

`ls` and the sources of `export` and `import` only read: a missing store is an error and
nothing is created. The stores they write to (`export --to`, `import`'s and `sweep`'s
`--store`) are created when missing, but only inside a directory that exists (a missing
directory is a mistyped path: `open_writer`); the default store's directory is made.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from rich.box import SIMPLE_HEAD
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from flashfsm.adapters.stores import ENV_VAR, copy_streams
from flashfsm.adapters.urls import display_url, hide_url_secrets, url_path
from flashfsm.cli.common import (
    EXIT_SWEEP_ERRORS,
    JsonOption,
    StoreOption,
    UsageErrors,
    emit_json,
    fail,
    message,
    open_reader,
    open_store_or_fail,
    read_all_streams,
    read_events_file,
    read_stream,
    say,
    store_url,
)
from flashfsm.display.listing import reason_text, state_text, stream_row
from flashfsm.display.sources import is_file_source
from flashfsm.display.text import PIPED_WIDTH, console, styled
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.store import capabilities, undriven
from flashfsm.render import duration_text


def fleet_notes(opened: Any) -> dict[str, dict[str, str]]:
    """What a store's open-streams index says of the handed-off streams no replica drives,
    by stream: `{"failed_to_start": reason}` for one a replica marked so (its watch failed
    on every claim), `{"waiting": why}` for a run no live replica can drive
    (`flashfsm.events.store.undriven`). Empty for a store that keeps no index. Only reads."""
    leases = capabilities(opened).leases
    if leases is None:
        return {}
    rows = leases.open_streams()
    if not rows:
        return {}
    replicas = leases.replicas()
    notes: dict[str, dict[str, str]] = {}
    for row in rows:
        if row.failed is not None:
            notes[row.stream] = {"failed_to_start": row.failed}
        elif (why := undriven(row, replicas)) is not None:
            notes[row.stream] = {"waiting": why}
    return notes


def _read_fleet_notes(url: str) -> dict[str, dict[str, str]]:
    opened = open_reader(url)
    try:
        with UsageErrors():
            return fleet_notes(opened)
    finally:
        opened.close()


#: `ls`'s columns in the order shown: (header, right-aligned).
LS_COLUMNS = (
    ("stream", False),
    ("kind", False),
    ("state", False),
    ("verdict", False),
    ("span", True),
    ("events", True),
)
#: How `ls` fits a narrow console, one step at a time until the table fits: drop a column,
#: or shorten the verdict to what the state does not say already (a job's rule, a run's
#: failure kind). The stream and its state always stay.
LS_NARROWING = ("events", "kind", "short verdict", "span", "verdict")


def _verdict_cell(row: dict[str, Any], *, short: bool = False) -> Text:
    if row["ok"] is None:
        return Text("")
    if row["ok"]:
        return styled(("success", "green"))
    if short:
        return styled((str(row["rule"] or row["failure"]), "red"))
    rule = f" by {row['rule']}" if row["rule"] else ""
    return styled((str(row["failure"]), "red"), rule)


def ls_table(rows: list[dict[str, Any]], width: int) -> Table:
    """`ls`'s table, fitted to `width` columns: each stream on one line, narrowed step by
    step while it is too wide (`LS_NARROWING`); a stream name longer than the whole line is
    folded as a last resort."""

    def cells(row: dict[str, Any], short: bool) -> dict[str, Text]:
        span = "" if row["span_s"] is None else duration_text(row["span_s"])
        return {
            "stream": Text(row["stream"]),
            "kind": Text(row["kind"]),
            "state": Text(state_text(row)),
            "verdict": _verdict_cell(row, short=short),
            "span": Text(span),
            "events": Text(str(row["events"])),
        }

    def build(shown: list[str], short: bool, fold: bool = False) -> Table:
        table = Table(
            box=SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), expand=False
        )
        for name, right in LS_COLUMNS:
            if name in shown:
                folded = fold and name == "stream"
                table.add_column(
                    name,
                    justify="right" if right else "left",
                    no_wrap=not folded,
                    overflow="fold" if folded else "ellipsis",
                )
        for row in rows:
            cell = cells(row, short)
            table.add_row(*(cell[name] for name, _ in LS_COLUMNS if name in shown))
        return table

    shown = [name for name, _ in LS_COLUMNS]
    short = False
    unbounded = console.options.update_width(PIPED_WIDTH)  # the table's natural width
    for step in (None, *LS_NARROWING):
        if step == "short verdict":
            short = True
        elif step is not None:
            shown.remove(step)
        table = build(shown, short)
        if Measurement.get(console, unbounded, table).maximum <= width:
            return table
    return build(shown, short, fold=True)


def ls_command(
    store: StoreOption = None,
    as_json: JsonOption = False,
    owner: Annotated[
        bool, typer.Option("--owner", help="The open streams, with their owner and lease.")
    ] = False,
) -> None:
    """The store's streams: job, run or sweeper, with their state, verdict and time span."""
    url = store_url(store, reading=True)
    if owner:
        _ls_owners(url, open_reader(url), as_json)
        return
    read = read_all_streams(url)
    notes = _read_fleet_notes(url) if read.logs else {}
    rows = [stream_row(name, events) | notes.get(name, {}) for name, events in read.logs.items()]
    if as_json:
        emit_json({"store": display_url(url), "streams": rows, "damaged": read.damaged_json()})
        raise typer.Exit(read.exit_code())
    damaged = f", {len(read.damaged)} damaged (skipped)" if read.damaged else ""
    if not rows:
        say(f"{display_url(url)}: no {'readable ' if damaged else ''}streams{damaged}")
    else:
        say(f"{display_url(url)}: {len(rows)} stream(s){damaged}")
        console.print(ls_table(rows, console.width))
    read.flag()
    raise typer.Exit(read.exit_code())


def _ls_owners(url: str, opened: Any, as_json: bool) -> None:
    """`ls --owner`: the open-streams index, who holds each stream and for how long."""
    leases = capabilities(opened).leases
    try:
        if leases is None:
            raise fail(f"{display_url(url)} keeps no open-streams index (SQLite, PostgreSQL do)")
        with UsageErrors():
            index = leases.open_streams()
            replicas = leases.replicas() if index else []
            rows = [
                {
                    "stream": o.stream,
                    "kind": o.kind,
                    "parent": o.parent,
                    "handoff": o.handoff,
                    "owner": o.owner if o.expires_in is not None and o.expires_in > 0 else None,
                    "lease_left_s": None if o.expires_in is None else round(o.expires_in, 3),
                    "token": o.token,
                    "failed_to_start": o.failed,
                    "waiting": undriven(o, replicas),
                }
                for o in index
            ]
    finally:
        opened.close()
    if as_json:
        emit_json({"store": display_url(url), "open": rows})
        return
    if not rows:
        say(f"{display_url(url)}: no open streams")
        return
    say(f"{display_url(url)}: {len(rows)} open stream(s)")
    table = Table(box=SIMPLE_HEAD, pad_edge=False)
    for column in ("stream", "kind", "owner", "lease", "token"):
        table.add_column(column, overflow="fold")
    for row in rows:
        if row["failed_to_start"] is not None:
            held = f"failed to start: {reason_text(row['failed_to_start'])}"
        elif row["waiting"] is not None:
            held = f"- (waiting: {row['waiting']})"
        elif row["parent"]:
            held = f"(of {row['parent']})"
        elif not row["handoff"]:
            held = "(its opener)"
        else:
            held = row["owner"] or "-"
        left = row["lease_left_s"]
        lease = "-" if left is None else f"{left:.1f} s" if left > 0 else "expired"
        table.add_row(row["stream"], row["kind"], held, lease, str(row["token"]))
    console.print(table)


# --- copies ---------------------------------------------------------------------------------


def open_writer(url: str, *, default: bool = False) -> None:
    """Check that the store at `url` may be written: a file store (`sqlite:`, `jsonl:`) is
    created when missing, but only in a directory that exists — unless it is the default
    store (`default`), whose directory is made. Exit 1, one line, otherwise."""
    scheme = urlsplit(url).scheme
    if default or scheme not in ("sqlite", "jsonl"):
        return
    try:
        path = url_path(url).expanduser().absolute()
    except ValueError as exc:
        raise fail(str(exc)) from None
    if not path.parent.is_dir():
        raise fail(
            f"no directory {path.parent} to hold the store {display_url(url)} (nothing was created)"
        )


def _copy(src: Any, dst: str, streams: list[str] | None) -> dict[str, int]:
    try:
        return copy_streams(src, dst, streams)
    except (FlashFsmError, ValueError, ImportError, OSError) as exc:
        text = message(exc)
        for url in (src, dst):
            if isinstance(url, str):
                text = hide_url_secrets(text, url)
        raise fail(text) from None


def _is_default(store: str | None) -> bool:
    return store is None and not os.environ.get(ENV_VAR, "").strip()


def export_command(
    streams: Annotated[list[str], typer.Argument(metavar="STREAMS", help="Streams to copy.")],
    to: Annotated[
        str,
        typer.Option("--to", metavar="URL", help="Destination store URL (jsonl:///dir, …)."),
    ],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy streams to another store (keeping names, seqs and ids); resumable."""
    url = store_url(store, reading=True)
    missing = [name for name in streams if not read_stream(url, name)]
    if missing:
        raise fail(f"no such stream(s) in {display_url(url)}: {', '.join(missing)}")
    open_writer(to)
    _report_copy(_copy(url, to, streams), url, to, "to", as_json)


def import_command(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="A store URL, or a .jsonl file.")],
    streams: Annotated[
        list[str] | None,
        typer.Argument(metavar="STREAMS", help="Streams to copy (default: all)."),
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy streams from another store (or one .jsonl file) into this one; resumable."""
    url = store_url(store)
    src: Any = source
    if is_file_source(source):
        from flashfsm.adapters.memory import MemoryStore

        events = read_events_file(Path(source))
        src = MemoryStore()
        src.append(events[0].stream, events, 0)
        if streams and events[0].stream not in streams:
            raise fail(f"{source} holds stream {events[0].stream!r}, not {', '.join(streams)}")
    else:
        opened = open_reader(source)  # the source must exist; it is only read
        try:
            with UsageErrors():
                have = set(opened.streams())
        finally:
            opened.close()
        missing = [name for name in streams or () if name not in have]
        if missing or not have:
            what = ", ".join(missing) if missing else "any stream"
            raise fail(f"{display_url(source)} holds no {what}: nothing to import")
    open_writer(url, default=_is_default(store))
    _report_copy(_copy(src, url, streams or None), source, url, "into", as_json)


def _report_copy(
    copied: dict[str, int], source: str, target: str, preposition: str, as_json: bool
) -> None:
    """What `export` or `import` copied: one JSON object, or a line per stream."""
    if as_json:
        emit_json({"from": display_url(source), "to": display_url(target), "copied": copied})
        return
    for name, count in copied.items():
        say(f"{name}: {count} event(s) copied {preposition} {display_url(target)}")


def sweep_command(
    store: StoreOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Record and delete nothing; say what would go.")
    ] = False,
    protect: Annotated[
        list[str] | None,
        typer.Option(
            "--protect", metavar="NAME", help="An endpoint name never to delete (repeatable)."
        ),
    ] = None,
    min_idle_s: Annotated[
        float,
        typer.Option(metavar="SECONDS", help="Delete only endpoints idle at least this long."),
    ] = 0.0,
    keep_warm: Annotated[
        bool, typer.Option("--keep-warm", help="Count a warm idle worker as busy.")
    ] = False,
    stream: Annotated[
        str, typer.Option(metavar="STREAM", help="The sweeper's stream.")
    ] = "sweeper",
    as_json: JsonOption = False,
) -> None:
    """Delete flash endpoints that stayed idle (RUNPOD_API_KEY from the environment)."""
    from flashfsm.adapters.runpod import RunpodClient
    from flashfsm.sweeper import IdleSweeper

    url = store_url(store)
    # The store first, and only read: a store that is mistyped, not a store, or unreadable
    # stops the sweep before RunPod is called or anything is created.
    open_writer(url, default=_is_default(store))
    if _exists(url):
        read_stream(url, stream)
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
                "store": display_url(url),
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
        say(f"{verb} {len(gone)} endpoint(s): {', '.join(gone) or '-'}")
        say(f"idle: {', '.join(report.seen_idle) or '-'}")
        if report.cleared:
            say(f"timers cleared: {', '.join(report.cleared)}")
        for error in report.errors:
            say(("error:", "red"), f" {error}")
    raise typer.Exit(0 if report.ok else EXIT_SWEEP_ERRORS)


def _exists(url: str) -> bool:
    """Whether a file store's file or directory exists (other stores: assumed to)."""
    if urlsplit(url).scheme not in ("sqlite", "jsonl"):
        return True
    try:
        return url_path(url).expanduser().exists()
    except ValueError:
        return True
