"""Run every benchmark (issues 7, 29 and 37: the web view's, the imports') and write RESULTS.md.

    python bench/run.py            # the full sizes (about 15 minutes on 2 cores)
    python bench/run.py --quick    # smaller sizes, a smoke test (CI runs it): bench/out/
    python bench/run.py --only replay,core                                  # bench/out/

Each benchmark is its own module under `bench/` (runnable alone) and measures its baseline
in the same run. RESULTS.md gets the machine's description, a summary table (each figure,
its goal, its baseline and the ratio, and whether the goal is met) and every module's
details (docs/performance.md points at that summary). Only a full run of every benchmark
writes RESULTS.md; a quick or partial run writes `bench/out/RESULTS-quick.md` or
`bench/out/RESULTS-partial.md` (not tracked), so a smoke test never overwrites the committed
figures.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import async_loop  # noqa: E402
import capacity  # noqa: E402
import commit  # noqa: E402
import core  # noqa: E402
import fleet  # noqa: E402
import imports  # noqa: E402
import reattach  # noqa: E402
import replay  # noqa: E402
import ui  # noqa: E402
from common import Section, machine, print_section  # noqa: E402

BENCHMARKS = {
    "replay": lambda quick: [replay.merge(replay.run(quick))],
    "reattach": reattach.run,
    "core": core.run,
    "commit": commit.run,
    "fleet": fleet.run,
    "capacity": capacity.run,
    "ui": ui.run,
    "imports": imports.run,
    "async_loop": async_loop.run,
}


def summary_table(sections: list[Section]) -> str:
    lines = [
        "| metric | goal | measured | baseline (same run) | ratio | met |",
        "|---|---|---|---|---|---|",
    ]
    for section in sections:
        for row in section.rows:
            if not row.summary:
                continue
            lines.append(
                f"| {row.metric} | {row.goal} | {row.measured()} | {row.baseline_text()} | "
                f"{row.ratio} | {row.verdict()} |"
            )
    return "\n".join(lines)


def results_markdown(
    sections: list[Section], quick: bool, facts: dict[str, str], seconds: float
) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    size = "quick sizes (`--quick`, a smoke test)" if quick else "full sizes"
    out = [
        "# Benchmark results",
        "",
        f"`python bench/run.py{' --quick' if quick else ''}`, {size}, {when}, "
        f"{seconds / 60:.1f} minutes. Every ratio compares figures measured in the same run.",
        "",
        "## Machine",
        "",
        *(f"- {name}: {value}" for name, value in facts.items()),
        "",
        "## Summary",
        "",
        summary_table(sections),
        "",
        "## Every figure",
        "",
    ]
    for section in sections:
        out += [f"### {section.title} ({section.seconds:.0f} s)", ""]
        out += [
            "| figure | value | goal | met | baseline | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for row in section.rows:
            out.append(
                f"| {row.metric} | {row.measured()} | {row.goal} | {row.verdict()} | "
                f"{row.baseline_text()} | {row.ratio} |"
            )
        out.append("")
        out += [f"- {line}" for line in section.details]
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, help="where to write (default: see the module's notes)")
    args = parser.parse_args()
    names = list(BENCHMARKS) if not args.only else args.only.split(",")
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    facts = machine()
    start = time.perf_counter()
    sections: list[Section] = []
    for name in names:
        for section in BENCHMARKS[name](args.quick):
            print_section(section)
            sys.stdout.flush()
            sections.append(section)
    seconds = time.perf_counter() - start
    full = not args.quick and not args.only
    if args.out is None:
        kind = "" if full else "-quick" if args.quick else "-partial"
        args.out = HERE / f"RESULTS{kind}.md" if full else HERE / "out" / f"RESULTS{kind}.md"
        args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(results_markdown(sections, args.quick, facts, seconds))
    print(f"wrote {args.out} ({seconds / 60:.1f} minutes)")
    unmet = [row.metric for s in sections for row in s.rows if row.met is False]
    if unmet:
        print(f"{len(unmet)} goal(s) not met: see {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
