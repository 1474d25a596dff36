"""`import flashfsm` loads only what the caller uses; `flashfsm --help` loads no command.

The package's public names are loaded from their modules on first use (PEP 562:
`flashfsm.__getattr__`, `flashfsm.EXPORTS`); the `flashfsm` command loads a command's group
of modules only when that command runs (`flashfsm.cli.COMMANDS`). Each check that looks at
`sys.modules` runs in a fresh interpreter, so nothing this test process imported counts.
How long an import takes is the benchmarks' business (`bench/imports.py`), not this file's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.core import TyperCommand

import flashfsm
from flashfsm import cli

ROOT = Path(__file__).resolve().parent.parent
#: Import names of the libraries `import flashfsm` leaves for first use (runpod-flash is
#: `runpod_flash`, psycopg's pool `psycopg_pool`; httpx would bring rich and click with it).
HEAVY = (
    "typer",
    "click",
    "rich",
    "httpx",
    "psycopg",
    "psycopg_pool",
    "starlette",
    "uvicorn",
    "jinja2",
    "huggingface_hub",
    "runpod",
    "runpod_flash",
    "prometheus_client",
    "cloudpickle",
)
#: The package's own modules that bring those (or that only a command needs).
HEAVY_OWN = (
    "flashfsm.adapters",
    "flashfsm.cli",
    "flashfsm.display",
    "flashfsm.fleet",
    "flashfsm.fleet_identity",
    "flashfsm.fleet_intake",
    "flashfsm.fleet_keeper",
    "flashfsm.ui",
)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (its stdout is the list)."""
    script = textwrap.dedent(code) + (
        "\nimport json as _json, sys as _sys\n"
        "_sys.__stdout__.write('\\n' + _json.dumps(sorted(_sys.modules)) + '\\n')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def heavy_in(modules: set[str]) -> list[str]:
    """Which of `HEAVY` and `HEAVY_OWN` (or their submodules) `modules` holds."""
    return sorted(
        m
        for m in modules
        if m.split(".")[0] in HEAVY or any(m == own or m.startswith(own + ".") for own in HEAVY_OWN)
    )


# --- the package -----------------------------------------------------------------------------


def test_import_flashfsm_loads_none_of_the_heavy_libraries():
    loaded = loaded_after("import flashfsm")
    assert heavy_in(loaded) == []
    assert {"flashfsm.sigint", "flashfsm.redact"} <= loaded  # what the package guarantees


def test_a_name_from_the_core_loads_no_adapter_library():
    loaded = loaded_after("from flashfsm import replay, verify, GracePolicy, JobState, Verdict")
    assert "flashfsm.fsm.job" in loaded
    assert heavy_in(loaded) == []


def test_the_run_drivers_load_no_http_client_until_a_runpod_adapter_calls():
    # (an orchestrator with adapters of its own pays for no RunPod client)
    loaded = loaded_after("from flashfsm import supervise_run, asupervise_run, RunResult")
    assert "flashfsm.runs" in loaded
    assert [m for m in heavy_in(loaded) if not m.startswith("flashfsm.adapters")] == []
    assert "httpx" not in loaded


def test_a_store_loads_its_adapter_and_still_no_client_library():
    loaded = loaded_after("from flashfsm import MemoryStore, SqliteStore")
    assert "flashfsm.adapters.sqlite" in loaded
    assert [m for m in heavy_in(loaded) if not m.startswith("flashfsm.adapters")] == []


def test_every_public_name_resolves_in_a_fresh_interpreter():
    loaded_after(
        """
        import importlib
        import flashfsm
        for module, names in flashfsm.EXPORTS.items():
            for name in names:
                value = getattr(flashfsm, name)
                assert value is getattr(importlib.import_module(module), name), name
        from flashfsm import *  # noqa: F403
        assert set(flashfsm.__all__) <= set(dir(flashfsm))
        """
    )


@pytest.mark.parametrize("name", sorted(flashfsm.__all__))
def test_each_public_name_is_its_modules_object(name: str):
    value = getattr(flashfsm, name)
    if name == "__version__":
        assert isinstance(value, str)
        return
    home = next(module for module, names in flashfsm.EXPORTS.items() if name in names)
    assert value is getattr(importlib.import_module(home), name)
    assert name in dir(flashfsm)


def test_the_table_the_type_checking_imports_and_all_name_the_same_things():
    tree = ast.parse((ROOT / "flashfsm" / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    typed = {
        (node.module, alias.name)
        for node in ast.walk(guarded)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    table = {(module, name) for module, names in flashfsm.EXPORTS.items() for name in names}
    assert typed == table
    assert {name for _, name in table} == set(flashfsm.__all__) - {"__version__"}


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = flashfsm.no_such_name  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        exec("from flashfsm import no_such_name", {})


def test_the_events_package_loads_its_modules_on_first_use_too():
    loaded = loaded_after("import flashfsm.events.text")
    assert "flashfsm.events.models" not in loaded
    loaded_after(
        """
        import flashfsm.events as events
        for name in events.__all__:
            getattr(events, name)
        from flashfsm.events import *  # noqa: F403
        """
    )


# --- the command -----------------------------------------------------------------------------


def test_flashfsm_help_loads_no_command_and_no_output_library():
    loaded = loaded_after(
        """
        import sys
        sys.argv = ["flashfsm", "--help"]
        from flashfsm.cli import main
        try:
            main()
        except SystemExit as exit:
            assert exit.code == 0, exit.code
        """
    )
    commands = {f"flashfsm.cli.{entry.module}" for _, entry in cli.COMMANDS}
    assert sorted(commands & loaded) == []
    assert [m for m in loaded if m.split(".")[0] in ("rich", "httpx", "starlette")] == []


@pytest.mark.parametrize(
    ("command", "its_module", "not_loaded"),
    [
        ("diagram", "flashfsm.cli.tools", ("flashfsm.adapters.simulator", "httpx", "starlette")),
        ("ls", "flashfsm.cli.store", ("flashfsm.cli.fleet", "starlette", "huggingface_hub")),
    ],
)
def test_a_command_loads_its_own_group_only(command, its_module, not_loaded):
    loaded = loaded_after(
        f"""
        import sys
        sys.argv = ["flashfsm", "{command}", "--help"]
        from flashfsm.cli import main
        try:
            main()
        except SystemExit as exit:
            assert exit.code == 0, exit.code
        """
    )
    assert its_module in loaded
    assert [m for m in loaded if m.split(".")[0] in not_loaded or m in not_loaded] == []


@pytest.mark.parametrize(("name", "entry"), cli.COMMANDS, ids=[name for name, _ in cli.COMMANDS])
def test_each_listed_summary_is_the_first_sentence_of_the_commands_help(name, entry):
    doc = inspect.getdoc(cli.command_function(entry))
    assert doc, f"{name} has no help"
    whole = 10**6  # no cut: the sentence the listing cuts to the terminal's width
    first = TyperCommand(name, help=doc).get_short_help_str(whole)
    assert TyperCommand(name, help=entry.summary).get_short_help_str(whole) == first


def test_the_lazy_listing_reads_as_the_commands_own_help_would():
    # the listing from COMMANDS against typer's own listing of the loaded commands
    from typer.main import get_command

    group = get_command(cli.app)
    ctx = group.make_context("flashfsm", ["--help"], resilient_parsing=True)
    for width in (60, 80, 200):
        formatter = ctx.make_formatter()
        formatter.width = width
        group.format_commands(ctx, formatter)
        limit = width - 6 - max(len(name) for name, _ in cli.COMMANDS)
        for name, _ in cli.COMMANDS:
            real = group.get_command(ctx, name).get_short_help_str(limit)
            assert f"{name}  " in formatter.getvalue() and real in formatter.getvalue(), name
