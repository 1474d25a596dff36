"""`flashfsm whatif --all`: a policy change over 1,000 recorded simulator jobs, and its gate.

The corpus is built once: the simulator's scenarios are watched by the real `poll_job` on
the simulator's virtual clock (`flashfsm.demo.watch_scenarios`), and each log is copied
into a SQLite store under many names until it holds 1,000 jobs. A known policy change is
seeded: `stall_after_s=30` must turn every copy of the 30-minute training job (a heartbeat
a minute) from a success into a stall, as the single-log `what_if` says of its original.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm.adapters.stores import open_store
from flashfsm.cli import EXIT_GATE, app
from flashfsm.demo import watch_scenarios
from flashfsm.postmortem import explain as ex

SCENARIOS = (
    ("success", ""),
    ("training", ""),
    ("no_capacity", ""),
    ("training_stall", ""),
    ("failed", ""),
)
JOBS = 1000


def _corpus(root: Path) -> tuple[str, dict[str, int], dict[str, list[Any]]]:
    url = f"sqlite:///{root}/events.db"
    streams = watch_scenarios(url, say=lambda _: None, jobs=SCENARIOS, tag="c0ffee")
    store = open_store(url)
    try:
        originals = {s: store.read(s) for s in streams}
        copies = dict.fromkeys(streams, 1)
        n = len(streams)
        while n < JOBS:
            for s, events in originals.items():
                if n >= JOBS:
                    break
                name = f"{s}-copy{copies[s]}"
                shift = 3600.0 * n
                store.append(
                    name,
                    [
                        e.model_copy(
                            update={"stream": name, "at": e.at + shift, "id": f"{name}-{e.seq}"}
                        )
                        for e in events
                    ],
                    0,
                )
                copies[s] += 1
                n += 1
    finally:
        store.close()
    return url, copies, originals


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int], dict]:
    return _corpus(tmp_path_factory.mktemp("corpus"))


def invoke(args: list[str], columns: int = 80) -> Any:
    return CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})


def test_a_seeded_policy_change_is_reported_over_a_thousand_jobs_in_under_a_minute(
    corpus: tuple[str, dict[str, int], dict],
) -> None:
    url, copies, originals = corpus
    expected: dict[tuple[str, str], int] = {}
    for stream, events in originals.items():
        w = ex.what_if(events, stall_after_s=30)
        change = ex.job_change(ex.JobLog(stream, events), w)
        if change is not None:
            key = (change.before, change.after)
            expected[key] = expected.get(key, 0) + copies[stream]
    training = next(s for s in originals if s.endswith("-training"))
    assert expected[("SUCCEEDED", "STALLED (stall)")] >= copies[training] > 100
    began = time.perf_counter()
    result = invoke(["whatif", "--all", "--store", url, "--set", "stall_after_s=30", "--json"])
    elapsed = time.perf_counter() - began
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["jobs"] == JOBS
    assert {(s["from"], s["to"]): s["count"] for s in out["shifts"]} == expected
    assert out["metrics"]["success_lost"] == expected[("SUCCEEDED", "STALLED (stall)")]
    assert elapsed < 60, f"whatif --all over {JOBS} jobs took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("gate", "code"),
    [
        ("success_lost>0", EXIT_GATE),
        ("success_lost>=100000", 0),
        ("changed<1", 0),
        ("jobs==1000", EXIT_GATE),
    ],
)
def test_the_gate_exits_non_zero_exactly_when_a_threshold_is_crossed(
    corpus: tuple[str, dict[str, int], dict], gate: str, code: int
) -> None:
    url, _, _ = corpus
    args = ["whatif", "--all", "--store", url, "--set", "stall_after_s=30", "--fail-if", gate]
    result = invoke(args)
    assert result.exit_code == code, result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output
    assert ("crossed" in result.output) == (code == EXIT_GATE)


def test_the_recorded_policy_changes_nothing_and_passes_every_gate(
    corpus: tuple[str, dict[str, int], dict],
) -> None:
    url, _, _ = corpus
    result = invoke(["whatif", "--all", "--store", url, "--fail-if", "changed>0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["metrics"]["changed"] == 0


@pytest.mark.parametrize(
    "args",
    [
        ["whatif", "--all", "--fail-if", "colour>1"],
        ["whatif", "--all", "--fail-if", "success_lost"],
        ["whatif", "--all", "--since", "yesterday"],
        ["whatif", "--all", "job-x"],
        ["whatif", "job-x", "--fail-if", "changed>0"],
        ["whatif"],
        ["whatif", "--all", "--set", "stall_after_s=-1"],
    ],
)
def test_bad_corpus_input_is_one_line_and_exit_1(
    corpus: tuple[str, dict[str, int], dict], args: list[str]
) -> None:
    url, _, _ = corpus
    result = invoke([*args, "--store", url], columns=1000)  # one line: unwrapped
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error:")
