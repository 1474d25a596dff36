"""The commands that bring something of their own: demo, diagram and examples (the
simulator's is in `flashfsm.cli.simulator`: only it loads the simulator's server).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from flashfsm.adapters.stores import open_store
from flashfsm.adapters.urls import display_url, hide_url_secrets
from flashfsm.cli.common import demo_fallback_url, fail
from flashfsm.cli.ui import DEFAULT_PORT
from flashfsm.display.logs import attempt_line, print_timeline
from flashfsm.display.text import console, styled
from flashfsm.events.errors import FlashFsmError
from flashfsm.fsm.run import replay_run


def diagram_command(
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="mermaid (text for a Markdown block) or svg (a standalone picture)"
        ),
    ] = "mermaid",
) -> None:
    """The job state machine, drawn from the transition table the machine is built from."""
    from flashfsm.postmortem import diagram

    drawings = {"mermaid": diagram.mermaid, "svg": diagram.svg}
    if fmt not in drawings:
        raise fail(f"unknown format {fmt!r} ({', '.join(drawings)})")
    sys.stdout.write(drawings[fmt]() + "\n")


def examples_command(
    dest: Annotated[
        Path | None,
        typer.Argument(
            help="A directory to copy the example logs into (created when missing).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print the directory of the example logs the package ships, or copy them into DEST.
    They are a JSONL store of simulator runs (`run-stall.jsonl`, its jobs, …; `worker/`: a
    run whose worker ran out of GPU memory) that the commands read as a SOURCE. A file
    already in DEST with other content is refused (exit 1, nothing copied); an identical
    one is left as it is."""
    from flashfsm.bundled import copy_example_logs, example_logs

    if dest is None:
        typer.echo(str(example_logs()))
        return
    try:
        copied = copy_example_logs(dest)
    except OSError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"the {len(copied)} example logs are in {dest}")


DemoStoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help=(
            "Store URL (default: demo.db beside the default store when that is a SQLite file "
            "- $FLASHFSM_STORE, else the user's events.db - else in the user's data "
            "directory). The picture, demo-<tag>.html, goes beside it."
        ),
    ),
]
ResetOption = Annotated[
    bool,
    typer.Option(
        "--reset",
        help=(
            "Delete the demo store's file (and its demo pictures) first. Refused for a store "
            "that is not a SQLite file or that holds any stream the demo did not write."
        ),
    ),
]


TagOption = Annotated[
    str | None,
    typer.Option(
        "--tag", help="The hex tag that names the runs, demo-<tag>-<name> (default: a random one)."
    ),
]


def demo_command(
    store: DemoStoreOption = None, reset: ResetOption = False, tag: TagOption = None
) -> None:
    """Run a small fleet through `supervise_run` against the bundled simulator into the
    demo's own store, then show each run's attempts and each attempt's post-mortem, draw
    the runs, and name the commands that explore them. Ctrl-C cancels the run in progress
    in the log (exit 130)."""
    from flashfsm import demo

    url = store or demo.demo_store_url()
    shown = display_url(url)
    try:
        tag = demo.new_tag() if tag is None else demo.check_tag(tag)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if reset:
        try:
            removed = demo.reset_demo_store(url)
        except ValueError as exc:
            raise fail(hide_url_secrets(str(exc), url)) from None
        console.print(f"reset: removed {len(removed)} file(s) of {shown}")
    picture = demo.picture_path(url, tag)
    try:
        opened = open_store(url)  # the demo writes: the store is created when missing
    except (ValueError, ImportError, OSError, FlashFsmError) as exc:
        raise fail(f"cannot open {shown}: {hide_url_secrets(str(exc), url)}") from None
    try:
        console.print(f"flashfsm demo {tag}: {len(demo.DEMO_RUNS)} runs into {shown}\n")
        try:
            results = demo.run_demo(opened, say=console.print, tag=tag, picture=picture)
        except demo.DemoInterrupted as stop:
            cancelled = [stop.cancelled] if stop.cancelled is not None else []
            for result in cancelled:
                console.print(
                    styled(
                        ("\ninterrupted: ", "red"),
                        (result.stream, "bold"),
                        " concluded as ",
                        (str(result.failure or "succeeded"), "red"),
                        " (its job cancelled, its endpoints deleted)" if not result.ok else "",
                    )
                )
            commands = demo.explore_commands(opened, stop.results + cancelled)
            _explore(commands, url, picture if picture.exists() else None)
            raise typer.Exit(130) from None
        for result in results:
            _print_run(opened, result)
        commands = demo.explore_commands(opened, results)
    finally:
        opened.close()
    _explore(commands, url, picture)


def _print_run(opened: Any, result: Any) -> None:
    """A demo run's result, its attempts (with their deploy time) and their job timelines."""
    run = replay_run(opened.read(result.stream))
    outcome = ("succeeded", "green") if result.ok else (str(result.failure), "red")
    console.print(
        styled("\n", (result.stream, "bold"), ": ", outcome, f" after {result.attempts} attempt(s)")
    )
    for attempt in run.attempts:
        deployed = ""
        if attempt.submitted_at is not None:
            deployed = f" · deployed in {attempt.submitted_at - attempt.started.at:.0f} s"
        console.print(f"  {attempt_line(attempt, run)}{deployed}")
        job_stream = attempt.job_stream or attempt.started.job_stream
        job_events = opened.read(job_stream) if job_stream else []
        if job_events:
            print_timeline(job_stream, job_events)


def _explore(commands: list[tuple[str, str]], url: str, picture: Path | None) -> None:
    """The picture and the commands that explore the demo's streams, the web view last."""
    from flashfsm.demo import store_export

    if picture is not None:
        console.print(f"\npicture of the runs: {picture}")
    if urlsplit(url).scheme == "memory":
        console.print("(a memory:// store is gone with this process: --store a file keeps it)")
        return
    if demo_fallback_url() == url:  # (what a bare `flashfsm ls` reads now: `store_url`)
        console.print(
            "explore (with no default store yet, commands without --store read the demo's;\n"
            "the first line points them at it for good):"
        )
    else:
        console.print("explore (the first line points the commands at the demo's store):")
    console.print(f"  {store_export(url)}", soft_wrap=True)  # pastes as it is
    if display_url(url) != url:
        console.print("  # (a password is never printed: write yours in place of ***)")
    for command, why in commands:
        console.print(f"  # {why}\n  {command}", soft_wrap=True)
    console.print(f"  # all of it in a browser: http://127.0.0.1:{DEFAULT_PORT}/\n  flashfsm ui")
