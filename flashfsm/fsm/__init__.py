"""The decision core (pure: no I/O, no clock, nothing from `flashfsm.adapters`).

`table` holds the states and transitions as data, `machine` the one shared
`transitions.Machine`, `policy` the grace windows, `rules` one function per job rule,
`job` the fold (`evolve`), the decision (`decide`), `replay` and `verify`. Import those
modules directly; this package's `__init__` stays empty so the event models can use the
policy without an import cycle.
"""
