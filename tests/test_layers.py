"""The layers point one way, and no flashfsm module imports itself round a cycle.

Every import of every module counts — at the top, inside a function (a lazy import that
dodges a cycle is still a cycle), or in a try — except those under `if TYPE_CHECKING:`.
The layers, lowest first (each may import the ones before it, and itself):

- `events`: the recorded format (models, codec, policy, text, the store protocol);
- `fsm`: the pure decision core (rules, fold, decisions);
- `postmortem`: the pure post-mortem and presentation (explanations, the ledger, generated docs);
- base: `errors`, `redact`, `ids`, `naming` — small modules every layer above shares;
- `adapters`: the world (stores, RunPod and Hub clients, runpod-flash, the simulator);
- the shell: everything else (the watch, the writer, the drivers, runs, the CLI, views).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flashfsm"
BASE = frozenset({"flashfsm.errors", "flashfsm.redact", "flashfsm.ids", "flashfsm.naming"})
ORDER = ("events", "fsm", "postmortem", "base", "adapters", "shell")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, source: str, is_package: bool) -> set[str]:
    """The flashfsm modules `source` imports (outside `if TYPE_CHECKING:` blocks)."""
    tree = ast.parse(source)
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(sub) for sub in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            target = _target(node, module, is_package)
            for alias in node.names:
                name = f"{target}.{alias.name}"
                if name in MODULES:
                    found.add(name)
                elif target in MODULES:
                    found.add(target)
    found.discard(module)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the flashfsm modules it imports."""
    return {
        name: imports_of(name, path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for name, path in MODULES.items()
    }


def layer(module: str) -> str:
    """Which layer a module belongs to."""
    if module in BASE:
        return "base"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("events", "fsm", "postmortem", "adapters"):
        return parts[1]
    return "shell"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_module_and_the_core_imports():
    graph = import_graph()
    assert {"flashfsm.fsm.job", "flashfsm.watch", "flashfsm.writer", "flashfsm.shell"} <= set(graph)
    assert "flashfsm.fsm.rules" in graph["flashfsm.fsm.job"]
    assert "flashfsm.writer" in graph["flashfsm.watch"]


def test_no_flashfsm_module_imports_itself_round_a_cycle():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_only_its_own_layer_and_those_below(module):
    mine = ORDER.index(layer(module))
    above = {target for target in import_graph()[module] if ORDER.index(layer(target)) > mine}
    assert not above, f"{module} ({layer(module)}) imports from a layer above it: {sorted(above)}"


# --- the checks can fail --------------------------------------------------------------------


def test_the_cycle_finder_finds_a_cycle_and_a_lazy_import_counts():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    lazy = "def f():\n    from flashfsm.shell import poll_job\n"
    assert imports_of("flashfsm.adapters.x", lazy, False) == {"flashfsm.shell"}
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import flashfsm.shell\n"
    assert imports_of("flashfsm.adapters.x", typing_only, False) == set()


def test_layers_are_named_by_package():
    assert [layer(m) for m in ("flashfsm.events.models", "flashfsm.fsm.job")] == ["events", "fsm"]
    assert [layer(m) for m in ("flashfsm.redact", "flashfsm.adapters.sqlite")] == [
        "base",
        "adapters",
    ]
    assert layer("flashfsm.watch") == layer("flashfsm") == "shell"
