"""`verify` checks the conversation: every observation answers a command the rules issued.

The logs are real: one uninterrupted watch of every built-in simulator scenario (the
watcher and the simulator of `tests/test_crash_simulator.py`, in this process, made once
per module) and the example job logs (`flashfsm.example_logs()`). A doctored copy of a
log is made by inserting, deleting, duplicating or reordering observations and renumbering
the seqs, so the seq check alone cannot catch it: only the conversation check can.

Some edits cannot be caught by any checker, because the doctored log is one a watch could
have written. The generators leave exactly those out (`mutations` says which and why):

- the regular heartbeat read is optional: a poll that asks for one records it only when it
  brings news (`skip_read`), so deleting a recorded one, or inserting a new one where a
  poll asked and recorded none, leaves a log where that read found nothing new (or news);
- a late observation is legitimate (a slow call or store, a paused host delays a poll
  without changing what it asks for), so deleting a status fetch whose poll made no read
  leaves a log whose next fetch merely came late: in `no_capacity_log` of
  `tests/test_verify.py`, the IN_QUEUE at t=10 deleted leaves IN_QUEUE at 0, 20, 30, …,
  exactly what a watch whose fetch at 10 took 10 s writes; for the same reason a read that
  answers an earlier poll's open regular-read slot, moved across a fetch, is accepted;
- a failed forced read that is not the last try, deleted, leaves the next try looking like
  a late first one;
- swapping two status answers (or two reads of one kind) changes what was answered, not
  what was asked: that is the verdict check's business, not the conversation's.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import flashfsm
from flashfsm import verify
from flashfsm.events.codec import decode, encode, unseal
from flashfsm.events.models import (
    Concluded,
    Event,
    FailureDetailObserved,
    HealthObserved,
    HealthProbeFailed,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
)
from flashfsm.fsm.job import heartbeat_is_news, replay
from flashfsm.fsm.state import JobState
from tests.store_support import read_stream
from tests.test_crash_simulator import SCENARIOS, STREAM, fresh_job, watch_job

EXAMPLES = flashfsm.example_logs()
FETCHES = (StatusObserved, StatusFetchFailed)
OBSERVATIONS = (*FETCHES, HealthObserved, HealthProbeFailed, HeartbeatObserved)
OBSERVATIONS += (FailureDetailObserved,)


def answers(event: Event) -> str:
    """The command an observation answers, in words (what a reorder must change)."""
    if isinstance(event, FETCHES):
        return "fetch"
    if isinstance(event, (HealthObserved, HealthProbeFailed)):
        return "probe"
    if isinstance(event, HeartbeatObserved):
        return "forced read" if event.forced else "regular read"
    return "failure detail"


@functools.cache
def simulator_logs() -> dict[str, tuple[Event, ...]]:
    """One uninterrupted watch of every built-in scenario, on the simulator's manual clock."""
    logs: dict[str, tuple[Event, ...]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in sorted(SCENARIOS):
            url = f"sqlite:///{tmp}/{scenario}.db"
            with fresh_job(scenario, Path(tmp) / "hf") as job:
                watch_job(job, url, None)
            logs[f"sim:{scenario}"] = tuple(read_stream(url, STREAM))
    return logs


@functools.cache
def example_logs() -> dict[str, tuple[Event, ...]]:
    """The real job logs of the docs."""
    return {
        f"example:{path.stem}": tuple(
            decode(unseal(line)) for line in path.read_bytes().splitlines() if line.strip()
        )
        for path in sorted(EXAMPLES.glob("job-*.jsonl"))
    }


def all_logs() -> dict[str, tuple[Event, ...]]:
    return {**simulator_logs(), **example_logs()}


LOG_NAMES = [f"sim:{name}" for name in sorted(SCENARIOS)] + [
    f"example:{path.stem}" for path in sorted(EXAMPLES.glob("job-*.jsonl"))
]


def renumbered(events: list[Event]) -> list[Event]:
    """The events with seqs 0, 1, 2 … again, fresh ids, and the verdict's evidence pointing
    at the events it pointed at (a careful forger's edit)."""
    new_seq: dict[int, int] = {}
    for seq, event in enumerate(events):
        new_seq.setdefault(event.seq, seq)

    def moved(event: Event, seq: int) -> Event:
        update: dict[str, object] = {"seq": seq, "id": f"forged-{seq}"}
        if isinstance(event, Concluded):
            update["evidence"] = tuple(new_seq.get(old, old) for old in event.evidence)
        return event.model_copy(update=update)

    return [moved(event, seq) for seq, event in enumerate(events)]


# --- the mutations ---------------------------------------------------------------------------

#: An edit, described cheaply: (what was done, how to build the doctored log, the index of
#: the first event that differs). The long example logs have tens of thousands of inserts:
#: only the ones Hypothesis draws are built.
Mutation = tuple[str, Callable[[], list[Event]], int]


@functools.cache
def states_before(name: str) -> tuple[JobState, ...]:
    """The folded state just before each event of a log (one pass of the fold)."""
    log = all_logs()[name]
    state = replay(())
    before = []
    for event in log:
        before.append(state.copy())
        if state.verdict is None:
            replay((event,), state)
    return tuple(before)


def _open_slot(name: str, index: int) -> bool:
    """Whether, just before event `index`, a poll asked for a regular heartbeat read that
    the log has not recorded yet (a read there would answer it)."""
    return "heartbeat" in states_before(name)[index].pending


def _inserts(name: str, log: tuple[Event, ...]) -> list[Mutation]:
    found: list[Mutation] = []
    first_watch = next(i for i, e in enumerate(log) if isinstance(e, WatchStarted))
    sources = [e for e in log if isinstance(e, OBSERVATIONS)]
    for position in range(first_watch + 1, len(log)):
        at = log[position - 1].at  # a plausible time: the event before it
        before = states_before(name)[position]
        for source in sources:
            if isinstance(source, HeartbeatObserved) and not source.forced:
                copy = source.model_copy(update={"at": at})
                if "heartbeat" in before.pending and heartbeat_is_news(before, copy):
                    continue  # news where a read was asked for: a legitimate read

            def build(p: int = position, e: Event = source, t: float = at) -> list[Event]:
                return renumbered([*log[:p], e.model_copy(update={"at": t}), *log[p:]])

            found.append((f"inserted a copy of seq {source.seq} at {position}", build, position))
    return found


def _deletes(name: str, log: tuple[Event, ...]) -> list[Mutation]:
    found: list[Mutation] = []
    for i, event in enumerate(log):
        if not isinstance(event, OBSERVATIONS):
            continue
        if isinstance(event, HeartbeatObserved) and not event.forced:
            continue  # a regular read may record nothing
        if isinstance(event, HeartbeatObserved) and event.read_error is not None:
            continue  # the next try then looks like a late first one
        if isinstance(event, FETCHES):
            nxt = log[i + 1] if i + 1 < len(log) else None
            if isinstance(nxt, (*FETCHES, WatchStarted)) or _open_slot(name, i):
                continue  # a fetch with no read: the next one merely came late

        def build(i: int = i) -> list[Event]:
            return renumbered([*log[:i], *log[i + 1 :]])

        found.append((f"deleted seq {i}", build, i))
    return found


def _duplicates(name: str, log: tuple[Event, ...]) -> list[Mutation]:
    found: list[Mutation] = []
    for i, event in enumerate(log):
        if isinstance(event, OBSERVATIONS):

            def build(i: int = i) -> list[Event]:
                return renumbered([*log[: i + 1], log[i], *log[i + 1 :]])

            found.append((f"duplicated seq {i}", build, i + 1))
    return found


def _reorders(name: str, log: tuple[Event, ...]) -> list[Mutation]:
    found: list[Mutation] = []
    for i in range(len(log) - 1):
        a, b = log[i], log[i + 1]
        if not (isinstance(a, OBSERVATIONS) and isinstance(b, OBSERVATIONS)):
            continue
        kinds = (answers(a), answers(b))
        if kinds[0] == kinds[1]:
            continue  # the same command asked twice: only the answers moved
        if set(kinds) == {"regular read", "fetch"} and (
            kinds[0] == "regular read" or _open_slot(name, i)
        ):
            continue  # a regular read moved across a fetch may answer that poll instead

        def build(i: int = i) -> list[Event]:
            a, b = log[i], log[i + 1]
            swapped = [b.model_copy(update={"at": a.at}), a.model_copy(update={"at": b.at})]
            return renumbered([*log[:i], *swapped, *log[i + 2 :]])

        found.append((f"swapped seqs {i} and {i + 1}", build, i))
    return found


MUTATORS: dict[str, Callable[[str, tuple[Event, ...]], list[Mutation]]] = {
    "insert": _inserts,
    "delete": _deletes,
    "duplicate": _duplicates,
    "reorder": _reorders,
}


@functools.cache
def mutations(name: str, how: str) -> tuple[Mutation, ...]:
    """Every edit of one kind of one log that changes its conversation (see the module)."""
    return tuple(MUTATORS[how](name, all_logs()[name]))


def _doctored() -> st.SearchStrategy[tuple[str, Mutation]]:
    pairs = st.tuples(st.sampled_from(LOG_NAMES), st.sampled_from(sorted(MUTATORS)))
    return pairs.filter(lambda p: bool(mutations(*p))).flatmap(
        lambda p: st.tuples(st.just(p[0]), st.sampled_from(mutations(*p)))
    )


# --- the tests -------------------------------------------------------------------------------


def test_the_logs_cover_every_scenario_and_the_examples() -> None:
    assert len(simulator_logs()) == len(SCENARIOS) == 20
    assert len(example_logs()) >= 5
    for name in LOG_NAMES:
        assert all(mutations(name, how) for how in ("insert", "duplicate")), name
    assert sum(len(mutations(name, "delete")) for name in LOG_NAMES) > 50
    assert sum(len(mutations(name, "reorder")) for name in LOG_NAMES) > 50


@pytest.mark.parametrize("name", LOG_NAMES)
def test_every_untouched_log_verifies_as_recorded_and_after_a_store_round_trip(name: str) -> None:
    log = list(all_logs()[name])
    assert isinstance(log[-1], Concluded)
    report = verify(log)
    assert report.ok, f"{name}: {report}"
    assert verify([decode(encode(event)) for event in log]).ok
    assert verify(renumbered(log)).ok  # fresh ids change nothing


@given(_doctored())
def test_verify_rejects_every_insert_delete_duplicate_or_reorder_that_changes_the_conversation(
    case: tuple[str, Mutation],
) -> None:
    name, (what, build, first_changed) = case
    report = verify(build())
    assert not report.ok, f"{name}: {what} was accepted"
    found = report.first_disagreement
    assert found is not None
    assert found.reason not in ("seq missing from the log", "seq repeated"), what
    assert found.seq >= first_changed, f"{name}: {what} reported earlier, at {found}"
    assert "\n" not in str(report)


# --- named examples of each reason -----------------------------------------------------------


def _sim(name: str) -> list[Event]:
    return list(simulator_logs()[f"sim:{name}"])


def test_a_forged_failed_status_mid_run_is_rejected_though_the_log_ends_succeeded() -> None:
    log = _sim("success")
    running = [i for i, e in enumerate(log) if isinstance(e, StatusObserved)]
    i = running[len(running) // 2]
    forged = log[i].model_copy(update={"status": "FAILED", "error": "forged"})
    doctored = renumbered([*log[: i + 1], forged, *log[i + 1 :]])
    assert doctored[-1].state == "SUCCEEDED"  # type: ignore[attr-defined]
    found = verify(doctored).first_disagreement
    assert found is not None and found.seq == i + 1
    assert found.reason.startswith("a status fetch") and "before it was due" in found.reason


def test_a_probe_nobody_asked_for_names_the_command_that_was_due() -> None:
    log = _sim("crash_loop")
    probe = next(e for e in log if isinstance(e, HealthObserved))
    # after the IN_QUEUE at t+20 the rules wait for the next fetch: no probe is due
    i = next(i for i, e in enumerate(log) if isinstance(e, StatusObserved) and i > probe.seq)
    doctored = renumbered(
        [*log[: i + 1], probe.model_copy(update={"at": log[i].at}), *log[i + 1 :]]
    )
    found = verify(doctored).first_disagreement
    assert found is not None and found.seq == i + 1
    assert found.reason.startswith("a health probe") and found.recorded == "HealthObserved"


def test_a_regular_heartbeat_repeated_is_rejected_as_no_news() -> None:
    log = _sim("training_stall")
    i = next(i for i, e in enumerate(log) if isinstance(e, HeartbeatObserved) and not e.forced)
    doctored = renumbered([*log[: i + 1], log[i], *log[i + 1 :]])
    found = verify(doctored).first_disagreement
    assert found is not None and found.seq == i + 1


def test_deleting_a_fetch_with_no_read_is_accepted_as_a_late_fetch() -> None:
    """The undetectable case the property leaves out, shown: the log is a legitimate one."""
    log = _sim("crash_loop")
    fetches = [i for i, e in enumerate(log) if isinstance(e, StatusObserved)]
    i = next(i for i in fetches if isinstance(log[i + 1], StatusObserved))
    assert verify(renumbered([*log[:i], *log[i + 1 :]])).ok


def test_an_event_before_any_watch_is_rejected() -> None:
    log = _sim("success")
    status = next(e for e in log if isinstance(e, StatusObserved))
    doctored = renumbered([log[0], status, *log[1:]])
    assert isinstance(doctored[0], JobSubmitted)
    found = verify(doctored).first_disagreement
    assert found is not None and (found.seq, found.reason) == (
        1,
        "an event before any watch started",
    )


def test_a_time_going_back_without_a_skew_fact_is_rejected_at_its_seq() -> None:
    log = _sim("training")
    i = len(log) // 2
    doctored = [*log[:i], log[i].model_copy(update={"at": log[i - 1].at - 5.0}), *log[i + 1 :]]
    found = verify(doctored).first_disagreement
    assert found is not None and found.seq == i
    assert found.reason.startswith("time goes back 5.000s")
