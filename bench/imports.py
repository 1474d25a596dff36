"""What starting flashfsm costs: `import flashfsm` and `flashfsm --help`, each a fresh process.

An orchestrator imports flashfsm inside a task, a worker or an event loop's trigger (where an
import blocks the loop), and a shell runs `flashfsm` for one line of help; both pay the
import on every start. Each figure is the wall time of a whole fresh process, from spawn to
exit, and is held to its dependencies' own import, measured in the same run: a process that
runs `import pydantic, httpx, transitions` (what any use of flashfsm loads at least). The
three commands take turns, `ROUNDS` rounds of one each, in an order that rotates every
round, so a busy moment of the machine falls on every side alike; each figure is the median
of its rounds.

Every process runs with its bytecode cached, as in an installed package (pip compiles it):
the children write and read their bytecode under a temporary `PYTHONPYCACHEPREFIX` (never
in the tree or the environment), and one untimed run of each command fills it first. They
run in that directory, so the flashfsm they import is the installed one (or `PYTHONPATH`'s:
`PYTHONPATH=<another tree> python bench/imports.py` measures another tree's code), never a
`flashfsm/` folder in the current directory.

Usage: python bench/imports.py [--quick]   (the same 7 rounds either way)
Goals (issue 37): `import flashfsm` ≤ 1.3× the baseline; `flashfsm --help` ≤ 1.6× it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Row, Section, bench_main, fmt, median, timed

ROUNDS = 7
IMPORT_GOAL = 1.3
HELP_GOAL = 1.6
BASELINE_CODE = "import pydantic, httpx, transitions"
#: Third-party packages `import flashfsm` should leave for first use (import names).
DEFERRED = (
    "typer",
    "rich",
    "click",
    "psycopg",
    "starlette",
    "uvicorn",
    "jinja2",
    "huggingface_hub",
    "runpod_flash",
    "prometheus_client",
    "cloudpickle",
)
_LOADED = (
    "import json, sys; {code}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
)


def command_path() -> str:
    """The `flashfsm` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "flashfsm"
    found = str(beside) if beside.exists() else shutil.which("flashfsm")
    if not found:
        raise SystemExit("bench/imports.py: no `flashfsm` command (pip install -e .)")
    return found


def child_env(cache: str) -> dict[str, str]:
    """The children's environment: bytecode written and read under `cache` only."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = cache
    return env


def wall(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning `argv` to its exit (its output discarded; it must succeed)."""
    start = time.perf_counter()
    subprocess.run(
        argv,
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def top_level_modules(code: str, env: dict[str, str]) -> set[str]:
    """The top-level packages a fresh interpreter holds after running `code`."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED.format(code=code)],
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout))


def measure() -> Section:
    """The three commands' medians over `ROUNDS` interleaved rounds, and the two ratios."""
    section = Section(f"imports: fresh processes, median of {ROUNDS} interleaved rounds")
    commands = {
        "baseline": [sys.executable, "-c", BASELINE_CODE],
        "import": [sys.executable, "-c", "import flashfsm"],
        "help": [command_path(), "--help"],
        "interpreter": [sys.executable, "-c", "pass"],
    }
    with tempfile.TemporaryDirectory(prefix="flashfsm-bench-pyc-") as cache:
        env = child_env(cache)
        for argv in commands.values():  # fills the bytecode cache: untimed
            wall(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for turn in range(ROUNDS):
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                samples[name].append(wall(commands[name], env))
        loaded = top_level_modules("import flashfsm", env)
    ms = {name: median(values) * 1000 for name, values in samples.items()}
    base = ms["baseline"]
    for name, what, goal in (
        ("import", "`import flashfsm`, a fresh process", IMPORT_GOAL),
        ("help", "`flashfsm --help`, a fresh process", HELP_GOAL),
    ):
        ratio = ms[name] / base
        section.rows.append(
            Row(
                what,
                ms[name],
                "ms",
                f"≤ {goal:g}× `{BASELINE_CODE}`",
                ratio <= goal,
                baseline=f"`{BASELINE_CODE}`",
                baseline_value=base,
                ratio=f"{ratio:.2f}×",
            )
        )
    section.rows.append(
        Row(
            "`python -c pass` (the interpreter alone, for scale)",
            ms["interpreter"],
            "ms",
            summary=False,
            baseline=f"`{BASELINE_CODE}`",
            baseline_value=base,
            ratio=f"{ms['interpreter'] / base:.2f}×",
        )
    )
    spread = ", ".join(
        f"{name} {fmt(min(values) * 1000)}–{fmt(max(values) * 1000)} ms"
        for name, values in samples.items()
    )
    section.details.append(f"min–max over the rounds: {spread}")
    left = sorted(set(DEFERRED) & loaded)
    section.details.append(
        "third-party packages loaded by `import flashfsm` among those left for first use "
        f"({', '.join(DEFERRED)}): {', '.join(left) if left else 'none'}"
    )
    return section


def run(quick: bool) -> list[Section]:
    """The section (quick or not: the goals are medians of 7 rounds either way)."""
    return timed(measure)


def main() -> None:
    bench_main(__doc__, run)


if __name__ == "__main__":
    main()
