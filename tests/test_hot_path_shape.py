"""The functions every observation runs through keep their locals plain.

A comprehension or a lambda inside a function that reads one of its locals turns that local
into a closure cell, and every other read of it in the function pays for the indirection.
In `_on_status`, a generator over the declared reads once made `s` and `e` cells: the fold
of a training log cost 6 % more (an interleaved fold-only A/B against 5662aee), with
nothing in the fold's behaviour to show it. This holds the fold's handlers, `evolve`,
`decide` and every rule's measure to it; a comprehension they need goes into a function of
its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flashfsm.fsm import job, rules


def hot_functions() -> list[Callable[..., Any]]:
    """The fold's handlers, `evolve`, `decide` and each rule's measure."""
    return [*job._APPLY.values(), job.evolve, job.decide, *(r.measure for r in rules.RULES)]


def test_no_function_on_the_observation_path_keeps_a_local_in_a_closure_cell() -> None:
    functions = hot_functions()
    assert job._on_status in functions and len(functions) > len(rules.RULES)
    cells = {f.__qualname__: f.__code__.co_cellvars for f in functions if f.__code__.co_cellvars}
    assert cells == {}, f"locals made closure cells on the hot path: {cells}"


def test_the_check_sees_a_closure_cell_where_there_is_one() -> None:
    def folded(s: Any, e: Any) -> tuple[Any, ...]:
        return tuple(x for x in e if x is s)

    assert folded.__code__.co_cellvars == ("s",)
