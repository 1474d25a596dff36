"""The fleet's intake carries the whole watch, and refuses bad input before anything is written.

A job handed over with the Hub location of its worker's heartbeat (`hub`) is watched by a
replica with the same Hub readers `poll_job` is given, so a retriable failure ends
PREEMPTED as it does there, not FAILED; one handed over without it is recorded so, and
`flashfsm ls` and `flashfsm explain` say "no heartbeat reader". Every hostile intake
(`flashfsm runs add FILE`, `hand_off_job`) and every out-of-range store URL option is one
line on stderr, exit 1, and the store as it was: same streams, same bytes, and no file made
at a fresh path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import JobHandle, poll_job, replay
from flashfsm.adapters.runpod import RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.cli import app
from flashfsm.cli.common import EXIT_USAGE
from flashfsm.events.codec import decode, encode
from flashfsm.events.models import NAME_CAP, HubLocation, JobSubmitted, WatchStarted
from flashfsm.fleet import (
    MAX_INTAKE_DEPTH,
    Fleet,
    hand_off_job,
    job_intake,
    load_intake,
)
from flashfsm.naming import STREAM_CAP
from tests.sim_support import async_client

HF_REPO = "team/runs"
HUB = {"hf_repo": HF_REPO, "phase": "train", "run_id": "run1", "seed": 3}
#: The simulator's worker writes its heartbeat where the job's input says (`job_place`).
JOB_INPUT = {"phase": "train", "run_id": "run1", "seed": 3}


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulator]:
    """A simulator on a manual clock, the Hub readers pointed at it (`HF_ENDPOINT`)."""
    with Simulator(speed=0) as simulator:
        for name, value in simulator.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield simulator
    import huggingface_hub

    huggingface_hub.close_session()  # (its pooled connections point at a stopped server)


def _submit(sim: Simulator, scenario: str) -> JobHandle:
    endpoint = sim.add_endpoint(f"flash-{scenario}", scenario=scenario, hf_repo=HF_REPO)
    job = sim.submit(endpoint, dict(JOB_INPUT))
    return JobHandle(endpoint, f"flash-{scenario}", job, submitted_at=sim.clock.now())


def _run_fleet(store: SqliteStore, sim: Simulator, **options: Any) -> Fleet:
    async def main() -> Fleet:
        async with async_client(sim) as client:
            fleet = Fleet(
                store,
                client,
                owner="r1",
                lease_s=3,
                tick_s=0.2,
                clock=sim.clock.now,
                sleep=sim.clock.async_sleep,
                **options,
            )
            idle = lambda: not store.open_streams() or bool(fleet.stats.failed_streams)  # noqa: E731
            await asyncio.wait_for(fleet.run(until=idle), 120)
            return fleet

    return asyncio.run(main())


def _runs_add(tmp_path: Path, url: str, document: Any, name: str = "job.json") -> Any:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return CliRunner().invoke(app, ["runs", "add", str(path), "--store", url])


# --- (a) the hand-off carries the reader location --------------------------------------


def test_a_retriable_failure_handed_over_with_its_hub_location_ends_as_poll_job_ends_it(
    sim: Simulator, tmp_path: Path
):
    # poll_job, given the Hub readers: the reference
    handle = _submit(sim, "failed_retriable")
    from flashfsm.adapters.hub import hub_readers

    heartbeat, failure_detail = hub_readers(HubLocation(**HUB))
    with RunpodClient(
        sim.accounts[0].key,
        endpoint_base_url=f"{sim.url}/v2",
        api_base_url=sim.url,
        sleep=sim.clock.sleep,
    ) as client:
        alone = poll_job(
            handle,
            heartbeat_reader=heartbeat,
            failure_detail_reader=failure_detail,
            client=client,
            clock=sim.clock,
            sleep=sim.clock.sleep,
        )
    assert (alone.state, alone.failure, alone.rule) == (
        "PREEMPTED",
        "job_preempted",
        "worker_failed",
    )

    # the same job's life handed over with `runs add`, the location in its JSON
    handed = _submit(sim, "failed_retriable")
    url = f"sqlite:///{tmp_path}/fleet.db"
    document = {**handed.to_dict(), "hub": HUB, "interval_s": 20.0}
    added = _runs_add(tmp_path, url, document)
    assert added.exit_code == 0, added.output
    stream = f"job-{handed.job_id}"
    with SqliteStore(tmp_path / "fleet.db") as store:
        [submitted] = store.read(stream)
        assert isinstance(submitted, JobSubmitted) and submitted.v == 3
        assert submitted.hub == HubLocation(**HUB) and submitted.interval_s == 20.0
        assert "token" not in encode(submitted).decode().lower()  # names only, never a token
        fleet = _run_fleet(store, sim)
        events = store.read(stream)
    assert fleet.stats.finished == 1
    verdict = replay(events).verdict
    assert (verdict.state, verdict.failure, verdict.rule) == (
        "PREEMPTED",
        "job_preempted",
        "worker_failed",
    )
    [watch] = [e for e in events if isinstance(e, WatchStarted)]
    assert watch.has_heartbeat_reader and watch.has_failure_detail_reader
    assert watch.interval_s == 20.0  # the handed-over interval, not the replica's 10 s
    forced = [e for e in events if e.kind == "HeartbeatObserved" and e.forced]
    assert forced and forced[-1].retriable


# --- (b) handed over without readers: recorded, and visible --------------------------------


def test_a_job_handed_over_without_readers_is_recorded_so_and_ls_and_explain_say_it(
    sim: Simulator, tmp_path: Path
):
    url = f"sqlite:///{tmp_path}/fleet.db"
    blind, seeing = _submit(sim, "failed_retriable"), _submit(sim, "success")
    assert _runs_add(tmp_path, url, blind.to_dict()).exit_code == 0
    assert _runs_add(tmp_path, url, {**seeing.to_dict(), "hub": HUB}, "b.json").exit_code == 0
    blind_stream, seeing_stream = f"job-{blind.job_id}", f"job-{seeing.job_id}"
    with SqliteStore(tmp_path / "fleet.db") as store:
        [submitted] = store.read(blind_stream)
        assert submitted.hub is None and submitted.v == 2  # written as before v3 existed
        assert "hub" not in json.loads(encode(submitted))

    def says(*args: str) -> str:
        result = CliRunner().invoke(app, [*args, "--store", url], env={"COLUMNS": "200"})
        assert result.exit_code in (0, 5, 10), result.output  # (no verdict yet; job_failed)
        return result.output

    # handed over, not yet watched
    listed = says("ls")
    assert [line for line in listed.splitlines() if "no heartbeat reader" in line] == [
        line for line in listed.splitlines() if blind_stream in line
    ]
    assert "no heartbeat reader" in says("explain", blind_stream)
    assert "no heartbeat reader" not in says("explain", seeing_stream)
    rows = {r["stream"]: r for r in json.loads(says("ls", "--json"))["streams"]}
    assert (rows[blind_stream]["heartbeat_reader"], rows[seeing_stream]["heartbeat_reader"]) == (
        False,
        True,
    )

    # watched by a replica: FAILED (nothing could flag the failure retriable), and explain
    # says why
    with SqliteStore(tmp_path / "fleet.db") as store:
        _run_fleet(store, sim)
        verdict = replay(store.read(blind_stream)).verdict
    assert (verdict.state, verdict.rule) == ("FAILED", "worker_failed")
    assert "no heartbeat reader" in says("explain", blind_stream)


# --- (c) hostile input: one line, exit 1, the store unchanged --------------------------------

GOOD = {"endpoint_id": "ep-1", "job_id": "job-1"}
LONG_ID = "j" * (STREAM_CAP - len("job-") + 1)  # fits an id, not the stream it makes

HOSTILE: dict[str, tuple[str, str]] = {
    "deeply nested": (
        '{"endpoint_id": "ep", "job_id": "j", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "nested deeper",
    ),
    "nested past the bound": (
        json.dumps({**GOOD, "policy": {"a": [[[[[[[[1]]]]]]]]}}),
        f"nested deeper than {MAX_INTAKE_DEPTH}",
    ),
    "huge": ('{"endpoint_id": "ep", "job_id": "' + "j" * (2 << 20) + '"}', "larger than"),
    "Infinity": ('{"endpoint_id": "ep", "job_id": "j", "submitted_at": Infinity}', "Infinity"),
    "NaN": ('{"endpoint_id": "ep", "job_id": "j", "interval_s": NaN}', "NaN"),
    "a float out of range": (
        '{"endpoint_id": "ep", "job_id": "j", "interval_s": 1e999}',
        "out of range",
    ),
    "a 5,000-digit integer": (
        '{"endpoint_id": "ep", "job_id": "j", "attempt": ' + "9" * 5000 + "}",
        "digits",
    ),
    "an attempt out of range": (json.dumps({**GOOD, "attempt": 10**9}), "attempt"),
    "an interval out of range": (json.dumps({**GOOD, "interval_s": 1e9}), "interval_s"),
    "a negative interval": (json.dumps({**GOOD, "interval_s": -1}), "interval_s"),
    "a policy window out of range": (
        json.dumps({**GOOD, "policy": {"stall_after_s": 1e12}}),
        "policy.stall_after_s",
    ),
    "a NUL in an id": (json.dumps({"endpoint_id": "ep", "job_id": "j\x00b"}), "NUL"),
    "a NUL in a key": (json.dumps({**GOOD, "x\x00": 1}), "NUL"),
    "a control character in an id": (
        json.dumps({"endpoint_id": "ep\n1", "job_id": "j"}),
        "control character",
    ),
    "a non-string id": (json.dumps({"endpoint_id": "ep", "job_id": 123}), "job_id"),
    "a boolean id": (json.dumps({"endpoint_id": True, "job_id": "j"}), "endpoint_id"),
    "an id making a stream over the limit": (
        json.dumps({"endpoint_id": "ep", "job_id": LONG_ID}),
        f"limit of {STREAM_CAP}",
    ),
    "a stream over the limit": (json.dumps({**GOOD, "stream": "s" * (STREAM_CAP + 1)}), "stream"),
    "an unknown field": (json.dumps({**GOOD, "hf_repo": "team/runs"}), "hf_repo"),
    "a hub without its seed": (
        json.dumps({**GOOD, "hub": {"hf_repo": "o/r", "run_id": "r"}}),
        "hub.seed",
    ),
    "a hub seed as a string": (json.dumps({**GOOD, "hub": {**HUB, "seed": "3"}}), "hub.seed"),
    "a key twice": ('{"endpoint_id": "ep", "job_id": "a", "job_id": "b"}', "twice"),
    "not an object": ("[1, 2]", "JSON object"),
    "not JSON": ("{endpoint_id: ep}", "not JSON"),
    "not UTF-8": ("", "UTF-8"),  # (written as bytes below)
    "a run id with a NUL": (
        json.dumps({"run_id": "r\x00", "candidates": [{"gpu_class": "L4"}]}),
        "NUL",
    ),
    "a run id as a number": (
        json.dumps({"run_id": 7, "candidates": [{"gpu_class": "L4"}]}),
        "run_id",
    ),
    "a run without candidates": (json.dumps({"run_id": "r", "candidates": []}), "candidates"),
    "a run budget of 1e999": (
        '{"run_id": "r", "candidates": [{"gpu_class": "L4"}], "budget_s": 1e999}',
        "out of range",
    ),
    "a run's retries out of range": (
        json.dumps({"run_id": "r", "candidates": [{"gpu_class": "L4"}], "max_retries": 10**6}),
        "max_retries",
    ),
    "a run spec with an unknown field": (
        json.dumps({"run_id": "r", "gpu_class": "L4", "hf_repo": "o/r", "function": "x"}),
        "function",
    ),
    "a run spec whose seed is a string": (
        json.dumps({"run_id": "r", "gpu_class": "L4", "seed": "1"}),
        "seed",
    ),
    "a run id whose attempt streams are over the limit": (
        json.dumps(
            {"run_id": "r" * (STREAM_CAP - 8), "candidates": [{"gpu_class": "L4"}], "seed": 1}
        ),
        f"limit of {STREAM_CAP}",
    ),
}


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_intake_is_one_line_exit_1_and_leaves_the_store_as_it_was(
    tmp_path: Path, case: str
):
    document, says = HOSTILE[case]
    path = tmp_path / "in" / "hostile.json"
    path.parent.mkdir()
    if case == "not UTF-8":
        path.write_bytes(b'{"endpoint_id": "\xff\xfe", "job_id": "j"}')
    else:
        path.write_text(document, encoding="utf-8")
    runner = CliRunner()
    # a store that exists, with a stream in it
    existing = tmp_path / "existing"
    existing.mkdir()
    url = f"sqlite:///{existing}/fleet.db"
    assert _runs_add(tmp_path, url, GOOD, "good.json").exit_code == 0
    before = _snapshot(existing)
    with SqliteStore(existing / "fleet.db", read_only=True) as store:
        streams = store.streams()
    # a fresh path
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for target in (url, f"sqlite:///{fresh}/fleet.db"):
        result = runner.invoke(app, ["runs", "add", str(path), "--store", target])
        assert result.exit_code == EXIT_USAGE, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), result.output
        assert says in lines[0], lines[0]
        assert len(lines[0]) < 1000
    assert _snapshot(existing) == before
    with SqliteStore(existing / "fleet.db", read_only=True) as store:
        assert store.streams() == streams
    assert list(fresh.iterdir()) == []  # no file made


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("busy_timeout_s=inf", "busy_timeout_s"),
        ("busy_timeout_s=nan", "busy_timeout_s"),
        ("busy_timeout_s=-1", "busy_timeout_s"),
        ("busy_timeout_s=1e9", "at most 3,600"),
        ("snapshot_every=0", "snapshot_every"),
        ("snapshot_every=" + "9" * 5000, "snapshot_every"),
        ("snapshot_every=10000000", "at most 1,000,000"),
        ("snapshot_every=1.5", "snapshot_every"),
    ],
)
def test_a_store_url_option_out_of_range_is_refused_before_the_store_is_made(
    tmp_path: Path, options: str, says: str
):
    (tmp_path / "job.json").write_text(json.dumps(GOOD))
    for args in (
        ["runs", "add", str(tmp_path / "job.json")],
        ["supervise", "--until-idle"],
    ):
        result = CliRunner().invoke(app, [*args, "--store", f"sqlite:///{tmp_path}/f.db?{options}"])
        assert result.exit_code == EXIT_USAGE, result.output
        assert len(result.output.strip().splitlines()) == 1 and says in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e9"])
def test_an_idle_in_transaction_bound_is_checked_before_postgres_is_reached(value: str):
    from flashfsm.adapters.stores import open_store

    with pytest.raises(ValueError, match="idle_in_transaction_s"):
        open_store(f"postgresql://nobody@127.0.0.1:1/none?idle_in_transaction_s={value}")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--lease", "nan"], "--lease"),
        (["--lease", "inf"], "--lease"),
        (["--interval", "1e9"], "--interval"),
        (["--interval", "nan"], "--interval"),
        (["--max-streams", "0"], "--max-streams"),
    ],
)
def test_supervise_refuses_options_out_of_range_before_opening_the_store(
    tmp_path: Path, args: list[str], says: str
):
    result = CliRunner().invoke(app, ["supervise", *args, "--store", f"sqlite:///{tmp_path}/f.db"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(result.output.strip().splitlines()) == 1 and says in result.output
    assert list(tmp_path.iterdir()) == []


def test_hand_off_job_checks_everything_before_it_opens_a_store_url(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    for bad in (
        {"endpoint_id": "ep", "job_id": LONG_ID},
        {"endpoint_id": "ep", "job_id": 5},
        {"endpoint_id": "ep", "job_id": "j", "submitted_at": math.inf},
        {"endpoint_id": "ep", "job_id": "j", "policy": {"stall_after_s": math.nan}},
    ):
        with pytest.raises(ValueError):
            hand_off_job(bad, url)
    with pytest.raises(ValueError, match="interval_s"):
        hand_off_job(JobHandle("ep", "flash", "j"), url, interval_s=-1.0)
    assert list(tmp_path.iterdir()) == []
    # a handle and the watch's parts as arguments: the same record as the dict's
    stream = hand_off_job(JobHandle("ep", "flash", "j"), url, hub=HubLocation(**HUB))
    with SqliteStore(tmp_path / "fleet.db", read_only=True) as store:
        assert store.read(stream)[0].hub == HubLocation(**HUB)


def test_load_intake_takes_the_json_job_handle_to_dict_writes():
    handle = JobHandle("ep", "flash-ep", "j", submitted_at=1.5, gpu_class="L4", attempt=2)
    raw = json.dumps({**handle.to_dict(), "hub": HUB}).encode()
    intake = job_intake(load_intake(raw))
    assert intake.hub == HubLocation(**HUB)  # and the handle it gives carries it on
    assert intake.handle() == dataclasses.replace(handle, hub=intake.hub)
    assert load_intake(json.dumps(intake.handle().to_dict()).encode())["hub"] == HUB
    assert intake.stream_name == "job-j"
    longest = "j" * (NAME_CAP - len("job-"))
    assert job_intake({"endpoint_id": "ep", "job_id": longest}).stream_name == f"job-{longest}"


# --- the recorded format ---------------------------------------------------------------------


def test_job_submitted_v3_carries_the_hand_off_and_v2_is_written_as_before():
    base = {"stream": "job-j", "seq": 0, "id": "x", "at": 1.0, "endpoint_id": "ep", "job_id": "j"}
    plain = JobSubmitted(**base)
    assert plain.v == 2 and set(json.loads(encode(plain))) >= {"policy"}
    assert not {"hub", "interval_s"} & set(json.loads(encode(plain)))
    handed = JobSubmitted(**base, hub=HubLocation(**HUB), interval_s=5.0)
    assert handed.v == 3 and decode(encode(handed)) == handed
    line = json.loads(encode(handed))
    from flashfsm.events.errors import EventDecodeError

    with pytest.raises(EventDecodeError, match="v3"):
        decode(json.dumps({**line, "v": 2}))  # a v2 event cannot carry them
