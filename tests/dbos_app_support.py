"""A DBOS app that trains one run with `flashfsm.integrations.dbos`: what
tests/test_integration_dbos.py runs in a process of its own, to start, SIGKILL and recover.

    python tests/dbos_app_support.py start WORKFLOW_ID    # start `train` under that id
    python tests/dbos_app_support.py recover WORKFLOW_ID  # launch: DBOS recovers what is pending

Either way it then waits for the workflow and prints one JSON line: `{"result": {...}}` (the
dict the workflow returned) or `{"cancelled": true}`. The environment gives the simulator's
exports, `DBOS_SYSTEM_DATABASE_URL` (the DBOS system database, where the runs are kept
too) and `FLASHFSM_DBOS_TEST_HF_CACHE`.
"""

from __future__ import annotations

import json
import os
import sys

from dbos import DBOS, DBOSConfig, SetWorkflowID, error

from flashfsm.integrations import dbos as flash

#: The run each workflow trains (its run id is the workflow's), and its name in the workflow.
SPEC = {
    "phase": "sft",
    "gpu_class": "A100-80GB",
    "hf_repo": "org/runs",
    "worker_image": "team/trainer:3",
    "max_wall_seconds": 3 * 3600,
}
NAME = "sft"


def main(mode: str, workflow_id: str) -> None:
    config: DBOSConfig = {
        "name": "flashfsm-dbos-test",
        "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"],
        "application_version": "flashfsm-dbos-test-1",  # recovery takes this version's work
        "log_level": "WARNING",
    }
    DBOS(config=config)
    flash.configure(
        dbos_config=config,  # the runs' store: the same PostgreSQL database
        check_every_s=0.2,
        interval_s=0.2,  # the simulator's clock is moved by the test
        hub_options={"cache_dir": os.environ["FLASHFSM_DBOS_TEST_HF_CACHE"]},
    )
    DBOS.launch()
    if mode == "start":
        with SetWorkflowID(workflow_id):
            handle = DBOS.start_workflow(flash.supervise_workflow, SPEC, 0, name=NAME)
    else:
        handle = DBOS.retrieve_workflow(workflow_id)
    try:
        print(json.dumps({"result": handle.get_result()}), flush=True)
    except error.DBOSAwaitedWorkflowCancelledError:
        print(json.dumps({"cancelled": True}), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
