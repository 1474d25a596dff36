"""Every CLI transcript in the docs is what the command prints today.

A ```console``` block of README.md or docs/*.md is a transcript: each `$ flashfsm …` line is
a command, and the lines under it, up to the next `$` line, are what it prints (stdout and
stderr together, as a terminal shows them). The
command line may end with a shell comment `# exit N`: the command must exit with N (a
command without one must exit 0). Only `flashfsm` commands may appear.

How they run. The commands of one page run in order, through typer's `CliRunner` on
`flashfsm.cli.app`, in one scratch directory that is their working directory and holds a
copy of the example logs at ./examples (what `flashfsm examples examples` copies there: the
logs the package ships, see tests/test_docs_examples.py), with this environment:

- `FLASHFSM_STORE=sqlite:events.db` (a store in the scratch directory), `HOME` and
  `XDG_DATA_HOME` in the scratch directory (so the default store and the demo's store land
  there), `HF_HOME` there too;
- `TZ=UTC` (times print as UTC) and `COLUMNS=80` (tables are 80 columns wide).

What is compared, after these normalisations and no others:

- trailing spaces at the end of a line, and trailing blank lines, are dropped;
- the demo's random tag (6 hex digits, first seen in a stream name `…demo-<tag>-…`) is
  shown as `3f9a1c`: once a command printed one, the tag prints as `3f9a1c` wherever it
  stands as a word of its own, and `3f9a1c` in later command lines stands for it;
- an output whose last line is `…` shows only how the output begins: the lines above the
  `…` must be the first lines printed (used for the demo, whose full output is long).

Regenerate the outputs (after a change to what a command prints, or to the example logs)
with `python -m tests.test_docs_generated --write`, then review the diff.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import shlex
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashfsm import example_logs
from flashfsm.cli import COMMANDS, app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = example_logs()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")
ELIDED = "…"
DEMO_TAG = "3f9a1c"
TAG = re.compile(r"\bdemo-([0-9a-f]{6})-")


@dataclass
class Command:
    """One `$ flashfsm …` line of a transcript and what it shows."""

    line: str  # the command line, without "$ " and without the exit comment
    exit_code: int
    output: list[str] = field(default_factory=list)

    @property
    def elided(self) -> bool:
        return bool(self.output) and self.output[-1] == ELIDED

    def text(self) -> str:
        comment = f"  # exit {self.exit_code}" if self.exit_code else ""
        return "\n".join([f"$ {self.line}{comment}", *self.output])


def parse(block: str) -> list[Command]:
    """The commands of one console block (a ValueError when it is not a transcript)."""
    commands: list[Command] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            found = EXIT.search(line)
            command = line[2 : found.start()] if found else line[2:]
            if not command.startswith("flashfsm "):
                raise ValueError(f"not a flashfsm command: {line!r}")
            commands.append(Command(command.strip(), int(found.group(1)) if found else 0))
        elif not commands:
            raise ValueError(f"output before any command: {line!r}")
        else:
            commands[-1].output.append(line.rstrip())
    for command in commands:
        while command.output and not command.output[-1].strip():
            command.output.pop()
    return commands


def transcripts(path: Path) -> list[list[Command]]:
    """Every console block of a page, parsed."""
    return [parse(block) for block in CONSOLE.findall(path.read_text(encoding="utf-8"))]


# --- running them -------------------------------------------------------------------------------


@contextlib.contextmanager
def docs_environment() -> Iterator[Path]:
    """The scratch directory the transcripts run in, as the cwd, with their environment."""
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(EXAMPLES, Path(scratch, "examples"))
        os.chdir(scratch)
        os.environ.update(
            FLASHFSM_STORE="sqlite:events.db",
            HOME=scratch,
            XDG_DATA_HOME=f"{scratch}/.local/share",
            HF_HOME=f"{scratch}/hf",
            TZ="UTC",
            COLUMNS="80",
        )
        time.tzset()
        try:
            yield Path(scratch)
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            time.tzset()


@dataclass
class Session:
    """Runs a page's commands in order, remembering the demo's tag once one was printed."""

    runner: CliRunner = field(default_factory=CliRunner)
    tag: str | None = None

    def run(self, command: Command) -> tuple[int, list[str]]:
        line = command.line
        if self.tag:
            line = re.sub(rf"\b{DEMO_TAG}\b", self.tag, line)
        with warnings.catch_warnings():  # earlier tests' garbage is not this command's
            warnings.simplefilter("ignore")
            gc.collect()
        result = self.runner.invoke(app, shlex.split(line)[1:], catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"`{line}` raised {result.exception!r}") from result.exception
        output = result.output
        found = TAG.search(output)
        if found and self.tag is None:
            self.tag = found.group(1)
        if self.tag:
            output = re.sub(rf"\b{self.tag}\b", DEMO_TAG, output)
        lines = [text.rstrip() for text in output.splitlines()]
        while lines and not lines[-1]:
            lines.pop()
        return result.exit_code, lines


def shown(command: Command, printed: list[str]) -> list[str]:
    """What the docs should show for `printed`: all of it, or its beginning when elided."""
    if command.elided and len(printed) > len(command.output) - 1:
        return [*printed[: len(command.output) - 1], ELIDED]
    return printed


def check_page(path: Path) -> list[str]:
    """Every difference between a page's transcripts and what the commands print."""
    problems = []
    session = Session()
    with docs_environment():
        for block in transcripts(path):
            for command in block:
                code, printed = session.run(command)
                if code != command.exit_code:
                    problems.append(
                        f"`{command.line}` exits {code}, the docs say {command.exit_code}"
                    )
                expected = shown(command, printed)
                if expected != command.output:
                    diff = "\n".join(["  docs:", *command.output, "  prints:", *expected])
                    problems.append(f"`{command.line}` prints something else:\n{diff}")
    return problems


def write_page(path: Path) -> bool:
    """Rewrite a page's transcripts with what the commands print; True when it changed."""
    text = path.read_text(encoding="utf-8")
    session = Session()
    with docs_environment():

        def redraw(match: re.Match[str]) -> str:
            block = parse(match.group(1))
            for command in block:
                command.exit_code, printed = session.run(command)
                command.output = shown(command, printed)
            return "```console\n" + "\n".join(c.text() for c in block) + "\n```"

        new = CONSOLE.sub(redraw, text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def write_transcripts() -> list[Path]:
    """Rewrite every page's transcripts; the pages that changed."""
    return [path for path in PAGES if CONSOLE.search(path.read_text()) and write_page(path)]


# --- the tests -----------------------------------------------------------------------------------

PAGES_WITH_TRANSCRIPTS = [p for p in PAGES if CONSOLE.search(p.read_text(encoding="utf-8"))]


def test_the_docs_show_transcripts_of_the_commands_a_reader_uses_first():
    commands = {
        shlex.split(c.line)[1]
        for path in PAGES_WITH_TRANSCRIPTS
        for block in transcripts(path)
        for c in block
    }
    assert {"demo", "replay", "explain", "why-not", "whatif", "ls"} <= commands
    assert commands <= {name for name, _ in COMMANDS}


@pytest.mark.parametrize("path", PAGES_WITH_TRANSCRIPTS, ids=lambda p: p.name)
def test_every_console_block_is_a_transcript_of_flashfsm_commands(path: Path):
    for block in transcripts(path):  # parse() raises on anything else
        assert block, f"{path.name} has an empty console block"


@pytest.mark.parametrize("path", PAGES_WITH_TRANSCRIPTS, ids=lambda p: p.name)
def test_every_transcript_is_what_the_command_prints(path: Path):
    problems = check_page(path)
    assert not problems, (
        f"{path.name}: "
        + "\n".join(problems)
        + "\n(regenerate: python -m tests.test_docs_generated --write)"
    )


def test_the_normalisations_keep_what_they_do_not_name():
    command = parse("$ flashfsm ls\nrun-demo-3f9a1c-walk-s1  \nmore\n…\n")[0]
    assert command.elided and command.output == ["run-demo-3f9a1c-walk-s1", "more", "…"]
    assert shown(command, ["a", "b", "c"]) == ["a", "b", "…"]
    assert shown(command, ["a"]) == ["a"]
    assert parse("$ flashfsm explain x  # exit 12\n")[0].exit_code == 12
    with pytest.raises(ValueError):
        parse("$ ls -l\n")
