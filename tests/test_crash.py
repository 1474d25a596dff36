"""Crash consistency: SIGKILL a watching process after every append, reattach, compare.

Every scenario × every append boundary × SQLite, JSONL and Postgres (when
`FLASHFSM_TEST_POSTGRES_DSN` is set).

For each scenario the uninterrupted run gives the reference log. Then, for every append
boundary k of that log, a forked process runs the watch and kills itself with SIGKILL right
after the append that brings the stream to k events; a second forked process reattaches
and finishes. The verdict (state, rule, failure) and its time must equal the reference, the
final log must have contiguous seqs with no duplicate id, and `verify` must accept it.
"""

from __future__ import annotations

import signal

import pytest

from flashfsm import verify
from tests.crash_scenarios import SCENARIOS, run_watch
from tests.store_support import (
    append_boundaries,
    check_reattached,
    crash_store_kinds,
    read_stream,
    run_in_child,
    store_locations,
    verdict_of,
)

STREAM = "job-crash"


@pytest.mark.parametrize("store_kind", crash_store_kinds())
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sigkill_after_any_append_then_reattach_reaches_the_same_verdict(
    scenario, store_kind, tmp_path
):
    with store_locations(store_kind, tmp_path) as new_url:
        reference_url = new_url()
        assert run_in_child(run_watch, scenario, reference_url, STREAM, None) == 0
        reference = read_stream(reference_url, STREAM)
        expected = verdict_of(reference)
        assert verify(reference).ok

        for k in append_boundaries(reference):
            url = new_url()
            code = run_in_child(run_watch, scenario, url, STREAM, k)
            assert code == -signal.SIGKILL, f"k={k}: the watcher was not killed (exit {code})"
            assert len(read_stream(url, STREAM)) >= k
            code = run_in_child(run_watch, scenario, url, STREAM, None)
            assert code == 0, f"k={k}: the reattach failed"
            check_reattached(read_stream(url, STREAM), expected, k, len(reference))
