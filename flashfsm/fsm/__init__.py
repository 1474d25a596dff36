"""The decision core (pure: no I/O, no clock, nothing from `flashfsm.adapters`).

`table` holds the states and transitions as data, `machine` the one shared
`transitions.Machine`, `state` what the rules know about a job, `rules` one declaration per
job rule, `job` the fold (`evolve`), the decision (`decide`), `replay` and `verify`,
`explain` and `findings` the post-mortem views, `docs` and `diagram` what the docs draw
from the rules and the table, `run` the run machine, `sweep` the idle sweeper's rules.
The grace policy a job is judged by is part of the recorded format
(`flashfsm.events.policy`).
"""

from flashfsm.fsm.job import decide, evolve, replay, verify
from flashfsm.fsm.rules import RULES, RULES_BY_NAME, Rule, judge
from flashfsm.fsm.state import SEQ, SINCE, JobState, Timer

__all__ = [
    "RULES",
    "RULES_BY_NAME",
    "SEQ",
    "SINCE",
    "JobState",
    "Rule",
    "Timer",
    "decide",
    "evolve",
    "judge",
    "replay",
    "verify",
]
