"""What every command shares: the store option, sources, exit codes, errors and warnings.

A SOURCE is a stream of the store or a `.jsonl` file (its directory holds the streams next
to it, such as a run's job streams), opened as a `flashfsm.display.sources.Source`. What
kind of stream it is (job, run or sweeper) is `flashfsm.views.stream_kind`'s answer, never a
check of its own here.

Manners. A command that reads opens its store read-only (`open_store(url, read_only=True)`):
it creates and changes nothing, and a store, file or stream that is not there is one line
on stderr naming it, exit 1 (`fail`). Every error is one line; the library's warnings
(a torn last line, say) are one `warning:` line each on stderr, once (`Notices`). What is
printed, and how (the console, escaping, wrapping), is `flashfsm.display`'s, shared with
the web view. Help is plain text, never markup, and ends with the exit codes: both live in
`flashfsm.cli.usage`, which `flashfsm --help` loads without this module.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import click
import typer

from flashfsm.adapters.jsonl import read_jsonl_file, stream_file_name
from flashfsm.adapters.stores import ENV_VAR as STORE_ENV
from flashfsm.adapters.stores import default_store_url, open_store
from flashfsm.adapters.urls import display_url, hide_url_secrets, url_path
from flashfsm.cli.usage import EXIT_CODE_TABLE as EXIT_CODE_TABLE  # (`X as X`: re-exported)
from flashfsm.cli.usage import EXIT_CODES, EXIT_DAMAGED, EXIT_NO_VERDICT, EXIT_USAGE
from flashfsm.cli.usage import EXIT_DISAGREES as EXIT_DISAGREES
from flashfsm.cli.usage import EXIT_FENCED as EXIT_FENCED
from flashfsm.cli.usage import EXIT_GATE as EXIT_GATE
from flashfsm.cli.usage import EXIT_SWEEP_ERRORS as EXIT_SWEEP_ERRORS
from flashfsm.display.sources import Source, is_file_source, job_log
from flashfsm.display.text import console as console  # (re-exported: the CLI's consoles)
from flashfsm.display.text import duration_seconds, escaped, say
from flashfsm.display.text import err_console as err_console
from flashfsm.display.text import shown as shown  # (re-exported: the CLI's escaping)
from flashfsm.display.text import shown_text as shown_text
from flashfsm.errors import message as message  # (re-exported: the CLI's one-line errors)
from flashfsm.errors import one_line as one_line
from flashfsm.events.errors import CorruptLogError, EventDecodeError, FlashFsmError
from flashfsm.events.models import Concluded, Event, RunConcluded
from flashfsm.views import stream_kind

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


def store_opener(store: str | None) -> Callable[[], Any]:
    """How a command's SOURCE opens its store again, when the streams beside it are read
    (the sweepers' reaps a bill ends on: `flashfsm.display.sources.source_ledger`): the
    store `--store` names (`store_url`), read-only (`open_reader`)."""
    return lambda: open_reader(store_url(store, reading=True))


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
    """The job log a command reads: SOURCE itself, or a run's last attempt's job stream
    (`flashfsm.display.sources.job_log`; none: exit 1 saying why). A run's is named in a
    line, unless `quiet`."""
    with UsageErrors():
        stream, events = job_log(src)
    if not quiet and stream_kind(src.events) == "run":
        say(f"run {src.name}: its last attempt's job stream is {stream}")
    return stream, events


# --- JSON ---------------------------------------------------------------------------------


def emit_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
