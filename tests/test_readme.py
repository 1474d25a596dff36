"""The README documents what the code does: the diagram, every event field, every rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flashfsm.events.models import EVENT_TYPES
from flashfsm.fsm.diagram import mermaid
from flashfsm.fsm.rules import RULE_NAMES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
ENVELOPE = {"stream", "seq", "id", "at", "kind", "v"}


def test_readme_shows_the_diagram_generated_from_the_transition_table():
    block = re.search(r"```mermaid\n(.*?)```", README, re.S)
    assert block is not None, "README has no mermaid block"
    assert block.group(1).strip() == mermaid().strip()


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_readme_documents_every_event_kind_and_field(kind):
    row = next((line for line in README.splitlines() if line.startswith(f"| `{kind}` |")), None)
    assert row is not None, f"README's event table has no row for {kind}"
    for name in set(EVENT_TYPES[kind].model_fields) - ENVELOPE:
        assert f"`{name}`" in row, f"README's {kind} row does not mention {name}"


def test_readme_documents_the_envelope():
    for name in ENVELOPE:
        assert f"| `{name}` |" in README


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_readme_documents_every_rule(rule):
    assert f"`{rule}`" in README


@pytest.mark.parametrize("divergence", ["D1", "D2", "D3", "D4"])
def test_readme_documents_each_divergence(divergence):
    assert f"**{divergence}**" in README


def test_quickstart_is_two_commands():
    block = re.search(r"## Quickstart\n\n```bash\n(.*?)```", README, re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert "pytest" in commands[1] and ".[dev]" in commands[1]
