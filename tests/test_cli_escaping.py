"""Control characters from outside text never reach the terminal raw, whatever command prints them.

A stream name, a worker's error body or a log line may hold an escape sequence (ESC, a
carriage return, a bell, a bidirectional override): printed raw, it would recolour the
terminal, move the cursor over earlier lines or hide what follows. The CLI's console
escapes every unprintable character but the line break, in plain lines and table cells
alike (`flashfsm.cli.common.shown`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.text import Text
from typer.testing import CliRunner

from flashfsm import JobHandle, MemoryStore, PollResult, open_store, poll_job
from flashfsm.cli import app
from flashfsm.cli.common import shown, shown_text

runner = CliRunner()
EVIL_STREAM = "job-\x1b[31mred\x1b[0m\r\u202e"
EVIL_ERROR = "CUDA \x1b[2J\x1b[Hwiped\x07 \x1b]0;owned\x07 \x00end"
RAW = ("\x1b", "\x07", "\x00", "\r", "\u202e")


class Answers:
    """RunPod, scripted: one poll in progress, then FAILED with an error holding escapes
    (`error`: a subclass may give another)."""

    error = EVIL_ERROR

    def __init__(self) -> None:
        self.fetches = 0

    def job_status(self, endpoint_id: str, job_id: str) -> dict:
        self.fetches += 1
        if self.fetches < 2:
            return {"status": "IN_PROGRESS"}
        return {"status": "FAILED", "error": self.error}

    def endpoint_health(self, endpoint_id: str) -> dict:
        return {"workers": {"running": 1}}


def watch_scripted_job(url: str, stream: str, client: Answers) -> PollResult:
    """Watch one job answered by `client` into the store at `url`, as `stream`, on a clock
    of its own. No entry names a stream with a control character (`check_stream`), so the
    job is watched under a plain name and its log stored under `stream`, as a store written
    before names were checked, or one `flashfsm import` copied, holds it."""
    now = [1_700_000_000.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    scratch, plain = MemoryStore(), "job-scripted"
    result = poll_job(
        JobHandle("ep-1", "flash-evil", "job-1", submitted_at=now[0]),
        client=client,
        clock=lambda: now[0],
        sleep=sleep,
        store=scratch,
        stream=plain,
    )
    store = open_store(url)
    try:
        store.append(
            stream, [e.model_copy(update={"stream": stream}) for e in scratch.read(plain)], 0
        )
    finally:
        store.close()
    return result


@pytest.fixture
def evil_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/events.db"
    assert watch_scripted_job(url, EVIL_STREAM, Answers()).failure == "job_failed"
    return url


def assert_escaped(output: str) -> None:
    assert not any(ch in output for ch in RAW), repr(output)


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["ls", "--owner"],
        ["explain", EVIL_STREAM],
        ["replay", EVIL_STREAM],
    ],
    ids=["ls", "ls-owner", "explain", "replay"],
)
def test_stream_names_and_error_texts_are_printed_escaped(evil_store: str, args: list[str]):
    result = runner.invoke(app, [*args, "--store", evil_store])
    assert result.exit_code not in (1, 2), result.output  # (10: the job failed)
    assert_escaped(result.output)
    if args != ["ls", "--owner"]:  # (a stream opened without a hand-off is in the index too)
        assert "job-\\x1b[31m" in result.output, result.output
    if args[0] in ("explain", "replay"):
        assert "\\x1b[2J" in result.output, result.output


def test_an_unknown_stream_named_with_escapes_is_an_escaped_error(evil_store: str):
    result = runner.invoke(app, ["explain", "job-\x1b]0;title\x07", "--store", evil_store])
    assert result.exit_code != 0
    assert_escaped(result.output)
    assert "\\x1b]0;title\\x07" in result.output


def test_json_output_keeps_the_exact_text(evil_store: str):
    result = runner.invoke(app, ["ls", "--json", "--store", evil_store])
    assert result.exit_code == 0, result.output
    assert_escaped(result.output)  # JSON writes control characters as \\u escapes
    assert EVIL_STREAM in [row["stream"] for row in json.loads(result.output)["streams"]]


def test_shown_keeps_line_breaks_and_styles_and_escapes_the_rest():
    assert shown("plain text, ünïcode") == "plain text, ünïcode"
    assert shown("a\x1b[1mb\nc\rd\te") == "a\\x1b[1mb\nc\\rd\\te"
    text = Text.assemble(("bold\x1b", "bold"), " after\u202e")
    out = shown_text(text)
    assert out.plain == "bold\\x1b after\\u202e"
    styles = {str(s.style) for s in out.spans if s.start < 8 and s.end <= 8}
    assert styles == {"bold"} and all(s.end <= 8 for s in out.spans)  # ESC's style kept
