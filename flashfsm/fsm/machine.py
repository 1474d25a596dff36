"""The one `transitions.Machine` of the process, shared by every job.

Theory of operation: building a Machine per job costs tenths of a millisecond and tens of
KiB, so there is exactly one, built from `table.TRANSITIONS`, with no models registered.
A job's state object only needs a `state` attribute; `fire(model, trigger)` runs the
trigger's `transitions.Event` against it, which checks the source state against the table
and sets the new state. Nothing is bound onto the model (no `is_X`, no `to_X`), so a model
costs only its own fields, and no registry of models grows with the number of jobs.
"""

from __future__ import annotations

from typing import Any, Protocol

from transitions import Machine, MachineError

from flashfsm.fsm.table import INITIAL, TRANSITIONS, JobPhase


class PhaseModel(Protocol):
    """Anything with a `state` attribute can be driven by the shared machine."""

    state: str


def _build() -> Machine:
    machine = Machine(
        model=None,
        states=[phase.value for phase in JobPhase],
        initial=INITIAL.value,
        transitions=[
            {"trigger": trigger, "source": [s.value for s in sources], "dest": dest.value}
            for trigger, sources, dest in TRANSITIONS
        ],
        auto_transitions=False,
        ignore_invalid_triggers=False,
        model_override=True,
        name="flashfsm-job",
    )
    return machine


MACHINE: Machine = _build()


class IllegalTransition(RuntimeError):
    """A trigger the transition table does not allow from the model's state."""


def fire(model: Any, trigger: str) -> None:
    """Fire `trigger` on `model` through the shared machine; illegal moves raise."""
    event = MACHINE.events.get(trigger)
    if event is None:
        raise IllegalTransition(f"unknown trigger {trigger!r}")
    try:
        moved = event.trigger(model)
    except MachineError as exc:
        raise IllegalTransition(f"{trigger!r} is not allowed from {model.state}: {exc}") from None
    if not moved:
        raise IllegalTransition(f"{trigger!r} did not move the job out of {model.state}")


def allowed_triggers(state: str) -> list[str]:
    """The triggers the shared machine accepts from `state`."""
    return sorted(MACHINE.get_triggers(state))
