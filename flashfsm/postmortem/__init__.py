"""The post-mortem and presentation (pure: no I/O, no clock, nothing from `flashfsm.adapters`).

What a log says after the fact, read off the decision core (`flashfsm.fsm`) and never
re-derived: `explain` answers `explain`, `why-not` and `whatif` from each rule's one measure,
`ledger` bills each attempt's workers (its billing model in `billing`), `docs` and `diagram`
draw what the docs show from the rules and the transition table. The core never imports
this package; the CLI, the web view and the pictures read through it.
"""
