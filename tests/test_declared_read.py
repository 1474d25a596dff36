"""A new read is one declaration: both drivers make it, the fold keeps it, the views and the
docs' table of reads show it, and nothing else changes.

The read here is a fake platform observation (a GPU's temperature, read through a client
method no RunPod client has), declared in this file alone with `flashfsm.reads.declare_read`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from typer.testing import CliRunner

from flashfsm import JobHandle, JsonlStore, MemoryStore, poll_job
from flashfsm.cli import app
from flashfsm.events.codec import decode, encode
from flashfsm.events.errors import UnknownEventError
from flashfsm.events.models import EventBase, StatusObserved
from flashfsm.fsm.job import replay, verify
from flashfsm.fsm.state import JobState
from flashfsm.postmortem.docs import reads_table
from flashfsm.postmortem.explain import timeline
from flashfsm.reads import DeclaredRead, declare_read
from flashfsm.supervisor import JobSpec, Supervisor, ThreadedClient
from tests.conftest import ScriptedClient, VirtualClock

INTERVAL_S = 10.0
DONE_AFTER_S = 45.0  # the job runs, then completes


class GpuTemperatureObserved(EventBase):
    """The GPU's temperature, as the platform reported it (a test's read)."""

    kind: Literal["GpuTemperatureObserved"] = "GpuTemperatureObserved"
    v: int = 1
    celsius: float | None = None
    read_error: str | None = None


def _running(state: JobState, status: StatusObserved) -> bool:
    return status.status == "IN_PROGRESS"


@pytest.fixture
def gpu_read() -> Iterator[DeclaredRead]:
    """The one declaration, taken back after the test (the registries are shared)."""
    with declare_read(
        "gpu_temperature",
        GpuTemperatureObserved,
        method="gpu_temperature",
        parse=lambda answer: {"celsius": float(answer["celsius"])},
        due=_running,
        summary=lambda e: (
            f"GPU read failed: {e.read_error}" if e.read_error else f"GPU at {e.celsius:g} °C"
        ),
        asked="on every poll while the job runs (a test's read)",
    ) as read:
        yield read


def _bare_read(asked: str = "-", event: type[EventBase] | None = None) -> DeclaredRead:
    """The GPU read declared with no parsing or summary of its own (what the docs table and
    the codec need)."""
    return declare_read(
        "gpu_temperature",
        event or GpuTemperatureObserved,
        method="gpu_temperature",
        parse=dict,
        due=_running,
        summary=str,
        asked=asked,
    )


class GpuClient(ScriptedClient):
    """A scripted client that also reports the GPU's temperature (the 2nd read fails)."""

    temperature_calls: int = 0

    def gpu_temperature(self, endpoint_id: str) -> dict[str, Any]:
        self.temperature_calls += 1
        if self.temperature_calls == 2:
            return {"celsius": "hot"}  # an answer the declaration cannot parse
        return {"celsius": 60 + self.temperature_calls}


def _status(elapsed: float, index: int) -> dict[str, Any]:
    if elapsed >= DONE_AFTER_S:
        return {"id": "job-1", "status": "COMPLETED", "output": {"ok": True}}
    return {"id": "job-1", "status": "IN_PROGRESS", "workerId": "w-1"}


HANDLE = JobHandle(endpoint_id="ep-1", endpoint_name="ep", job_id="job-1", submitted_at=1e6)


def _by_poll_job() -> list[EventBase]:
    clock = VirtualClock()
    store = MemoryStore()
    client = GpuClient(clock, _status, health=lambda t, i: {"workers": {"running": 1}})
    poll_job(
        HANDLE,
        client=client,
        clock=clock,
        sleep=clock.sleep,
        store=store,
        stream="job-gpu",
        interval_s=INTERVAL_S,
    )
    return list(store.read("job-gpu"))


def _by_supervisor() -> list[EventBase]:
    clock = VirtualClock()
    store = MemoryStore()
    client = GpuClient(clock, _status, health=lambda t, i: {"workers": {"running": 1}})

    async def asleep(seconds: float) -> None:
        clock.sleep(seconds)

    async def main() -> None:
        supervisor = Supervisor(
            store, ThreadedClient(client), clock=clock, sleep=asleep, jitter=0.0, spread=0.0
        )
        await supervisor.run([JobSpec(HANDLE, stream="job-gpu", interval_s=INTERVAL_S)])

    asyncio.run(main())
    return list(store.read("job-gpu"))


def _gpu_events(events: list[EventBase]) -> list[tuple[float, float | None, str | None]]:
    return [
        (e.at, e.celsius, e.read_error) for e in events if isinstance(e, GpuTemperatureObserved)
    ]


def test_a_declared_read_is_made_by_both_drivers_at_the_same_polls(gpu_read: DeclaredRead):
    sync_events, async_events = _by_poll_job(), _by_supervisor()
    made = _gpu_events(sync_events)
    # one read per IN_PROGRESS poll (0, 10, 20, 30, 40 s), the second one unreadable
    assert [round(at - 1e6) for at, _, _ in made] == [0, 10, 20, 30, 40]
    assert [celsius for _, celsius, _ in made] == [61.0, None, 63.0, 64.0, 65.0]
    assert made[1][2] == "unreadable answer (ValueError)"
    assert _gpu_events(async_events) == made
    assert [e.kind for e in sync_events] == [e.kind for e in async_events]
    for events in (sync_events, async_events):
        assert events[-1].kind == "Concluded" and events[-1].rule == "completed"


def test_the_fold_keeps_a_declared_reads_last_answer_and_verify_accepts_its_events(
    gpu_read: DeclaredRead,
):
    events = _by_poll_job()
    state = replay(events)
    last = state.observed["gpu_temperature"]
    assert isinstance(last, GpuTemperatureObserved) and last.celsius == 65.0
    assert "gpu_temperature" not in state.pending
    report = verify(events)
    assert report.ok, str(report)


def test_verify_refuses_a_declared_read_nobody_asked_for(gpu_read: DeclaredRead):
    events = _by_poll_job()
    first = next(i for i, e in enumerate(events) if isinstance(e, GpuTemperatureObserved))
    # the same answer twice in a row: the rules asked for one, then wait for the next poll
    twin = events[first].model_copy(update={"seq": events[first].seq + 1})
    tail = [e.model_copy(update={"seq": e.seq + 1}) for e in events[first + 1 :]]
    report = verify([*events[: first + 1], twin, *tail])
    assert not report.ok
    assert report.first_disagreement is not None
    assert report.first_disagreement.seq == twin.seq
    assert report.first_disagreement.reason == "a gpu_temperature read 10s before it was due"


def test_the_views_show_a_declared_reads_line(gpu_read: DeclaredRead, tmp_path):
    events = _by_poll_job()
    summaries = [row.summary for row in timeline(events) if row.kind == "GpuTemperatureObserved"]
    assert summaries[:2] == ["GPU at 61 °C", "GPU read failed: unreadable answer (ValueError)"]
    # and through the CLI, from a log file decoded as any log is
    store = JsonlStore(tmp_path)
    store.append("job-gpu", events, expected_seq=0)
    path = store.path_for("job-gpu")
    result = CliRunner().invoke(app, ["replay", str(path), "--full"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "GPU at 63 °C" in result.output


def test_the_docs_table_of_reads_lists_a_declared_read_and_forgets_it_when_removed():
    before = reads_table()
    assert "`gpu_temperature`" not in before
    with _bare_read("on every poll while the job runs"):
        row = next(line for line in reads_table().splitlines() if "`gpu_temperature`" in line)
        assert "on every poll while the job runs" in row and "`GpuTemperatureObserved`" in row
    assert reads_table() == before


def test_a_removed_read_leaves_its_kind_unknown_again():
    event = GpuTemperatureObserved(stream="s", seq=0, id="e", at=1.0, celsius=50.0)
    line = encode(event)
    with _bare_read():
        assert decode(line) == event
    with pytest.raises(UnknownEventError):
        decode(line)
    assert json.loads(line)["kind"] == "GpuTemperatureObserved"


def test_a_read_declared_twice_or_without_a_read_error_field_is_refused(gpu_read: DeclaredRead):
    with pytest.raises(ValueError, match="already known"):
        declare_read(
            "gpu_temperature_2",
            GpuTemperatureObserved,
            method="x",
            parse=dict,
            due=_running,
            summary=str,
            asked="-",
        )

    class Bare(EventBase):
        kind: Literal["Bare"] = "Bare"
        v: int = 1

    with pytest.raises(ValueError, match="read_error"):
        declare_read("bare", Bare, method="x", parse=dict, due=_running, summary=str, asked="-")
    assert "bare" not in reads_table()

    class Other(EventBase):
        kind: Literal["OtherGpuTemperature"] = "OtherGpuTemperature"
        v: int = 1
        read_error: str | None = None

    with pytest.raises(ValueError, match="already declared"):
        _bare_read(event=Other)  # the same name: refused, and the first read left whole
    assert "`gpu_temperature`" in reads_table()
    assert decode(encode(GpuTemperatureObserved(stream="s", seq=0, id="e", at=1.0))).kind == (
        "GpuTemperatureObserved"
    )
    with pytest.raises(UnknownEventError):
        decode(encode(Other(stream="s", seq=0, id="e", at=1.0)))
