"""The waste ledger as the front ends show it: a run's or job's bill in lines (`print_ledger`,
`ledger_text`), a total broken down by cause, GPU or rule (`print_total`), what a run's
failures threw away (`print_failure_cost`), and each as the JSON `cost --json` prints.

Money nobody gave a price for is said as unpriced, never $0 (`money_text`). The ledger
itself is `flashfsm.postmortem.ledger`; how a source is priced, `flashfsm.display.sources`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from flashfsm.display.text import captured, console, say
from flashfsm.postmortem.ledger import (
    CAUSES,
    UNPRICED,
    AttemptLedger,
    Cause,
    Group,
    Ledger,
    money_text,
)
from flashfsm.render import duration_text

#: How a cause is named in text.
CAUSE_TEXT: dict[Cause, str] = {c: c.value.replace("_", " ") for c in CAUSES}


# --- text ---------------------------------------------------------------------------------


def cause_parts(a: AttemptLedger, *, billed: bool) -> list[str]:
    """An attempt's billed (or unbilled) causes as `cold start 40 s $0.01` phrases."""
    parts = []
    for cause in CAUSES:
        seconds = a.billed_seconds(cause) if billed else a.unbilled_seconds(cause)
        if seconds <= 0:
            continue
        text = f"{CAUSE_TEXT[cause]} {duration_text(seconds)}"
        if billed and a.price_per_hour is not None:
            text += f" {money_text(a.money(cause))}"
        parts.append(text)
    return parts


def utc_text(at: float) -> str:
    """An epoch time as printed: `2023-11-14 22:42:20 UTC`."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rate_text(rate: float | None) -> str:
    """An hourly rate as printed: `$0.99/h` (`an unpriced rate` without a price)."""
    return f"an {UNPRICED} rate" if rate is None else f"${rate:g}/h"


#: How the CLI names an idle timeout the deploy did not record, by its source.
IDLE_TIMEOUT_TEXT = {
    "platform": "the platform's",
    "sdk-default": "runpod-flash's default then",
    "assumed": "assumed, RunPod's default",
}


def assumption_parts(a: AttemptLedger) -> list[str]:
    """What an attempt's bill rests on that flashfsm did not record: an idle timeout read
    from the platform, defaulted or assumed; a worker billed from its pickup for want of a
    record of its start."""
    parts = []
    if a.idle_timeout is not None and not a.idle_timeout.recorded:
        t = a.idle_timeout
        parts.append(f"idle timeout ({t.seconds:g} s, {IDLE_TIMEOUT_TEXT[t.source]})")
    if a.started_at_pickup:
        parts.append("worker start (billed from the pickup)")
    return parts


def open_text(a: AttemptLedger) -> str:
    """An open bill in a line: since when, at what rate, counted up to when."""
    assert a.open_since is not None
    since = "its last event" if a.outcome is None else "the verdict"
    return (
        f"open bill: billing since {since} at {utc_text(a.open_since)} (nothing recorded "
        f"stopped the worker) at {rate_text(a.price_per_hour)}, counted up to "
        f"{utc_text(a.end)}"
    )


def ledger_line(led: Ledger) -> str:
    """A run or job in one line: its state, attempts, billed time, money and waste."""
    state = led.state or "open"
    money = money_text(led.money())
    waste = "" if led.waste_money is None else f", waste {money_text(led.waste_money)}"
    still = ", still billing" if led.open_attempts else ""
    return (
        f"{led.stream}: {state}, {len(led.attempts)} attempt(s), billed "
        f"{duration_text(led.billed_s)} {money}{waste}{still}"
    )


def print_ledger(led: Ledger, *, attempts: bool) -> None:
    """A ledger's line and, with `attempts`, each attempt's causes."""
    say(ledger_line(led))
    if not attempts:
        return
    for a in led.attempts:
        where = a.gpu_class or "unknown GPU"
        at = f" ({UNPRICED})" if a.price_per_hour is None else f" at ${a.price_per_hour:g}/h"
        name = "job" if a.attempt is None or led.kind == "job" else f"attempt {a.attempt}"
        say(f"  {name} on {where}{at}: {a.label}")
        billed = cause_parts(a, billed=True)
        say(
            f"    billed {duration_text(a.billed_s)} {money_text(a.money())}"
            + (f": {', '.join(billed)}" if billed else "")
        )
        unbilled = cause_parts(a, billed=False)
        if unbilled:
            say(f"    unbilled: {', '.join(unbilled)}")
        if a.billing_open:
            say(f"    {open_text(a)}")
        elif a.stopped_by == "reap":
            say(f"    the sweeper's reap of its endpoint ended the bill at {utc_text(a.end)}")
        assumed = assumption_parts(a)
        if assumed:
            say(f"    not recorded: {', '.join(assumed)}")


def ledger_text(led: Ledger) -> str:
    """`print_ledger` of `led` with its attempts, as text (lines as long as they are)."""
    with captured() as text:
        print_ledger(led, attempts=True)
    return text.get()


def print_total(ledgers: list[Ledger], groups: list[Group], by: str) -> None:
    """The total over `ledgers`, broken down by `by`."""
    attempts = sum(len(led.attempts) for led in ledgers)
    billed = sum(led.billed_s for led in ledgers)
    money = _sum([led.money() for led in ledgers])
    waste = _sum([led.waste_money for led in ledgers])
    say(
        f"total: {len(ledgers)} stream(s), {attempts} attempt(s), billed "
        f"{duration_text(billed)} {money_text(money)}, waste {money_text(waste)}"
    )
    still = [a for led in ledgers for a in led.open_attempts]
    if still:
        as_of = max(a.end for a in still)
        rate = _sum([a.open_rate_per_hour for a in still])
        say(
            f"  still billing: {len(still)} open bill(s) at {rate_text(rate)}, counted up to "
            f"{utc_text(as_of)}"
        )
    table = Table(expand=False)
    table.add_column(by)
    table.add_column("attempts", justify="right")
    table.add_column("time", justify="right")
    table.add_column("billed", justify="right")
    table.add_column("money", justify="right")
    table.add_column("waste", justify="right")
    for g in groups:
        table.add_row(
            CAUSE_TEXT.get(Cause(g.key), g.key) if by == "cause" else g.key,
            str(g.attempts),
            duration_text(g.seconds),
            duration_text(g.billed_s),
            "-" if g.billed_s == 0 else money_text(g.money),
            "-" if g.waste_money == 0 else money_text(g.waste_money),
        )
    console.print(table)


def print_failure_cost(led: Ledger) -> None:
    """What a run cost, and what each failed attempt cost and why."""
    say(
        f"run {led.stream}: billed {duration_text(led.billed_s)} {money_text(led.money())}; "
        f"its failures threw away {duration_text(led.waste_s)} {money_text(led.waste_money)}"
    )
    for a in led.failed:
        parts = cause_parts(a, billed=True)
        spent = f": {', '.join(parts)}" if parts else ": nothing billed"
        say(f"  attempt {a.attempt} {a.label} cost {money_text(a.money())}{spent}")


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum((v or 0.0 for v in values), 0.0)


# --- JSON ---------------------------------------------------------------------------------


def _causes_json(a: AttemptLedger) -> dict[str, Any]:
    return {
        c.value: {"seconds": a.seconds(c), "billed_s": a.billed_seconds(c), "money": a.money(c)}
        for c in CAUSES
    }


def attempt_ledger_json(a: AttemptLedger) -> dict[str, Any]:
    """One attempt's ledger: its pieces, and seconds and money by cause."""
    o = a.outcome
    return {
        "attempt": a.attempt,
        "stream": a.stream,
        "gpu_class": a.gpu_class,
        "provider": a.provider,
        "price_per_hour": a.price_per_hour,
        "start": a.start,
        "end": a.end,
        "outcome": None
        if o is None
        else {"at": o.at, "state": o.state, "ok": o.ok, "failure": o.failure, "rule": o.rule},
        "seconds": a.seconds(),
        "billed_s": a.billed_s,
        "unbilled_s": a.unbilled_s,
        "waste_s": a.waste_s,
        "money": a.money(),
        "waste_money": a.waste_money,
        "causes": _causes_json(a),
        "pieces": [
            {"cause": p.cause.value, "start": p.start, "end": p.end, "billed": p.billed}
            for p in a.pieces
        ],
        "overlaps": [
            {"cause": p.cause.value, "start": p.start, "end": p.end, "workers": p.workers}
            for p in a.overlaps
        ],
        "workers": [
            {
                "worker_id": w.worker_id,
                "picked_up_at": w.picked_up_at,
                "start": w.start,
                "stop": w.stop,
                "start_source": w.start_source,
                "stop_reason": w.stop_reason,
                "status": w.status,
            }
            for w in a.workers
        ],
        "billed_intervals": [list(span) for span in a.billed_intervals],
        "idle_timeout_s": a.idle_timeout_s,
        "idle_timeout_source": a.idle_timeout_source,
        "released_at": a.released_at,
        "stopped_by": a.stopped_by,
        "open_since": a.open_since,
        "open_rate_per_hour": a.open_rate_per_hour,
    }


def ledger_json(led: Ledger) -> dict[str, Any]:
    """A run's or job's ledger."""
    return {
        "stream": led.stream,
        "kind": led.kind,
        "state": led.state,
        "billed_s": led.billed_s,
        "unbilled_s": led.unbilled_s,
        "waste_s": led.waste_s,
        "money": led.money(),
        "waste_money": led.waste_money,
        "priced": led.priced,
        "as_of": led.as_of,
        "open_attempts": len(led.open_attempts),
        "open_rate_per_hour": led.open_rate_per_hour,
        "attempts": [attempt_ledger_json(a) for a in led.attempts],
    }


def total_json(ledgers: list[Ledger]) -> dict[str, Any]:
    """The total over every ledger."""
    return {
        "streams": len(ledgers),
        "attempts": sum(len(led.attempts) for led in ledgers),
        "billed_s": sum((led.billed_s for led in ledgers), 0.0),
        "unbilled_s": sum((led.unbilled_s for led in ledgers), 0.0),
        "waste_s": sum((led.waste_s for led in ledgers), 0.0),
        "money": _sum([led.money() for led in ledgers]),
        "waste_money": _sum([led.waste_money for led in ledgers]),
        "as_of": max((led.as_of for led in ledgers if led.as_of is not None), default=None),
        "open_attempts": sum(len(led.open_attempts) for led in ledgers),
        "open_rate_per_hour": _sum([led.open_rate_per_hour for led in ledgers]),
    }


def group_json(g: Group) -> dict[str, Any]:
    """One line of a total."""
    return {
        "key": g.key,
        "attempts": g.attempts,
        "seconds": g.seconds,
        "billed_s": g.billed_s,
        "money": g.money,
        "waste_money": g.waste_money,
    }
