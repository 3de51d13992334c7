"""Checking an answer against its question before it counts.

Every question carries a schema; an answer that schema refuses settles nothing (the API answers 422
`invalid_answer`). An answer to a slot not asked right now (a reviewer correcting a settled value, an
answer given ahead of its question) is checked against what that question's schema would be.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

from .checklist import FIXED_CHECKLIST
from .errors import SchemaUnusable
from .materialize import _INTENT_SCHEMAS, question_schema
from .plan import Plan
from .schema import find_property
from .validation import NO_RETRIEVAL

__all__ = ["accepted_form", "answer_problem", "normalise_answer", "rememberable"]

_CHOICE_SLOTS = ("fixed:tool", "branch:")
# What people write for "at once" where the timing question takes `immediate`.
_IMMEDIATE_WORDS = frozenset({"now", "immediately", "immediate", "right now", "right away", "at once"})
_TIMING_FORM = 'immediate (or "now"), or a date and time with its UTC offset, e.g. 2026-12-03T09:00:00+01:00'


def answer_problem(
    plan: Plan | None, key: str, value: Any, asked: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """Why `value` does not answer `key`, or None when it does. `asked`: slot key -> the schema of the
    question asked for it now (from the latest record)."""
    if key.startswith("arg:") and plan is not None:
        sources = plan.contract.slot_config(key[4:]).sources
        if "user_answer" not in sources:
            # Stored, it would settle nothing and be shown as answered: say so instead of swallowing it.
            return f"this slot is not settled by an answer (its sources: {', '.join(sources) or 'none'})"
    schema = asked.get(key)
    if schema is not None and key.startswith(_CHOICE_SLOTS):
        # A choice is answered by its option's label (the schema) or by the option's index.
        options = schema.get("enum")
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(options, list):
            return None if 0 <= value < len(options) else f"{value} is not the index of an option"
    if schema is None:
        schema = _unasked_schema(plan, key)
    if schema is None:
        return None  # nothing here says what the answer must be; the preflight decides
    try:
        if key.startswith("arg:") and plan is not None and plan.validator is not None:
            problems = plan.validator.value_errors(schema, value)
        else:
            cls = validator_for(schema, default=jsonschema.Draft202012Validator)
            validator = cls(schema, format_checker=cls.FORMAT_CHECKER, registry=NO_RETRIEVAL)
            problems = [e.message for e in validator.iter_errors(value)]
    except SchemaUnusable as exc:
        return f"it cannot be checked: {exc.reason}"
    except Unresolvable as exc:
        return f"it cannot be checked: the schema has a reference nothing here resolves ({exc.ref})"
    if problems and key == "fixed:timing":
        # The oneOf's own message ("not valid under any of the given schemas") says nothing to a person.
        return f"{json.dumps(value, ensure_ascii=False)} is not a time the gate can read"
    return "; ".join(problems[:3]) if problems else None


def normalise_answer(key: str, value: Any) -> Any:
    """An answer as the engine reads it: the user's words for "at once" ("now", "immediately", "right away")
    answer the timing question's `immediate`; every other answer is taken as given."""
    if (
        key == "fixed:timing"
        and isinstance(value, str)
        and " ".join(value.split()).casefold() in _IMMEDIATE_WORDS
    ):
        return "immediate"
    return value


def accepted_form(plan: Plan | None, key: str, asked: Mapping[str, Mapping[str, Any]]) -> str | None:
    """In words, what an answer to `key` must look like: read from the same schema `answer_problem` checks
    against, so the two never disagree. None when nothing here constrains it."""
    if key == "fixed:timing":
        return _TIMING_FORM
    schema = asked.get(key)
    if schema is None:
        schema = _unasked_schema(plan, key)
    if schema is None:
        return None
    words = _describe(schema)
    example = _example(schema)
    return f"{words}, e.g. {example}" if words and example is not None else words or None


def _describe(schema: Mapping[str, Any]) -> str:
    if "const" in schema:
        return f"exactly {json.dumps(schema['const'], ensure_ascii=False)}"
    if isinstance(schema.get("enum"), list):
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for combined in ("oneOf", "anyOf"):
        branches = schema.get(combined)
        if isinstance(branches, list):
            return " or ".join(w for b in branches if isinstance(b, Mapping) and (w := _describe(b)))
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    return " or ".join(_describe_type(t, schema) for t in types if isinstance(t, str))


def _describe_type(kind: str, schema: Mapping[str, Any]) -> str:
    if kind in ("number", "integer"):
        words = ["a whole number" if kind == "integer" else "a number"]
        bounds = (
            ("exclusiveMinimum", "greater than"),
            ("minimum", "at least"),
            ("exclusiveMaximum", "less than"),
            ("maximum", "at most"),
        )
        words += [f"{text} {schema[k]}" for k, text in bounds if isinstance(schema.get(k), int | float)]
        return " ".join(words) + " (digits, no quotes)"
    if kind == "string":
        fmt = schema.get("format")
        words = [_FORMATS.get(fmt, "text") if isinstance(fmt, str) else "text"]
        if isinstance(schema.get("minLength"), int) and schema["minLength"] > 0:
            words.append(
                f"of at least {schema['minLength']} character{'s' if schema['minLength'] > 1 else ''}"
            )
        if isinstance(schema.get("maxLength"), int):
            words.append(f"of at most {schema['maxLength']} characters")
        if isinstance(schema.get("pattern"), str):
            words.append(f"matching the pattern {schema['pattern']}")
        return " ".join(words)
    return {
        "boolean": "true or false",
        "null": "null (leave it out)",
        "object": "a JSON object",
        "array": "a JSON list",
    }.get(kind, kind)


_FORMATS = {
    "date-time": "a date and time with its UTC offset (2026-12-03T09:00:00+01:00)",
    "date": "a date (2026-12-03)",
    "email": "an email address",
    "uri": "an address (URI)",
}


def _example(schema: Mapping[str, Any]) -> str | None:
    """A value the schema takes, to show beside the words: one it lists, else a plain number that fits."""
    examples = schema.get("examples")
    tries = [*examples] if isinstance(examples, list) else []
    if not tries and {"number", "integer"} & set(_types(schema)):
        bounds = [schema.get(k) for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")]
        tries = [120, 1, *(b + d for b in bounds if isinstance(b, int | float) for d in (0, 1, -1))]
    try:
        validator = validator_for(schema, default=jsonschema.Draft202012Validator)(
            schema, registry=NO_RETRIEVAL
        )
        return next((json.dumps(v, ensure_ascii=False) for v in tries if validator.is_valid(v)), None)
    except (jsonschema.SchemaError, Unresolvable):
        return None


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    found = [declared] if isinstance(declared, str) else list(declared) if isinstance(declared, list) else []
    for combined in ("oneOf", "anyOf"):
        for branch in schema.get(combined) or []:
            if isinstance(branch, Mapping):
                found += _types(branch)
    return [t for t in found if isinstance(t, str)]


def rememberable(plan: Plan | None, key: str) -> bool:
    """Whether an answer to `key` may become a preset: only where the slot takes both the user's answer and
    a preset, so a remembered answer never settles what the answer itself could not."""
    sources: tuple[str, ...]
    if key.startswith("arg:"):
        if plan is None:
            return False
        sources = plan.contract.slot_config(key[4:]).sources
    else:
        fixed = next((ob for ob in FIXED_CHECKLIST if ob.key == key), None)
        if fixed is None:
            return False
        sources = fixed.sources
    return "user_answer" in sources and "preset" in sources


def _unasked_schema(plan: Plan | None, key: str) -> Mapping[str, Any] | None:
    if key in _INTENT_SCHEMAS:
        return _INTENT_SCHEMAS[key]
    if not key.startswith("arg:") or plan is None or plan.root is None:
        return None
    found = find_property(plan.root, key[4:])
    if found is None:
        return None  # an argument the tool does not declare: the whole-payload validation decides
    prop, required = found
    return question_schema(plan.contract.input_schema, prop.schema, required)
