"""The web view (`flashfsm ui`) driven in a real headless Chromium.

One `flashfsm ui` process serves, read-only, a store that holds the demo's five finished runs,
a run whose attempt is still open, and streams whose names, error texts and log lines are
hostile; a second process serves another store with `--allow-cancel`. Debian's Chromium
(`/usr/bin/chromium`, never a downloaded browser) opens the pages: the tests click, fill and
submit as a user would, append events to the store while a page is open, and then read the
store or the page back. The layout tests measure every page at 1280 and 800 px wide with a
script added by the test (`tests.ui_browser.LAYOUT_JS`) and save a screenshot of each (under
pytest's tmp dir, and in `$FLASHFSM_UI_SHOTS` when it is set).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest

from flashfsm.adapters.simulator import SimClock, Simulator
from flashfsm.adapters.stores import open_store
from flashfsm.cli.common import shown
from flashfsm.cli.store import stream_row
from flashfsm.demo import run_demo
from flashfsm.events.models import (
    CancelRequested,
    HeartbeatObserved,
    RunConcluded,
    StatusObserved,
)
from tests.ui_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    EVIL_ERROR,
    EVIL_JOB,
    EVIL_LINES,
    EVIL_RUN,
    EVIL_WATCHER,
    INJECTED_JS,
    LAYOUT_JS,
    RAW,
    SCRIPTS_JS,
    SHOTS_ENV,
    OpenRun,
    UiServer,
    append,
    conclude,
    write_hostile,
    write_open_run,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)",
)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)

TAG = "0b1"
LIVE_TAG = "live1"
#: The smallest text a page may draw (px).
MIN_FONT_PX = 11.0
WIDTHS = (1280, 800)
#: How long a live change may take to reach an open page: the index polls every 0.1 s, and a
#: stream page refreshes its live part 0.5 s after a change.
LIVE_MS = 10_000


# --- fixtures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stores:
    """The read-only server's store (`url`) and the cancel server's (`cancel_url`)."""

    url: str
    cancel_url: str
    live: OpenRun  # open in `url`
    to_cancel: OpenRun  # open in `cancel_url`

    def read(self, stream: str, url: str | None = None) -> list[Any]:
        store = open_store(url or self.url, read_only=True)
        try:
            return store.read(stream)
        finally:
            store.close()

    def rows(self) -> list[dict[str, Any]]:
        """`flashfsm ls`'s row of every stream of `url` (what the list must show)."""
        store = open_store(self.url, read_only=True)
        try:
            return [stream_row(name, store.read(name)) for name in store.streams()]
        finally:
            store.close()


def _newest(url: str) -> float:
    store = open_store(url, read_only=True)
    try:
        return max((e.at for name in store.streams() for e in store.read(name)), default=0.0)
    finally:
        store.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    home = tmp_path_factory.mktemp("ui-stores")
    url = f"sqlite:///{home}/demo.db"
    run_demo(url, say=lambda _line: None, tag=TAG)
    # after the demo's last event: the open run's bill is counted up to the store's newest
    start = max(_newest(url), time.time()) + 60
    store = open_store(url)
    try:
        live = write_open_run(store, LIVE_TAG, start)
        write_hostile(store, "evil", start - 3600)
    finally:
        store.close()
    cancel_url = f"sqlite:///{home}/cancel.db"
    store = open_store(cancel_url)
    try:
        to_cancel = write_open_run(store, "c1", start)
        write_hostile(store, "evil", start - 3600)
    finally:
        store.close()
    return Stores(url, cancel_url, live, to_cancel)


@pytest.fixture(scope="module")
def ui(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    server = UiServer(stores.url, cwd=tmp_path_factory.mktemp("ui-ro"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def ui_cancel(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    server = UiServer(stores.cancel_url, "--allow-cancel", cwd=tmp_path_factory.mktemp("ui-cancel"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Tab:
    """A page of its own browser context, with every dialog and console error it raised."""

    page: Page
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def open_tab(browser: Browser, width: int = 1280) -> Tab:
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(LIVE_MS)
    tab = Tab(context.new_page())

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    tab.page.on("dialog", on_dialog)
    tab.page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    tab.page.on("pageerror", lambda exc: tab.errors.append(f"page error: {exc}"))
    return tab


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    tab = open_tab(browser)
    try:
        yield tab
    finally:
        tab.page.context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-shots")


def screenshot(page: Page, shots: Path, name: str) -> Path:
    """A full-page PNG of `page` in `shots` (and in `$FLASHFSM_UI_SHOTS` when set)."""
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    wanted = os.environ.get(SHOTS_ENV)
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(wanted) / path.name)
    return path


def stream_path(name: str, what: str = "s") -> str:
    return f"/{what}/{quote(name, safe='')}"


def row(page: Page, stream: str) -> Any:
    """The runs list's row of `stream` (keyed by the name as shown)."""
    return page.locator(f"table.streams tbody tr[data-stream={_css_string(shown(stream))}]")


def _css_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def listed(page: Page) -> list[str]:
    """The stream names the runs list shows, in order."""
    return page.locator("table.streams tbody tr:not(.child) td.name a").all_inner_texts()


def picture_loads(page: Page) -> dict[str, Any]:
    """Wait for the page's timeline <img> to finish loading; its natural and drawn size."""
    page.wait_for_function("() => document.getElementById('picture').complete")
    return page.evaluate(
        "() => { const i = document.getElementById('picture');"
        " return {natural: i.naturalWidth, drawn: i.getBoundingClientRect().width}; }"
    )


def mark_no_reload(page: Page) -> None:
    page.evaluate("() => { window.__no_reload = 'still here'; }")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("() => window.__no_reload") == "still here", "the page was reloaded"


# --- the list, a run, its picture -------------------------------------------------------------


def test_the_list_shows_every_stream_and_its_filters_keep_only_what_they_name(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    rows = stores.rows()
    page.goto(ui.url("/"))
    assert sorted(listed(page)) == sorted(shown(r["stream"]) for r in rows)
    assert f"{len(rows)} of {len(rows)} stream(s)" in page.locator("p.count").inner_text()

    page.select_option("select[name=kind]", "run")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"kind=run"))
    runs = sorted(shown(r["stream"]) for r in rows if r["kind"] == "run")
    assert sorted(listed(page)) == runs
    assert set(page.locator("table.streams tbody td.c-kind").all_inner_texts()) == {"run"}
    assert f"{len(runs)} of {len(rows)} stream(s)" in page.locator("p.count").inner_text()

    page.goto(ui.url("/"))
    page.select_option("select[name=state]", "STALLED")
    page.fill("input[name=q]", "demo")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"state=STALLED"))
    stalled = sorted(r["stream"] for r in rows if r["state"] == "STALLED" and "demo" in r["stream"])
    assert len(stalled) == 2  # the crash loop's first attempt and the stall's
    assert sorted(listed(page)) == stalled
    assert page.locator("input[name=q]").input_value() == "demo"

    page.click("table.streams thead a:text-is('events')")  # sort by events, most first
    page.wait_for_url(re.compile(r"sort=events"))
    counts = [int(n) for n in page.locator("table.streams tbody td.c-events").all_inner_texts()]
    assert counts == sorted(counts, reverse=True) and len(counts) == 2


def test_a_run_opened_from_the_list_shows_its_attempts_events_and_a_picture_that_loads(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    name = f"run-demo-{TAG}-stall-s3"
    page.goto(ui.url("/"))
    row(page, name).locator("td.name a").click()
    page.wait_for_url(ui.url(stream_path(name)))
    assert page.locator("h1").inner_text() == name
    assert page.locator("dl.facts dd.state").inner_text() == "SUCCEEDED"
    events = stores.read(name)
    assert page.locator("#events tr").count() == len(events)
    attempts = page.locator("h2:text-is('Attempts') + div table tbody tr")
    assert attempts.count() == 2
    explained = page.locator("#explain:has(h2:text-is('Explain, as the log stands')) p")
    assert explained.first.inner_text().startswith(f"run {name}:")
    assert page.locator("#explain p.verdict span.ok").inner_text() == "SUCCEEDED"
    size = picture_loads(page)
    assert size["natural"] > 0, "the timeline picture did not load"
    assert tab.errors == [] and tab.dialogs == []


def test_the_picture_of_a_hostile_named_run_and_job_loads(ui: UiServer, tab: Tab) -> None:
    for name in (EVIL_RUN, EVIL_JOB):
        tab.page.goto(ui.url(stream_path(name)))
        assert picture_loads(tab.page)["natural"] > 0, f"{name!r}: the picture did not load"


def test_a_run_jobs_picture_gives_the_cost_its_page_gives(ui: UiServer, tab: Tab) -> None:
    job = f"job-demo-{TAG}-stall-s3-a0"
    tab.page.goto(ui.url(stream_path(job)))
    cost = tab.page.locator("#live-part dl.facts dt:text-is('cost') + dd").inner_text()
    money = re.search(r"\$[\d.]+", cost)
    assert money is not None, cost
    svg = tab.page.request.get(ui.url(stream_path(job, "picture"))).text()
    total = re.search(r'class="total-cost"[^>]*>([^<]*)<', svg)
    assert total is not None
    assert money.group(0) in total.group(1), (cost, total.group(1))


# --- live updates -------------------------------------------------------------------------------


def _append_later(url: str, stream: str, model: type[Any], seconds: float, **fields: Any) -> Any:
    """Append a `model` event to `stream`, `seconds` after the store's newest event."""
    at = _newest(url) + seconds
    store = open_store(url)
    try:
        return append(store, stream, model, at, **fields)
    finally:
        store.close()


def test_the_list_row_of_an_open_job_follows_an_appended_event_without_a_reload(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    job = stores.live.job
    page.goto(ui.url("/"))
    page.wait_for_selector("#live.on")  # the feed is open
    mark_no_reload(page)
    events = row(page, job).locator("td.c-events")
    before = len(stores.read(job))
    assert events.inner_text() == str(before)

    _append_later(stores.url, job, StatusObserved, 10, status="IN_PROGRESS")
    page.wait_for_function(
        "([key, n]) => { const tr = [...document.querySelectorAll('table.streams tbody tr')]"
        ".find((r) => r.dataset.stream === key);"
        " return tr && tr.querySelector('td.c-events').textContent.trim() === n; }",
        arg=[shown(job), str(before + 1)],
    )
    assert "flash" in (row(page, job).get_attribute("class") or "")
    assert_not_reloaded(page)

    late = f"job-late-{LIVE_TAG}"
    total = int(page.locator("#total-count").inner_text())
    _append_later(stores.url, late, StatusObserved, 1, status="IN_QUEUE")
    row(page, late).wait_for()  # a new stream joins the list, where the server sorts it
    assert page.locator("#total-count").inner_text() == str(total + 1)
    assert listed(page) == server_order(page, ui, "/rows.json")
    assert_not_reloaded(page)


def wait_listed(page: Page, server: UiServer, stream: str) -> None:
    """Wait until `server`'s view has read `stream` (it polls the store every 0.1 s)."""
    deadline = time.monotonic() + LIVE_MS / 1000
    while not page.request.get(server.url(f"/rows.json?q={quote(stream)}")).json()["streams"]:
        assert time.monotonic() < deadline, f"the view never listed {stream}"
        time.sleep(0.1)


def server_order(page: Page, ui: UiServer, path: str) -> list[str]:
    """The stream names, as shown, that the view's `/rows.json` lists for `path`'s query, in
    its order (the first page's worth)."""
    rows = page.request.get(ui.url(path)).json()["streams"]
    return [shown(r["stream"]) for r in rows][: len(listed(page))]


def test_new_streams_join_a_filtered_list_in_order_without_a_reload(
    ui: UiServer, stores: Stores, tab: Tab, shots: Path
) -> None:
    page = tab.page
    page.goto(ui.url("/?kind=run&sort=stream"))
    page.wait_for_selector("#live.on")
    mark_no_reload(page)
    shown_before = int(page.locator("#shown-count").inner_text())
    store = open_store(stores.url)
    try:  # a run named to sort first, and its job (which the filter leaves out)
        opened = write_open_run(store, "join", _newest(stores.url) + 5, run="run-0-joins")
    finally:
        store.close()
    row(page, opened.run).wait_for()
    assert listed(page)[0] == shown(opened.run)
    assert listed(page) == server_order(page, ui, "/rows.json?kind=run&sort=stream")
    assert row(page, opened.job).count() == 0
    assert page.locator("#shown-count").inner_text() == str(shown_before + 1)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, shots, f"live-joined-{width}")
    assert_not_reloaded(page)


def test_an_open_job_page_adds_appended_events_and_refreshes_its_facts_without_a_reload(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    job = stores.live.job
    page.goto(ui.url(stream_path(job)))
    page.wait_for_selector("#live.on")
    mark_no_reload(page)
    before = page.locator("#events tr").count()
    assert before == len(stores.read(job))

    beat = _append_later(stores.url, job, HeartbeatObserved, 30, stage="eval", step=4242)
    page.wait_for_selector(f"#ev-{beat.seq}")
    assert "heartbeat eval step 4242" in page.locator(f"#ev-{beat.seq}").inner_text()
    facts = page.locator("#live-part dl.facts")
    facts.locator("dd", has_text="eval step 4242").wait_for()
    page.wait_for_function(
        "(n) => document.querySelector('#live-part dl.facts').innerText.includes(n + ' · ')",
        arg=str(before + 1),
    )
    # an appended event's hostile text is as inert live as in a rendered page
    hostile = _append_later(stores.url, job, HeartbeatObserved, 10, stage=EVIL_LINES[1], step=1)
    page.wait_for_selector(f"#ev-{hostile.seq}")
    assert EVIL_LINES[1] in page.locator(f"#ev-{hostile.seq}").inner_text()
    assert page.evaluate(INJECTED_JS) == []
    assert page.locator("#events tr").count() == before + 2
    assert_not_reloaded(page)
    assert tab.dialogs == []


def test_an_open_run_page_follows_its_open_bill_as_its_job_appends_without_a_reload(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    page.goto(ui.url(stream_path(stores.live.run)))
    page.wait_for_selector("#live.on")
    mark_no_reload(page)
    cost = page.locator("#live-part dl.facts dt:text-is('cost') + dd")
    before = cost.inner_text()
    assert "still billing" in before

    _append_later(stores.url, stores.live.job, StatusObserved, 600, status="IN_PROGRESS")
    page.wait_for_function(
        "(old) => { const dd = [...document.querySelectorAll('#live-part dl.facts dt')]"
        ".find((dt) => dt.textContent === 'cost').nextElementSibling;"
        " return dd.textContent !== old; }",
        arg=before,
    )
    assert cost.inner_text() != before
    assert_not_reloaded(page)


def test_an_event_appended_while_the_page_feed_is_connecting_still_reaches_the_page(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    held: list[Any] = []
    page.route("**/feed?*", lambda route: held.append(route))  # held until the test says
    page.goto(ui.url(stream_path(stores.live.job)))
    page.wait_for_function("() => document.readyState === 'complete'")
    beat = _append_later(stores.url, stores.live.job, HeartbeatObserved, 5, stage="gap", step=7)
    page.wait_for_timeout(500)  # the index has read it (it polls every 0.1 s)
    assert len(held) == 1
    held[0].continue_()
    page.wait_for_selector("#live.on")
    page.wait_for_selector(f"#ev-{beat.seq}", timeout=3000)


def test_a_run_row_opens_to_its_attempts_nested_under_it_and_they_stay_live(
    ui: UiServer, stores: Stores, tab: Tab, shots: Path
) -> None:
    page = tab.page
    run, job = stores.live.run, stores.live.job
    page.goto(ui.url(f"/?q={quote(run)}"))
    page.wait_for_selector("#live.on")
    mark_no_reload(page)
    button = row(page, run).locator("button.attempts")
    assert button.inner_text() == "▸ 1 attempt" and button.get_attribute("aria-expanded") == "false"
    button.click()
    kid = page.locator(f"tr.child[data-parent={_css_string(shown(run))}]")
    kid.wait_for()
    assert kid.get_attribute("data-stream") == shown(job)
    assert page.evaluate(  # nested right under its run's row
        "(key) => [...document.querySelectorAll('table.streams tbody tr')]"
        ".find((tr) => tr.dataset.stream === key).nextElementSibling.classList.contains('child')",
        shown(run),
    )
    assert button.get_attribute("aria-expanded") == "true" and "▾" in button.inner_text()
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, shots, f"attempts-open-{width}")
    before = int(kid.locator("td.c-events").inner_text())
    _append_later(stores.url, job, StatusObserved, 10, status="IN_PROGRESS")
    page.wait_for_function(  # the nested row follows its job's appends
        "([parent, n]) => [...document.querySelectorAll('tr.child')].some((tr) => "
        "tr.dataset.parent === parent && "
        "tr.querySelector('td.c-events').textContent.trim() === n)",
        arg=[shown(run), str(before + 1)],
    )
    row(page, run).locator("button.attempts").click()
    page.wait_for_function("() => !document.querySelector('tr.child')")
    assert_not_reloaded(page)
    assert page.request.get(ui.url(f"/?part=attempts&run={quote(job)}")).status == 404  # no run


def test_the_costs_and_fleet_pages_follow_the_store_without_a_reload(
    ui: UiServer, stores: Stores, browser: Browser, shots: Path
) -> None:
    costs, fleet = open_tab(browser).page, open_tab(browser).page
    try:
        costs.goto(ui.url("/costs"))
        fleet.goto(ui.url("/fleet"))
        for page in (costs, fleet):
            page.wait_for_selector("#live.on")
            mark_no_reload(page)
        billed = costs.locator("p.count").inner_text()
        run = "run-live-fleetjoin"
        assert run not in fleet.locator("main").inner_text()
        store = open_store(stores.url)
        try:  # a new open run (a lease-less open stream) whose job bills on at once
            opened = write_open_run(store, "fleetjoin", _newest(stores.url) + 5, run=run)
        finally:
            store.close()
        _append_later(stores.url, opened.job, StatusObserved, 3600, status="IN_PROGRESS")
        fleet.locator("main td.name a", has_text=run).wait_for()
        costs.wait_for_function(
            "(old) => document.querySelector('p.count').innerText !== old", arg=billed
        )
        for name, page in (("costs", costs), ("fleet", fleet)):
            assert page.locator("h1").count() == 1  # the content replaced, not nested
            assert_not_reloaded(page)
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                screenshot(page, shots, f"live-{name}-{width}")
    finally:
        costs.context.close()
        fleet.context.close()


def test_a_running_job_s_worker_log_is_followed_on_its_page_and_its_run_s_without_a_reload(
    browser: Browser, shots: Path, tmp_path: Path
) -> None:
    # a simulator worker trains the job; the view reads its log with the simulator's key
    with Simulator(clock=SimClock(speed=0, start=time.time() - 3600)) as sim:
        key = sim.accounts[0].key
        endpoint = sim.add_endpoint(scenario="training")
        with sim.client() as client:
            job_id = client.run(endpoint, {})
            sim.clock.advance(60)
            worker = client.job_status(endpoint, job_id)["workerId"]
        hostile = f"key={key} <b>bold</b> <img src=x onerror=alert(1)> \x1b[2J"
        sim.plant_log(job_id, hostile)
        url = f"sqlite:///{tmp_path}/follow.db"
        store = open_store(url)
        try:
            opened = write_open_run(
                store, "fol", sim.clock() - 120, endpoint_id=endpoint, job_id=job_id,
                worker_id=worker,
            )  # fmt: skip
        finally:
            store.close()
        server = UiServer(url, cwd=tmp_path, env=sim.env(hf=False))
        tabs = {name: open_tab(browser) for name in (opened.job, opened.run)}
        try:
            for name, tab in tabs.items():
                page = tab.page
                page.goto(server.url(stream_path(name)))
                page.wait_for_selector("#live.on")
                mark_no_reload(page)
                log = page.locator("#worker-log-body pre.log")
                log.wait_for()
                text = log.inner_text()
                assert "rl_train_start" in text
                assert worker in page.locator("#worker-log").inner_text()
                # the key masked, the markup and the escape shown as text, nothing run
                assert key not in page.content()
                assert "key=[REDACTED] <b>bold</b> <img src=x onerror=alert(1)> \\x1b[2J" in text
                assert page.locator("#worker-log pre.log b, #worker-log pre.log img").count() == 0
                assert page.evaluate(INJECTED_JS) == []
            sim.clock.advance(900)  # fifteen minutes more of training: new lines in its log
            for name, tab in tabs.items():
                page = tab.page
                page.wait_for_function(
                    "(old) => { const p = document.querySelector('#worker-log-body pre.log');"
                    " return p && !old.includes(p.innerText.trim().split('\\n').pop()); }",
                    arg=text,
                    timeout=3 * LIVE_MS,
                )
                pre = page.locator("#worker-log-body pre.log")
                at_end = pre.evaluate("(p) => p.scrollTop + p.clientHeight >= p.scrollHeight - 4")
                assert at_end, "a reader at the log's end is kept at its end"
                assert_not_reloaded(page)
                for width in WIDTHS:
                    page.set_viewport_size({"width": width, "height": 900})
                    kind = "run" if name == opened.run else "job"
                    screenshot(page, shots, f"followed-log-{kind}-{width}")
                    assert check_layout(page) == [], f"screenshots in {shots}"
            # the job ends: its page says so and stops asking
            store = open_store(url)
            try:
                append(store, opened.job, StatusObserved, sim.clock(), status="COMPLETED")
                conclude(store, opened.job, sim.clock())
            finally:
                store.close()
            page = tabs[opened.job].page
            page.locator("#worker-log-body [data-done]").wait_for(timeout=3 * LIVE_MS)
            assert "has ended" in page.locator("#worker-log-body").inner_text()
            reads = len(sim.requests_for("worker_logs"))
            page.wait_for_timeout(4000)  # longer than a poll: the ended page asks no more
            assert len(sim.requests_for("worker_logs")) <= reads + 1  # (the run's tab may ask)
            for tab in tabs.values():
                assert tab.dialogs == [] and tab.errors == []
        finally:
            for tab in tabs.values():
                tab.page.context.close()
            server.stop()


def test_ctrl_c_stops_the_view_within_a_second_with_browser_tabs_on_their_feeds(
    stores: Stores, browser: Browser, tmp_path: Path
) -> None:
    server = UiServer(stores.url, cwd=tmp_path)
    tabs = [open_tab(browser) for _ in range(2)]
    try:
        tabs[0].page.goto(server.url("/"))
        tabs[1].page.goto(server.url(stream_path(stores.live.job)))
        for tab in tabs:
            tab.page.wait_for_selector("#live.on")  # each tab's feed is open
        asked = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        code = server.process.wait(10)
        took = time.monotonic() - asked
        err = server.process.stderr.read().decode() if server.process.stderr else ""
    finally:
        for tab in tabs:
            tab.page.context.close()
        server.stop()
    assert code == 130 and err.strip().splitlines() == ["flashfsm ui: stopped"], err
    # (designed: well within a second; allowed 3 s on a loaded two-core machine)
    assert took < 3.0, f"{took:.2f} s to stop"


# --- cancel -------------------------------------------------------------------------------------


def test_without_allow_cancel_no_cancel_is_offered_and_the_route_refuses_with_403(
    ui: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    run = stores.live.run
    before = stores.read(run)
    page.goto(ui.url(stream_path(run)))
    assert page.locator("a[href^='/cancel/']").count() == 0
    assert "read-only" in page.locator("#live-part p.actions").inner_text()

    answer = page.request.get(ui.url(stream_path(run, "cancel")))
    assert answer.status == 403
    form = {"by": "mallory", "reason": "no flag", "csrf": "guess"}
    for name in (run, EVIL_RUN):
        answer = page.request.post(ui.url(stream_path(name, "cancel")), form=form)
        assert answer.status == 403, name
        assert "read-only" in answer.text()
    page.goto(ui.url(stream_path(run, "cancel")))
    assert page.locator("h1").inner_text() == "refused"

    after = stores.read(run)  # a cancel is written before its answer: none was
    assert len(after) == len(before)
    assert not any(isinstance(e, CancelRequested) for e in after + stores.read(EVIL_RUN))


def cancel_through_the_page(page: Page, server: UiServer, run: str, asker: str) -> None:
    """Open `run`'s page, follow its cancel link, fill the confirmation and submit it."""
    page.goto(server.url(stream_path(run)))
    page.click("#live-part a.button.danger")
    page.wait_for_url(server.url(stream_path(run, "cancel")))
    assert page.locator("h1").inner_text() == f"Cancel {shown(run)}?"
    page.get_by_label("your name").fill(asker)
    page.get_by_label("reason").fill(f"asked by {asker}")
    page.click("form.confirm button[type=submit]")
    page.wait_for_url(server.url(stream_path(run)))


def test_with_allow_cancel_a_confirmed_cancel_is_recorded_naming_who_asked(
    ui_cancel: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    run = stores.to_cancel.run
    url = stores.cancel_url

    # a form from elsewhere, one from another site, and one naming nobody, append nothing
    page.goto(ui_cancel.url(stream_path(run, "cancel")))
    here = {"origin": ui_cancel.base}
    answer = page.request.post(
        ui_cancel.url(stream_path(run, "cancel")),
        form={"by": "eve", "csrf": "forged"},
        headers=here,
    )
    assert answer.status == 403
    nonce = page.locator("form.confirm input[name=csrf]").input_value()
    answer = page.request.post(
        ui_cancel.url(stream_path(run, "cancel")),
        form={"by": "eve", "csrf": nonce},
        headers={"origin": "http://evil.example"},
    )
    assert answer.status == 403
    answer = page.request.post(
        ui_cancel.url(stream_path(run, "cancel")), form={"by": "  ", "csrf": nonce}, headers=here
    )
    assert answer.status == 400
    assert not any(isinstance(e, CancelRequested) for e in stores.read(run, url))

    asker = "Ada Lovelace"
    cancel_through_the_page(page, ui_cancel, run, asker)
    cancels = [e for e in stores.read(run, url) if isinstance(e, CancelRequested)]
    assert len(cancels) == 1
    assert cancels[0].by.startswith(asker + " ") and "flashfsm ui" in cancels[0].by
    assert cancels[0].reason == f"asked by {asker}"
    page.reload()  # the run's page, rendered after the cancel (see test_…_feed_is_connecting)
    assert page.locator("#events tr", has_text="CancelRequested").count() == 1


def test_a_cancelled_run_shows_its_cancel_pending_then_its_end_without_a_reload(
    ui_cancel: UiServer, stores: Stores, tab: Tab, shots: Path
) -> None:
    page = tab.page
    url = stores.cancel_url
    store = open_store(url)
    try:
        opened = write_open_run(store, "pending", _newest(url) + 5)
    finally:
        store.close()
    run = opened.run
    wait_listed(page, ui_cancel, run)
    cancel_through_the_page(page, ui_cancel, run, "Grace Hopper")
    state = page.locator("#live-part dl.facts dd.state")
    assert state.inner_text().startswith("cancel pending")
    assert page.locator("#live-part a.button.danger").count() == 0
    assert "cancel pending" in page.locator("#live-part p.actions").inner_text()
    assert page.request.get(ui_cancel.url(stream_path(run, "cancel"))).status == 409
    screenshot(page, shots, "cancel-pending-1280")
    mark_no_reload(page)

    _append_later(url, run, RunConcluded, 5, ok=False, failure="cancelled", attempts=1)
    page.locator("#live-part dl.facts dt", has_text="verdict").wait_for()
    # (the stream's facts: the bill and the explanation below them hold facts of their own)
    assert "cancelled" in page.locator("#live-part > dl.facts").inner_text()
    assert not state.inner_text().startswith("cancel pending")
    assert page.locator("#live-part p.actions").count() == 0  # a finished run offers no cancel
    answer = page.request.get(ui_cancel.url(stream_path(run, "cancel")))
    assert answer.status == 409 and "already concluded" in answer.text()
    screenshot(page, shots, "cancel-ended-1280")
    assert_not_reloaded(page)


def test_a_hostile_named_run_is_cancelled_through_its_inert_form(
    ui_cancel: UiServer, stores: Stores, tab: Tab
) -> None:
    page = tab.page
    asker = "<i>Mallory</i> \x1b[1m"
    cancel_through_the_page(page, ui_cancel, EVIL_RUN, asker)
    cancels = [
        e for e in stores.read(EVIL_RUN, stores.cancel_url) if isinstance(e, CancelRequested)
    ]
    assert len(cancels) == 1 and cancels[0].by.startswith(asker)
    page.reload()
    row = page.locator("#events tr", has_text="CancelRequested")
    assert shown(asker) in row.inner_text()
    assert page.evaluate(INJECTED_JS) == []
    assert tab.dialogs == []


# --- hostile text --------------------------------------------------------------------------------

HOSTILE_PAGES = {
    "list": "/",
    "list-filtered": "/?q=" + quote('<script>alert(8)</script>"', safe=""),
    "run": stream_path(EVIL_RUN),
    "job": stream_path(EVIL_JOB),
    "job-live-part": stream_path(EVIL_JOB) + "?part=live",
    "costs": "/costs",
    "fleet": "/fleet",
    "not-found": stream_path("<script>alert(9)</script>\x1b"),
}
#: What each page must show literally (as `shown` writes it).
LITERAL = {
    "list": (EVIL_RUN, EVIL_JOB, EVIL_WATCHER),
    "list-filtered": (),
    "run": (EVIL_RUN, EVIL_JOB),
    "job": (EVIL_JOB, EVIL_WATCHER, *EVIL_LINES[:3], EVIL_ERROR[:60]),
    "job-live-part": (EVIL_JOB, *EVIL_LINES[:3]),
    "costs": (),
    "fleet": (),
    "not-found": ("<script>alert(9)</script>\x1b",),
}


@pytest.mark.parametrize("name", list(HOSTILE_PAGES))
def test_hostile_names_errors_and_log_lines_render_inert_and_literal(
    ui: UiServer, tab: Tab, name: str
) -> None:
    page = tab.page
    page.goto(ui.url(HOSTILE_PAGES[name]))
    page.wait_for_load_state("load")
    page.wait_for_timeout(200)  # an injected handler or a late script would have run by now
    assert page.evaluate(INJECTED_JS) == []
    text = page.locator("body").inner_text()
    for literal in LITERAL[name]:
        assert shown(literal) in text, literal
    for raw in RAW:
        assert raw not in text and raw not in page.title(), repr(raw)
    if name == "list-filtered":
        assert page.locator("input[name=q]").input_value() == '<script>alert(8)</script>"'
    assert tab.dialogs == []
    assert [e for e in tab.errors if "Content Security Policy" in e] == []


def test_a_hostile_picture_opened_by_itself_runs_nothing(ui: UiServer, tab: Tab) -> None:
    for name in (EVIL_RUN, EVIL_JOB):
        answer = tab.page.goto(ui.url(stream_path(name, "picture")))
        assert answer is not None and answer.status == 200
        assert answer.headers["content-type"].startswith("image/svg+xml")
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        tab.page.wait_for_timeout(200)
        assert tab.page.evaluate(SCRIPTS_JS) == []
    assert tab.dialogs == []


def test_choosing_a_hostile_owner_in_the_filter_lists_its_job(ui: UiServer, tab: Tab) -> None:
    page = tab.page
    page.goto(ui.url("/"))
    page.select_option("select[name=owner]", label=shown(EVIL_WATCHER))
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"owner="))
    assert listed(page) == [shown(EVIL_JOB)]


# --- layout -------------------------------------------------------------------------------------


def layout_pages(stores: Stores) -> dict[str, str]:
    return {
        "list": "/",
        "list-runs": "/?kind=run",
        "run": stream_path(f"run-demo-{TAG}-stall-s3"),
        "job": stream_path(f"job-demo-{TAG}-stall-s3-a0"),
        "open-run": stream_path(stores.live.run),
        "open-job": stream_path(stores.live.job),
        "hostile-run": stream_path(EVIL_RUN),
        "hostile-job": stream_path(EVIL_JOB),
        "costs": "/costs",
        "fleet": "/fleet",
    }


def check_layout(page: Page) -> list[str]:
    """What `LAYOUT_JS` finds wrong on `page`, one line each."""
    found = page.evaluate(LAYOUT_JS, MIN_FONT_PX)
    problems = [f"{p['problem']}: {p['el']} {p['text']!r}" for p in found["problems"]]
    if found["scrollWidth"] > found["innerWidth"]:
        problems.append(f"the page is {found['scrollWidth']} px wide in {found['innerWidth']}")
    assert found["texts"] > 0, "the measure saw no text at all"
    return problems


@pytest.mark.parametrize("width", WIDTHS)
def test_pages_clip_nothing_and_draw_no_text_under_11px(
    ui: UiServer, ui_cancel: UiServer, stores: Stores, browser: Browser, shots: Path, width: int
) -> None:
    tab = open_tab(browser, width)
    page = tab.page
    pages = {k: ui.url(v) for k, v in layout_pages(stores).items()}
    pages["cancel-form"] = ui_cancel.url(stream_path(stores.to_cancel.run, "cancel"))
    problems: dict[str, list[str]] = {}
    try:
        for name, address in pages.items():
            page.goto(address)
            page.wait_for_load_state("load")
            screenshot(page, shots, f"{name}-{width}")
            found = check_layout(page)
            if found:
                problems[name] = found[:10]
    finally:
        page.context.close()
    assert problems == {}, f"screenshots in {shots}"


def test_the_layout_check_finds_clipped_wide_and_small_text(ui: UiServer, browser: Browser) -> None:
    """The measure can fail: a page given a cell too narrow for its text, a box wider than
    the window and a 9 px note is reported for each."""
    tab = open_tab(browser, 800)
    page = tab.page
    try:
        page.goto(ui.url("/costs"))
        assert check_layout(page) == []
        page.evaluate(
            """() => {
              const main = document.querySelector("main");
              const p = document.createElement("p");
              p.style.cssText = "width: 80px; white-space: nowrap";
              p.textContent = "a-text-far-wider-than-eighty-pixels";
              const wide = document.createElement("div");
              wide.style.cssText = "width: 1400px; text-align: right";
              wide.textContent = "wide";
              const small = document.createElement("span");
              small.style.fontSize = "9px";
              small.textContent = "tiny";
              main.append(p, wide, small);
            }"""
        )
        found = "\n".join(check_layout(page))
    finally:
        page.context.close()
    assert "text outside its box p" in found
    assert "wider than its box" in found
    assert "text past the viewport" in found
    assert "font-size 9px" in found
    assert "the page is" in found


def test_the_injection_check_finds_markup_parsed_from_data(ui: UiServer, tab: Tab) -> None:
    """The inertness checks can fail: markup parsed into the page is found, and what it
    would run is refused by the page's Content-Security-Policy (no dialog either way)."""
    page = tab.page
    page.goto(ui.url("/costs"))
    assert page.evaluate(INJECTED_JS) == []
    page.evaluate(
        """() => document.querySelector("main").insertAdjacentHTML("beforeend",
             '<img src=x onerror=alert(1)><b onmouseover=alert(2)>b</b><i>i</i>')"""
    )
    page.wait_for_timeout(200)
    found = page.evaluate(INJECTED_JS)
    assert any("onerror" in f for f in found) and any("onmouseover" in f for f in found)
    assert any(f.startswith("<i>") for f in found)
    assert tab.dialogs == []
    assert any("Content Security Policy" in e for e in tab.errors)


@pytest.mark.parametrize("width", [1280, 800])
def test_the_timeline_picture_keeps_its_text_at_11px_or_more(
    ui: UiServer, stores: Stores, browser: Browser, width: int
) -> None:
    tab = open_tab(browser, width)
    page = tab.page
    try:
        page.goto(ui.url(stream_path(f"run-demo-{TAG}-stall-s3")))
        size = picture_loads(page)
        svg = page.request.get(ui.url(stream_path(f"run-demo-{TAG}-stall-s3", "picture"))).text()
    finally:
        page.context.close()
    base = re.search(r'<svg[^>]* font-size="([\d.]+)"', svg)
    assert base is not None and size["natural"] > 0
    drawn_px = float(base.group(1)) * size["drawn"] / size["natural"]
    assert drawn_px >= MIN_FONT_PX, f"the picture's text is drawn at {drawn_px:.1f} px"
