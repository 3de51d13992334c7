"""Payload validation: jsonschema is the authority, jsonschema-rs answers "valid" quickly where it can.

jsonschema writes every error message (records show them) and decides every payload jsonschema-rs does not
accept. jsonschema-rs is only asked about schemas on which the two cannot disagree (see _DIVERGING), with
jsonschema's own format checks, so it can make a valid payload's answer faster but never change an answer;
property tests compare the answers with jsonschema's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import cache, partial
from typing import Any

import jsonschema
import jsonschema_rs
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

from .errors import SchemaUnusable

__all__ = ["NO_RETRIEVAL", "PayloadValidator", "same_json", "schema_keys"]

# An empty registry: a `$ref` that the schema itself does not resolve is unresolvable, never fetched over the
# network (jsonschema's default would open the URL: a tool definition must not make the gate call out).
NO_RETRIEVAL: Registry[Any] = Registry()

_RUST = {
    jsonschema.Draft202012Validator: jsonschema_rs.Draft202012Validator,
    jsonschema.Draft201909Validator: jsonschema_rs.Draft201909Validator,
    jsonschema.Draft7Validator: jsonschema_rs.Draft7Validator,
    jsonschema.Draft6Validator: jsonschema_rs.Draft6Validator,
}
# Keywords on which jsonschema-rs can accept what jsonschema refuses: its regexes are not Python's re
# (`^\W$` takes "é"), multipleOf is exact where jsonschema's float division is not (0.3 of 0.1), and
# references are left to jsonschema's registry (never retrieved, loops caught).
_DIVERGING = frozenset({"pattern", "patternProperties", "multipleOf", "$ref", "$dynamicRef", "$recursiveRef"})

# Draft 2019-09 split `dependencies` into dependentRequired / dependentSchemas and dropped it; schemas written
# for earlier drafts still use it without saying so, and the materializer reads it as dependentRequired.
# Validating it too (the suite's "dependencies compatibility") can only refuse more payloads, never fewer.
_COMPATIBLE = {
    base: jsonschema.validators.extend(
        base, {"dependencies": jsonschema.Draft7Validator.VALIDATORS["dependencies"]}
    )
    for base in (jsonschema.Draft202012Validator, jsonschema.Draft201909Validator)
}


class PayloadValidator:
    """Validate argument objects against one tool's `inputSchema`."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        keys = schema_keys(schema)
        checking = _COMPATIBLE.get(cls, cls) if "dependencies" in keys else cls
        self.slow = checking(schema, format_checker=cls.FORMAT_CHECKER, registry=NO_RETRIEVAL)
        self.dialect = cls
        self.rust = _rust(cls, schema, keys)
        # jsonschema-rs validators of parts of the schema (a property's), by identity (value_errors).
        self.parts: dict[int, tuple[Mapping[str, Any], jsonschema_rs.Validator | None]] = {}

    def is_valid(self, instance: Any) -> bool:
        """False, too, for a schema whose references cannot be followed (located_errors and value_errors
        raise SchemaUnusable for it)."""
        if _accepts(self.rust, instance):
            return True
        try:
            return bool(self.slow.is_valid(instance))
        except (Unresolvable, RecursionError):
            return False  # a reference nobody can follow, or one that loops: the payload is not shown valid

    def errors(self, instance: Any) -> list[str]:
        try:
            errors = sorted(self.slow.iter_errors(instance), key=lambda e: list(e.absolute_path))
        except Unresolvable as exc:
            return [f"(arguments): the schema refers to {exc.ref}, which cannot be resolved"]
        except RecursionError:
            return ["(arguments): the schema's references loop without end"]
        return [f"{'/'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in errors]

    def refusals(self, instance: Any) -> tuple[tuple[tuple[str, ...], frozenset[str]], ...]:
        """Each error as (the argument path it is about, the keywords on its schema path)."""
        try:
            return tuple(
                (
                    tuple(str(p) for p in e.absolute_path),
                    frozenset(str(k) for k in (*e.absolute_schema_path, e.validator)),
                )
                for e in self.slow.iter_errors(instance)
            )
        except (Unresolvable, RecursionError):
            return (((), frozenset({"$ref"})),)

    def located_errors(self, instance: Any) -> list[tuple[tuple[str | int, ...], str]]:
        """(where in the payload, what is wrong) for every error, in payload order."""
        errors = sorted(_iter_errors(self.slow, instance), key=lambda e: [str(p) for p in e.absolute_path])
        return [(tuple(e.absolute_path), e.message) for e in errors]

    def value_errors(self, schema: Mapping[str, Any], value: Any, *, kept: bool = False) -> list[str]:
        """What `schema`, a part of this tool's schema, refuses in `value`; local `$ref`s resolve against the
        whole schema, and formats are checked as for the payload. `kept`: `schema` lives as long as this
        validator (a compiled plan's property), so its jsonschema-rs validator is built once and kept."""
        if kept:
            entry = self.parts.get(id(schema))
            if entry is None or entry[0] is not schema:
                entry = (schema, _rust(self.dialect, schema, schema_keys(schema)))
                if len(self.parts) >= 1024:
                    self.parts.clear()  # plans recompiled over a long run: their old parts go
                self.parts[id(schema)] = entry
            if _accepts(entry[1], value):
                return []
        sub = self.slow.evolve(schema=schema)
        return [e.message for e in sorted(_iter_errors(sub, value), key=lambda e: [str(p) for p in e.path])]


def _iter_errors(validator: Any, instance: Any) -> list[jsonschema.ValidationError]:
    try:
        return list(validator.iter_errors(instance))
    except Unresolvable as exc:
        raise SchemaUnusable(f"the schema has a reference nothing here resolves ({exc.ref})") from None
    except RecursionError:
        raise SchemaUnusable("the schema's references loop without end") from None


def _rust(cls: Any, schema: Any, keys: set[str]) -> jsonschema_rs.Validator | None:
    """A jsonschema-rs validator that agrees with jsonschema on `schema` (`keys`: its schema_keys), or None
    where it might not."""
    if cls not in _RUST or not _DIVERGING.isdisjoint(keys):
        return None
    try:
        return _RUST[cls](schema, formats=_formats(cls), validate_formats=True, retriever=_no_retrieval)
    except Exception:  # a schema jsonschema-rs will not build: jsonschema alone
        return None


def _accepts(rust: jsonschema_rs.Validator | None, instance: Any) -> bool:
    try:
        return rust is not None and _plain(instance) and rust.is_valid(instance)
    except Exception:  # a value it cannot read (a non-str key, a lone surrogate): jsonschema decides
        return False


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> bool:
    """No tuple or Decimal inside: jsonschema-rs reads them as an array and a number, jsonschema does not."""
    if type(value) in _SCALARS:
        return True
    if isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            if type(item) not in _SCALARS and not _plain(item):
                return False
        return True
    return not isinstance(value, tuple | Decimal)


@cache
def _formats(cls: Any) -> dict[str, Callable[[str], bool]]:
    """jsonschema's own format checks, so both reach the same format verdicts."""
    return {name: partial(cls.FORMAT_CHECKER.conforms, format=name) for name in cls.FORMAT_CHECKER.checkers}


def _no_retrieval(uri: str) -> Any:
    raise ValueError(f"not retrieved: {uri}")


def schema_keys(schema: Any) -> set[str]:
    """Every object key anywhere in the schema (a cheap over-approximation of the keywords it uses)."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            found.update(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _is_number(x: Any) -> bool:
    return (type(x) is int or type(x) is float) and x is not True and x is not False


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: 1 and 1.0 are, 1 and True are not."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return bool(a == b)
