"""Text as the front ends show it: one console, outside text escaped, lines wrapped.

Everything the CLI prints, and each text the web view shows as the CLI prints it (a ledger,
`explain`), goes through `console` (errors and notes: `err_console`). Outside text (a stream
name, an error body, a worker's log line) is escaped there (`shown`: it can neither move the
cursor, recolour the terminal nor hide what follows), never read as markup (`styled`), and
lines are wrapped at the terminal's width (or `$COLUMNS`), continuation lines hanging under
their label (`say`); piped without `$COLUMNS`, nothing is wrapped (`PlainConsole`). The web
view takes its texts from the same console, captured (`captured`), so a page and a command
print one text. A duration a user types (`duration_seconds`: the CLI's `--since`, the runs
list's filter) is read here too.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.cells import cell_len
from rich.console import Capture, Console, ConsoleDimensions, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from flashfsm.adapters.urls import scrub_urls
from flashfsm.errors import one_line

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


def escaped(text: str) -> str:
    """`text` on one line with every character that is not printable (a control character,
    an escape sequence's ESC, a bidirectional override) written as its Python escape."""
    return shown(one_line(text))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration_seconds(text: str) -> float | None:
    """`90s`, `15m`, `12h`, `30d`, `2w` (a bare number: seconds) as seconds; None when
    `text` is not a positive duration."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        return None
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


#: One caller captures the console at a time (`captured`).
_CAPTURE = threading.Lock()


@contextmanager
def captured() -> Iterator[Capture]:
    """The console, captured, one caller at a time, its lines as long as they are (a page
    wraps them), whatever the terminal the process was started from is."""
    with _CAPTURE:
        width = console.set_width
        console.width = PIPED_WIDTH
        try:
            with console.capture() as capture:
                yield capture
        finally:
            console.width = width
