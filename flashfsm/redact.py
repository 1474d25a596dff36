"""Keep secrets out of everything flashfsm records or prints.

Secret values come from the environment (`RUNPOD_API_KEY`, which may hold several keys
separated by commas, and `HF_TOKEN`) plus whatever runtime secrets a caller registers.
`redact(text)` replaces each with `[REDACTED]`; the shell passes every outside string
through it before the string reaches an event, a log line or an exception message.
"""

from __future__ import annotations

import os
import re
import threading

SECRET_ENV_VARS = ("RUNPOD_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MASK = "[REDACTED]"
_MIN_SECRET_LEN = 6  # shorter values would mask ordinary words
_extra: set[str] = set()
_lock = threading.Lock()
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")


def register_secrets(*values: str | None) -> None:
    """Add runtime secret values (e.g. a worker's secret env) to the redaction set."""
    with _lock:
        _extra.update(v for v in values if v and len(v) >= _MIN_SECRET_LEN)


def secret_values() -> list[str]:
    """The secret values known now, longest first (so a prefix never hides a longer one)."""
    found = set(_extra)
    for name in SECRET_ENV_VARS:
        raw = os.environ.get(name)
        if raw:
            found.update(part.strip() for part in raw.split(","))
            found.add(raw)
    return sorted((v for v in found if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def redact(text: str | None) -> str | None:
    """`text` with every known secret and any bearer token masked."""
    if not text:
        return text
    for value in secret_values():
        if value in text:
            text = text.replace(value, MASK)
    return _BEARER.sub(lambda m: m.group(1) + MASK, text)
