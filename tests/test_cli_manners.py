"""The CLI's manners: what a new user meets when a path is mistyped or a log is odd.

Every command of `flashfsm.cli.COMMANDS` that reads a source or a store (all but `demo`,
`simulator`, `diagram` and `examples`; `sweep` for the cases about its store, with a fake key and a
RunPod that is a closed port on 127.0.0.1; `ui` for the cases about its store, as it serves a
good one until interrupted) is run on a missing store, an empty source, a
corrupt source and a source of the wrong kind. Each must exit with a documented code (a
`SystemExit`, never another exception), print exactly one line (stdout and stderr), no
traceback, and create or change nothing: the temporary directory's tree, with each entry's
size and mtime, is the same before and after. Then: times are measured on a log's own
clock, output fits 80 columns, help reads cleanly, every exit code is documented once, a
missing optional dependency names its extra, and `watch --follow` waits for a stream.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import (
    Candidate,
    EventStore,
    IdleSweeper,
    RunpodRunAdapters,
    supervise_run,
)
from flashfsm.adapters.jsonl import stream_file_name
from flashfsm.adapters.simulator import Simulator
from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import copy_streams, open_store
from flashfsm.cli import (
    APP_HELP,
    COMMANDS,
    EXIT_CODE_TABLE,
    EXIT_CODES,
    EXIT_USAGE,
    app,
    exit_codes_text,
)
from flashfsm.cli import common as cli_common
from flashfsm.errors import StoreNotFound
from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    CancelRequested,
    Concluded,
    Event,
    RunConcluded,
    RunStarted,
)
from flashfsm.runs import Deployed
from tests.sim_support import sync_client

runner = CliRunner()
#: Every exit code the help documents (`EXIT_CODE_TABLE`).
DOCUMENTED = {e.code for e in EXIT_CODE_TABLE}
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

RUN_ID = "demo-3f9a1c-crashloop"
RUN = f"run-{RUN_ID}-s2"  # realistic names: what `supervise_run` calls a seeded run's streams
JOB = f"job-{RUN_ID}-s2-a1"
FIRST_JOB = f"job-{RUN_ID}-s2-a0"
SWEEPER = "sweeper"
SIM_START = 1_000_000.0  # the simulator's clock: January 1970, years before the wall clock
Y2001 = 978_307_200.0  # 2001-01-01T00:00:00Z
FAKE_KEY = "rpa_FAKEKEYFORTHEMANNERSTEST0000"
#: `sweep` never reaches RunPod here: the hosts are a closed port on loopback.
SWEEP_ENV = {
    "RUNPOD_API_KEY": FAKE_KEY,
    "RUNPOD_API_BASE_URL": "http://127.0.0.1:9",
    "RUNPOD_ENDPOINT_BASE_URL": "http://127.0.0.1:9",
}


# --- logs ---------------------------------------------------------------------------------


def write_run(store: EventStore) -> None:
    """`supervise_run` on the simulator (clock at `SIM_START`): attempt 0 crash-loops on a
    fresh endpoint, attempt 1 succeeds. Streams `RUN`, `FIRST_JOB` and `JOB`."""
    with Simulator(clock=SimClock(speed=0, start=SIM_START)) as sim, sync_client(sim) as client:

        def deploy(run: Any, attempt: Any, record: Any) -> Deployed:
            scenario = ("crash_loop", "success")[min(attempt.started.attempt, 1)]
            name = attempt.started.endpoint_name
            return Deployed(sim.add_endpoint(name, scenario=scenario, check_quota=False), name)

        adapters = RunpodRunAdapters(
            client=client,
            deployer=deploy,
            job_input=lambda run, attempt: {"run_id": RUN_ID},
            budget_s=6 * 3600,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
        )
        supervise_run(
            RUN_ID,
            [Candidate(gpu_class="L40S", price_per_hour=0.99, vram_gb=48)],
            adapters,
            max_retries=2,
            seed=2,
            stream=RUN,
            store=store,
            clock=sim.clock.now,
            sleep=sim.clock.sleep,
        )


def write_sweeper(store: EventStore) -> None:
    """`IdleSweeper` over two sweeps on the simulator's clock: one idle timer running."""
    with Simulator(clock=SimClock(speed=0, start=SIM_START)) as sim, sync_client(sim) as client:
        endpoint = sim.add_endpoint("flash-demo-3f9a1c-idle", check_quota=False)
        sim.configure_endpoint(endpoint, idle=0, ready=0, running=0, initializing=0)
        sweeper = IdleSweeper(client, store, stream=SWEEPER, clock=sim.clock.now)
        sweeper.sweep(min_idle_s=600)
        sim.clock.advance(120)
        sweeper.sweep(min_idle_s=600)


def _event(cls: type, stream: str, seq: int, at: float, **fields: Any) -> Event:
    return cls(stream=stream, seq=seq, id=f"{stream}-{seq:04d}", at=at, **fields)


def hand_written_runs(store: EventStore) -> dict[FailureKind, str]:
    """Runs written by hand at 2001-01-01: one cancelled, one with no GPU to try."""
    cancelled, empty = "run-demo-3f9a1c-cancelled", "run-demo-3f9a1c-nogpu"
    candidates = (Candidate(gpu_class="L40S"),)
    store.append(
        cancelled,
        [
            _event(RunStarted, cancelled, 0, Y2001, run_id="cancelled", candidates=candidates),
            _event(CancelRequested, cancelled, 1, Y2001 + 60, by="ops", reason="enough"),
            _event(
                RunConcluded, cancelled, 2, Y2001 + 61, ok=False, failure="cancelled", detail="ops"
            ),
        ],
        0,
    )
    store.append(
        empty,
        [
            _event(RunStarted, empty, 0, Y2001, run_id="nogpu", candidates=()),
            _event(RunConcluded, empty, 1, Y2001 + 1, ok=False, failure="no_candidates"),
        ],
        0,
    )
    return {FailureKind.CANCELLED: cancelled, FailureKind.NO_CANDIDATES: empty}


@dataclass(frozen=True)
class Logs:
    """A SQLite store of realistic logs (closed cleanly: one file, no -wal)."""

    db: Path
    runs: dict[FailureKind, str]

    def copy_to(self, directory: Path, name: str = "events.db") -> str:
        """A copy of the store in `directory`; its URL."""
        shutil.copy(self.db, directory / name)
        return f"sqlite:///{directory / name}"

    def read(self, stream: str) -> list[Event]:
        """A stream of the store."""
        store = open_store(f"sqlite:///{self.db}", read_only=True)
        try:
            return store.read(stream)
        finally:
            store.close()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Logs:
    db = tmp_path_factory.mktemp("logs") / "events.db"
    store = SqliteStore(db)
    try:
        write_run(store)
        write_sweeper(store)
        runs = hand_written_runs(store)
    finally:
        store.close()
    assert {p.name for p in db.parent.iterdir()} == {"events.db"}
    return Logs(db, runs)


@pytest.fixture(autouse=True)
def console_width() -> Iterator[None]:
    """The consoles measure the width each command runs at ($COLUMNS, else unbounded)."""
    consoles = (cli_common.console, cli_common.err_console)
    saved = [c.set_width for c in consoles]
    for c in consoles:
        c.width = None
    yield
    for c, width in zip(consoles, saved, strict=True):
        c.width = width


# --- the tree a command must not touch ----------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[bool, int, int]]:
    """Every entry under `root` (itself included): directory or not, size, mtime in ns."""
    tree = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        tree[str(path.relative_to(root))] = (path.is_dir(), st.st_size, st.st_mtime_ns)
    return tree


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    """Run the command line; a Python exception other than an exit fails the test."""
    result = runner.invoke(app, args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    return result


def assert_one_line(result: Any, args: list[str]) -> str:
    """The command printed exactly one line (stdout and stderr), no traceback, no key."""
    lines = result.output.splitlines()
    assert len(lines) == 1, (args, result.output)
    assert "Traceback" not in result.output and FAKE_KEY not in result.output
    return lines[0]


# --- the cases ----------------------------------------------------------------------------


@dataclass
class Place:
    """Where a case happens: its directory, holding a copy of the logs' store (`good.db`)."""

    root: Path

    @property
    def good_store(self) -> str:
        """The URL of the copy of the logs' store in the directory."""
        return f"sqlite:///{self.root / 'good.db'}"


@dataclass(frozen=True)
class Case:
    """One bad input: a store to read (`store`) or a source file (`file`), made in a place."""

    name: str
    family: str  # missing store | empty source | corrupt source | wrong kind
    make: Callable[[Place], str]  # makes what the case needs; returns the store URL or file
    file: bool = False  # a SOURCE file rather than a store
    stream: str = JOB  # the stream a store case names
    store_error: bool = True  # the store itself is bad (sweep is run on these)
    listable: bool = False  # `ls` lists it fine: an empty store (one line, exit 0)
    only: tuple[str, ...] = ()  # the commands it is for (default: all that apply)


def _garbage(place: Place, name: str) -> Path:
    path = place.root / name
    path.write_bytes(bytes(range(256)) * 12 + b"\n\xff\xfe not json\n{]\n")
    return path


def _truncated(place: Place) -> str:
    """A real store cut after its first page: the schema is there, the events are not."""
    path = place.root / "truncated.db"
    data = (place.root / "good.db").read_bytes()
    page = int.from_bytes(data[16:18], "big")
    path.write_bytes(data[:page])
    return f"sqlite:///{path}"


def _empty_db(place: Place) -> str:
    (place.root / "empty.db").touch()  # what `sqlite3.connect` leaves: an empty database
    return f"sqlite:///{place.root / 'empty.db'}"


def _store_without_events(place: Place) -> str:
    SqliteStore(place.root / "fresh.db").close()
    return f"sqlite:///{place.root / 'fresh.db'}"


def _other_database(place: Place) -> str:
    """Another program's SQLite database: a database, not a flashfsm store."""
    conn = sqlite3.connect(place.root / "other.db")
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    return f"sqlite:///{place.root / 'other.db'}"


def _png(place: Place) -> str:
    path = place.root / "picture.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10" + bytes(64))
    return str(path)


def _directory(place: Place, name: str) -> Path:
    (place.root / name).mkdir()
    return place.root / name


CASES = [
    Case(
        "sqlite file in a missing directory",
        "missing store",
        lambda p: f"sqlite:///{p.root}/no-such-dir/events.db",
    ),
    Case(
        "jsonl directory that does not exist",
        "missing store",
        lambda p: f"jsonl:///{p.root}/no-such-dir/logs",
    ),
    Case("missing .jsonl file", "missing store", lambda p: f"{p.root}/{JOB}.jsonl", file=True),
    Case(
        "empty .jsonl file",
        "empty source",
        lambda p: str((p.root / "job-empty.jsonl").touch() or p.root / "job-empty.jsonl"),
        file=True,
    ),
    Case("empty SQLite database", "empty source", _empty_db, store_error=False, listable=True),
    Case(
        "store without events",
        "empty source",
        _store_without_events,
        store_error=False,
        listable=True,
    ),
    Case(
        "stream that does not exist",
        "empty source",
        lambda p: p.good_store,
        stream="job-demo-3f9a1c-nosuch-s2-a0",
        store_error=False,
    ),
    Case(
        "garbage bytes in a .jsonl",
        "corrupt source",
        lambda p: str(_garbage(p, f"{JOB}.jsonl")),
        file=True,
    ),
    Case("not a database", "corrupt source", lambda p: f"sqlite:///{_garbage(p, 'events.db')}"),
    Case("truncated database", "corrupt source", _truncated),
    Case(
        "directory given as a .jsonl file",
        "wrong kind",
        lambda p: str(_directory(p, f"{JOB}.jsonl")),
        file=True,
    ),
    Case(
        "directory given as a SQLite file",
        "wrong kind",
        lambda p: f"sqlite:///{_directory(p, 'events.db')}",
    ),
    Case(
        "file given as a JSONL directory", "wrong kind", lambda p: f"jsonl:///{_garbage(p, 'logs')}"
    ),
    Case("PNG file as a .jsonl", "wrong kind", _png, file=True),
    Case("another program's SQLite database", "wrong kind", _other_database),
    Case("unknown store URL scheme", "wrong kind", lambda p: "mysql://127.0.0.1:1/db"),
    Case("bare path given as a store URL", "wrong kind", lambda p: str(p.root / "good.db")),
    Case(
        "sweeper stream to a job-only command",
        "wrong kind",
        lambda p: p.good_store,
        stream=SWEEPER,
        store_error=False,
        only=("why-not", "whatif", "cost", "logs"),
    ),
]

#: The commands that read a source or a store (`demo`, `simulator`, `diagram` and `examples`
#: bring their own; `supervise` and `runs` are a fleet's writers: tests/test_fleet.py).
OWN_INPUT = ("demo", "simulator", "diagram", "examples", "supervise", "runs")
READERS = [name for name, _ in COMMANDS if name not in OWN_INPUT]


def command_line(command: str, case: Case, target: str, place: Place) -> list[str] | None:
    """`command` run on what `case` made (`target`), or None where the case does not apply."""
    if case.only and command not in case.only:
        return None
    out_svg = str(place.root / "picture.svg")
    export_to = f"jsonl:///{place.root}/exported"
    import_into = f"sqlite:///{place.root}/imported.db"
    if case.file:  # a SOURCE file: the commands that take one, and watch/export by its name
        return {
            "replay": ["replay", target],
            "explain": ["explain", target],
            "why-not": ["why-not", target, "stall"],
            "whatif": ["whatif", target, "--set", "queue_grace_s=600"],
            "cost": ["cost", target],
            "timeline": ["timeline", target, "--out", out_svg],
            "watch": ["watch", target, "--store", place.good_store],
            "export": ["export", target, "--store", place.good_store, "--to", export_to],
            "import": ["import", target, "--store", import_into],
            "logs": ["logs", target],
        }.get(command)
    if command == "sweep":
        return ["sweep", "--store", target] if case.store_error else None
    if command == "ui":  # (a good store would be served until interrupted)
        return ["ui", "--store", target, "--port", "0"] if case.store_error else None
    if command == "ls":
        return None if case.stream != JOB and not case.store_error else ["ls", "--store", target]
    if command == "import":
        return ["import", target, case.stream, "--store", import_into]
    line = {
        "replay": ["replay", case.stream],
        "explain": ["explain", case.stream],
        "why-not": ["why-not", case.stream, "stall"],
        "whatif": ["whatif", case.stream],
        "cost": ["cost", case.stream],
        "timeline": ["timeline", case.stream, "--out", out_svg],
        "watch": ["watch", case.stream],
        "export": ["export", case.stream, "--to", export_to],
        "logs": ["logs", case.stream],
    }[command]
    return [*line, "--store", target]


def applies(command: str, case: Case) -> bool:
    """Whether `case` is one `command` meets (a command line exists for it)."""
    return command_line(command, case, "x", Place(Path("/nonexistent"))) is not None


#: Every (reader, case) pair that applies: a pair that does not is not generated at all.
MATRIX = [
    pytest.param(command, case, id=f"{command}-{case.family}: {case.name}")
    for case in CASES
    for command in READERS
    if applies(command, case)
]


@pytest.mark.parametrize(("command", "case"), MATRIX)
def test_a_bad_input_is_one_line_a_documented_exit_and_nothing_is_touched(
    logs: Logs, tmp_path: Path, case: Case, command: str
) -> None:
    logs.copy_to(tmp_path, "good.db")  # any case may name it; it must not change either
    place = Place(tmp_path)
    target = case.make(place)
    args = command_line(command, case, target, place)
    assert args is not None
    env = {"FLASHFSM_STORE": f"sqlite:///{tmp_path}/default-store/events.db"}
    if command == "sweep":
        env |= SWEEP_ENV
    before = snapshot(tmp_path)
    result = invoke(args, env=env)
    line = assert_one_line(result, args)
    assert result.exit_code in DOCUMENTED
    if case.listable and command == "ls":
        assert result.exit_code == 0 and line.endswith(": no streams")
    else:
        assert result.exit_code == EXIT_USAGE, (args, result.output)
        assert line.startswith("error: ")
    assert "None" not in line  # `stream None`: an error names what it read
    assert snapshot(tmp_path) == before, (args, result.output)


def test_every_reader_meets_every_case_family() -> None:
    """The matrix is not empty anywhere: each reader sees each family of bad input."""
    every = {"missing store", "empty source", "corrupt source", "wrong kind"}
    for command in READERS:
        families = {case.family for case in CASES if applies(command, case)}
        # sweep writes its store and ui serves a good one until interrupted: they meet the
        # cases where the store itself is bad
        only_store = command in ("sweep", "ui")
        assert families == (every - {"empty source"} if only_store else every), command


def test_watch_follow_on_a_missing_store_is_still_an_error(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    args = ["watch", JOB, "--follow", "--store", f"sqlite:///{tmp_path}/nope/events.db"]
    result = invoke(args)
    assert result.exit_code == EXIT_USAGE
    assert assert_one_line(result, args) == f"error: no SQLite store at {tmp_path}/nope/events.db"
    assert snapshot(tmp_path) == before


# --- reading creates and changes nothing --------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["replay", RUN, "--verify"],
        ["replay", JOB, "--full"],
        ["explain", RUN],
        ["why-not", JOB, "stall"],
        ["whatif", JOB, "--set", "stall_after_s=60"],
        ["whatif", "--all", "--set", "stall_after_s=60"],
        ["cost"],
        ["cost", RUN, "--json"],
        ["watch", RUN, "--read-only"],
        ["watch", SWEEPER, "--json"],
        ["ls", "--json"],
    ],
    ids=lambda a: " ".join(a),
)
@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
def test_reading_a_good_store_changes_nothing(
    logs: Logs, tmp_path: Path, args: list[str], scheme: str
) -> None:
    url = logs.copy_to(tmp_path)
    if scheme == "jsonl":
        copy_streams(url, f"jsonl:///{tmp_path}/logs")
        (tmp_path / "events.db").unlink()
        url = f"jsonl:///{tmp_path}/logs"
    before = snapshot(tmp_path)
    result = invoke([*args, "--store", url])
    assert result.exit_code in DOCUMENTED and result.output.strip()
    assert snapshot(tmp_path) == before


def test_a_reader_joins_a_live_writer_without_creating_files(logs: Logs, tmp_path: Path) -> None:
    """With a writer open (WAL: its -wal and -shm exist), the reader sees the commits that
    are still only in the -wal, and creates no file of its own."""
    url = logs.copy_to(tmp_path)
    writer = open_store(url)
    try:
        events = logs.read(FIRST_JOB)
        writer.append("job-live", _shifted(events, "job-live", 0.0, open_=False), 0)
        assert (tmp_path / "events.db-wal").exists()
        names = sorted(p.name for p in tmp_path.iterdir())
        data = (tmp_path / "events.db").read_bytes()
        result = invoke(["replay", "job-live", "--store", url, "--json"])
        assert result.exit_code == EXIT_CODES["stalled"], result.output
        assert json.loads(result.stdout)["events"] == len(events)
        assert sorted(p.name for p in tmp_path.iterdir()) == names
        assert (tmp_path / "events.db").read_bytes() == data
    finally:
        writer.close()


def test_a_torn_jsonl_stream_is_read_not_cut_and_warned_about_once(
    logs: Logs, tmp_path: Path
) -> None:
    copy_streams(f"sqlite:///{logs.db}", f"jsonl:///{tmp_path}/logs", [JOB])
    path = tmp_path / "logs" / stream_file_name(JOB)
    with path.open("ab") as f:
        f.write(b'{"stream": "job-demo')  # a crash mid-append
    before = snapshot(tmp_path)
    for args in (["replay", JOB, "--store", f"jsonl:///{tmp_path}/logs"], ["replay", str(path)]):
        result = invoke(args)
        assert result.exit_code == 0, result.output
        warnings = [line for line in result.stderr.splitlines() if "torn" in line]
        assert len(warnings) == 1 and warnings[0].startswith("warning: ")
        assert "jsonl.py" not in result.output and "TornLineWarning" not in result.output
    assert snapshot(tmp_path) == before  # the torn line is still there; no lock file made


def test_the_library_opens_a_store_read_only_or_says_it_is_missing(tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path}/a/b.db", f"jsonl:///{tmp_path}/a/b"):
        with pytest.raises(StoreNotFound, match=str(tmp_path / "a" / "b")):
            open_store(url, read_only=True)
    assert list(tmp_path.iterdir()) == []
    SqliteStore(tmp_path / "e.db").close()
    store = open_store(f"sqlite:///{tmp_path}/e.db", read_only=True)
    with pytest.raises(Exception, match="read-only"):
        store.append("s", [], 0)
    store.close()


# --- time on the log's own clock ----------------------------------------------------------

NEGATIVE = re.compile(r"(?<![\w+])-\d+(\.\d+)? (s|min|h)\b")
#: Elapsed times a wall clock decades away from the log would give: 1000 h and more.
SKEWED = re.compile(r"\b\d{4,} h\b")


def _texts(result: Any) -> None:
    assert not NEGATIVE.search(result.output), result.output
    assert not SKEWED.search(result.output), result.output


def test_a_finished_log_from_long_ago_is_measured_on_its_own_clock(logs: Logs) -> None:
    url = f"sqlite:///{logs.db}"
    job = logs.read(JOB)
    assert job[-1].at < time.time() - 10 * 365 * 86400  # the simulator's 1970
    out = json.loads(invoke(["watch", JOB, "--store", url, "--json"]).stdout)
    assert out["now"] == job[-1].at and out["quiet_s"] == 0
    assert 0 <= out["in_state_s"] <= job[-1].at - job[0].at
    run = json.loads(invoke(["watch", RUN, "--store", url, "--json"]).stdout)
    assert run["job"]["now"] == job[-1].at and run["job"]["quiet_s"] == 0
    rows = {
        r["stream"]: r
        for r in json.loads(invoke(["ls", "--store", url, "--json"]).stdout)["streams"]
    }
    for stream in (JOB, RUN, SWEEPER, logs.runs[FailureKind.CANCELLED]):
        events = logs.read(stream)
        assert rows[stream]["span_s"] == pytest.approx(events[-1].at - events[0].at)
    for args in (["watch", JOB], ["watch", RUN], ["ls"], ["replay", RUN], ["explain", JOB]):
        _texts(invoke([*args, "--store", url], env={"COLUMNS": "200"}))


def _shifted(events: list[Event], stream: str, by: float, *, open_: bool) -> list[Event]:
    """`events` as stream `stream` (new ids), `by` seconds later (every time in them); without
    their verdict when `open_`."""
    kept = [e for e in events if not (open_ and isinstance(e, Concluded))]
    out = []
    for e in kept:
        update: dict[str, Any] = {"stream": stream, "at": e.at + by, "id": f"{stream}-{e.seq:04d}"}
        if getattr(e, "since", None) is not None:
            update["since"] = e.since + by  # type: ignore[attr-defined]
        out.append(e.model_copy(update=update))
    return out


def test_a_live_log_ahead_of_the_wall_clock_never_shows_a_negative_time(
    logs: Logs, tmp_path: Path
) -> None:
    """A simulator that ran ahead: its open log's events lie in the future."""
    job = logs.read(JOB)
    ahead = time.time() + 86_400 - job[0].at
    url = f"sqlite:///{tmp_path}/ahead.db"
    store = open_store(url)
    store.append("job-ahead", _shifted(job, "job-ahead", ahead, open_=True), 0)
    store.append(SWEEPER, _shifted(logs.read(SWEEPER), SWEEPER, ahead, open_=False), 0)
    store.close()
    out = json.loads(invoke(["watch", "job-ahead", "--store", url, "--json"]).stdout)
    assert out["verdict"] is None and out["quiet_s"] == 0 and out["in_state_s"] >= 0
    sweeper = json.loads(invoke(["watch", SWEEPER, "--store", url, "--json"]).stdout)
    assert sweeper["quiet_s"] == 0 and all(t["idle_s"] >= 0 for t in sweeper["timers"])
    rows = json.loads(invoke(["ls", "--store", url, "--json"]).stdout)["streams"]
    assert all(r["span_s"] >= 0 for r in rows)
    for args in (["watch", "job-ahead"], ["watch", SWEEPER], ["ls"]):
        _texts(invoke([*args, "--store", url], env={"COLUMNS": "200"}))


def test_an_open_log_is_viewed_at_the_later_of_the_wall_clock_and_its_last_event(
    logs: Logs, tmp_path: Path
) -> None:
    """`--now` stands for the wall clock: an open log of 2001 is viewed then; a finished
    one at its last event whatever `--now` says."""
    job = logs.read(JOB)
    url = f"sqlite:///{tmp_path}/y2001.db"
    store = open_store(url)
    store.append("job-open", _shifted(job, "job-open", Y2001 - job[0].at, open_=True), 0)
    store.append("job-done", _shifted(job, "job-done", Y2001 - job[0].at, open_=False), 0)
    store.close()
    last_open = max(e.at for e in job if not isinstance(e, Concluded)) + Y2001 - job[0].at
    later = last_open + 42
    out = json.loads(
        invoke(["watch", "job-open", "--store", url, "--json", "--now", str(later)]).stdout
    )
    assert out["now"] == later and out["quiet_s"] == pytest.approx(42)
    earlier = json.loads(
        invoke(["watch", "job-open", "--store", url, "--json", "--now", str(Y2001)]).stdout
    )
    assert earlier["now"] == last_open and earlier["quiet_s"] == 0
    done = json.loads(
        invoke(["watch", "job-done", "--store", url, "--json", "--now", str(later + 1e6)]).stdout
    )
    assert done["now"] == job[-1].at + Y2001 - job[0].at and done["quiet_s"] == 0


# --- exit codes ---------------------------------------------------------------------------


def test_every_failure_kind_has_an_exit_code_of_its_own_in_the_one_table() -> None:
    kinds = {str(k) for k in FailureKind}
    assert {str(k) for k in EXIT_CODES if k is not None} == kinds
    codes = [e.code for e in EXIT_CODE_TABLE]
    assert len(codes) == len(set(codes)) and codes == sorted(codes)
    assert {e.name: e.code for e in EXIT_CODE_TABLE if e.name in kinds} == {
        str(k): c for k, c in EXIT_CODES.items() if k is not None
    }
    assert EXIT_USAGE not in {c for k, c in EXIT_CODES.items() if k is not None}
    assert exit_codes_text() in APP_HELP


@pytest.mark.parametrize("kind", [FailureKind.CANCELLED, FailureKind.NO_CANDIDATES])
@pytest.mark.parametrize("command", ["replay", "explain", "watch"])
def test_a_cancelled_run_and_a_run_without_candidates_exit_with_their_own_codes(
    logs: Logs, kind: FailureKind, command: str
) -> None:
    result = invoke([command, logs.runs[kind], "--store", f"sqlite:///{logs.db}"])
    assert result.exit_code == EXIT_CODES[kind] not in (EXIT_USAGE, 0), result.output
    label = {
        FailureKind.CANCELLED: "CANCELLED",
        FailureKind.NO_CANDIDATES: "FAILED (no_candidates)",
    }
    assert f"{logs.runs[kind]}: {label[kind]}" in result.output


# --- help, version, width -----------------------------------------------------------------


def test_version_prints_the_installed_version() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0 and result.output == f"flashfsm {version('flashfsm')}\n"


@pytest.mark.parametrize("command", [None, *(name for name, _ in COMMANDS)])
def test_help_reads_cleanly_in_80_columns(command: str | None) -> None:
    args = ["--help"] if command is None else [command, "--help"]
    result = invoke(args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert not re.search(r"<(bool|str|int|float|path|list\[\w+\])>", text), text
    usage = text.splitlines()[0]
    assert usage.startswith("Usage: flashfsm") and not re.search(r"[{}<>]", usage), usage
    if command is None:
        for e in EXIT_CODE_TABLE:  # the table, as its lines
            assert re.search(rf"^\s*{e.code}\s+{e.name}\s+{re.escape(e.meaning)}$", text, re.M)
        assert "--version" in text


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["replay", RUN],
        ["replay", JOB, "--full"],
        ["replay", FIRST_JOB, "--verify"],
        ["explain", RUN],
        ["explain", FIRST_JOB],
        ["why-not", FIRST_JOB, "stall"],
        ["whatif", FIRST_JOB, "--set", "unhealthy_grace_s=600"],
        ["whatif", "--all", "--set", "unhealthy_grace_s=600"],
        ["cost"],
        ["cost", RUN],
        ["watch", RUN],
        ["watch", SWEEPER],
        ["replay", SWEEPER],
        ["explain", SWEEPER],
        ["replay", "run-demo-3f9a1c-cancelled"],
    ],
    ids=lambda a: " ".join(a),
)
def test_output_fits_80_columns(logs: Logs, args: list[str], tmp_path: Path) -> None:
    result = invoke([*args, "--store", f"sqlite:///{logs.db}"], env={"COLUMNS": "80"})
    assert result.exit_code in DOCUMENTED and result.output.strip()
    long = [line for line in result.output.splitlines() if len(line) > 80]
    assert not long, result.output


def test_ls_keeps_each_stream_on_one_line_at_80_columns(logs: Logs) -> None:
    result = invoke(["ls", "--store", f"sqlite:///{logs.db}"], env={"COLUMNS": "80"})
    lines = result.output.splitlines()
    for stream in (RUN, JOB, FIRST_JOB, SWEEPER):
        [line] = [line for line in lines if line.split()[:1] == [stream]]
        assert len(line) <= 80
    [header] = [line for line in lines if line.startswith("stream ")]
    assert "state" in header and "verdict" in header
    wide = invoke(["ls", "--store", f"sqlite:///{logs.db}"], env={"COLUMNS": "200"})
    assert {"kind", "span", "events"} <= set(wide.output.split())


# --- optional dependencies ----------------------------------------------------------------


def _extras() -> dict[str, list[str]]:
    return tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]


def test_a_missing_psycopg_names_the_postgres_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert any(dep.startswith("psycopg") for dep in _extras()["postgres"])
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "flashfsm.adapters.postgres", raising=False)
    args = ["ls", "--store", "postgresql://flashfsm@127.0.0.1:1/none"]
    result = invoke(args)
    assert result.exit_code == EXIT_USAGE
    assert assert_one_line(result, args) == (
        "error: the postgres store needs psycopg 3: pip install 'flashfsm[postgres]'"
    )


def test_submit_run_without_runpod_flash_names_the_deploy_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Checked before anything is opened or recorded; the SDK's own import says so too."""
    from flashfsm import submit_run
    from flashfsm.adapters import flash_deploy
    from tests.test_submit import spec

    assert any(dep.startswith("runpod-flash") for dep in _extras()["deploy"])
    monkeypatch.setitem(sys.modules, "runpod", None)
    monkeypatch.setattr(flash_deploy, "_sdk", None)
    hint = re.escape("pip install 'flashfsm[deploy]'")
    with pytest.raises(ImportError, match=hint) as raised:
        submit_run(spec(run_id="nodeps"), 0, store=f"sqlite:///{tmp_path}/events.db")
    assert "No module named 'runpod'" in str(raised.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ImportError, match=hint):
        flash_deploy.load_sdk()


def test_every_install_hint_names_an_extra_that_brings_the_module() -> None:
    """The hints in the source name extras of pyproject.toml holding what they import."""
    extras = _extras()
    root = Path(__file__).resolve().parents[1] / "flashfsm"
    hinted = set()
    for path in root.rglob("*.py"):
        hinted |= set(re.findall(r"pip install 'flashfsm\[(\w+)\]'", path.read_text()))
    assert {"postgres", "deploy"} <= hinted  # (and the integrations' own, each an extra)
    assert hinted <= set(extras)


# --- watch --follow -----------------------------------------------------------------------


def test_watch_follow_waits_for_a_stream_that_is_not_there_yet(logs: Logs, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/events.db"
    SqliteStore(tmp_path / "events.db").close()  # the store exists; the stream not yet
    events = logs.read(FIRST_JOB)
    started = threading.Event()

    def write() -> None:
        started.wait(5)
        time.sleep(0.1)
        store = open_store(url)
        try:
            for event in events:
                store.append(FIRST_JOB, [event], event.seq)
        finally:
            store.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        started.set()
        args = ["watch", FIRST_JOB, "--store", url, "--follow", "--json", "--poll-s", "0.01"]
        result = invoke(args)
    finally:
        writer.join()
    assert result.exit_code == EXIT_CODES["stalled"], result.output
    assert result.stderr == f"waiting for stream {FIRST_JOB} to appear in {url} (Ctrl-C stops)\n"
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[-1]["verdict"]["rule"] == "unhealthy_worker"
    assert lines[-1]["events"] == len(events)


def test_watch_without_follow_does_not_wait(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "events.db").close()
    args = ["watch", JOB, "--store", f"sqlite:///{tmp_path}/events.db"]
    result = invoke(args)
    assert result.exit_code == EXIT_USAGE
    assert "empty or missing" in assert_one_line(result, args)


# --- Postgres -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_postgres_reader_creates_no_table_and_reads_an_existing_one(logs: Logs) -> None:
    import uuid

    import psycopg

    from tests.store_support import drop_table, postgres_dsn

    dsn = postgres_dsn()
    if dsn is None:
        pytest.skip("FLASHFSM_TEST_POSTGRES_DSN not set")
    table = f"flashfsm_test_{uuid.uuid4().hex[:16]}"
    url = f"{dsn}{'&' if '?' in dsn else '?'}table={table}"

    def exists() -> bool:
        with psycopg.connect(dsn) as conn:
            return conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None

    try:
        args = ["ls", "--store", url]
        result = invoke(args)
        assert result.exit_code == EXIT_USAGE
        assert assert_one_line(result, args).startswith("error: no flashfsm store at postgres ")
        assert f"table {table}" in result.output and not exists()
        copy_streams(f"sqlite:///{logs.db}", url, [JOB])
        out = json.loads(invoke(["ls", "--store", url, "--json"]).stdout)
        assert [row["stream"] for row in out["streams"]] == [JOB]
        reader = open_store(url, read_only=True)
        try:
            assert [e.id for e in reader.read(JOB)] == [e.id for e in logs.read(JOB)]
            with pytest.raises(Exception, match="read-only"):
                reader.append(JOB, [], 0)
        finally:
            reader.close()
    finally:
        drop_table(dsn, table)


def test_an_unreachable_postgres_is_one_line_without_the_password() -> None:
    args = ["ls", "--store", "postgresql://flashfsm:s3cretpassw0rd@127.0.0.1:1/none"]
    result = invoke(args)
    assert result.exit_code == EXIT_USAGE
    line = assert_one_line(result, args)
    assert line.startswith("error: cannot connect to postgres 127.0.0.1:1/none")
    assert "s3cretpassw0rd" not in result.output
