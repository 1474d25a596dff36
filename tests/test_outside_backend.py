"""A backend written outside flashfsm, only against its documented store contract
(`DictStore`, tests/outside_store.py), plugged in by a real entry point and passing the
whole suite flashfsm ships (`flashfsm.testing.StoreContract`): fleet capabilities, and the
process tests, whose spawned processes open it by its URL.

No installer is run: the plug-in's distribution is a `*.dist-info` directory (METADATA and
entry_points.txt) in a scratch directory put on `sys.path` here and on `PYTHONPATH` for
the processes the suite spawns; `importlib.metadata` finds it in both, as it would a
package installed by pip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flashfsm.adapters.stores import SCHEMES, open_store
from flashfsm.adapters.urls import path_url
from flashfsm.events.store import CAPABILITIES, capabilities
from flashfsm.testing import StoreContract
from tests.outside_store import DictStore, Location, distribution

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def plugged_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`dict://` registered by the entry point `dict = tests.outside_store:open_dict_store`
    of a distribution in a scratch directory, seen by this process and the ones it spawns."""
    site = tmp_path_factory.mktemp("site")
    distribution(site, "flashfsm-outside-store", {"dict": "tests.outside_store:open_dict_store"})
    paths = [str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        patch.setenv("PYTHONPATH", os.pathsep.join(paths))
        SCHEMES.refresh()  # (another test may have read the group before the path had it)
        yield site
    SCHEMES.refresh()


class TestDictStore(StoreContract):
    """The whole contract, every store opened by URL through the plug-in's entry point."""

    capabilities = frozenset(capability.name for capability in CAPABILITIES)

    def store_url(self) -> str:
        return path_url("dict", self.tmp / "tables.pkl")

    def new_store(self) -> DictStore:
        store = open_store(self.store_url())
        assert isinstance(store, DictStore)
        return store

    def damage(self, store: object, stream: str, seq: int) -> bool:
        assert isinstance(store, DictStore)
        with store.where.transaction():
            rows = store.where.rows[stream]
            stream, seq_, id_, at, kind, body, crc = rows[seq]
            damaged = body.replace(b"IN_QUEUE", b"IN_QUEUX")
            rows[seq] = (stream, seq_, id_, at, kind, damaged, crc)
        return True


def test_a_spawned_process_opens_the_plug_in_by_url(tmp_path: Path) -> None:
    url = path_url("dict", tmp_path / "tables.pkl")
    code = (
        "import sys; from flashfsm.adapters.stores import open_store; "
        "from flashfsm.testing.contract import contract_events; "
        "s = open_store(sys.argv[1]); s.append('job-1', contract_events('job-1', 0, 2), 0)"
    )
    subprocess.run([sys.executable, "-c", code, url], check=True, timeout=60)
    store = open_store(url, read_only=True)
    assert [e.seq for e in store.read("job-1")] == [0, 1]
    assert capabilities(store).leases is store and capabilities(store).snapshot_every == 100


def test_in_process_registration_feeds_the_same_registry(monkeypatch) -> None:
    shared = Location()
    monkeypatch.setitem(SCHEMES, "dictmem", lambda url, read_only: DictStore(shared))
    store = open_store("dictmem://")
    assert capabilities(store).leases is store and store.where is shared  # type: ignore[attr-defined]
    assert {"dict", "dictmem", "sqlite"} <= set(SCHEMES)
    with pytest.raises(ValueError, match="'dict' is registered twice: in this process and by"):
        SCHEMES["dict"] = lambda url, read_only: DictStore(shared)
