"""The docs point at what exists, and name everything the code offers.

- every relative link of README.md and docs/*.md points at a file (or a heading of a page)
  that exists, and no link or path leaves the repository;
- every `flashfsm <command>` the docs name is a command of `flashfsm.cli.COMMANDS`, and
  docs/cli.md has a section for each;
- every exit code of the CLI is in docs/cli.md's table, with its meaning's name;
- every public name of `flashfsm` (`flashfsm.__all__`) is in docs/api.md;
- a page that says "the reference" links to docs/divergences.md, which says what it is.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

import flashfsm
from flashfsm import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```", re.S)


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them."""
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", CODE.sub("", text(path)), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_relative_link_points_at_what_exists(path: Path):
    for target in LINK.findall(CODE.sub("", text(path))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = unquote(target).partition("#")
        where = (path.parent / file).resolve() if file else path
        assert where.is_relative_to(ROOT), f"{path.name}: {target} leaves the repository"
        assert where.exists(), f"{path.name}: {target} does not exist"
        if anchor and where.suffix == ".md":
            assert anchor in anchors(where), f"{path.name}: no heading #{anchor} in {file}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_page_names_a_file_outside_the_repository(path: Path):
    assert "../shared" not in text(path) and "/work/" not in text(path)


def test_the_anchor_rule_is_github_s():
    assert (
        re.sub(r"[^\w\- ]", "", "Watching a job: `poll_job`".lower()).replace(" ", "-")
        == "watching-a-job-poll_job"
    )


COMMAND_NAMES = {name for name, _ in cli.COMMANDS}


def named_commands(page: str) -> set[str]:
    """The `flashfsm <word>` commands a page names in code (spans, blocks, transcripts)."""
    code = " ".join(re.findall(r"`[^`\n]+`", page) + CODE.findall(page))
    return set(re.findall(r"\bflashfsm ([a-z][a-z-]*)", code))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_command_the_docs_name_exists(path: Path):
    unknown = named_commands(text(path)) - COMMAND_NAMES
    assert not unknown, f"{path.name} names commands that do not exist: {sorted(unknown)}"


def test_the_cli_page_has_a_section_for_every_command():
    headings = re.findall(r"^## (.+)$", text(ROOT / "docs" / "cli.md"), re.M)
    documented = {name for h in headings for name in re.findall(r"`flashfsm ([a-z-]+)`", h)}
    assert documented == COMMAND_NAMES


def test_the_cli_page_lists_every_exit_code():
    page = text(ROOT / "docs" / "cli.md")
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", page, re.M))
    for kind, code in cli.EXIT_CODES.items():
        assert str(code) in rows, f"exit code {code} is missing"
        if kind is not None:
            assert rows[str(code)].startswith(f"`{kind}`"), f"exit code {code} is {kind}"
    for code in (cli.EXIT_USAGE, 2, cli.EXIT_DISAGREES, cli.EXIT_SWEEP_ERRORS, cli.EXIT_NO_VERDICT):
        assert str(code) in rows, f"exit code {code} is missing"
    table = getattr(cli, "EXIT_CODE_TABLE", None)  # every code with its meaning, when declared
    expected = (
        {str(row.code) for row in table} if table else {str(c) for c in cli.EXIT_CODES.values()}
    )
    assert expected <= set(rows) and set(rows) <= expected | {"1", "2", "3", "4", "5"}


@pytest.mark.parametrize("name", sorted(set(flashfsm.__all__) - {"__version__"}))
def test_the_api_page_names_every_public_name(name: str):
    assert f"`{name}" in text(ROOT / "docs" / "api.md"), f"docs/api.md does not mention {name}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_a_page_that_says_the_reference_links_to_what_it_is(path: Path):
    page = text(path)
    if path.name != "divergences.md" and re.search(r"\bthe reference\b", page, re.I):
        assert "divergences.md" in page, f"{path.name} says 'the reference' without a link"
