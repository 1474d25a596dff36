"""The state diagram, drawn from the same table the shared Machine is built from."""

from __future__ import annotations

from flashfsm.fsm.table import ACTIVE, INITIAL, TERMINAL, TRANSITIONS


def mermaid() -> str:
    """The job machine as a Mermaid `stateDiagram-v2`.

    The active states sit in one composite state, `Active`, from which every terminal
    trigger leaves (the table allows each of them from every active state).
    """
    lines = ["stateDiagram-v2", "    [*] --> Active", "    state Active {"]
    lines.append(f"        [*] --> {INITIAL.value}")
    for trigger, sources, dest in TRANSITIONS:
        if dest not in TERMINAL:
            lines.extend(f"        {s.value} --> {dest.value}: {trigger}" for s in sources)
    lines.append("    }")
    for trigger, sources, dest in TRANSITIONS:
        if dest in TERMINAL:
            assert set(sources) == set(ACTIVE), f"{trigger} must leave every active state"
            lines.append(f"    Active --> {dest.value}: {trigger}")
            lines.append(f"    {dest.value} --> [*]")
    return "\n".join(lines)


def dot() -> str:
    """The job machine as Graphviz DOT (every edge, terminal ones included)."""
    lines = [
        "digraph job {",
        "  rankdir=LR;",
        f'  start [shape=point]; start -> "{INITIAL.value}";',
    ]
    lines.extend(f'  "{state.value}" [shape=doublecircle];' for state in TERMINAL)
    for trigger, sources, dest in TRANSITIONS:
        lines.extend(
            f'  "{source.value}" -> "{dest.value}" [label="{trigger}"];' for source in sources
        )
    lines.append("}")
    return "\n".join(lines)
