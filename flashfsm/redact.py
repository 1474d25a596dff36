"""The environment's secrets, for the masking every outside text goes through.

Secret values come from the environment (`RUNPOD_API_KEY`, which may hold several keys
separated by commas, `HF_TOKEN` and `HUGGING_FACE_HUB_TOKEN`) plus whatever runtime secrets
a caller registers. The masking itself lives with the events (`flashfsm.events.text`):
every outside text field of an event is masked, then capped, when the event is built.
This module adds the environment as a secret source on import, and offers `redact` for the
text that is not an event field: a log line, a progress line, an exception message.
"""

from __future__ import annotations

import os

from flashfsm.events.text import (
    MASK,
    add_secret_source,
    redact,
    redact_then_cap,
    register_secrets,
    secret_values,
)

SECRET_ENV_VARS = ("RUNPOD_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


_parsed: tuple[tuple[object, ...], tuple[str, ...]] = ((), ())
#: On POSIX, the bytes mapping behind `os.environ` (it is updated in place by every
#: assignment through `os.environ`): a dict lookup per name instead of `os.environ`'s
#: encode-lookup-decode, since every event built asks (a key exported mid-run is honoured
#: at once).
_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
_KEY_1, _KEY_2, _KEY_3 = (os.fsencode(name) for name in SECRET_ENV_VARS)


def environment_secrets() -> tuple[str, ...]:
    """The secret values the environment holds now (each key of a comma-separated pool too)."""
    global _parsed
    data = _DATA
    if isinstance(data, dict):
        get = data.get
        raw: tuple[object, ...] = (get(_KEY_1), get(_KEY_2), get(_KEY_3))
    else:
        raw = tuple(map(os.environ.get, SECRET_ENV_VARS))
    if raw != _parsed[0]:
        found: list[str] = []
        for name in SECRET_ENV_VARS:
            value = os.environ.get(name)
            if value:
                found.append(value)
                found.extend(part.strip() for part in value.split(",") if part.strip())
        _parsed = (raw, tuple(found))
    return _parsed[1]


add_secret_source(environment_secrets)

__all__ = [
    "MASK",
    "SECRET_ENV_VARS",
    "environment_secrets",
    "redact",
    "redact_then_cap",
    "register_secrets",
    "secret_values",
]
