"""The decision core (pure: no I/O, no clock, nothing from `flashfsm.adapters`).

`table` holds the states and transitions as data, `machine` the one shared
`transitions.Machine`, `state` what the rules know about a job, `rules` one declaration per
job rule, `job` the fold (`evolve`), the decision (`decide`), `replay` and `verify`,
`findings` what a rule finds (and how an event reads), `run` the run machine and `capacity`
its ranking, `sweep` the idle sweeper's rules, `snapshot` a fold kept as bytes. What a log
says after the fact (explanations, the ledger, the docs' tables) is `flashfsm.postmortem`.
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
