"""The commands that bring something of their own: demo, simulator, diagram."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from flashfsm.adapters.stores import default_store_url, open_store
from flashfsm.cli.common import StoreOption, attempt_line, console, fail, print_timeline, styled
from flashfsm.fsm.run import replay_run


def diagram_command(
    fmt: Annotated[str, typer.Option("--format", help="mermaid or dot")] = "mermaid",
) -> None:
    """The job state machine, drawn from the transition table the machine is built from."""
    from flashfsm.fsm import diagram

    if fmt not in ("mermaid", "dot"):
        raise fail(f"unknown format {fmt!r} (mermaid, dot)")
    sys.stdout.write((diagram.mermaid() if fmt == "mermaid" else diagram.dot()) + "\n")


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


def demo_command(store: StoreOption = None) -> None:
    """Run a small fleet through `supervise_run` against the bundled simulator, then show
    each run's attempts and each attempt's post-mortem."""
    from flashfsm.demo import run_demo

    url = store or default_store_url()
    results = run_demo(url, say=console.print)
    opened = open_store(url)
    try:
        for result in results:
            run = replay_run(opened.read(result.stream))
            outcome = ("succeeded", "green") if result.ok else (str(result.failure), "red")
            console.print(
                styled(
                    "\n",
                    (result.stream, "bold"),
                    ": ",
                    outcome,
                    f" after {result.attempts} attempt(s)",
                )
            )
            for attempt in run.attempts:
                console.print(f"  {attempt_line(attempt, run)}")
                job_stream = attempt.job_stream or attempt.started.job_stream
                job_events = opened.read(job_stream) if job_stream else []
                if job_events:
                    print_timeline(job_stream, job_events)
    finally:
        opened.close()
    console.print(
        f"\nevent log: {url}\nreplay a job: flashfsm replay <job stream> --store {url}"
        f"\ndraw a run: flashfsm timeline <run stream> --out run.html --store {url}"
    )
