"""The billing model: what the provider charges for, as the ledger applies it.

This module is the one place that knows how a GPU worker is billed; the ledger
(`flashfsm.fsm.ledger`) splits an attempt's time into causes and asks this model which of
them cost money and how much. Another provider's model (per-minute rounding, billed queue
time, a minimum charge) is a change to this one file.

The model is RunPod serverless's, as its pricing page states it
(https://docs.runpod.io/serverless/pricing): a flex worker is billed per second "from when a
worker starts until it fully stops, rounded up to the nearest second", and it is charged
during its start time (the cold start: container start, model load), its execution time
and its idle timeout (the time it stays up after a request, 5 s by default) — nothing while
a job waits in the queue for a worker. The ledger sees a worker through its job's log:

- the job is *billed* while a worker has it: the job phases `SETUP` (picked up, no
  training heartbeat yet: the cold start) and `TRAINING`;
- it is *not billed* while it waits for capacity (`QUEUED`, `THROTTLED`, `UNHEALTHY`) or
  while its endpoint is deployed;
- after the verdict the worker stays billed until it is released (at once when the job
  reached a terminal status on RunPod; at the recorded cancel when the watch gave up on a
  job still running) plus the idle timeout, or until the endpoint is deleted, whichever
  comes first.

Known approximations, all small and all on the side of billing less: the container start
before the job is picked up (seen only as `initializing` workers in health probes) counts
as queue time; seconds are not rounded up per worker (at most one second per attempt).
"""

from __future__ import annotations

from dataclasses import dataclass

from flashfsm.fsm.table import JobPhase

#: Where the model comes from.
SOURCE = "https://docs.runpod.io/serverless/pricing"


@dataclass(frozen=True, slots=True)
class BillingModel:
    """How a provider bills a worker: which job phases, per what, and the idle timeout."""

    name: str
    source: str
    billed_phases: frozenset[str]  # job phases during which a worker is billed
    idle_timeout_s: float  # billed after the worker is released, unless torn down first
    #: RunPod statuses after which the worker no longer holds the job (it goes idle)
    released_statuses: frozenset[str] = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})

    def billed(self, phase: str) -> bool:
        """Whether a worker is billed while its job is in `phase`."""
        return phase in self.billed_phases

    def idle_end(self, verdict_at: float, released_at: float, teardown_at: float | None) -> float:
        """When billing stops after a verdict: the release plus the idle timeout, or the
        endpoint's teardown if that comes first (never before the verdict)."""
        end = max(verdict_at, released_at) + self.idle_timeout_s
        if teardown_at is not None:
            end = min(end, max(teardown_at, verdict_at))
        return end

    def charge(self, seconds: float, price_per_hour: float) -> float:
        """The money `seconds` of billed worker time cost at `price_per_hour`."""
        return seconds * price_per_hour / 3600.0


#: RunPod serverless flex workers (see the module's notes).
RUNPOD_SERVERLESS = BillingModel(
    name="runpod-serverless",
    source=SOURCE,
    billed_phases=frozenset({JobPhase.SETUP.value, JobPhase.TRAINING.value}),
    idle_timeout_s=5.0,
)
#: The model the ledger applies.
MODEL = RUNPOD_SERVERLESS
