"""A crash-looping job's post-mortem shows its worker's last log lines, and no secret.

The crash loop runs on the simulator (real HTTP on 127.0.0.1, manual clock) with a worker
whose log prints the environment's secrets in every form a log carries them: whole, base64
(standard and URL-safe), percent-encoded, after `Bearer`, and a piece of one. `poll_job`
with the RunPod client records the log before its verdict; the recorded event and
`flashfsm explain` and `flashfsm logs` show the crash, and none of the forms.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from flashfsm import JobHandle, RunpodClient, poll_job
from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.events.models import Concluded, WorkerLogObserved

START = 1_700_000_000.0


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh secret, made the environment's Hub token (random: no other test's secret
    masks a piece of it)."""
    token = "hf_" + secrets.token_urlsafe(24)
    monkeypatch.setenv("HF_TOKEN", token)
    yield token


def _forms(secret: str) -> list[str]:
    raw = secret.encode()
    return [
        secret,
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        quote(secret, safe=""),
        secret[3:15],  # a piece of it, 12 characters
    ]


def test_a_crash_loops_explain_shows_the_crash_and_no_secret(planted: str, tmp_path: Path) -> None:
    lines = [f"env dump: HF_TOKEN={form}" for form in _forms(planted)]
    lines.append(f"GET /api/models Authorization: Bearer {planted}")
    url = f"jsonl:{tmp_path}/store"
    store = open_store(url)
    try:
        with Simulator(clock=SimClock(speed=0, start=START)) as sim:
            env = sim.env()
            endpoint_id = sim.add_endpoint("flash-crash-s0", scenario="crash_loop")
            job_id = sim.submit(endpoint_id, {"sim": {"log": lines}})
            with RunpodClient(
                sim.accounts[0].key,
                endpoint_base_url=env["RUNPOD_ENDPOINT_BASE_URL"],
                api_base_url=env["RUNPOD_API_BASE_URL"],
            ) as client:
                result = poll_job(
                    JobHandle(endpoint_id, "flash-crash-s0", job_id, submitted_at=START),
                    client=client,
                    clock=sim.clock.now,
                    sleep=sim.clock.sleep,
                    store=store,
                    stream="job-crash",
                    unhealthy_grace_s=120.0,
                )
        assert (result.state, result.rule) == ("STALLED", "unhealthy_worker")
        log = store.read("job-crash")
    finally:
        store.close()
    assert isinstance(log[-1], Concluded)
    evidence = log[-2]
    assert isinstance(evidence, WorkerLogObserved) and evidence.worker_status == "unhealthy"
    assert any("Traceback" in line for line in evidence.lines)  # the crash itself
    assert any("env dump" in line for line in evidence.lines)  # the planted lines were read
    runner = CliRunner()
    explained = runner.invoke(app, ["explain", "job-crash", "--store", url], env={"COLUMNS": "200"})
    assert explained.exit_code == 13, explained.output  # a stalled verdict (docs/cli.md)
    assert "worker log:" in explained.output and "unhealthy" in explained.output
    as_json = runner.invoke(app, ["explain", "job-crash", "--store", url, "--json"])
    shown = runner.invoke(app, ["logs", "job-crash", "--store", url])
    assert shown.exit_code == 0, shown.output
    recorded = (tmp_path / "store").read_text() if (tmp_path / "store").is_file() else ""
    recorded += "".join(p.read_text() for p in (tmp_path / "store").glob("*.jsonl"))
    assert "ModuleNotFoundError" in explained.output  # its last lines: the crash
    for text in (as_json.output, shown.output, recorded):  # every recorded line
        assert "[REDACTED]" in text  # the planted lines are there, masked
    for form in [*_forms(planted), planted]:
        for where, text in (
            ("explain", explained.output),
            ("explain --json", as_json.output),
            ("logs", shown.output),
            ("the store", recorded),
        ):
            assert form not in text, f"{where} shows a form of the secret: {form[:6]}…"
