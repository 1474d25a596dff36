"""The house rule (docs/architecture.md, "The layers"): `flashfsm/fsm` and `flashfsm/events`
decide and record, and do nothing else. They import nothing from `flashfsm.adapters` (nor the
shell that uses it), open no file or socket, and never read a clock.

Checked twice: statically, with `ast` over every source file of the two packages, and at
run time, by importing them in a fresh interpreter and looking at `sys.modules`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_layers import import_target

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flashfsm"
PURE_PACKAGES = ("fsm", "postmortem", "events")
PURE_FILES = sorted(path for name in PURE_PACKAGES for path in (PACKAGE / name).rglob("*.py"))

#: Modules whose import alone means I/O or a clock (stdlib and the project's I/O dependencies).
FORBIDDEN_MODULES = frozenset(
    {
        "time",
        "datetime",
        "socket",
        "ssl",
        "select",
        "selectors",
        "os",
        "io",
        "pathlib",
        "shutil",
        "tempfile",
        "glob",
        "sqlite3",
        "subprocess",
        "asyncio",
        "urllib",
        "http",
        "random",
        "secrets",
        "uuid",
        "importlib",
        "httpx",
        "requests",
        "psycopg",
        "psycopg_pool",
        "huggingface_hub",
        "runpod",
        "runpod_flash",
        "cloudpickle",
        "pickle",
    }
)
#: Submodules of a forbidden package that only compute on strings (no I/O, no clock).
PURE_SUBMODULES = frozenset({"urllib.parse"})
#: flashfsm modules the pure core must not import: the adapters and everything built on them.
FORBIDDEN_FLASHFSM = ("flashfsm.adapters", "flashfsm.shell", "flashfsm.supervisor", "flashfsm.cli")
#: Calls that read a clock or do I/O, whatever module object they are reached through.
FORBIDDEN_CALLS = frozenset({"open", "print", "input", "__import__", "eval", "exec"})
FORBIDDEN_METHODS = frozenset(
    {
        "now",
        "utcnow",
        "today",
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "sleep",
        "urandom",
        "read_text",
        "write_text",
        "read_bytes",
        "write_bytes",
        "import_module",
    }
)


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _forbidden_module(name: str) -> bool:
    if any(name == pure or name.startswith(pure + ".") for pure in PURE_SUBMODULES):
        return False
    if name.split(".")[0] in FORBIDDEN_MODULES:
        return True
    if name == "flashfsm":  # the top-level package's __init__ imports the adapters
        return True
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_FLASHFSM)


def impurities(source: str, module: str = "flashfsm.fsm.example", is_package: bool = False):
    """Every line of `source` that breaks the house rule, as 'line N: what'."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {alias.name}"
                for alias in node.names
                if _forbidden_module(alias.name)
            ]
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, module, is_package)
            for alias in node.names:
                # `from flashfsm import fsm` names a pure subpackage; any other name from the
                # top-level package (`adapters`, `MemoryStore`, …) comes through its __init__
                pure_subpackage = target == "flashfsm" and alias.name in PURE_PACKAGES
                if not pure_subpackage and (
                    _forbidden_module(target) or _forbidden_module(f"{target}.{alias.name}")
                ):
                    found.append(f"line {node.lineno}: from {target} import {alias.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"line {node.lineno}: call {func.id}()")
            elif isinstance(func, ast.Attribute) and (
                func.attr in FORBIDDEN_METHODS or func.attr in FORBIDDEN_CALLS
            ):
                found.append(f"line {node.lineno}: call .{func.attr}()")
    return found


# --- the real sources -----------------------------------------------------------------------


def test_the_pure_packages_have_sources_to_check() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in PURE_FILES}
    assert {"fsm/job.py", "fsm/rules.py", "fsm/machine.py", "events/codec.py"} <= names
    assert {"events/models.py", "events/__init__.py", "fsm/__init__.py"} <= names


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_pure_module_imports_io_reads_a_clock_or_opens_anything(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    found = impurities(source, _module_of(path), path.name == "__init__.py")
    assert not found, f"{path.relative_to(ROOT)} breaks the house rule:\n" + "\n".join(found)


_IMPORT_PURE_CORE = textwrap.dedent(
    """
    import importlib, json, sys, types

    root, targets = sys.argv[1], json.loads(sys.argv[2])
    # Stand in for the top-level package without running its __init__ (the public API, which
    # rightly imports the adapters): whatever then loads was imported by the targets.
    package = types.ModuleType("flashfsm")
    package.__path__ = [root + "/flashfsm"]
    sys.modules["flashfsm"] = package
    for target in targets:
        importlib.import_module(target)
    print(json.dumps(sorted(sys.modules)))
    """
)


def _modules_loaded_by(targets: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after importing `targets` (and nothing else)."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_PURE_CORE, str(ROOT), json.dumps(targets)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def _impure(modules: set[str]) -> list[str]:
    io_dependencies = ("httpx", "psycopg", "sqlite3", "huggingface_hub", "runpod", "cloudpickle")
    return sorted(
        m
        for m in modules
        if (m.startswith("flashfsm.") and m.split(".")[1] not in PURE_PACKAGES)
        or m.split(".")[0] in io_dependencies
    )


def test_importing_the_pure_core_loads_no_adapter_and_no_io_library() -> None:
    targets = [_module_of(path) for path in PURE_FILES]
    loaded = _modules_loaded_by(["flashfsm.fsm.job", "flashfsm.events", *targets])
    assert "flashfsm.fsm.job" in loaded and "flashfsm.events.codec" in loaded
    assert _impure(loaded) == []


# --- the checks can fail --------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import time",
        "import time as clock",
        "from time import monotonic",
        "import os",
        "import os.path",
        "from os import environ",
        "import io",
        "import socket",
        "import sqlite3",
        "import httpx",
        "import psycopg",
        "from pathlib import Path",
        "from datetime import datetime",
        "import flashfsm.adapters.memory",
        "from flashfsm.adapters import memory",
        "from flashfsm.adapters.memory import MemoryStore",
        "from flashfsm import adapters",
        "from flashfsm import MemoryStore",
        "from ..adapters import stores",
        "from ..adapters.stores import open_store",
        "from .. import adapters",
        "from flashfsm.shell import poll_job",
        "def f(path):\n    return open(path).read()",
        "def f(clock):\n    return clock.time()",
        "def f(dt):\n    return dt.datetime.now()",
        "def f(p):\n    return p.read_text()",
        "def f():\n    print('decided')",
        "def f(name):\n    return __import__(name)",
    ],
)
def test_the_checker_flags_a_violation(source: str) -> None:
    assert impurities(source, "flashfsm.fsm.example"), source


@pytest.mark.parametrize(
    "source",
    [
        "import json\nfrom dataclasses import dataclass",
        "from flashfsm.events.models import Concluded",
        "from flashfsm.fsm import rules",
        "from flashfsm import fsm",
        "from . import rules",
        "from ..events.errors import CorruptLogError",
        "from typing import TYPE_CHECKING",
        "from urllib.parse import quote",
        'def f(s, now):\n    return now - s.timers["progress"][0]',
    ],
)
def test_the_checker_accepts_pure_code(source: str) -> None:
    assert impurities(source, "flashfsm.fsm.example") == []


def test_the_runtime_check_sees_an_adapter_imported_by_a_module() -> None:
    loaded = _modules_loaded_by(["flashfsm.fsm.job", "flashfsm.shell"])
    assert any(m.startswith("flashfsm.adapters") for m in _impure(loaded))
