"""The web view's pages as HTML: the runs and jobs list, a stream, a message, a cancel form.

Theory of operation. Every page is rendered on the server from what the index holds
(`flashfsm.ui.index`) and the same views, folds and texts the CLI prints (`why-not`, the
timeline picture, the ledger: `flashfsm.display`, the display layer both front ends stand
on), so a page and a command never tell two stories; `explain` is the one structured view
the command prints (`flashfsm.display.explain.ExplainView`), rendered here in markup by its
template (`explain_html`). Jinja2 renders with autoescaping on, and every outside text (a
stream name, an error message, a worker's log line) also goes through one filter first (`t`:
`shown`, and the password of any URL in it masked, as the CLI prints it), so a control
character is written as its escape, a password never reaches a page and HTML or script in it
is inert text. Pages carry no
inline script or style: the one script and the one stylesheet are static files, and the
app's Content-Security-Policy allows nothing else to run.

The store-wide pages (the costs, the fleet) are in `flashfsm.ui.store_pages`, the followed
worker log in `flashfsm.ui.follow`; both render with this module's `render_template`.

Nothing here reads the clock: the caller passes the wall-clock reading (`wall`), and each log
is viewed on its own clock (`flashfsm.views.view_now`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape

from flashfsm import render
from flashfsm.adapters.stores import open_store
from flashfsm.adapters.urls import display_url, scrub_urls
from flashfsm.display.explain import ExplainView, explain_view
from flashfsm.display.ledger import LedgerView, ledger_view, utc_text
from flashfsm.display.listing import state_text
from flashfsm.display.sources import Source, is_file_source, source_ledger
from flashfsm.display.text import duration_seconds, shown
from flashfsm.errors import message
from flashfsm.events.errors import FlashFsmError
from flashfsm.events.models import Event, HeartbeatObserved
from flashfsm.fsm.findings import summarize
from flashfsm.fsm.rules import RULE_NAMES
from flashfsm.fsm.run import replay_run
from flashfsm.postmortem import explain as ex
from flashfsm.postmortem.ledger import (
    CAUSES,
    UNPRICED,
    WASTE_CAUSES,
    Ledger,
    money_text,
)
from flashfsm.ui.index import Entry, Progress, StoreIndex
from flashfsm.views import (
    attempt_outcome,
    job_view,
    last_job_stream,
    run_label,
    stream_kind,
    view_now,
)

#: The colour of an unbilled cause on a cost strip (the billed ones: `render.COST_STYLE`).
UNBILLED_COLOUR = "#d6dbe4"
#: Rows on one page of the runs list (a store of thousands of streams is paged).
PAGE_ROWS = 200
#: The damaged streams the runs list names (the count says how many in all).
DAMAGED_SHOWN = 20
#: The columns of the runs list a user may sort by, with the row value each sorts on.
SORT_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "stream": lambda r: r["stream"],
    "kind": lambda r: r["kind"],
    "state": lambda r: r["state"] or "",
    "rule": lambda r: r.get("rule") or r.get("failure") or "",
    "gpu": lambda r: r.get("gpu") or "",
    "started": lambda r: r["first_at"] or 0.0,
    "span": lambda r: r["span_s"] or 0.0,
    "cost": lambda r: -1.0 if r.get("cost") is None else r["cost"],
    "wasted": lambda r: -1.0 if r.get("wasted") is None else r["wasted"],
    "owner": lambda r: r.get("lease_owner") or r.get("owner") or "",
    "events": lambda r: r["events"],
}


def stream_url(name: str, what: str = "s") -> str:
    """The address of stream `name`'s page (`what` "s"), its picture ("picture") or its
    cancel ("cancel"): the name percent-encoded whole, last in the path."""
    return f"/{what}/{quote(name, safe='')}"


def feed_url(name: str) -> str:
    """The live feed of stream `name`'s changes."""
    return f"/feed?stream={quote(name, safe='')}"


def _time(at: float | None) -> str:
    if at is None or not math.isfinite(at):
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float | None) -> str:
    return "" if seconds is None else render.duration_text(seconds)


def _money(value: float | None) -> str:
    return money_text(value)  # (None: "unpriced", as `cost` says it, never $0)


def _rate(value: float | None) -> str:
    return UNPRICED if value is None else f"{money_text(value)}/h"


def _shown(value: Any) -> str:
    """Text on a page as the CLI says it (`flashfsm.display.text.styled`): every
    unprintable character escaped and the password of any URL in it masked. The one filter
    (`t`) for every text a page shows from a log, a store or the platform (what the
    templates print bare is their own: labels, counts, `attempt 0`)."""
    return "" if value is None else shown(scrub_urls(str(value)))


_ENV = Environment(
    loader=PackageLoader("flashfsm.ui", "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters.update(t=_shown, time=_time, dur=_duration, money=_money, rate=_rate, url=stream_url)


def render_template(template: str, **values: Any) -> str:
    return _ENV.get_template(f"{template}.html").render(**values)


@dataclasses.dataclass(frozen=True)
class Frame:
    """What every page's frame shows: the store (as printed, secrets hidden), its mode, and
    why the store cannot be read now (`trouble`: the last read's error, None when it read)."""

    store: str
    read_only: bool
    trouble: Callable[[], str | None] = lambda: None


#: The pages that follow the store live besides a stream's own (the live feed of every
#: stream): the list, the costs and the fleet.
LIVE = ("runs", "costs", "fleet")


def page(
    frame: Frame,
    title: str,
    name: str,
    body: str,
    stream: str | None = None,
    version: int = 0,
    reading: Progress | None = None,
) -> str:
    """A whole page around `body` (already HTML); `version`, the index's when the page was
    rendered, lets the page's live feed tell what it missed before it connected. While the
    index's first read is under way (`reading`, its progress) the page says how far it has
    got, and reloads itself every `READING_RELOAD_S` until it is whole."""
    from markupsafe import Markup

    return render_template(
        "layout",
        title=title,
        page=name,
        body=Markup(body),
        store=frame.store,
        read_only=frame.read_only,
        feed=feed_url(stream) if stream is not None else ("/feed" if name in LIVE else None),
        version=version,
        reading=None if reading is None else reading_text(reading),
        reload_s=READING_RELOAD_S,
        trouble=frame.trouble(),
    )


#: How often a page rendered while the index's first read is under way reloads (seconds).
READING_RELOAD_S = 2


def reading_text(progress: Progress) -> str:
    """What a page says while the index's first read is under way."""
    if progress.read < progress.streams:
        return (
            f"reading the store… {progress.read:,} of {progress.streams:,} streams read: "
            "this page fills in as they are"
        )
    if progress.to_price:
        return (
            f"reading the store… all {progress.streams:,} streams read; "
            f"pricing {progress.priced:,} of {progress.to_price:,} runs and jobs"
        )
    return "reading the store…"


def message_page(
    frame: Frame,
    title: str,
    text: str,
    *,
    back: str | None = None,
    bad: bool = True,
    reading: Progress | None = None,
) -> str:
    """A page that says one thing (a refusal, a done action); with `reading`, one that
    waits for the index's first read (it loads again until that is whole)."""
    body = render_template(
        "message", title=title, text=text, back=back, cls="error" if bad else "note"
    )
    return page(frame, title, "message", body, reading=reading)


# --- the runs list ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Filters:
    """The runs list's filters, sort and page, as the query string gives them."""

    kind: str = ""
    state: str = ""
    rule: str = ""
    owner: str = ""
    since: str = ""
    q: str = ""
    sort: str = "started"
    desc: bool = True
    page: int = 1

    @classmethod
    def parse(cls, query: dict[str, str]) -> Filters:
        """Filters from a query string's values (unknown sorts and bad pages fall back)."""
        sort = query.get("sort", "started")
        try:
            number = max(1, min(int(query.get("page", "1")), 1_000_000))
        except ValueError:
            number = 1
        return cls(
            kind=query.get("kind", "")[:20],
            state=query.get("state", "")[:80],
            rule=query.get("rule", "")[:80],
            owner=query.get("owner", "")[:200],
            since=query.get("since", "")[:20],
            q=query.get("q", "")[:200],
            sort=sort if sort in SORT_KEYS else "started",
            desc=query.get("desc", "1" if "sort" not in query else "") not in ("", "0"),
            page=number,
        )

    def query(self, **changes: Any) -> str:
        """The query string of these filters with `changes`."""
        values = dataclasses.asdict(dataclasses.replace(self, **changes))
        values["desc"] = "1" if values["desc"] else "0"
        return urlencode({k: v for k, v in values.items() if v not in ("", None)})


def _rule_of(row: dict[str, Any]) -> str:
    return str(row.get("rule") or row.get("failure") or "")


def _owner_of(row: dict[str, Any]) -> str:
    return str(row.get("lease_owner") or row.get("owner") or "")


def state_cell(row: dict[str, Any]) -> str:
    """The state a row shows: `ls`'s state cell."""
    return state_text(row)


def select(rows: list[dict[str, Any]], f: Filters, newest: float | None) -> list[dict[str, Any]]:
    """The rows `f` keeps, sorted as it asks (a bad `since` is a `ValueError`)."""
    out = rows
    if f.kind:
        out = [r for r in out if r["kind"] == f.kind]
    # a filter's value is the option's text: outside text as shown (`shown`), or typed raw
    if f.state:
        out = [r for r in out if f.state in (r["state"], _shown(r["state"]))]
    if f.rule:
        out = [r for r in out if f.rule in (_rule_of(r), _shown(_rule_of(r)))]
    if f.owner:
        out = [r for r in out if f.owner in (_owner_of(r), _shown(_owner_of(r)))]
    if f.q:
        needle = f.q.lower()
        out = [r for r in out if needle in r["stream"].lower()]
    if f.since and newest is not None:
        window = duration_seconds(f.since)
        if window is None:
            raise ValueError(f"active within {f.since!r}: write a duration such as 90s, 15m, 12h")
        out = [r for r in out if (r["last_at"] or 0.0) >= newest - window]
    return sorted(out, key=SORT_KEYS[f.sort], reverse=f.desc)


#: The runs list's columns: (sort key, header, CSS class).
COLUMNS = (
    ("stream", "stream", ""),
    ("kind", "kind", "c-kind"),
    ("state", "state", ""),
    ("rule", "verdict", ""),
    ("rule", "rule", ""),
    ("gpu", "GPU", "c-gpu"),
    ("started", "started (UTC)", "num c-started"),
    ("span", "span", "num"),
    ("cost", "cost", "num"),
    ("wasted", "wasted", "num c-wasted"),
    ("owner", "watched by", "c-owner"),
    ("events", "events", "num c-events"),
)


def row_html(row: dict[str, Any], *, child: bool = False) -> str:
    """One stream's row of the runs list (`child`: an attempt's, nested under its run's)."""
    return render_template("row", r=row, state=state_cell(row), child=child)


def attempt_rows(index: StoreIndex, run: str) -> str | None:
    """The rows of the job streams run `run`'s attempts queued, in attempt order, as the
    list shows them nested under the run's row; None when `run` is no run of the index."""
    entry = index.entry(run)
    if entry is None or entry.row["kind"] != "run":
        return None
    jobs = [e for name in entry.jobs if (e := index.entry(name)) is not None]
    return "".join(row_html(e.row, child=True) for e in jobs)


@dataclasses.dataclass(frozen=True)
class Listing:
    """What the runs list shows for its filters: the chosen rows, the page of them shown, and
    the error a bad filter gave (the list is then shown without that filter)."""

    chosen: list[dict[str, Any]]
    shown: list[dict[str, Any]]
    page: int
    pages: int
    error: str | None


def listing(rows: list[dict[str, Any]], f: Filters, newest: float | None) -> Listing:
    """The rows `f` chooses, sorted, and the page of them `f` asks for."""
    error = None
    try:
        chosen = select(rows, f, newest)
    except ValueError as exc:
        error = str(exc)
        chosen = select(rows, dataclasses.replace(f, since=""), newest)
    pages = max(1, math.ceil(len(chosen) / PAGE_ROWS))
    number = min(f.page, pages)
    shown = chosen[(number - 1) * PAGE_ROWS : number * PAGE_ROWS]
    return Listing(chosen, shown, number, pages, error)


def runs_rows(index: StoreIndex, query: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The rows the runs page shows for `query`, as its table body's HTML (a live page
    renders them again when it missed changes or a new stream joined), and what its count
    line says: how many are chosen, of how many, and their bill (as shown)."""
    rows = index.rows()
    chosen = listing(rows, Filters.parse(query), index.newest)
    counts = {
        "shown": str(len(chosen.chosen)),
        "total": str(len(rows)),
        "bill": _money(shown_bill(index, chosen.chosen)),
    }
    return "".join(row_html(r) for r in chosen.shown), counts


def events_rows(index: StoreIndex, entry: Entry, after: int) -> str:
    """A stream's events after seq `after`, as rows of its page's events table."""
    events = index.read(entry.name)
    origin = events[0].at if events else 0.0
    return "".join(event_html(e, origin) for e in events if e.seq > after)


def shown_bill(index: StoreIndex, rows: Sequence[dict[str, Any]]) -> float | None:
    """What the streams of `rows` billed together: a job a run queued only when its run is
    not among them (None when a billed row has no price)."""
    names = {r["stream"] for r in rows}
    total = 0.0
    for r in rows:
        entry = index.entry(r["stream"])
        if entry is not None and entry.run is not None and entry.run in names:
            continue  # (in its run's bill)
        if r.get("cost") is None:
            if r.get("billed_s"):
                return None
            continue
        total += r["cost"]
    return total


def runs_page(frame: Frame, index: StoreIndex, query: dict[str, str]) -> str:
    """The runs and jobs list: filtered, sorted and paged on the server."""
    version = index.version
    f = Filters.parse(query)
    rows = index.rows()
    chosen = listing(rows, f, index.newest)
    total = shown_bill(index, chosen.chosen)
    choices = index.cached(
        "choices",
        lambda: (
            sorted({r["state"] for r in rows if r["state"]}),
            sorted({_rule_of(r) for r in rows} - {""}),
            sorted({_owner_of(r) for r in rows} - {""}),
        ),
    )
    body = render_template(
        "runs",
        f=f,
        rows=[_markup(row_html(r)) for r in chosen.shown],
        kinds=("run", "job", "sweeper"),
        states=choices[0],
        rules=choices[1],
        owners=choices[2],
        columns=COLUMNS,
        sort_url=lambda key: (
            "/?" + f.query(sort=key, desc=not f.desc if f.sort == key else key != "stream", page=1)
        ),
        page_url=lambda n: "/?" + f.query(page=n),
        shown_count=len(chosen.chosen),
        total=len(rows),
        total_cost=total,
        damaged=sorted(dict(index.damaged)),  # (a copy: the refresh adds to it)
        damaged_shown=DAMAGED_SHOWN,
        pages=chosen.pages,
        page_no=chosen.page,
        error=chosen.error,
    )
    return page(frame, "runs and jobs", "runs", body, version=version, reading=index.progress)


def _markup(html: str) -> Any:
    from markupsafe import Markup

    return Markup(html)


# --- a stream --------------------------------------------------------------------------------


def event_html(event: Event, origin: float, evidence: Sequence[int] = ()) -> str:
    """One event's row of a stream's events table."""
    return render_template(
        "event",
        seq=event.seq,
        offset=f"{event.at - origin:.0f}",
        kind=event.kind,
        summary=event_summary(event),
        evidence=event.seq in evidence,
    )


#: The most characters of an event's summary a row shows (the event has all).
SUMMARY_CAP = 300
_ENVELOPE = frozenset({"stream", "seq", "id", "at", "kind", "v"})


def event_summary(event: Event) -> str:
    """One line of an event: a job event's summary (`findings.summarize`), else its fields."""
    text = summarize(event)
    if text == event.kind:
        fields = event.model_dump(mode="json", exclude=set(_ENVELOPE))
        text = ", ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, "", [], {}))
    return text if len(text) <= SUMMARY_CAP else text[: SUMMARY_CAP - 1] + "…"


def _heartbeat(events: Sequence[Event], now: float, *, done: bool) -> str | None:
    last = next((e for e in reversed(events) if isinstance(e, HeartbeatObserved)), None)
    if last is None:
        return None
    when = "the verdict" if done else "now"
    return f"{summarize(last)} ({_duration(max(0.0, now - last.at))} before {when})"


def _strip(led: Ledger) -> list[dict[str, Any]]:
    parts = []
    for cause in CAUSES:
        seconds = led.seconds(cause)
        if seconds <= 0:
            continue
        billed = led.billed_seconds(cause)
        money = led.money(cause) if billed else None
        text = f"{cause.value} {render.duration_text(seconds)}"
        if billed:
            text += f" billed {_money(money)}"
        if cause in WASTE_CAUSES:
            text += " (waste)"
        colour = render.COST_STYLE.get(cause, UNBILLED_COLOUR)
        parts.append({"colour": colour, "weight": f"{seconds:.3f}", "label": text})
    return parts


def _cost_line(led: Ledger) -> str:
    """A ledger in one line: billed time and money, waste, and an open bill with its rate."""
    money = led.money()
    priced = f"billed {_duration(led.billed_s)} {_money(money)}"
    if money is not None:
        priced += f", waste {_money(led.waste_money)}"
    opened = led.open_attempts[0].open_since if led.open_attempts else None
    if opened is None:
        return priced
    return f"{priced} · still billing since {utc_text(opened)} at {_rate(led.open_rate_per_hour)}"


def ledger_html(view: LedgerView) -> str:
    """A stream's bill as a section of its page: the one view `flashfsm cost STREAM` prints
    (`flashfsm.display.ledger.LedgerView`) in markup, its job streams linked."""
    return render_template("cost", led=view)


def stream_ledger(index: StoreIndex, entry: Entry, events: list[Event]) -> Ledger | None:
    """The ledger a stream's page shows, priced as `flashfsm cost STREAM`, its `explain` and its
    `timeline` price it (`flashfsm.display.sources.source_ledger`: open bills up to the newest
    event of its own logs); a job a run queued shows its attempt's share of the run's. None
    for a sweeper (or a log that cannot be priced)."""
    kind = entry.row["kind"]
    if kind == "sweeper":
        return None
    owner = entry.run if kind == "job" and entry.run is not None else entry.name
    if is_file_source(owner):  # its name would be read as a file: the index's own ledger
        return entry.ledger
    owner_events = events if owner == entry.name else index.read(owner)
    try:
        led = source_ledger(_source(index, owner, owner_events), None, _opener(index))
    except (FlashFsmError, ValueError, OSError, ImportError):
        return entry.ledger
    if owner == entry.name:
        return led
    mine = tuple(a for a in led.attempts if a.stream == entry.name)
    state = entry.row["state"] if entry.row.get("ok") is not None else None
    return Ledger(entry.name, "job", mine, state, led.as_of)


def _source(index: StoreIndex, name: str, events: list[Event]) -> Source:
    """A stream of the index as a SOURCE: its events, the streams beside it read through the
    index."""
    return Source(name, events, index.read, display_url(index.url))


def _opener(index: StoreIndex) -> Callable[[], Any]:
    """How a page opens the index's store again (read-only) for the sweeper streams a bill
    ends on, as `flashfsm cost` does."""
    return lambda: open_store(index.url, read_only=True)


def live_html(
    index: StoreIndex, entry: Entry, events: list[Event], wall: float, *, cancel: str = ""
) -> str:
    """The parts of a stream's page that change as it runs: its facts, verdict, armed rules,
    cost, `explain` and `why-not`."""
    row = entry.row
    kind = row["kind"]
    values: dict[str, Any] = {
        "kind": kind,
        "state": state_cell(row),
        "verdict": None,
        "ok": row.get("ok"),
        "rule": row.get("rule"),
        "evidence": (),
        "gpu": row.get("gpu"),
        "owner": row.get("lease_owner") or row.get("owner"),
        "count": len(events),
        "first": events[0].at if events else None,
        "last": events[-1].at if events else None,
        "heartbeat": None,
        "cost": None,
        "timers": (),
        "strip": (),
        "ledger": "",
        "explain": "",
        "why_not": (),
        "cancel": _markup(cancel) if cancel else "",
    }
    if row.get("ok") is not None:
        values["verdict"] = "success" if row["ok"] else str(row.get("failure"))
    led = stream_ledger(index, entry, events)
    if led is not None and led.attempts:
        values["cost"] = _cost_line(led)
        values["strip"] = _strip(led)
        values["ledger"] = _markup(ledger_html(ledger_view(led)))
    job_events: list[Event] = []
    if kind == "job":
        job_events = events
    elif kind == "run":
        try:
            last = last_job_stream(replay_run(events))
        except FlashFsmError:
            last = None
        job_events = index.read(last) if last is not None and index.entry(last) else []
    if job_events:
        view = job_view(job_events, wall)
        values["timers"] = view.timers if view.verdict is None else ()
        values["heartbeat"] = _heartbeat(
            job_events, view_now(job_events, wall), done=view.verdict is not None
        )
        if view.verdict is not None:
            values["evidence"] = view.verdict.evidence if kind == "job" else ()
        values["why_not"] = tuple(
            (rule, ex.why_not_report(job_events, rule).text)
            for rule in RULE_NAMES
            if view.verdict is None or view.verdict.rule != rule
        )
    if is_file_source(entry.name):  # `explain NAME` would read a file, not this stream
        note = f"{entry.name}: named like a .jsonl file; run flashfsm explain on it"
        values["explain"] = _markup(explain_html(None, entry.name, note))
    elif events:  # (an empty stream has nothing to explain: `explain` says so, exit 1)
        try:
            view = explain_view(_source(index, entry.name, events), _opener(index))
        except (FlashFsmError, ValueError, OSError) as exc:
            note = f"explain cannot read it: {message(exc)}"
            values["explain"] = _markup(explain_html(None, entry.name, note))
        else:
            values["explain"] = _markup(explain_html(view, entry.name))
    return render_template("live", **values)


def explain_html(view: ExplainView | None, page_stream: str, note: str = "") -> str:
    """`explain` of a stream as the log stands, as a section of its page: the one view the
    CLI prints (`flashfsm.display.explain`) in markup, its evidence linked to the events'
    rows (on `page_stream`'s page, or its job stream's); or `note`, why there is none."""
    return render_template("explain", x=view, page_stream=page_stream, explain_note=note)


def _attempts(entry: Entry, events: list[Event], led: Ledger | None) -> list[dict[str, Any]]:
    if entry.row["kind"] != "run":
        return []
    try:
        run = replay_run(events)
    except FlashFsmError:
        return []
    bills = {a.stream: a for a in led.attempts} if led is not None else {}
    out = []
    for n, a in enumerate(run.attempts):
        bill = bills.get(a.job_stream)
        out.append(
            {
                "n": n,
                "gpu": a.started.gpu_class,
                "stream": a.job_stream,
                "outcome": attempt_outcome(a, run),
                "billed": None if bill is None else bill.billed_s,
                "cost": None if bill is None else bill.money(),
            }
        )
    return out


def stream_page(
    frame: Frame, index: StoreIndex, entry: Entry, wall: float, cancel: str, *, follow: bool
) -> str:
    """A stream's page: its facts and verdict, picture, attempts, events and explanations;
    with `follow`, a section the page's script fills with the worker's live log."""
    version = index.version
    events = index.read(entry.name)
    kind = stream_kind(events)
    evidence: tuple[int, ...] = ()
    if kind == "job":
        view = job_view(events, wall)
        evidence = view.verdict.evidence if view.verdict is not None else ()
    origin = events[0].at if events else 0.0
    body = render_template(
        "stream",
        name=entry.name,
        live=_markup(live_html(index, entry, events, wall, cancel=cancel)),
        follow=follow,
        picture=bool(events),
        attempts=_attempts(entry, events, stream_ledger(index, entry, events)),
        events=[_markup(event_html(e, origin, evidence)) for e in events],
        events_note=f"{len(events)} event(s), times from the first "
        f"({_time(origin)} UTC); the verdict's evidence is marked",
    )
    label = run_label(replay_run(events)) if kind == "run" else entry.row["state"] or ""
    return page(
        frame,
        f"{entry.name} {label}",
        "stream",
        body,
        stream=entry.name,
        version=version,
        reading=index.progress,
    )


def picture_svg(index: StoreIndex, entry: Entry) -> str:
    """A stream's timeline picture, as `flashfsm timeline` draws it (its cost included)."""
    events = index.read(entry.name)
    led = stream_ledger(index, entry, events)
    pic = render.picture(events, index.read, cost=led if led is not None and led.attempts else None)
    return render.svg(pic)


def cancel_form(frame: Frame, name: str, csrf: str) -> str:
    """The confirmation asked before a run is cancelled."""
    return page(frame, f"cancel {name}", "cancel", render_template("cancel", name=name, csrf=csrf))
