"""The store contract's fleet tests: the open-streams index and leases (`LeaseContract`).

What it holds: the tests of the `leases` capability (`flashfsm.events.store.LeaseStore`):
the index the appends keep in their own transactions, claims, renewals and fencing, the
replicas' heartbeats and census, incarnations and take-overs, failed marks. How it relates
to `flashfsm.testing.contract`: they were part of it, and `StoreContract` inherits
`LeaseContract`, so they still run in the one suite, on its hooks and per-test location,
whenever a store declares `leases` (and are skipped when it does not). This module imports
nothing of that one, which imports this one; both build their events with
`flashfsm.testing.factories`.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from flashfsm.events.errors import ConcurrencyError, StaleLease
from flashfsm.events.store import (
    FAILED_REASON_CAP,
    HANDOFF,
    Census,
    EventStore,
    FencedStore,
    Holder,
    Incarnation,
    Lease,
    LeaseStore,
)
from flashfsm.testing.factories import (
    concluded,
    contract_event,
    contract_events,
    raises,
    run_concluded,
    run_started,
    submitted,
)


class LeaseContract:
    """The lease tests of `StoreContract` (see the module notes), which inherits them."""

    if TYPE_CHECKING:  # (what `StoreContract` gives these tests)
        lease_ttl_s: ClassVar[float]

        def store(self) -> EventStore: ...

        def _require(self, name: str) -> Any: ...

    # -- the open-streams index and leases -------------------------------------------------------

    def leases(self) -> LeaseStore:
        """The store as a `LeaseStore` (the lease tests are skipped without one)."""
        return self._require("leases")  # type: ignore[no-any-return]

    def _hand_off(self, stream: str, at: float = 100.0) -> None:
        FencedStore(self.store(), lambda _s: HANDOFF).append(stream, [submitted(stream, at=at)], 0)

    def _open(self) -> dict[str, Any]:
        return {row.stream: row for row in self.leases().open_streams()}

    def test_the_index_opens_and_closes_a_stream_in_the_appends_own_transaction(self) -> None:
        leases = self.leases()
        self._hand_off("job-a")
        leases.append("job-b", [submitted("job-b")], 0)  # opened by its own watcher
        leases.append("job-c", contract_events("job-c", 0, 2), 0)  # opens nothing
        rows = self._open()
        assert set(rows) == {"job-a", "job-b"}
        a, b = rows["job-a"], rows["job-b"]
        assert (a.kind, a.handoff, a.owner, a.parent, a.token, a.failed) == (
            "job",
            True,
            None,
            None,
            0,
            None,
        )
        assert a.opened_at == 100.0 and a.claimable and not a.held
        assert not b.handoff and not b.claimable
        leases.append("job-a", [concluded("job-a", 1)], 1)
        assert list(self._open()) == ["job-b"]

    def test_a_refused_append_leaves_the_index_as_it_was(self) -> None:
        leases = self.leases()
        self._hand_off("job-a")
        with raises(ConcurrencyError):
            leases.append("job-a", [concluded("job-a", 5)], 5)
        with raises(ValueError):
            leases.append("job-b", [submitted("job-b", seq=1)], 0)
        assert list(self._open()) == ["job-a"]

    def test_claims_take_free_handed_off_streams_oldest_first_and_bump_the_token(self) -> None:
        leases = self.leases()
        self._hand_off("job-late", at=300.0)
        self._hand_off("job-b", at=100.0)
        self._hand_off("job-a", at=100.0)
        leases.append("job-own", [submitted("job-own")], 0)
        FencedStore(leases, lambda _s: HANDOFF).append("run-x", [run_started("run-x")], 0)
        assert leases.claim("r1", 30, 0) == []
        first = leases.claim("r1", 30, 2, ("job",))
        assert [(x.stream, x.token, x.kind) for x in first] == [
            ("job-a", 1, "job"),
            ("job-b", 1, "job"),
        ]
        assert [x.stream for x in leases.claim("r2", 30, 10, ("job",))] == ["job-late"]
        assert leases.claim("r2", 30, 10, ("job",)) == []  # held, or its opener's
        [run] = leases.claim("r2", 30, 10)
        assert (run.stream, run.kind) == ("run-x", "run")
        rows = self._open()
        assert rows["job-a"].owner == "r1" and rows["job-a"].held
        assert 25 < (rows["job-a"].expires_in or 0) <= 30
        leases.release("r2", [first[0]])  # not r2's: nothing happens
        leases.release("r1", [Lease("job-a", first[0].token + 1)])  # a token it lacks
        assert self._open()["job-a"].owner == "r1"
        leases.release("r1", [first[0]])
        assert self._open()["job-a"].owner is None
        [again] = leases.claim("r3", 30, 10)
        assert (again.stream, again.token) == ("job-a", 2)

    def test_an_expired_lease_is_taken_by_another_replica_and_the_old_token_is_fenced(
        self,
    ) -> None:
        leases = self.leases()
        self._hand_off("job-a", at=1.0)
        self._hand_off("job-free", at=2.0)
        [old] = leases.claim("r1", self.lease_ttl_s, 1)
        assert old.stream == "job-a"
        assert leases.claim("r2", 30, 10, expired_only=True) == []  # free, never held
        time.sleep(self.lease_ttl_s + 0.15)  # the lease expires by the store's clock
        assert not self._open()["job-a"].held
        assert leases.renew("r1", [old], 30) == []
        [new] = leases.claim("r2", 30, 10, expired_only=True)
        assert (new.stream, new.token) == ("job-a", old.token + 1)
        with raises(StaleLease):
            leases.append("job-a", [contract_event("job-a", 1)], 1, lease=old)
        assert len(leases.read("job-a")) == 1  # nothing of the refused batch
        leases.append("job-a", [contract_event("job-a", 1)], 1, lease=new)
        assert leases.renew("r2", [new], 30) == [new]
        assert leases.renew("r1", [new], 30) == []  # not r1's

    def test_an_append_under_a_lease_of_a_stream_not_in_the_index_is_refused(self) -> None:
        leases = self.leases()
        with raises(StaleLease):
            leases.append("job-a", [contract_event("job-a", 0)], 0, lease=Lease("gone", 1))
        assert leases.read("job-a") == []

    def test_renewals_keep_only_what_the_owner_still_holds(self) -> None:
        leases = self.leases()
        for name in ("job-a", "job-b", "job-c"):
            self._hand_off(name)
        held = leases.claim("r1", 30, 3)
        stale = Lease(held[2].stream, held[2].token - 1)
        kept = leases.renew("r1", [held[0], held[1], stale], 60)
        assert sorted(x.stream for x in kept) == ["job-a", "job-b"]
        assert 55 < (self._open()["job-a"].expires_in or 0) <= 60
        assert 25 < (self._open()["job-c"].expires_in or 0) <= 30
        assert leases.renew("r1", [], 30) == []

    def test_a_group_commit_keeps_the_index_as_appending_its_batches_one_by_one(self) -> None:
        leases = self.leases()
        self._hand_off("job-done")
        handed = FencedStore(leases, lambda _stream: HANDOFF)
        outcomes = handed.append_many(
            [
                ("job-new", [submitted("job-new")], 0),
                ("job-done", [concluded("job-done", 1)], 1),
                ("job-late", [submitted("job-late", seq=3)], 3),  # refused: nothing indexed
            ]
        )
        assert outcomes[:2] == [None, None] and isinstance(outcomes[2], ConcurrencyError)
        rows = self._open()
        assert list(rows) == ["job-new"] and rows["job-new"].handoff
        outcomes = handed.append_many(  # one stream opened, then closed, by one group
            [
                ("job-twice", [submitted("job-twice")], 0),
                ("job-twice", [concluded("job-twice", 1)], 1),
            ]
        )
        assert outcomes == [None, None] and list(self._open()) == ["job-new"]

    def test_a_fenced_group_commit_refuses_only_the_stale_batch(self) -> None:
        leases = self.leases()
        for stream in ("job-a", "job-b"):
            self._hand_off(stream)
        a, b = sorted(leases.claim("r1", 30, 10), key=lambda lease: lease.stream)
        held = {"job-a": a, "job-b": Lease(b.stream, b.token - 1)}  # job-b's token is stale
        outcomes = FencedStore(leases, held.get).append_many(
            [
                ("job-a", [contract_event("job-a", 1)], 1),
                ("job-b", [contract_event("job-b", 1)], 1),
            ]
        )
        assert outcomes[0] is None and isinstance(outcomes[1], StaleLease)
        assert len(leases.read("job-a")) == 2 and len(leases.read("job-b")) == 1

    def test_streams_a_leased_run_opens_are_its_own_and_close_with_it(self) -> None:
        leases = self.leases()
        FencedStore(leases, lambda _s: HANDOFF).append("run-x", [run_started("run-x")], 0)
        [lease] = leases.claim("r1", 30, 10)
        assert lease.kind == "run"
        under = FencedStore(leases, lambda _s: lease)
        under.append("job-x-a0", [submitted("job-x-a0")], 0)
        rows = self._open()
        assert rows["job-x-a0"].parent == "run-x" and not rows["job-x-a0"].claimable
        assert leases.claim("r2", 30, 10) == []  # an attempt is never leased alone
        under.append("run-x", [run_concluded("run-x", 1)], 1)
        assert leases.open_streams() == []

    def test_heartbeats_count_live_replicas_and_leaving_frees_every_lease(self) -> None:
        leases = self.leases()
        for stream in ("job-a", "job-b", "job-c"):
            self._hand_off(stream)
        assert leases.beat("r1", 30).replicas == 1
        leases.claim("r1", 30, 2)
        census = leases.beat("r2", 30, ("job",))
        assert (census.replicas, census.claimable, census.held) == (2, 3, 0)
        assert leases.beat("r1", 30).held == 2
        assert [(r.owner, r.kinds) for r in leases.replicas()] == [("r1", None), ("r2", ("job",))]
        leases.leave("r1")
        assert leases.beat("r2", 30).replicas == 1
        assert [r.owner for r in leases.replicas()] == ["r2"]
        assert {x.stream for x in leases.claim("r2", 30, 10)} == {"job-a", "job-b", "job-c"}
        leases.beat("r3", self.lease_ttl_s)
        time.sleep(self.lease_ttl_s + 0.15)
        assert [r.owner for r in leases.replicas()] == ["r2"]  # r3's heartbeat expired

    def test_a_census_says_when_the_soonest_lease_of_another_replica_expires(self) -> None:
        leases = self.leases()
        for stream in ("job-a", "job-b", "job-c"):
            self._hand_off(stream)
        assert leases.beat("r2", 30).next_expiry_s is None  # nobody holds anything
        leases.claim("r1", 20, 1)
        leases.claim("r1", 5, 1)
        soonest = leases.beat("r2", 30).next_expiry_s
        assert soonest is not None and 4 < soonest <= 5
        assert leases.beat("r1", 30).next_expiry_s is None  # its own are not another's
        leases.claim("r3", 0.05, 1)
        time.sleep(0.1)  # an expired lease is no longer to be waited for
        later = leases.beat("r2", 30).next_expiry_s
        assert later is not None and 4 < later <= 5

    def test_concurrent_claims_never_hand_one_stream_to_two_replicas(self) -> None:
        leases = self.leases()
        for n in range(30):
            self._hand_off(f"job-{n:02d}")
        every = _claimed_at_once(leases, limit=2)
        assert len(every) == len(set(every)) == 30

    def test_a_live_incarnation_s_name_is_refused_to_another_until_it_left_or_expired(
        self,
    ) -> None:
        leases, a, b = self.leases(), Incarnation("a", "h", 1, "s", 1.0), Incarnation("b")
        assert isinstance(leases.join("r1", 30.0, None, a), Census)
        assert isinstance(leases.join("r1", 30.0, None, a), Census)  # its own: joined again
        held = leases.join("r1", 30.0, ("run",), b)
        assert isinstance(held, Holder) and held.incarnation == a and held.owner == "r1"
        assert held.heartbeat is not None and 25 < (held.expires_in or 0) <= 30
        assert 0 <= (held.silent_s or 0) < 5
        assert leases.beat("r2", 30.0).replicas == 2  # the refusal recorded nothing
        assert leases.beat("r1", 30.0, None, a) is not None  # a still beats
        leases.leave("r1", b)  # not b's: nothing
        assert [r.owner for r in leases.replicas()] == ["r1", "r2"]
        leases.leave("r1", a)
        assert isinstance(leases.join("r1", 30.0, None, b), Census)  # a drained name is free
        leases.join("r3", self.lease_ttl_s, None, a)
        time.sleep(self.lease_ttl_s + 0.15)
        assert isinstance(leases.join("r3", 30.0, None, b), Census)  # an expired one's too
        self._hand_off("job-a")
        leases.claim("r4", 30.0, 10)  # a live lease holds the name too
        held = leases.join("r4", 30.0, None, b)
        assert isinstance(held, Holder) and held.incarnation is held.heartbeat is None

    def test_a_take_over_fences_every_lease_of_the_name_and_the_old_incarnation_changes_nothing(
        self,
    ) -> None:
        leases, old, new = self.leases(), Incarnation("old"), Incarnation("new")
        for stream in ("job-a", "job-b"):
            self._hand_off(stream)
        leases.join("r1", 30.0, None, old)
        a, b = sorted(leases.claim("r1", 30.0, 10, incarnation=old), key=lambda x: x.stream)
        holder = leases.join("r1", 30.0, None, new)
        assert isinstance(holder, Holder) and holder.incarnation == old
        assert isinstance(leases.join("r1", 30.0, ("job",), new, replacing=holder), Census)
        rows = self._open()
        assert [(rows[s].owner, rows[s].token, rows[s].held) for s in ("job-a", "job-b")] == [
            ("r1", 2, False),
            ("r1", 2, False),
        ]  # fenced: a new token, expired
        with raises(StaleLease):
            leases.append("job-a", [contract_event("job-a", 1)], 1, lease=a)
        assert leases.renew("r1", [a, b], 30.0) == []
        assert leases.beat("r1", 30.0, None, old) is None  # it learns it was fenced
        assert leases.claim("r1", 30.0, 10, incarnation=old, expired_only=True) == []
        taken = leases.claim("r1", 30.0, 10, incarnation=new, expired_only=True)
        assert sorted((x.stream, x.token) for x in taken) == [("job-a", 3), ("job-b", 3)]
        leases.release("r1", [a, b])  # the old incarnation drains: nothing of the new changes
        leases.leave("r1", old)
        rows = self._open()
        assert all(rows[s].owner == "r1" and rows[s].held for s in ("job-a", "job-b"))
        assert [(r.owner, r.kinds) for r in leases.replicas()] == [("r1", ("job",))]
        assert leases.beat("r1", 30.0, None, new) is not None
        leases.append("job-a", [contract_event("job-a", 1)], 1, lease=taken[0])

    def test_a_take_over_happens_only_if_the_holder_shows_as_it_was(self) -> None:
        leases, old, new = self.leases(), Incarnation("old"), Incarnation("new")
        self._hand_off("job-a")
        leases.join("r1", 30.0, None, old)
        [lease] = leases.claim("r1", 30.0, 10, incarnation=old)
        seen = leases.join("r1", 30.0, None, new)
        assert isinstance(seen, Holder)
        time.sleep(0.01)
        assert leases.beat("r1", 30.0, None, old) is not None  # the holder beats: alive
        now = leases.join("r1", 30.0, None, new, replacing=seen)
        assert isinstance(now, Holder) and now.incarnation == old
        assert now.heartbeat != seen.heartbeat and not now.same(seen)
        assert self._open()["job-a"].token == lease.token  # nothing fenced
        assert leases.renew("r1", [lease], 30.0) == [lease]
        assert leases.beat("r1", 30.0, None, old) is not None

    def test_concurrent_newcomers_under_one_name_admit_one(self) -> None:
        leases = self.leases()
        leases.join("r1", 30.0, None, Incarnation("dead"))
        seen = leases.join("r1", 30.0, None, Incarnation("probe"))
        assert isinstance(seen, Holder)
        barrier, answers = threading.Barrier(4), []

        def join(n: int) -> None:
            barrier.wait()
            answers.append(leases.join("r1", 30.0, None, Incarnation(f"n{n}"), replacing=seen))

        threads = [threading.Thread(target=join, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sum(isinstance(answer, Census) for answer in answers) == 1, answers

    def test_a_mark_is_fenced_by_the_lease_and_a_marked_stream_is_not_claimable(self) -> None:
        leases = self.leases()
        self._hand_off("job-a")
        [lease] = leases.claim("r1", 30, 10)
        assert not leases.mark_failed("r2", lease, "not its lease")
        assert not leases.mark_failed("r1", Lease(lease.stream, lease.token + 1), "stale")
        assert self._open()["job-a"].failed is None
        assert leases.mark_failed("r1", lease, "y" * (FAILED_REASON_CAP + 10))
        leases.release("r1", [lease])
        row = self._open()["job-a"]
        assert row.failed == "y" * FAILED_REASON_CAP and row.owner is None and not row.claimable
        assert leases.claim("r2", 30, 10) == [] == leases.claim("r2", 30, 10, expired_only=True)
        assert leases.beat("r2", 30).claimable == 0
        assert leases.unmark("job-a") and not leases.unmark("job-a")
        [again] = leases.claim("r2", 30, 10)
        assert (again.stream, again.token) == ("job-a", lease.token + 1)

    def test_drop_closed_drops_nothing_whose_log_holds_no_verdict(self) -> None:
        leases = self.leases()
        self._hand_off("job-a")
        assert leases.drop_closed("job-a") is False
        assert leases.drop_closed("job-nowhere") is False
        assert list(self._open()) == ["job-a"]
        leases.append("job-a", [concluded("job-a", 1)], 1)
        assert leases.drop_closed("job-a") is False  # the append closed it already
        assert leases.open_streams() == []


def _claimed_at_once(leases: Any, limit: int, replicas: int = 3) -> list[str]:
    """Every stream `replicas` threads won, each released at once by a barrier and then
    claiming `limit` streams at a time ten times over (a stream twice: handed out twice)."""
    won: dict[str, list[str]] = {}
    barrier = threading.Barrier(replicas)

    def claim(owner: str) -> None:
        barrier.wait()
        got: list[str] = []
        for _ in range(10):
            got += [lease.stream for lease in leases.claim(owner, 30, limit)]
        won[owner] = got

    threads = [threading.Thread(target=claim, args=(f"r{n}",)) for n in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return [stream for got in won.values() for stream in got]
