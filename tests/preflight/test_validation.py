from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflight.validation import PayloadValidator

_scalars = (
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.text(max_size=4)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)

_leaf_schemas = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object"])}
    ),
    st.fixed_dictionaries(
        {
            "type": st.lists(
                st.sampled_from(["string", "integer", "null"]), min_size=1, max_size=2, unique=True
            )
        }
    ),
    st.fixed_dictionaries({"enum": st.lists(_scalars, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"const": _scalars}),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["number", "integer"])},
        optional={
            k: st.integers(-3, 3) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("string"), "minLength": st.integers(0, 3), "maxLength": st.integers(0, 3)}
    ),
    st.fixed_dictionaries({"type": st.just("string"), "pattern": st.sampled_from(["^a", "b$", "[0-9]"])}),
    st.fixed_dictionaries({"type": st.just("string"), "format": st.sampled_from(["email", "date", "uuid"])}),
    st.fixed_dictionaries(
        {
            "type": st.just("array"),
            "items": st.fixed_dictionaries({"type": st.sampled_from(["string", "integer"])}),
            "maxItems": st.integers(0, 2),
        }
    ),
)
_object_schemas = st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), _leaf_schemas, max_size=3),
    },
    optional={
        "required": st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3),
        "additionalProperties": st.booleans() | _leaf_schemas,
    },
)


@settings(max_examples=500)
@given(_object_schemas, st.data())
def test_the_fast_path_agrees_with_jsonschema(schema: dict[str, Any], data: st.DataObject) -> None:
    # Instances are drawn per property the schema names, so every keyword is actually exercised.
    keys = [*schema["properties"], "d"]
    instance = data.draw(st.dictionaries(st.sampled_from(keys), _values, max_size=4) | _values)
    validator = PayloadValidator(schema)
    assert validator.fast is not None
    reference = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    assert validator.fast(instance) == reference.is_valid(instance)
    assert validator.is_valid(instance) == reference.is_valid(instance)


def test_a_keyword_outside_the_subset_falls_back_to_jsonschema() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "contentEncoding": "base64"}},
        "oneOf": [{"required": ["a"]}],
    }
    validator = PayloadValidator(schema)
    assert validator.fast is None
    assert validator.is_valid({"a": "x"}) and not validator.is_valid({})


def test_errors_name_the_argument() -> None:
    validator = PayloadValidator(
        {"type": "object", "properties": {"amount": {"type": "number", "minimum": 1}}}
    )
    assert not validator.is_valid({"amount": 0})
    assert validator.errors({"amount": 0}) == ["amount: 0 is less than the minimum of 1"]


@pytest.mark.parametrize(
    "keyword",
    [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    ],
)
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_the_fast_path_agrees_with_jsonschema_on_every_bound(keyword: str, offset: int) -> None:
    schema = {"type": "object", "properties": {"a": {keyword: 2}}}
    sized = {
        "minLength": "x" * (2 + offset),
        "maxLength": "x" * (2 + offset),
        "minItems": [0] * (2 + offset),
        "maxItems": [0] * (2 + offset),
    }
    for value in (sized.get(keyword, 2 + offset), float(2 + offset) + 0.5 * offset):
        validator = PayloadValidator(schema)
        reference = jsonschema.Draft202012Validator(schema)
        assert validator.fast is not None and validator.fast({"a": value}) == reference.is_valid({"a": value})


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
