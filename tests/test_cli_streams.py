"""Every kind of stream the library writes is read by every command that reads logs.

Each entry of `STREAM_WRITERS` writes one stream through the public API (`poll_job`, the
asyncio `Supervisor`, `supervise_run` with `RunpodRunAdapters`, `submit_run` with
runpod-flash, `IdleSweeper`) against the
bundled simulator on a manual clock, into one SQLite store; then `ls`, `replay`, `explain`,
`why-not`, `whatif`, `timeline` and `watch` run on each, as text and as JSON. None may
raise, print a traceback or call the stream unreadable; each exits with a documented code
and names the stream's state or verdict.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import (
    Candidate,
    EventStore,
    IdleSweeper,
    JobHandle,
    RunpodRunAdapters,
    poll_job,
    submit_run,
    supervise_run,
)
from flashfsm.adapters.jsonl import stream_file_name
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.cli import EXIT_CODES, EXIT_NO_VERDICT, EXIT_USAGE, app
from flashfsm.cli import common as cli_common
from flashfsm.errors import WatchStopped
from flashfsm.events.models import (
    EndpointReaped,
    IdleCleared,
    IdleSeen,
    RunStarted,
    StatusObserved,
)
from flashfsm.runs import Deployed
from flashfsm.supervisor import JobSpec, Supervisor
from flashfsm.views import StreamKind, stream_kind
from tests.sim_support import sync_client
from tests.test_cli_manners import DOCUMENTED
from tests.test_deploy import sim_factory
from tests.test_submit import scripted
from tests.test_submit import spec as submit_spec

runner = CliRunner()
GPUS = (
    Candidate(gpu_class="RTX4090", price_per_hour=0.69, vram_gb=24),
    Candidate(gpu_class="L40S", price_per_hour=0.99, vram_gb=48),
    Candidate(gpu_class="A100-80GB", price_per_hour=1.89, vram_gb=80),
)
SWEEP_GRACE_S = 600.0


@dataclass(frozen=True)
class Expect:
    """What the commands must say about a stream."""

    state: str  # ls, replay and watch name it: the job's state, the run's, the sweeper's
    exit: int  # replay, explain and watch exit with it
    job_state: str | None  # explain and whatif name it: the (last) job's state
    rule: str | None = None  # the (last) job's verdict rule, when it has one
    drawn: str = ""  # what `timeline` says it drew
    no_job: str | None = None  # why-not and whatif refuse the stream with this (exit 1)


@dataclass(frozen=True)
class LogWriter:
    """One way the library writes a stream, and what the CLI must make of it."""

    name: str
    kind: StreamKind
    write: Callable[[EventStore], str]  # writes its stream into the store; returns its name
    expect: Expect


# --- writers ------------------------------------------------------------------------------


def _poll(store: EventStore, stream: str, scenario: str, **kwargs: Any) -> None:
    with Simulator(speed=0) as sim, sync_client(sim) as client:
        endpoint = sim.add_endpoint(f"flash-{stream}", check_quota=False)
        job = client.run(endpoint, {"scenario": scenario})
        handle = JobHandle(endpoint, f"flash-{stream}", job, submitted_at=sim.clock.now())
        poll_job(
            handle,
            client=client,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
            store=store,
            stream=stream,
            **kwargs,
        )


def write_polled_job(store: EventStore) -> str:
    """`poll_job` to a verdict: a job nobody ever schedules."""
    _poll(store, "job-polled", "no_capacity")
    return "job-polled"


def write_stopped_job(store: EventStore) -> str:
    """`poll_job` asked to stop before its verdict: an open job log."""
    fetches = itertools.count()
    with pytest.raises(WatchStopped):
        _poll(store, "job-stopped", "no_capacity", stop=lambda: next(fetches) >= 6)
    return "job-stopped"


def write_supervised_job(store: EventStore) -> str:
    """The asyncio `Supervisor` to a verdict: a crash-looping worker."""
    with Simulator(speed=0) as sim:
        endpoint = sim.add_endpoint("flash-supervised", check_quota=False)
        job = sim.submit(endpoint, {"scenario": "crash_loop"})

        async def virtual_sleep(seconds: float) -> None:
            sim.clock.advance(seconds)

        async def main() -> None:
            client = sim.async_client()
            try:
                supervisor = Supervisor(
                    store, client, clock=sim.clock.now, sleep=virtual_sleep, jitter=0
                )
                handle = JobHandle(endpoint, "flash-supervised", job)
                await supervisor.run([JobSpec(handle, stream="job-supervised")])
            finally:
                await client.aclose()

        asyncio.run(main())
    return "job-supervised"


class ControlPlaneCrash(BaseException):
    """The process running a run dies (nothing catches it, nothing is cleaned up)."""


def _supervise(
    store: EventStore,
    run_id: str,
    scenarios: tuple[str | None, ...],
    *,
    max_retries: int = 2,
    crash_after_sleeps: int | None = None,
) -> str:
    """`supervise_run` on the simulator; attempt n's job plays `scenarios[n]` (None: its deploy
    fails). With `crash_after_sleeps` the process dies that many waits into a watch."""
    with Simulator(speed=0) as sim, sync_client(sim) as client:

        def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
            number = attempt.started.attempt
            scenario = scenarios[min(number, len(scenarios) - 1)]
            if scenario is None:
                raise RuntimeError(f"no endpoint for attempt {number}")
            name = attempt.started.endpoint_name
            return Deployed(sim.add_endpoint(name, scenario=scenario, check_quota=False), name)

        sleeps = itertools.count()

        def watch_sleep(seconds: float) -> None:
            if crash_after_sleeps is not None and next(sleeps) >= crash_after_sleeps:
                raise ControlPlaneCrash
            sim.clock.sleep(seconds)

        adapters = RunpodRunAdapters(
            client=client,
            deployer=deploy,
            job_input=lambda run, attempt: {"run_id": run_id},
            budget_s=6 * 3600,
            clock=sim.clock.now,
            sleep=watch_sleep,
        )
        supervise_run(
            run_id,
            list(GPUS),
            adapters,
            max_retries=max_retries,
            store=store,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
        )
    return f"run-{run_id}"


def write_walked_run(store: EventStore) -> str:
    """A run whose first deploy fails, whose second job finds no capacity, and whose third
    succeeds."""
    return _supervise(store, "walked", (None, "no_capacity", "success"))


def write_failed_run(store: EventStore) -> str:
    """A run whose job's own code fails: not retried."""
    return _supervise(store, "failed", ("failed",))


def write_undeployed_run(store: EventStore) -> str:
    """A run none of whose deploys succeeds: it never has a job."""
    return _supervise(store, "undeployed", (None,), max_retries=1)


def write_crashed_run(store: EventStore) -> str:
    """A run whose control plane died while it watched its first job."""
    with pytest.raises(ControlPlaneCrash):
        _supervise(store, "crashed", ("no_capacity",), crash_after_sleeps=3)
    return "run-crashed"


def write_sweeper(store: EventStore) -> str:
    """`IdleSweeper` over three sweeps: one endpoint reaped, one timer cleared, one running."""

    def cold(sim: Simulator, name: str) -> str:
        endpoint = sim.add_endpoint(name, check_quota=False)
        sim.configure_endpoint(endpoint, idle=0, ready=0, running=0, initializing=0)
        return endpoint

    with Simulator(speed=0) as sim, sync_client(sim) as client:
        sweeper = IdleSweeper(client, store, stream="sweeper", clock=sim.clock.now)
        cold(sim, "flash-sw-reaped")
        busy = cold(sim, "flash-sw-busy")
        sweeper.sweep(min_idle_s=SWEEP_GRACE_S)  # both idle: two timers start
        sim.configure_endpoint(busy, running=1)
        sim.clock.advance(300)
        sweeper.sweep(min_idle_s=SWEEP_GRACE_S)  # busy again: its timer clears
        sim.clock.advance(400)
        cold(sim, "flash-sw-idle")
        report = sweeper.sweep(min_idle_s=SWEEP_GRACE_S)  # one reaped, a new timer starts
        assert len(report.deleted) == 1
    return "sweeper"


_submitted: dict[int, tuple[str, str]] = {}


def _submit(store: EventStore) -> tuple[str, str]:
    """`submit_run`, once per store: one attempt deployed with runpod-flash against the
    simulator, whose job finds no capacity. Its run stream and its job stream."""
    if id(store) not in _submitted:
        with pytest.MonkeyPatch.context() as patch:
            factory = sim_factory(patch)
            make = next(factory)
            try:
                sim = make()
                submit_run(
                    submit_spec(run_id="submitted"),
                    0,
                    store=store,
                    deployer=scripted(sim, "no_capacity"),
                    clock=sim.clock.now,
                    sleep=sim.clock.sleep,
                    hub_options={"cache_dir": tempfile.mkdtemp(prefix="flashfsm-hub-")},
                )
            finally:
                next(factory, None)  # the factory's own cleanup: stop the simulator
        _submitted[id(store)] = ("run-submitted-s0-a0", "job-submitted-s0-a0")
    return _submitted[id(store)]


def write_submitted_run(store: EventStore) -> str:
    """`submit_run`'s run stream: a run of exactly its one attempt."""
    return _submit(store)[0]


def write_submitted_job(store: EventStore) -> str:
    """`submit_run`'s job stream: the attempt's watch."""
    return _submit(store)[1]


#: Every way the library writes a stream.
STREAM_WRITERS: list[LogWriter] = [
    LogWriter(
        "poll_job",
        "job",
        write_polled_job,
        Expect("NO_CAPACITY", EXIT_CODES["no_capacity"], "NO_CAPACITY", "queue_grace"),
    ),
    LogWriter(
        "poll_job-stopped",
        "job",
        write_stopped_job,
        Expect("QUEUED", EXIT_NO_VERDICT, "QUEUED", drawn="no verdict yet"),
    ),
    LogWriter(
        "supervisor",
        "job",
        write_supervised_job,
        Expect("STALLED", EXIT_CODES["stalled"], "STALLED", "unhealthy_worker"),
    ),
    LogWriter(
        "supervise_run",
        "run",
        write_walked_run,
        Expect("SUCCEEDED", 0, "SUCCEEDED", "completed"),
    ),
    LogWriter(
        "supervise_run-job_failed",
        "run",
        write_failed_run,
        Expect("FAILED", EXIT_CODES["job_failed"], "FAILED", "worker_failed", drawn="job_failed"),
    ),
    LogWriter(
        "supervise_run-no_job",
        "run",
        write_undeployed_run,
        Expect(
            "FAILED",
            EXIT_CODES["poll_error"],
            None,
            drawn="poll_error",
            no_job="has no job stream yet",
        ),
    ),
    LogWriter(
        "supervise_run-crashed",
        "run",
        write_crashed_run,
        Expect("WATCHING", EXIT_NO_VERDICT, "QUEUED", drawn="no verdict yet"),
    ),
    LogWriter(
        "submit_run",
        "run",
        write_submitted_run,
        Expect(
            "FAILED", EXIT_CODES["no_capacity"], "NO_CAPACITY", "queue_grace", drawn="no_capacity"
        ),
    ),
    LogWriter(
        "submit_run-job",
        "job",
        write_submitted_job,
        Expect("NO_CAPACITY", EXIT_CODES["no_capacity"], "NO_CAPACITY", "queue_grace"),
    ),
    LogWriter(
        "IdleSweeper",
        "sweeper",
        write_sweeper,
        Expect(
            "1 reaped",
            0,
            None,
            drawn="1 reaped",
            no_job="is a sweeper stream: job rules do not apply",
        ),
    ),
]


@dataclass(frozen=True)
class Written:
    url: str
    streams: dict[str, str]  # writer name -> its stream
    last_at: dict[str, float]  # writer name -> its stream's last event time


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Written:
    url = f"sqlite:///{tmp_path_factory.mktemp('streams')}/events.db"
    store = open_store(url)
    try:
        streams = {w.name: w.write(store) for w in STREAM_WRITERS}
        last_at = {name: store.read(stream)[-1].at for name, stream in streams.items()}
    finally:
        store.close()
    return Written(url, streams, last_at)


@pytest.fixture(scope="module", autouse=True)
def wide_console():
    """Tables wide enough that no cell is folded, so a state reads as one word."""
    console = cli_common.console
    width = console.set_width
    console.width = 250
    yield
    console.width = width


# --- the matrix ---------------------------------------------------------------------------


def _last(result: Any) -> Any:
    """The JSON a command printed (the last line's, for watch's JSON lines)."""
    text = result.stdout.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.splitlines()[-1])


def check_ls(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    assert result.exit_code == 0
    if as_json:
        [row] = [r for r in _last(result)["streams"] if r["stream"] == stream]
        assert (row["kind"], row["state"]) == (w.kind, w.expect.state)
        assert "error" not in row
    else:
        [line] = [line for line in result.output.splitlines() if line.split()[:1] == [stream]]
        assert f" {w.kind} " in line and w.expect.state in line


def check_replay(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    assert result.exit_code == w.expect.exit
    if as_json:
        out = _last(result)
        assert out["stream"] == stream and out["state"].startswith(w.expect.state)
        assert out.get("kind", "job") == w.kind
    else:
        assert w.expect.state in result.output


def check_explain(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    assert result.exit_code == w.expect.exit
    said = w.expect.job_state or w.expect.state
    if as_json:
        out = _last(result)
        assert out["state"].startswith(said)
        if w.expect.job_state is not None:  # the job's explanation
            assert out["rule"] == w.expect.rule
        else:  # nothing a job rule decided: the run's or the sweeper's own account
            assert out["kind"] == w.kind
    else:
        assert said in result.output
        if w.expect.rule:
            assert f"by rule {w.expect.rule}" in result.output


def _refused(w: LogWriter, result: Any) -> bool:
    if w.expect.no_job is None:
        return False
    assert result.exit_code == EXIT_USAGE
    assert w.expect.no_job in result.output and len(result.output.strip().splitlines()) == 1
    return True


def check_why_not(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    if _refused(w, result):
        return
    assert result.exit_code == 0
    fired = w.expect.rule is not None
    if as_json:
        out = _last(result)
        assert out["rule"] == (w.expect.rule or "queue_grace") and out["fired"] is fired
    else:
        assert ("did fire" if fired else "by the end of the log") in result.output


def check_whatif(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    if _refused(w, result):
        return
    assert result.exit_code == 0
    decided = w.expect.rule is not None
    if as_json:
        assert _last(result)["outcome"] == ("same" if decided else "observations_end")
    elif decided:
        assert f"the same verdict, {w.expect.job_state}" in result.output
    else:
        assert "the recorded observations end" in result.output


def check_timeline(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    assert result.exit_code == 0
    drawn = w.expect.drawn or w.expect.state
    if not as_json:
        assert "lane(s), " in result.output and drawn in result.output
        return
    out = _last(result)
    assert out["lanes"]
    if w.kind == "sweeper":  # no verdict of its own: a lane per endpoint, the reaped marked
        reaped = [lane["verdict"] for lane in out["lanes"]].count("REAPED")
        assert f"{reaped} reaped" == w.expect.state and out["verdict"] is None
    else:
        assert (out["verdict"] or "no verdict yet") == drawn


def check_watch(w: LogWriter, stream: str, result: Any, as_json: bool) -> None:
    assert result.exit_code == w.expect.exit
    if as_json:
        out = _last(result)
        assert out["state"].startswith(w.expect.state) and out.get("kind", "job") == w.kind
    else:
        assert w.expect.state in result.output


#: command -> (its arguments after the stream, its check)
COMMANDS: dict[str, tuple[Callable[[LogWriter, Written], list[str]], Callable[..., None]]] = {
    "ls": (lambda w, _: [], check_ls),
    "replay": (lambda w, _: ["--verify"], check_replay),
    "explain": (lambda w, _: [], check_explain),
    "why-not": (lambda w, _: [w.expect.rule or "queue_grace"], check_why_not),
    "whatif": (lambda w, _: [], check_whatif),
    "timeline": (lambda w, _: [], check_timeline),
    "watch": (lambda w, ws: ["--now", str(ws.last_at[w.name] + 60)], check_watch),
}


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("writer", STREAM_WRITERS, ids=lambda w: w.name)
def test_every_command_reads_every_stream_the_library_writes(
    written, writer, command, as_json, tmp_path
):
    stream = written.streams[writer.name]
    extra, check = COMMANDS[command]
    args = [command] if command == "ls" else [command, stream, *extra(writer, written)]
    if command == "timeline":
        args += ["--out", str(tmp_path / "picture.svg")]
    args += ["--store", written.url] + (["--json"] if as_json else [])
    result = runner.invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    # a worker's traceback recorded in a log is shown as data, never at the start of a line
    assert not re.search(r"^Traceback \(most recent call last\)", result.output, re.M)
    assert "UNREADABLE" not in result.output
    assert result.exit_code in DOCUMENTED, result.output
    check(writer, stream, result, as_json)
    if command == "timeline" and result.exit_code == 0:
        ET.parse(tmp_path / "picture.svg")  # a well-formed picture


def test_each_writer_writes_the_kind_it_is_listed_as(written):
    store = open_store(written.url)
    try:
        kinds = {w.name: stream_kind(store.read(written.streams[w.name])) for w in STREAM_WRITERS}
    finally:
        store.close()
    assert kinds == {w.name: w.kind for w in STREAM_WRITERS}


def test_stream_kind_reads_the_first_event_and_every_event():
    seen = IdleSeen(stream="s", seq=0, id="a", at=1.0, endpoint_id="e", since=1.0)
    status = StatusObserved(stream="s", seq=1, id="b", at=2.0, status="IN_QUEUE")
    started = RunStarted(stream="r", seq=0, id="c", at=1.0, run_id="r", candidates=GPUS)
    assert stream_kind([seen]) == "sweeper"
    assert stream_kind([seen, status]) == "job"  # not only sweeper events: a job's to replay
    assert stream_kind([started]) == "run"
    assert stream_kind([status]) == "job" and stream_kind([]) == "job"


# --- what each kind says ------------------------------------------------------------------


def _json(args: list[str], written: Written) -> tuple[int, Any]:
    result = runner.invoke(app, [*args, "--store", written.url, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, _last(result)


def test_replay_of_a_run_shows_each_attempt_and_its_last_job(written):
    run = written.streams["supervise_run"]
    code, out = _json(["replay", run, "--verify"], written)
    assert code == 0
    assert (out["kind"], out["state"], out["phase"]) == ("run", "SUCCEEDED", "SUCCEEDED")
    attempts = out["attempts"]
    assert [a["outcome"] for a in attempts] == [
        "poll_error (no job)",
        "no_capacity (queue_grace)",
        "ok",
    ]
    assert attempts[0]["deploy_error"].startswith("RuntimeError: no endpoint for attempt 0")
    assert attempts[0]["job_stream"] is None and all(a["job_stream"] for a in attempts[1:])
    assert [a["gpu_class"] for a in attempts] == ["RTX4090", "L40S", "A100-80GB"]
    assert out["result"]["ok"] is True and out["result"]["attempts"] == 3
    job = out["job"]
    assert job["stream"] == attempts[-1]["job_stream"]
    assert job["verdict"]["rule"] == "completed" and job["timeline"][0]["kind"] == "JobSubmitted"
    verify = out["verify"]
    assert verify["ok"] is True
    assert [v["stream"] for v in verify["streams"]] == [a["job_stream"] for a in attempts[1:]]
    text = runner.invoke(app, ["replay", run, "--store", written.url]).output
    assert f"run {run}: SUCCEEDED, 3 attempt(s)" in text
    assert "attempt 0 on RTX4090: poll_error (no job)" in text
    assert f"its last attempt's job stream is {attempts[-1]['job_stream']}" in text


def test_a_crashed_run_is_watching_its_open_job(written):
    run = written.streams["supervise_run-crashed"]
    now = written.last_at["supervise_run-crashed"] + 60
    code, out = _json(["watch", run, "--now", str(now)], written)
    assert code == EXIT_NO_VERDICT
    assert (out["state"], out["attempts"], out["result"]) == ("WATCHING", 1, None)
    assert out["job"]["state"] == "QUEUED" and out["job"]["next_timer"]["rule"] == "queue_grace"
    code, out = _json(["replay", run], written)
    assert code == EXIT_NO_VERDICT
    assert out["attempts"][0]["outcome"] == "no outcome yet (WATCHING)"
    assert out["job"]["verdict"] is None


def test_a_run_without_a_job_is_explained_as_the_run(written, tmp_path):
    run = written.streams["supervise_run-no_job"]
    code, out = _json(["explain", run], written)
    assert code == EXIT_CODES["poll_error"]
    assert out["state"] == "FAILED (poll_error)" and out["job_stream"] is None
    assert [a["outcome"] for a in out["attempts"]] == ["poll_error (no job)"] * 2
    lanes = _json(["timeline", run, "--out", str(tmp_path / "run.svg")], written)[1]["lanes"]
    assert [[m["kind"] for m in lane["marks"]] for lane in lanes] == [["error", "verdict"]] * 2


def test_the_sweeper_stream_reads_as_its_timers(written, tmp_path):
    stream = written.streams["IdleSweeper"]
    code, out = _json(["replay", stream, "--verify"], written)
    assert code == 0 and out["verify"]["ok"] is True
    assert [row["kind"] for row in out["timeline"]] == [
        IdleSeen.__name__,
        IdleSeen.__name__,
        IdleCleared.__name__,
        IdleSeen.__name__,
        EndpointReaped.__name__,
    ]
    [reaped] = out["reaped"]
    assert reaped["endpoint_name"] == "flash-sw-reaped" and reaped["idle_s"] == pytest.approx(700)
    [cleared] = out["cleared"]
    assert cleared["endpoint_name"] == "flash-sw-busy" and cleared["reason"] == "busy"
    assert cleared["idle_s"] == pytest.approx(300)
    [timer] = out["timers"]
    assert timer["endpoint_name"] == "flash-sw-idle" and timer["end"] is None
    text = runner.invoke(app, ["explain", stream, "--store", written.url]).output
    assert "reaped flash-sw-reaped (" in text and "after 11 min 40 s idle" in text
    assert "cleared flash-sw-busy (" in text and "(busy) after 5 min idle" in text
    now = written.last_at["IdleSweeper"] + 90
    code, out = _json(["watch", stream, "--now", str(now)], written)
    assert code == 0 and out["timers"][0]["idle_s"] == pytest.approx(90)
    code, out = _json(["timeline", stream, "--out", str(tmp_path / "s.html")], written)
    lanes = {lane["title"]: lane for lane in out["lanes"]}
    assert set(lanes) == {"flash-sw-reaped", "flash-sw-busy", "flash-sw-idle"}
    assert lanes["flash-sw-reaped"]["verdict"] == "REAPED"
    assert {s["state"] for lane in lanes.values() for s in lane["spans"]} == {"IDLE"}
    assert lanes["flash-sw-busy"]["spans"][0]["end_s"] == pytest.approx(300)


@pytest.mark.parametrize("writer", STREAM_WRITERS, ids=lambda w: w.name)
def test_an_exported_stream_reads_as_it_did_in_the_store(written, writer, tmp_path):
    """SOURCE may be a .jsonl file: a run's job streams are read from the files beside it."""
    copy_streams(written.url, f"jsonl:///{tmp_path}")  # every stream, so a run finds its jobs
    stream = written.streams[writer.name]
    path = tmp_path / stream_file_name(stream)
    for command in ("replay", "explain"):
        from_store = runner.invoke(app, [command, stream, "--store", written.url, "--json"])
        from_file = runner.invoke(app, [command, str(path), "--json"])
        assert from_file.exit_code == from_store.exit_code == writer.expect.exit
        got, want = _last(from_file), _last(from_store)
        # a job's own log is named by its file; a run's job stream by its stream name
        assert got.pop("stream") in (path.name, want.pop("stream"))
        assert got == want
