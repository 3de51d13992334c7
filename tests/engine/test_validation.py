from __future__ import annotations

import pytest

from preflight.errors import SchemaUnusable
from preflight.validation import PayloadValidator


def test_errors_name_the_argument() -> None:
    validator = PayloadValidator(
        {"type": "object", "properties": {"amount": {"type": "number", "minimum": 1}}}
    )
    assert not validator.is_valid({"amount": 0})
    assert validator.errors({"amount": 0}) == ["amount: 0 is less than the minimum of 1"]


def test_a_property_value_is_checked_against_its_own_schema_with_formats_and_the_same_messages() -> None:
    schema = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "n": {"type": "integer", "maximum": 3},
        },
    }
    validator = PayloadValidator(schema)
    props = schema["properties"]
    for kept in (False, True, True):  # built on first use, then the kept one answers
        assert validator.value_errors(props["email"], "alice@example.com", kept=kept) == []
        assert validator.value_errors(props["email"], "no-at-sign", kept=kept) == [
            "'no-at-sign' is not a 'email'"
        ]
        assert validator.value_errors(props["n"], 4, kept=kept) == ["4 is greater than the maximum of 3"]


def test_a_property_whose_reference_nothing_resolves_makes_the_schema_unusable() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/remote.json"}}}
    validator = PayloadValidator(schema)
    with pytest.raises(SchemaUnusable, match="nothing here resolves"):
        validator.value_errors(schema["properties"]["a"], 1, kept=True)


def test_a_reference_the_validator_cannot_follow_refuses_the_payload_instead_of_raising() -> None:
    schema = {"type": "object", "properties": {"a": {"items": {"$ref": "https://example.com/remote.json"}}}}
    validator = PayloadValidator(schema)
    assert validator.is_valid({"a": [1]}) is False
    assert "cannot be resolved" in validator.errors({"a": [1]})[0]


def test_references_that_loop_refuse_the_payload_instead_of_exhausting_the_stack() -> None:
    schema = {
        "type": "object",
        "$defs": {"n": {"$ref": "#/$defs/n"}},
        "properties": {"a": {"$ref": "#/$defs/n"}},
    }
    validator = PayloadValidator(schema)
    assert validator.is_valid({"a": 1}) is False
    assert validator.errors({"a": 1})


def test_legacy_dependencies_in_a_2020_12_schema_are_validated_as_dependencies() -> None:
    # The materializer reads `dependencies` as dependentRequired; the validator must not let it pass.
    validator = PayloadValidator({"type": "object", "dependencies": {"bar": ["foo"]}})
    assert validator.is_valid({"bar": 1}) is False
    assert validator.is_valid({"bar": 1, "foo": 2}) is True
