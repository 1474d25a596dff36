"""The demo: a small fleet of runs through `supervise_run`, against the bundled simulator.

It starts the RunPod + Hugging Face simulator on loopback with a manual clock (each wait
of a watch jumps simulated time), and runs six training runs end to end into the given
store — each with its GPU walk, deploys (which take simulated time, `DEPLOY_S`),
submissions, watches (with the Hub heartbeat and failure readers), retries and cleanup
recorded as events. The simulator plays a scripted life for each attempt's job.

Names. Each demo draws a tag of 6 random hex characters (`new_tag`), so demos started
together never share a stream: run `demo-<tag>-<name>`, the i-th of `DEMO_RUNS` (its seed
i), has the stream `run-demo-<tag>-<name>-s<i>` and its attempt n the job stream
`job-demo-<tag>-<name>-s<i>-a<n>` (e.g. `run-demo-3f9a1c-walk-s1`,
`job-demo-3f9a1c-walk-s1-a0`).

Where. By default the demo writes to its own SQLite file, `demo.db`, beside the default
store when that is a SQLite file (`$FLASHFSM_STORE`, else the user's `events.db`), else in
the user's data directory (`demo_store_url`); its picture, `demo-<tag>.html`, goes beside
the store (`picture_path`). `reset_demo_store` deletes a demo store, and refuses any store
that holds a stream the demo did not write. While no default store exists (and
`$FLASHFSM_STORE` names none), the CLI's commands that only read, given no `--store`, read
the demo's store (`flashfsm.cli.common.store_url`), so a bare `flashfsm ls` or `flashfsm ui`
after a first demo shows its runs; the commands that write keep the default store.

Quiet. The Hub readers download into a temporary cache, with huggingface_hub's progress
bars off for the duration of the demo (and back on after, if they were on).

Ctrl-C. An interrupted run is cancelled in the log before the demo stops
(`supervise_run` does it): a `CancelRequested`, its job cancelled on the simulator and
watched to its answer (the job stream concludes: CANCELLED, by `platform_termination`), its
endpoints deleted, and a `RunConcluded` with the `cancelled` verdict; then
`DemoInterrupted` (a `KeyboardInterrupt`) is raised with what was done. No stream is left
open, wherever the Ctrl-C lands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import secrets
import shlex
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flashfsm.adapters.flash_deploy import DEFAULT_IDLE_TIMEOUT_S
from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
)
from flashfsm.adapters.runpod import RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.stores import default_store_url, open_store
from flashfsm.adapters.urls import display_url, path_url, url_path
from flashfsm.events.models import Candidate, DeployAttempted
from flashfsm.events.store import EventStore
from flashfsm.fsm.run import Attempt, RunState, replay_run
from flashfsm.naming import endpoint_name, job_stream, run_stream
from flashfsm.runs import (
    Deployed,
    Recorder,
    RunpodRunAdapters,
    RunResult,
    request_cancel,
    supervise_run,
)
from flashfsm.shell import JobHandle, PollResult, poll_job, resolve_store

#: (scenario, what it shows)
DEMO_JOBS: tuple[tuple[str, str], ...] = (
    ("success", "a clean run: cold start, training heartbeats, metrics"),
    ("no_capacity", "no worker ever comes: the queue grace ends it (next GPU class)"),
    ("crash_loop", "the worker crash-loops: unhealthy grace, retry on a fresh endpoint"),
    ("training_stall", "heartbeats stop mid-training: the stall window ends it"),
    ("failed", "the training code raises: fails fast, not retried"),
)
HF_REPO = "flashfsm-demo/runs"
PHASE = "sft"
GPUS = {
    "RTX4090": Candidate(gpu_class="RTX4090", price_per_hour=0.69, vram_gb=24),
    "L40S": Candidate(gpu_class="L40S", price_per_hour=0.99, vram_gb=48),
    "A100-80GB": Candidate(gpu_class="A100-80GB", price_per_hour=1.89, vram_gb=80),
}
#: Simulated seconds a deploy of an endpoint on each GPU class takes.
DEPLOY_S = {"RTX4090": 35.0, "L40S": 45.0, "A100-80GB": 60.0}
DEMO_DB = "demo.db"
#: What the demo's streams look like (run and job streams of a `demo-<hex tag>-` run).
DEMO_STREAM = re.compile(r"^(run|job)-demo-[0-9a-f]+-")
DEMO_RUN_STREAM = re.compile(r"^run-demo-[0-9a-f]+-(?P<name>.+)-s\d+$")


@dataclass(frozen=True)
class DemoRun:
    """One run of the demo: what it shows, its GPUs, and each attempt's scripted job."""

    name: str
    shows: str
    gpus: tuple[str, ...]
    scenarios: tuple[str, ...]  # the job life of attempt 0, 1, …


DEMO_RUNS: tuple[DemoRun, ...] = (
    DemoRun("clean", "a clean success", ("RTX4090",), ("success",)),
    DemoRun(
        "walk",
        "no capacity on the cheapest GPU: the walk moves to the next class, which succeeds",
        ("RTX4090", "L40S"),
        ("no_capacity", "success"),
    ),
    DemoRun(
        "crashloop",
        "a crash-looping worker: retried on a fresh endpoint",
        ("L40S",),
        ("crash_loop", "success"),
    ),
    DemoRun(
        "stall",
        "the trainer stalls mid-training: retried",
        ("A100-80GB", "L40S"),
        ("training_stall", "success"),
    ),
    DemoRun(
        "codeerror", "the training code raises: fails fast, not retried", ("L40S",), ("failed",)
    ),
    DemoRun(
        "slowpull",
        "a 20 GB image pull outlasts the queue grace: kept on its class",
        ("RTX4090", "L40S"),
        ("slow_image_pull", "success"),
    ),
)


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the demo; the run it was in was concluded as cancelled first.

    `results` are the runs finished before, `cancelled` the interrupted run's result (its
    `cancelled` verdict, or its own when it had just concluded), or None when it had not
    started.
    """

    def __init__(self, results: list[RunResult], cancelled: RunResult | None):
        super().__init__("the demo was interrupted")
        self.results = results
        self.cancelled = cancelled


# --- names and places -------------------------------------------------------------------------


def new_tag() -> str:
    """A fresh demo tag: 6 random lowercase hex characters."""
    return secrets.token_hex(3)


def check_tag(tag: str) -> str:
    """`tag` when it is 1 to 16 lowercase hex characters, else `ValueError`."""
    if not isinstance(tag, str) or not re.fullmatch(r"[0-9a-f]{1,16}", tag):
        raise ValueError(f"a demo tag is 1 to 16 lowercase hex characters, got {tag!r}")
    return tag


def demo_run_id(tag: str, name: str) -> str:
    """The run id of one demo run: `demo-<tag>-<name>`."""
    return f"demo-{tag}-{name}"


def demo_run_name(stream: str) -> str:
    """The demo run a run stream is of (`run-demo-3f9a1c-walk-s1` → `walk`); the stream
    itself when it is not a demo run's."""
    m = DEMO_RUN_STREAM.match(stream)
    return m.group("name") if m else stream


def is_demo_stream(stream: str) -> bool:
    """Whether a stream is one the demo writes (`run-demo-<tag>-…`, `job-demo-<tag>-…`)."""
    return DEMO_STREAM.match(stream) is not None


def _user_data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("flashfsm", appauthor=False))


def demo_store_url() -> str:
    """The demo's own store: `demo.db` beside the default store when that is a SQLite file
    (`$FLASHFSM_STORE`, else the user's `events.db`), else in the user's data directory."""
    default = default_store_url()
    if urlsplit(default).scheme == "sqlite":
        try:
            return path_url("sqlite", url_path(default).parent / DEMO_DB)
        except ValueError:
            pass  # not a path we can stand beside: the user data directory then
    return path_url("sqlite", _user_data_dir() / DEMO_DB)


def _store_dir(store_url: str) -> Path:
    """The directory a store's neighbours go in: a SQLite file's, a JSONL directory's
    parent, else the demo's default directory."""
    scheme = urlsplit(store_url).scheme
    if scheme in ("sqlite", "jsonl"):
        with contextlib.suppress(ValueError):
            return url_path(store_url).absolute().parent
    return url_path(demo_store_url()).parent


def picture_path(store_url: str, tag: str) -> Path:
    """Where a demo's picture goes: `demo-<tag>.html` beside its store."""
    return _store_dir(store_url) / f"demo-{tag}.html"


def reset_demo_store(store_url: str) -> list[Path]:
    """Delete a demo's SQLite store (and its `-wal`/`-shm` files and the demo pictures
    beside it); the paths removed.

    Refuses (`ValueError`) a store that is not a SQLite file, or whose file holds any
    stream the demo did not write: `--reset` never deletes someone's real log.
    """
    if urlsplit(store_url).scheme == "memory":
        return []  # a new, empty one each time anyway
    if urlsplit(store_url).scheme != "sqlite":
        raise ValueError(
            f"--reset deletes a SQLite demo store only; {display_url(store_url)} is not one"
        )
    path = url_path(store_url).absolute()
    if path.exists():
        from flashfsm.adapters.sqlite import SqliteStore

        try:
            store = SqliteStore(path)
        except Exception as exc:
            raise ValueError(f"--reset: cannot read {path}: {exc}") from None
        try:
            foreign = [s for s in store.streams() if not is_demo_stream(s)]
        finally:
            store.close()
        if foreign:
            raise ValueError(
                f"--reset refused: {path} holds {len(foreign)} stream(s) the demo did not "
                f"write (e.g. {foreign[0]}); it is not a demo store"
            )
    removed = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = path.with_name(path.name + suffix)
        if candidate.exists():
            candidate.unlink()
            removed.append(candidate)
    for picture in sorted(path.parent.glob("demo-*.html")):
        if re.fullmatch(r"demo-[0-9a-f]+\.html", picture.name):
            picture.unlink()
            removed.append(picture)
    return removed


# --- quiet Hub downloads ----------------------------------------------------------------------


@contextlib.contextmanager
def hub_progress_bars_off() -> Iterator[None]:
    """huggingface_hub's download progress bars off for the block, then as they were.

    huggingface_hub keeps one process-wide switch, so other downloads of the process are
    quiet too meanwhile. `HF_HUB_DISABLE_PROGRESS_BARS=0` in the environment (bars forced
    on) is respected.
    """
    try:
        from huggingface_hub import constants
        from huggingface_hub.utils import (
            are_progress_bars_disabled,
            disable_progress_bars,
            enable_progress_bars,
        )
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        yield
        return
    # The environment variable (either way) has the last word over the switch.
    if getattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", None) is not None:
        yield
        return
    if are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


# --- the runs ---------------------------------------------------------------------------------


def run_demo(
    store: EventStore | str,
    *,
    say: Callable[[str], Any] = print,
    runs: tuple[DemoRun, ...] = DEMO_RUNS,
    tag: str | None = None,
    picture: Path | None = None,
) -> list[RunResult]:
    """Supervise every demo run into `store` (a store or its URL); return their results.

    `tag` names the runs (`demo-<tag>-<name>`; default: a fresh random one). With
    `picture`, the runs are drawn there as one HTML timeline (`write_picture`). Ctrl-C
    cancels the run in progress in the log, then raises `DemoInterrupted`.
    """
    tag = new_tag() if tag is None else check_tag(tag)
    opened = resolve_store(store)
    results: list[RunResult] = []

    def draw(extra: RunResult | None = None) -> None:
        if picture is not None:
            streams = [r.stream for r in results] + ([extra.stream] if extra else [])
            write_picture(opened, streams, picture, title=f"flashfsm demo {tag}")

    try:
        with _simulated() as (sim, client, cache):
            for seed, demo in enumerate(runs):
                run = _DemoRunner(sim, client, demo, tag, seed, cache, opened)
                try:
                    say(f"{demo.name}: {demo.shows}")
                    result = run.supervise()
                    say(f"  → {_outcome(result)} after {result.attempts} attempt(s)")
                except KeyboardInterrupt:
                    cancelled = run.wind_down(say)
                    draw(cancelled)
                    raise DemoInterrupted(results, cancelled) from None
                results.append(result)
        draw()
    finally:
        if isinstance(store, str):
            opened.close()
    return results


@contextlib.contextmanager
def _simulated() -> Iterator[tuple[Simulator, RunpodClient, str]]:
    """A simulator at full speed, a RunPod client on its first account, and a scratch
    heartbeat cache: what every demo runs against (all gone on exit)."""
    with (
        hub_progress_bars_off(),
        tempfile.TemporaryDirectory(prefix="flashfsm-demo-hub-") as cache,
        Simulator(speed=0) as sim,
        sim.client() as client,
    ):
        yield sim, client, cache


def _outcome(result: RunResult) -> str:
    return "succeeded" if result.ok else str(result.failure)


@dataclass
class _DemoRunner:
    """One demo run: its adapters over the simulator, and its supervision."""

    sim: Simulator
    client: RunpodClient
    demo: DemoRun
    tag: str
    seed: int
    cache: str
    store: EventStore

    @property
    def run_id(self) -> str:
        return demo_run_id(self.tag, self.demo.name)

    @property
    def stream(self) -> str:
        """`run-demo-<tag>-<name>-s<i>`, the seed naming the run's stream as its jobs'."""
        return run_stream(self.run_id, self.seed)

    def supervise(self) -> RunResult:
        """`supervise_run` to the run's result (resuming it when its stream holds one)."""
        return supervise_run(
            self.run_id,
            [GPUS[g] for g in self.demo.gpus],
            self.adapters(),
            max_retries=2,
            phase=PHASE,
            seed=self.seed,
            store=self.store,
            stream=self.stream,
            clock=self.sim.clock.now,
            sleep=self.sim.clock.sleep,
            capacity_memory=False,  # each attempt's job life is scripted: nothing to learn
        )

    def wind_down(self, say: Callable[[str], Any]) -> RunResult | None:
        """After Ctrl-C: cancel the run in the log and let the run machine clean up and
        conclude it (`cancelled`); its result, or None when it had not started."""
        stream = self.stream
        events = self.store.read(stream)
        if not events:
            return None
        state = replay_run(events)
        if state.result is None:
            request_cancel(
                self.store, stream, by="flashfsm demo", reason="(Ctrl-C)", clock=self.sim.clock.now
            )
        result = self.supervise()
        say(f"  → {_outcome(result)} after {result.attempts} attempt(s) (Ctrl-C)")
        return result

    def adapters(self) -> RunpodRunAdapters:
        """The run's I/O: deploys on the simulator, the REST client, the Hub readers."""
        sim, demo, run_id, seed = self.sim, self.demo, self.run_id, self.seed

        def deploy(run: RunState, attempt: Attempt, record: Recorder) -> Deployed:
            started = attempt.started
            scenario = demo.scenarios[min(started.attempt, len(demo.scenarios) - 1)]
            name = started.endpoint_name
            record(DeployAttempted, attempt=started.attempt, account=0, endpoint_name=name)
            sim.clock.advance(DEPLOY_S.get(started.gpu_class, 40.0))  # the deploy's own time
            endpoint_id = sim.add_endpoint(
                name, scenario=scenario, hf_repo=HF_REPO, idleTimeout=DEFAULT_IDLE_TIMEOUT_S
            )  # the idle timeout a real deploy sets, recorded as it would be
            return Deployed(endpoint_id, name, idle_timeout_s=DEFAULT_IDLE_TIMEOUT_S)

        def job_input(run: RunState, attempt: Attempt) -> dict[str, Any]:
            return {"hf_repo": HF_REPO, "phase": PHASE, "run_id": run_id, "seed": seed}

        def readers(run: RunState, attempt: Attempt) -> tuple[Any, Any]:
            prefix = heartbeat_prefix(PHASE, run_id, seed)
            hub = {"clock": sim.clock.now, "endpoint": sim.url, "cache_dir": self.cache}
            return (
                make_hf_heartbeat_reader(HF_REPO, prefix, **hub),
                make_hf_failure_detail_reader(HF_REPO, prefix, PHASE, **hub),
            )

        return RunpodRunAdapters(
            self.client,
            deploy,
            job_input,
            readers,
            budget_s=6 * 3600,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
        )


# --- the picture ------------------------------------------------------------------------------


def write_picture(
    store: EventStore, streams: Sequence[str], path: Path, *, title: str = "flashfsm demo"
) -> Path:
    """Draw runs as one HTML timeline at `path`: each run's attempts as lanes, every run
    from its own start (the timeline renderer's own `picture` and `html`)."""
    from flashfsm import render

    lanes: list[render.Lane] = []
    origin = None
    verdicts = []
    for stream in streams:
        pic = render.picture(store.read(stream), store.read)
        name = demo_run_name(stream)
        origin = pic.origin if origin is None else origin
        verdicts.append(f"{name} {pic.verdict or 'no verdict'}")
        lanes += [
            dataclasses.replace(lane, key=f"{name}-{lane.key}", title=f"{name} · {lane.title}")
            for lane in pic.lanes
        ]
    combined = render.Picture(
        title,
        f"{len(streams)} run(s), each from its own start: " + ", ".join(verdicts),
        origin or 0.0,
        tuple(lanes),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(render.html(combined), encoding="utf-8")
    partial.replace(path)
    return path


def explore_commands(store: EventStore, results: Sequence[RunResult]) -> list[tuple[str, str]]:
    """(command, what it shows) pairs that explore a demo's streams by their real names:
    `ls`, `explain` of the first attempt that failed, `timeline` of the first run that
    took several attempts, `replay` of the last run. They name no store, so each fits a
    line: run them with `FLASHFSM_STORE` set to the demo's (`store_export`), or as they are
    while no default store exists (they read the demo's then)."""
    commands = [("flashfsm ls", "every stream, its state and its verdict")]
    failed = next(
        (
            (a.job_stream, a.ended.failure)
            for r in results
            for a in replay_run(store.read(r.stream)).attempts
            if a.job_stream and a.ended is not None and not a.ended.ok
        ),
        None,
    )
    if failed is not None:
        job, failure = failed
        commands.append((f"flashfsm explain {job}", f"why it ended {failure}"))
    walked = next((r for r in results if r.attempts > 1), None)
    if walked is not None:
        out = f"{demo_run_name(walked.stream)}.html"
        commands.append((f"flashfsm timeline {walked.stream} --out {out}", "its attempts as lanes"))
    if results:
        commands.append((f"flashfsm replay {results[-1].stream}", "the run, step by step"))
    return commands


def store_export(store_url: str) -> str:
    """The shell line that points the CLI's commands at the demo's store (a password in its
    URL shown as `***`: never printed)."""
    return f"export FLASHFSM_STORE={shlex.quote(display_url(store_url))}"


# --- job by job -------------------------------------------------------------------------------


def watch_scenarios(
    store_url: str,
    *,
    say: Callable[[str], Any] = print,
    jobs: tuple[tuple[str, str], ...] = DEMO_JOBS,
    tag: str | None = None,
) -> list[str]:
    """Watch one simulated job per scenario with `poll_job` into `store_url`; return the streams
    (`job-demo-<tag>-<scenario>`).

    The job-level counterpart of `run_demo` (no run machine): handy for making logs.
    """
    run_id = f"demo-{new_tag() if tag is None else check_tag(tag)}"
    streams: list[str] = []
    store = open_store(store_url)
    try:
        with _simulated() as (sim, client, cache):
            for seed, (scenario, what) in enumerate(jobs):
                name = endpoint_name(run_id, scenario, seed)
                endpoint_id = sim.add_endpoint(name, hf_repo=HF_REPO)
                job_input = {
                    "scenario": scenario,
                    "hf_repo": HF_REPO,
                    "phase": PHASE,
                    "run_id": run_id,
                    "seed": seed,
                }
                job_id = client.run(endpoint_id, job_input, ttl_s=7 * 24 * 3600)
                handle = JobHandle(endpoint_id, name, job_id, submitted_at=sim.clock.now())
                prefix = heartbeat_prefix(PHASE, run_id, seed)
                hub = {"clock": sim.clock.now, "endpoint": sim.url, "cache_dir": cache}
                stream = job_stream(f"{run_id}-{scenario}")
                say(f"{scenario}: {what}")
                result: PollResult = poll_job(
                    handle,
                    heartbeat_reader=make_hf_heartbeat_reader(HF_REPO, prefix, **hub),
                    failure_detail_reader=make_hf_failure_detail_reader(
                        HF_REPO, prefix, PHASE, **hub
                    ),
                    client=client,
                    clock=sim.clock.now,
                    sleep=sim.clock.sleep,
                    store=store,
                    stream=stream,
                )
                outcome = "ok" if result.ok else f"{result.failure} ({result.rule})"
                say(f"  → {outcome}")
                streams.append(stream)
    finally:
        store.close()
    return streams
