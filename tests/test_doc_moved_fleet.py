"""What docs/fleet.md showed in a python block before it was shortened, still asserted.

The page's intake example: `job_intake` takes a JSON job (what `JobHandle.to_dict()`
writes) with the watch's parts, fills a `hub`'s default phase and names the job's stream;
it refuses a non-string id, an id whose stream would pass the 200-character cap, a
non-finite or non-positive interval and an unknown field, each with a one-line
`ValueError`. The page's other moved blocks are held by tests/test_fleet.py (an expired
lease's old token refused), tests/test_fleet_identity.py (a restart under the name fences
the old incarnation) and tests/test_metrics.py (a replica's scrape, served and parsed).
"""

from __future__ import annotations

import pytest

from flashfsm import JobHandle
from flashfsm.events.models import HubLocation
from flashfsm.fleet import job_intake

HANDLE = JobHandle("ep-1", "flash-a", "job-7", submitted_at=1_700_000_000.0)


def test_a_json_job_with_its_hub_and_interval_is_taken_and_names_its_stream():
    hub = {"hf_repo": "team/runs", "run_id": "r1", "seed": 0}
    intake = job_intake({**HANDLE.to_dict(), "hub": hub, "interval_s": 20.0})
    assert intake.hub == HubLocation(hf_repo="team/runs", phase="train", run_id="r1", seed=0)
    assert intake.handle().hub == intake.hub
    assert intake.stream_name == "job-job-7"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"job_id": 7}, "job_id"),
        ({"job_id": "j" * 200}, "job_id"),
        ({"interval_s": float("nan")}, "not a finite number"),
        ({"interval_s": 0}, "interval_s"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_a_bad_json_job_is_one_line_value_error(change: dict, says: str):
    with pytest.raises(ValueError) as caught:
        job_intake({**HANDLE.to_dict(), **change})
    message = str(caught.value)
    assert says in message and "\n" not in message.strip(), message
