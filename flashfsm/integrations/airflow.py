"""Airflow 3: a training run as a deferrable task (`pip install 'flashfsm[airflow]'`).

`FlashfsmRunOperator(task_id=…, spec=…, candidates=…, store=…)` names the run and defers at
once to `FlashfsmRunTrigger`, which drives the whole run — the GPU walk, the retries, the
endpoint cleanup — from the triggerer's event loop (`flashfsm.submit.asupervise_spec`, the
async twin of `supervise_spec`: no worker slot is held while the job queues and trains).
The pair follows Airflow's own providers for long cloud jobs (an operator that starts or
names the work, a trigger that resumes from what was recorded):

- the run id: `stable_run_id("airflow", dag_id=…, run_id=…, task_id=…, map_index=…,
  name=name)` — the ids a task's retry or a clear keeps (never the try number, never the
  task instance's UUID, which is new each try), so a retried task, a cleared one, or a
  trigger restarted on another triggerer names the same flashfsm run and resumes it (no
  second deploy or submit);
- a triggerer that stops (a restart, a rolling deploy, a SIGKILL) cancels the trigger's task
  or kills it: nothing is recorded or cancelled, and the trigger, started again from its
  serialized kwargs, resumes the run;
- a user's kill (mark failed, mark success, clear of the deferred task) reaches the
  trigger's `on_kill`: `request_cancel(store, stream, by="airflow")`, then the run is driven
  to its `cancelled` conclusion (its job cancelled on RunPod, its endpoints deleted);
- the store: `store` (a URL, templated) or `store_conn_id` (an Airflow connection: a
  `postgres` or `sqlite` one, or any with an extra `{"url": …}`; `connection_url`), read by
  the trigger when it runs, so no password sits in the trigger's kwargs. The triggerer and
  the workers must share it: PostgreSQL in production.

The task returns `RunResult.to_dict()` (plain JSON, pushed to XCom); a run that did not
succeed fails the task with its failure and detail. Runtime secrets cannot travel in a
trigger's kwargs: give the triggerer's environment what the worker needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from flashfsm.integrations import candidates_for, named_spec, require

require("airflow.sdk", "airflow")

from airflow.sdk import BaseHook, BaseOperator  # noqa: E402
from airflow.sdk.exceptions import AirflowException  # noqa: E402
from airflow.triggers.base import BaseTrigger, TriggerEvent  # noqa: E402

from flashfsm import naming  # noqa: E402
from flashfsm.events.models import Candidate  # noqa: E402
from flashfsm.naming import stable_run_id  # noqa: E402
from flashfsm.redact import register_secrets  # noqa: E402
from flashfsm.runs import RunResult, request_cancel  # noqa: E402
from flashfsm.submit import RunSpec, asupervise_spec  # noqa: E402

ORCHESTRATOR = "airflow"
TRIGGER = f"{__name__}.FlashfsmRunTrigger"


def airflow_run_id(ti: Any, name: str | None = None) -> str:
    """The flashfsm run id of a task instance: its DAG, DAG run, task and map index (what a
    retry and a clear keep), and `name` to tell apart the runs of one task."""
    return stable_run_id(
        ORCHESTRATOR,
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=ti.map_index,
        name=name,
    )


def connection_url(connection: Any) -> str:
    """The store URL an Airflow connection names: its extra's `url` when it has one, else
    one built from its fields — a `postgres` connection's login, password, host, port and
    schema (the database), a `sqlite` connection's file (its host, or its URI's path). A
    `ValueError` (naming the connection, never its password) for any other kind."""
    extra = connection.extra_dejson or {}
    if extra.get("url"):
        return str(extra["url"])
    kind = connection.conn_type
    if kind in ("postgres", "postgresql"):
        login, password = connection.login or "", connection.password or ""
        register_secrets(password, quote(password, safe=""))  # masked wherever it could show
        auth = quote(login, safe="") + (f":{quote(password, safe='')}" if password else "")
        where = (connection.host or "") + (f":{connection.port}" if connection.port else "")
        return f"postgresql://{auth + '@' if auth else ''}{where}/{connection.schema or ''}"
    path = connection.host or connection.schema  # (the UI's host; a URI's path lands in schema)
    if kind == "sqlite" and path:
        return f"sqlite:///{path}"
    raise ValueError(
        f"Airflow connection {connection.conn_id!r} ({kind}) names no flashfsm store: "
        'give it an extra {"url": "<store URL>"}, or make it a postgres or sqlite connection'
    )


class FlashfsmRunTrigger(BaseTrigger):
    """Drives one flashfsm run to its result on the triggerer's event loop, and fires one
    event: the run's `RunResult.to_dict()`. Built by `FlashfsmRunOperator`; every kwarg is
    plain JSON (the spec with its run id set, the candidates' fields)."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        seed: int = 0,
        candidates: Sequence[Mapping[str, Any]] = (),
        store: str | None = None,
        store_conn_id: str | None = None,
        max_retries: int = 2,
        interval_s: float = 10.0,
    ):
        super().__init__()
        self.spec = dict(spec)
        self.seed = seed
        self.candidates = [dict(c) for c in candidates]
        self.store = store
        self.store_conn_id = store_conn_id
        self.max_retries = max_retries
        self.interval_s = interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The trigger as Airflow stores it: this class's path and its kwargs."""
        return (
            TRIGGER,
            {
                "spec": self.spec,
                "seed": self.seed,
                "candidates": self.candidates,
                "store": self.store,
                "store_conn_id": self.store_conn_id,
                "max_retries": self.max_retries,
                "interval_s": self.interval_s,
            },
        )

    @property
    def stream(self) -> str:
        """The run's stream: `run-<run_id>-s<seed>`."""
        return naming.run_stream(str(self.spec["run_id"]), self.seed)

    async def store_url(self) -> str | None:
        """The store: `store`, else the URI of the `store_conn_id` connection (read in a
        worker thread: Airflow's connection lookup blocks), else None (the default)."""
        if self.store is not None or self.store_conn_id is None:
            return self.store
        connection = await asyncio.to_thread(BaseHook.get_connection, self.store_conn_id)
        return connection_url(connection)

    async def drive(self) -> RunResult:
        """The run to its result (resumed from its stream when it has one)."""
        spec = RunSpec.model_validate(self.spec)
        candidates = [Candidate.model_validate(c) for c in self.candidates]
        return await asupervise_spec(
            spec,
            self.seed,
            candidates_for(spec, candidates),
            store=await self.store_url(),
            max_retries=self.max_retries,
            interval_s=self.interval_s,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Drive the run; fire its result."""
        result = await self.drive()
        yield TriggerEvent(result.to_dict())

    async def on_kill(self) -> None:
        """A user killed the deferred task: record the cancel (by "airflow") and drive the
        run to its `cancelled` end, its job cancelled and its endpoints deleted."""
        store = await self.store_url()
        await asyncio.to_thread(
            request_cancel,
            store,
            self.stream,
            by=ORCHESTRATOR,
            reason="the task was killed in Airflow",
        )
        await self.drive()


class FlashfsmRunOperator(BaseOperator):
    """A flashfsm training run as a deferrable Airflow task (see the module's notes).

    `spec` is a `RunSpec` or its fields (its `run_id` is replaced by the task's stable id),
    `candidates` the GPU walk (default: the spec's GPU class alone), `name` tells apart
    several runs of one task, `store` / `store_conn_id` where the run's log lives.
    """

    template_fields: Sequence[str] = ("store", "store_conn_id")

    def __init__(
        self,
        *,
        spec: RunSpec | Mapping[str, Any],
        candidates: Sequence[Candidate] | None = None,
        seed: int = 0,
        store: str | None = None,
        store_conn_id: str | None = None,
        name: str | None = None,
        max_retries: int = 2,
        interval_s: float = 10.0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if store is not None and store_conn_id is not None:
            raise ValueError("give the store as a URL (store) or a connection (store_conn_id)")
        self.spec = spec.model_dump(mode="json") if isinstance(spec, RunSpec) else dict(spec)
        self.candidates = [c.model_dump(mode="json") for c in candidates or ()]
        self.seed = seed
        self.store = store
        self.store_conn_id = store_conn_id
        self.name = name
        self.max_retries = max_retries
        self.interval_s = interval_s

    def trigger(self, context: Mapping[str, Any]) -> FlashfsmRunTrigger:
        """The trigger of this task instance's run."""
        spec = named_spec(self.spec, airflow_run_id(context["ti"], self.name))
        return FlashfsmRunTrigger(
            spec=spec.model_dump(mode="json"),
            seed=self.seed,
            candidates=self.candidates,
            store=self.store,
            store_conn_id=self.store_conn_id,
            max_retries=self.max_retries,
            interval_s=self.interval_s,
        )

    def execute(self, context: Any) -> None:
        """Defer to the trigger at once: the whole run happens in the triggerer."""
        self.defer(trigger=self.trigger(context), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> dict[str, Any]:
        """The run's result (to XCom); a run that did not succeed fails the task."""
        result = RunResult.from_dict(event)
        if not result.ok:
            raise AirflowException(
                f"flashfsm run {result.stream}: {result.failure}: {result.detail}"
            )
        return result.to_dict()
