"""`flashfsm simulator`: the simulator as a process another process's tests point at."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from flashfsm.adapters.simulator import DEFAULT_KEY, Simulator, builtin_scenarios, read_usage
from flashfsm.adapters.simulator.faults import KINDS
from flashfsm.adapters.simulator.serve import (
    FAULT_ROUTES,
    ServeOptions,
    parse_args,
    parse_fault,
    serve,
)
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.fsm.run import replay_run

KEY = "sk-test-123"
FLASHFSM = [sys.executable, "-c", "from flashfsm.cli import main; main()"]


def python_ok(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python *args` in a child process, which must exit 0 (else its stderr's tail says why)."""
    done = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


class Served:
    """A simulator command line in a subprocess: its printed exports and comment lines."""

    def __init__(self, argv: list[str], tmp_path: Path):
        self.err = open(tmp_path / "simulator.err", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self.err, text=True, cwd=tmp_path
        )
        self.env: dict[str, str] = {}
        self.comments: list[str] = []
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in self.proc.stdout:
            if line.startswith("export "):
                name, _, value = line[len("export ") :].rstrip("\n").partition("=")
                (self.env[name],) = shlex.split(value)  # what a shell would set
            elif line.startswith("#"):
                self.comments.append(line.rstrip("\n"))
                if line.startswith("# serving"):
                    break
            assert time.monotonic() < deadline
        else:
            self.stop()
            pytest.fail(f"the simulator exited: {(tmp_path / 'simulator.err').read_text()}")

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)  # Ctrl-C or SIGTERM: a clean stop
        try:
            code = self.proc.wait(timeout=20)
        finally:
            self.err.close()
        return code


CHILD = textwrap.dedent(
    """
    import json, sys
    from flashfsm import RunSpec, submit_run
    from flashfsm.adapters.hub import heartbeat_prefix, make_hf_heartbeat_reader

    spec = RunSpec(run_id="remote-1", gpu_class="A100-80GB", hf_repo="org/runs",
                   worker_image="team/trainer:3", max_wall_seconds=3600)
    result = submit_run(spec, 0, store=sys.argv[1], interval_s=1.0,
                        hub_options={"cache_dir": sys.argv[2]})
    prefix = heartbeat_prefix(spec.phase, spec.run_id, 0)
    beat = make_hf_heartbeat_reader(spec.hf_repo, prefix, cache_dir=sys.argv[2])(force=True)
    print(json.dumps({"state": result.state, "failure": result.failure,
                      "rule": result.rule, "ok": result.ok, "heartbeat": beat}))
    """
)


def test_a_second_process_runs_submit_run_to_a_verdict_against_the_printed_exports(tmp_path):
    """The acceptance test: the exports `flashfsm simulator` prints are all another
    process needs to deploy (runpod-flash), submit, watch and read the Hub against it."""
    served = Served(
        [*FLASHFSM, "simulator", "--port", "0", "--speed", "600", "--key", KEY], tmp_path
    )
    try:
        assert served.env["RUNPOD_API_KEY"] == KEY  # the real key it accepts, not a placeholder
        url = served.env["RUNPOD_API_BASE_URL"]
        assert served.env["HF_ENDPOINT"] == url and url.startswith("http://127.0.0.1:")
        assert served.env["RUNPOD_ENDPOINT_BASE_URL"] == f"{url}/v2"
        store = f"sqlite:///{tmp_path}/remote.db"
        child_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "HF_"))},
            **served.env,
            "HOME": str(tmp_path),
            "RUNPOD_FLASH_SILENCE_DEPRECATION": "1",
        }
        started = time.monotonic()
        child = python_ok(["-c", CHILD, store, str(tmp_path / "hf")], child_env, tmp_path, 120)
        assert time.monotonic() - started < 45
        verdict = json.loads(child.stdout.strip().splitlines()[-1])
        beat = verdict.pop("heartbeat")
        assert verdict == {"state": "SUCCEEDED", "failure": None, "rule": "completed", "ok": True}
        assert beat["stage"] == "done" and isinstance(beat["ts"], float)  # the Hub, remotely
        assert beat["metrics"]["reward"] == 0.82  # the worker's end record
        usage = read_usage(url)  # what the platform created and billed, read remotely
        [endpoint] = usage.endpoints  # one deploy, one submit, one worker that idled out
        assert endpoint.submitted == 1 and len(usage.workers) == 1
        [worker] = usage.workers
        assert (worker.endpoint_id, worker.job_id) == (endpoint.id, endpoint.jobs[0])
        assert worker.stop_reason == "idle timeout" and worker.stopped_at is not None
        assert usage.worker_seconds == worker.stopped_at - worker.started_at >= 90
    finally:
        assert served.stop() == 0
    opened = open_store(store)
    try:
        run = replay_run(opened.read("run-remote-1-s0-a0"))
        job = opened.read("job-remote-1-s0-a0")
    finally:
        opened.close()
    assert run.result is not None and run.result.ok and run.result.attempts == 1
    assert job[-1].kind == "Concluded" and job[-1].state == "SUCCEEDED"
    # what the watch read of the Hub was answered; whether it read at all, and found the
    # heartbeat, is a race at 600x: it reads on its first poll only (reads are paced every
    # 30 s), which may come before the simulated pickup writes the first heartbeat or
    # after the job completed (the child's own read above is the Hub's proof)
    assert all(e.read_error is None for e in job if e.kind == "HeartbeatObserved")


def test_a_wrong_key_is_refused_and_the_startup_lines_say_what_is_served(tmp_path):
    served = Served(
        [
            *FLASHFSM,
            "simulator",
            "--port",
            "0",
            "--speed",
            "0",
            "--key",
            KEY,
            "--key",
            "sk-test-456",
            "--fault",
            "health=503,times=1",
        ],
        tmp_path,
    )
    try:
        url = served.env["RUNPOD_API_BASE_URL"]
        assert served.env["RUNPOD_API_KEY"] == f"{KEY},sk-test-456"  # the pool, one per account
        with httpx.Client(base_url=url, timeout=10) as http:
            fault = http.get("/v2/x/health", headers={"Authorization": f"Bearer {KEY}"})
            wrong = http.get("/v2/x/health", headers={"Authorization": "Bearer sk-wrong"})
            after = http.get("/v2/x/health", headers={"Authorization": "Bearer sk-test-456"})
            clock = http.post("/_sim/clock", json={"advance": 60}).json()["now"]
            assert http.get("/_sim/clock").json()["now"] == clock  # manual: only moved by hand
        # the fault fires once; then the keys decide (the second account's key is one too)
        assert (fault.status_code, wrong.status_code, after.status_code) == (503, 401, 404)
        text = "\n".join(served.comments)
        assert "manual clock" in text and "POST /_sim/clock" in text and "GET /_sim/usage" in text
        assert f"{KEY}, sk-test-456" in text
        for name, scenario in builtin_scenarios().items():
            assert f"#   {name} " in text and scenario.description in text
        assert "health -> 503, 1 time(s)" in text
        for kind in KINDS - {"status"}:
            assert kind in text
    finally:
        assert served.stop() == 0


def test_python_m_delegates_with_the_same_options_and_bench_s_fleet(tmp_path):
    fleet_file = tmp_path / "fleet.jsonl"
    argv = [sys.executable, "-m", "flashfsm.adapters.simulator", "--port", "0", "--speed", "1"]
    argv += ["--scenario", "training", "--quota", "1000", "--fleet", "3", "--per-endpoint", "2"]
    served = Served([*argv, "--fleet-file", str(fleet_file)], tmp_path)
    try:
        assert served.env["RUNPOD_API_KEY"] == DEFAULT_KEY
        assert "# fleet: 3 jobs in " + str(fleet_file) in served.comments
        jobs = [json.loads(line) for line in fleet_file.read_text().splitlines()]
        assert [j["endpoint_name"] for j in jobs] == ["flash-fleet-0"] * 2 + ["flash-fleet-1"]
        url = served.env["RUNPOD_ENDPOINT_BASE_URL"]
        with httpx.Client(timeout=10, headers={"Authorization": DEFAULT_KEY}) as http:
            answer = http.get(f"{url}/{jobs[0]['endpoint_id']}/status/{jobs[0]['job_id']}")
        assert answer.json()["status"] in ("IN_QUEUE", "IN_PROGRESS")
    finally:
        assert served.stop(signal.SIGTERM) == 0


def test_both_command_lines_take_the_same_options():
    typer_help = CliRunner().invoke(app, ["simulator", "--help"], env={"COLUMNS": "200"})
    argparse_help = subprocess.run(
        [sys.executable, "-m", "flashfsm.adapters.simulator", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    options = [
        "--port",
        "--speed",
        "--scenario",
        "--key",
        "--quota",
        "--fleet",
        "--per-endpoint",
        "--fleet-file",
        "--fault",
    ]
    for option in options:
        assert option in typer_help.output and option in argparse_help, option
    for help_text in (typer_help.output, argparse_help):
        flat = " ".join(help_text.replace("│", " ").split())
        for name in builtin_scenarios():
            assert name in flat
        assert "status=429,times=3,retry_after=2" in flat
    assert parse_args(["--port", "0", "--key", "a", "--key", "b"]) == ServeOptions(
        port=0, keys=("a", "b")
    )


def test_bad_options_are_usage_errors_not_tracebacks():
    runner = CliRunner()
    for argv, message in (
        (["--scenario", "nope"], "unknown --scenario 'nope'"),
        (["--fault", "status"], "expected ROUTE=KIND"),
        (["--fault", "stauts=429"], "unknown route 'stauts'"),
        (["--fault", "status=gremlins"], "unknown fault kind"),
        (["--fault", "status=429,times=0"], "times must be >= 1"),
        (["--key", "a,b"], "without commas"),
        (["--speed", "-1"], "--speed must be >= 0"),
    ):
        result = runner.invoke(app, ["simulator", "--port", "0", *argv])
        assert result.exit_code == 1, (argv, result.output)
        assert message in result.output and "Traceback" not in result.output, argv
    with pytest.raises(SystemExit):
        parse_args(["--fleet", "-1"])


def test_a_taken_port_is_a_clear_error():
    with Simulator(speed=0) as busy:
        port = int(busy.url.rsplit(":", 1)[1])
        result = CliRunner().invoke(app, ["simulator", "--port", str(port)])
    assert result.exit_code == 1
    assert f"cannot serve on 127.0.0.1:{port}" in result.output


def test_parse_fault_reads_every_setting_and_knows_every_route():
    fault = parse_fault("graphql:saveEndpoint=rate_limit,times=always,after=2,retry_after=1.5")
    assert (fault.route, fault.kind, fault.status, fault.times, fault.after) == (
        "graphql:saveEndpoint",
        "status",
        429,
        None,
        2,
    )
    assert fault.retry_after == "1.5"
    slow = parse_fault("status=slow,delay_s=0.25,handled=1")
    assert (slow.kind, slow.delay_s, slow.handled, slow.times) == ("slow", 0.25, True, 1)
    # every route the server answers can be named (the generic names are split by method;
    # no fault fires on a control route)
    generic = {"endpoint", "networkvolumes", "networkvolume"}
    served = {name for _, plane, name, _ in Simulator._ROUTES if plane != "control"} - generic
    assert served <= set(FAULT_ROUTES)


def test_serve_in_process_injects_faults_and_stops_on_request():
    lines: list[str] = []
    stop = threading.Event()
    options = ServeOptions(port=0, speed=0, faults=("status=429,times=2,retry_after=3",))
    thread = threading.Thread(target=serve, args=(options, lines.append), kwargs={"stop": stop})
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not any(line.startswith("# serving") for line in lines):
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.01)
        env = dict(
            line[len("export ") :].split("=", 1) for line in lines if line.startswith("export ")
        )
        with httpx.Client(timeout=5, headers={"Authorization": DEFAULT_KEY}) as http:
            answers = [http.get(f"{env['RUNPOD_ENDPOINT_BASE_URL']}/e/status/j") for _ in range(3)]
        assert [a.status_code for a in answers] == [429, 429, 404]
        assert answers[0].headers["Retry-After"] == "3"
    finally:
        stop.set()
        thread.join(timeout=20)
    assert not thread.is_alive()
