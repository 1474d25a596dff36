"""The docs are executed: every `python` block of docs/*.md runs, in order, in one namespace
per document (a later block may use what an earlier one defined)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = sorted((Path(__file__).resolve().parents[1] / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(path: Path) -> list[str]:
    """The `python` code blocks of a Markdown file, in order."""
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def test_the_architecture_document_has_runnable_examples():
    assert any(path.name == "architecture.md" for path in DOCS)
    assert len(blocks(next(p for p in DOCS if p.name == "architecture.md"))) >= 4


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_python_block_of_the_docs_runs(path: Path):
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for number, source in enumerate(blocks(path), start=1):
        code = compile(source, f"{path.name} (python block {number})", "exec")
        exec(code, namespace)  # the docs' own examples, run as written
