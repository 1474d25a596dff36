"""A non-editable install of the checkout, as `pip install .` makes one: its wheel, and that
wheel installed into a directory of its own.

The wheel is built from a copy of what the build reads (pyproject.toml, README.md and the
package's directory), so that building writes nothing into the checkout (no build/, no
egg-info) and two test runs never build in the same place. No build isolation: the build
backend is the environment's setuptools (the dev extra pins one that builds wheels), and
nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the build reads from the checkout.
BUILD_INPUTS = ("pyproject.toml", "README.md", "flashfsm")
BUILD_TIMEOUT_S = 300


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "PIP_NO_INDEX": "1"},  # (nothing downloaded: --no-deps)
    )
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


def build_wheel(out: Path, root: Path = ROOT) -> Path:
    """Build the wheel of `root`'s checkout into `out`; its path."""
    source = out / "source"
    source.mkdir(parents=True)
    for name in BUILD_INPUTS:
        if (root / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
            shutil.copytree(root / name, source / name, ignore=ignore)
        else:
            shutil.copyfile(root / name, source / name)
    dist = out / "dist"
    _pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(dist), str(source))
    [wheel] = dist.glob("flashfsm-*.whl")
    return wheel


def install_wheel(wheel: Path, site: Path) -> Path:
    """Install `wheel` (without its dependencies) into the directory `site`; `site`."""
    _pip("install", "--no-deps", "--quiet", "--target", str(site), str(wheel))
    return site


def dependency_paths() -> list[str]:
    """Where this environment's packages live (its site-packages): what an installed
    flashfsm imports beside itself."""
    return [path for path in site.getsitepackages() if Path(path).is_dir()]


def isolated_env(site_dir: Path, **extra: str) -> dict[str, str]:
    """This process's environment for a Python that sees `site_dir` first, then this
    environment's packages (`dependency_paths`): no other Python setting and no flashfsm
    one (`FLASHFSM_STORE` the tests set), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FLASHFSM_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(site_dir), *dependency_paths()]),
        PYTHONNOUSERSITE="1",
        PYTHONIOENCODING="utf-8",
        **extra,
    )
    return env


#: The interpreter's flags for `isolated_python`: no `site` (so the site-packages' .pth files,
#: among them the editable install's finder, never run), no user site, and no script's or
#: working directory's path in front of sys.path (as `python -I`, which would ignore
#: PYTHONPATH too).
ISOLATED_FLAGS = ("-S", "-s", "-P")


def isolated_python(
    site_dir: Path, args: list[str], cwd: Path, timeout: float, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `python <args>` against the flashfsm installed in `site_dir` (and the
    environment's dependencies), from `cwd`: the checkout's editable flashfsm cannot be
    imported there."""
    return subprocess.run(
        [sys.executable, *ISOLATED_FLAGS, *args],
        cwd=cwd,
        env=isolated_env(site_dir, **env),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )
