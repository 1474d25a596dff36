"""The README is the front page: short, with the Quickstart as it is, and links to the rest.

What the README used to hold at length now lives under docs/ (the event table in
docs/events.md, the rule table and the diagram in docs/rules.md, the divergences in
docs/divergences.md: tests/test_docs_generated.py checks them). Its code is run by
tests/test_docs.py and its transcripts by tests/test_docs_transcripts.py.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_BYTES = 15 * 1024
QUICKSTART = (
    "pip install . && flashfsm demo",
    "pip install -e '.[dev]' && pytest",
)


def test_quickstart_is_the_two_commands():
    block = re.search(r"## Quickstart\n\n```bash\n(.*?)```", README, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert tuple(commands) == QUICKSTART


def test_the_readme_is_at_most_15_kib():
    size = len(README.encode("utf-8"))
    assert size <= MAX_BYTES, f"README.md is {size} bytes: move detail to docs/"


def test_the_readme_links_every_docs_page():
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in README, f"the README does not link docs/{page.name}"


def test_the_readme_says_what_the_demo_wrote_and_how_to_explore_it():
    for name in (
        "demo.db",
        "demo-<tag>.html",
        "--tag",
        "--reset",
        "--store",
        "run-demo-",
        "job-demo-",
    ):
        assert name in README, name
    assert re.search(r"```console\n\$ flashfsm demo", README), "no transcript of the demo"
