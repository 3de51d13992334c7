"""Questions as one form: every field passes the SDK's PrimitiveSchemaDefinition, answers decode back."""

from __future__ import annotations

from typing import Any

import pytest

from console.gateway.elicitation import build_form, field_for, is_primitive

TIMING = {"oneOf": [{"const": "immediate"}, {"type": "string", "format": "date-time"}]}


def q(slot: str, schema: Any, text: str = "") -> dict[str, Any]:
    return {"slot": slot, "text": text or f"What should {slot} be?", "schema": schema}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "string", "minLength": 1, "format": "email"},
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "integer", "minimum": 1, "maximum": 9},
        {"type": "boolean"},
        {"const": True},
        {"enum": ["no longer needed", "ordered by mistake"]},
        {"oneOf": [{"const": "a", "title": "A"}, {"const": "b"}]},
        {"enum": [1, 2, 3]},
        TIMING,
        {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
    ],
)
def test_every_form_able_question_becomes_a_field_the_sdk_accepts(schema: Any) -> None:
    made = field_for(q("arg:x", schema))
    assert made is not None
    assert is_primitive(made.schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"type": "array", "items": {"type": "object"}},
        {"type": "array", "items": {"type": "string"}},
        {"oneOf": [{"type": "object"}, {"type": "string"}]},
    ],
)
def test_a_question_a_form_cannot_carry_is_left_for_the_console(schema: Any) -> None:
    form = build_form([q("arg:edits", schema), q("arg:path", {"type": "string"})])
    assert form.unformable == ("arg:edits",)
    assert list(form.requested_schema["properties"]) == ["arg:path"]


def test_one_form_carries_every_question_of_the_frontier_with_the_models_proposals_as_defaults() -> None:
    form = build_form(
        [q("fixed:timing", TIMING), q("arg:path", {"type": "string"}), q("arg:content", {"type": "string"})],
        candidates={"arg:path": "/tmp/a.txt"},
    )
    props = form.requested_schema["properties"]
    assert list(props) == ["fixed:timing", "arg:path", "arg:content"]
    assert form.requested_schema["required"] == ["fixed:timing", "arg:path", "arg:content"]
    assert props["arg:path"]["default"] == "/tmp/a.txt"
    assert "default" not in props["arg:content"]
    assert "'immediate'" in props["fixed:timing"]["description"]


def test_a_proposal_the_field_cannot_hold_is_not_offered_as_default() -> None:
    form = build_form([q("arg:reason", {"enum": ["a", "b"]})], candidates={"arg:reason": "c"})
    assert "default" not in form.requested_schema["properties"]["arg:reason"]


def test_answers_decode_to_the_options_themselves_and_empty_fields_are_not_answers() -> None:
    form = build_form([q("arg:n", {"enum": [10, 20]}), q("arg:memo", {"type": "string"})])
    assert form.answers({"arg:n": "1", "arg:memo": None}) == {"arg:n": 20}
    assert form.answers({"arg:n": "7"}) == {"arg:n": "7"}  # not an option: the question's schema refuses it
