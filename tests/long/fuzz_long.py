"""The long fuzz run: each target of tests/test_fuzz.py for 100,000 inputs (by default).

    python tests/long/fuzz_long.py                       # every target, 100,000 inputs each
    python tests/long/fuzz_long.py --examples 1000 codec_decode read_jsonl_file
    python tests/long/fuzz_long.py --list

The targets, their input strategies and their invariants are those of the bounded run in
tests/test_fuzz.py (its `TARGETS`): only the number of inputs differs. Hypothesis runs with
no example database (`database=None`), so every run explores afresh, and without deadlines
(each check has its own hang guard: a SIGALRM after 30 s). A failure is shrunk and printed,
and the run goes on with the next target; the exit status is 1 when any target failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from tests.test_fuzz import TARGETS, Target  # noqa: E402

DEFAULT_EXAMPLES = 100_000
PROGRESS_EVERY = 10_000  # a progress line every so many inputs


def run(name: str, target: Target, examples: int, random_seed: int | None) -> bool:
    """Fuzz one target; print how many inputs it took and any failure. True when it held."""
    tried = 0

    started = time.monotonic()

    def one(value: object) -> None:
        nonlocal tried
        tried += 1
        if tried % PROGRESS_EVERY == 0:
            print(f"  {name}: {tried:,} inputs, {time.monotonic() - started:.0f} s", flush=True)
        target.check(value)

    test = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )(given(target.inputs)(one))
    if random_seed is not None:
        test = seed(random_seed)(test)
    failure: BaseException | None = None
    try:
        test()
    except KeyboardInterrupt:
        print(f"{name:24} {tried:>9,} inputs  interrupted", flush=True)
        raise
    except BaseException as exc:  # a failed invariant, a hang, or a crash of the target
        failure = exc
    elapsed = time.monotonic() - started
    status = "ok" if failure is None else "FAILED"
    print(
        f"{name:24} {tried:>9,} inputs  {elapsed:8.1f} s  {tried / max(elapsed, 1e-9):8.0f}/s  "
        f"{status}",
        flush=True,
    )
    if failure is not None:
        print("".join(traceback.format_exception(failure)), flush=True)
    return failure is None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help="targets to run (default: all)")
    parser.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, help="inputs per target")
    parser.add_argument("--seed", type=int, default=None, help="a Hypothesis seed, to repeat a run")
    parser.add_argument("--list", action="store_true", help="list the targets and stop")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(TARGETS))
        return 0
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {sorted(TARGETS)}")
    logging.disable(logging.WARNING)  # torn lines in fuzzed logs are expected, by the thousand
    names = args.targets or list(TARGETS)
    print(f"fuzzing {len(names)} targets, {args.examples:,} inputs each", flush=True)
    failed = [name for name in names if not run(name, TARGETS[name], args.examples, args.seed)]
    print(
        f"{len(names) - len(failed)} held, {len(failed)} failed" + (f": {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
