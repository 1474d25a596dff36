"""The `transitions.Machine`s of the process: one shared by every job, one by every run.

Theory of operation: building a Machine per job costs tenths of a millisecond and tens of
KiB, so there is exactly one per kind of model, built from its transition table (data),
with no models registered.
A job's state object only needs a `state` attribute; `fire(model, trigger)` runs the
trigger's `transitions.Event` against it, which checks the source state against the table
and sets the new state. Nothing is bound onto the model (no `is_X`, no `to_X`), so a model
costs only its own fields, and no registry of models grows with the number of jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Protocol

from transitions import Machine, MachineError

from flashfsm.fsm.table import INITIAL, TRANSITIONS, JobPhase


class PhaseModel(Protocol):
    """Anything with a `state` attribute can be driven by the shared machine."""

    state: str


def build_machine(
    name: str,
    phases: Iterable[StrEnum],
    transitions: Iterable[tuple[str, tuple[StrEnum, ...], StrEnum]],
    initial: StrEnum,
) -> Machine:
    """A model-less Machine from a (trigger, sources, destination) table."""
    return Machine(
        model=None,
        states=[phase.value for phase in phases],
        initial=initial.value,
        transitions=[
            {"trigger": trigger, "source": [s.value for s in sources], "dest": dest.value}
            for trigger, sources, dest in transitions
        ],
        auto_transitions=False,
        ignore_invalid_triggers=False,
        model_override=True,
        name=name,
    )


MACHINE: Machine = build_machine("flashfsm-job", JobPhase, TRANSITIONS, INITIAL)


class IllegalTransition(RuntimeError):
    """A trigger the transition table does not allow from the model's state."""


def fire(model: Any, trigger: str, machine: Machine = MACHINE) -> None:
    """Fire `trigger` on `model` through a shared machine (the job's by default)."""
    event = machine.events.get(trigger)
    if event is None:
        raise IllegalTransition(f"unknown trigger {trigger!r}")
    try:
        moved = event.trigger(model)
    except MachineError as exc:
        raise IllegalTransition(f"{trigger!r} is not allowed from {model.state}: {exc}") from None
    if not moved:
        raise IllegalTransition(f"{trigger!r} did not move the model out of {model.state}")


def allowed_triggers(state: str) -> list[str]:
    """The triggers the shared machine accepts from `state`."""
    return sorted(MACHINE.get_triggers(state))
