"""Checking an answer against its question before it counts.

Every question carries a schema; an answer that schema refuses settles nothing (the API answers 422
`invalid_answer`). An answer to a slot not asked right now (a reviewer correcting a settled value, an
answer given ahead of its question) is checked against what that question's schema would be.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

from .checklist import FIXED_CHECKLIST
from .engine import _INTENT_SCHEMAS, Plan, question_schema
from .errors import SchemaUnusable
from .schema import ObjectNode, Property
from .validation import NO_RETRIEVAL

__all__ = ["answer_problem", "rememberable"]

_CHOICE_SLOTS = ("fixed:tool", "branch:")


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
    return "; ".join(problems[:3]) if problems else None


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
    if key in _INTENT_SCHEMAS and key != "fixed:tool":
        return _INTENT_SCHEMAS[key]
    if not key.startswith("arg:") or plan is None or plan.root is None:
        return None
    found = _property(plan.root, key[4:])
    if found is None:
        return None  # an argument the tool does not declare: the whole-payload validation decides
    prop, required = found
    return question_schema(plan.contract.input_schema, prop.schema, required)


def _property(node: ObjectNode, path: str) -> tuple[Property, bool] | None:
    head, _, rest = path.partition(".")
    prop = node.properties.get(head)
    if prop is None:
        return None
    if not rest:
        return prop, head in node.required
    return _property(prop.child, rest) if prop.child is not None else None
