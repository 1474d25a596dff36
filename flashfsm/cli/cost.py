"""The `cost` command: what runs and jobs cost, and why, from the waste ledger.

Each run's attempts are priced by the run's candidates (`RunStarted`); a bare job log (one
outside any run) by `--price`. Money nobody gave a price for (a candidate without one, a bare
job log without `--price`) is shown as unpriced, never $0: only its seconds are counted.
The whole store is every run plus every job no run queued (a run's job streams count once,
through their run). The sweeper's streams (every sweeper stream of the store; next to a
`.jsonl` file, the `sweeper*.jsonl` files of its directory) say which endpoints it reaped,
which ends their bills; an open bill is billed up to the newest event read (the store's,
for the whole store). The ledger itself is `flashfsm.postmortem.ledger`; the billing model it
applies is `flashfsm.postmortem.billing`. Like every reader, this opens the store read-only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flashfsm.adapters.jsonl import read_jsonl_file
from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    JsonOption,
    Source,
    StoreLogs,
    StoreOption,
    UsageErrors,
    console,
    emit_json,
    fail,
    is_file_source,
    open_reader,
    open_source,
    parse_duration,
    read_all_streams,
    say,
    store_url,
)
from flashfsm.events.models import Event
from flashfsm.fsm.run import replay_run
from flashfsm.postmortem.billing import MODEL
from flashfsm.postmortem.ledger import (
    CAUSES,
    GROUP_KEYS,
    UNPRICED,
    AttemptLedger,
    Cause,
    Group,
    Ledger,
    group,
    ledger,
    log_kind,
    money_text,
    newest,
    reaps_of,
)
from flashfsm.postmortem.ledger import store_ledgers as ledgers_of
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
            "by its candidates); without it a bare job is unpriced.",
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
        url = store_url(store, reading=True)
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
                    "assumed_idle_timeout_s": MODEL.idle_timeout_s,
                    "sdk_default_idle_timeout_s": MODEL.sdk_default_idle_timeout_s,
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
    if stream_kind(src.events) == "sweeper":
        raise fail(f"{src.name} is a sweeper stream: it has no attempts to cost")
    return source_ledger(src, name, store, price)


def source_ledger(src: Source, name: str, store: str | None, price: float | None) -> Ledger:
    """The ledger of an opened SOURCE (`name` as given, in `store`), priced as `cost` prices
    it: its job streams read beside it, the sweeper streams' reaps ending bills, open bills
    counted up to the newest event read. `explain` and `timeline` price through it too, so
    the three agree to the cent."""
    kind = stream_kind(src.events)
    jobs: dict[str, list[Event]] = {}

    def load(stream: str) -> list[Event]:
        if stream not in jobs:
            jobs[stream] = src.load(stream)
        return jobs[stream]

    sweepers = sweeper_logs(name, src, store)
    with UsageErrors():
        if kind == "run":
            for a in replay_run(src.events).attempts:
                if a.job_stream:
                    load(a.job_stream)
        as_of = newest(src.events, *jobs.values(), *sweepers)
        reaps = reaps_of(e for events in sweepers for e in events)
        led = ledger(src.events, load, price, reaps=reaps, as_of=as_of)
    return Ledger(src.name, led.kind, led.attempts, led.state, led.as_of)


def sweeper_logs(source: str, src: Source, store: str | None) -> list[list[Event]]:
    """The sweeper streams next to a named SOURCE: its store's streams named `sweeper…`,
    or the `sweeper*.jsonl` files of a `.jsonl` file's directory (their reaps end bills)."""
    found: list[list[Event]] = []
    with UsageErrors():
        if is_file_source(source):
            for path in sorted(Path(src.where).glob("sweeper*.jsonl")):
                events = read_jsonl_file(path)
                if events and log_kind(events) == "sweeper":
                    found.append(events)
            return found
        opened = open_reader(store_url(store, reading=True))
        try:
            for name in opened.streams():
                if name.startswith("sweeper"):
                    events = opened.read(name)
                    if events and log_kind(events) == "sweeper":
                        found.append(events)
        finally:
            opened.close()
    return found


def store_ledgers(logs: dict[str, list[Event]], price: float | None) -> list[Ledger]:
    """The ledger of every run of `logs`, and of every job no run queued (at `price`): the
    sweeper streams' reaps end bills, and open bills are billed up to the store's newest
    event (`flashfsm.postmortem.ledger.store_ledgers`)."""
    with UsageErrors():  # a corrupt run is one line, exit 1
        return ledgers_of(logs, price)


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
