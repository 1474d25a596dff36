"""No module grows past ~800 lines without saying why at its top.

A long module is often several concepts in one file; when it is one concept that is read
best in one place (every rule beside the others, one protocol and its two drivers), its
docstring says so in a paragraph that starts "Why it is long:". A module that grows past
the limit without one fails here, so the question is asked when it happens.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "flashfsm"
LIMIT = 800
MARK = "Why it is long:"


def long_modules_without_a_reason(root: Path = PACKAGE) -> list[str]:
    """Each module of `root` over `LIMIT` lines whose docstring gives no reason."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if source.count("\n") <= LIMIT:
            continue
        docstring = ast.get_docstring(ast.parse(source)) or ""
        if MARK not in docstring:
            found.append(f"{path.relative_to(root.parent)}: {source.count(chr(10))} lines")
    return found


def test_every_module_over_800_lines_says_why_at_its_top():
    assert not long_modules_without_a_reason(), long_modules_without_a_reason()


def test_a_long_module_without_a_reason_is_found(tmp_path: Path):
    (tmp_path / "long.py").write_text('"""A module."""\n' + "x = 1\n" * (LIMIT + 1))
    (tmp_path / "said.py").write_text(f'"""A module.\n\n{MARK} one concept."""\n' + "x = 1\n" * 900)
    (tmp_path / "short.py").write_text('"""A module."""\n' + "x = 1\n" * 10)
    assert [line.split(":")[0] for line in long_modules_without_a_reason(tmp_path)] == [
        f"{tmp_path.name}/long.py"
    ]
