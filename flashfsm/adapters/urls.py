"""Local paths as store URLs and back (`sqlite:` and `jsonl:`), shared by the file stores.

`url_path` reads the path a `sqlite:` or `jsonl:` URL names: three slashes after the colon
mean an absolute path (`sqlite:///abs/events.db`, and the SQLAlchemy spelling
`sqlite:////abs/events.db`), no slash a relative one (`sqlite:events.db`, `jsonl:~/logs`).
`path_url` writes a path as such a URL. Special characters are percent-encoded.

A store URL may hold a secret: a Postgres password (`postgresql://user:pw@host/db`), a
`password=` (or `sslpassword=`, or any parameter named like a secret) in its query or in a
libpq keyword DSN (`host=db password=pw`). Whatever prints a store URL or puts one in an
error prints `display_url(url)`, which masks each of them as `***`; `hide_url_secrets` masks
them in a message that may quote them another way (a driver's error), and `scrub_urls` masks
a password in any URL found in a line of text (the CLI's last line of defence).

The numeric options of a store (its URL's query options, and the stores' keywords of the
same names) each have a range, `STORE_OPTION_RANGES`: `check_option` refuses a value out of
it in one line naming the option and the range (`flashfsm.adapters.stores` checks a URL's
with `in_range`, before the store is opened).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, unquote_plus, urlsplit


def url_path(url: str) -> Path:
    """The local path a `sqlite:` or `jsonl:` URL names (see the module docstring)."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ValueError(
            f"{url!r}: a {parts.scheme} URL names a local path: write "
            f"{parts.scheme}:///abs/path or {parts.scheme}:relative/path"
        )
    raw = unquote(parts.path)
    if not raw:
        raise ValueError(f"{url!r} names no path")
    if raw.startswith("/"):
        raw = "/" + raw.lstrip("/")  # `////abs` (SQLAlchemy) is `/abs`
        if re.match(r"^/[A-Za-z]:[/\\]", raw):  # pragma: no cover - Windows drive letter
            raw = raw[1:]
    return Path(raw).expanduser()


def path_url(scheme: str, path: str | os.PathLike[str]) -> str:
    """The URL of a local path for a file-based store (`sqlite`, `jsonl`)."""
    posix = Path(path).expanduser().absolute().as_posix()
    if not posix.startswith("/"):  # pragma: no cover - Windows: C:/…
        posix = "/" + posix
    return f"{scheme}://{quote(posix, safe='/:~')}"


#: What a masked part of a URL reads as.
HIDDEN = "***"
#: A query or DSN parameter whose value is a secret, by its name.
_SECRET_NAME = re.compile(r"(?i)pass|secret|token|api_?key|credential")
#: `name=value` in a libpq keyword DSN, the value bare or single-quoted.
_KEYWORD = re.compile(r"""(?i)\b([a-z_]+)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)""")
#: The userinfo of a URL in running text: `scheme://user:password@`.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*:)([^\s/]*)(@)")


def _hide_keywords(dsn: str) -> str:
    """A libpq keyword DSN with every secret parameter's value masked."""

    def hide(m: re.Match[str]) -> str:
        if _SECRET_NAME.search(m.group(1)):
            return f"{m.group(1)}{m.group(2)}{HIDDEN}"
        return m.group(0)

    return _KEYWORD.sub(hide, dsn)


def _hide_query(query: str) -> str:
    """A URL query with every secret parameter's value masked (the rest kept as written)."""
    kept = []
    for pair in query.split("&"):
        name, eq, _ = pair.partition("=")
        kept.append(f"{name}={HIDDEN}" if eq and _SECRET_NAME.search(unquote_plus(name)) else pair)
    return "&".join(kept)


def display_url(url: str) -> str:
    """`url` as it may be printed: a password in it (`user:***@host`), every secret query
    parameter (`?password=***`) and a keyword DSN's `password=***` masked; the rest as
    written."""
    if "://" not in url:
        return _hide_keywords(url) if "=" in url else url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL urllib can split: mask what looks like a password
        return _hide_keywords(_USERINFO.sub(rf"\1{HIDDEN}\3", url))
    netloc, query = parts.netloc, parts.query
    if password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:{HIDDEN}@{host}"
    if query:
        query = _hide_query(query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return parts._replace(netloc=netloc, query=query).geturl()


def url_secrets(url: str) -> list[str]:
    """The secret values `url` holds (see `display_url`), as written and percent-decoded,
    longest first."""
    found: set[str] = set()
    if "://" in url:
        try:
            parts = urlsplit(url)
            password = parts.password
        except ValueError:
            password, parts = None, None
            found.update(m.group(2) for m in _USERINFO.finditer(url))
        if password:
            found.update({password, unquote(password)})
        if parts is not None:
            for pair in parts.query.split("&"):
                name, eq, value = pair.partition("=")
                if eq and value and _SECRET_NAME.search(unquote_plus(name)):
                    found.update({value, unquote_plus(value)})
    else:
        for m in _KEYWORD.finditer(url):
            if _SECRET_NAME.search(m.group(1)):
                value = m.group(3)
                found.update({value, value.strip("'")})
    return sorted((v for v in found if v), key=len, reverse=True)


def hide_url_secrets(text: str, url: str) -> str:
    """`text` (an error message about the store at `url`) with `url` shown as
    `display_url(url)` and any of its secret values masked wherever else it appears (a
    short one only as a whole word)."""
    if url and url in text:
        text = text.replace(url, display_url(url))
    for value in url_secrets(url):
        if len(value) >= 6:
            text = text.replace(value, HIDDEN)
        else:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", HIDDEN, text)
    return text


#: A URL in running text: a scheme, `://`, and everything up to white space or a quote.
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+")


def scrub_urls(text: str) -> str:
    """`text` with every URL in it shown as `display_url` shows it (a password in its
    userinfo or in a secret query parameter masked)."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: display_url(m.group(0)), text)


# --- the ranges of the stores' numeric options -----------------------------------------------

#: The range of each numeric store option, `(least, most)`: its URL query option and the
#: store's keyword of the same name (`SqliteStore(busy_timeout_s=…)`,
#: `PostgresStore(idle_in_transaction_s=…)`, …) take the same. Above its most, a timeout is
#: a typo (the databases take these as 32-bit milliseconds, at most ~24 days) and a count
#: is no store's; below its least, a timeout ends the store's own work (an
#: idle-in-transaction timeout of a millisecond ends its transactions between two of their
#: statements; a busy timeout under a second fails a write another writer delays a moment).
STORE_OPTION_RANGES: dict[str, tuple[float, int]] = {
    "busy_timeout_s": (1, 3600),
    "idle_in_transaction_s": (0.5, 86_400),
    "snapshot_every": (1, 1_000_000),
    "pool_size": (1, 1000),
    "connect_timeout": (1, 3600),
    "connect_timeout_s": (1, 3600),
    "fallback_s": (0.1, 3600),
}
#: The whole-number options of `STORE_OPTION_RANGES`.
WHOLE_OPTIONS = frozenset({"snapshot_every", "pool_size"})


def option_range(name: str) -> str:
    """What store option `name` may be, as its errors say: "a number of at least 0.5 and at
    most 86,400" ("a whole number …" for a count)."""
    least, most = STORE_OPTION_RANGES[name]
    kind = "a whole number" if name in WHOLE_OPTIONS else "a number"
    return f"{kind} of at least {least:,g} and at most {most:,}"


def in_range(name: str, value: object) -> bool:
    """Whether `value` is a value store option `name` may take (`STORE_OPTION_RANGES`):
    a finite number (a whole one for a count; never a bool) within its range."""
    least, most = STORE_OPTION_RANGES[name]
    kinds = int if name in WHOLE_OPTIONS else int | float
    if isinstance(value, bool) or not isinstance(value, kinds):
        return False
    return least <= value <= most  # (NaN is in no range)


def check_option(name: str, value: Any) -> Any:
    """`value` of the store's keyword option `name`, or a one-line `ValueError` naming the
    option and its range (`STORE_OPTION_RANGES`)."""
    if not in_range(name, value):
        shown = repr(value)[:40]
        raise ValueError(f"{name}={shown} is out of range: {option_range(name)}")
    return value
