"""Just enough GraphQL to answer the RunPod SDKs: parse a document, resolve, project.

The parser reads one operation (query or mutation; named or anonymous) with variable
definitions, nested selections, aliases and arguments (variables and literals of every
kind). Fragments and directives are not supported — the SDKs send neither.

Execution: each root field calls a resolver `fn(args) -> value`; the value (dicts, lists,
scalars, or callables taking the field's arguments for nested fields with arguments)
is then cut down to exactly the fields the query selected, as a GraphQL server would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class GraphQLError(Exception):
    """An error reported in the response's `errors` list."""


@dataclass
class Field:
    """One selected field."""

    name: str
    alias: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    selections: list[Field] | None = None

    @property
    def key(self) -> str:
        """The response key."""
        return self.alias or self.name


@dataclass
class Operation:
    """A parsed operation."""

    kind: str  # "query" or "mutation"
    name: str | None
    selections: list[Field]


@dataclass(frozen=True)
class Var:
    """A `$variable` reference in an argument."""

    name: str


_TOKEN = re.compile(
    r'(?P<block>"""(?:[^"\\]|\\.|"(?!""))*""")'
    r'|(?P<string>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[_A-Za-z][_0-9A-Za-z]*)"
    r"|(?P<spread>\.\.\.)"
    r"|(?P<punct>[!$():=@\[\]{}|&])"
    r"|(?P<skip>[\s,\ufeff]+|#[^\n]*)",
    re.DOTALL,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise GraphQLError(f"Syntax Error: unexpected character {text[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup or "skip"
        if kind != "skip":
            out.append((kind, m.group()))
    return out


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value) or (kind and tok[0] != kind):
            want = value or kind or "a token"
            got = tok[1] if tok else "end of document"
            raise GraphQLError(f"Syntax Error: expected {want}, found {got!r}")
        self.i += 1
        return tok[1]

    def at(self, value: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[1] == value and tok[0] in ("punct", "spread")

    def operation(self) -> Operation:
        kind, name = "query", None
        tok = self.peek()
        if tok and tok[0] == "name" and tok[1] in ("query", "mutation", "subscription"):
            kind = self.take()
            nxt = self.peek()
            if nxt and nxt[0] == "name":
                name = self.take()
            if self.at("("):
                self.skip_balanced("(", ")")
        if self.at("@"):
            raise GraphQLError("directives are not supported")
        selections = self.selection_set()
        if self.peek() is not None:
            raise GraphQLError("only one operation per document is supported")
        return Operation(kind, name, selections)

    def skip_balanced(self, open_: str, close: str) -> None:
        depth = 0
        while True:
            tok = self.take()
            if tok == open_:
                depth += 1
            elif tok == close:
                depth -= 1
                if depth == 0:
                    return

    def selection_set(self) -> list[Field]:
        self.take("{")
        fields = []
        while not self.at("}"):
            if self.at("..."):
                raise GraphQLError("fragments are not supported")
            fields.append(self.field())
        self.take("}")
        return fields

    def field(self) -> Field:
        name = self.take(kind="name")
        alias = None
        if self.at(":"):
            self.take(":")
            alias, name = name, self.take(kind="name")
        args: dict[str, Any] = {}
        if self.at("("):
            self.take("(")
            while not self.at(")"):
                key = self.take(kind="name")
                self.take(":")
                args[key] = self.value()
            self.take(")")
        if self.at("@"):
            raise GraphQLError("directives are not supported")
        selections = self.selection_set() if self.at("{") else None
        return Field(name, alias, args, selections)

    def value(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise GraphQLError("Syntax Error: unexpected end of document")
        kind, text = tok
        if kind == "punct" and text == "$":
            self.take()
            return Var(self.take(kind="name"))
        if kind == "punct" and text == "[":
            self.take()
            items = []
            while not self.at("]"):
                items.append(self.value())
            self.take("]")
            return items
        if kind == "punct" and text == "{":
            self.take()
            obj = {}
            while not self.at("}"):
                key = self.take(kind="name")
                self.take(":")
                obj[key] = self.value()
            self.take("}")
            return obj
        self.take()
        if kind == "string":
            return _unescape(text[1:-1])
        if kind == "block":
            return text[3:-3]
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "name":
            return {"true": True, "false": False, "null": None}.get(text, text)  # enums: str
        raise GraphQLError(f"Syntax Error: unexpected {text!r}")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    import json

    return json.loads(f'"{text}"')


def parse(query: str) -> Operation:
    """Parse a one-operation document, or raise `GraphQLError`."""
    if not isinstance(query, str) or not query.strip():
        raise GraphQLError("Must provide query string.")
    return _Parser(query).operation()


def substitute(value: Any, variables: Mapping[str, Any]) -> Any:
    """An argument value with its `$variables` replaced."""
    if isinstance(value, Var):
        return variables.get(value.name)
    if isinstance(value, list):
        return [substitute(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, variables) for k, v in value.items()}
    return value


def project(value: Any, selections: list[Field] | None, variables: Mapping[str, Any]) -> Any:
    """`value` reduced to the selected fields (callables get the field's arguments)."""
    if selections is None or value is None:
        return value
    if isinstance(value, list):
        return [project(v, selections, variables) for v in value]
    if not isinstance(value, Mapping):
        return value
    out = {}
    for f in selections:
        item = value.get(f.name)
        if callable(item):
            item = item({k: substitute(v, variables) for k, v in f.args.items()})
        out[f.key] = project(item, f.selections, variables)
    return out


Resolver = Callable[[dict[str, Any]], Any]


def execute(
    operation: Operation,
    variables: Mapping[str, Any],
    resolvers: Mapping[str, Mapping[str, Resolver]],
) -> dict[str, Any]:
    """Run an operation against `resolvers[kind][root_field]`; a GraphQL response dict."""
    roots = resolvers.get(operation.kind, {})
    data: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    for f in operation.selections:
        resolver = roots.get(f.name)
        if resolver is None:
            type_name = "Mutation" if operation.kind == "mutation" else "Query"
            errors.append({"message": f'Cannot query field "{f.name}" on type "{type_name}".'})
            data[f.key] = None
            continue
        try:
            value = resolver({k: substitute(v, variables) for k, v in f.args.items()})
            data[f.key] = project(value, f.selections, variables)
        except GraphQLError as exc:
            errors.append({"message": str(exc), "path": [f.key]})
            data[f.key] = None
    if errors:
        return {
            "errors": errors,
            "data": data if any(v is not None for v in data.values()) else None,
        }
    return {"data": data}
