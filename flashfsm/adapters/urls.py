"""Local paths as store URLs and back (`sqlite:` and `jsonl:`), shared by the file stores.

`url_path` reads the path a `sqlite:` or `jsonl:` URL names: three slashes after the colon
mean an absolute path (`sqlite:///abs/events.db`, and the SQLAlchemy spelling
`sqlite:////abs/events.db`), no slash a relative one (`sqlite:events.db`, `jsonl:~/logs`).
`path_url` writes a path as such a URL. Special characters are percent-encoded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit


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
