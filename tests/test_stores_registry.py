"""The store URL scheme registry (`flashfsm.adapters.stores.SCHEMES`): built-in schemes,
those registered in process and plug-ins by entry point (group `flashfsm.stores`) in one
lookup; and `snapshot_every`, the `SnapshotStore` capability's declared setting.

Plug-ins are distributions made without an installer (`tests.outside_store.distribution`:
a `*.dist-info` directory on `sys.path`). The outside backend's whole contract suite, its
process tests included, runs through its entry point in tests/test_outside_backend.py.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flashfsm.adapters.jsonl import JsonlStore
from flashfsm.adapters.memory import MemoryStore
from flashfsm.adapters.sqlite import SqliteStore
from flashfsm.adapters.stores import SCHEMES, open_store
from flashfsm.events.store import FencedStore, StoreContractError, capabilities, check_store
from flashfsm.writer import snapshot_interval
from tests.outside_store import DictStore, distribution

OPENER = "tests.outside_store:open_dict_store"
CLI = "import sys; from flashfsm.cli import main; sys.exit(main())"


@pytest.fixture
def plug_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Install a distribution's store entry points: `plug_in("name", scheme="mod:opener")`."""
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))

    def install(name: str, **stores: str) -> None:
        distribution(site, name, stores)
        SCHEMES.refresh()

    yield install
    monkeypatch.undo()
    SCHEMES.refresh()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of the entry points' group (`importlib.metadata.entry_points`)."""
    seen: list[str] = []
    real = importlib.metadata.entry_points

    def counted(**params: str) -> object:
        seen.append(params.get("group", ""))
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", counted)
    SCHEMES.refresh()
    yield seen
    SCHEMES.refresh()


# --- lookups: lazy, cached, never for a built-in scheme ------------------------------------


def test_importing_the_module_reads_no_entry_point() -> None:
    code = (
        "from flashfsm.adapters import stores; import tempfile; "
        "d = tempfile.mkdtemp(); stores.open_store(f'sqlite:///{d}/a.db').close(); "
        "stores.open_store(f'jsonl:///{d}/j').close(); stores.open_store('memory://'); "
        "assert stores.SCHEMES._group is None, 'the entry points were read'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_group_is_read_once_and_only_for_a_scheme_not_built_in(
    tmp_path: Path, reads: list[str], plug_in: Callable[..., None]
) -> None:
    open_store(f"sqlite:///{tmp_path}/events.db").close()
    open_store("memory://")
    assert reads == []
    with pytest.raises(ValueError, match=r"unknown store URL scheme 'nope' \(known: .*memory://"):
        open_store("nope://x")
    assert reads == ["flashfsm.stores"]
    with pytest.raises(ValueError, match="unknown store URL scheme"):
        open_store("nope://x")
    assert reads == ["flashfsm.stores"]  # cached
    plug_in("flashfsm-dict", dict=OPENER)  # (installed while running: refresh() reads anew)
    assert isinstance(open_store("dict://"), DictStore)
    assert isinstance(open_store(f"dict:///{tmp_path}/t.pkl"), DictStore)
    assert reads == ["flashfsm.stores"] * 2


# --- what a plug-in may get wrong: one line each ------------------------------------------


def test_a_scheme_two_entry_points_register_is_an_error_naming_both(plug_in) -> None:
    plug_in("flashfsm-one", twin=OPENER)
    plug_in("flashfsm-two", twin="tests.outside_store:DictStore")
    with pytest.raises(ValueError) as caught:
        open_store("twin://")
    text = str(caught.value)
    assert "store URL scheme 'twin' is registered twice, by the entry points" in text
    assert "(flashfsm-one)" in text and "(flashfsm-two)" in text and "\n" not in text


def test_an_entry_point_shadowing_a_built_in_scheme_is_an_error(tmp_path, plug_in) -> None:
    plug_in("flashfsm-shadow", sqlite=OPENER, dict=OPENER)
    assert isinstance(open_store(f"sqlite:///{tmp_path}/e.db"), SqliteStore)  # never looked up
    with pytest.raises(ValueError, match=r"sqlite = .* shadows the built-in store URL scheme"):
        open_store("dict://")


def test_a_name_that_is_no_url_scheme_is_an_error(plug_in) -> None:
    plug_in("flashfsm-caps", Dict=OPENER)
    with pytest.raises(ValueError, match=r"names no URL scheme \(lowercase: 'dict'\)"):
        open_store("dict://")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("tests.no_such_plug_in:open", "failed to load: ModuleNotFoundError: No module named"),
        ("tests.outside_store:no_such_opener", "failed to load: AttributeError"),
        ("flashfsm.adapters.stores:ENTRY_POINT_GROUP", "is not callable: str"),
    ],
)
def test_a_plug_in_that_does_not_load_is_one_line_naming_the_scheme_and_entry_point(
    plug_in, value: str, error: str
) -> None:
    plug_in("flashfsm-broken", broken=value)
    with pytest.raises(ValueError) as caught:
        open_store("broken://x")
    text = str(caught.value)
    assert text.startswith(f"store URL scheme 'broken': the entry point broken = {value} ")
    assert error in text and "\n" not in text


def test_the_cli_says_a_broken_plug_in_in_one_line(tmp_path: Path) -> None:
    site = tmp_path / "site"
    distribution(site, "flashfsm-broken", {"broken": "tests.no_such_plug_in:open"})
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", CLI, "ls", "--store", "broken://x"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{site}:{root}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the entry point broken = tests.no_such_plug_in:open" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# --- registration in process: the same registry -------------------------------------------


def test_a_scheme_registered_in_process_opens_and_is_checked(monkeypatch, plug_in) -> None:
    monkeypatch.setitem(SCHEMES, "mine", lambda url, read_only: MemoryStore())
    assert isinstance(open_store("mine://"), MemoryStore) and "mine" in SCHEMES
    with pytest.raises(ValueError, match="'mine' is registered twice in this process"):
        SCHEMES["mine"] = lambda url, read_only: MemoryStore()
    with pytest.raises(ValueError, match="'sqlite' is built in"):
        SCHEMES["sqlite"] = lambda url, read_only: MemoryStore()
    with pytest.raises(ValueError, match="'memory' is built in"):
        del SCHEMES["memory"]
    plug_in("flashfsm-mine", mine=OPENER)  # the same scheme by entry point: one source only
    with pytest.raises(ValueError, match="'mine' is registered twice: in this process and by"):
        open_store("dict://")
    del SCHEMES["mine"]
    assert isinstance(open_store("mine://"), DictStore)  # now the plug-in's


def test_an_opener_is_given_read_only_by_keyword(monkeypatch) -> None:
    seen: list[bool] = []

    def opener(url: str, *, read_only: bool) -> MemoryStore:
        seen.append(read_only)
        return MemoryStore()

    monkeypatch.setitem(SCHEMES, "kw", opener)
    open_store("kw://")
    open_store("kw://", read_only=True)
    assert seen == [False, True]


# --- snapshot_every: the SnapshotStore capability's setting --------------------------------


def test_snapshot_every_is_read_through_the_capability_as_before(tmp_path: Path) -> None:
    with (
        SqliteStore(tmp_path / "a.db") as sqlite,
        SqliteStore(tmp_path / "b.db", snapshot_every=None) as off,
    ):
        stores = [sqlite, off, MemoryStore(), MemoryStore(snapshot_every=7)]
        stores += [JsonlStore(tmp_path / "j"), FencedStore(sqlite, lambda _s: None)]
        every = [capabilities(store).snapshot_every for store in stores]
        assert every == [100, None, None, 7, None, 100]
        assert [snapshot_interval(store) for store in stores] == every


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: MemoryStore(snapshot_every=0), r"snapshot_every=0 \(not None or a whole"),
        (lambda: MemoryStore(snapshot_every=True), r"snapshot_every=True \(not None"),
        (lambda: MemoryStore(snapshot_every=2.5), r"snapshot_every=2.5 \(not None"),
    ],
)
def test_check_store_refuses_a_malformed_snapshot_every(make, problem: str) -> None:
    store = make()
    with pytest.raises(StoreContractError, match=problem):
        check_store(store)
    assert capabilities(store).snapshot_every is None  # (and a watch writes none)


def test_check_store_refuses_snapshot_every_on_a_store_without_snapshots(tmp_path) -> None:
    store = JsonlStore(tmp_path / "j")
    store.snapshot_every = 10  # type: ignore[attr-defined]
    with pytest.raises(StoreContractError, match="snapshot_every without SnapshotStore"):
        check_store(store)
    assert capabilities(store).snapshot_every is None


def test_the_docs_pyproject_snippet_declares_an_entry_point_of_the_group() -> None:
    import tomllib

    from tests.test_docs import ROOT, blocks

    [snippet] = [b for b in blocks(ROOT / "docs" / "stores.md", "text") if "entry-points" in b]
    [(scheme, value)] = tomllib.loads(snippet)["project"]["entry-points"]["flashfsm.stores"].items()
    assert re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme) and re.fullmatch(r"[\w.]+:\w+", value)
