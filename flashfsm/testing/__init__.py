"""Tests that ship with flashfsm, for code outside it to run: the store contract suite.

`StoreContract` is the one suite every store backend passes — flashfsm's own (memory, SQLite,
JSONL, PostgreSQL) and yours. Subclass it in a test module, say how to open your store and
what it declares, and pytest runs every test of the contract against it, optional
capabilities (snapshots, bulk reads, a fleet's leases) included:

    from flashfsm.testing import StoreContract

    class TestMyStore(StoreContract):
        capabilities = {"snapshots", "leases"}

        def new_store(self):
            return MyStore(self.tmp / "data")

See docs/stores.md ("Writing a backend") for the hooks. Importing this package needs no
test runner: the suite raises `unittest.SkipTest` for what a store does not offer (pytest
and unittest both report it as a skip), and the event factories are plain functions.
"""

from flashfsm.testing.contract import StoreContract
from flashfsm.testing.factories import (
    concluded,
    contract_event,
    contract_events,
    raises,
    run_concluded,
    run_started,
    submitted,
)

__all__ = [
    "StoreContract",
    "concluded",
    "contract_event",
    "contract_events",
    "raises",
    "run_concluded",
    "run_started",
    "submitted",
]
