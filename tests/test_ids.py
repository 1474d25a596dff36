"""Event ids: 26 characters, ordered by time, never repeated — not even across a fork."""

from __future__ import annotations

import multiprocessing

from flashfsm.ids import new_id


def test_ids_are_strictly_increasing_even_when_the_clock_stands_still_or_goes_back():
    ids = [new_id(t) for t in (5.0, 5.0, 5.0, 4.0, 6.0)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 26 for i in ids)


def test_ids_sort_by_time():
    assert new_id(1_000.0) < new_id(2_000.0) < new_id(3_000_000.0)


def _child_ids(queue):
    queue.put([new_id(7.0) for _ in range(3)])


def test_a_forked_child_does_not_repeat_its_parents_ids():
    new_id(7.0)  # the parent has a sequence going in this millisecond
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=_child_ids, args=(queue,)) for _ in range(2)]
    for child in children:
        child.start()
    produced = [i for _ in children for i in queue.get(timeout=10)]
    for child in children:
        child.join(10)
    produced += [new_id(7.0) for _ in range(3)]
    assert len(set(produced)) == len(produced)
