"""What every command shares: the store option, sources, exit codes, JSON and printing helpers.

A SOURCE is a stream of the store or a `.jsonl` file (its directory holds the streams next
to it, such as a run's job streams). What kind of stream it is (job, run or sweeper) is
`flashfsm.views.stream_kind`'s answer, never a check of its own here.

Manners. A command that reads opens its store read-only (`open_store(url, read_only=True)`):
it creates and changes nothing, and a store, file or stream that is not there is one line
on stderr naming it, exit 1 (`fail`). Every error is one line; the library's warnings
(a torn last line, say) are one `warning:` line each on stderr, once (`Notices`). Lines are
wrapped at the terminal's width (or `$COLUMNS`), continuation lines hanging under their
label (`say`); piped without `$COLUMNS`, nothing is wrapped (`PlainConsole`). Help is plain
text, never markup, and ends with the exit codes: both live in `flashfsm.cli.usage`, which
`flashfsm --help` loads without this module.

Why it is long: it is what every command shares (sources, exit codes, JSON, printing); each
piece is small and used by several command groups.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import click
import typer
from rich.cells import cell_len
from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from flashfsm.adapters.jsonl import read_jsonl_file, stream_file_name
from flashfsm.adapters.stores import ENV_VAR as STORE_ENV
from flashfsm.adapters.stores import default_store_url, open_store
from flashfsm.adapters.urls import display_url, hide_url_secrets, scrub_urls, url_path
from flashfsm.cli.usage import EXIT_CODE_TABLE as EXIT_CODE_TABLE  # (`X as X`: re-exported)
from flashfsm.cli.usage import EXIT_CODES, EXIT_DAMAGED, EXIT_NO_VERDICT, EXIT_USAGE
from flashfsm.cli.usage import EXIT_DISAGREES as EXIT_DISAGREES
from flashfsm.cli.usage import EXIT_FENCED as EXIT_FENCED
from flashfsm.cli.usage import EXIT_GATE as EXIT_GATE
from flashfsm.cli.usage import EXIT_SWEEP_ERRORS as EXIT_SWEEP_ERRORS
from flashfsm.errors import message as message  # (re-exported: the CLI's one-line errors)
from flashfsm.errors import one_line as one_line
from flashfsm.events.errors import CorruptLogError, EventDecodeError, FlashFsmError
from flashfsm.events.models import Concluded, Event, RunConcluded
from flashfsm.fsm.findings import first_line
from flashfsm.fsm.job import replay
from flashfsm.fsm.run import Attempt, RunState, replay_run
from flashfsm.postmortem import explain as ex
from flashfsm.postmortem.explain import TimelineRow, timeline
from flashfsm.render import duration_text
from flashfsm.views import (
    IdlePeriod,
    RunView,
    SweeperRow,
    SweeperView,
    attempt_outcome,
    last_job_stream,
    run_label,
    stream_kind,
)

#: How wide a line may be when the output is piped and `$COLUMNS` is unset: unbounded.
PIPED_WIDTH = 10_000


class PlainConsole(Console):
    """A console at the terminal's width, or `$COLUMNS`; piped without `$COLUMNS` (into a
    file, `grep`), lines are as long as they are. A width set on it wins."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        #: the width set on it (at creation, or later through `width` or `size`), or None
        self.set_width: int | None = options.get("width")

    @property
    def size(self) -> ConsoleDimensions:
        """The console's width and height (see the class notes)."""
        dims = Console.size.fget(self)  # type: ignore[attr-defined]
        columns = os.environ.get("COLUMNS", "")
        if self.set_width is None and columns.isdigit():
            # `$COLUMNS` as it is now (rich reads it once, when the console is made: a
            # process that sets it later, a test runner say, would get the first value).
            return ConsoleDimensions(int(columns), dims.height)
        if self.set_width is None and not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]
        self.set_width = new_size[0]

    @property
    def width(self) -> int:
        """The console's width (see the class notes)."""
        return self.size.width

    @width.setter
    def width(self, width: int | None) -> None:
        Console.width.fset(self, width)  # type: ignore[attr-defined]
        self.set_width = width

    def render_str(self, text: str, **options: Any) -> Text:
        """A string as rich text, its unprintable characters escaped (`shown_text`)."""
        return shown_text(super().render_str(text, **options))

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Every line this console prints, and every cell of its tables, comes through here:
        a rich text's unprintable characters (an escape sequence's ESC, a carriage return,
        a bidirectional override) are escaped before it is laid out (`shown_text`)."""
        if isinstance(renderable, Text):
            renderable = shown_text(renderable)
        return super().render(renderable, options)


def shown(text: str) -> str:
    """`text` as the terminal may see it: every character that is not printable, but the
    line break, written as its Python escape (`\\x1b`, `\\r`, `\\u202e`), so outside text
    (a stream name, an error body, a log line) can neither move the cursor, recolour the
    terminal nor hide what follows."""
    if text.isprintable():
        return text
    return "\n".join(
        "".join(
            ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line
        )
        for line in text.split("\n")
    )


def shown_text(text: Text) -> Text:
    """A rich text with its unprintable characters escaped (`shown`), its styles kept."""
    plain = text.plain
    if shown(plain) == plain:
        return text
    cuts = sorted({i + d for i, ch in enumerate(plain) if shown(ch) != ch for d in (0, 1)})
    pieces = []
    for piece in text.divide(cuts):
        if len(piece.plain) == 1 and shown(piece.plain) != piece.plain:
            escaped_piece = Text(shown(piece.plain), style=piece.style)
            for span in piece.spans:
                escaped_piece.stylize(span.style)
            piece = escaped_piece
        pieces.append(piece)
    out = Text("").join(pieces)
    out.justify, out.overflow, out.no_wrap, out.end = (
        text.justify,
        text.overflow,
        text.no_wrap,
        text.end,
    )
    return out


#: Everything printed is literal: logs carry outside text (worker output, error bodies), and
#: rich markup in it would be interpreted — a `[i]` could rejoin the pieces of a masked
#: secret, a `[/]` raise. The few styled words are `styled` parts.
console = PlainConsole(highlight=False, markup=False)
#: Errors, warnings and notes about a command's run (never its output) go to stderr.
err_console = PlainConsole(highlight=False, markup=False, stderr=True)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain text and (text, style) parts, never read as markup; the password of
    any URL in it is masked (`scrub_urls`: a store URL is printed by `display_url`, this
    is the last line of defence)."""
    return Text.assemble(
        *(
            shown(scrub_urls(part))
            if isinstance(part, str)
            else (shown(scrub_urls(part[0])), part[1])
            for part in parts
        )
    )


def say(*parts: str | tuple[str, str], err: bool = False) -> None:
    """Print one line of plain and (text, style) parts, wrapped at the console's width:
    continuation lines hang under the text after the line's label ("  detail: "), or two
    columns in from where the line starts when it has none."""
    target = err_console if err else console
    text = styled(*parts)
    plain = text.plain
    width = target.width
    if cell_len(plain) <= width or "\n" in plain:
        target.print(text)
        return
    indent = len(plain) - len(plain.lstrip(" "))
    label = plain.find(": ", indent)
    hang = label + 2 if label >= 0 and label + 2 <= width // 2 else indent + 2
    if hang > width // 2:
        target.print(text)
        return
    head, rest = text.divide([hang])
    lines = rest.wrap(target, width - hang, overflow="fold")
    for n, line in enumerate(lines):
        line.rstrip()
        target.print(Text.assemble(head if n == 0 else " " * hang, line))


# --- exit codes ---------------------------------------------------------------------------


def exit_for(verdict: Concluded | None) -> int:
    """A job verdict's exit code (no verdict yet: 5)."""
    if verdict is None:
        return EXIT_NO_VERDICT
    return EXIT_CODES.get(verdict.failure, EXIT_USAGE)


def run_exit(result: RunConcluded | None) -> int:
    """A run result's exit code (no result yet: 5)."""
    if result is None:
        return EXIT_NO_VERDICT
    return 0 if result.ok else EXIT_CODES.get(result.failure, EXIT_USAGE)


# --- the library's warnings ---------------------------------------------------------------


class Notices(logging.Handler):
    """The library's warnings (its `logging` records and `warnings.warn`) as the CLI shows
    them: one `warning: …` line each on stderr, the same text once. `hold()` keeps them for
    the caller to fold into an error instead."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: set[str] = set()
        self.held: list[str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Show one log record (WARNING and above)."""
        self.notice(record.getMessage())

    def showwarning(self, message: Any, category: Any, *rest: Any, **kwargs: Any) -> None:
        """Show one Python warning: its text, never the source line that raised it."""
        self.notice(str(message))

    def notice(self, message: str) -> None:
        """Show `message` as one `warning:` line, unless it was shown (or held) already."""
        text = one_line(message)
        if text in self.seen:
            return
        self.seen.add(text)
        if self.held is not None:
            self.held.append(text)
        else:
            say(("warning:", "yellow"), f" {text}", err=True)

    @contextmanager
    def hold(self) -> Iterator[list[str]]:
        """Keep the warnings raised inside for the caller (they are not shown)."""
        saved, self.held = self.held, []
        try:
            yield self.held
        finally:
            self.held = saved


_notices: list[Notices] = []  # the running command's (a stack: a test may nest commands)


def install_notices(ctx: typer.Context) -> None:
    """Route the library's warnings through a `Notices` for as long as `ctx` lives."""
    notices = Notices()
    logger = logging.getLogger("flashfsm")
    logger.addHandler(notices)
    catcher = warnings.catch_warnings()  # the filters as they are (entering it resets
    catcher.__enter__()  # which warnings were shown already); only the showing changes
    warnings.showwarning = notices.showwarning
    _notices.append(notices)

    def uninstall() -> None:
        _notices.remove(notices)
        catcher.__exit__(None, None, None)
        logger.removeHandler(notices)

    ctx.call_on_close(uninstall)


@contextmanager
def held_warnings() -> Iterator[list[str]]:
    """The warnings raised inside, kept from the screen for the caller (`Notices.hold`)."""
    if _notices:
        with _notices[-1].hold() as kept:
            yield kept
        return
    held: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield held
    for w in caught:
        if one_line(str(w.message)) not in held:
            held.append(one_line(str(w.message)))


# --- options and errors -------------------------------------------------------------------

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Store URL (default: $FLASHFSM_STORE, else the user's SQLite file).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
SourceArgument = Annotated[
    str, typer.Argument(metavar="SOURCE", help="A stream of the store, or a .jsonl file.")
]


def fail(message: str) -> typer.Exit:
    """Print `message` as a one-line error on stderr; the exit (code 1) for the caller to raise."""
    say(("error:", "red"), f" {one_line(message)}", err=True)
    return typer.Exit(EXIT_USAGE)


class UsageErrors:
    """Errors reading or replaying a log (or a bad value) become exit 1 naming the problem."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, (FlashFsmError, ValueError, OSError)):
            raise fail(message(exc)) from None
        return False


# --- durations and the whole store ---------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration_seconds(text: str) -> float | None:
    """`90s`, `15m`, `12h`, `30d`, `2w` (a bare number: seconds) as seconds; None when
    `text` is not a positive duration."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        return None
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def parse_duration(text: str, option: str = "--since") -> float:
    """`duration_seconds` of an OPTION's value; exit 1, one line, when it is not one."""
    seconds = duration_seconds(text)
    if seconds is None:
        raise fail(f"{option} {text!r}: write a positive DURATION such as 90s, 15m, 12h, 30d, 2w")
    return seconds


@dataclass(frozen=True)
class Damaged:
    """A stream a store-wide command skipped because an event of it cannot be read (a
    corrupted line, a row whose checksum fails): `where` is its file or store, `seq` (and,
    in a file, `line`) the first damaged event's, None when unknown; `error` is the whole
    reason in one line, its outside text escaped."""

    where: str
    stream: str
    seq: int | None
    line: int | None
    error: str

    def json(self) -> dict[str, Any]:
        """The flag as `--json` carries it."""
        return {
            "where": self.where,
            "stream": self.stream,
            "seq": self.seq,
            "line": self.line,
            "error": self.error,
        }


@dataclass(frozen=True)
class StoreLogs:
    """A store as a store-wide command reads it: every healthy non-empty stream's events, by
    name, and each damaged stream, flagged once (`Damaged`), in the store's order."""

    logs: dict[str, list[Event]]
    damaged: tuple[Damaged, ...] = ()

    def exit_code(self) -> int:
        """The command's exit when it did its job: 0, or 7 when it skipped damaged streams."""
        return EXIT_DAMAGED if self.damaged else 0

    def damaged_json(self) -> list[dict[str, Any]]:
        """The `"damaged"` list of a `--json` output."""
        return [d.json() for d in self.damaged]

    def flag(self) -> None:
        """Say each damaged stream on stderr, one `damaged:` line each."""
        for d in self.damaged:
            say(("damaged:", "red"), f" {d.error} (stream skipped)", err=True)


def escaped(text: str) -> str:
    """`text` on one line with every character that is not printable (a control character,
    an escape sequence's ESC, a bidirectional override) written as its Python escape."""
    return shown(one_line(text))


def _damaged(url: str, stream: str, exc: EventDecodeError | CorruptLogError) -> Damaged:
    if isinstance(exc, CorruptLogError):
        where, line = exc.where, exc.line
    else:
        where, line = display_url(url), None
    return Damaged(
        escaped(hide_url_secrets(where, url)),
        stream,
        exc.seq,
        line,
        escaped(hide_url_secrets(message(exc), url)),
    )


def read_all_streams(url: str, since_s: float | None = None) -> StoreLogs:
    """Every non-empty stream of the store at `url`, read-only, by name: the one place the
    store-wide commands (`ls`, `cost`, `whatif --all`) read a whole store.

    A stream holding a damaged event (a `CorruptLogError`: a line or row that fails its
    checksum or does not decode) is not read: it is flagged in `StoreLogs.damaged` and every
    other stream is read on. Nothing is repaired or written. A store that cannot be opened
    or listed is still one line, exit 1. With `since_s`, only the streams whose last event
    is within `since_s` of the store's newest event: a store is measured on its own clock,
    never the reader's (a simulator's log lists as it ran); a damaged stream is flagged
    whatever `since_s` says, as its time cannot be read."""
    opened = open_reader(url)
    logs: dict[str, list[Event]] = {}
    damaged: list[Damaged] = []
    try:
        with UsageErrors():
            for name in opened.streams():
                try:
                    events = opened.read(name)
                except (CorruptLogError, EventDecodeError) as exc:
                    damaged.append(_damaged(url, name, exc))
                    continue
                if events:
                    logs[name] = events
    finally:
        opened.close()
    if since_s is not None and logs:
        newest = max(events[-1].at for events in logs.values())
        logs = {n: ev for n, ev in logs.items() if ev[-1].at >= newest - since_s}
    return StoreLogs(logs, tuple(damaged))


# --- sources ------------------------------------------------------------------------------


@dataclass
class Source:
    """A log and a way to read the streams next to it (a run's job streams)."""

    name: str
    events: list[Event]
    load: Callable[[str], list[Event]]
    where: str  # the store URL (as printed: `display_url`) or the file's directory


#: The key in a command's context (`click.Context.meta`) that says it named the demo's store.
_FALLBACK_SAID = "flashfsm.fallback_said"


def store_url(store: str | None, *, reading: bool = False) -> str:
    """The store a command works on: `--store`, else the default (`$FLASHFSM_STORE`, else
    the user's `events.db`).

    A command that only reads says `reading`: then, while neither `--store` nor
    `$FLASHFSM_STORE` names a store and the default store's file does not exist yet, it reads
    the demo's store when that exists (`demo_fallback_url`), and says so in one line on
    stderr (once a command). A command that writes keeps the default: its first event
    creates it."""
    if store:
        return store
    demo = demo_fallback_url() if reading else None
    if demo is None:
        return default_store_url()
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    if not meta.get(_FALLBACK_SAID):
        meta[_FALLBACK_SAID] = True
        say(
            f"(no store at {display_url(default_store_url())} yet: reading the demo's store "
            f"{display_url(demo)})",
            err=True,
        )
    return demo


def demo_fallback_url() -> str | None:
    """The demo's store when the commands that only read, given no `--store`, read it: no
    `$FLASHFSM_STORE`, no file at the default store's path yet, and the demo's store file
    (`flashfsm.demo.demo_store_url`) there; else None. Only looks: nothing is created."""
    if os.environ.get(STORE_ENV, "").strip() or _file_exists(default_store_url()):
        return None
    from flashfsm.demo import demo_store_url

    demo = demo_store_url()
    return demo if _file_exists(demo) else None


def _file_exists(url: str) -> bool:
    """Whether a SQLite store's file exists (other stores: not asked, taken as there)."""
    if urlsplit(url).scheme != "sqlite":
        return True
    try:
        return url_path(url).expanduser().is_file()
    except ValueError:
        return True


def open_store_or_fail(url: str) -> Any:
    """The store at `url` to write to (created when missing); exit 1, one line, when it cannot
    be opened or the URL is wrong. A command that only reads uses `open_reader`."""
    try:
        return open_store(url)
    except (ValueError, ImportError, FlashFsmError, OSError) as exc:
        raise fail(hide_url_secrets(message(exc), url)) from None


def open_reader(url: str) -> Any:
    """The store at `url`, read-only: nothing is created or changed; exit 1, one line, when
    it is missing or unreadable or the URL is wrong."""
    try:
        return open_store(url, read_only=True)
    except (ValueError, ImportError, FlashFsmError, OSError) as exc:
        raise fail(hide_url_secrets(message(exc), url)) from None


def read_stream(url: str, stream: str) -> list[Event]:
    """One stream of the store at `url`, read-only (exit 1 when the store or the stream is
    unreadable)."""
    opened = open_reader(url)
    try:
        with UsageErrors():
            return opened.read(stream)
    finally:
        opened.close()


def read_events_file(path: Path) -> list[Event]:
    """The events of one `.jsonl` file (exit 1, one line, when it is missing, unreadable or
    empty; a file whose only line is torn says so on that line)."""
    if not path.exists():
        raise fail(f"no such file: {path}")
    if path.is_dir():
        raise fail(f"{path} is a directory, not a .jsonl file")
    with held_warnings() as held:
        try:
            events = read_jsonl_file(path)
        except (FlashFsmError, OSError) as exc:
            raise fail(message(exc)) from None
    if not events:
        why = "; ".join(h.removeprefix(f"{path}: ") for h in held)
        raise fail(f"{path} holds no events" + (f" ({why})" if why else ""))
    for text in held:
        say(("warning:", "yellow"), f" {text}", err=True)
    return events


def is_file_source(source: str) -> bool:
    """Whether SOURCE names a `.jsonl` file (by its suffix) rather than a stream."""
    return Path(source).suffix.lower() == ".jsonl"


def open_source(source: str, store: str | None) -> Source:
    """SOURCE as a `Source`: a `.jsonl` file (its directory holds its siblings) or a stream."""
    path = Path(source)
    if is_file_source(source):

        def load_file(stream: str) -> list[Event]:
            sibling = path.parent / stream_file_name(stream)
            if not sibling.is_file():
                return []
            with UsageErrors():
                return read_jsonl_file(sibling)

        return Source(path.name, read_events_file(path), load_file, str(path.parent))
    url = store_url(store, reading=True)
    events = read_stream(url, source)
    if not events:
        hint = ""
        if path.exists():
            what = "directory" if path.is_dir() else "file"
            hint = f" ({source} is a {what} here: a SOURCE file ends in .jsonl, a store is --store)"
        raise fail(f"stream {source!r} is empty or missing in {display_url(url)}{hint}")
    return Source(source, events, lambda stream: read_stream(url, stream), display_url(url))


def load_events(source: str, store: str | None) -> tuple[str, list[Event]]:
    """The events SOURCE names: a JSONL file, or a stream of the store."""
    src = open_source(source, store)
    return src.name, src.events


def job_source(src: Source, *, quiet: bool = False) -> tuple[str, list[Event]]:
    """The job log a command reads: SOURCE itself, or a run's last attempt's job stream.

    A sweeper's stream has none: exit 1 saying so.
    """
    kind = stream_kind(src.events)
    if kind == "sweeper":
        raise fail(f"{src.name} is a sweeper stream: job rules do not apply")
    if kind == "job":
        return src.name, src.events
    with UsageErrors():
        run = replay_run(src.events)
    stream = last_job_stream(run)
    if stream is None:
        raise fail(f"run {src.name!r} has no job stream yet (no JobQueued event)")
    events = src.load(stream)
    if not events:
        raise fail(f"run {src.name!r}: job stream {stream!r} is empty or missing")
    if not quiet:
        say(f"run {src.name}: its last attempt's job stream is {stream}")
    return stream, events


# --- JSON ---------------------------------------------------------------------------------


def emit_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def row_json(row: TimelineRow) -> dict[str, Any]:
    """One timeline row of a job log."""
    return {
        "seq": row.seq,
        "at": row.at,
        "offset_s": row.offset,
        "kind": row.kind,
        "summary": row.summary,
        "state": row.state_after,
        "moved_from": row.state_before if row.moved else None,
        "armed": list(row.armed),
        "cleared": list(row.cleared),
        "progress": row.progress,
    }


def verdict_json(verdict: Concluded | None) -> dict[str, Any] | None:
    """A job's verdict, field by field."""
    if verdict is None:
        return None
    return {
        "state": verdict.state,
        "ok": verdict.ok,
        "failure": verdict.failure,
        "rule": verdict.rule,
        "detail": verdict.detail,
        "evidence": list(verdict.evidence),
        "metrics": verdict.metrics,
        "at": verdict.at,
    }


def measure_json(m: ex.Measure) -> dict[str, Any]:
    """One number a rule compared with its limit."""
    return {
        "quantity": m.quantity,
        "value": m.value,
        "op": m.op,
        "limit_name": m.limit_name,
        "limit": m.limit,
        "unit": m.unit,
        "fired": m.fired,
        "note": m.note,
        "text": m.text,
    }


def timer_json(t: ex.TimerView) -> dict[str, Any]:
    """One running timer of a job."""
    return {
        "rule": t.rule,
        "name": t.name,
        "since": t.since,
        "elapsed_s": t.elapsed,
        "limit_s": t.limit,
        "left_s": t.left,
        "text": t.text,
    }


def view_json(view: ex.WatchView) -> dict[str, Any]:
    """A job's live view."""
    nxt = view.next_timer
    return {
        "stream": view.stream,
        "state": view.state,
        "since": view.since,
        "in_state_s": view.in_state_s,
        "now": view.now,
        "last_at": view.last_at,
        "quiet_s": None if view.last_at is None else view.now - view.last_at,
        "status": view.status,
        "events": view.events,
        "poll_errors": view.poll_errors,
        "verdict": verdict_json(view.verdict),
        "next_timer": None if nxt is None else timer_json(nxt),
        "timers": [timer_json(t) for t in view.timers],
    }


def result_json(result: RunConcluded | None) -> dict[str, Any] | None:
    """A run's result."""
    if result is None:
        return None
    return {
        "ok": result.ok,
        "failure": result.failure,
        "attempts": result.attempts,
        "detail": result.detail,
        "at": result.at,
    }


def attempt_json(a: Attempt, run: RunState) -> dict[str, Any]:
    """One attempt of a run, as the run fold has it."""
    s, e = a.started, a.ended
    return {
        "attempt": s.attempt,
        "gpu_class": s.gpu_class,
        "provider": s.provider,
        "on_last_gpu": s.on_last_gpu,
        "bonus": s.bonus,
        "cache_dropped": s.cache_dropped,
        "started_at": s.at,
        "endpoint_id": a.endpoint_id,
        "job_id": a.job_id,
        "job_stream": a.job_stream,
        "submitted_at": a.submitted_at,
        "deploy_error": a.deploy_error,
        "submit_error": a.submit_error,
        "outcome": attempt_outcome(a, run),
        "ended": None
        if e is None
        else {"ok": e.ok, "failure": e.failure, "rule": e.rule, "detail": e.detail, "at": e.at},
    }


def run_view_json(rv: RunView) -> dict[str, Any]:
    """A run's live view: its state, attempts, result and its current job's view."""
    r = rv.run.result
    return {
        "stream": rv.stream,
        "kind": "run",
        "state": rv.label,
        "attempts": rv.attempts,
        "job_stream": rv.job_stream,
        "result": None
        if r is None
        else {"ok": r.ok, "failure": r.failure, "attempts": r.attempts, "at": r.at},
        "job": None if rv.job is None else view_json(rv.job),
    }


def sweeper_state(view: SweeperView) -> str:
    """A sweeper's stream in a word or two, as `ls` lists it."""
    return f"{len(view.reaped)} reaped"


def period_json(p: IdlePeriod, view: SweeperView) -> dict[str, Any]:
    """One idle run of an endpoint; a running one measured at the view's `now`."""
    return {
        "endpoint_id": p.endpoint_id,
        "endpoint_name": p.endpoint_name,
        "since": p.since,
        "since_offset_s": p.since - view.start,
        "end": p.end,
        "outcome": p.outcome,
        "reason": p.reason,
        "idle_s": p.idle_s(view.now),
    }


def sweeper_row_json(row: SweeperRow) -> dict[str, Any]:
    """One event of a sweeper's stream."""
    return {
        "seq": row.seq,
        "at": row.at,
        "offset_s": row.offset,
        "kind": row.kind,
        "summary": sweeper_row_text(row),
        "endpoint_id": row.endpoint_id,
        "endpoint_name": row.endpoint_name,
        "since": row.since,
        "idle_s": row.idle_s,
        "reason": row.reason,
        "timers": row.running,
    }


# --- printing -----------------------------------------------------------------------------


def _notable(row: TimelineRow) -> bool:
    return (
        row.moved
        or bool(row.armed or row.cleared)
        or row.kind
        in (
            "JobSubmitted",
            "WatchStarted",
            "Concluded",
            "StatusFetchFailed",
            "WorkerObserved",
            "WorkerLogObserved",
        )
        or (row.kind == "HeartbeatObserved" and row.progress)
        or (row.kind == "StatusObserved" and row.progress)
    )


def print_timeline(stream: str, events: list[Event], *, full: bool = False) -> None:
    """The post-mortem view of one job log: its timeline and its verdict."""
    rows = timeline(events)
    shown = rows if full else [r for r in rows if _notable(r)]
    say(f"{stream}: {len(rows)} events")
    table = Table(expand=False)
    table.add_column("t+s", justify="right", no_wrap=True)
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("event", overflow="fold")
    table.add_column("state")
    table.add_column("timers")
    for row in shown:
        state = f"{row.state_before} → {row.state_after}" if row.moved else row.state_after
        timers = " ".join([f"+{t}" for t in row.armed] + [f"-{t}" for t in row.cleared])
        table.add_row(f"{row.offset:.0f}", str(row.seq), row.summary, state, timers)
    console.print(table)
    if len(shown) < len(rows):
        say(f"  ({len(rows) - len(shown)} routine observations not shown; --full shows all)")
    print_verdict(replay(events).verdict)


def print_verdict(verdict: Concluded | None) -> None:
    """One verdict, its rule and its evidence."""
    if verdict is None:
        say("  ", ("no verdict yet", "yellow"))
        return
    colour = "green" if verdict.ok else "red"
    kind = "success" if verdict.ok else verdict.failure
    say("  ", (verdict.state, f"bold {colour}"), f" ({kind}) by rule ", (verdict.rule, "bold"))
    say(f"  evidence: seqs {list(verdict.evidence)}")
    first = verdict.detail.splitlines()[0] if verdict.detail else ""
    say(f"  detail: {first}")


def print_view(view: ex.WatchView, *, prefix: str = "") -> None:
    """A job's live view: its state, time in state, last status and next timer (its times
    are the view's: see `flashfsm.views.view_now`)."""
    name = view.stream or "?"
    if view.verdict is not None:
        v = view.verdict
        colour = "green" if v.ok else "red"
        say(f"{prefix}{name}: ", (v.state, f"bold {colour}"), f" by {v.rule}")
        return
    quiet = "" if view.last_at is None else f", last event {ex.secs(view.now - view.last_at)} s ago"
    say(
        f"{prefix}{name}: ",
        (view.state, "bold"),
        f" for {duration_text(view.in_state_s)} (status {view.status or '-'}{quiet})",
    )
    nxt = view.next_timer
    if nxt is not None:
        say(f"{prefix}  next timer: {nxt.text}")
    if view.poll_errors:
        say(f"{prefix}  {view.poll_errors} consecutive status errors")


def print_run_header(stream: str, run: RunState) -> None:
    """One line: the run, its state and how many attempts it made."""
    result = run.result
    colour = "bold"
    if result is not None:
        colour = "green" if result.ok else "red"
    say(f"run {stream}: ", (run_label(run), colour), f", {len(run.attempts)} attempt(s)")


def attempt_line(a: Attempt, run: RunState) -> str:
    """An attempt in one line: "attempt 1 on L40S (last GPU): stalled (unhealthy_worker)"."""
    last = " (last GPU)" if a.started.on_last_gpu else ""
    outcome = attempt_outcome(a, run)
    where = "" if a.started.provider == "runpod" else f"{a.started.provider}/"
    return f"attempt {a.started.attempt} on {where}{a.started.gpu_class}{last}: {outcome}"


def print_run(stream: str, run: RunState) -> None:
    """A run: its state, each attempt's outcome and job stream, and its result."""
    print_run_header(stream, run)
    for a in run.attempts:
        say(f"  {attempt_line(a, run)}")
        if a.job_stream:
            say(f"    job stream: {a.job_stream}")
        if a.ended is not None and not a.ended.ok and a.ended.detail:
            say(f"    detail: {first_line(a.ended.detail, 160)}")
    if run.cancel_requested:
        say(f"  cancel requested {run.cancel_reason}".rstrip())
    if run.result is None:
        say("  ", ("no result yet", "yellow"))
    elif run.result.detail:
        say(f"  result: {first_line(run.result.detail, 160)}")


def print_run_view(rv: RunView) -> None:
    """A run's live view: its state and its current job's view."""
    print_run_header(rv.stream, rv.run)
    if rv.job is not None:
        print_view(rv.job, prefix="  ")


def endpoint_text(endpoint_id: str, name: str) -> str:
    """An endpoint as printed: its name and id, or its id."""
    return f"{name} ({endpoint_id})" if name else endpoint_id


def sweeper_row_text(row: SweeperRow) -> str:
    """One event of a sweeper's stream as a phrase."""
    who = endpoint_text(row.endpoint_id, row.endpoint_name)
    if row.kind == "IdleSeen":
        return f"idle timer started: {who}"
    if row.kind == "IdleCleared":
        return f"idle timer cleared: {who}: {row.reason or 'no reason recorded'}"
    return f"reaped {who}"


def period_text(p: IdlePeriod, view: SweeperView) -> str:
    """One idle run as a phrase: the endpoint, since when, how long, how it ended."""
    who = endpoint_text(p.endpoint_id, p.endpoint_name)
    since = f"t+{ex.secs(p.since - view.start)} s"
    idle = duration_text(p.idle_s(view.now))
    if p.outcome == "reaped":
        assert p.end is not None
        return f"reaped {who} at t+{ex.secs(p.end - view.start)} s after {idle} idle"
    if p.outcome == "cleared":
        assert p.end is not None
        when = f"t+{ex.secs(p.end - view.start)} s"
        return f"cleared {who} at {when} ({p.reason or 'no reason recorded'}) after {idle} idle"
    return f"idle timer running: {who} since {since}, {idle} idle"
