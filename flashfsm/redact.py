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


_KEYS = tuple(os.fsencode(name) for name in SECRET_ENV_VARS)
_parsed: tuple[tuple[object, ...], tuple[str, ...]] = ((), ())


def _raw_environment() -> tuple[object, ...]:
    """The secret variables' raw values, read as cheaply as the platform allows.

    Every event built reads them (a key exported mid-run is honoured at once), so on
    POSIX the bytes mapping behind `os.environ` is read directly: a dict lookup per name
    instead of `os.environ`'s encode-lookup-decode.
    """
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and os.name == "posix":
        return tuple(map(data.get, _KEYS))
    return tuple(map(os.environ.get, SECRET_ENV_VARS))


def environment_secrets() -> tuple[str, ...]:
    """The secret values the environment holds now (each key of a comma-separated pool too)."""
    global _parsed
    raw = _raw_environment()
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
