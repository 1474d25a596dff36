"""The waste ledger as the front ends show it: a run's or job's bill as one structured view
(`LedgerView`, gathered by `ledger_view`), a total broken down by cause, GPU or rule
(`print_total`), what a run's failures threw away (`print_failure_cost`), and each as the
JSON `cost --json` prints.

A bill is gathered once and rendered by each front end: `flashfsm cost STREAM` prints it
(`print_ledger_view`; `print_ledger` gathers and prints), and a stream's page renders the
same view in markup through its template (`flashfsm.ui.pages.ledger_html`), so a page and
the command never tell two stories. Its phrases (a cause's, a price's, what was not
recorded) are said on the view, so both renderings word them alike. `cost --json` writes
the ledger itself (`ledger_json`: every piece, worker and cause, more than a bill shows).

Money nobody gave a price for is said as unpriced, never $0 (`money_text`). The ledger
itself is `flashfsm.postmortem.ledger`; how a source is priced, `flashfsm.display.sources`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from flashfsm.display.text import console, say
from flashfsm.postmortem.billing import IdleTimeout
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


# --- the view -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CauseShown:
    """One cause of an attempt's bill as a line says it: its name ("cold start"), its seconds
    and, for a billed cause of a priced attempt, its money (None: none is said)."""

    name: str
    seconds: float
    money: float | None = None

    @property
    def text(self) -> str:
        """The cause as a phrase: `cold start 40 s $0.01`."""
        text = f"{self.name} {duration_text(self.seconds)}"
        return text if self.money is None else f"{text} {money_text(self.money)}"


@dataclass(frozen=True, slots=True)
class AttemptShown:
    """One attempt of a bill as `print_ledger` shows it (`ledger_view`).

    Its line: its `name` ("attempt 0", or "job"), its GPU (`gpu`: "unknown GPU" without
    one), its hourly price (None: unpriced) and how it ended (`label`, `state`, `ok`: None
    while open). Then what it billed (`billed_s`, `money`) by cause (`billed`), its time
    nobody paid for by cause (`unbilled`), an open bill (`open_since`: since its verdict, or
    its last event without one, counted up to `end`), a bill the sweeper's reap ended
    (`reaped`, at `end`), and what the bill rests on that was not recorded: an idle timeout
    read from the platform, defaulted or assumed (`idle_timeout`), a worker billed from its
    pickup (`started_at_pickup`)."""

    name: str
    stream: str | None  # its job stream
    gpu: str
    price_per_hour: float | None
    label: str
    state: str  # the verdict's state, "open" without one
    ok: bool | None
    rule: str | None
    billed_s: float
    money: float | None
    billed: tuple[CauseShown, ...]
    unbilled: tuple[CauseShown, ...]
    end: float
    open_since: float | None = None
    open_after: str = ""  # what an open bill runs since: "the verdict" or "its last event"
    reaped: bool = False
    idle_timeout: IdleTimeout | None = None  # only one that was not recorded
    started_at_pickup: bool = False

    @property
    def at(self) -> str:
        """Its price as its line says it: `at $0.99/h`, or `(unpriced)`."""
        p = self.price_per_hour
        return f"({UNPRICED})" if p is None else f"at ${p:g}/h"

    @property
    def rate(self) -> str:
        """Its open bill's rate: `$0.99/h`, or `an unpriced rate`."""
        return rate_text(self.price_per_hour)

    @property
    def not_recorded(self) -> tuple[str, ...]:
        """What its bill rests on that flashfsm did not record, one phrase each."""
        parts = []
        if self.idle_timeout is not None:
            t = self.idle_timeout
            parts.append(f"idle timeout ({t.seconds:g} s, {IDLE_TIMEOUT_TEXT[t.source]})")
        if self.started_at_pickup:
            parts.append("worker start (billed from the pickup)")
        return tuple(parts)


@dataclass(frozen=True, slots=True)
class LedgerView:
    """One run's or job's bill as `print_ledger(led, attempts=True)` shows it, gathered
    once (`ledger_view`): its head (`name`, `state`: "open" without one, the attempts,
    billed time and money, the waste: None without a price, and whether a bill is still
    open), then each attempt (`AttemptShown`). The command prints it
    (`print_ledger_view`), a stream's page renders it through its template
    (`flashfsm.ui.pages.ledger_html`)."""

    stream: str | None
    kind: str  # "job" or "run"
    state: str
    billed_s: float
    money: float | None
    waste_money: float | None
    still_billing: bool
    attempts: tuple[AttemptShown, ...]

    @property
    def name(self) -> str:
        """The stream as the head says it."""
        return f"{self.stream}"


def causes_shown(a: AttemptLedger, *, billed: bool) -> tuple[CauseShown, ...]:
    """An attempt's billed (or unbilled) causes, in the ledger's order; a billed cause of a
    priced attempt with its money."""
    shown = []
    for cause in CAUSES:
        seconds = a.billed_seconds(cause) if billed else a.unbilled_seconds(cause)
        if seconds <= 0:
            continue
        money = a.money(cause) if billed and a.price_per_hour is not None else None
        shown.append(CauseShown(CAUSE_TEXT[cause], seconds, money))
    return tuple(shown)


def attempt_shown(a: AttemptLedger, kind: str) -> AttemptShown:
    """One attempt of a `kind` ledger as its bill shows it."""
    o = a.outcome
    t = a.idle_timeout
    return AttemptShown(
        name="job" if a.attempt is None or kind == "job" else f"attempt {a.attempt}",
        stream=a.stream,
        gpu=a.gpu_class or "unknown GPU",
        price_per_hour=a.price_per_hour,
        label=a.label,
        state="open" if o is None else o.state,
        ok=None if o is None else o.ok,
        rule=None if o is None else o.rule,
        billed_s=a.billed_s,
        money=a.money(),
        billed=causes_shown(a, billed=True),
        unbilled=causes_shown(a, billed=False),
        end=a.end,
        open_since=a.open_since,
        open_after="its last event" if o is None else "the verdict",
        reaped=not a.billing_open and a.stopped_by == "reap",
        idle_timeout=t if t is not None and not t.recorded else None,
        started_at_pickup=a.started_at_pickup,
    )


def ledger_view(led: Ledger) -> LedgerView:
    """Gather what a stream's bill shows (`LedgerView`)."""
    return LedgerView(
        stream=led.stream,
        kind=led.kind,
        state=led.state or "open",
        billed_s=led.billed_s,
        money=led.money(),
        waste_money=led.waste_money,
        still_billing=bool(led.open_attempts),
        attempts=tuple(attempt_shown(a, led.kind) for a in led.attempts),
    )


# --- text ---------------------------------------------------------------------------------


def cause_parts(a: AttemptLedger, *, billed: bool) -> list[str]:
    """An attempt's billed (or unbilled) causes as `cold start 40 s $0.01` phrases."""
    return [c.text for c in causes_shown(a, billed=billed)]


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


def open_text(a: AttemptShown) -> str:
    """An open bill in a line: since when, at what rate, counted up to when."""
    assert a.open_since is not None
    return (
        f"open bill: billing since {a.open_after} at {utc_text(a.open_since)} (nothing "
        f"recorded stopped the worker) at {a.rate}, counted up to {utc_text(a.end)}"
    )


def ledger_line(view: LedgerView) -> str:
    """A run or job in one line: its state, attempts, billed time, money and waste."""
    waste = "" if view.waste_money is None else f", waste {money_text(view.waste_money)}"
    still = ", still billing" if view.still_billing else ""
    return (
        f"{view.name}: {view.state}, {len(view.attempts)} attempt(s), billed "
        f"{duration_text(view.billed_s)} {money_text(view.money)}{waste}{still}"
    )


def print_ledger(led: Ledger, *, attempts: bool) -> None:
    """A ledger's line and, with `attempts`, each attempt's causes (`print_ledger_view`)."""
    print_ledger_view(ledger_view(led), attempts=attempts)


def print_ledger_view(view: LedgerView, *, attempts: bool = True) -> None:
    """Print `view` as `flashfsm cost` prints a bill: its line and, with `attempts`, each
    attempt's."""
    say(ledger_line(view))
    if not attempts:
        return
    for a in view.attempts:
        say(f"  {a.name} on {a.gpu} {a.at}: {a.label}")
        billed = ", ".join(c.text for c in a.billed)
        say(
            f"    billed {duration_text(a.billed_s)} {money_text(a.money)}"
            + (f": {billed}" if billed else "")
        )
        if a.unbilled:
            say(f"    unbilled: {', '.join(c.text for c in a.unbilled)}")
        if a.open_since is not None:
            say(f"    {open_text(a)}")
        elif a.reaped:
            say(f"    the sweeper's reap of its endpoint ended the bill at {utc_text(a.end)}")
        if a.not_recorded:
            say(f"    not recorded: {', '.join(a.not_recorded)}")


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


def failure_cost_lines(led: Ledger) -> tuple[str, tuple[str, ...]]:
    """What a run cost (`billed …; its failures threw away …`), and what each failed attempt
    cost and why, one line each: as every view says them."""
    head = (
        f"billed {duration_text(led.billed_s)} {money_text(led.money())}; "
        f"its failures threw away {duration_text(led.waste_s)} {money_text(led.waste_money)}"
    )
    lines = []
    for a in led.failed:
        parts = cause_parts(a, billed=True)
        spent = f": {', '.join(parts)}" if parts else ": nothing billed"
        lines.append(f"attempt {a.attempt} {a.label} cost {money_text(a.money())}{spent}")
    return head, tuple(lines)


def print_failure_cost(led: Ledger) -> None:
    """What a run cost, and what each failed attempt cost and why (`failure_cost_lines`)."""
    head, lines = failure_cost_lines(led)
    say(f"run {led.stream}: {head}")
    for line in lines:
        say(f"  {line}")


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
