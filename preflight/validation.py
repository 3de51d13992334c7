"""Payload validation: jsonschema, the one validator, with the schema's own dialect and its format checks.

A validator is built once per tool schema (plan.py caches it by digest) and one per property schema it
checks values against; jsonschema writes every error message a record shows. References resolve only inside
the schema: nothing is fetched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

from .errors import SchemaUnusable

__all__ = ["NO_RETRIEVAL", "PayloadValidator", "same_json"]

# An empty registry: a `$ref` that the schema itself does not resolve is unresolvable, never fetched over the
# network (jsonschema's default would open the URL: a tool definition must not make the gate call out).
NO_RETRIEVAL: Registry[Any] = Registry()

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
        checking = _COMPATIBLE.get(cls, cls) if "dependencies" in _keys(schema) else cls
        self.slow = checking(schema, format_checker=cls.FORMAT_CHECKER, registry=NO_RETRIEVAL)
        # Validators for parts of the schema (a property's), by the part's identity: see value_errors.
        self.parts: dict[int, tuple[Mapping[str, Any], Any]] = {}

    def is_valid(self, instance: Any) -> bool:
        """False, too, for a schema whose references cannot be followed (located_errors and value_errors
        raise SchemaUnusable for it)."""
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
        validator (a compiled plan's property), so its validator is built once and kept."""
        if kept:
            entry = self.parts.get(id(schema))
            if entry is None or entry[0] is not schema:
                entry = (schema, self.slow.evolve(schema=schema))
                if len(self.parts) >= 1024:
                    self.parts.clear()  # plans recompiled over a long run: their old parts go
                self.parts[id(schema)] = entry
            sub = entry[1]
        else:
            sub = self.slow.evolve(schema=schema)
        try:
            if sub.is_valid(value):
                return []
        except (Unresolvable, RecursionError):
            pass  # _iter_errors says why, as SchemaUnusable
        return [e.message for e in sorted(_iter_errors(sub, value), key=lambda e: [str(p) for p in e.path])]


def _unusable(exc: Unresolvable) -> SchemaUnusable:
    return SchemaUnusable(f"the schema has a reference nothing here resolves ({exc.ref})")


def _iter_errors(validator: Any, instance: Any) -> list[jsonschema.ValidationError]:
    try:
        return list(validator.iter_errors(instance))
    except Unresolvable as exc:
        raise _unusable(exc) from None
    except RecursionError:
        raise SchemaUnusable("the schema's references loop without end") from None


def _keys(schema: Any) -> set[str]:
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
