"""flashfsm: an event-sourced finite-state machine for GPU training jobs on RunPod serverless.

The public API: `submit_run` deploys, submits and watches one attempt of a training run;
`poll_job` watches a submitted job to a verdict, recording every observation as an event;
`replay` rebuilds a job's state from its log and `verify` re-decides it with today's rules.
"""

import flashfsm.sigint  # noqa: I001  (before any other: Ctrl-C in the command exits 130)
import flashfsm.redact  # noqa: F401  (first: the environment's secrets are masked everywhere)
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
from flashfsm.errors import (
    JobOwnedElsewhere,
    OutputDecodeError,
    RunpodApiError,
    TransientReadError,
    UntrustedOutputError,
)
from flashfsm.events import (
    ChecksumError,
    ConcurrencyError,
    CorruptLogError,
    DuplicateEventError,
    EventDecodeError,
    EventStore,
    FlashFsmError,
    StoreFullError,
    UnknownEventError,
)
from flashfsm.events.models import Candidate
from flashfsm.events.policy import GracePolicy, stall_kwargs
from flashfsm.fleet import Fleet, hand_off_job
from flashfsm.fsm.capacity import CapacityPolicy
from flashfsm.fsm.commands import Verdict
from flashfsm.fsm.job import JobState, VerifyReport, decide, evolve, replay, verify
from flashfsm.fsm.table import JobPhase
from flashfsm.naming import stable_run_id
from flashfsm.runs import (
    RunpodRunAdapters,
    RunResult,
    UnsupportedProvider,
    request_cancel,
    supervise_run,
)
from flashfsm.shell import JobHandle, PollResult, poll_job
from flashfsm.submit import (
    RunSpec,
    WorkerDependencyError,
    flash_run_adapters,
    submit_run,
    supervise_spec,
)
from flashfsm.supervisor import JobSpec, Supervisor
from flashfsm.sweeper import IdleSweeper, SweepReport
from flashfsm.writer import StreamWriter, replay_job

__version__ = "0.1.0"

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
    "build_function_input",
    "copy_streams",
    "decide",
    "decode_output",
    "default_store_url",
    "evolve",
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
