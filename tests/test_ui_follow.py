"""A running job's worker log followed on its page (`flashfsm.ui.follow`, `/log/<name>`).

The view reads the log from the RunPod simulator on 127.0.0.1 with the key its environment
holds, as `flashfsm logs --fetch` does: each line masked, its markup inert, its control
characters escaped, nothing recorded. The store holds a run whose attempt's job a worker of
the simulator is training; the simulator's clock is manual, so its log grows when a test
moves the clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.events.models import StatusObserved
from flashfsm.live_log import LiveLogReader, LiveLogTarget, LiveLogUnavailable
from flashfsm.ui.app import UiConfig, create_app
from tests.ui_browser import append, conclude, write_open_run

T0 = 1_774_483_200.0  # the simulator's manual clock starts here
#: A line the worker prints with the view's own key in it, markup and a terminal escape.
HOSTILE = "key={key} <b>bold</b> <script>alert(1)</script> \x1b[2J"


@dataclass
class World:
    """The simulator, the store (a run and its job, trained by a simulator worker), and the
    names a test reads back."""

    sim: Simulator
    url: str
    path: Path
    run: str
    job: str
    job_id: str
    worker: str

    @property
    def key(self) -> str:
        return self.sim.accounts[0].key

    def advance(self, seconds: float) -> None:
        self.sim.clock.advance(seconds)

    def log_reads(self) -> int:
        return len(self.sim.requests_for("worker_logs"))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with Simulator(clock=SimClock(speed=0, start=T0)) as sim:
        for name, value in sim.env(hf=False).items():
            monkeypatch.setenv(name, value)
        endpoint = sim.add_endpoint(scenario="training")
        key = sim.accounts[0].key
        with httpx.Client(base_url=sim.url, headers={"Authorization": f"Bearer {key}"}) as http:
            job_id = http.post(f"/v2/{endpoint}/run", json={"input": {}}).json()["id"]
            sim.clock.advance(60)
            worker = http.get(f"/v2/{endpoint}/status/{job_id}").json()["workerId"]
        sim.plant_log(job_id, HOSTILE.format(key=key))
        path = tmp_path / "store.db"
        url = f"sqlite:///{path}"
        store = open_store(url)
        try:
            opened = write_open_run(
                store, "f1", T0 - 60, endpoint_id=endpoint, job_id=job_id, worker_id=worker
            )
        finally:
            store.close()
        yield World(sim, url, path, opened.run, opened.job, job_id, worker)


def log_lines(fragment: str) -> list[str]:
    """The lines of a followed log's fragment (as HTML text)."""
    _, _, rest = fragment.partition('<pre class="text log">')
    return rest.partition("</pre>")[0].splitlines()


def client(world: World, **config: float) -> TestClient:
    app = create_app(UiConfig(world.url, poll_s=0.05, **config))  # type: ignore[arg-type]
    return TestClient(app, base_url="http://127.0.0.1")


def test_a_running_job_s_page_follows_its_worker_log_masked_inert_and_unrecorded(world):
    before = world.path.read_bytes()
    with client(world) as c:
        for name in (world.job, world.run):  # a run's page follows its latest attempt's job
            page = c.get(f"/s/{name}")
            assert page.status_code == 200 and 'id="worker-log"' in page.text
            assert f'data-src="/log/{name}"' in page.text
            log = c.get(f"/log/{name}")
            assert log.status_code == 200
            assert f"worker {world.worker} on endpoint" in log.text and "data-done" not in log.text
            assert "rl_train_start" in log.text  # the worker's own lines, as RunPod holds them
            assert world.key not in log.text and "key=[REDACTED]" in log.text
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in log.text and "<script" not in log.text
            assert "\\x1b[2J" in log.text and "\x1b" not in log.text
    assert world.path.read_bytes() == before  # read-only: nothing recorded


def test_new_lines_reach_the_followed_log_once_the_kept_read_is_old(world):
    with client(world, log_cache_s=0.2) as c:
        first = c.get(f"/log/{world.job}").text
        world.advance(600)  # ten minutes of training: new steps in the worker's log
        assert c.get(f"/log/{world.job}").text == first  # kept: RunPod is not asked again
        time.sleep(0.25)
        later = c.get(f"/log/{world.job}").text
    new = set(log_lines(later)) - set(log_lines(first))
    assert new and log_lines(later)[-1] in new  # the worker's newest lines, at the end


def test_pages_following_one_worker_ask_runpod_once_per_kept_read(world):
    with client(world, log_cache_s=60.0) as c:
        answers = [c.get(f"/log/{name}") for name in (world.job, world.run) * 10]
    assert all(a.status_code == 200 and world.worker in a.text for a in answers)
    assert world.log_reads() == 1


def test_a_job_with_no_worker_yet_says_so_and_is_still_followed(world, tmp_path):
    store = open_store(world.url)
    try:
        queued = write_open_run(store, "f2", T0, endpoint_id="ep-none")  # no worker recorded
    finally:
        store.close()
    with client(world) as c:
        log = c.get(f"/log/{queued.job}")
    assert "no job of this stream recorded a worker id" in log.text
    assert "data-done" not in log.text and world.log_reads() == 0


def test_a_finished_job_offers_no_followed_log_and_its_route_says_it_ended(world):
    store = open_store(world.url)
    try:
        append(store, world.job, StatusObserved, T0 + 100, status="COMPLETED")
        conclude(store, world.job, T0 + 100)
    finally:
        store.close()
    with client(world) as c:
        assert 'id="worker-log"' not in c.get(f"/s/{world.job}").text
        log = c.get(f"/log/{world.job}")
        run_log = c.get(f"/log/{world.run}")  # the run is open: it waits for its next job
    assert "has ended" in log.text and "data-done" in log.text
    assert "waiting for the run&#39;s next job" in run_log.text and "data-done" not in run_log.text
    assert world.log_reads() == 0


def test_without_a_runpod_key_the_followed_log_says_so_once_and_stops(world, monkeypatch):
    monkeypatch.delenv("RUNPOD_API_KEY")
    with client(world) as c:
        log = c.get(f"/log/{world.job}")
    assert "no live log: cannot reach RunPod" in log.text and "data-done" in log.text
    assert world.log_reads() == 0


def test_a_failing_read_is_one_masked_line_and_the_page_keeps_following(world):
    world.sim.add_fault("worker_logs", 503, times=None, body=f"down (key {world.key})")
    with client(world) as c:
        log = c.get(f"/log/{world.job}")
    assert f"cannot read worker {world.worker}" in log.text and "data-done" not in log.text
    assert world.key not in log.text


def test_an_unknown_stream_has_no_log_route(world):
    with client(world) as c:
        assert c.get("/log/no-such-job").status_code == 404


def test_a_slow_log_read_holds_no_page(world):
    # a log that trickles a line every 0.2 s never goes quiet: its read lasts its whole time
    # budget (10 s), and the pages go on answering beside it
    world.sim.add_fault("worker_logs", "trickle", delay_s=0.2, times=None)
    with client(world) as c:
        answer: list[httpx.Response] = []
        reading = threading.Thread(target=lambda: answer.append(c.get(f"/log/{world.job}")))
        reading.start()
        try:
            deadline = time.monotonic() + 5
            while world.log_reads() == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert world.log_reads() == 1  # the read is under way
            for path in ("/", f"/s/{world.job}", f"/s/{world.run}", "/costs", "/fleet"):
                assert c.get(path).status_code == 200
            assert reading.is_alive(), "the pages were served after the slow read, not beside it"
        finally:
            reading.join(30)
    assert answer and "the read stopped at its bound" in answer[0].text


# --- the reader ------------------------------------------------------------------------------


class CountingClient:
    """A client whose reads are counted; its worker prints one line per read."""

    def __init__(self) -> None:
        self.reads = 0
        self.closed = False

    def worker_log(self, endpoint_id: str, worker_id: str, *, tail: int) -> dict[str, object]:
        self.reads += 1
        return {"lines": [f"read {self.reads}"], "truncated": False}

    def close(self) -> None:
        self.closed = True


def test_the_reader_keeps_a_read_for_its_time_then_asks_again():
    now = [0.0]
    made = CountingClient()
    reader = LiveLogReader(cache_s=5.0, client=lambda: made, clock=lambda: now[0])
    a, b = LiveLogTarget("job-a", "ep", "w-a"), LiveLogTarget("job-b", "ep", "w-b")
    assert reader.read(a).lines == ("read 1",)
    assert reader.read(a).lines == ("read 1",)
    assert reader.read(b).lines == ("read 2",)  # another worker: its own read
    now[0] = 5.0
    assert reader.read(a).lines == ("read 3",)
    reader.close()
    assert made.closed


def test_the_reader_keeps_a_missing_key_refusal_and_never_asks_again():
    calls = []

    def no_key() -> CountingClient:
        calls.append(1)
        raise LiveLogUnavailable("cannot reach RunPod: no key", final=True)

    reader = LiveLogReader(client=no_key)
    for _ in range(3):
        with pytest.raises(LiveLogUnavailable, match="no key"):
            reader.read(LiveLogTarget("job-a", "ep", "w-a"))
    assert calls == [1]
