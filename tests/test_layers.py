"""The layers point one way, and no flashfsm module imports itself round a cycle.

Every import of every module counts — at the top, inside a function (a lazy import that
dodges a cycle is still a cycle), or in a try — except those under `if TYPE_CHECKING:`.
The layers, lowest first (each may import the ones before it, and itself):

- `events`: the recorded format (models, codec, policy, text, the store protocol);
- `fsm`: the pure decision core (rules, fold, decisions);
- `postmortem`: the pure post-mortem and presentation (explanations, the ledger, generated docs);
- base: `errors`, `redact`, `ids`, `naming` — small modules every layer above shares;
- `adapters`: the world (stores, RunPod and Hub clients, runpod-flash, the simulator);
- the shell: everything else, itself in layers, lowest first:
  - display: what the front ends show (`display/`, `views`, `render`);
  - drivers: the writer, the watch and its drivers, runs, the fleet, the sweeper, the
    store's facts, the worker's live log, the integrations, the demo (and the rest);
  - front ends: the web view (`ui/`) and the Prometheus metrics (`metrics`);
  - cli: the command line (`cli/`), over all of them.
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
#: The shell's own layers, lowest first (`shell_layer`).
SHELL_ORDER = ("display", "drivers", "front ends", "cli")
DISPLAY = ("flashfsm.display", "flashfsm.views", "flashfsm.render")
FRONT_ENDS = ("flashfsm.ui", "flashfsm.metrics")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def import_target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `module`)."""
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
            target = import_target(node, module, is_package)
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


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def shell_layer(module: str) -> str:
    """Which of the shell's layers a shell module belongs to."""
    if _under(module, ("flashfsm.cli",)):
        return "cli"
    if _under(module, FRONT_ENDS):
        return "front ends"
    if _under(module, DISPLAY):
        return "display"
    return "drivers"


def shell_imports_above(module: str, graph: dict[str, set[str]]) -> set[str]:
    """The shell modules `module` (one of the shell's) imports from a shell layer above its own."""
    mine = SHELL_ORDER.index(shell_layer(module))
    return {
        target
        for target in graph.get(module, ())
        if layer(target) == "shell" and SHELL_ORDER.index(shell_layer(target)) > mine
    }


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


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) == "shell"))
def test_each_shell_module_imports_only_its_own_shell_layer_and_those_below(module):
    above = shell_imports_above(module, import_graph())
    assert not above, (
        f"{module} ({shell_layer(module)}) imports from a shell layer above it: {sorted(above)}"
    )


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


def test_the_shell_layers_are_named_by_module():
    named = {
        "display": (
            "flashfsm.display",
            "flashfsm.display.text",
            "flashfsm.views",
            "flashfsm.render",
        ),
        "drivers": ("flashfsm", "flashfsm.runs", "flashfsm.store_facts", "flashfsm.live_log"),
        "front ends": ("flashfsm.ui", "flashfsm.ui.pages", "flashfsm.metrics"),
        "cli": ("flashfsm.cli", "flashfsm.cli.logs"),
    }
    assert {m: shell_layer(m) for ms in named.values() for m in ms} == {
        m: name for name, ms in named.items() for m in ms
    }
    assert shell_layer("flashfsm.renderer") == shell_layer("flashfsm.uix") == "drivers"


def test_the_shell_check_finds_a_front_end_or_the_display_importing_from_above():
    # the web view that runs a CLI command again, even lazily inside a function
    lazy = "def live():\n    from flashfsm.cli.logs import explain_command\n"
    graph = {
        "flashfsm.ui.pages": imports_of("flashfsm.ui.pages", lazy, False)
        | {"flashfsm.display.explain"},
        "flashfsm.store_facts": {"flashfsm.cli.store", "flashfsm.display.listing"},
        "flashfsm.display.listing": {"flashfsm.ui.index", "flashfsm.views"},
        "flashfsm.cli.logs": {"flashfsm.ui.app", "flashfsm.display.explain", "flashfsm.events"},
    }
    assert shell_imports_above("flashfsm.ui.pages", graph) == {"flashfsm.cli.logs"}
    assert shell_imports_above("flashfsm.store_facts", graph) == {"flashfsm.cli.store"}
    assert shell_imports_above("flashfsm.display.listing", graph) == {"flashfsm.ui.index"}
    assert shell_imports_above("flashfsm.cli.logs", graph) == set()
