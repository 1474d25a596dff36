"""The web view's store-wide pages: the costs and the fleet.

Both are rendered from the index (`flashfsm.ui.index`) on the server, as every page is
(`flashfsm.ui.pages`), and both are live: their page's script asks for the content again
(`costs_body`, `fleet_body`) as the store changes, and the fleet's also every 5 s, as leases
and heartbeats age without an event.
"""

from __future__ import annotations

from datetime import UTC, datetime

from flashfsm import render
from flashfsm.display.ledger import total_json
from flashfsm.postmortem.ledger import group
from flashfsm.ui.index import StoreIndex
from flashfsm.ui.pages import Frame, page, render_template

#: The costs page's tables: (what `ledger.group` groups by, the table's title).
GROUPS = (("cause", "cause"), ("gpu", "GPU"), ("rule", "verdict rule"))
#: Waste over time is bucketed by hour when it spans less than this, else by day.
HOURLY_UNDER_S = 2 * 86_400.0


def costs_page(frame: Frame, index: StoreIndex) -> str:
    """The store's money: by cause, GPU and rule (as `flashfsm cost --by`), and waste by day."""
    reading = index.progress
    return page(frame, "costs", "costs", costs_body(index), version=index.version, reading=reading)


def costs_body(index: StoreIndex) -> str:
    """The costs page's content (what its live feed renders again as the store changes)."""
    ledgers = index.ledgers()
    groups = [(title, group(ledgers, by)) for by, title in GROUPS]
    totals = total_json(ledgers)  # what `flashfsm cost --json` totals
    wasted = [a for led in ledgers for a in led.attempts if a.waste_s and a.waste_money]
    ends = [a.end for a in wasted]
    hourly = bool(ends) and max(ends) - min(ends) < HOURLY_UNDER_S
    bucket = "%Y-%m-%d %H:00" if hourly else "%Y-%m-%d"
    days: dict[str, float] = {}
    for a in wasted:
        key = datetime.fromtimestamp(a.end, UTC).strftime(bucket)
        days[key] = days.get(key, 0.0) + (a.waste_money or 0.0)
    top = max(days.values(), default=0.0)
    waste_days = [(d, m, f"{100 * m / top:.1f}" if top else "0") for d, m in sorted(days.items())]
    body = render_template(
        "costs",
        ledgers=len(ledgers),
        total=totals["money"],
        waste=totals["waste_money"],
        open_bills=totals["open_attempts"],
        open_rate=totals["open_rate_per_hour"],
        groups=groups,
        waste_days=waste_days,
        bucket="hour" if hourly else "day",
    )
    return body


#: The most reattach gaps the fleet page lists (the newest).
GAPS_SHOWN = 50


def fleet_page(frame: Frame, index: StoreIndex, wall: float) -> str:
    """The fleet: live replicas, open streams with their leases, the open streams nobody
    watches now, and the gaps in watching the logs record (each reattach's)."""
    body = fleet_body(frame, index, wall)
    return page(frame, "fleet", "fleet", body, version=index.version, reading=index.progress)


def fleet_body(frame: Frame, index: StoreIndex, wall: float) -> str:
    """The fleet page's content, as of `wall` (what its live feed renders again)."""
    fleet = index.fleet
    leases = []
    unwatched = []
    for o in fleet.open_streams:
        entry = index.entry(o.stream)
        last = entry.row["last_at"] if entry is not None else None
        quiet = None if last is None else max(0.0, wall - last)
        if o.failed is not None:
            note = f"failed to start: {o.failed}"
        elif o.parent is not None or o.held:
            note = ""
        elif o.owner is not None:
            note = "lease expired: no replica holds it"
        elif o.handoff:
            note = "waiting for a replica"
        else:
            note = ""  # its opener watches it (a poll_job, a supervise_run of its own)
        expires = ""
        if o.expires_in is not None:
            expires = (
                render.duration_text(o.expires_in)
                if o.expires_in >= 0
                else f"expired {render.duration_text(-o.expires_in)} ago"
            )
        row = {
            "stream": o.stream,
            "kind": o.kind,
            "owner": o.owner if o.parent is None else f"(of {o.parent})",
            "expires": expires,
            "open_for": max(0.0, wall - o.opened_at),
            "quiet": quiet,
            "token": o.token,
            "note": note,
        }
        leases.append(row)
        if note:
            unwatched.append(row)
    gaps = sorted(
        (
            {"stream": r["stream"], "at": at, "gap": gap, "by": by}
            for r in index.rows()
            for at, gap, by in r.get("gaps", ())
        ),
        key=lambda g: -g["at"],
    )
    body = render_template(
        "fleet",
        indexed=fleet.indexed,
        store=frame.store,
        replicas=fleet.replicas,
        leases=leases,
        unwatched=unwatched,
        gaps=gaps[:GAPS_SHOWN],
        gap_count=len(gaps),
    )
    return body
