"""The example logs ship with the package: `flashfsm.example_logs()` and `flashfsm examples`.

The logs (tests/test_docs_examples.py makes them; worker/: tests/test_worker_evidence_views.py)
are package data of `flashfsm`, so a plain `pip install .` has them: the wheel holds every
one, and an installed (not editable) flashfsm finds them beside its code. `flashfsm
examples` prints their directory, or copies them into DEST; a file already there with other
content is refused in one line, nothing copied.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from typer.testing import CliRunner

import flashfsm
from flashfsm import example_logs
from flashfsm.cli import app
from tests.install_support import isolated_python

#: Every example log, relative to the directory (tests/test_docs_examples.py's runs and
#: tests/test_worker_evidence_views.py's under worker/).
NAMES = sorted(
    [
        *(f"job-{run}-s0-a{n}.jsonl" for run in ("walk", "crashloop", "stall") for n in (0, 1)),
        "job-codeerror-s0-a0.jsonl",
        *(f"run-{run}.jsonl" for run in ("walk", "crashloop", "stall", "codeerror")),
        "worker/job-oom-s0-a0.jsonl",
        "worker/job-oom-s0-a1.jsonl",
        "worker/run-oom.jsonl",
    ]
)


def invoke(args: list[str], columns: int = 200):
    return CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})


def files_under(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


# --- the directory -----------------------------------------------------------------------------


def test_example_logs_is_the_directory_of_every_example_log():
    directory = example_logs()
    assert isinstance(directory, Path) and directory.is_dir()
    assert directory == Path(flashfsm.__file__).parent / "examples"
    assert files_under(directory) == NAMES
    assert "example_logs" in flashfsm.__all__


def test_examples_prints_the_directory_on_one_line():
    result = invoke(["examples"], columns=20)  # (narrower than the path: it never wraps)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{example_logs()}\n"


# --- the copy ------------------------------------------------------------------------------------


def test_examples_dest_copies_every_log_worker_included(tmp_path: Path):
    dest = tmp_path / "new" / "examples"  # (its parent does not exist either)
    result = invoke(["examples", str(dest)])
    assert result.exit_code == 0, result.output
    assert files_under(dest) == NAMES
    for name in NAMES:
        assert (dest / name).read_bytes() == (example_logs() / name).read_bytes(), name
    assert str(dest) in result.stdout
    # a copy is a SOURCE like any log
    replayed = invoke(["replay", str(dest / "run-stall.jsonl")])
    assert replayed.exit_code == 0 and "run-stall" in replayed.output


def test_examples_dest_again_leaves_identical_files_and_adds_missing_ones(tmp_path: Path):
    assert invoke(["examples", str(tmp_path)]).exit_code == 0
    (tmp_path / "worker" / "run-oom.jsonl").unlink()
    (tmp_path / "notes.txt").write_text("mine")
    result = invoke(["examples", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path) == sorted([*NAMES, "notes.txt"])
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_file_with_other_content_is_refused_in_one_line_and_nothing_is_copied(
    tmp_path: Path,
):
    changed = tmp_path / "run-stall.jsonl"
    changed.write_text("my own log\n")
    result = invoke(["examples", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "run-stall.jsonl" in line and "other content" in line
    assert "Traceback" not in result.output
    assert changed.read_text() == "my own log\n"  # left as it was
    assert files_under(tmp_path) == ["run-stall.jsonl"]  # and nothing else copied


def test_a_dest_that_is_a_file_is_refused_in_one_line(tmp_path: Path):
    dest = tmp_path / "a-file"
    dest.write_text("x")
    result = invoke(["examples", str(dest)])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in result.output
    assert dest.read_text() == "x"


# --- what `pip install .` ships ------------------------------------------------------------------


def test_the_wheel_holds_every_example_log(flashfsm_wheel: Path):
    with zipfile.ZipFile(flashfsm_wheel) as wheel:
        shipped = sorted(
            name.removeprefix("flashfsm/examples/")
            for name in wheel.namelist()
            if name.startswith("flashfsm/examples/")
        )
        assert shipped == NAMES
        for name in NAMES:
            data = wheel.read(f"flashfsm/examples/{name}")
            assert data == (example_logs() / name).read_bytes(), name


def test_an_installed_flashfsm_finds_its_example_logs(installed_flashfsm: Path, tmp_path: Path):
    script = (
        "import flashfsm, sys\n"
        "from flashfsm.cli import main\n"
        "print(flashfsm.example_logs(), flush=True)\n"
        "sys.argv = ['flashfsm', 'examples', 'copied']\n"
        "main()\n"
    )
    done = isolated_python(installed_flashfsm, ["-c", script], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = Path(done.stdout.splitlines()[0])
    assert printed == installed_flashfsm / "flashfsm" / "examples"
    assert files_under(printed) == NAMES
    assert files_under(tmp_path / "copied") == NAMES
