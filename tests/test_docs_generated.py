"""The generated parts of the docs are what the code draws today.

docs/rules.md (the state diagram, the policy defaults, the rule table) and docs/events.md
(every event kind and field, a row each) hold parts between `<!-- name:start … -->` and
`<!-- name:end -->` markers that `flashfsm.postmortem.docs` renders from the code: the transition
table, `GracePolicy`, the rules' declarations (`rules.RULES`) and the event models
(`EVENT_TYPES`). A page that differs from what they render today fails here. Beside that
byte-for-byte check, a few checks read the pages as a reader would (every kind and field,
every rule, every divergence), so they would fail even if the generator itself dropped
something.

Regenerate everything the docs derive from the code, in order — these generated parts, the
example logs the package ships in flashfsm/examples/ (tests/test_docs_examples.py;
flashfsm/examples/worker/: tests/test_worker_evidence_views.py) and the outputs of the console
transcripts (tests/test_docs_transcripts.py) — from the repository's root:

    python -m tests.test_docs_generated --write

then review the diff.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from flashfsm.events.failures import FailureKind
from flashfsm.events.models import EVENT_TYPES
from flashfsm.fsm.rules import RULE_NAMES, RULES
from flashfsm.postmortem import docs
from flashfsm.postmortem.diagram import mermaid

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ENVELOPE = {"stream", "seq", "id", "at", "kind", "v"}


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_the_cli_pages_exit_code_table_is_the_one_the_help_prints():
    from flashfsm.cli.usage import EXIT_CODE_TABLE

    rows = re.findall(r"^\| (\d+) \| `(\w+)`: (.*?) \|$", page("cli.md"), re.M)
    assert rows == [(str(e.code), e.name, e.meaning) for e in EXIT_CODE_TABLE]


def write_generated() -> list[Path]:
    """Redraw every generated part of every page of `docs.PAGES`; the pages that changed."""
    changed = []
    for name in docs.PAGES:
        path = DOCS / name
        text = path.read_text(encoding="utf-8")
        new = docs.regenerate(name, text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


# --- byte for byte ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "part"),
    [(name, part) for name, parts in docs.PAGES.items() for part in parts],
)
def test_every_generated_part_is_what_the_code_draws_today(name: str, part: str):
    committed = docs.generated_part(page(name), part)
    assert committed is not None, f"docs/{name} has no {part} markers"
    assert committed == docs.PAGES[name][part](), (
        f"docs/{name}'s {part} part is stale: python -m tests.test_docs_generated --write"
    )


def test_a_regenerated_page_keeps_its_prose_and_its_markers():
    text = "intro\n<!-- rules:start old note -->\nstale\n<!-- rules:end -->\noutro\n"
    new = docs.splice(text, "rules", "fresh")
    assert new.startswith("intro\n<!-- rules:start (generated") and new.endswith(
        "-->\nfresh\n<!-- rules:end -->\noutro\n"
    )
    assert docs.generated_part(new, "rules") == "fresh"
    with pytest.raises(ValueError):
        docs.splice("no markers here", "rules", "fresh")


# --- as a reader reads them ---------------------------------------------------------------------


def test_the_rules_page_shows_the_diagram_of_the_transition_table():
    block = re.search(r"```mermaid\n(.*?)```", page("rules.md"), re.S)
    assert block is not None, "docs/rules.md has no mermaid block"
    assert block.group(1).strip() == mermaid().strip()


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_the_rules_page_documents_every_rule_in_the_order_they_are_tried(rule: str):
    text = page("rules.md")
    rows = [line for line in text.splitlines() if re.match(r"\| [\dD]+ \| `[a-z_]+` \|", line)]
    assert [re.search(r"`([a-z_]+)`", row).group(1) for row in rows] == [r.name for r in RULES]
    assert f"| `{rule}` |" in text


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_the_events_page_documents_every_event_kind_and_field(kind: str):
    text = page("events.md")
    row = re.search(rf"^\| `{kind}` \| ([\d, ]+) \| .+ \| (.+) \|$", text, re.M)
    assert row is not None, f"docs/events.md has no row for {kind}"
    listed = re.findall(r"`(\w+)(?:=[^`]*)?`", row.group(2))
    fields = [name for name in EVENT_TYPES[kind].model_fields if name not in ENVELOPE]
    assert [name for name in listed if name in fields] == fields, f"docs/events.md's {kind}"
    current = str(EVENT_TYPES[kind].model_fields["v"].default)
    assert current in row.group(1).split(", "), f"docs/events.md's {kind} lacks v{current}"


def test_the_events_page_documents_the_envelope():
    text = page("events.md")
    for name in ENVELOPE:
        assert f"| `{name}` |" in text


def test_every_summary_override_names_a_documented_model():
    assert set(docs.SUMMARIES) <= set(EVENT_TYPES) | {m.__name__ for m in docs.NESTED}


def test_every_failure_kind_is_explained():
    assert set(docs.FAILURE_NOTES) == {kind.value for kind in FailureKind}


@pytest.mark.parametrize("divergence", ["D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8", "D9"])
def test_the_divergences_page_documents_each_divergence(divergence: str):
    assert f"**{divergence}**" in page("divergences.md")


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(__doc__)
        return 2
    from tests.test_docs_examples import write_examples
    from tests.test_docs_transcripts import write_transcripts
    from tests.test_worker_evidence_views import write_worker_example

    for path in write_generated():
        print(f"redrew the generated parts of {path.relative_to(ROOT)}")
    if write_examples():
        print("regenerated flashfsm/examples/ (what the library records changed)")
    if write_worker_example():
        print("regenerated flashfsm/examples/worker/ (what the library records changed)")
    for path in write_transcripts():
        print(f"rewrote the transcripts of {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
