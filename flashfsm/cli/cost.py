"""The `cost` command: what runs and jobs cost, and why, from the waste ledger.

Each run's attempts are priced by the run's candidates (`RunStarted`); a bare job log (one
outside any run) by `--price`, else its money is unknown and only its seconds are shown.
The whole store is every run plus every job no run queued (a run's job streams count once,
through their run). The ledger itself is `flashfsm.fsm.ledger`; the billing model it
applies is `flashfsm.fsm.billing`. Like every reader, this opens the store read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    JsonOption,
    StoreLogs,
    StoreOption,
    UsageErrors,
    attempt_prices,
    console,
    emit_json,
    fail,
    open_source,
    parse_duration,
    read_all_streams,
    say,
    store_url,
)
from flashfsm.events.models import Event
from flashfsm.fsm.billing import MODEL
from flashfsm.fsm.ledger import (
    CAUSES,
    GROUP_KEYS,
    AttemptLedger,
    Cause,
    Group,
    Ledger,
    group,
    ledger,
    money_text,
)
from flashfsm.fsm.run import replay_run
from flashfsm.render import duration_text
from flashfsm.views import stream_kind

#: How a cause is named in text.
CAUSE_TEXT: dict[Cause, str] = {c: c.value.replace("_", " ") for c in CAUSES}


def cost_command(
    streams: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="STREAM",
            help="Runs or jobs of the store, or .jsonl files (default: every run, and every "
            "job no run queued).",
        ),
    ] = None,
    store: StoreOption = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="Only streams whose last event is within DURATION (90s, 15m, 12h, 30d, 2w) "
            "of the store's newest event.",
        ),
    ] = None,
    by: Annotated[
        str,
        typer.Option("--by", metavar="cause|gpu|rule", help="How the total is broken down."),
    ] = "cause",
    price: Annotated[
        float | None,
        typer.Option(
            "--price",
            metavar="USD_PER_HOUR",
            min=0,
            help="The hourly price of a bare job log's worker (a run's attempts are priced "
            "by its candidates); without it a bare job's money is unknown.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """What runs and jobs cost and why: billed seconds and money by cause (cold start,
    training, stall, preemption, failure, idle) per attempt, per run and in total."""
    if by not in GROUP_KEYS:
        raise fail(f"--by {by!r}: one of {', '.join(GROUP_KEYS)}")
    if streams and since is not None:
        raise fail("--since selects streams of the store: give STREAMs or --since, not both")
    since_s = parse_duration(since) if since is not None else None
    read = StoreLogs({})  # named streams: a damaged one is an error (exit 1), not skipped
    if streams:
        ledgers = [_named_ledger(name, store, price) for name in streams]
        where = None
    else:
        url = store_url(store)
        read = read_all_streams(url, since_s)
        ledgers = store_ledgers(read.logs, price)
        where = display_url(url)
    groups = group(ledgers, by)
    if as_json:
        emit_json(
            {
                "store": where,
                "damaged": read.damaged_json(),
                "model": {
                    "name": MODEL.name,
                    "source": MODEL.source,
                    "idle_timeout_s": MODEL.idle_timeout_s,
                },
                "by": by,
                "ledgers": [ledger_json(led) for led in ledgers],
                "total": total_json(ledgers),
                "groups": [group_json(g) for g in groups],
            }
        )
        raise typer.Exit(read.exit_code())
    if not ledgers:
        say(f"{where}: no {'readable ' if read.damaged else ''}run or job to cost")
    else:
        for led in ledgers:
            print_ledger(led, attempts=bool(streams))
        print_total(ledgers, groups, by)
    read.flag()
    raise typer.Exit(read.exit_code())


def _named_ledger(name: str, store: str | None, price: float | None) -> Ledger:
    src = open_source(name, store)
    kind = stream_kind(src.events)
    if kind == "sweeper":
        raise fail(f"{src.name} is a sweeper stream: it has no attempts to cost")
    with UsageErrors():
        led = ledger(src.events, src.load, price)
    return _named(led, src.name)


def _named(led: Ledger, name: str) -> Ledger:
    return Ledger(name, led.kind, led.attempts, led.state)


def store_ledgers(logs: dict[str, list[Event]], price: float | None) -> list[Ledger]:
    """The ledger of every run of `logs`, and of every job no run queued (at `price`)."""
    prices = attempt_prices(logs)
    out: list[Ledger] = []

    def load(stream: str) -> Sequence[Event]:
        return logs.get(stream, [])

    for name, events in logs.items():
        kind = stream_kind(events)
        if kind == "sweeper" or (kind == "job" and name in prices):
            continue
        with UsageErrors():
            if kind == "run":
                replay_run(events)  # a corrupt run is one line, exit 1
            out.append(_named(ledger(events, load, price), name))
    return out


# --- text ---------------------------------------------------------------------------------


def cause_parts(a: AttemptLedger, *, billed: bool) -> list[str]:
    """An attempt's billed (or unbilled) causes as `cold start 40 s $0.01` phrases."""
    parts = []
    for cause in CAUSES:
        seconds = a.billed_seconds(cause) if billed else a.seconds(cause) - a.billed_seconds(cause)
        if seconds <= 0:
            continue
        text = f"{CAUSE_TEXT[cause]} {duration_text(seconds)}"
        if billed and a.price_per_hour is not None:
            text += f" {money_text(a.money(cause))}"
        parts.append(text)
    return parts


def ledger_line(led: Ledger) -> str:
    """A run or job in one line: its state, attempts, billed time, money and waste."""
    state = led.state or "open"
    money = money_text(led.money())
    waste = "" if led.waste_money is None else f", waste {money_text(led.waste_money)}"
    return (
        f"{led.stream}: {state}, {len(led.attempts)} attempt(s), billed "
        f"{duration_text(led.billed_s)} {money}{waste}"
    )


def print_ledger(led: Ledger, *, attempts: bool) -> None:
    """A ledger's line and, with `attempts`, each attempt's causes."""
    say(ledger_line(led))
    if not attempts:
        return
    for a in led.attempts:
        where = a.gpu_class or "unknown GPU"
        at = "" if a.price_per_hour is None else f" at ${a.price_per_hour:g}/h"
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
            "-" if g.billed_s == 0 else _short(g.money),
            "-" if not g.waste_money else _short(g.waste_money),
        )
    console.print(table)


def _short(money: float | None) -> str:
    return "?" if money is None else money_text(money)


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
