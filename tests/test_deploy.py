"""Deploying with the real runpod-flash against the simulator, over loopback HTTP.

runpod-flash reads its hosts once, when it is imported, so every in-process test serves
its simulator on one loopback port fixed before that import (`flash_port`): a test's
`Simulator(port=flash_port())` is the RunPod runpod-flash talks to. The import happens in
a temporary working directory with a temporary HOME (`flash_deploy.load_sdk`).
`tests/test_submit.py` and `tests/test_secrets.py` use the same fixtures.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pytest

from flashfsm import MemoryStore
from flashfsm.adapters import flash_deploy
from flashfsm.adapters.flash_deploy import (
    DEFAULT_IDLE_TIMEOUT_S,
    GPU_CLASSES,
    QUOTA_WAIT_S,
    DeployError,
    DeployRequest,
    KeyPool,
    deploy_endpoint,
    gpu_key,
)
from flashfsm.adapters.simulator import Simulator
from flashfsm.naming import endpoint_name
from flashfsm.submit import quota_sweeper

KEYS = ("rpk-account-zero-0001", "rpk-account-one-00002", "rpk-account-two-00003")
ALL_DCS = 11  # DataCenter.all() in runpod-flash 1.21
VOLUME_DCS = ALL_DCS - 1  # all but US-MO-1

_port: list[int] = []


def flash_port() -> int:
    """The loopback port runpod-flash was imported against (importing it on first use)."""
    if _port:
        return _port[0]
    urls = sys.modules.get("runpod_flash.core.urls")
    if urls is not None:  # imported earlier in this process: reuse its port if loopback
        parts = urlsplit(urls.RUNPOD_API_URL)
        if parts.hostname != "127.0.0.1" or parts.port is None:
            pytest.fail(f"runpod_flash was imported against {urls.RUNPOD_API_URL}, not loopback")
        _port.append(parts.port)
        return parts.port
    with Simulator(speed=0) as probe:  # a free port, and the env a simulator there sets
        env = probe.env()
        port = urlsplit(probe.url).port
    assert port is not None
    with tempfile.TemporaryDirectory() as home, pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        mp.setenv("HOME", home)
        mp.setenv("RUNPOD_FLASH_SILENCE_DEPRECATION", "1")
        mp.delenv("RUNPOD_ENV", raising=False)
        flash_deploy.load_sdk()
    _port.append(port)
    return port


def sim_factory(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Simulator]]:
    """`make_sim(**kw)`: a started simulator on the runpod-flash port, env pointed at it."""
    port = flash_port()
    started: list[Simulator] = []

    def make(**kw: Any) -> Simulator:
        kw.setdefault("speed", 0)
        sim = Simulator(port=port, **kw).start()
        started.append(sim)
        for name, value in sim.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("RUNPOD_FLASH_SILENCE_DEPRECATION", "1")
        return sim

    yield make
    for sim in started:
        sim.stop()
    import huggingface_hub

    huggingface_hub.close_session()  # its pooled connections point at a stopped server
    for sim in started:
        assert sim.errors == [], sim.errors[0]


@pytest.fixture
def make_sim(monkeypatch) -> Iterator[Callable[..., Simulator]]:
    """A simulator factory (see `sim_factory`); other test modules wrap it the same way."""
    yield from sim_factory(monkeypatch)


class Recorder:
    """A `record` callable that keeps (kind, fields)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, cls: type, **fields: Any) -> None:
        cls(stream="s", seq=0, id="i", at=0.0, **fields)  # the fields must build the event
        self.events.append((cls.__name__, fields))

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


def request(name: str = "flash-t-a100-s0", **kw: Any) -> DeployRequest:
    kw.setdefault("gpu_class", "A100-80GB")
    kw.setdefault("image", "team/worker:1")
    return DeployRequest(name=name, **kw)


def saves(sim: Simulator) -> list[dict[str, Any]]:
    """The saveEndpoint inputs the simulator received, oldest first."""
    return [r.json["variables"]["input"] for r in sim.requests_for("graphql:saveEndpoint")]


# --------------------------------------------------------------------------- the quota ladder


def test_quota_sweeps_retries_then_fails_over_to_each_account_once_then_errors(make_sim):
    sim = make_sim(api_keys=KEYS, worker_quota=1)
    for account in range(3):  # each account is full with a non-flash endpoint
        sim.add_endpoint(f"serving-{account}", account=account)
    pool, record, sleeps, swept = KeyPool(KEYS), Recorder(), [], []

    def sweep(protected: set[str]) -> int:
        swept.append((pool.active, protected))
        return 0

    with pytest.raises(DeployError) as caught:
        deploy_endpoint(
            request(attempt=2), accounts=pool, record=record, sweep=sweep, sleep=sleeps.append
        )

    assert caught.value.quota and caught.value.error_class == "QuotaExhausted"
    expected: list[tuple[str, dict[str, Any]]] = []
    for account in range(3):
        if account:
            expected.append(
                (
                    "AccountFailedOver",
                    {"attempt": 2, "from_account": account - 1, "to_account": account},
                )
            )
        for try_no, wait in enumerate((QUOTA_WAIT_S, 2 * QUOTA_WAIT_S, 0.0)):
            expected.append(
                (
                    "DeployAttempted",
                    {
                        "attempt": 2,
                        "account": account,
                        "endpoint_name": "flash-t-a100-s0",
                        "try_no": try_no,
                    },
                )
            )
            expected.append(("QuotaExhausted", {"account": account, "wait_s": wait}))
    expected.append(("DeployFailed", {"attempt": 2, "error_class": "QuotaExhausted"}))
    assert record.kinds == [kind for kind, _ in expected]
    for (_, got), (_, want) in zip(record.events, expected, strict=True):
        assert got.items() >= want.items()
    quota = [f for kind, f in record.events if kind == "QuotaExhausted"]
    assert all("max workers across all endpoints" in f["message"].lower() for f in quota)
    assert sleeps == [30.0, 60.0] * 3
    protected = {"flash-t-a100-s0", "live-flash-t-a100-s0"}
    assert swept == [(a, protected) for a in range(3) for _ in range(2)]
    # each account was really asked with its own key, three times, in order
    assert [r.account for r in sim.requests_for("graphql:saveEndpoint")] == [
        f"account{a}" for a in range(3) for _ in range(3)
    ]
    assert all(r.authenticated for r in sim.requests)
    assert pool.active == 2
    assert sorted(e["name"] for e in sim.endpoints()) == ["serving-0", "serving-1", "serving-2"]


def test_a_sweep_that_frees_a_worker_lets_the_retry_deploy(make_sim):
    sim = make_sim(api_keys=KEYS[:1], worker_quota=2)
    idle = sim.add_endpoint("flash-old-run-h100-s0")  # an orphan scaled to zero
    mine = sim.add_endpoint("live-flash-t-a100-s0")  # this run's own name: protected
    pool, record, sleeps = KeyPool(KEYS[:1]), Recorder(), []
    store = MemoryStore()

    deployed = deploy_endpoint(
        request(),
        accounts=pool,
        record=record,
        sweep=quota_sweeper(pool, store),
        sleep=sleeps.append,
    )

    assert record.kinds == [
        "DeployAttempted",
        "QuotaExhausted",
        "DeployAttempted",
        "EndpointDeployed",
    ]
    assert record.events[1][1]["swept"] == 1 and sleeps == [30.0]
    ids = {e["id"] for e in sim.endpoints()}
    assert idle not in ids and {mine, deployed.endpoint_id} <= ids
    assert [e.kind for e in store.read("sweeper-0")][-1] == "EndpointReaped"


def test_failover_deploys_on_the_next_account_with_its_key_and_its_own_volumes(make_sim):
    sim = make_sim(api_keys=KEYS[:2], worker_quota=1)
    sim.add_endpoint("serving-0", account=0)
    pool, record = KeyPool(KEYS[:2]), Recorder()

    deployed = deploy_endpoint(
        request(weight_cache="wc"), accounts=pool, record=record, sleep=lambda s: None
    )

    assert record.kinds == [
        *["DeployAttempted", "QuotaExhausted"] * 3,
        "AccountFailedOver",
        "DeployAttempted",
        "EndpointDeployed",
    ]
    assert deployed.account == 1 and pool.active == 1
    (endpoint,) = sim.endpoints(account=1)
    assert endpoint["id"] == deployed.endpoint_id
    assert sim.requests_for("graphql:saveEndpoint")[-1].account == "account1"
    # the volumes it carries are account 1's, built afresh (never account 0's stale ids)
    mine = {v.id for v in sim.world.volumes.values() if v.account.name == "account1"}
    assert len(mine) == VOLUME_DCS and set(endpoint["networkVolumeIds"]) == mine
    assert record.events[-1][1] == {
        "attempt": 0,
        "endpoint_id": deployed.endpoint_id,
        "endpoint_name": "flash-t-a100-s0",
        "account": 1,
        "volumes": deployed.volumes,
        "disk_gb": 64,
        "idle_timeout_s": DEFAULT_IDLE_TIMEOUT_S,  # set explicitly, recorded (v2)
    }
    assert len(deployed.volumes) == VOLUME_DCS


def test_an_error_other_than_quota_raises_at_once(make_sim):
    sim = make_sim(api_keys=KEYS[:2])
    sim.add_fault("graphql:saveEndpoint", 400)
    record, sleeps = Recorder(), []

    with pytest.raises(DeployError) as caught:
        deploy_endpoint(request(), accounts=KeyPool(KEYS[:2]), record=record, sleep=sleeps.append)

    assert not caught.value.quota
    assert record.kinds == ["DeployAttempted", "DeployFailed"]
    assert sleeps == [] and sim.endpoints() == []
    assert len(sim.requests_for("graphql:saveEndpoint")) == 1


def test_the_outcome_can_be_left_to_the_caller(make_sim):
    make_sim(api_keys=KEYS[:1])
    record = Recorder()
    deploy_endpoint(request(), accounts=KeyPool(KEYS[:1]), record=record, record_outcome=False)
    assert record.kinds == ["DeployAttempted"]


# --------------------------------------------------------------------------- the weight cache


def test_cache_volumes_exist_once_per_volume_capable_datacenter_and_never_in_us_mo_1(make_sim):
    sim = make_sim(api_keys=KEYS[:1])
    pool = KeyPool(KEYS[:1])
    first = deploy_endpoint(
        request("flash-a-s0", weight_cache="wc", weight_cache_gb=50), accounts=pool
    )
    second = deploy_endpoint(
        request("flash-b-s0", weight_cache="wc", weight_cache_gb=50), accounts=pool
    )

    volumes = sim.volumes()
    assert len(volumes) == VOLUME_DCS == len(sim.requests_for("create_volume"))
    assert "US-MO-1" not in {v["dataCenterId"] for v in volumes}
    assert len({v["dataCenterId"] for v in volumes}) == VOLUME_DCS
    assert {v["name"] for v in volumes} == {f"wc-{v['dataCenterId'].lower()}" for v in volumes}
    assert {v["size"] for v in volumes} == {50}
    assert first.volumes == second.volumes and len(first.volumes) == VOLUME_DCS
    ids = {v["id"] for v in volumes}
    for endpoint in sim.endpoints():
        assert set(endpoint["networkVolumeIds"]) == ids
        locations = endpoint["locations"].split(",")
        assert len(locations) == VOLUME_DCS and "US-MO-1" not in locations


def test_a_cache_that_cannot_be_built_deploys_without_a_volume(make_sim, caplog):
    sim = make_sim(api_keys=KEYS[:1])
    caplog.set_level(logging.WARNING, logger="flashfsm.deploy")
    deployed = deploy_endpoint(
        request(weight_cache="wc", weight_cache_gb=5), accounts=KeyPool(KEYS[:1])
    )  # 5 GB is below RunPod's minimum volume size
    assert deployed.volumes == () and sim.volumes() == []
    assert sim.endpoints()[0]["networkVolumeIds"] == []
    assert any("weight cache" in r.getMessage() for r in caplog.records)


def test_no_cache_means_no_volume_and_every_datacenter(make_sim):
    sim = make_sim(api_keys=KEYS[:1])
    deploy_endpoint(request(), accounts=KeyPool(KEYS[:1]))
    assert sim.volumes() == []
    assert len(saves(sim)[0]["locations"].split(",")) == ALL_DCS


# --------------------------------------------------------------------------- the endpoint


@pytest.mark.parametrize(("asked", "built"), [(200, 200), (20, 64), (None, 64), (64, 64)])
def test_container_disk_is_raised_but_never_lowered(make_sim, asked, built):
    sim = make_sim(api_keys=KEYS[:1])
    record = Recorder()
    deployed = deploy_endpoint(request(disk_gb=asked), accounts=KeyPool(KEYS[:1]), record=record)
    assert saves(sim)[0]["template"]["containerDiskInGb"] == built
    assert deployed.disk_gb == built == record.events[-1][1]["disk_gb"]


def test_each_attempt_deploys_a_fresh_endpoint(make_sim):
    sim = make_sim(api_keys=KEYS[:1])
    pool = KeyPool(KEYS[:1])
    names = [endpoint_name("run-7", "A100-80GB", 0, attempt) for attempt in range(3)]
    assert names == [
        "flash-run-7-a100-80gb-s0",
        "flash-run-7-a100-80gb-s0-r1",
        "flash-run-7-a100-80gb-s0-r2",
    ]
    ids = [
        deploy_endpoint(request(n, attempt=i), accounts=pool).endpoint_id
        for i, n in enumerate(names)
    ]
    assert len(set(ids)) == 3
    assert sorted(e["name"] for e in sim.endpoints()) == sorted(f"live-{n}" for n in names)


def test_a_deleted_endpoint_is_never_handed_back(make_sim):
    """runpod-flash reuses what its state file holds without checking; each try starts empty."""
    sim = make_sim(api_keys=KEYS[:1])
    pool = KeyPool(KEYS[:1])
    first = deploy_endpoint(request(), accounts=pool)
    sim.world.delete_endpoint(None, first.endpoint_id)
    second = deploy_endpoint(request(), accounts=pool)
    assert second.endpoint_id != first.endpoint_id
    assert [e["id"] for e in sim.endpoints()] == [second.endpoint_id]


def test_a_live_endpoint_is_never_handed_back_either(make_sim):
    """Deployed twice under one name, both alive: two endpoints, the first untouched."""
    sim = make_sim(api_keys=KEYS[:1])
    pool = KeyPool(KEYS[:1])
    first = deploy_endpoint(request(), accounts=pool)
    second = deploy_endpoint(request(), accounts=pool)
    assert second.endpoint_id != first.endpoint_id
    assert sorted(e["id"] for e in sim.endpoints()) == sorted(
        [first.endpoint_id, second.endpoint_id]
    )
    assert len(saves(sim)) == 2


def test_the_sdk_tracks_nothing_after_a_deploy_and_nothing_was_deleted(make_sim, caplog):
    """The manager is emptied through its public API: ids cleared, endpoints untracked,
    no delete sent, the cache kept, and the SDK's "cannot undeploy" warning not passed on."""
    sim = make_sim(api_keys=KEYS[:1])
    caplog.set_level(logging.DEBUG)
    deployed = deploy_endpoint(request(weight_cache="wc"), accounts=KeyPool(KEYS[:1]))

    sdk = flash_deploy.load_sdk()
    tracked = sdk.ResourceManager().list_all_resources()
    assert not any(isinstance(r, sdk.ServerlessResource) for r in tracked.values())
    assert all(r.id is None for r in tracked.values())
    assert len(tracked) <= VOLUME_DCS  # at most one id-less entry per cache volume name
    deletes = [
        r
        for r in sim.requests
        if r.method == "DELETE" or any(op.startswith("delete") for op in r.operations)
    ]
    assert deletes == []
    assert [e["id"] for e in sim.endpoints()] == [deployed.endpoint_id]
    assert len(sim.volumes()) == VOLUME_DCS
    assert not [
        r
        for r in caplog.records
        if r.name.startswith("runpod_flash") and r.levelno >= logging.WARNING
    ]


def test_the_endpoint_is_built_with_what_flashfsm_chose(make_sim):
    """Every field flashfsm chooses reaches saveEndpoint as chosen (none left to the SDK)."""
    sim = make_sim(api_keys=KEYS[:1])
    deploy_endpoint(
        request(
            gpu_class="H200",
            idle_timeout_s=77,
            workers=(1, 3),
            execution_timeout_ms=123_000,
            min_cuda_version="12.4",
            disk_gb=150,
        ),
        accounts=KeyPool(KEYS[:1]),
    )
    deploy_endpoint(request("flash-u-s0", image=None), accounts=KeyPool(KEYS[:1]))
    baked, runtime = saves(sim)
    assert baked["name"] == "live-flash-t-a100-s0"
    assert (baked["gpuIds"], baked["gpuCount"]) == ("HOPPER_141", 1)
    assert (baked["workersMin"], baked["workersMax"]) == (1, 3)
    assert (baked["idleTimeout"], baked["executionTimeoutMs"]) == (77, 123_000)
    assert (baked["scalerType"], baked["scalerValue"]) == ("QUEUE_DELAY", 4)
    assert baked["flashBootType"] == "FLASHBOOT" and baked["minCudaVersion"] == "12.4"
    assert baked["template"]["imageName"] == "team/worker:1"
    assert baked["template"]["containerDiskInGb"] == 150
    assert len(baked["locations"].split(",")) == ALL_DCS
    env = {kv["key"]: kv["value"] for kv in baked["template"]["env"]}
    assert env == {"RUNPOD_API_KEY": KEYS[0]}  # the SDK's own injection, the account's key
    # no image: the Flash runtime image, and the SDK's CUDA floor and a 64 GB disk
    assert runtime["name"] == "live-flash-u-s0"
    assert runtime["template"]["imageName"].startswith("runpod/flash")
    assert runtime["minCudaVersion"] == "12.8" and runtime["idleTimeout"] == 5
    assert runtime["template"]["containerDiskInGb"] == 64


def test_the_sdk_state_stays_out_of_the_callers_directory_and_env(make_sim, monkeypatch, tmp_path):
    make_sim(api_keys=KEYS[:2])
    monkeypatch.chdir(tmp_path)
    pool_env = os.environ["RUNPOD_API_KEY"]
    monkeypatch.delenv("FLASH_IS_LIVE_PROVISIONING", raising=False)
    sdk = flash_deploy.load_sdk()
    api_key_before = sdk.runpod.api_key
    handlers_before = list(logging.getLogger().handlers)

    deploy_endpoint(request(weight_cache="wc"), accounts=KeyPool(KEYS[:2]))

    assert os.getcwd() == str(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no .flash/, no resources.pkl, no logs
    assert os.environ["RUNPOD_API_KEY"] == pool_env
    assert "FLASH_IS_LIVE_PROVISIONING" not in os.environ
    assert sdk.runpod.api_key == api_key_before
    assert logging.getLogger().handlers == handlers_before


def test_concurrent_deploys_take_turns_in_the_sdk(make_sim):
    sim = make_sim(api_keys=KEYS[:1], worker_quota=10)
    pool = KeyPool(KEYS[:1])
    with ThreadPoolExecutor(4) as workers:
        done = list(
            workers.map(
                lambda i: deploy_endpoint(
                    request(f"flash-c{i}-s0", weight_cache="wc"), accounts=pool
                ),
                range(4),
            )
        )
    assert len({d.endpoint_id for d in done}) == 4 == len(sim.endpoints())
    assert len(sim.volumes()) == VOLUME_DCS


def test_a_deploy_works_under_a_running_event_loop(make_sim):
    sim = make_sim(api_keys=KEYS[:1])

    async def main() -> str:
        return deploy_endpoint(request(), accounts=KeyPool(KEYS[:1])).endpoint_id

    assert [e["id"] for e in sim.endpoints()] == [] and asyncio.run(main())
    assert len(sim.endpoints()) == 1


# --------------------------------------------------------------------------- pure parts


def test_the_key_pool_names_accounts_by_index_and_never_shows_a_key(monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", " rpk-first-key-123 , rpk-second-key-456 ,")
    pool = KeyPool.from_env()
    assert len(pool) == 2 and pool.active == 0 and pool.key(1) == "rpk-second-key-456"
    assert "rpk" not in repr(pool) and "rpk" not in str(pool)
    pool.activate(1)
    assert pool.key() == "rpk-second-key-456"
    with pytest.raises(ValueError):
        pool.activate(2)
    with pytest.raises(ValueError):
        KeyPool(["rpk-same-key-0001", "rpk-same-key-0001"])
    monkeypatch.setenv("RUNPOD_API_KEY", " , ")
    with pytest.raises(ValueError, match="no RunPod API key"):
        KeyPool.from_env()


def test_every_friendly_gpu_class_names_a_runpod_flash_gpu(make_sim):
    sdk = flash_deploy.load_sdk()
    for name in GPU_CLASSES:
        assert isinstance(flash_deploy._gpu(sdk, name), (sdk.GpuGroup, sdk.GpuType))
    assert gpu_key("a100-80gb") == gpu_key("A100 80GB") == "A10080GB"
    assert flash_deploy._gpu(sdk, "H100") is sdk.GpuGroup.ADA_80_PRO
    assert flash_deploy._gpu(sdk, "AMPERE_48") is sdk.GpuGroup.AMPERE_48
    assert flash_deploy._gpu(sdk, "NVIDIA H200") is sdk.GpuType.NVIDIA_H200
    with pytest.raises(DeployError, match="unknown GPU class"):
        flash_deploy._gpu(sdk, "TPUv5")


def test_a_deploy_request_is_validated_data():
    assert request().baked_image and not request(image=None).baked_image
    assert request().protected_names == {"flash-t-a100-s0", "live-flash-t-a100-s0"}
    with pytest.raises(ValueError):
        request("bad name")
    with pytest.raises(ValueError):
        request(workers=(2, 1))
    assert request(weight_cache="  ").weight_cache is None
