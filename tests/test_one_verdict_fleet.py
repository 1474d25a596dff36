"""One job, one verdict, in a fleet: every simulator scenario handed to a fleet replica with
`flashfsm runs add` (its Hub location in the JSON) ends in the verdict, rule and decision
time `poll_job` reaches on the same job, on a SQLite and on a PostgreSQL store.

The replica runs on the simulator's manual clock with `jitter=0` (the supervisor's jitter
moves poll times by design: `tests/test_one_verdict.py` bounds it), so the times must be
equal, counted from when each watch started (the replica claims the job a moment after
the hand-off; `poll_job` starts at the submission).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm.cli import app
from tests.sim_support import run_replica_until_idle
from tests.test_one_verdict import (
    INTERVAL_S,
    PHASE,
    REPO,
    RUN_ID,
    SCENARIOS,
    SEED,
    by_poll_job,
    decision,
    same_verdict,
    simulated_job,
)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_fleet_replica_reaches_the_verdict_rule_and_time_poll_job_reaches(
    scenario: str, lease_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = by_poll_job(scenario)
    with simulated_job(scenario) as job:
        for name, value in job.sim.env().items():  # the replica's Hub readers: HF_ENDPOINT
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        hub = {"hf_repo": REPO, "phase": PHASE, "run_id": RUN_ID, "seed": SEED}
        intake = {**job.handle.to_dict(), "hub": hub, "interval_s": INTERVAL_S, "stream": "job-x"}
        path = tmp_path / "job.json"
        path.write_text(json.dumps(intake))
        added = CliRunner().invoke(app, ["runs", "add", str(path), "--store", lease_url])
        assert added.exit_code == 0, added.output

        run_replica_until_idle(lease_url, job.sim, sleep=job.sim.clock.async_sleep, jitter=0.0)
        from flashfsm.adapters.stores import open_store

        store = open_store(lease_url)
        try:
            got = decision(store, "job-x", job.handle.submitted_at)  # type: ignore[arg-type]
            watches = [e for e in store.read("job-x") if e.kind == "WatchStarted"]
        finally:
            store.close()
    assert [w.watcher for w in watches] == ["replica-1"]
    same_verdict(got, expected)
    # The replica claims the job at its first tick, a moment after the hand-off: its watch
    # starts that much later than `poll_job`'s (which starts at the submission), and every
    # time after it, the verdict's included, is later by exactly that.
    assert job.handle.submitted_at is not None
    claimed_after = watches[0].at - job.handle.submitted_at
    assert 0 <= claimed_after < 0.5
    assert got.after_s - claimed_after == pytest.approx(expected.after_s, abs=1e-6), (
        got,
        expected,
        claimed_after,
    )
