"""What every orchestrator integration shares: one run per orchestrated piece of work, named
by the ids the orchestrator's retry keeps, driven so that a kill leaves it to resume, and
stopped by the orchestrator's cancel.

Theory of operation. An integration (`flashfsm.integrations.prefect`, `….dagster`) asks its
orchestrator for three things and hands them to `supervise`:

- the run id: `flashfsm.naming.stable_run_id` of the ids a retry keeps (Prefect's flow run
  id, Dagster's root run id), put into the spec's `run_id`, so a retried worker names the
  same run streams and calling again resumes the run (no second deploy or submit);
- `cancel_requested()`: whether the orchestrator asked this work to stop (a Prefect flow run
  CANCELLING, a Dagster run CANCELING), asked between the watch's waits (every
  `check_every_s`); when it says so, `request_cancel(store, stream, by=<orchestrator>)` is
  recorded and the run, still driven here, cancels its job, deletes its endpoints and
  concludes `cancelled`;
- the exception the orchestrator raises into running code when it stops it (Prefect's
  `TerminationSignal`, Dagster's `DagsterExecutionInterruptedError`): when
  `cancel_requested()` then says it was a cancel, `cancel_run` records it and drives the
  run to its `cancelled` conclusion before the exception goes on; otherwise (a host going
  away, a signal that is not a cancel) nothing is recorded or cancelled, as with
  `on_interrupt="detach"`, and the orchestrator's retry resumes the run.

The run is driven by `flashfsm.submit.supervise_spec(..., on_interrupt="detach")`: an
interrupt never tears down what a retry would resume. The result goes back as
`RunResult.to_dict()`, plain JSON an orchestrator stores (`RunResult.from_dict` reads it).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from flashfsm import naming
from flashfsm.events.models import Candidate
from flashfsm.events.store import EventStore
from flashfsm.runs import RunResult, request_cancel
from flashfsm.submit import RunSpec, supervise_spec

#: How often, at most, the orchestrator is asked whether it cancelled the work (seconds).
CHECK_EVERY_S = 5.0

Store = EventStore | str | None
CancelCheck = Callable[[], str | None]


def require(module: str, extra: str) -> ModuleType:
    """`module` imported, or an `ImportError` saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"flashfsm.integrations.{extra} needs {module}: pip install 'flashfsm[{extra}]'"
        ) from exc


def named_spec(spec: RunSpec | Mapping[str, Any], run_id: str) -> RunSpec:
    """`spec` (a `RunSpec`, or its fields as a mapping, `run_id` left out) with `run_id` set:
    the orchestrator's stable id replaces whatever run id the spec had. Validated anew."""
    fields = spec.model_dump() if isinstance(spec, RunSpec) else dict(spec)
    return RunSpec.model_validate({**fields, "run_id": run_id})


def candidates_for(spec: RunSpec, candidates: Sequence[Candidate] | None) -> list[Candidate]:
    """The walk's candidates: those given, else the spec's GPU class alone."""
    return list(candidates) if candidates else [Candidate(gpu_class=spec.gpu_class)]


def watching_sleep(
    cancel_requested: CancelCheck | None,
    on_cancel: Callable[[str], Any],
    *,
    check_every_s: float = CHECK_EVERY_S,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Callable[[float], None]:
    """A `sleep` for the run's waits that asks `cancel_requested()` at most every
    `check_every_s` and calls `on_cancel(reason)` once, the first time it answers a reason
    (the wait then goes on: the run notices the recorded cancel before its next fetch).
    `clock` is the one `sleep` moves (the run's)."""
    asked_at: float | None = None
    answered = False

    def wait(seconds: float) -> None:
        nonlocal asked_at, answered
        end = clock() + max(0.0, seconds)
        while True:
            now = clock()
            due = asked_at is None or now - asked_at >= check_every_s
            if cancel_requested is not None and not answered and due:
                asked_at = now
                reason = cancel_requested()
                if reason is not None:
                    answered = True
                    on_cancel(reason)
            left = end - clock()
            if left <= 0:
                return
            sleep(min(left, check_every_s) if cancel_requested is not None else left)

    return wait


def cancel_run(
    spec: RunSpec,
    seed: int,
    candidates: Sequence[Candidate],
    *,
    store: Store,
    by: str,
    reason: str,
    **options: Any,
) -> RunResult:
    """Record `request_cancel(store, run-<run_id>-s<seed>, by=by, reason=reason)` and drive
    the run to its `cancelled` conclusion: its job cancelled on the platform and watched to
    the platform's answer, its endpoints deleted (a run that had not started concludes with
    no attempt). `options` go to `supervise_spec`, as for the run itself."""
    stream = naming.run_stream(spec.run_id, seed)
    request_cancel(store, stream, by=by, reason=reason, clock=options.get("clock", time.time))
    return supervise_spec(spec, seed, candidates, store=store, on_interrupt="detach", **options)


def supervise(
    spec: RunSpec,
    *,
    orchestrator: str,
    seed: int = 0,
    candidates: Sequence[Candidate] | None = None,
    store: Store = None,
    cancel_requested: CancelCheck | None = None,
    stopped_by: tuple[type[BaseException], ...] = (),
    check_every_s: float = CHECK_EVERY_S,
    **options: Any,
) -> dict[str, Any]:
    """Drive `spec` (its run id already the orchestrator's: `named_spec`) to a result with
    `supervise_spec(..., on_interrupt="detach")` and return `RunResult.to_dict()`.

    `cancel_requested()` (None: never) answers the reason when the orchestrator asked the
    work to stop: asked during the run's waits, and when one of `stopped_by` (the
    exceptions the orchestrator raises into running code to stop it) arrives; a cancel is
    recorded with `by=orchestrator` and carried out here. `options` go to `supervise_spec`
    (`max_retries`, `interval_s`, `runtime_secrets`, `log`, …).
    """
    walk = candidates_for(spec, candidates)
    stream = naming.run_stream(spec.run_id, seed)
    cancelled: list[str] = []
    plain_sleep = options.pop("sleep", time.sleep)
    clock = options.get("clock", time.time)

    def on_cancel(reason: str) -> None:
        cancelled.append(reason)
        request_cancel(store, stream, by=orchestrator, reason=reason, clock=clock)

    sleep = watching_sleep(
        cancel_requested, on_cancel, check_every_s=check_every_s, sleep=plain_sleep, clock=clock
    )
    try:
        result = supervise_spec(
            spec, seed, walk, store=store, sleep=sleep, on_interrupt="detach", **options
        )
    except stopped_by:
        options["sleep"] = plain_sleep
        if cancelled:  # recorded already: carry it out
            supervise_spec(spec, seed, walk, store=store, on_interrupt="detach", **options)
        elif cancel_requested is not None and (reason := cancel_requested()) is not None:
            cancel_run(spec, seed, walk, store=store, by=orchestrator, reason=reason, **options)
        raise
    return result.to_dict()
