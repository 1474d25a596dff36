"""`whatif --all` over a corpus of 1,000 recorded simulator jobs: the time it takes.

The corpus is the test's (tests/test_whatif_corpus.py): the simulator's scenarios watched
by `poll_job` on the simulator's virtual clock, copied into a SQLite store until it holds
1,000 jobs. The figure is the wall time of `flashfsm whatif --all --set stall_after_s=30`
over it (reading the store, replaying every job under the new policy, the ledgers of the
changed ones), the median of a few rounds.

Usage: python bench/whatif_corpus.py [--rounds N]
Goal: under 60 s on the development machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashfsm.cli import app
from tests.test_whatif_corpus import JOBS, _corpus

GOAL_S = 60.0


def main() -> None:
    """Build the corpus, time `whatif --all` over it, print the figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flashfsm-bench-corpus-") as root:
        began = time.perf_counter()
        url, _, _ = _corpus(Path(root))
        built = time.perf_counter() - began
        times = []
        for _ in range(args.rounds):
            began = time.perf_counter()
            result = CliRunner().invoke(
                app, ["whatif", "--all", "--store", url, "--set", "stall_after_s=30", "--json"]
            )
            times.append(time.perf_counter() - began)
            assert result.exit_code == 0, result.output
    median = statistics.median(times)
    print(f"corpus of {JOBS} jobs built in {built:.1f} s")
    print(
        f"whatif --all over {JOBS} jobs: {median:.2f} s median of {args.rounds} "
        f"({median / JOBS * 1000:.2f} ms per job); goal < {GOAL_S:.0f} s: "
        + ("met" if median < GOAL_S else "MISSED")
    )


if __name__ == "__main__":
    main()
