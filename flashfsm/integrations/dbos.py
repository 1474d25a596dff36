"""DBOS 3: a training run as a DBOS step, resumed by DBOS's recovery, stopped by its cancel
(`pip install 'flashfsm[dbos]'`).

`supervise_step(spec, seed=0, candidates=None, *, name=None)` is a DBOS step
(`flashfsm.supervise`) to call from a workflow of one's own; `supervise_workflow` (DBOS name
`flashfsm.train`) is a workflow that only calls it. Both return `RunResult.to_dict()`, plain
JSON that DBOS keeps as the step's output (and the workflow's); `RunResult.from_dict` reads
it back. What it takes from DBOS:

- the run id: `stable_run_id("dbos", workflow_id=DBOS.workflow_id, name=name)`. DBOS's
  recovery runs an interrupted workflow again under its id, and runs again every step whose
  output it had not recorded, so the step run again names the same run and resumes it:
  no second deploy, no second submit. A kill (SIGKILL, a lost host) and a Ctrl-C of the app
  leave the job running (`on_interrupt="detach"`): stopping the app is not cancelling the
  run. The workflow is recovered when an app with it launches again (`DBOS.launch()` takes
  this executor's pending workflows), or when another executor is given it.
- the cancel: `DBOS.cancel_workflow` (the DBOS CLI, the console, a workflow timeout) marks
  the workflow CANCELLED and stops nothing that runs; the step reads the workflow's status
  between the watch's waits (every `check_every_s`) and, once it is CANCELLED, records
  `request_cancel(store, stream, by="dbos")` and carries it out: the job cancelled on RunPod,
  its endpoints deleted, the run concluded `cancelled`. DBOS keeps no output for a cancelled
  workflow's step; the result is in the run's log. A workflow cancelled while no process
  runs it is never recovered by DBOS, so nothing would stop its job: `cancel(workflow_id)`
  records the run's cancel beside DBOS's, and `DBOS.resume_workflow(workflow_id)` then
  winds the run down (its step finds the cancel in the log and carries it out).
- the store: `configure(dbos_config=config)`, once per process before `DBOS.launch()`,
  keeps the runs in the DBOS app's own system database when that is PostgreSQL: a flashfsm
  PostgreSQL store (tables `flashfsm_events…`, beside DBOS's schema `dbos`), so workflows and
  the runs they drive live, are backed up and are reset together, with no second database
  to run. DBOS on SQLite (its default), or no `configure`: flashfsm's durable default
  (`default_store_url()`). `configure(store=...)` names another. What DBOS must not store
  as a workflow input (a store URL with a password, runtime secrets) goes to `configure`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashfsm import integrations
from flashfsm.integrations import CHECK_EVERY_S, named_spec, require

require("dbos", "dbos")

from dbos import DBOS, DBOSClient  # noqa: E402

from flashfsm import naming  # noqa: E402
from flashfsm.adapters.stores import default_store_url  # noqa: E402
from flashfsm.events.models import Candidate  # noqa: E402
from flashfsm.events.store import EventStore  # noqa: E402
from flashfsm.naming import stable_run_id  # noqa: E402
from flashfsm.runs import request_cancel  # noqa: E402
from flashfsm.submit import RunSpec  # noqa: E402

ORCHESTRATOR = "dbos"

#: The `supervise_spec` options the step sets itself.
_OWN = frozenset({"on_interrupt", "detach", "max_retries"})

_log = logging.getLogger(__name__)


@dataclass
class _Settings:
    store: EventStore | str | None = None
    check_every_s: float = CHECK_EVERY_S
    options: dict[str, Any] = field(default_factory=dict)


_settings = _Settings()


def store_url(dbos_config: Mapping[str, Any]) -> str | None:
    """The flashfsm store URL in a DBOS app's system database (its config's
    `system_database_url`, SQLAlchemy's `+driver` dropped) when that is PostgreSQL; None
    when it is SQLite or not given (flashfsm's durable default store is used then)."""
    url = dbos_config.get("system_database_url")
    if not isinstance(url, str):
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0] not in ("postgresql", "postgres"):
        return None
    return f"postgresql://{rest}"


def configure(
    *,
    store: EventStore | str | None = None,
    dbos_config: Mapping[str, Any] | None = None,
    check_every_s: float = CHECK_EVERY_S,
    **options: Any,
) -> None:
    """Set, for this process, where `supervise_step` keeps its runs and how it drives them.

    `store` (a URL or a store object) wins; else `dbos_config` (what the app gave
    `DBOS(config=...)`) names its system database, when PostgreSQL (`store_url`); else
    flashfsm's durable default. `check_every_s` is how often, at most, a running step reads
    its workflow's status for a cancel. `options` go to `flashfsm.submit.supervise_spec`
    (`interval_s`, `runtime_secrets`, `hub_options`, `log`, …), all but what the step sets
    (`on_interrupt`, `detach`, `max_retries`). Call it before `DBOS.launch()`: a recovered
    workflow runs its step at launch.
    """
    own = sorted(_OWN & options.keys())
    if own:
        raise ValueError(f"{', '.join(own)}: set by the step, not by configure")
    if isinstance(check_every_s, bool) or not (
        isinstance(check_every_s, int | float) and math.isfinite(check_every_s)
    ):
        raise ValueError(f"check_every_s must be a number of seconds, not {check_every_s!r}")
    if check_every_s <= 0:
        raise ValueError(f"check_every_s must be positive, not {check_every_s!r}")
    _settings.store = store if store is not None or dbos_config is None else store_url(dbos_config)
    _settings.check_every_s = float(check_every_s)
    _settings.options = dict(options)


def current_workflow_id() -> str:
    """The id of the DBOS workflow this code runs in (`DBOS.workflow_id`); a `RuntimeError`
    outside a workflow."""
    found = DBOS.workflow_id
    if not found:
        raise RuntimeError("flashfsm.integrations.dbos runs inside a DBOS workflow")
    return found


def run_id(name: str | None = None, workflow_id: str | None = None) -> str:
    """The flashfsm run id of a DBOS workflow (by default the one running):
    `stable_run_id("dbos", workflow_id=…, name=name)`, the same for every execution of the
    workflow, its recoveries' included."""
    found = workflow_id if workflow_id is not None else current_workflow_id()
    return stable_run_id(ORCHESTRATOR, workflow_id=found, name=name)


def workflow_cancelled(workflow_id: str, shard_key: str | None = None) -> str | None:
    """Why the workflow is being stopped (read from DBOS's system database), or None when
    it is not: DBOS says CANCELLED. A failed read is None too (logged): the run goes on, and
    the next look, `check_every_s` later, may see the cancel."""
    try:
        status = DBOS.get_workflow_status(workflow_id, shard_key=shard_key)
    except Exception as exc:
        _log.warning("could not read DBOS workflow %s: %s", workflow_id, type(exc).__name__)
        return None
    if status is None or status.status != "CANCELLED":
        return None
    return f"DBOS workflow {workflow_id} cancelled"


def _candidates(
    candidates: Sequence[Candidate | Mapping[str, Any]] | None,
) -> list[Candidate] | None:
    if candidates is None:
        return None
    return [c if isinstance(c, Candidate) else Candidate.model_validate(c) for c in candidates]


@DBOS.step(name="flashfsm.supervise")
def supervise_step(
    spec: RunSpec | Mapping[str, Any],
    seed: int = 0,
    candidates: Sequence[Candidate | Mapping[str, Any]] | None = None,
    *,
    name: str | None = None,
    max_retries: int = 2,
) -> dict[str, Any]:
    """Run `spec` (a `RunSpec` or its fields; the run id is the workflow's) to a result, as a
    step of the running DBOS workflow, and return `RunResult.to_dict()`.

    `candidates` (each a `Candidate` or its fields) default to the spec's GPU class alone;
    `name` tells apart the runs one workflow supervises. The store and the other options
    are the process's (`configure`). DBOS's recovery resumes the run; its cancel cancels it
    (see the module's notes). The run's lines go to DBOS's logger.
    """
    workflow_id = current_workflow_id()
    shard_key = DBOS.shard_key
    options = dict(_settings.options)
    options.setdefault("log", DBOS.logger.info)
    return integrations.supervise(
        named_spec(spec, run_id(name, workflow_id)),
        orchestrator=ORCHESTRATOR,
        seed=seed,
        candidates=_candidates(candidates),
        store=_settings.store,
        cancel_requested=lambda: workflow_cancelled(workflow_id, shard_key),
        check_every_s=_settings.check_every_s,
        max_retries=max_retries,
        **options,
    )


@DBOS.workflow(name="flashfsm.train")
def supervise_workflow(
    spec: RunSpec | Mapping[str, Any],
    seed: int = 0,
    candidates: Sequence[Candidate | Mapping[str, Any]] | None = None,
    *,
    name: str | None = None,
    max_retries: int = 2,
) -> dict[str, Any]:
    """A DBOS workflow of one training run: `supervise_step`, its result as a dict.

    DBOS stores a workflow's arguments: the spec holds no secret, and runtime secrets go to
    `configure`, never here.
    """
    return supervise_step(spec, seed, candidates, name=name, max_retries=max_retries)


def cancel(
    workflow_id: str,
    name: str | None = None,
    seed: int = 0,
    *,
    reason: str = "",
    client: DBOSClient | None = None,
    store: EventStore | str | None = None,
) -> None:
    """Cancel the DBOS workflow `workflow_id` and record the cancel in its run (`name`,
    `seed`) too, so that it holds when no process runs the workflow: a running step carries
    it out at once; a workflow whose process died is wound down by
    `DBOS.resume_workflow(workflow_id)` (its step finds the cancel and carries it out).

    `client` (a `DBOSClient`) cancels from a process without a launched DBOS (an admin
    script); `store` defaults to the one `configure` set, else flashfsm's durable default.
    """
    if client is not None:
        client.cancel_workflow(workflow_id)
    else:
        DBOS.cancel_workflow(workflow_id)
    chosen = store if store is not None else _settings.store
    request_cancel(
        chosen if chosen is not None else default_store_url(),
        naming.run_stream(run_id(name, workflow_id), seed),
        by=ORCHESTRATOR,
        reason=reason or f"DBOS workflow {workflow_id} cancelled",
    )
