"""What the package ships besides its code: the example logs (`example_logs`).

The example logs are a JSONL store, one file per stream as `flashfsm export` writes: four
training runs of the simulator (`run-walk`, `run-crashloop`, `run-stall`, `run-codeerror`)
and their job streams, and under `worker/` a run whose first attempt ran out of GPU memory
(its worker log lines recorded). The docs' transcripts run the commands over them; every
command that takes a SOURCE reads one of these files as it is. `flashfsm examples DEST`
copies them (`copy_example_logs`).
"""

from __future__ import annotations

import filecmp
import shutil
from importlib.resources import files
from pathlib import Path


def example_logs() -> Path:
    """The directory holding the installed example logs: a JSONL store of four simulator runs
    and their jobs (`run-stall.jsonl`, `job-stall-s0-a0.jsonl`, …), and under `worker/` a run
    whose first attempt ran out of GPU memory. Read them in place (`flashfsm replay
    <dir>/run-stall.jsonl`, `read_jsonl_file`, `open_store(f"jsonl://{dir}")`); they belong
    to the installation, so copy them (`flashfsm examples DEST`) before changing any.
    """
    directory = files("flashfsm") / "examples"
    if not isinstance(directory, Path):  # (a package imported from a zip archive)
        raise FileNotFoundError(
            f"the example logs are not a directory on disk ({directory}): install flashfsm "
            "unzipped, or read them with importlib.resources"
        )
    return directory


def example_files(directory: Path | None = None) -> list[Path]:
    """Every example log, relative to `directory` (default: `example_logs()`), sorted."""
    root = example_logs() if directory is None else directory
    return sorted(path.relative_to(root) for path in root.rglob("*.jsonl"))


def copy_example_logs(destination: Path) -> list[Path]:
    """Copy every example log into `destination` (created when missing, `worker/` kept),
    returning the files' paths there. A file already there with the same content is left
    as it is; one with other content is refused (`FileExistsError`) before anything is
    copied."""
    source = example_logs()
    names = example_files(source)
    for name in names:
        target = destination / name
        if target.exists() and not (
            target.is_file() and filecmp.cmp(source / name, target, shallow=False)
        ):
            raise FileExistsError(f"{target} already exists with other content: nothing copied")
    copied = []
    for name in names:
        target = destination / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, target)
        copied.append(target)
    return copied
