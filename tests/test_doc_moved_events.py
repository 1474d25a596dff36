"""What docs/events.md showed as a runnable example, kept as a test: a watch whose job is
COMPLETED at the first fetch records four events in a JSONL file, each line beginning with
the envelope in order, the decoded output recorded as the observation's `metrics` and the
verdict concluded by the rule `completed`."""

from __future__ import annotations

from pathlib import Path

from flashfsm import JobHandle, JsonlStore, poll_job, read_jsonl_file


class Answers:
    """A RunPod client, scripted: COMPLETED with metrics at the first fetch."""

    def job_status(self, endpoint_id: str, job_id: str) -> dict:
        return {"status": "COMPLETED", "output": {"loss": 0.117}}

    def endpoint_health(self, endpoint_id: str) -> dict:
        return {}


def test_a_completed_job_records_its_metrics_and_the_completed_verdict(tmp_path: Path) -> None:
    handle = JobHandle("ep-1", "flash-x", "job-1")
    poll_job(handle, client=Answers(), clock=lambda: 1.7e9, sleep=lambda s: None,
             store=JsonlStore(tmp_path))  # fmt: skip
    path = tmp_path / "job-job-1.jsonl"
    lines = path.read_text().splitlines()
    events = read_jsonl_file(path)
    kinds = [e.kind for e in events]
    assert kinds == ["JobSubmitted", "WatchStarted", "StatusObserved", "Concluded"]
    assert lines[2].startswith('{"stream":"job-job-1","seq":2,"id":"')
    assert events[2].metrics == {"loss": 0.117} and events[3].rule == "completed"
