"""flashfsm: an event-sourced finite-state machine for GPU training jobs on RunPod serverless.

The public API: `poll_job` watches a submitted job to a verdict, recording every
observation as an event; `replay` rebuilds a job's state from its log and `verify`
re-decides it with today's rules.
"""

from flashfsm.adapters.flash_wire import decode_output
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
from flashfsm.errors import JobOwnedElsewhere, OutputDecodeError, RunpodApiError
from flashfsm.events import (
    ConcurrencyError,
    CorruptLogError,
    DuplicateEventError,
    EventDecodeError,
    EventStore,
    FlashFsmError,
    UnknownEventError,
)
from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.job import JobState, VerifyReport, decide, evolve, replay, verify
from flashfsm.fsm.policy import GracePolicy, stall_kwargs
from flashfsm.fsm.table import JobPhase
from flashfsm.shell import JobHandle, JobWatch, PollResult, poll_job

__version__ = "0.1.0"

__all__ = [
    "AsyncRunpodClient",
    "ConcurrencyError",
    "CorruptLogError",
    "DuplicateEventError",
    "EventDecodeError",
    "EventStore",
    "FlashFsmError",
    "GracePolicy",
    "JobHandle",
    "JobOwnedElsewhere",
    "JobPhase",
    "JobState",
    "JobWatch",
    "JsonlStore",
    "MemoryStore",
    "OutputDecodeError",
    "PollResult",
    "RunpodApiError",
    "RunpodAuthError",
    "RunpodClient",
    "SqliteStore",
    "UnknownEventError",
    "Verdict",
    "VerifyReport",
    "__version__",
    "copy_streams",
    "decide",
    "decode_output",
    "default_store_url",
    "evolve",
    "open_store",
    "policy_for_budget",
    "poll_job",
    "read_jsonl_file",
    "replay",
    "stall_kwargs",
    "verify",
]
