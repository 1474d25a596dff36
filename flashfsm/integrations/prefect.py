"""Prefect 3: a training run supervised from a flow (`pip install 'flashfsm[prefect]'`).

`supervise_task(spec, seed=0, candidates=None, *, store=…, name=None)` is a Prefect task
(`supervise_in_flow` is the same function, to call inside a flow or a task of your own).
What it takes from Prefect:

- the run id: `stable_run_id("prefect", flow_run_id=<flow_run.id>, name=name)`. A flow run
  retried (Prefect's flow `retries`, `prefect flow-run retry`, the UI's Retry) keeps its id
  and runs its tasks again as new task runs, so the task run's id is never used: the same
  flow run names the same flashfsm run, and calling again resumes it (no second deploy or
  submit). A flow nested in another gets a new flow run when its parent retries: supervise
  from the outer flow.
- the cancel: Prefect cancels a flow run by setting it CANCELLING; the runner or worker
  that started it then stops its process with SIGTERM, which the flow engine raises in the
  running code as `TerminationSignal`. Both are mapped to `request_cancel(store, stream,
  by="prefect")`: the flow run's state is read between the watch's waits (every
  `check_every_s`), and on a `TerminationSignal` of a CANCELLING flow run the cancel is
  recorded and carried out (the job cancelled on RunPod, the endpoints deleted, the run
  concluded `cancelled`) before the signal goes on. A `TerminationSignal` that is not a
  cancel (the infrastructure going away) cancels nothing: a retry resumes.
- the store: a URL parameter, or a `FlashfsmStore` block (the URL kept as a secret: a
  PostgreSQL URL may hold a password).

The task returns `RunResult.to_dict()`: plain JSON for Prefect's result storage
(`persist_result=True`, the JSON serializer); `RunResult.from_dict` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from flashfsm.integrations import CHECK_EVERY_S, named_spec, require, supervise

require("prefect", "prefect")

from prefect import get_run_logger, task  # noqa: E402
from prefect.blocks.core import Block  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402
from prefect.exceptions import TerminationSignal  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from flashfsm.events.models import Candidate  # noqa: E402
from flashfsm.naming import stable_run_id  # noqa: E402
from flashfsm.submit import RunSpec  # noqa: E402

ORCHESTRATOR = "prefect"


class FlashfsmStore(Block):
    """Where flashfsm keeps its event log, as a Prefect block: a store URL
    (`sqlite:///…`, `jsonl:///…`, `postgresql://…`), kept as a secret."""

    url: SecretStr


def current_flow_run_id() -> str:
    """The id of the flow run this code runs in (`prefect.runtime.flow_run.id`); a
    `RuntimeError` outside a flow run."""
    found = flow_run.id
    if not found:
        raise RuntimeError("flashfsm.integrations.prefect runs inside a Prefect flow run")
    return str(found)


def run_id(name: str | None = None) -> str:
    """The flashfsm run id of this flow run: `stable_run_id("prefect", flow_run_id=…,
    name=name)` (the flow run's id, which its retries keep; never the task run's)."""
    return stable_run_id(ORCHESTRATOR, flow_run_id=current_flow_run_id(), name=name)


def flow_run_cancelling() -> str | None:
    """Why this flow run is being cancelled (read from the Prefect API), or None when it
    is not: its state is CANCELLING or CANCELLED."""
    flow_run_id = current_flow_run_id()
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(flow_run_id)).state
    if state is None or not (state.is_cancelling() or state.is_cancelled()):
        return None
    said = f": {state.message}" if state.message else ""
    return f"Prefect flow run {flow_run_id} {state.type.value.lower()}{said}"


def store_url(store: FlashfsmStore | str | None) -> str | None:
    """The store URL of a `FlashfsmStore` block, or `store` itself."""
    return store.url.get_secret_value() if isinstance(store, FlashfsmStore) else store


def supervise_in_flow(
    spec: RunSpec | Mapping[str, Any],
    seed: int = 0,
    candidates: Sequence[Candidate] | None = None,
    *,
    store: FlashfsmStore | str | None = None,
    name: str | None = None,
    check_every_s: float = CHECK_EVERY_S,
    **options: Any,
) -> dict[str, Any]:
    """Run `spec` (a `RunSpec` or its fields; the run id is the flow run's) to a result
    from inside a Prefect flow run and return `RunResult.to_dict()`.

    `store`: a URL or a `FlashfsmStore` block (default: `default_store_url()`); `name`
    tells apart the runs one flow run supervises. The run's lines go to Prefect's run
    logger. `options` go to `flashfsm.submit.supervise_spec` (`max_retries`,
    `interval_s`, `runtime_secrets`, …). A retried flow run resumes the run; a cancelled
    one cancels it (see the module's notes).
    """
    named = named_spec(spec, run_id(name))  # (a RuntimeError outside a flow run)
    options.setdefault("log", get_run_logger().info)
    return supervise(
        named,
        orchestrator=ORCHESTRATOR,
        seed=seed,
        candidates=candidates,
        store=store_url(store),
        cancel_requested=flow_run_cancelling,
        stopped_by=(TerminationSignal,),
        check_every_s=check_every_s,
        **options,
    )


#: `supervise_in_flow` as a Prefect task: its result is persisted as JSON; never cached
#: (a retried flow run asks flashfsm, which answers from its log and resumes what is unfinished).
supervise_task = task(
    supervise_in_flow,
    name="flashfsm-supervise",
    persist_result=True,
    result_serializer="json",
    cache_policy=NO_CACHE,
)
