"""The docs are executed: every code block of README.md and docs/*.md is checked.

Each fenced block's language says what is done with it; a block of any other language (or
none) fails here, so nothing is skipped silently:

- `python`: each block run alone, as written, as a reader who copies it would: in a Python
  process of its own (a later block shares nothing with an earlier one: each has its own
  imports), from an empty temporary directory (a snippet runs from anywhere, not only from
  the repository), against the package installed from its wheel, not the editable checkout
  (the `installed_flashfsm` fixture of tests/conftest.py, as `pip install .` makes it, with
  this environment's packages as its dependencies; `isolated_python` of
  tests/install_support.py runs it with `python -S -s -P`, so the checkout cannot be
  imported), with `HOME` (and so the default store) in a scratch directory of its own, no
  `FLASHFSM_*` variable, and a timeout (`BLOCK_TIMEOUT_S`). Nothing else is set up, so
  every example is self-contained. A failure names the page and the block's number and
  shows the end of its stderr;
- `python-signature`: a function's or class's signature as `name(parameters) -> result`,
  checked against `inspect.signature` of the real object (`flashfsm.<name>`): the same
  parameters, kinds and defaults, and the same result annotation when one is shown;
- `console`: a transcript of `flashfsm` commands, run by tests/test_docs_transcripts.py;
- `mermaid`: the state diagram, checked by tests/test_docs_generated.py;
- `bash`: only the README's Quickstart, checked by tests/test_readme.py (not executed: it
  installs the package);
- `text`: a sketch that is neither run nor checked (architecture.md's pseudo-code of the
  shell loop);
- `python-airflow`, `python-dagster`, `python-dbos`, `python-prefect`: an orchestrator's
  example (docs/embedding.md), run by that orchestrator's tests under tests/integrations/
  (`doc_block`), which skip with a visible reason when it is not installed.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import subprocess
import time
from pathlib import Path

import pytest

import flashfsm
from tests.install_support import isolated_python

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
#: An orchestrator's example (docs/embedding.md): run by that orchestrator's own tests under
#: tests/integrations/, which need it installed (`doc_block("python-<orchestrator>")`).
ORCHESTRATOR_BLOCKS = {"python-airflow", "python-dagster", "python-dbos", "python-prefect"}
LANGUAGES = {"python", "python-signature", "console", "mermaid", "bash", "text"}
LANGUAGES |= ORCHESTRATOR_BLOCKS


def blocks(path: Path, language: str = "python") -> list[str]:
    """The code blocks of one language of a Markdown file, in order."""
    return [
        body for lang, body in FENCE.findall(path.read_text(encoding="utf-8")) if lang == language
    ]


# --- every fence is of a known kind ------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_code_block_says_what_it_is(path: Path):
    languages = [lang for lang, _ in FENCE.findall(path.read_text(encoding="utf-8"))]
    unknown = [lang or "(none)" for lang in languages if lang not in LANGUAGES]
    assert not unknown, f"{path.name}: fences of no checked kind: {unknown}"
    if path.name != "README.md":
        assert "bash" not in languages, f"{path.name}: a bash block is never run; use console"


def test_every_orchestrator_block_is_run_by_its_orchestrators_tests():
    used = {
        lang
        for path in PAGES
        for lang, _ in FENCE.findall(path.read_text(encoding="utf-8"))
        if lang in ORCHESTRATOR_BLOCKS
    }
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
    unrun = sorted(lang for lang in used if f'"{lang}"' not in tests)
    assert not unrun, f"no test runs the docs' {unrun} blocks"


def test_the_docs_have_runnable_examples():
    assert len(blocks(ROOT / "docs" / "architecture.md")) >= 4
    readme = "\n".join(blocks(ROOT / "README.md"))
    for call in ("poll_job(", "supervise_run(", "Supervisor("):
        assert call in readme, f"the README has no runnable example of {call}...)"


# --- python blocks run ---------------------------------------------------------------------------


#: How long one python block may run (the slowest take a few seconds; the machine is shared).
BLOCK_TIMEOUT_S = 180
#: How much of a failed block's stderr the failure shows (its last lines).
STDERR_TAIL_LINES = 40
PYTHON_BLOCKS = [
    (path, number, source) for path in PAGES for number, source in enumerate(blocks(path), start=1)
]


def run_block(site: Path, page: str, number: int, source: str, scratch: Path) -> str | None:
    """Run one python block alone against the install in `site`, from an empty directory;
    None when it succeeded, else what went wrong (the end of its stderr)."""
    script = scratch / "blocks" / f"{Path(page).stem}-python-block-{number}.py"
    script.parent.mkdir(parents=True)
    script.write_text(source, encoding="utf-8")
    cwd, home = scratch / "anywhere", scratch / "home"
    cwd.mkdir()
    home.mkdir()
    where = f"{page}, python block {number}"
    try:
        done = isolated_python(
            site,
            [str(script)],
            cwd=cwd,
            timeout=BLOCK_TIMEOUT_S,
            HOME=str(home),
            XDG_DATA_HOME=str(home / ".local" / "share"),
            HF_HOME=str(home / "hf"),
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr or b""  # (what it printed so far)
        err = err.decode(errors="replace") if isinstance(err, bytes) else err
        return f"{where} did not finish in {BLOCK_TIMEOUT_S} s:\n{_tail(err)}"
    if done.returncode != 0:
        return f"{where} exited {done.returncode}:\n{_tail(done.stderr)}"
    return None


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-STDERR_TAIL_LINES:])


@pytest.mark.parametrize(
    ("path", "number", "source"),
    PYTHON_BLOCKS,
    ids=[f"{path.name}:{number}" for path, number, _ in PYTHON_BLOCKS],
)
def test_every_python_block_runs_alone_against_the_installed_package(
    path: Path, number: int, source: str, installed_flashfsm: Path, tmp_path: Path
):
    failure = run_block(installed_flashfsm, path.name, number, source, tmp_path)
    if failure:
        pytest.fail(failure, pytrace=False)


def test_a_block_runs_alone_from_an_empty_directory_against_the_install(
    installed_flashfsm: Path, tmp_path: Path
):
    source = (
        "import os, sys, flashfsm\n"
        "assert os.listdir('.') == [], os.listdir('.')\n"
        f"assert flashfsm.__file__.startswith({str(installed_flashfsm)!r}), flashfsm.__file__\n"
        # (the checkout's root, where its flashfsm/ lies, is not on the path; a virtualenv
        # inside the checkout, as CI's, is: its site-packages hold the dependencies)
        f"assert {str(ROOT.resolve())!r} not in map(os.path.realpath, sys.path), sys.path\n"
        "assert 'namespace' not in globals()\n"
        "namespace = 1\n"
    )
    assert run_block(installed_flashfsm, "page.md", 1, source, tmp_path / "1") is None
    assert run_block(installed_flashfsm, "page.md", 2, source, tmp_path / "2") is None
    failed = run_block(installed_flashfsm, "page.md", 3, "raise SystemExit('boom')", tmp_path)
    assert failed is not None and failed.startswith("page.md, python block 3 exited 1:")
    assert failed.endswith("boom")


# --- signature blocks match the code --------------------------------------------------------------

#: What a default in a signature block may name.
DEFAULTS_NAMESPACE = {  # (every public name: the package loads each on first use)
    "time": time,
    "asyncio": asyncio,
    **{name: getattr(flashfsm, name) for name in flashfsm.__all__},
}


def documented(signature: str) -> tuple[str, ast.FunctionDef]:
    """(the name, its parsed parameters and result) of a `name(...) -> result` block."""
    name, _, rest = signature.strip().partition("(")
    tree = ast.parse(f"def _({rest}: ...")
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    return name.strip(), function


def real_object(name: str) -> object:
    target: object = flashfsm
    for part in name.split("."):
        target = getattr(target, part)
    return target


def _same_default(shown: str, real: object) -> bool:
    value = eval(shown, dict(DEFAULTS_NAMESPACE))  # a default as the docs spell it
    return value is real or value == real


SIGNATURES = [(path, body) for path in PAGES for body in blocks(path, "python-signature")]


@pytest.mark.parametrize(
    ("path", "block"), SIGNATURES, ids=[f"{p.name}:{b.split('(')[0]}" for p, b in SIGNATURES]
)
def test_every_signature_block_is_the_real_signature(path: Path, block: str):
    name, shown = documented(block)
    real = inspect.signature(real_object(name))
    args = shown.args
    kinds = [
        *[(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in args.args],
        *([(args.vararg, inspect.Parameter.VAR_POSITIONAL)] if args.vararg else []),
        *[(a, inspect.Parameter.KEYWORD_ONLY) for a in args.kwonlyargs],
        *([(args.kwarg, inspect.Parameter.VAR_KEYWORD)] if args.kwarg else []),
    ]
    assert [(a.arg, kind) for a, kind in kinds] == [
        (p.name, p.kind) for p in real.parameters.values()
    ]
    positional_defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    defaults = [*positional_defaults, *args.kw_defaults]
    plain = [
        a
        for a, kind in kinds
        if kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    for arg, default in zip(plain, defaults, strict=True):
        parameter = real.parameters[arg.arg]
        if default is None:
            assert parameter.default is inspect.Parameter.empty, f"{name}: {arg.arg} has a default"
        else:
            shown_default = ast.unparse(default)
            assert parameter.default is not inspect.Parameter.empty, f"{name}: {arg.arg} has none"
            assert _same_default(shown_default, parameter.default), (
                f"{name}: {arg.arg}={shown_default}, the code says {parameter.default!r}"
            )
    if shown.returns is not None:
        assert ast.unparse(shown.returns) == str(real.return_annotation).strip("'"), name


def test_a_wrong_signature_block_fails():
    name, shown = documented("poll_job(handle, log=None, interval_s=5.0) -> PollResult")
    real = inspect.signature(real_object(name))
    assert [a.arg for a in shown.args.args] != list(real.parameters)
    assert not _same_default("5.0", real.parameters["interval_s"].default)
