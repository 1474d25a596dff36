"""A RunPod + Hugging Face Hub simulator that the real SDKs talk to over loopback HTTP.

    from flashfsm.adapters.simulator import Simulator

    with Simulator(speed=60) as sim:        # one real second = one simulated minute
        os.environ.update(sim.env())        # RUNPOD_* hosts, RUNPOD_API_KEY, HF_ENDPOINT
        ...

The asyncio `Supervisor` takes the sim clock's `async_sleep`:
`Supervisor(store, client, clock=sim.clock.now, sleep=sim.clock.async_sleep)`.

See `server.py` for the routes, `scenarios.py` for the scripted job lives, `workers.py`
for the workers that run them (RunPod's worker list and each worker's log), `faults.py`
for fault injection, `hub.py` for the fake Hub and `usage.py` for what the platform
created and billed (`sim.usage()`, `GET /_sim/usage`, `read_usage(url)`). `flashfsm
simulator` (or its delegate `python -m flashfsm.adapters.simulator`; both are `serve.py`)
runs one for another process, printing the `export` lines that point it there.
"""

from flashfsm.adapters.simulator.clock import SimClock
from flashfsm.adapters.simulator.faults import Fault
from flashfsm.adapters.simulator.hub import HubStore
from flashfsm.adapters.simulator.scenarios import (
    KEEP,
    Scenario,
    Step,
    builtin_scenarios,
    end_record,
    finished,
    heartbeat,
    key_revoked,
    training,
)
from flashfsm.adapters.simulator.server import DEFAULT_KEY, RecordedRequest, Simulator
from flashfsm.adapters.simulator.usage import EndpointUsage, Usage, WorkerUsage, read_usage
from flashfsm.adapters.simulator.world import QUOTA_MESSAGE

__all__ = [
    "DEFAULT_KEY",
    "KEEP",
    "QUOTA_MESSAGE",
    "EndpointUsage",
    "Fault",
    "HubStore",
    "RecordedRequest",
    "Scenario",
    "SimClock",
    "Simulator",
    "Step",
    "Usage",
    "WorkerUsage",
    "builtin_scenarios",
    "end_record",
    "finished",
    "heartbeat",
    "key_revoked",
    "read_usage",
    "training",
]
