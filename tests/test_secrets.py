"""No secret reaches a store, a log line, CLI output or an exception, across lifecycles.

Distinct secret values are planted in `RUNPOD_API_KEY` (a pool of two accounts, the
simulator's keys), `HF_TOKEN` and the runtime secrets; then real lifecycles run through
`submit_run` — a success, a worker failure, a crash loop, a failed submit, a status-500
storm and a quota failure on every account. Every byte of the event store, every progress
line, every logging record (DEBUG and up, every logger) and every exception (message,
repr, cause chain and traceback) is scanned. The simulator's own request log is not: it
legitimately holds the key (runpod-flash copies it into the endpoint's template env).
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import pytest

from flashfsm import DeployError, RunpodApiError, RunSpec, open_store, submit_run
from flashfsm.adapters import flash_deploy
from flashfsm.adapters.runpod import RetryPolicy, RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.events import encode
from tests.test_deploy import sim_factory

KEYS = ("rpsecret-alpha-9f3k2j1h7g", "rpsecret-bravo-7d6s5a4q3w")
HF_TOKEN = "hf_secret_token_x8c7v6b5n4m3"
RUNTIME = {"WANDB_API_KEY": "wandb-secret-z1x2c3v4b5", "OPENAI_API_KEY": "sk-runtime-q9w8e7r6t5"}
SECRETS = (*KEYS, HF_TOKEN, *RUNTIME.values())


@pytest.fixture
def make_sim(monkeypatch):
    yield from sim_factory(monkeypatch)


def leaks(text: str) -> list[str]:
    """The planted secrets (or a long piece of one) found in `text`."""
    return [s for s in SECRETS if s in text or s[4:-4] in text]


def exception_texts(exc: BaseException) -> list[str]:
    texts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen), *map(str, seen.args)]
        seen = seen.__cause__ or seen.__context__
    return texts


def test_no_secret_reaches_events_logs_or_errors(make_sim, monkeypatch, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    sim = make_sim(api_keys=KEYS)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    store_dir = tmp_path / "events"
    store = open_store(f"jsonl://{store_dir}")
    lines: list[str] = []
    errors: list[BaseException] = []
    outcomes: dict[str, Any] = {}

    def lifecycle(seed: int, scenario: str, **kw: Any) -> None:
        def deployer(request, **deploy_kw):
            deployed = flash_deploy.deploy_endpoint(request, **deploy_kw)
            sim.configure_endpoint(deployed.endpoint_id, scenario=scenario)
            return deployed

        spec = RunSpec(
            run_id="secret-run",
            gpu_class="L40S",
            hf_repo="org/runs",
            worker_image="team/trainer:1",
            max_wall_seconds=3600,
            weight_cache="wc",
            env={"WANDB_PROJECT": "public-project"},
        )
        try:
            outcomes[seed] = submit_run(
                spec,
                seed,
                log=lines.append,
                runtime_secrets=RUNTIME,
                store=store,
                deployer=deployer,
                clock=sim.clock.now,
                sleep=sim.clock.sleep,
                hub_options={"cache_dir": tmp_path / "hf"},
                **kw,
            )
        except Exception as exc:
            outcomes[seed] = exc
            errors.append(exc)

    lifecycle(0, "success")
    lifecycle(1, "failed")
    lifecycle(2, "crash_loop")
    sim.add_fault("run", 500)
    lifecycle(3, "success")  # the submit fails
    storm = sim.add_fault("status", 500, times=None)
    quick = RunpodClient(
        KEYS[0],
        endpoint_base_url=sim.env()["RUNPOD_ENDPOINT_BASE_URL"],
        api_base_url=sim.url,
        retry=RetryPolicy(attempts=2),
        sleep=lambda s: None,
    )
    with quick:
        lifecycle(4, "success", client=quick)
    sim.clear_faults()
    for account in range(2):  # every account full with endpoints the sweep may not touch
        sim.add_endpoint("serving", account=account, workers_max=50, check_quota=False)
    lifecycle(5, "success")  # the deploy fails

    assert outcomes[0].ok, outcomes[0]
    assert outcomes[1].failure == "job_failed", outcomes[1]
    assert outcomes[2].failure == "stalled", outcomes[2]
    assert isinstance(outcomes[3], RunpodApiError), outcomes[3]
    assert outcomes[4].failure == "poll_error" and storm.fired >= 8, outcomes[4]
    assert isinstance(outcomes[5], DeployError) and outcomes[5].quota, outcomes[5]
    # the secrets did reach the worker: the only place they belong
    job_env = next(iter(sim.world.jobs.values())).input["env"]
    assert job_env["WANDB_API_KEY"] == RUNTIME["WANDB_API_KEY"]
    assert leaks(str(job_env))  # the scanner finds what is there

    raw = b"".join(p.read_bytes() for p in sorted(Path(store_dir).rglob("*")) if p.is_file())
    encoded = [encode(e) for stream in store.streams() for e in store.read(stream)]
    assert len(encoded) > 100 and {s.split("-")[0] for s in store.streams()} >= {"job", "run"}
    assert "sweeper-0" in store.streams()  # the quota sweep ran and recorded (account 0)
    assert not leaks(raw.decode("utf-8", "replace"))
    assert not [e for e in encoded if leaks(e.decode())]
    assert lines and not [line for line in lines if leaks(line)]
    records = [r for r in caplog.records]
    assert any(r.name.startswith("runpod_flash") for r in records)  # the SDK's logs too
    logged = [
        caplog.handler.format(r) + (r.exc_text or "") + str(r.args) + str(r.msg) for r in records
    ]
    assert not [text for text in logged if leaks(text)]
    assert errors and not [t for exc in errors for t in exception_texts(exc) if leaks(t)]
    out, err = capfd.readouterr()
    assert not leaks(out + err)
    store.close()
    # The post-mortem tools print nothing secret either, whatever they are asked.
    from typer.testing import CliRunner

    from flashfsm.cli import app

    url = f"jsonl://{store_dir}"
    runner = CliRunner()
    printed = [runner.invoke(app, ["ls", "--store", url, "--json"]).output]
    for stream in open_store(url).streams():
        for command in (
            ["replay", "--full"],
            ["explain"],
            ["whatif", "--set", "queue_grace_s=900"],
        ):
            if stream.startswith("job-") or command[0] == "replay":
                result = runner.invoke(app, [command[0], stream, *command[1:], "--store", url])
                printed.append(result.output)
    assert len(printed) > 5 and not [text for text in printed if leaks(text)]


def test_a_secret_in_the_spec_env_is_refused_without_echoing_it(make_sim, monkeypatch):
    sim: Simulator = make_sim(api_keys=KEYS)
    spec = RunSpec(
        run_id="r",
        gpu_class="H100",
        worker_image="team/t:1",
        env={"TOKEN": RUNTIME["WANDB_API_KEY"]},
    )
    with pytest.raises(ValueError) as caught:
        submit_run(spec, 0, runtime_secrets=RUNTIME, store="memory://")
    assert "TOKEN" in str(caught.value) and not leaks(str(caught.value))
    assert sim.requests == []
