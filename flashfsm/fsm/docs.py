"""The docs' rule table, drawn from the rules' own declarations (`rules.RULES`).

The README's rule table is this function's output between two markers, and a test checks
they agree, so a rule added to `RULES` shows up in the docs by construction (and a rule
missing a part of its declaration fails that test).
"""

from __future__ import annotations

from flashfsm.fsm.rules import BOOKKEEPING, RULES, Rule

HEADER = (
    "| step | rule | what fires it | verdict | why |",
    "|---|---|---|---|---|",
)


def _order(step: str) -> float:
    """Where a step sorts among the reference's numbered steps (a divergence: nowhere)."""
    return float(step) if step.isdigit() else -1.0


def _row(rule: Rule) -> str:
    return f"| {rule.step} | `{rule.name}` | {rule.fires} | {rule.verdict} | {rule.why} |"


def rules_table() -> str:
    """The rules as a Markdown table, in the order they are tried.

    The bookkeeping steps (which keep a poll going without ending it) sit before the first
    verdict rule of a later step.
    """
    lines = list(HEADER)
    pending = sorted(BOOKKEEPING, key=lambda item: _order(item[0]))
    for rule in RULES:
        while pending and 0 <= _order(pending[0][0]) < _order(rule.step):
            step, text = pending.pop(0)
            lines.append(f"| {step} | — | {text} | — | |")
        lines.append(_row(rule))
    lines.extend(f"| {step} | — | {text} | — | |" for step, text in pending)
    return "\n".join(lines)
