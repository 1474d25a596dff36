"""Dagster 1.x: a training run supervised from an op (`pip install 'flashfsm[dagster]'`).

`FlashfsmResource` is a `ConfigurableResource` holding the store URL and the run's options
(Dagster's configuration: a definition, run config, `EnvVar`); its `supervise(context,
spec, …)` runs a spec from inside an op or an asset, and `supervise_op(spec, name=…)` makes
an op that does only that (its resource key is `flashfsm`). What it takes from Dagster:

- the run id: `stable_run_id("dagster", root_run_id=<context.run.root_run_id or
  context.run_id>, step_key=<the op>, name=name)`. A re-execution (from failure, the UI's
  Re-execute) or a run retry (Dagster's answer to a run worker that died) is a new run with a
  new `run_id` whose `root_run_id` is the first run's, so it names the same flashfsm run and
  resumes it (no second deploy or submit); the step key is the op's name (and its mapping
  key under a dynamic output): an op used twice in a job under aliases needs `name`s.
- the cancel: Dagster terminates a run (the UI's Terminate, `run_launcher.terminate`) by
  marking it CANCELING, then, where its launcher can, interrupting the run worker, which
  Dagster raises in the op as `DagsterExecutionInterruptedError`. Both are mapped to
  `request_cancel(store, stream, by="dagster")`: the run's status is read between the
  watch's waits (every `check_every_s`), and on an interrupt of a CANCELING run the cancel
  is recorded and carried out (the job cancelled on RunPod, the endpoints deleted, the run
  concluded `cancelled`) before the interrupt goes on. An op whose run was cancelled this
  way fails (a `dagster.Failure` carrying the result), so Dagster marks the run CANCELED.
  An interrupt of a run that is not CANCELING cancels nothing: a re-execution resumes.

The op's output is `RunResult.to_dict()`, plain JSON for Dagster's IO manager;
`RunResult.from_dict` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flashfsm.integrations import CHECK_EVERY_S, named_spec, require, supervise

require("dagster", "dagster")

from dagster import (  # noqa: E402
    ConfigurableResource,
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    Failure,
    OpDefinition,
    OpExecutionContext,
    op,
)

from flashfsm.events.models import Candidate  # noqa: E402
from flashfsm.naming import stable_run_id  # noqa: E402
from flashfsm.submit import RunSpec  # noqa: E402

ORCHESTRATOR = "dagster"
#: The resource key `supervise_op`'s ops ask for.
RESOURCE_KEY = "flashfsm"
STOPPING = (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED)


def run_id(context: OpExecutionContext, name: str | None = None) -> str:
    """The flashfsm run id of this op's run: its run group's root (`root_run_id`, or the
    run's own id for the first run), the op's step key, and `name`."""
    run = context.run
    step_key = context.op_def.name
    mapping_key = context.get_mapping_key()
    if mapping_key is not None:
        step_key = f"{step_key}[{mapping_key}]"
    return stable_run_id(
        ORCHESTRATOR, root_run_id=run.root_run_id or run.run_id, step_key=step_key, name=name
    )


def run_terminating(context: OpExecutionContext) -> str | None:
    """Why this op's Dagster run is being terminated (read from the instance), or None when
    it is not: its status is CANCELING or CANCELED."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is None or run.status not in STOPPING:
        return None
    return f"Dagster run {context.run_id} {run.status.value.lower()}"


class FlashfsmResource(ConfigurableResource):
    """Where flashfsm keeps its event log and how a run is driven, from Dagster's
    configuration. `store_url`: a store URL (None: `default_store_url()`, i.e.
    `$FLASHFSM_STORE` or the user's data directory); `max_retries`, `interval_s` (seconds
    between status fetches) and `check_every_s` (how often the run's status is read for a
    termination) go to the run."""

    store_url: str | None = None
    max_retries: int = 2
    interval_s: float = 10.0
    check_every_s: float = CHECK_EVERY_S

    def supervise(
        self,
        context: OpExecutionContext,
        spec: RunSpec | Mapping[str, Any],
        seed: int = 0,
        candidates: Sequence[Candidate] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Run `spec` (a `RunSpec` or its fields; the run id is the run group's) to a result
        from inside an op and return `RunResult.to_dict()`; its lines go to `context.log`.
        `options` go to `flashfsm.submit.supervise_spec` (`runtime_secrets`, …). A
        re-execution resumes the run; a termination cancels it (see the module's notes)."""
        options.setdefault("log", context.log.info)
        options.setdefault("max_retries", self.max_retries)
        options.setdefault("interval_s", self.interval_s)
        result = supervise(
            named_spec(spec, run_id(context, name)),
            orchestrator=ORCHESTRATOR,
            seed=seed,
            candidates=candidates,
            store=self.store_url,
            cancel_requested=lambda: run_terminating(context),
            stopped_by=(DagsterExecutionInterruptedError,),
            check_every_s=self.check_every_s,
            **options,
        )
        if result["failure"] == "cancelled" and run_terminating(context) is not None:
            raise Failure(
                description=f"the run was cancelled: {result['detail']}",
                metadata={"stream": result["stream"], "attempts": result["attempts"]},
            )
        return result


def supervise_op(
    spec: RunSpec | Mapping[str, Any],
    *,
    name: str = "train",
    seed: int = 0,
    candidates: Sequence[Candidate] | None = None,
    run_name: str | None = None,
    **options: Any,
) -> OpDefinition:
    """An op named `name` that runs `spec` with the `flashfsm` resource (a
    `FlashfsmResource`) and outputs `RunResult.to_dict()`. `run_name` is `supervise`'s
    `name`; `options` go to `flashfsm.submit.supervise_spec`."""

    @op(name=name, required_resource_keys={RESOURCE_KEY})
    def supervised(context) -> dict:  # type: ignore[no-untyped-def]  (Dagster reads it)
        resource: FlashfsmResource = getattr(context.resources, RESOURCE_KEY)
        return resource.supervise(context, spec, seed, candidates, name=run_name, **dict(options))

    return supervised
