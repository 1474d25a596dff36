"""flashfsm: an event-sourced finite-state machine for GPU training jobs on RunPod serverless.

The public API: `submit_run` deploys, submits and watches one attempt of a training run;
`poll_job` watches a submitted job to a verdict, recording every observation as an event;
`replay` rebuilds a job's state from its log and `verify` re-decides it with today's rules.

Importing the package is cheap: each public name is loaded from its module on first use
(PEP 562: `__getattr__` below, `EXPORTS` says where each lives), so an orchestrator that
imports flashfsm in a task or an event loop pays only for what it uses. What the package
does on import, and keeps doing: a Ctrl-C in the `flashfsm` command exits 130 from the first
line (`flashfsm.sigint`), the environment's secrets are masked in every event and log line
(`flashfsm.redact`), and the library's loggers, and the per-transition lines of the
`transitions` library, stay silent unless the application configures logging (docs/api.md,
"Importing, and logging").
"""

import flashfsm.sigint  # noqa: I001  (before any other: Ctrl-C in the command exits 130)
import flashfsm.redact  # noqa: F401  (first: the environment's secrets are masked everywhere)
import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see: the names, from their modules
    from flashfsm.adapters.flash_deploy import DeployError, KeyPool
    from flashfsm.adapters.flash_wire import build_function_input, decode_output
    from flashfsm.adapters.jsonl import JsonlStore, read_jsonl_file
    from flashfsm.adapters.memory import MemoryStore
    from flashfsm.adapters.runpod import (
        AsyncRunpodClient,
        RunpodAuthError,
        RunpodClient,
        policy_for_budget,
    )
    from flashfsm.adapters.sqlite import SqliteStore
    from flashfsm.adapters.stores import copy_streams, default_store_url, open_store
    from flashfsm.bundled import example_logs
    from flashfsm.errors import (
        JobOwnedElsewhere,
        OutputDecodeError,
        RunpodApiError,
        TransientReadError,
        UntrustedOutputError,
    )
    from flashfsm.events.errors import (
        ChecksumError,
        ConcurrencyError,
        CorruptLogError,
        DuplicateEventError,
        EventDecodeError,
        FlashFsmError,
        StoreFullError,
        UnknownEventError,
    )
    from flashfsm.events.models import Candidate
    from flashfsm.events.policy import GracePolicy, stall_kwargs
    from flashfsm.events.store import EventStore
    from flashfsm.fleet import Fleet, hand_off_job
    from flashfsm.fsm.capacity import CapacityPolicy
    from flashfsm.fsm.commands import Verdict
    from flashfsm.fsm.job import JobState, VerifyReport, decide, evolve, replay, verify
    from flashfsm.fsm.table import JobPhase
    from flashfsm.naming import stable_run_id
    from flashfsm.reads import declare_read
    from flashfsm.runs import (
        RunpodRunAdapters,
        RunResult,
        UnsupportedProvider,
        asupervise_run,
        request_cancel,
        supervise_run,
    )
    from flashfsm.shell import JobHandle, PollResult, poll_job
    from flashfsm.submit import (
        RunSpec,
        WorkerDependencyError,
        asupervise_spec,
        flash_run_adapters,
        submit_run,
        supervise_spec,
    )
    from flashfsm.supervisor import JobSpec, Supervisor
    from flashfsm.sweeper import IdleSweeper, SweepReport
    from flashfsm.writer import StreamWriter, replay_job

__version__ = "0.1.0"

#: Where each public name lives: `from flashfsm import X` loads X's module on first use.
EXPORTS: dict[str, tuple[str, ...]] = {
    "flashfsm.adapters.flash_deploy": ("DeployError", "KeyPool"),
    "flashfsm.adapters.flash_wire": ("build_function_input", "decode_output"),
    "flashfsm.adapters.jsonl": ("JsonlStore", "read_jsonl_file"),
    "flashfsm.adapters.memory": ("MemoryStore",),
    "flashfsm.adapters.runpod": (
        "AsyncRunpodClient",
        "RunpodAuthError",
        "RunpodClient",
        "policy_for_budget",
    ),
    "flashfsm.adapters.sqlite": ("SqliteStore",),
    "flashfsm.adapters.stores": ("copy_streams", "default_store_url", "open_store"),
    "flashfsm.bundled": ("example_logs",),
    "flashfsm.reads": ("declare_read",),
    "flashfsm.errors": (
        "JobOwnedElsewhere",
        "OutputDecodeError",
        "RunpodApiError",
        "TransientReadError",
        "UntrustedOutputError",
    ),
    "flashfsm.events.errors": (
        "ChecksumError",
        "ConcurrencyError",
        "CorruptLogError",
        "DuplicateEventError",
        "EventDecodeError",
        "FlashFsmError",
        "StoreFullError",
        "UnknownEventError",
    ),
    "flashfsm.events.models": ("Candidate",),
    "flashfsm.events.policy": ("GracePolicy", "stall_kwargs"),
    "flashfsm.events.store": ("EventStore",),
    "flashfsm.fleet": ("Fleet", "hand_off_job"),
    "flashfsm.fsm.capacity": ("CapacityPolicy",),
    "flashfsm.fsm.commands": ("Verdict",),
    "flashfsm.fsm.job": ("JobState", "VerifyReport", "decide", "evolve", "replay", "verify"),
    "flashfsm.fsm.table": ("JobPhase",),
    "flashfsm.naming": ("stable_run_id",),
    "flashfsm.runs": (
        "RunpodRunAdapters",
        "RunResult",
        "UnsupportedProvider",
        "asupervise_run",
        "request_cancel",
        "supervise_run",
    ),
    "flashfsm.shell": ("JobHandle", "PollResult", "poll_job"),
    "flashfsm.submit": (
        "RunSpec",
        "WorkerDependencyError",
        "asupervise_spec",
        "flash_run_adapters",
        "submit_run",
        "supervise_spec",
    ),
    "flashfsm.supervisor": ("JobSpec", "Supervisor"),
    "flashfsm.sweeper": ("IdleSweeper", "SweepReport"),
    "flashfsm.writer": ("StreamWriter", "replay_job"),
}
_HOMES = {name: module for module, names in EXPORTS.items() for name in names}

# Quiet unless the application configures logging (the library logs, never prints): a
# NullHandler on the library's top logger keeps Python's last-resort handler from printing
# its warnings to stderr, and the `transitions` library's per-transition INFO lines stay out
# of an application's INFO logs (a task log) unless the application set that logger's level
# itself, before or after this import.
logging.getLogger("flashfsm").addHandler(logging.NullHandler())
if logging.getLogger("transitions").level == logging.NOTSET:
    logging.getLogger("transitions").setLevel(logging.WARNING)


def __getattr__(name: str) -> Any:
    """A public name, loaded from its module on first use (PEP 562) and kept here after."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the public ones not loaded yet included."""
    return sorted({*globals(), *__all__})


__all__ = [
    "AsyncRunpodClient",
    "Candidate",
    "CapacityPolicy",
    "ChecksumError",
    "ConcurrencyError",
    "CorruptLogError",
    "DeployError",
    "DuplicateEventError",
    "EventDecodeError",
    "EventStore",
    "FlashFsmError",
    "Fleet",
    "GracePolicy",
    "IdleSweeper",
    "JobHandle",
    "JobOwnedElsewhere",
    "JobPhase",
    "JobSpec",
    "JobState",
    "JsonlStore",
    "KeyPool",
    "MemoryStore",
    "OutputDecodeError",
    "PollResult",
    "RunResult",
    "RunSpec",
    "RunpodApiError",
    "RunpodAuthError",
    "RunpodClient",
    "RunpodRunAdapters",
    "SqliteStore",
    "StoreFullError",
    "StreamWriter",
    "Supervisor",
    "SweepReport",
    "TransientReadError",
    "UnknownEventError",
    "UnsupportedProvider",
    "UntrustedOutputError",
    "Verdict",
    "VerifyReport",
    "WorkerDependencyError",
    "__version__",
    "asupervise_run",
    "asupervise_spec",
    "build_function_input",
    "copy_streams",
    "decide",
    "declare_read",
    "decode_output",
    "default_store_url",
    "evolve",
    "example_logs",
    "flash_run_adapters",
    "hand_off_job",
    "open_store",
    "policy_for_budget",
    "poll_job",
    "read_jsonl_file",
    "replay",
    "replay_job",
    "request_cancel",
    "stable_run_id",
    "stall_kwargs",
    "submit_run",
    "supervise_run",
    "supervise_spec",
    "verify",
]
