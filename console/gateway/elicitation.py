"""Questions of a record as one MCP form elicitation, and the form's answers back as slot answers.

A form carries only what the spec's `PrimitiveSchemaDefinition` admits: flat strings, numbers, booleans and
string enums. Each question's schema goes through the builders below in order; the first that recognises
the schema makes the form field and the decoder that turns the field's value back into the answer. A
question no builder recognises (an object, an array of objects) cannot be asked in a form: it goes to the
console by URL instead. A new question kind with a schema (confirmation, consent) needs no code here when
its schema is one of these shapes, and one builder when it is not.

Every field is checked with the SDK's own `PrimitiveSchemaDefinition` models (both protocol eras) before it
is sent; a builder that produced anything else is a bug, refused rather than sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The per-version packages are where the SDK models the primitive schemas strictly (mcp.server.elicitation
# imports its check from the same place).
from mcp_types._v2025_11_25 import PrimitiveSchemaDefinition as _Primitive2025
from mcp_types._v2026_07_28 import PrimitiveSchemaDefinition as _Primitive2026
from pydantic import TypeAdapter, ValidationError

_CHECKS: tuple[TypeAdapter[Any], ...] = (TypeAdapter(_Primitive2025), TypeAdapter(_Primitive2026))
_STRING_FORMATS = frozenset({"date", "date-time", "email", "uri"})


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Field:
    slot: str
    schema: dict[str, Any]
    decode: Callable[[Any], Any] = _same


@dataclass(frozen=True, slots=True)
class Form:
    """One form elicitation: the message, the `requestedSchema`, and how to read the answers back."""

    message: str
    fields: tuple[Field, ...]
    # Questions a form cannot carry: asked on the console page instead.
    unformable: tuple[str, ...] = ()
    requested_schema: dict[str, Any] = field(default_factory=dict)

    def answers(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """The slot answers of an accepted form. A field the user left empty is not an answer."""
        return {f.slot: f.decode(content[f.slot]) for f in self.fields if content.get(f.slot) is not None}


def _common(question: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"title": str(question.get("text") or question["slot"])}
    description = schema.get("description")
    if isinstance(description, str) and description:
        out["description"] = description
    return out


def _string(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    if schema.get("type") != "string" or "enum" in schema or "const" in schema:
        return None
    prop = {"type": "string", **_common(question, schema)}
    for key in ("minLength", "maxLength"):
        if isinstance(schema.get(key), int):
            prop[key] = schema[key]
    if schema.get("format") in _STRING_FORMATS:
        prop["format"] = schema["format"]
    return Field(question["slot"], prop)


def _number(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    kind = schema.get("type")
    if kind not in ("number", "integer") or "enum" in schema or "const" in schema:
        return None
    prop = {"type": kind, **_common(question, schema)}
    for key in ("minimum", "maximum"):
        if isinstance(schema.get(key), int | float) and not isinstance(schema.get(key), bool):
            prop[key] = schema[key]
    # exclusiveMinimum has no form field; the answer is still checked against the question's own schema.
    return Field(question["slot"], prop)


def _boolean(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    # A yes/no question, and a confirmation or consent whose only acceptable answer is `true`.
    if schema.get("type") == "boolean" or schema.get("const") is True:
        return Field(question["slot"], {"type": "boolean", **_common(question, schema)})
    return None


def _string_choice(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    options = schema.get("enum")
    if isinstance(options, list) and options and all(isinstance(o, str) for o in options):
        return Field(question["slot"], {"type": "string", "enum": list(options), **_common(question, schema)})
    branches = schema.get("oneOf") or schema.get("anyOf")
    if (
        isinstance(branches, list)
        and branches
        and all(isinstance(b, Mapping) and isinstance(b.get("const"), str) for b in branches)
    ):
        one_of = [{"const": b["const"], "title": str(b.get("title") or b["const"])} for b in branches]
        return Field(question["slot"], {"type": "string", "oneOf": one_of, **_common(question, schema)})
    return None


def _choice_of_any(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    """Options that are not all strings (numbers, an object per option): a titled string choice whose
    value is the option's position, decoded back to the option itself."""
    options = schema.get("enum")
    if not (isinstance(options, list) and options) or all(isinstance(o, str) for o in options):
        return None
    import json

    one_of = [{"const": str(i), "title": json.dumps(o, sort_keys=True)} for i, o in enumerate(options)]
    chosen = list(options)

    def decode(value: Any) -> Any:
        try:
            return chosen[int(value)]
        except (TypeError, ValueError, IndexError):
            return value  # not one of the options: the question's schema refuses it with the reason

    return Field(question["slot"], {"type": "string", "oneOf": one_of, **_common(question, schema)}, decode)


def _either_const_or_string(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    """A keyword or a free string (the timing question: `immediate` or a date-time): one text field that
    names the keywords; the question's own schema decides whether the answer fits."""
    branches = schema.get("oneOf") or schema.get("anyOf")
    if not isinstance(branches, list) or not branches:
        return None
    words = [b["const"] for b in branches if isinstance(b, Mapping) and isinstance(b.get("const"), str)]
    free = [b for b in branches if isinstance(b, Mapping) and b.get("type") == "string" and "const" not in b]
    if not words or len(words) + len(free) != len(branches):
        return None
    formats = sorted({str(b["format"]) for b in free if b.get("format")})
    hint = " or ".join([*(repr(w) for w in words), *(f"a {f} (ISO 8601)" for f in formats)] or ["text"])
    prop = {"type": "string", **_common(question, schema)}
    prop["description"] = (prop.get("description", "") + f" Answer {hint}.").strip()
    return Field(question["slot"], prop)


def _string_list(question: Mapping[str, Any], schema: Mapping[str, Any]) -> Field | None:
    items = schema.get("items")
    if schema.get("type") != "array" or not isinstance(items, Mapping):
        return None
    options = items.get("enum")
    if not (isinstance(options, list) and options and all(isinstance(o, str) for o in options)):
        return None
    prop = {"type": "array", "items": {"type": "string", "enum": list(options)}, **_common(question, schema)}
    for key in ("minItems", "maxItems"):
        if isinstance(schema.get(key), int):
            prop[key] = schema[key]
    return Field(question["slot"], prop)


# In order; the first builder that recognises a question's schema makes its field.
BUILDERS = [
    _string,
    _number,
    _boolean,
    _string_choice,
    _choice_of_any,
    _either_const_or_string,
    _string_list,
]


def is_primitive(prop: Mapping[str, Any]) -> bool:
    """Whether the SDK's own models (both protocol eras) accept `prop` as a form field."""
    for check in _CHECKS:
        try:
            check.validate_python(dict(prop))
        except ValidationError:
            return False
    return True


def field_for(question: Mapping[str, Any]) -> Field | None:
    schema = question.get("schema")
    if not isinstance(schema, Mapping):
        return None
    for build in BUILDERS:
        made = build(question, schema)
        if made is not None:
            if not is_primitive(made.schema):
                raise ValueError(
                    f"{question['slot']}: built a form field the spec does not admit: {made.schema}"
                )
            return made
    return None


def _default(f: Field, candidate: Any) -> Field:
    """The model's proposal as the field's default: shown for the user to keep or change, never counted
    until the user sends the form."""
    if candidate is None:
        return f
    with_default = {**f.schema, "default": candidate}
    if f.schema.get("oneOf") and not any(o["const"] == candidate for o in f.schema["oneOf"]):
        return f
    if f.schema.get("enum") and candidate not in f.schema["enum"]:
        return f
    return Field(f.slot, with_default, f.decode) if is_primitive(with_default) else f


def build_form(
    questions: Sequence[Mapping[str, Any]],
    *,
    candidates: Mapping[str, Any] | None = None,
    intro: str = "",
    problem: str = "",
) -> Form:
    """One form for the questions of one frontier. `candidates`: the model's proposals by slot key."""
    fields: list[Field] = []
    unformable: list[str] = []
    for question in questions:
        made = field_for(question)
        if made is None:
            unformable.append(str(question["slot"]))
            continue
        fields.append(_default(made, (candidates or {}).get(made.slot)))
    lines = [line for line in (problem, intro) if line]
    lines += [f"- {q.get('text') or q['slot']}" for q in questions if q["slot"] not in unformable]
    schema = {
        "type": "object",
        "properties": {f.slot: f.schema for f in fields},
        "required": [f.slot for f in fields],
    }
    return Form("\n".join(lines), tuple(fields), tuple(unformable), schema)
