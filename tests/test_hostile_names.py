"""Hostile names and options are refused where they enter, in one line (issue 38, point 6).

- A stream name holding a control character (a line feed, an escape, U+0085, U+2028, a
  bidirectional override) was listed by `ls` and the view while its pages answered 404:
  every entry that names a stream (`hand_off_job`, `runs add`, `supervise_run`,
  `asupervise_run`, `submit_run`, `poll_job`, a `JobSpec`, the sweeper) refuses it through
  one check (`flashfsm.naming.check_stream`), naming the character escaped, before anything
  is opened or recorded.
- `flashfsm supervise --owner` (and `Fleet(owner=…)`) refuses a control character, which
  forged the replica's log lines.
- `runs add` of a job id a stream already records on another endpoint exited 0 and recorded
  nothing: it is one line naming both endpoints, exit 1; the same job on the same endpoint
  added again stays a no-op (exit 0).
- Every numeric store option is bounded below as well as above (`idle_in_transaction_s=1e-9`
  crashed `supervise` on PostgreSQL with a traceback; `busy_timeout_s=1e-9`,
  `connect_timeout=inf`, `pool_size=0` by keyword, an option on `memory://` were taken), one
  line naming the option and its range.

Each test fails on 5662aee's code.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashfsm import JobHandle, poll_job
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import open_store
from flashfsm.cli import app
from flashfsm.cli.common import EXIT_USAGE
from flashfsm.events.models import Candidate
from flashfsm.fleet import Fleet, hand_off_job
from flashfsm.naming import check_stream
from flashfsm.runs import supervise_run
from flashfsm.submit import RunSpec, submit_run
from flashfsm.supervisor import JobSpec
from flashfsm.sweeper import IdleSweeper
from tests.store_support import PG_ENV, make_backend, postgres_dsn, run_cleanups

#: One of each kind of character no name holds: C0 (a line feed, an escape), DEL, C1 (NEXT
#: LINE, which splits lines too), a line separator, a bidirectional override, a zero-width
#: joiner.
HOSTILE_CHARS = ["\n", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\u200d"]
NO_POSTGRES = f"{PG_ENV} not set"


def _hostile(text: str) -> str:
    """The first of `HOSTILE_CHARS` in `text` (the test's own look, not the library's)."""
    return next(c for c in text if c in HOSTILE_CHARS)


def _named(char: str) -> str:
    """How an error names `char`: its code point and its escape (`U+000A '\\n'`)."""
    return f"U+{ord(char):04X} {char!r}"


class _Stop(BaseException):
    """Ends a call these tests never want to get that far (no `except Exception` takes it)."""


def _stop(*_args: Any, **_kwargs: Any) -> Any:
    raise _Stop


async def _astop(*_args: Any, **_kwargs: Any) -> Any:
    raise _Stop


class _NoCalls:
    """A client, adapters or deployer every call of which stops the test's call."""

    providers = ("runpod",)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return _stop


def _refused(enter: Callable[[str], Any], bad: str) -> str:
    """The one-line error `enter(bad)` raises: it names the character escaped, never raw."""
    with pytest.raises(ValueError) as caught:
        enter(bad)
    text = str(caught.value)
    char = _hostile(bad)
    assert _named(char) in text, text
    assert char not in text and len(text.splitlines()) == 1, text
    return text


# --- a) stream names: every entry, one check -------------------------------------------------


async def _asupervise(store: SqliteStore, run_id: str) -> Any:
    from flashfsm.runs import asupervise_run

    candidates = [Candidate(gpu_class="L4")]
    return await asupervise_run(run_id, candidates, _NoCalls(), store=store, sleep=_astop)


#: Every way a stream name (or an id a stream is named from) enters, given the store and a
#: hostile id `bad`; each must refuse it before it opens or records anything.
ENTRIES: dict[str, Callable[[SqliteStore, str], Any]] = {
    "hand_off_job stream=": lambda store, bad: hand_off_job(
        {"endpoint_id": "ep", "job_id": "j"}, store, stream=f"job-{bad}"
    ),
    "hand_off_job job_id": lambda store, bad: hand_off_job(
        {"endpoint_id": "ep", "job_id": bad}, store
    ),
    "supervise_run run_id": lambda store, bad: supervise_run(
        bad,
        [Candidate(gpu_class="L4")],
        _NoCalls(),
        store=store,
        sleep=_stop,
        capacity_memory=False,
    ),
    "supervise_run stream=": lambda store, bad: supervise_run(
        "r", [Candidate(gpu_class="L4")], _NoCalls(), store=store, stream=f"run-{bad}", sleep=_stop
    ),
    "asupervise_run run_id": lambda store, bad: asyncio.run(_asupervise(store, bad)),
    "poll_job stream=": lambda store, bad: poll_job(
        {"endpoint_id": "ep", "job_id": "j"},
        client=_NoCalls(),
        store=store,
        stream=f"job-{bad}",
        sleep=_stop,
    ),
    "poll_job job_id": lambda store, bad: poll_job(
        {"endpoint_id": "ep", "job_id": bad}, client=_NoCalls(), store=store, sleep=_stop
    ),
    "JobSpec stream=": lambda store, bad: JobSpec(JobHandle("ep", "e", "j"), stream=f"job-{bad}"),
    "JobSpec job_id": lambda store, bad: JobSpec(JobHandle("ep", "e", bad)),
    "submit_run run_stream=": lambda store, bad: submit_run(
        RunSpec(run_id="r", gpu_class="L4"),
        1,
        client=_NoCalls(),
        store=store,
        run_stream=f"run-{bad}",
        deployer=_stop,
        sleep=_stop,
    ),
    "IdleSweeper stream=": lambda store, bad: IdleSweeper(
        _NoCalls(),  # type: ignore[arg-type]
        store,
        stream=f"sweeper-{bad}",
    ),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_stream_name_with_a_control_character_is_refused_at_every_entry(
    tmp_path: Path, entry: str
):
    with SqliteStore(tmp_path / "fleet.db") as store:
        for char in HOSTILE_CHARS:
            _refused(lambda bad: ENTRIES[entry](store, bad), f"a{char}b")
        assert store.streams() == []  # nothing recorded, not even a start


@pytest.mark.parametrize("char", HOSTILE_CHARS, ids=[f"U+{ord(c):04X}" for c in HOSTILE_CHARS])
def test_runs_add_refuses_a_stream_name_or_id_with_a_control_character_in_one_line(
    tmp_path: Path, char: str
):
    runner = CliRunner()
    documents = {
        "stream": {"endpoint_id": "ep", "job_id": "j", "stream": f"job-{char}"},
        "job_id": {"endpoint_id": "ep", "job_id": f"j{char}1"},
        "run stream": {"run_id": "r", "candidates": [{"gpu_class": "L4"}], "stream": f"r{char}"},
    }
    for name, document in documents.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        store = f"sqlite:///{tmp_path}/fresh/fleet.db"
        result = runner.invoke(app, ["runs", "add", str(path), "--store", store])
        assert result.exit_code == EXIT_USAGE, (name, result.output)
        [line] = result.output.strip().splitlines()
        assert line.startswith("error:") and _named(char) in line, (name, line)
        assert char not in result.output.rstrip("\n")
    assert not (tmp_path / "fresh").exists()  # refused before the store was made


def test_names_in_other_scripts_and_the_error_s_shape_stay_as_they_are(tmp_path: Path):
    # printable text of any script is a name (only control, format, surrogate and separator
    # characters are refused)
    with SqliteStore(tmp_path / "fleet.db") as store:
        stream = hand_off_job({"endpoint_id": "ep", "job_id": "j"}, store, stream="job-é-日本 x")
        assert store.streams() == [stream]
    assert check_stream("run-ünïcode") == "run-ünïcode"
    # the name is shown escaped and cut, the character by code point and escape
    text = _refused(check_stream, "x" * 500 + "\u202e")
    assert "U+202E '\\u202e'" in text and len(text) < 300
    made = _refused(lambda bad: check_stream(f"job-{bad}", "job_id"), "a\nb")
    assert made.startswith("job_id makes the stream name 'job-a\\nb'"), made


# --- b) the replica's name -------------------------------------------------------------------


def test_supervise_refuses_an_owner_with_a_control_character_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RUNPOD_API_KEY", "test-key")
    for name in ("RUNPOD_REST_BASE_URL", "RUNPOD_API_BASE_URL"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    forged = "r1\n2030-01-01 00:00:00,000 r2: claims 1000 streams (forged)"
    for owner in (forged, "r1\x1b[2K", "r1\u2028x", "r1\u202ex"):
        result = CliRunner().invoke(
            app,
            [
                "supervise",
                "--until-idle",
                "--owner",
                owner,
                "--store",
                f"sqlite:///{tmp_path}/f.db",
            ],
        )
        assert result.exit_code == EXIT_USAGE, result.output
        [line] = result.output.strip().splitlines()
        char = _hostile(owner)
        assert line.startswith("error: --owner") and _named(char) in line, line
        assert char not in result.output.rstrip("\n")
    assert list(tmp_path.iterdir()) == []  # refused before the store was opened
    with SqliteStore(tmp_path / "lib.db") as store:
        _refused(lambda bad: Fleet(store, None, owner=bad), "r1\nforged")


# --- c) a known job id on another endpoint ---------------------------------------------------


def test_runs_add_of_a_known_job_id_on_another_endpoint_is_refused_naming_both(tmp_path: Path):
    runner = CliRunner()
    url = f"sqlite:///{tmp_path}/fleet.db"

    def add(endpoint_id: str) -> Any:
        path = tmp_path / f"{endpoint_id}.json"
        path.write_text(json.dumps({"endpoint_id": endpoint_id, "job_id": "j1"}))
        return runner.invoke(app, ["runs", "add", str(path), "--store", url])

    assert add("ep-one").exit_code == 0
    with SqliteStore(tmp_path / "fleet.db", read_only=True) as store:
        before = store.read("job-j1")
    result = add("ep-two")
    assert result.exit_code == EXIT_USAGE, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error:") and "'ep-one'" in line and "'ep-two'" in line, line
    # the same job on the same endpoint again: a no-op, as it was
    again = add("ep-one")
    assert again.exit_code == 0 and "job-j1" in again.output, again.output
    with SqliteStore(tmp_path / "fleet.db", read_only=True) as store:
        assert store.read("job-j1") == before and store.streams() == ["job-j1"]
    with pytest.raises(ValueError, match=r"ep-one.*ep-two"):
        hand_off_job({"endpoint_id": "ep-two", "job_id": "j1"}, url)


# --- d) store options: every one bounded, one line -------------------------------------------


def _cli_line(args: list[str], store: str) -> str:
    result = CliRunner().invoke(app, [*args, "--store", store])
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    [line] = result.output.strip().splitlines()
    assert line.startswith("error:"), line
    return line


@pytest.mark.parametrize("value", ["1e-9", "0.5", "0", "inf", "3601"])
def test_sqlite_s_busy_timeout_is_bounded_in_its_url_and_its_keyword(tmp_path: Path, value: str):
    url = f"sqlite:///{tmp_path}/f.db?busy_timeout_s={value}"
    for args in (["supervise", "--until-idle"], ["ls"]):
        line = _cli_line(args, url)
        assert "busy_timeout_s" in line and "at least 1 and at most 3,600" in line, line
    with pytest.raises(ValueError, match=r"busy_timeout_s.*at least 1 and at most 3,600"):
        SqliteStore(tmp_path / "g.db", busy_timeout_s=float(value))
    assert list(tmp_path.iterdir()) == []  # no file made
    with SqliteStore(tmp_path / "ok.db", busy_timeout_s=1) as store:  # the least is taken
        assert store.busy_timeout_s == 1


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("idle_in_transaction_s=1e-9", "at least 0.5 and at most 86,400"),
        ("idle_in_transaction_s=0.1", "at least 0.5 and at most 86,400"),
        ("connect_timeout=inf", "at least 1 and at most 3,600"),
        ("connect_timeout=nan", "at least 1 and at most 3,600"),
        ("connect_timeout=1e-9", "at least 1 and at most 3,600"),
        ("connect_timeout=1e9", "at least 1 and at most 3,600"),
        ("pool_size=0", "at least 1 and at most 1,000"),
    ],
)
def test_postgres_url_options_are_bounded_before_the_server_is_reached(option: str, says: str):
    # (nothing listens on port 1: a refusal here is made before any connection)
    url = f"postgresql://nobody@127.0.0.1:1/none?{option}"
    with pytest.raises(ValueError, match=option.split("=")[0]) as caught:
        open_store(url)
    assert says in str(caught.value) and len(str(caught.value).splitlines()) == 1
    line = _cli_line(["ls"], url)
    assert option.split("=")[0] in line and says in line, line


def test_postgres_store_keywords_take_the_ranges_of_its_url_options():
    pytest.importorskip("psycopg")
    from flashfsm.adapters.postgres import PostgresStore

    dsn = "postgresql://nobody@127.0.0.1:1/none"
    for keyword, value, least in (
        ("idle_in_transaction_s", 1e-9, 0.5),
        ("pool_size", 0, 1),
        ("pool_size", 2.5, 1),
        ("fallback_s", -1.0, 0.1),
        ("connect_timeout_s", float("inf"), 1),
    ):
        with pytest.raises(ValueError, match=rf"{keyword}=.*at least {least:g} and at most"):
            PostgresStore(dsn, **{keyword: value})
    with pytest.raises(ValueError, match="table name"):
        PostgresStore(dsn, table="events\n")


def test_memory_takes_no_option():
    with pytest.raises(ValueError, match=r"unknown parameter.*snapshot_every"):
        open_store("memory://?snapshot_every=0")


@pytest.mark.postgres
@pytest.mark.skipif(postgres_dsn() is None, reason=NO_POSTGRES)
def test_supervise_on_postgres_refuses_an_idle_timeout_of_a_nanosecond_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RUNPOD_API_KEY", "test-key")
    for name in ("RUNPOD_REST_BASE_URL", "RUNPOD_API_BASE_URL"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    cleanups: list[Any] = []
    try:
        url = make_backend("postgres", tmp_path, cleanups).url
        (tmp_path / "job.json").write_text(json.dumps({"endpoint_id": "ep", "job_id": "j"}))
        bad = f"{url}&idle_in_transaction_s=1e-9"
        for args in (["runs", "add", str(tmp_path / "job.json")], ["supervise", "--until-idle"]):
            line = _cli_line(args, bad)
            assert "idle_in_transaction_s='1e-9'" in line and "at least 0.5" in line, line
        # the least the range takes works: a job handed off, and the replica drains
        least = f"{url}&idle_in_transaction_s=0.5"
        add = CliRunner().invoke(app, ["runs", "add", str(tmp_path / "job.json"), "--store", least])
        assert add.exit_code == 0, add.output
        store = open_store(least)
        try:
            with store._pool.connection() as conn:  # type: ignore[attr-defined]
                shown = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
            assert shown == ("500ms",)
        finally:
            store.close()
    finally:
        run_cleanups(cleanups)
