"""What every A/B bench shares: the baseline tree, the child processes and their order.

An A/B compares the code of a baseline commit (A, checked out into a temporary
`git worktree`) with this tree (B) in one run: each measurement runs in a fresh child
process whose `PYTHONPATH` puts one tree or the other first, and the runs are interleaved
(A B, B A, A B, ...) so the noise of a shared machine falls on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The two sides, as the runs and the summaries name them.
SIDES = ("A", "B")


@contextlib.contextmanager
def baseline(commit: str, scratch: Path) -> Iterator[Path]:
    """`commit` checked out under `scratch` for the run (removed after, whatever happens)."""
    tree = scratch / "base"
    git = ["git", "-C", str(ROOT), "worktree"]
    subprocess.run([*git, "add", "--detach", "-q", str(tree), commit], check=True)
    try:
        yield tree
    finally:
        subprocess.run([*git, "remove", "--force", str(tree)], check=True)


def arguments(doc: str, *, rounds: int, quick: str) -> argparse.ArgumentParser:
    """A parser with what every A/B takes: `--base`, `--rounds`, `--quick` (`quick` says
    what it shrinks to) and the hidden `--child SIDE` its children run with."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the baseline commit (A)")
    parser.add_argument("--rounds", type=int, default=rounds, help="runs of each side")
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def compare(commit: str, rounds: int, script: str, argv: list[str]) -> dict[str, list[Any]]:
    """The whole A/B of `script`: its children (`--child SIDE` and `argv`) on `commit`'s
    checkout and on this tree, `rounds` a side, interleaved; their results by side."""
    with (
        tempfile.TemporaryDirectory(prefix="flashfsm-base-") as tmp,
        baseline(commit, Path(tmp)) as base,
    ):
        return interleaved(
            rounds, base, lambda side, tree: run_child(script, tree, ["--child", side, *argv])
        )


def run_child(
    script: str,
    tree: Path,
    argv: list[str],
    *,
    no_proxy: bool = False,
    prefix: Sequence[str] = (),
    env_extra: dict[str, str] | None = None,
) -> Any:
    """Run `script` with `argv` on `tree`'s code (its package and bench/ first, then this
    bench/ for what the baseline lacks); return the JSON of its last output line.

    `prefix` goes before the interpreter (a tool that runs it, e.g. valgrind's); `env_extra`
    is added to the child's environment."""
    env = dict(os.environ)
    if no_proxy:  # (loopback servers only: a proxy variable must not reroute them)
        env = {k: v for k, v in env.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "bench"), str(HERE)])
    env.update(env_extra or {})
    out = subprocess.run(
        [*prefix, sys.executable, script, *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def interleaved(
    rounds: int, base: Path, measure: Callable[[str, Path], dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """`measure(side, tree)` `rounds` times a side, in the order A B, B A, ...; each result
    is printed as it comes. Returns the results by side."""
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for round_ in range(rounds):
        pair = (("A", base), ("B", ROOT))
        for side, tree in pair if round_ % 2 == 0 else pair[::-1]:
            result = measure(side, tree)
            runs[side].append(result)
            print(json.dumps(result), flush=True)
    return runs


def ratios(
    runs: dict[str, list[dict[str, Any]]],
    figures: dict[str, tuple[str, ...]],
    average: Callable[[list[float]], float],
    digits: int = 2,
) -> dict[str, dict[str, float]]:
    """Each figure (a name → its key path in a run's result) averaged over a side's runs
    with `average`: A, B and B / A (below 1: B is cheaper or smaller)."""

    def value(run: dict[str, Any], path: tuple[str, ...]) -> float:
        found: Any = run
        for key in path:
            found = found[key]
        return float(found)

    summary = {}
    for name, path in figures.items():
        a, b = (average([value(run, path) for run in runs[side]]) for side in SIDES)
        summary[name] = {"A": round(a, digits), "B": round(b, digits), "B/A": round(b / a, 3)}
    return summary
