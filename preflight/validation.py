"""Payload validation: a compiled fast path for the common schema subset, jsonschema as the authority.

Tool schemas are mostly flat objects of typed scalars. For those, a validator compiled into closures
answers without jsonschema's overhead. Any keyword outside the subset makes the whole schema fall back to
jsonschema, and a payload the fast path rejects is always re-checked by jsonschema, which also writes the
error messages. The fast path can therefore only ever be asked "is this valid?" on schemas it fully
understands; property tests compare it with jsonschema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
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

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$id",
        "optional",
        "x-preflight",
    }
)
_FAST_DRAFTS = (
    jsonschema.Draft202012Validator,
    jsonschema.Draft201909Validator,
    jsonschema.Draft7Validator,
    jsonschema.Draft6Validator,
)


class _Unsupported(Exception):
    pass


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
        self.fast: Check | None = None
        self.formats: jsonschema.FormatChecker | None = cls.FORMAT_CHECKER if cls in _FAST_DRAFTS else None
        # Compiled checks of parts of the schema (a property's), by the part's identity: see value_errors.
        self.parts: dict[int, tuple[Mapping[str, Any], Check | None]] = {}
        if cls in _FAST_DRAFTS:
            try:
                self.fast = _compile(schema, cls.FORMAT_CHECKER)
            except _Unsupported:
                self.fast = None

    def is_valid(self, instance: Any) -> bool:
        """False, too, for a schema whose references cannot be followed (located_errors and value_errors
        raise SchemaUnusable for it)."""
        if self.fast is not None and self.fast(instance):
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
        validator (a compiled plan's property), so its fast check is compiled once and kept."""
        if kept and self.formats is not None:
            entry = self.parts.get(id(schema))
            if entry is None or entry[0] is not schema:
                try:
                    check: Check | None = _compile(schema, self.formats)
                except _Unsupported:
                    check = None
                entry = (schema, check)
                if len(self.parts) >= 1024:
                    self.parts.clear()  # plans recompiled over a long run: their old parts go
                self.parts[id(schema)] = entry
            if entry[1] is not None and entry[1](value):
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


_TYPES: dict[str, Check] = {
    "string": lambda x: type(x) is str,
    "integer": lambda x: type(x) is int or (type(x) is float and x.is_integer()),
    "number": _is_number,
    "boolean": lambda x: type(x) is bool,
    "object": lambda x: type(x) is dict,
    "array": lambda x: type(x) is list,
    "null": lambda x: x is None,
}


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


def _compile(schema: Any, formats: jsonschema.FormatChecker) -> Check:
    if schema is True or schema == {}:
        return lambda x: True
    if schema is False:
        return lambda x: False
    if not isinstance(schema, Mapping):
        raise _Unsupported
    checks: list[Check] = []
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        checks.append(_keyword(key, value, schema, formats))
    if len(checks) == 1:
        return checks[0]

    def check(x: Any) -> bool:
        # a plain loop: measurably cheaper than all() over a generator on this hot path
        for c in checks:  # noqa: SIM110
            if not c(x):
                return False
        return True

    return check


def _keyword(key: str, value: Any, schema: Mapping[str, Any], formats: jsonschema.FormatChecker) -> Check:
    if key == "type":
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or any(n not in _TYPES for n in names):
            raise _Unsupported
        tests = [_TYPES[n] for n in names]
        if len(tests) == 1:
            return tests[0]
        return lambda x: any(t(x) for t in tests)
    if key == "properties":
        compiled = tuple((name, _compile(sub, formats)) for name, sub in value.items())

        def properties(x: Any) -> bool:
            if type(x) is not dict:
                return True
            for name, c in compiled:  # noqa: SIM110  (a plain loop, as in check() above)
                if name in x and not c(x[name]):
                    return False
            return True

        return properties
    if key == "required":
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise _Unsupported
        names = frozenset(value)
        return lambda x: type(x) is not dict or names <= x.keys()
    if key == "additionalProperties":
        known = set(schema.get("properties") or {})
        if "patternProperties" in schema:
            raise _Unsupported
        extra = _compile(value, formats)
        return lambda x: type(x) is not dict or all(extra(v) for k, v in x.items() if k not in known)
    if key == "items":
        if not isinstance(value, Mapping | bool) or "prefixItems" in schema:
            raise _Unsupported
        item = _compile(value, formats)
        return lambda x: type(x) is not list or all(item(v) for v in x)
    if key == "enum":
        options = list(value)
        return lambda x: any(same_json(x, o) for o in options)
    if key == "const":
        return lambda x: same_json(x, value)
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if not _is_number(value):
            raise _Unsupported
        compare: Callable[[Any], bool] = {
            "minimum": lambda x: x >= value,
            "maximum": lambda x: x <= value,
            "exclusiveMinimum": lambda x: x > value,
            "exclusiveMaximum": lambda x: x < value,
        }[key]
        return lambda x: not _is_number(x) or compare(x)
    if key in ("minLength", "maxLength", "minItems", "maxItems"):
        bound, sized = int(value), str if key.endswith("Length") else list
        if key.startswith("min"):
            return lambda x: type(x) is not sized or len(x) >= bound
        return lambda x: type(x) is not sized or len(x) <= bound
    if key == "pattern":
        try:
            regex = re.compile(value)
        except re.error:
            raise _Unsupported from None
        return lambda x: type(x) is not str or regex.search(x) is not None
    if key == "format":
        if not isinstance(value, str):
            raise _Unsupported
        if value not in formats.checkers:
            return lambda x: True  # an unknown format is an annotation
        # FormatChecker.conforms without its per-call lookup and its FormatError on every failure.
        func, raises = formats.checkers[value]

        def conforms(x: Any) -> bool:
            try:
                return bool(func(x))
            except raises:
                return False

        return conforms
    raise _Unsupported
