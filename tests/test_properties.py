"""Property tests of the job core: each test is named for the invariant it checks.

Two kinds of input are generated. *Scripts* are what the outside world answers a watch
(status answers, `/health` answers, heartbeats), driven through the real shell
(`poll_job`, or `attach` + `run_watch`) on a virtual clock. *Event sequences* are
built directly and folded with `evolve`, so a rule can be compared with an oracle written
here, independently of the library.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from flashfsm import JobHandle, MemoryStore, RunpodApiError, TransientReadError, poll_job
from flashfsm.events.codec import decode, encode
from flashfsm.events.models import (
    Concluded,
    HealthObserved,
    HeartbeatObserved,
    JobSubmitted,
    StatusFetchFailed,
    StatusObserved,
    WatchStarted,
    WorkerCounts,
)
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.commands import Conclude, Finished, Wait
from flashfsm.fsm.job import JobState, decide, evolve, replay, skip_read, verify
from flashfsm.fsm.machine import IllegalTransition, allowed_triggers, fire
from flashfsm.fsm.rules import (
    HEARTBEAT_FUTURE_TOLERANCE_S,
    RULES_BY_NAME,
    SETUP_STAGES,
    TERMINAL_STATUSES,
    judge,
)
from flashfsm.fsm.state import SINCE
from flashfsm.fsm.table import FAILURE_KIND, TERMINAL, TRANSITIONS, JobPhase
from flashfsm.reads import HEARTBEAT_READ
from flashfsm.shell import Readers, attach, run_watch
from flashfsm.writer import JOB, NEWER_WATCH_WINS, StreamWriter
from tests.conftest import ScriptedClient, VirtualClock


def rule_stall(state: Any) -> Any:
    """The stall rule's verdict on `state`, or None (its check alone)."""
    return judge(state, (RULES_BY_NAME["stall"],))


def rule_queue_grace(state: Any) -> Any:
    """The queue rule's verdict on `state`, or None (its check alone)."""
    return judge(state, (RULES_BY_NAME["queue_grace"],))


START = VirtualClock().start  # the virtual clock's epoch; scripts submit the job then
STREAM = "job-prop"
TRAINING_STAGES = ("sft_train", "rl_step", "eval", "train")
ALL_STAGES = (*sorted(SETUP_STAGES), *TRAINING_STAGES)
SMALL_GRACES: dict[str, float] = {
    "stall_after_s": 60.0,
    "setup_grace_s": 120.0,
    "queue_grace_s": 150.0,
    "unhealthy_grace_s": 60.0,
    "throttled_grace_s": 80.0,
}
HUGE = 1e9
NO_GRACE_ENDS: dict[str, float] = {name: HUGE for name in SMALL_GRACES}
VIRTUAL_TIME_LIMIT_S = 5_000.0  # a script that ran longer than this never ended


# --- strategies: what the world answers -----------------------------------------------------

_text = st.text(max_size=40)
_plain_statuses = st.sampled_from(["IN_QUEUE", "IN_QUEUE", "IN_PROGRESS", "RUNNING"])


def _answer(status: str, **fields: Any) -> dict[str, Any]:
    return {"status": status, **fields}


completed_with_metrics = st.fixed_dictionaries(
    {"loss": st.floats(0, 10, allow_nan=False), "step": st.integers(0, 10_000)}
).map(lambda metrics: _answer("COMPLETED", output=metrics))
completed_with_error = st.one_of(
    st.builds(
        lambda e, out: _answer("COMPLETED", output={"error": e or "x", "stdout": out}), _text, _text
    ),
    st.builds(lambda e: _answer("COMPLETED", output={"success": False, "error": e}), _text),
    st.just(_answer("COMPLETED", output="not json at all")),
)
completed_without_output = st.sampled_from(
    [_answer("COMPLETED", output=None), _answer("COMPLETED")]
)
failed = st.builds(
    lambda error, output: _answer("FAILED", error=error, output=output),
    st.none() | _text,
    st.none() | _text | st.builds(lambda out: {"stdout": out}, _text),
)
platform_end = st.builds(
    lambda status, error: _answer(status, error=error),
    st.sampled_from(["CANCELLED", "TIMED_OUT"]),
    st.none() | _text,
)
arbitrary_status = st.text(max_size=250).map(_answer)


def api_errors(codes: list[int | None]) -> st.SearchStrategy[RunpodApiError]:
    return st.builds(
        lambda code: RunpodApiError("status route failed", status_code=code, route="status"),
        st.sampled_from(codes),
    )


#: Answers that end no watch by themselves (graces aside).
nonterminal_answers = st.one_of(
    _plain_statuses.map(_answer),
    st.text(min_size=1, max_size=20).filter(lambda s: s not in TERMINAL_STATUSES).map(_answer),
    api_errors([None, 429, 500, 503]),
)
#: Answers that end a watch at once.
terminal_answers = st.one_of(
    completed_with_metrics,
    completed_with_error,
    completed_without_output,
    failed,
    platform_end,
    api_errors([404]),  # the job is gone (D4)
)
status_answers = st.one_of(
    _plain_statuses.map(_answer),
    terminal_answers,
    arbitrary_status,
    api_errors([None, 404, 429, 500, 502, 503]),
)

_count = st.integers(0, 2)
_WORKER_KEYS = ("idle", "initializing", "ready", "running", "throttled", "unhealthy")
health_answers = st.one_of(
    st.none(),  # the probe fails
    st.sampled_from(  # the shapes the rules care about
        [
            {},
            {"running": 1},
            {"throttled": 2},
            {"unhealthy": 1},
            {"unhealthy": 1, "idle": 1},
            {"throttled": 1, "initializing": 1},
        ]
    ).map(lambda workers: {"workers": workers}),
    st.fixed_dictionaries(
        {},
        optional={name: _count for name in _WORKER_KEYS},
    ).map(lambda workers: {"workers": workers, "jobs": {"inQueue": 1}}),
)
heartbeat_dicts = st.fixed_dictionaries(
    {
        "stage": st.sampled_from(ALL_STAGES),
        "step": st.none() | st.integers(0, 3),
        # ts around the submission (D3: older than it is a leftover of an earlier attempt)
        "ts": st.none()
        | st.sampled_from([-100, -1, 0, 1]).map(lambda off: START + off)
        | st.integers(-120, 600).map(lambda off: START + off),
        "retriable": st.booleans(),
    }
)
heartbeat_answers = st.one_of(
    st.none(),  # nothing there
    st.just("raise"),  # the reader raises
    heartbeat_dicts,
)
#: Heartbeat answers, and a reader that fails on a transient error (a Hub 503) on every read.
heartbeat_answers_or_hub_errors = heartbeat_answers | st.just("transient")
#: What a reader raises for a failure a retry may fix.
transient_read_errors = st.sampled_from(
    [
        TransientReadError("hub read failed: HTTPStatusError", status_code=503),
        TransientReadError("hub read failed: HTTPStatusError", status_code=429),
        TimeoutError("read timed out"),
        ConnectionResetError("connection reset by peer"),
    ]
)


def raise_answer(answer: Any) -> None:
    """A reader's scripted failure: "raise" is no data, "transient" a read to try again."""
    if answer == "raise":
        raise RuntimeError("hub unreachable")
    if answer == "transient":
        raise TransientReadError("hub read failed: HTTPStatusError", status_code=503)


@dataclass(frozen=True)
class Step:
    """What the world answers during one poll: its status fetch, its probe, its heartbeat."""

    status: dict[str, Any] | BaseException
    health: dict[str, Any] | None = None
    heartbeat: dict[str, Any] | str | None = None


@dataclass(frozen=True)
class Script:
    """A job's whole life as the watch will see it."""

    steps: tuple[Step, ...]
    submitted_at: float | None = START
    heartbeat_reader: bool = True
    failure_reader: str | None = None  # None: no reader; "raise": it raises; else its text
    forced_heartbeat: dict[str, Any] | str | None = None
    graces: tuple[tuple[str, float], ...] = tuple(SMALL_GRACES.items())


#: Grace windows small enough for a short script to run into each of them, in either order.
graces = st.fixed_dictionaries(
    {
        "stall_after_s": st.sampled_from([60.0, 200.0]),
        "setup_grace_s": st.sampled_from([120.0, 300.0]),
        "queue_grace_s": st.sampled_from([50.0, 150.0]),
        "unhealthy_grace_s": st.sampled_from([30.0, 60.0]),
        "throttled_grace_s": st.sampled_from([40.0, 80.0]),
    }
).map(lambda chosen: tuple(chosen.items()))


def steps_of(status: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(Step, status, health_answers, heartbeat_answers)


#: A last step that, repeated, ends the watch only through a grace or the error budget.
endless_steps = st.builds(
    Step,
    st.sampled_from(["IN_QUEUE", "IN_PROGRESS", "SCALING"]).map(_answer) | api_errors([500]),
    st.sampled_from([None, {}, {"running": 1}, {"throttled": 1}, {"unhealthy": 2}]).map(
        lambda workers: None if workers is None else {"workers": workers}
    ),
    heartbeat_answers,
)


@st.composite
def scripts(
    draw: st.DrawFn,
    status: st.SearchStrategy[Any] | None = None,
    max_steps: int = 14,
) -> Script:
    """A script; by default a run of answers that end nothing, then (usually) one that ends
    the job; an unfinished script repeats its last step until a grace runs out."""
    if status is None:
        steps = draw(st.lists(steps_of(nonterminal_answers), max_size=max_steps - 1))
        steps.append(draw(steps_of(terminal_answers) | endless_steps))
    else:
        steps = draw(st.lists(steps_of(status), min_size=1, max_size=max_steps))
    return Script(
        steps=tuple(steps),
        submitted_at=draw(st.sampled_from([START, None])),
        heartbeat_reader=draw(st.booleans()),
        failure_reader=draw(st.sampled_from([None, "raise", "Traceback: CUDA error"])),
        forced_heartbeat=draw(heartbeat_answers_or_hub_errors),
        graces=draw(graces),
    )


# --- driving the real shell over a script ---------------------------------------------------


class RunawayScript(AssertionError):
    """The watch outlived any sensible virtual time: the loop does not end."""


class World:
    """Plays a script: the RunPod client and the worker-side readers of one watch.

    The i-th status fetch gets step i's status (the last step repeats once the script is
    exhausted); probes and regular heartbeat reads get the answers of the current step.
    """

    def __init__(self, script: Script, clock: VirtualClock):
        self.script = script
        self.clock = clock
        self.client = ScriptedClient(clock, self._status, self._health)
        self.forced_reads = 0
        self.failure_reads = 0

    def _step(self, index: int | None = None) -> Step:
        if index is None:
            index = max(0, len(self.client.status_calls) - 1)
        return self.script.steps[min(index, len(self.script.steps) - 1)]

    def _status(self, elapsed: float, index: int) -> Any:
        answer = self._step(index).status
        return copy.deepcopy(answer) if isinstance(answer, dict) else answer

    def _health(self, elapsed: float, index: int) -> Any:
        answer = self._step().health
        if answer is None:
            return RunpodApiError("health probe failed", status_code=500, route="health")
        return copy.deepcopy(answer)

    def read_heartbeat(self, force: bool = False) -> Any:
        if force:
            self.forced_reads += 1
        answer = self.script.forced_heartbeat if force else self._step().heartbeat
        raise_answer(answer)
        return copy.deepcopy(answer)

    def read_failure_detail(self, force: bool = False) -> Any:
        self.failure_reads += 1
        if self.script.failure_reader == "raise":
            raise RuntimeError("hub unreachable")
        return self.script.failure_reader

    @property
    def heartbeat_reader(self) -> Any:
        return self.read_heartbeat if self.script.heartbeat_reader else None

    @property
    def failure_detail_reader(self) -> Any:
        return None if self.script.failure_reader is None else self.read_failure_detail

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)
        if self.clock.elapsed > VIRTUAL_TIME_LIMIT_S:
            raise RunawayScript(f"still watching after {self.clock.elapsed:.0f} virtual seconds")


def handle_for(script: Script) -> JobHandle:
    return JobHandle("ep-1", "ep-name", "job-1", submitted_at=script.submitted_at)


def run_poll_job(
    script: Script, *, wrap_heartbeat: Any = None, store: Any = None, **graces: float
) -> tuple[Any, list[Any], World]:
    """`poll_job` over a script: (the result, the log it wrote, the world it played).

    `wrap_heartbeat(reader)`, when given, returns the heartbeat reader the watch uses;
    `store` is where it writes (a fresh `MemoryStore` by default).
    """
    clock = VirtualClock()
    world = World(script, clock)
    store = MemoryStore() if store is None else store
    reader = world.heartbeat_reader
    result = poll_job(
        handle_for(script),
        interval_s=10.0,
        heartbeat_reader=reader
        if wrap_heartbeat is None or reader is None
        else wrap_heartbeat(reader),
        failure_detail_reader=world.failure_detail_reader,
        **{**dict(script.graces), **graces},
        client=world.client,
        clock=clock,
        sleep=world.sleep,
        store=store,
        stream=STREAM,
    )
    return result, store.read(STREAM), world


class ReplayCheckedWriter(StreamWriter):
    """A watch's writer that, after every append and fold, replays the whole log and compares."""

    checked = 0  # events appended through this writer, each followed by a comparison

    def took(self, events: Any) -> None:
        events = list(events)
        super().took(events)
        self.checked += len(events)
        replayed = replay(self.store.read(self.stream)).snapshot()
        live = self.state.snapshot()
        if replayed["pending"] != live["pending"]:
            # The one difference the fold allows (flashfsm.fsm.job's notes): a regular
            # heartbeat read the live watch skipped (nothing new) earlier in this poll is
            # still pending in the replay, ahead of what the live state has pending.
            assert replayed["pending"] == (HEARTBEAT_READ, *live["pending"]), events[-1].seq
            live = {**live, "pending": replayed["pending"]}
        assert replayed == live, f"replay differs from the live state after seq {events[-1].seq}"


def checked_attach(store: Any, *args: Any, **kwargs: Any) -> ReplayCheckedWriter:
    """`attach` through a `ReplayCheckedWriter`."""
    writer = ReplayCheckedWriter(store, STREAM, JOB, NEWER_WATCH_WINS)
    attached = attach(store, STREAM, *args, writer=writer, **kwargs)
    assert attached is writer
    return writer


# --- replay ---------------------------------------------------------------------------------


@given(scripts(), st.integers(0, 100))
def test_replaying_the_log_gives_the_live_state_after_every_prefix(
    script: Script, probe_every: int
) -> None:
    clock = VirtualClock()
    world = World(script, clock)
    store = MemoryStore()
    policy = GracePolicy(**dict(script.graces), probe_every_s=probe_every)
    watch = checked_attach(
        store,
        handle_for(script),
        policy,
        clock=clock,
        interval_s=10.0,
        has_heartbeat_reader=script.heartbeat_reader,
        has_failure_detail_reader=script.failure_reader is not None,
        watcher="prop",
    )
    run_watch(
        watch,
        world.client,
        handle_for(script),
        Readers(world.heartbeat_reader, world.failure_detail_reader),
        clock=clock,
        sleep=world.sleep,
        say=lambda line: None,
    )
    log = store.read(STREAM)
    assert watch.state.done and isinstance(log[-1], Concluded)
    assert watch.checked == len(log)  # every event of the log went through the check
    # The log as a durable store keeps it (bytes) folds to the same state too.
    from_bytes = replay(decode(encode(event)) for event in log)
    assert from_bytes.snapshot() == watch.state.snapshot()


class _Killed(BaseException):
    """The watching process died (not an Exception: nothing in the watch catches it)."""


class _KillAfter:
    """A store proxy that kills the watch once the stream holds `events` events (once)."""

    def __init__(self, store: MemoryStore, events: int):
        self._store, self._events = store, events

    def append(self, stream: str, events: Any, expected_seq: int) -> None:
        self._store.append(stream, events, expected_seq)
        if self._events and expected_seq + len(events) >= self._events:
            self._events = 0
            raise _Killed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _CountingReader:
    """One process's heartbeat reader: every call recorded as (virtual time, force)."""

    def __init__(self, world: World, calls: list[tuple[float, bool]]):
        self.world, self.calls = world, calls

    def __call__(self, force: bool = False) -> Any:
        self.calls.append((self.world.clock.elapsed, force))
        return self.world.read_heartbeat(force)


def _watch_split(script: Script, every: float | None, kill_at: int | None) -> tuple[Any, ...]:
    """Watch a script, killed once the log holds `kill_at` events and resumed at once by a
    fresh process with a fresh reader: (the reads asked for, the log without its watches)."""
    clock = VirtualClock()
    world = World(script, clock)
    store = MemoryStore()
    calls: list[tuple[float, bool]] = []

    def watch(target: Any) -> Any:
        reader = _CountingReader(world, calls) if script.heartbeat_reader else None
        return poll_job(
            handle_for(script),
            interval_s=10.0,
            heartbeat_reader=reader,
            failure_detail_reader=world.failure_detail_reader,
            **dict(script.graces),
            heartbeat_every_s=every,
            client=world.client,
            clock=clock,
            sleep=world.sleep,
            store=target,
            stream=STREAM,
        )

    try:
        result = watch(store if kill_at is None else _KillAfter(store, kill_at))
    except _Killed:
        result = watch(store)  # a new process: a new reader, the state replayed from the log
    log = store.read(STREAM)
    assert verify(log).ok, verify(log)
    observed = [
        (e.kind, e.at, e.model_dump(exclude={"id", "seq", "evidence"}))  # seqs shift
        for e in log
        if not isinstance(e, WatchStarted)
    ]
    return calls, observed, (result.state, result.rule, log[-1].at)


@given(
    scripts(),
    st.sampled_from([None, 0.0, 20.0, 30.0, 45.0]),
    st.integers(1, 60),
)
def test_heartbeat_reads_depend_only_on_the_log_not_on_the_reader_process(
    script: Script, every: float | None, kill_at: int
) -> None:
    whole = _watch_split(script, every, None)
    split = _watch_split(script, every, kill_at)
    assert split[0] == whole[0]  # the same reads, regular and forced, at the same times
    assert split[1] == whole[1]  # hence the same observations
    assert split[2] == whole[2]  # and the same verdict at the same time


# --- terminal states ------------------------------------------------------------------------

_seqs = st.integers(0, 400)
later_events = st.one_of(
    st.builds(
        lambda seq, status: StatusObserved(
            stream=STREAM, seq=seq, id=f"late-{seq}", at=START + 10**6, status=status
        ),
        _seqs,
        st.sampled_from(["IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "weird"]),
    ),
    st.builds(
        lambda seq, code: StatusFetchFailed(
            stream=STREAM,
            seq=seq,
            id=f"late-{seq}",
            at=START + 10**6,
            error_class="E",
            http_status=code,
        ),
        _seqs,
        st.sampled_from([None, 404, 500]),
    ),
    st.builds(
        lambda seq, stage, ts: HeartbeatObserved(
            stream=STREAM,
            seq=seq,
            id=f"late-{seq}",
            at=START + 10**6,
            stage=stage,
            step=1,
            ts=ts,
            retriable=True,
            forced=True,
        ),
        _seqs,
        st.sampled_from(ALL_STAGES),
        st.floats(START - 10, START + 10**6),
    ),
    st.builds(
        lambda seq, unhealthy: HealthObserved(
            stream=STREAM,
            seq=seq,
            id=f"late-{seq}",
            at=START + 10**6,
            workers=WorkerCounts(unhealthy=unhealthy),
        ),
        _seqs,
        _count,
    ),
    st.builds(
        lambda seq: WatchStarted(
            stream=STREAM,
            seq=seq,
            id=f"late-{seq}",
            at=START + 10**6,
            watcher="late",
            reattach=True,
        ),
        _seqs,
    ),
    st.builds(
        lambda seq, phase: Concluded(
            stream=STREAM,
            seq=seq,
            id=f"late-{seq}",
            at=START + 10**6,
            state=phase.value,
            ok=phase is JobPhase.SUCCEEDED,
            rule="late",
        ),
        _seqs,
        st.sampled_from(TERMINAL),
    ),
    st.builds(
        lambda seq, stream: StatusObserved(
            stream=stream, seq=seq, id=f"late-{seq}", at=START, status="RUNNING"
        ),
        _seqs,
        st.text(max_size=5),
    ),
)


@given(scripts(), st.lists(later_events, min_size=1, max_size=8))
def test_a_terminal_state_absorbs_every_later_event(script: Script, late: list[Any]) -> None:
    _, log, _ = run_poll_job(script)
    state = replay(log)
    assert state.phase in TERMINAL
    before = copy.deepcopy(state.snapshot())
    command = decide(state, START + 10**7)
    for event in late:
        assert evolve(state, event) is state
        assert state.snapshot() == before
    assert decide(state, START + 10**7) == command
    assert isinstance(command, Finished) and command.verdict.state.value == state.state


# --- the stall rule (events built directly, judged against an oracle) ----------------------


@dataclass
class LogBuilder:
    """Builds a job's events one by one and folds each into a state."""

    policy: GracePolicy
    has_heartbeat_reader: bool
    state: JobState
    seq: int = 0

    @classmethod
    def start(cls, policy: GracePolicy, *, has_heartbeat_reader: bool = False) -> LogBuilder:
        builder = cls(policy, has_heartbeat_reader, JobState())
        builder.add(
            JobSubmitted,
            START,
            endpoint_id="ep-1",
            job_id="job-1",
            policy=policy,
            submitted_at=START,
        )
        builder.add(WatchStarted, START, watcher="prop", has_heartbeat_reader=has_heartbeat_reader)
        return builder

    def add(self, cls: type[Any], at: float, **fields: Any) -> Any:
        event = cls(stream=STREAM, seq=self.seq, id=f"e{self.seq}", at=at, **fields)
        self.seq += 1
        evolve(self.state, event)
        return event


_heartbeat_reads = st.one_of(
    st.none(),  # the read returned nothing new: the shell skips it
    st.just("not-found"),
    st.tuples(
        st.sampled_from(["boot", "sft_model_load", "sft_train", "rl_step"]),
        st.integers(0, 2),
        st.sampled_from([None, -50, -1, 0, 1, 50]),  # ts offsets from submission (D3)
    ),
)


@given(
    has_reader=st.booleans(),
    stall_after=st.integers(10, 200),
    setup_grace=st.integers(10, 400),
    polls=st.lists(
        st.tuples(
            st.integers(1, 150),
            st.sampled_from(["IN_PROGRESS", "IN_PROGRESS", "RUNNING", "WARMING_UP"]),
            _heartbeat_reads,
        ),
        min_size=1,
        max_size=30,
    ),
)
def test_the_stall_rule_fires_iff_a_no_progress_gap_exceeds_the_limit_that_applies(
    has_reader: bool, stall_after: int, setup_grace: int, polls: list[Any]
) -> None:
    policy = GracePolicy(stall_after_s=stall_after, setup_grace_s=setup_grace, queue_grace_s=HUGE)
    log = LogBuilder.start(policy, has_heartbeat_reader=has_reader)
    # the oracle's own bookkeeping
    progress_at = START  # the watch's start counts as progress
    previous_status: str | None = None
    last_key: tuple[Any, ...] | None = None
    training_seen = False
    t = START
    for dt, status, read in polls:
        t += dt
        log.add(StatusObserved, t, status=status)
        if status != previous_status:
            progress_at = t
        previous_status = status
        if read is None:
            skip_read(log.state)
        elif read == "not-found":
            log.add(HeartbeatObserved, t, found=False)
        else:
            stage, step, offset = read
            ts = None if offset is None else START + offset
            log.add(HeartbeatObserved, t, stage=stage, step=step, ts=ts)
            leftover = ts is not None and ts < START
            if not leftover and (stage, step, ts) != last_key:
                last_key = (stage, step, ts)
                progress_at = t
                training_seen = training_seen or stage not in SETUP_STAGES
        limit = setup_grace if has_reader and not training_seen else stall_after
        should_fire = t - progress_at > limit

        verdict = rule_stall(log.state)
        command = decide(log.state, t)
        assert (verdict is not None) == should_fire, (t - progress_at, limit)
        assert isinstance(command, Conclude) == should_fire
        if should_fire:
            assert verdict is not None and command.verdict == verdict
            assert verdict.state is JobPhase.STALLED and verdict.rule == "stall"
            assert f"limit {limit}s" in verdict.detail
            assert verdict.failure == "stalled"
            return  # the shell would conclude here


# --- the queue rule -------------------------------------------------------------------------

_queue_observations = st.tuples(
    st.integers(1, 120),
    st.sampled_from(["IN_QUEUE", "IN_QUEUE", "IN_QUEUE", "IN_PROGRESS", "RUNNING", "error"]),
)


@given(grace=st.integers(0, 300), observations=st.lists(_queue_observations, max_size=30))
def test_the_queue_rule_fires_iff_an_unbroken_in_queue_run_outlasts_the_queue_grace(
    grace: int, observations: list[tuple[int, str]]
) -> None:
    policy = GracePolicy(
        queue_grace_s=grace, stall_after_s=HUGE, setup_grace_s=HUGE, max_poll_errors=1000
    )
    log = LogBuilder.start(policy)
    run_start: float | None = None  # the first IN_QUEUE of the current unbroken run
    run_start_seq: int | None = None
    t = START
    for dt, what in observations:
        t += dt
        if what == "error":
            # A failed fetch observes nothing: it neither extends nor breaks the run.
            event = log.add(StatusFetchFailed, t, error_class="RunpodApiError", http_status=503)
            should_fire = False
        else:
            event = log.add(StatusObserved, t, status=what)
            if what == "IN_QUEUE":
                if run_start is None:
                    run_start, run_start_seq = t, event.seq
                should_fire = t - run_start > grace
            else:
                run_start = run_start_seq = None
                should_fire = False
        verdict = rule_queue_grace(log.state)
        command = decide(log.state, t)
        assert (verdict is not None) == should_fire
        assert isinstance(command, Conclude) == should_fire
        if should_fire:
            assert verdict is not None and command.verdict == verdict
            assert verdict.state is JobPhase.NO_CAPACITY and verdict.failure == "no_capacity"
            assert verdict.evidence == (run_start_seq, event.seq)
            return


@given(
    grace=st.integers(20, 300),
    first_run=st.lists(st.integers(1, 30), min_size=1, max_size=10),
    leave_with=st.one_of(
        st.sampled_from(["IN_PROGRESS", "RUNNING"]),
        st.text(max_size=12).filter(lambda s: s != "IN_QUEUE" and s not in TERMINAL_STATUSES),
    ),
    second_run=st.lists(st.integers(1, 30), min_size=1, max_size=10),
)
def test_leaving_the_queue_restarts_the_queue_timer(
    grace: int, first_run: list[int], leave_with: str, second_run: list[int]
) -> None:
    assume(sum(first_run[1:]) <= grace and sum(second_run[1:]) <= grace)
    policy = GracePolicy(queue_grace_s=grace, stall_after_s=HUGE, setup_grace_s=HUGE)
    log = LogBuilder.start(policy)
    t = START
    for dt in first_run:
        t += dt
        log.add(StatusObserved, t, status="IN_QUEUE")
        assert rule_queue_grace(log.state) is None
    t += 1
    log.add(StatusObserved, t, status=leave_with)
    assert "queue" not in log.state.timers
    second_start = t + second_run[0]
    for dt in second_run:
        t += dt
        log.add(StatusObserved, t, status="IN_QUEUE")
        assert log.state.timers["queue"][SINCE] == second_start
        # however long both runs together: the queue grace counts the second run only
        assert rule_queue_grace(log.state) is None
    # one more queued observation past the grace of the second run does conclude
    t = second_start + grace + 1
    log.add(StatusObserved, t, status="IN_QUEUE")
    verdict = rule_queue_grace(log.state)
    assert verdict is not None and verdict.state is JobPhase.NO_CAPACITY


# --- terminal statuses through the real shell -----------------------------------------------


#: Forced heartbeats whose ts sits on either side of the submission (D3), or has none.
boundary_heartbeats = st.fixed_dictionaries(
    {
        "stage": st.sampled_from(ALL_STAGES),
        "step": st.integers(0, 3),
        "ts": st.sampled_from([None, -100, -1, 0, 1, 300]).map(
            lambda off: None if off is None else START + off
        ),
        "retriable": st.booleans(),
    }
)


@st.composite
def scripts_ending_with(draw: st.DrawFn, last: st.SearchStrategy[Any]) -> Script:
    """A script whose prefix cannot conclude (graces are huge, fewer than 8 errors in a
    row, no 404), so its verdict is reached at its last status."""
    prefix = draw(st.lists(steps_of(nonterminal_answers), max_size=10))
    streak = 0
    for step in prefix:
        streak = streak + 1 if isinstance(step.status, BaseException) else 0
        assume(streak < 8)
    end = draw(steps_of(last))
    return Script(
        steps=(*prefix, end),
        submitted_at=draw(st.sampled_from([START, START, None])),
        heartbeat_reader=draw(st.sampled_from([True, True, True, False])),
        failure_reader=draw(st.sampled_from([None, "raise", "Traceback: CUDA error"])),
        forced_heartbeat=draw(boundary_heartbeats | heartbeat_answers),
    )


@given(scripts_ending_with(platform_end))
def test_cancelled_and_timed_out_are_always_job_preempted(script: Script) -> None:
    result, _, world = run_poll_job(script, **NO_GRACE_ENDS)
    status = script.steps[-1].status["status"]
    assert result.failure == "job_preempted"
    assert result.state == "PREEMPTED" and result.rule == "platform_termination"
    assert result.detail.startswith(f"[{status}]")
    assert world.forced_reads == 0 and world.failure_reads == 0  # no worker read (step 5)
    assert len(world.client.status_calls) == len(script.steps)


def _flags_retriable(script: Script, events: list[Any]) -> bool:
    """The oracle of D3: does the forced heartbeat read make this failure infra-shaped?

    Only a plain `true` on this attempt's heartbeat: its `ts` a number, not before the
    submission, and at most the tolerance after the forced read (its event's `at`).
    """
    hb = script.forced_heartbeat
    if not script.heartbeat_reader or not isinstance(hb, dict) or hb["retriable"] is not True:
        return False
    ts, submitted = hb["ts"], script.submitted_at
    if ts is None or (submitted is not None and ts < submitted):
        return False
    read_at = next(e.at for e in events if isinstance(e, HeartbeatObserved) and e.forced)
    return ts <= read_at + HEARTBEAT_FUTURE_TOLERANCE_S


@given(scripts_ending_with(st.one_of(failed, completed_with_error, completed_without_output)))
def test_failed_and_completed_with_error_are_preempted_iff_this_attempts_heartbeat_flags_retriable(
    script: Script,
) -> None:
    result, events, world = run_poll_job(script, **NO_GRACE_ENDS)
    status = script.steps[-1].status["status"]
    expected = "job_preempted" if _flags_retriable(script, events) else "job_failed"
    assert result.failure == expected, script.forced_heartbeat
    assert result.rule == ("worker_failed" if status == "FAILED" else "completed_with_error")
    assert world.forced_reads == (1 if script.heartbeat_reader else 0)
    assert world.failure_reads == (0 if script.failure_reader is None else 1)
    if status == "FAILED":
        assert result.detail.startswith("[FAILED]")
    if script.failure_reader == "Traceback: CUDA error":
        assert "Traceback: CUDA error" in result.detail


_FAILURE_ENDS = {
    "FAILED": _answer("FAILED", error="boom", output={"stdout": "loss=nan"}),
    "COMPLETED-error": _answer("COMPLETED", output={"success": False, "error": "boom"}),
    "COMPLETED-None": _answer("COMPLETED", output=None),
}


@pytest.mark.parametrize("end", sorted(_FAILURE_ENDS))
@pytest.mark.parametrize("heartbeat_reader", [True, False])
@pytest.mark.parametrize("submitted_at", [START, None])
@pytest.mark.parametrize("ts_offset", [None, -100, -1, 0, 1, 300])
@pytest.mark.parametrize("retriable", [True, False])
def test_the_retriable_flag_counts_only_from_this_attempts_heartbeat(
    end: str,
    heartbeat_reader: bool,
    submitted_at: float | None,
    ts_offset: int | None,
    retriable: bool,
) -> None:
    """The D3 boundary, every case: the property above samples it, this enumerates it."""
    ts = None if ts_offset is None else START + ts_offset
    script = Script(
        steps=(Step(_answer("IN_QUEUE")), Step(_answer("IN_PROGRESS")), Step(_FAILURE_ENDS[end])),
        submitted_at=submitted_at,
        heartbeat_reader=heartbeat_reader,
        forced_heartbeat={"stage": "train", "step": 3, "ts": ts, "retriable": retriable},
    )
    result, events, _ = run_poll_job(script, **NO_GRACE_ENDS)
    preempted = heartbeat_reader and _flags_retriable(script, events)
    assert result.failure == ("job_preempted" if preempted else "job_failed")


# --- a transient error on the forced heartbeat read -----------------------------------------


def failing_first(failures: int, error: BaseException) -> Any:
    """A wrapper whose reader's first `failures` forced reads raise `error` (a Hub hiccup)."""

    def wrap(read: Any) -> Any:
        failed = [0]

        def reader(force: bool = False) -> Any:
            if force and failed[0] < failures:
                failed[0] += 1
                raise error
            return read(force=force)

        return reader

    return wrap


def retry_delay(failures: int, policy: GracePolicy) -> float:
    """How long `failures` failed forced reads put the verdict off: backoff × (1 + … + n)."""
    return sum(policy.forced_read_backoff_s * n for n in range(1, failures + 1))


DEFAULT_TRIES = GracePolicy().forced_read_tries
failure_ends = scripts_ending_with(
    st.one_of(failed, completed_with_error, completed_without_output)
)


@given(failure_ends, st.integers(0, DEFAULT_TRIES - 1), transient_read_errors)
def test_transient_forced_read_errors_never_change_the_verdict(
    script: Script, failures: int, error: BaseException
) -> None:
    clean, clean_log, _ = run_poll_job(script, **NO_GRACE_ENDS)
    result, log, world = run_poll_job(
        script, wrap_heartbeat=failing_first(failures, error), **NO_GRACE_ENDS
    )
    # The same verdict, for the same reasons: state, rule, kind and every word of the detail.
    assert (result.state, result.rule, result.failure, result.detail) == (
        clean.state,
        clean.rule,
        clean.failure,
        clean.detail,
    )
    failed_reads = [e for e in log if isinstance(e, HeartbeatObserved) and e.read_error]
    tried = failures if script.heartbeat_reader else 0
    assert len(failed_reads) == tried and all(e.forced and not e.found for e in failed_reads)
    assert world.forced_reads == (1 if script.heartbeat_reader else 0)
    # Put off by the backoffs alone, a time the log fixes: today's rules agree with every step.
    assert log[-1].at - clean_log[-1].at == pytest.approx(retry_delay(tried, GracePolicy()))
    assert verify(log).ok, str(verify(log))
    assert replay(log).verdict == log[-1]


@pytest.mark.regression(
    reason="CI's property: a heartbeat stamped 61 s after the failure was seen counted as "
    "this attempt's when its forced read was tried again 10 s later (PREEMPTED, not FAILED)"
)
def test_a_retried_forced_read_judges_the_heartbeat_ts_as_of_the_failure() -> None:
    in_queue = Step(_answer("IN_QUEUE"), None, None)
    script = Script(
        steps=(in_queue, in_queue, in_queue, Step({"status": "COMPLETED", "output": "x"})),
        submitted_at=START,
        heartbeat_reader=True,
        forced_heartbeat={"stage": "boot", "step": None, "ts": START + 91.0, "retriable": True},
    )
    clean, _, _ = run_poll_job(script, **NO_GRACE_ENDS)
    error = TransientReadError("hub read failed: HTTPStatusError")
    late, log, _ = run_poll_job(script, wrap_heartbeat=failing_first(1, error), **NO_GRACE_ENDS)
    assert clean.state == late.state == "FAILED" and clean.detail == late.detail
    assert [e.at - START for e in log if isinstance(e, HeartbeatObserved)] == [30.0, 40.0]


@given(failure_ends, st.integers(DEFAULT_TRIES, DEFAULT_TRIES + 3), transient_read_errors)
def test_a_forced_read_that_fails_every_try_concludes_job_failed_after_the_last_try(
    script: Script, failures: int, error: BaseException
) -> None:
    assume(script.heartbeat_reader)
    clean, clean_log, _ = run_poll_job(script, **NO_GRACE_ENDS)
    result, log, world = run_poll_job(
        script, wrap_heartbeat=failing_first(failures, error), **NO_GRACE_ENDS
    )
    assert (result.state, result.rule, result.failure) == ("FAILED", clean.rule, "job_failed")
    assert "the worker's heartbeat could not be read" in result.detail
    failed_reads = [e for e in log if isinstance(e, HeartbeatObserved) and e.read_error]
    assert len(failed_reads) == DEFAULT_TRIES and world.forced_reads == 0
    assert set(e.seq for e in failed_reads) <= set(log[-1].evidence)
    delay = retry_delay(DEFAULT_TRIES - 1, GracePolicy())
    assert log[-1].at - clean_log[-1].at == pytest.approx(delay)
    assert log[-1].at == failed_reads[-1].at  # concluded on the last try, at its time
    assert verify(log).ok, str(verify(log))


# --- robustness -----------------------------------------------------------------------------


@given(
    scripts(
        status=st.one_of(
            st.text().map(_answer),
            st.sampled_from(sorted(TERMINAL_STATUSES | {"IN_QUEUE"})).map(_answer),
            st.one_of(st.none(), st.integers(), st.lists(st.integers(), max_size=2)).map(_answer),
        ),
        max_steps=8,
    )
)
def test_any_status_string_is_handled_without_an_exception(script: Script) -> None:
    result, log, _ = run_poll_job(script)
    assert JobPhase(result.state) in TERMINAL
    assert result.failure == FAILURE_KIND[JobPhase(result.state)]
    assert isinstance(log[-1], Concluded) and log[-1].state == result.state


# --- the machine and the table --------------------------------------------------------------


class _Model:
    def __init__(self, state: str):
        self.state = state


@pytest.mark.parametrize(
    ("phase", "trigger"),
    list(itertools.product(JobPhase, [trigger for trigger, _, _ in TRANSITIONS])),
)
def test_the_machine_and_the_table_agree_on_every_state_and_trigger(
    phase: JobPhase, trigger: str
) -> None:
    sources, dest = next((s, d) for t, s, d in TRANSITIONS if t == trigger)
    for model in (_Model(phase.value), JobState(state=phase.value)):
        if phase in sources:
            fire(model, trigger)
            assert model.state == dest.value
        else:
            with pytest.raises(IllegalTransition):
                fire(model, trigger)
            assert model.state == phase.value
    listed = {t for t, s, _ in TRANSITIONS if phase in s}
    assert set(allowed_triggers(phase.value)) == listed


def test_the_machine_knows_no_trigger_the_table_does_not_list() -> None:
    with pytest.raises(IllegalTransition):
        fire(_Model(JobPhase.QUEUED.value), "to_SUCCEEDED")  # no auto transitions
    names = [trigger for trigger, _, _ in TRANSITIONS]
    assert len(names) == len(set(names))
    assert all(phase not in TERMINAL for _, sources, _ in TRANSITIONS for phase in sources)


# --- verification ---------------------------------------------------------------------------


@given(scripts())
def test_verify_accepts_every_log_poll_job_writes(script: Script) -> None:
    result, log, _ = run_poll_job(script)
    report = verify(log)
    assert report.ok, str(report)
    assert report.events == len(log)
    assert report.verdict == log[-1]
    assert (report.verdict.state, report.verdict.rule) == (result.state, result.rule)


@given(scripts(), st.floats(0.0, 2.0), st.floats(0.0, 3600.0))
def test_deciding_again_on_a_state_told_to_wait_skips_only_rules_that_find_nothing(
    script: Script, share: float, beyond: float
) -> None:
    """`decide(..., judged=True)` (what a watch waking from a wait asks) answers exactly
    what `decide` answers, at any later time, on every state a real log passes through."""
    _, log, _ = run_poll_job(script)
    state = JobState()
    for event in log:
        evolve(state, event)
        if state.watch is None or state.done:
            continue
        told = decide(state, event.at)
        if not isinstance(told, Wait):
            continue
        for later in (event.at, event.at + share * told.seconds, event.at + told.seconds + beyond):
            assert decide(state, later, judged=True) == decide(state, later)


@given(scripts(), st.floats(0.0, 3600.0))
def test_a_rule_asked_only_at_some_statuses_finds_nothing_at_any_other(
    script: Script, later: float
) -> None:
    """`decide` asks a rule with `statuses` only at those last statuses: on every state a
    real log passes through (any status string the world answers, none yet), at any time,
    such a rule's measure finds nothing at another status, so not asking it changes no
    answer."""
    from flashfsm.fsm.rules import AFTER_OBSERVATION

    keyed = [r for r in AFTER_OBSERVATION if r.statuses]
    assert keyed  # (the optimisation this guards is in place)
    _, log, _ = run_poll_job(script)
    state = JobState()
    for event in log:
        evolve(state, event)
        status = None if state.status is None else state.status.status
        for keyed_rule in keyed:
            if status not in keyed_rule.statuses:
                for now in (event.at, event.at + later):
                    assert keyed_rule.measure(state, now) is None, (keyed_rule.name, status)


# --- the live core, step by step ------------------------------------------------------------


class _OutOfTime(Exception):
    """The step's time budget is spent: the live loop pauses inside a wait."""


class LiveCoreMachine(RuleBasedStateMachine):
    """Drives the real shell loop one slice of virtual time at a time, while the world's
    answers change between slices and supervisors crash and reattach; after every step the
    log must replay to the live state."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = VirtualClock()
        self.store = MemoryStore()
        self.status: Any = _answer("IN_QUEUE")
        self.health: Any = None
        self.heartbeat: Any = None
        self.budget = 0.0
        self.watchers = 0

    @initialize(
        submitted=st.sampled_from([START, None]),
        heartbeat_reader=st.booleans(),
        failure_reader=st.booleans(),
    )
    def attach(self, submitted: float | None, heartbeat_reader: bool, failure_reader: bool):
        self.handle = JobHandle("ep-1", "ep-name", "job-1", submitted_at=submitted)
        self.policy = GracePolicy(
            stall_after_s=300,
            setup_grace_s=600,
            queue_grace_s=400,
            unhealthy_grace_s=120,
            throttled_grace_s=150,
            probe_every_s=30,
        )
        self.readers = Readers(
            self.read_heartbeat if heartbeat_reader else None,
            self.read_failure_detail if failure_reader else None,
        )
        self.watch = self._new_watch()

    def _new_watch(self) -> ReplayCheckedWriter:
        self.watchers += 1
        return checked_attach(
            self.store,
            self.handle,
            self.policy,
            clock=self.clock,
            interval_s=10.0,
            has_heartbeat_reader=self.readers.heartbeat is not None,
            has_failure_detail_reader=self.readers.failure_detail is not None,
            watcher=f"watcher-{self.watchers}",
        )

    # the world, as the shell sees it
    def job_status(self, endpoint_id: str, job_id: str) -> dict[str, Any]:
        if isinstance(self.status, BaseException):
            raise self.status
        return copy.deepcopy(self.status)

    def endpoint_health(self, endpoint_id: str) -> dict[str, Any]:
        if self.health is None:
            raise RunpodApiError("health probe failed", status_code=500, route="health")
        return copy.deepcopy(self.health)

    def read_heartbeat(self, force: bool = False) -> Any:
        raise_answer(self.heartbeat)
        return copy.deepcopy(self.heartbeat)

    def read_failure_detail(self, force: bool = False) -> Any:
        return "Traceback: worker died"

    def _sleep(self, seconds: float) -> None:
        if seconds > self.budget:
            self.clock.now += self.budget
            self.budget = 0.0
            raise _OutOfTime
        self.clock.sleep(seconds)
        self.budget -= seconds

    def _run_for(self, seconds: float) -> None:
        """Let the real shell loop run for `seconds` of virtual time, then pause it."""
        self.budget = float(seconds)
        with contextlib.suppress(_OutOfTime):
            run_watch(
                self.watch,
                self,
                self.handle,
                self.readers,
                clock=self.clock,
                sleep=self._sleep,
                say=lambda line: None,
            )

    # rules: the world changes its answers, time passes (answers hold for a while)
    @rule(
        answer=nonterminal_answers | endless_steps.map(lambda step: step.status) | status_answers,
        then=st.integers(0, 40),
    )
    def fetch_answers(self, answer: Any, then: int) -> None:
        self.status = answer
        self._run_for(then)

    @rule(answer=health_answers, then=st.integers(0, 40))
    def probe_answers(self, answer: Any, then: int) -> None:
        self.health = answer
        self._run_for(then)

    @rule(answer=heartbeat_answers_or_hub_errors, then=st.integers(0, 40))
    def heartbeat_reads_answer(self, answer: Any, then: int) -> None:
        if isinstance(answer, dict) and answer["ts"] is not None:
            answer = {**answer, "ts": answer["ts"] + self.clock.elapsed}  # a fresh beat
        self.heartbeat = answer
        self._run_for(then)

    @rule(seconds=st.integers(0, 300))
    def time_advances(self, seconds: int) -> None:
        self._run_for(seconds)

    @rule(gap=st.integers(0, 900))
    def supervisor_crashes_and_another_reattaches(self, gap: int) -> None:
        self.clock.now += gap
        self.watch = self._new_watch()

    # invariants
    @invariant()
    def replaying_the_log_gives_the_live_state(self) -> None:
        live = self.watch.state
        replayed = replay(self.store.read(STREAM))
        if replayed.pending != live.pending:
            # the live loop dropped a regular heartbeat read that had nothing new
            skip_read(replayed)
        assert replayed.snapshot() == live.snapshot()
        assert decide(replayed, self.clock()) == decide(live, self.clock())

    def teardown(self) -> None:
        # verify judges each event against its prefix in turn, so checking the final log
        # once checks every prefix the steps produced
        if hasattr(self, "watch"):
            report = verify(self.store.read(STREAM))
            assert report.ok, str(report)


LiveCoreMachine.TestCase.settings = settings(stateful_step_count=30)
TestTheLiveCoreReplaysToItsLiveStateAtEveryStep = LiveCoreMachine.TestCase
