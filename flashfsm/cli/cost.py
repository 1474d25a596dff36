"""The `cost` command: what runs and jobs cost, and why, from the waste ledger.

Each run's attempts are priced by the run's candidates (`RunStarted`); a bare job log (one
outside any run) by `--price`. Money nobody gave a price for (a candidate without one, a bare
job log without `--price`) is shown as unpriced, never $0: only its seconds are counted.
The whole store is every run plus every job no run queued (a run's job streams count once,
through their run). The sweeper's streams (every sweeper stream of the store; next to a
`.jsonl` file, the `sweeper*.jsonl` files of its directory) say which endpoints it reaped,
which ends their bills; an open bill is billed up to the newest event read (the store's,
for the whole store). The ledger itself is `flashfsm.postmortem.ledger`; the billing model it
applies is `flashfsm.postmortem.billing`; how a source is priced, and the ledger's lines and
JSON, are `flashfsm.display`'s (the web view shows the same). Like every reader, this opens
the store read-only.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    JsonOption,
    StoreLogs,
    StoreOption,
    UsageErrors,
    emit_json,
    fail,
    open_source,
    parse_duration,
    read_all_streams,
    store_opener,
    store_url,
)
from flashfsm.display.ledger import group_json, ledger_json, print_ledger, print_total, total_json
from flashfsm.display.ledger import rate_text as rate_text  # (re-exported: `cost`'s words)
from flashfsm.display.sources import source_ledger
from flashfsm.display.text import say
from flashfsm.events.models import Event
from flashfsm.postmortem.billing import MODEL
from flashfsm.postmortem.ledger import GROUP_KEYS, Ledger, group
from flashfsm.postmortem.ledger import store_ledgers as ledgers_of
from flashfsm.views import stream_kind


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
    with UsageErrors():
        return source_ledger(src, price, store_opener(store))


def store_ledgers(logs: dict[str, list[Event]], price: float | None) -> list[Ledger]:
    """The ledger of every run of `logs`, and of every job no run queued (at `price`): the
    sweeper streams' reaps end bills, and open bills are billed up to the store's newest
    event (`flashfsm.postmortem.ledger.store_ledgers`)."""
    with UsageErrors():  # a corrupt run is one line, exit 1
        return ledgers_of(logs, price)
