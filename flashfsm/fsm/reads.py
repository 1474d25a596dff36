"""The reads a poll makes, each declared once (pure: no I/O, no clock).

A read is what a watch asks the platform, or the worker's side, besides the job's status.
Each is one `ReadKind`: the name `JobState.pending` holds while the read is due, the
command `decide` asks for it with, the events that record its answer and how the fold takes
one in, how `verify` and the views name it, and its row in the docs' table of reads
(`flashfsm.postmortem.docs.reads_table`). How a driver performs it (sync and async alike:
one sans-IO generator) is the shell's half, keyed by the same name (`flashfsm.reads`).

The built-in reads are declared in `flashfsm.fsm.job`, beside the fold they feed and the
status handling that makes them due. A read declared from outside
(`flashfsm.reads.declare_read`) is made due by a status answer (`ReadKind.due`), asked for
with `Observe(name)`, and waited for by no rule: it is evidence the log keeps and the views
show, never a reason for a verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flashfsm.events.models import EventBase, StatusObserved
from flashfsm.fsm.commands import Command

if TYPE_CHECKING:
    from flashfsm.fsm.state import JobState

Fold = Callable[["JobState", Any], None]


@dataclass(frozen=True, eq=False)
class ReadKind:
    """One read, declared once (see the module notes).

    - `name`: what `JobState.pending` holds while the read is due (and its docs row);
    - `command`: what `decide` asks the shell for, to make it;
    - `label`: the command in words, as `verify` names it ("a health probe");
    - `answers`: the event models that record its answer (a success, a failure);
    - `fold`: how the fold takes one of them in (the read is no longer pending by then);
    - `asked`: when a poll makes it, in words (the docs' table);
    - `due`: for a declared read only: whether a status answer makes it due (asked after
      the built-in reads that status made due);
    - `summary`: for a declared read only: its event's one line in the views;
    - `pending`: False for a read `decide` asks for without holding it pending (the
      worker's log, read once before a failing verdict).
    """

    name: str
    command: Command
    label: str
    answers: tuple[type[EventBase], ...]
    fold: Fold
    asked: str
    due: Callable[[JobState, StatusObserved], bool] | None = None
    summary: Callable[[Any], str] | None = None
    pending: bool = True


#: Every read by name, the built-in ones first (in the order the docs list them).
READS: dict[str, ReadKind] = {}
#: The command each read held in `JobState.pending` asks for.
READ_COMMANDS: dict[str, Command] = {}
#: The command each recorded answer answers (what `verify` checks it against).
ANSWERS: dict[type, Command] = {}
#: Each read's command in words.
LABELS: dict[Command, str] = {}
#: How the fold takes in each read's events.
FOLDS: dict[type, Fold] = {}
#: The declared reads a status answer may make due (`ReadKind.due`), in declaration order.
DUE_ON_STATUS: list[ReadKind] = []
#: A declared read's one line for each of its events (`ReadKind.summary`).
SUMMARIES: dict[type, Callable[[Any], str]] = {}


def register_read(read: ReadKind) -> ReadKind:
    """Add `read` to the tables above (`ValueError` for a name, command or event already
    taken). Pure: it changes only this module's tables."""
    if read.name in READS:
        raise ValueError(f"a read named {read.name!r} is already declared")
    if read.command in LABELS:
        raise ValueError(f"{read.name}: command {read.command!r} is another read's")
    taken = [model.__name__ for model in read.answers if model in FOLDS]
    if taken:
        raise ValueError(f"{read.name}: {', '.join(taken)} already answer another read")
    READS[read.name] = read
    if read.pending:
        READ_COMMANDS[read.name] = read.command
    LABELS[read.command] = read.label
    for model in read.answers:
        ANSWERS[model] = read.command
        FOLDS[model] = read.fold
        if read.summary is not None:
            SUMMARIES[model] = read.summary
    if read.due is not None:
        DUE_ON_STATUS.append(read)
    return read


def unregister_read(name: str) -> None:
    """Take back a read `register_read` added (a test's read, say)."""
    read = READS.pop(name)
    READ_COMMANDS.pop(name, None)
    LABELS.pop(read.command, None)
    for model in read.answers:
        ANSWERS.pop(model, None)
        FOLDS.pop(model, None)
        SUMMARIES.pop(model, None)
    if read in DUE_ON_STATUS:
        DUE_ON_STATUS.remove(read)


def summary_of(event: Any) -> str | None:
    """A declared read's one line for `event` (None: no declared read records it)."""
    summary = SUMMARIES.get(type(event))
    return None if summary is None else summary(event)
