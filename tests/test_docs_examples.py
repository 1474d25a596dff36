"""The example logs the package ships (`flashfsm.example_logs()`; in the checkout,
flashfsm/examples/) are what the library records today.

The docs' CLI transcripts run over these logs (see tests/test_docs_transcripts.py), so that
they are deterministic. They are a JSONL store (one file per stream, as `flashfsm export`
writes) made by `write_examples`: four training runs driven by `supervise_run` against the
in-process simulator on a manual clock that starts at `START`, with the Hub heartbeat
readers, exactly as an orchestrator would run them. These tests check that:

- the committed files are what `write_examples` makes today, once the values that differ
  on every run are set aside (event ids, the simulator's endpoint and job ids, the
  watcher's host and pid): a change to what the library records shows up here;
- every job log replays to the verdict it records and today's rules agree (`verify`), and
  every run log to its result.

Regenerate them (and then the transcripts) with `python -m tests.test_docs_generated --write`.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashfsm import RunpodClient, example_logs, read_jsonl_file, replay, supervise_run, verify
from flashfsm.adapters.flash_deploy import DEFAULT_IDLE_TIMEOUT_S
from flashfsm.adapters.hub import (
    heartbeat_prefix,
    make_hf_failure_detail_reader,
    make_hf_heartbeat_reader,
)
from flashfsm.adapters.simulator import DEFAULT_KEY, SimClock, Simulator
from flashfsm.demo import GPUS, PHASE  # the demo's GPU classes and phase
from flashfsm.events.models import Concluded
from flashfsm.fsm.run import replay_run
from flashfsm.runs import Deployed, RunpodRunAdapters
from tests.store_support import jsonl_copied_to

ROOT = Path(__file__).resolve().parents[1]
#: The example logs the tests read: the installed package's (`flashfsm examples` prints it).
EXAMPLES = example_logs()
#: Where `write_examples` regenerates them: the checkout's package data (what a wheel ships).
SOURCE = ROOT / "flashfsm" / "examples"
START = 1_700_000_000.0  # the simulated clock's start (2023-11-14 22:13:20 UTC)
HF_REPO = "my-org/runs"
#: run id -> (its GPU walk, the simulator scenario of attempt 0, 1, …)
RUNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "walk": (("RTX4090", "L40S"), ("no_capacity", "success")),
    "crashloop": (("L40S",), ("crash_loop", "success")),
    "stall": (("A100-80GB", "L40S"), ("training_stall", "success")),
    "codeerror": (("L40S",), ("failed",)),
}
#: job stream -> (state, rule) its log records
JOB_VERDICTS = {
    "job-walk-s0-a0": ("NO_CAPACITY", "queue_grace"),
    "job-walk-s0-a1": ("SUCCEEDED", "completed"),
    "job-crashloop-s0-a0": ("STALLED", "unhealthy_worker"),
    "job-crashloop-s0-a1": ("SUCCEEDED", "completed"),
    "job-stall-s0-a0": ("STALLED", "stall"),
    "job-stall-s0-a1": ("SUCCEEDED", "completed"),
    "job-codeerror-s0-a0": ("FAILED", "worker_failed"),
}
#: run stream -> (ok, failure, attempts)
RUN_RESULTS = {
    "run-walk": (True, None, 2),
    "run-crashloop": (True, None, 2),
    "run-stall": (True, None, 2),
    "run-codeerror": (False, "job_failed", 1),
}
#: Fields whose values differ on every run of the generator.
VOLATILE = ("endpoint_id", "job_id", "watcher", "worker_id")


def _adapters(sim: Simulator, client: RunpodClient, run_id: str, hub_cache: str):
    gpus, scenarios = RUNS[run_id]

    def deploy(run, attempt, record) -> Deployed:
        scenario = scenarios[min(attempt.started.attempt, len(scenarios) - 1)]
        name = attempt.started.endpoint_name
        idle = DEFAULT_IDLE_TIMEOUT_S  # set and recorded, as a real deploy does
        endpoint_id = sim.add_endpoint(name, scenario=scenario, hf_repo=HF_REPO, idleTimeout=idle)
        return Deployed(endpoint_id, name, idle_timeout_s=idle)

    def job_input(run, attempt) -> dict[str, Any]:
        return {"hf_repo": HF_REPO, "phase": PHASE, "run_id": run_id, "seed": 0}

    def readers(run, attempt):
        prefix = heartbeat_prefix(PHASE, run_id, 0)
        hub = {"clock": sim.clock.now, "endpoint": sim.url, "cache_dir": hub_cache}
        return (
            make_hf_heartbeat_reader(HF_REPO, prefix, **hub),
            make_hf_failure_detail_reader(HF_REPO, prefix, PHASE, **hub),
        )

    adapters = RunpodRunAdapters(
        client,
        deploy,
        job_input,
        readers,
        budget_s=6 * 3600,
        clock=sim.clock.now,
        sleep=sim.clock.sleep,
    )
    return [GPUS[g] for g in gpus], adapters


def supervise_example(
    run_id: str,
    candidates: list[Any],
    adapters: Any,
    store: Any,
    sim: Simulator,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """`supervise_run` as the examples run theirs: the demo's phase, seed 0, two retries, on
    the simulator's clock (and its sleep, unless `sleep` wraps it)."""
    supervise_run(
        run_id,
        candidates,
        adapters,
        max_retries=2,
        phase=PHASE,
        seed=0,
        store=store,
        clock=sim.clock.now,
        sleep=sim.clock.sleep if sleep is None else sleep,
    )


def make_examples(directory: Path) -> None:
    """Run every example run into a JSONL store in `directory` (which must not exist)."""
    with (
        jsonl_copied_to(directory) as (store, scratch),
        Simulator(clock=SimClock(speed=0, start=START)) as sim,
        sim.client() as client,
    ):
        for run_id in RUNS:
            candidates, adapters = _adapters(sim, client, run_id, f"{scratch}/hf")
            supervise_example(run_id, candidates, adapters, store, sim)


def canonical(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every stream file's events as dicts, with ids and the volatile values numbered.

    Event ids and checksums (`_c`, over the volatile bytes too) are dropped; the store
    verifies the checksums when the logs are read. Each distinct endpoint id, job id,
    watcher and worker id (named after its job) becomes
    `<field-n>` in order of first appearance (across the files, sorted by name), wherever
    it occurs in the line.
    """
    files = sorted(directory.glob("*.jsonl"))
    names: dict[str, str] = {}
    counts: dict[str, int] = {}
    raw = {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in files}
    for events in raw.values():
        for event in events:
            for key in VOLATILE:
                value = event.get(key)
                if isinstance(value, str) and value and value not in names:
                    counts[key] = counts.get(key, 0) + 1
                    names[value] = f"<{key}-{counts[key]}>"
    pattern = re.compile("|".join(re.escape(v) for v in sorted(names, key=len, reverse=True)))
    out: dict[str, list[dict[str, Any]]] = {}
    for name, events in raw.items():
        text = json.dumps([{k: v for k, v in e.items() if k not in ("id", "_c")} for e in events])
        out[name] = json.loads(pattern.sub(lambda m: names[m.group(0)], text) if names else text)
    return out


def write_examples(directory: Path = SOURCE) -> bool:
    """Regenerate the examples when what they record has changed; True when it had."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "examples"
        make_examples(fresh)
        if directory.is_dir() and canonical(directory) == canonical(fresh):
            return False
        for old in directory.glob("*.jsonl"):
            old.unlink()
        directory.mkdir(parents=True, exist_ok=True)
        for path in fresh.glob("*.jsonl"):
            shutil.copyfile(path, directory / path.name)
        return True


def test_the_examples_are_what_the_library_records_today(tmp_path):
    fresh = tmp_path / "examples"
    make_examples(fresh)
    committed, today = canonical(EXAMPLES), canonical(fresh)
    assert sorted(committed) == sorted(today), (
        "regenerate: python -m tests.test_docs_generated --write"
    )
    for name in sorted(today):
        assert committed[name] == today[name], (
            f"{EXAMPLES / name} is not what the library records today; regenerate it "
            "(python -m tests.test_docs_generated --write) and review the transcripts' diff"
        )


@pytest.mark.parametrize("stream", sorted(JOB_VERDICTS))
def test_every_example_job_log_replays_to_its_verdict_and_today_s_rules_agree(stream):
    events = read_jsonl_file(EXAMPLES / f"{stream}.jsonl")
    assert isinstance(events[-1], Concluded)
    state = replay(events)
    assert (state.verdict.state, state.verdict.rule) == JOB_VERDICTS[stream]
    assert verify(events).ok


@pytest.mark.parametrize("stream", sorted(RUN_RESULTS))
def test_every_example_run_log_replays_to_its_result(stream):
    run = replay_run(read_jsonl_file(EXAMPLES / f"{stream}.jsonl"))
    assert run.done
    ok, failure, attempts = RUN_RESULTS[stream]
    assert (run.result.ok, run.result.failure, run.result.attempts) == (ok, failure, attempts)
    for attempt in run.attempts:
        assert attempt.job_stream in JOB_VERDICTS


def test_the_examples_are_every_stream_the_runs_wrote_and_hold_no_key():
    names = {path.stem for path in EXAMPLES.glob("*.jsonl")}
    assert names == set(JOB_VERDICTS) | set(RUN_RESULTS)
    assert not any(DEFAULT_KEY in path.read_text() for path in EXAMPLES.glob("*.jsonl"))
