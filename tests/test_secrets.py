"""No secret reaches a store, a log line, CLI output or an exception, across lifecycles.

Distinct secret values are planted in `RUNPOD_API_KEY` (a pool of two accounts, the
simulator's keys), `HF_TOKEN` and the runtime secrets; then real lifecycles run through
`submit_run` — a success, a worker failure, a crash loop, a failed submit, a status-500
storm and a quota failure on every account. Every byte of the event store, every progress
line, every logging record (DEBUG and up, every logger) and every exception (message,
repr, cause chain and traceback) is scanned. The simulator's own request log is not: it
legitimately holds the key (runpod-flash copies it into the endpoint's template env).

The scan looks for each secret whole and in its encoded forms — standard and URL-safe
base64 at each of the three alignments a longer blob can give it (the stable core: the
characters that depend on the secret's bytes alone), and percent-encoded — and for any
8-character piece of any of them. The failing submit and the status storm answer with
bodies that carry those forms (an HTTP Basic header, a token in a URL, a secret inside a
longer base64 blob), so the forms do reach the outside texts the run records.

The CLI, given a Postgres store URL with a password, never prints the password: to a
closed port (an error), and to the test server (`FLASHFSM_TEST_POSTGRES_DSN` with a fake
password added, when that server accepts it) through `ls`, `replay`, an error and the
demo's error path.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

import pytest

from flashfsm import DeployError, RunpodApiError, RunSpec, open_store, submit_run
from flashfsm.adapters import flash_deploy
from flashfsm.adapters.runpod import RetryPolicy, RunpodClient
from flashfsm.adapters.simulator import Simulator
from flashfsm.events import encode
from tests.test_deploy import sim_factory

#: Realistic credentials (random characters after a vendor prefix: no 8-character piece of
#: one is an ordinary word), one with characters that percent-encoding changes.
KEYS = ("rpa_K7Q2XM9T4ZHB3W8JN5DC6VPL", "rpa_Y2G6RS8E4LUA9FXO3MCQ7PIK")
HF_TOKEN = "hf_qTzXwKvLpBnRjMhGfDsYcAeU"
RUNTIME = {
    "WANDB_API_KEY": "c0a9f3e71b2d4c58a6e2f19d",
    "OPENAI_API_KEY": "sk-proj-R7t9Yq2Zw5Xv8Nb3Mk6Lh",
    "DB_PASSWORD": "Zq8+/r&t%9K d!x@L2w=",
}
SECRETS = (*KEYS, HF_TOKEN, *RUNTIME.values())


@pytest.fixture
def make_sim(monkeypatch):
    yield from sim_factory(monkeypatch)


PIECE = 8


def encoded_forms(secret: str) -> dict[str, str]:
    """`secret` as the outside world may carry it, by name: plain, percent-encoded, and the
    stable core of its standard and URL-safe base64 at each alignment in a longer blob."""
    raw = secret.encode()
    forms = {"plain": secret, "quote": quote(secret, safe=""), "quote_plus": quote_plus(secret)}
    for alphabet, to_b64 in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
        for lead in range(3):
            blob = to_b64(bytes(lead) + raw).decode()
            forms[f"{alphabet}@{lead}"] = blob[-(-8 * lead // 6) : 8 * (lead + len(raw)) // 6]
    return forms


#: Every 8-character piece of every form of every secret -> what it is a piece of.
_PIECES: dict[str, str] = {
    form[i : i + PIECE]: f"{secret[:6]}… {name}"
    for secret in SECRETS
    for name, form in encoded_forms(secret).items()
    for i in range(len(form) - PIECE + 1)
}
#: Every 8-character window holds one 4-aligned 4-character block whole: look those up.
_BLOCKS = frozenset(p[i : i + PIECE // 2] for p in _PIECES for i in range(PIECE // 2 + 1))


def leaks(text: str | bytes) -> list[str]:
    """The planted secrets found in `text`: whole, encoded, or any 8-character piece of a
    form (which secret, which form, where)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    found = [f"{s[:6]}… whole" for s in SECRETS if s in text]
    half = PIECE // 2
    for block in range(0, len(text) - half + 1, half):
        if text[block : block + half] in _BLOCKS:
            for at in range(max(0, block - half + 1), block + 1):
                name = _PIECES.get(text[at : at + PIECE])
                if name is not None:
                    found.append(f"{name} piece {text[at : at + PIECE]!r} at {at}")
    return found


def carrier(secret: str) -> str:
    """An answer body's text carrying `secret` encoded every way `encoded_forms` names, and
    inside longer base64 blobs at each alignment."""
    raw = secret.encode()
    basic = base64.b64encode(b"user:" + raw).decode()
    blobs = [base64.b64encode(os.urandom(lead) + raw + os.urandom(5)).decode() for lead in range(3)]
    urlsafe = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return (
        f"Authorization: Basic {basic}; retry https://api.example/?token={quote(secret, safe='')}"
        f"&next={quote_plus(secret)}; state={urlsafe}; blobs={' '.join(blobs)}"
    )


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
    sim.add_fault("run", 500, body={"error": " | ".join(map(carrier, SECRETS))})
    lifecycle(3, "success")  # the submit fails, its answer carrying every encoded form
    storm = sim.add_fault(
        "status", 500, times=None, body={"error": " | ".join(map(carrier, SECRETS))}
    )
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
    assert leaks(str(job_env))  # the scanner finds what is there, in each form
    assert all(
        leaks(carrier(secret)) and leaks(form[1:9])
        for secret in SECRETS
        for form in encoded_forms(secret).values()
    )

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


# --- a password in the store URL ---------------------------------------------------------------

PG_PASSWORD = "s3cretPassw0rd"


def password_leaks(text: str) -> list[str]:
    """The store password (or an 8-character piece of it) found in `text`."""
    return [
        piece
        for piece in {PG_PASSWORD[i : i + PIECE] for i in range(len(PG_PASSWORD) - PIECE + 1)}
        if piece in text
    ]


def cli_output(*args: str) -> tuple[int, str]:
    """Run the CLI; its exit code and everything it printed (stdout and stderr)."""
    from typer.testing import CliRunner

    from flashfsm.cli import app

    result = CliRunner().invoke(app, list(args))
    printed = result.output
    with contextlib.suppress(ValueError):
        printed += result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        printed += "".join(exception_texts(result.exception))
    return result.exit_code, printed


def test_the_cli_never_prints_a_store_password_when_the_server_is_unreachable() -> None:
    url = f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:1/test"
    runs = {
        "ls": cli_output("ls", "--store", url),
        "ls --json": cli_output("ls", "--store", url, "--json"),
        "replay": cli_output("replay", "job-x", "--store", url),
        "export": cli_output("export", "job-x", "--to", url),
        "bad parameter": cli_output("ls", "--store", f"{url}?pool_size=many"),
        "demo --reset": cli_output("demo", "--store", url, "--reset"),
        "keyword dsn": cli_output("ls", "--store", f"host=127.0.0.1 password={PG_PASSWORD}"),
    }
    assert all(code != 0 for code, _ in runs.values()), runs
    assert {name: out for name, (_, out) in runs.items() if password_leaks(out)} == {}
    assert "postgres:***@127.0.0.1:1/test" in runs["demo --reset"][1]  # still says which store
    assert "127.0.0.1" in runs["ls"][1]


def test_the_cli_never_prints_a_store_password_with_a_reachable_server() -> None:
    dsn = os.environ.get("FLASHFSM_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("FLASHFSM_TEST_POSTGRES_DSN not set: no Postgres server to try")
    import psycopg

    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    table = f"secret_probe_{os.urandom(4).hex()}"
    url = parts._replace(netloc=f"{user}:{PG_PASSWORD}@{host}").geturl()
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.skip(f"the test server refuses a password it does not know (no trust auth): {exc}")
    store_url = f"{url}{'&' if parts.query else '?'}table={table}"
    opened = open_store(store_url)  # the table is created; it stays empty
    assert PG_PASSWORD not in repr(opened)
    opened.close()
    try:
        runs = {
            "ls": cli_output("ls", "--store", store_url),
            "ls --json": cli_output("ls", "--store", store_url, "--json"),
            "replay": cli_output("replay", "job-missing", "--store", store_url),
            "missing table": cli_output("ls", "--store", f"{url}?table=no_{table}"),
        }
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    assert runs["ls"][0] == 0 and runs["replay"][0] != 0 and runs["missing table"][0] != 0
    assert {name: out for name, (_, out) in runs.items() if password_leaks(out)} == {}
    assert f"{user}:***@" in runs["ls"][1] and f"{user}:***@" in runs["replay"][1]
