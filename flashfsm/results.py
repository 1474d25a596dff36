"""Results that cross an orchestrator's boundary: `to_dict` / `from_dict` on the public results.

An orchestrator stores what a task returns (Airflow's XCom, Prefect's results, Dagster's
outputs, DBOS's step outputs), usually as JSON. `Portable` gives a result dataclass
(`flashfsm.RunResult`, `flashfsm.PollResult`) a plain-JSON form and its way back:
`to_dict()` is a dict of JSON types only (its `metrics` are the JSON a worker's output was
recorded as), and `from_dict(data)` validates it field by field (pydantic, strict), so a
stored result that was edited, truncated or written by another version is refused with
the field that is wrong, never half-read.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Any, Self

from pydantic import TypeAdapter, ValidationError


@functools.cache
def _fields(cls: type) -> dict[str, tuple[TypeAdapter[Any], bool]]:
    """Each field's validator and whether it must be given (it has no default)."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: (
            TypeAdapter(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    }


class Portable:
    """`to_dict` and `from_dict` for a result dataclass (see the module's docstring)."""

    def to_dict(self) -> dict[str, Any]:
        """The result as a dict of JSON types (a fresh copy: changing it changes nothing)."""
        return dataclasses.asdict(typing.cast(Any, self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The result `to_dict` gave; a `ValueError` names an unknown, missing or
        ill-typed field (nothing is coerced: `"true"` is not a bool)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}.from_dict takes a mapping, not {type(data).__name__}")
        fields = _fields(cls)
        unknown = sorted(str(k) for k in data if k not in fields)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}")
        missing = sorted(
            name for name, (_, required) in fields.items() if required and name not in data
        )
        if missing:
            raise ValueError(f"{cls.__name__} needs {', '.join(missing)}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            try:
                values[name] = fields[name][0].validate_python(value, strict=True)
            except ValidationError as exc:
                problem = exc.errors()[0]["msg"]
                raise ValueError(f"{cls.__name__}.{name}: {problem}") from None
        return cls(**values)
