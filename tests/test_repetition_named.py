"""docs/architecture.md, "Repetition kept, and why", names each repeated place it keeps as
`path::name` (and a class's methods in parentheses after it), in the library, the tests or
the benchmarks; `name` is what the module defines or, for a list of imports, one name it
imports. A rename or a removal must reach that list: every name has to stand where the list
says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Repetition kept, and why"
#: `path::name`, then optionally ` (`method`, `method`)` right after it.
REFERENCE = re.compile(
    r"`((?:flashfsm|tests|bench)/[\w/]+\.py)::(\w+)`(?: \(((?:`\w+`(?:, )?)+)\))?"
)
#: How many places the section names (a floor: the list is read whole).
NAMED = 133


def section(text: str) -> str:
    """The section's text, up to the next heading of its level or above."""
    start = text.index(SECTION) + len(SECTION)
    end = re.search(r"^#{1,2} ", text[start:], re.MULTILINE)
    return text[start : start + end.start()] if end else text[start:]


def references(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Each `(path, name, methods)` the section names."""
    found = []
    for path, name, methods in REFERENCE.findall(section(text)):
        found.append((path, name, tuple(re.findall(r"`(\w+)`", methods))))
    return found


def defined(path: Path) -> dict[str, set[str]]:
    """The top-level names `path` defines or imports, each with its methods and attributes
    (a class) or nothing."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {
                sub.name
                for sub in node.body
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))
            } | {
                target.id
                for sub in node.body
                if isinstance(sub, (ast.Assign, ast.AnnAssign))
                for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
                if isinstance(target, ast.Name)
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.Assign):
            names.update({t.id: set() for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
        elif isinstance(node, ast.ImportFrom):
            names.update({(alias.asname or alias.name): set() for alias in node.names})
    return names


def missing(text: str, root: Path) -> list[str]:
    """The section's references that do not stand where it says."""
    wrong = []
    for path, name, methods in references(text):
        file = root / path
        if not file.is_file():
            wrong.append(f"{path}: no such file")
            continue
        names = defined(file)
        if name not in names:
            wrong.append(f"{path}::{name}: not defined there")
            continue
        wrong += [f"{path}::{name}.{m}: no such member" for m in methods if m not in names[name]]
    return wrong


def test_every_repeated_place_the_architecture_keeps_still_stands_where_it_says() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert len(references(text)) >= NAMED  # the list is there, and read whole
    assert missing(text, ROOT) == []


def test_a_renamed_or_moved_place_is_caught() -> None:
    text = (
        f"{SECTION}\n\n- `flashfsm/watch.py::recorded_handle` and "
        "`flashfsm/watch.py::no_such_name`, `flashfsm/nowhere.py::x`, "
        "`flashfsm/adapters/sqlite.py::SqliteStore` (`append`, `no_such_method`), "
        "`tests/test_rules.py::assert_verdict`, `tests/test_rules.py::JobHandle` (imported), "
        "`bench/common.py::timed`, `bench/common.py::gone`, `tests/nowhere.py::y`.\n"
        "## Next\n`flashfsm/watch.py::also_missing_but_not_in_the_section`\n"
    )
    assert missing(text, ROOT) == [
        "flashfsm/watch.py::no_such_name: not defined there",
        "flashfsm/nowhere.py: no such file",
        "flashfsm/adapters/sqlite.py::SqliteStore.no_such_method: no such member",
        "bench/common.py::gone: not defined there",
        "tests/nowhere.py: no such file",
    ]
