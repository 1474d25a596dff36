"""Light events: a replay's fast path, decoding trusted lines without building pydantic models.

Theory of operation. Every event was validated in full when it was written, and a stored
line carries a checksum of its exact bytes. A line whose checksum matches and whose schema
version is current is therefore the very JSON a validated model gave, and validating it
again on every replay buys nothing. On the fast path such a line is decoded by msgspec
straight into a *light event*: a `msgspec.Struct` with the model's fields, which a fold
reads exactly as it reads the model (`event.status`, `event.at`, `event.kind`).

The light classes are derived from the models here, once, so the models stay the only
schema. A kind gets one when every field maps onto msgspec's own checks:

- `str`, `int`, `float`, `bool`, `None`, unions of them and `dict[str, Any]`, with their
  bounds (`max_length`, `ge`, `le`, `gt`, `lt`) carried over as `msgspec.Meta` (a number
  beyond a double, which pydantic would read as infinity, msgspec refuses outright);
- the model's defaults, and unknown fields forbidden as the model forbids them.

A kind with anything else (a nested model, a tuple, an enum, a model validator or
serializer) has no light class, and its lines always take the validating path. So does a
line of an older version (the light class's `v` is bounded to the current one), a line
msgspec refuses for any reason, and every line of a read in strict mode: the fast path
only ever *accepts* a line, it never judges one. Whatever it does not accept is decoded
by `flashfsm.events.codec` as before, which upcasts it or names what is wrong with it.

Light events never leave a fold. A read decodes them only inside `light_reads()`, which
the stream replays of a fold that can settle its state open (`flashfsm.writer.Fold`), and
after the fold `settle_fields` swaps every light event the state kept (a job keeps its
latest status and heartbeat, say) for the model, decoded on the validating path. The fast
path and the validating path fold to equal states: a Hypothesis property in
`tests/test_light.py` holds them to it on random logs of every kind and version, corrupted
lines included.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import types
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import Strict
from pydantic.fields import FieldInfo

from flashfsm.events.models import EVENT_ADAPTER, EVENT_TYPES, EventBase
from flashfsm.events.text import _Masked

_LIGHT: contextvars.ContextVar[bool] = contextvars.ContextVar("flashfsm_light", default=False)

_BOUNDS = {
    annotated_types.MaxLen: "max_length",
    annotated_types.MinLen: "min_length",
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
}
_SCALARS = (str, int, float, bool)


class _NoLightForm(TypeError):
    """A model field with no exact msgspec form: its kind takes the validating path."""


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    """msgspec.Meta keywords for a field's pydantic metadata (or `_NoLightForm`)."""
    bounds: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            bounds.update(_bounds(item.metadata))
        elif isinstance(item, Strict):
            continue  # msgspec's scalars are strict already: it only narrows what is accepted
        elif type(item) in _BOUNDS:
            name = _BOUNDS[type(item)]
            bounds[name] = getattr(item, name)
        elif isinstance(item, _Masked):  # `Outside[n]`: masks Python input, never a stored line
            continue
        else:
            raise _NoLightForm(f"field metadata {item!r}")
    return bounds


def _form(annotation: Any, metadata: list[Any]) -> Any:
    """The msgspec type of a field that validates the same JSON (or `_NoLightForm`)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *extra = get_args(annotation)
        return _form(base, [*metadata, *extra])
    if origin in (Union, types.UnionType):
        if metadata:
            raise _NoLightForm("bounds on a union")
        return Union[tuple(_form(arg, []) for arg in get_args(annotation))]  # noqa: UP007
    if annotation is type(None):
        return annotation
    if origin is dict and get_args(annotation) == (str, Any) and not metadata:
        return dict[str, Any]
    if annotation in _SCALARS:
        bounds = _bounds(metadata)
        return Annotated[annotation, msgspec.Meta(**bounds)] if bounds else annotation
    raise _NoLightForm(f"type {annotation!r}")


def _light_class(model: type[EventBase]) -> type[msgspec.Struct]:
    """The light class of one event model (or `_NoLightForm` when it has none)."""
    decorators = model.__pydantic_decorators__
    if any(
        (
            decorators.model_validators,
            decorators.field_validators,
            decorators.validators,
            decorators.root_validators,
            decorators.model_serializers,
            decorators.field_serializers,
        )
    ):
        raise _NoLightForm("custom validators or serializers")
    config = model.model_config
    if config.get("extra") != "forbid" or not config.get("frozen"):
        raise _NoLightForm("not a frozen model that forbids unknown fields")
    kind = model.model_fields["kind"].default
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        if name == "kind":
            if get_origin(info.annotation) is not Literal:
                raise _NoLightForm("kind is not a literal")
            continue
        if info.alias is not None or info.default_factory is not None:
            raise _NoLightForm(f"field {name!r} has an alias or a default factory")
        form = _form(info.annotation, list(info.metadata))
        if info.is_required():
            fields.append((name, form))
        else:
            fields.append((name, form, info.default))
    return msgspec.defstruct(
        f"Light{model.__name__}",
        fields,
        kw_only=True,
        frozen=True,
        gc=False,  # no light event refers back to anything: the collector need not track it
        forbid_unknown_fields=True,
        tag_field="kind",
        tag=kind,
        namespace={"kind": kind, "__doc__": f"A light `{kind}` (see `flashfsm.events.light`)."},
        module=__name__,
    )


def _light_classes() -> dict[str, type[msgspec.Struct]]:
    found: dict[str, type[msgspec.Struct]] = {}
    for kind, model in EVENT_TYPES.items():
        with contextlib.suppress(_NoLightForm):
            found[kind] = _light_class(model)
    return found


#: Every kind with a light class, and the class.
LIGHT_TYPES: dict[str, type[msgspec.Struct]] = _light_classes()
#: The light classes, for a type check (`type(x) in LIGHT_CLASSES`).
LIGHT_CLASSES: frozenset[type] = frozenset(LIGHT_TYPES.values())

#: Decodes one JSON body into its light event; raises `msgspec.ValidationError` (or
#: `msgspec.DecodeError`) for anything else, which then takes the validating path.
light_decode = msgspec.json.Decoder(Union[tuple(LIGHT_TYPES.values())]).decode  # noqa: UP007
#: What `light_decode` raises for a line it does not accept.
NOT_LIGHT = msgspec.DecodeError  # (msgspec.ValidationError is a subclass)
_encode = msgspec.json.Encoder().encode
_validate_json = EVENT_ADAPTER.validator.validate_json


def light_mode() -> bool:
    """Whether reads in this context may decode light events (inside `light_reads()`)."""
    return _LIGHT.get()


@contextlib.contextmanager
def light_reads(enabled: bool = True) -> Iterator[None]:
    """Within the block, store reads decode trusted lines into light events.

    Only for a fold that settles its state afterwards (`settle_fields`): a light event must
    never reach anything but a fold. Strict reads (`require_checksums`) stay validating.
    """
    token = _LIGHT.set(enabled)
    try:
        yield
    finally:
        _LIGHT.reset(token)


def model_of(light: Any) -> EventBase:
    """The model a light event stands for, validated in full (it is of the current
    version: nothing to upcast)."""
    return _validate_json(_encode(light))  # type: ignore[no-any-return]


def is_light(value: Any) -> bool:
    """Whether `value` is a light event."""
    return type(value) in LIGHT_CLASSES


def settle_fields(state: Any) -> Any:
    """Swap every light event held in a dataclass state's fields for its model (in place).

    A fold that settles this way must keep events only in its own fields, never inside a
    list or a dict: those are not looked into.
    """
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if type(value) in LIGHT_CLASSES:
            setattr(state, f.name, model_of(value))
    return state
