from __future__ import annotations

from decimal import Decimal
from typing import Any

import jsonschema
import pytest
from catalog_util import catalog_tools, catalogs_present, grounded_request
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from preflight.validation import NO_RETRIEVAL, PayloadValidator

# Strings and numbers on which a validator other than jsonschema could answer differently: combining marks,
# characters outside the BMP, non-ASCII word characters and digits, a lone surrogate, floats that are not
# exact multiples, integers past 2**53, 1.0 beside 1 and True.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([2**53 + 1, 2**64, -(2**70), 1.0, 0.3, 0.1, 1e300])
    | st.floats(-5, 5, allow_nan=False)
    | st.text(max_size=4)
    | st.sampled_from(["é", "e\u0301", "😀", "٣", "\ud800", "a\n", "x@y.z", "2026-12-03", "P1D"])
)
# Tuples and Decimals are not JSON: jsonschema reads neither as an array or an integer.
_values = st.recursive(
    _scalars | st.sampled_from([Decimal(1), Decimal("1.5")]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=2).map(tuple)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
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
            k: st.integers(-3, 3) | st.sampled_from([2**53, 0.5])
            for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        },
    ),
    st.fixed_dictionaries({"multipleOf": st.sampled_from([0.1, 0.01, 2, 0.5])}),
    st.fixed_dictionaries(
        {"type": st.just("string"), "minLength": st.integers(0, 3), "maxLength": st.integers(0, 3)}
    ),
    st.fixed_dictionaries(
        {"type": st.just("string"), "pattern": st.sampled_from(["^a", "b$", "[0-9]", r"^\W+$", r"^\D$"])}
    ),
    st.fixed_dictionaries(
        {"type": st.just("string"), "format": st.sampled_from(["email", "date", "uuid", "duration", "iri"])}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("array"),
            "items": st.fixed_dictionaries({"type": st.sampled_from(["string", "integer"])}),
            "maxItems": st.integers(0, 2),
        },
        optional={"uniqueItems": st.booleans()},
    ),
    st.fixed_dictionaries(
        {"anyOf": st.lists(st.fixed_dictionaries({"type": st.just("string")}), max_size=2)}
    ),
)
_object_schemas = st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), _leaf_schemas, max_size=3),
    },
    optional={
        "$schema": st.sampled_from(
            ["https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"]
        ),
        "required": st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3),
        "additionalProperties": st.booleans() | _leaf_schemas,
        "patternProperties": st.just({r"^\w$": {"type": "null"}}),
    },
)


def _reference(schema: dict[str, Any]) -> Any:
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER, registry=NO_RETRIEVAL)


def _outcome(call: Any) -> Any:
    try:
        return call()
    except TypeError as exc:  # jsonschema cannot compare the value (a Decimal with a float): nor may we
        return type(exc)


def _messages(reference: Any, schema: Any, value: Any) -> list[str]:
    errors = reference.evolve(schema=schema).iter_errors(value)
    return [e.message for e in sorted(errors, key=lambda e: [str(p) for p in e.path])]


def _agrees(schema: dict[str, Any], instance: Any) -> None:
    """The validator's verdicts and messages are jsonschema's, for the payload and each property's value."""
    validator, reference = PayloadValidator(schema), _reference(schema)
    assert _outcome(lambda: validator.is_valid(instance)) == _outcome(lambda: reference.is_valid(instance))

    def listed() -> list[str]:
        expected = sorted(reference.iter_errors(instance), key=lambda e: list(e.absolute_path))
        return [
            f"{'/'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in expected
        ]

    assert _outcome(lambda: validator.errors(instance)) == _outcome(listed)
    if isinstance(instance, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in instance:
                for _ in range(2):  # built once and kept, then asked again
                    got = _outcome(lambda s=sub, v=instance[name]: validator.value_errors(s, v, kept=True))
                    assert got == _outcome(lambda s=sub, v=instance[name]: _messages(reference, s, v)), name


@settings(max_examples=600)
@given(_object_schemas, st.data())
def test_verdicts_and_messages_are_jsonschemas(schema: dict[str, Any], data: st.DataObject) -> None:
    # Instances are drawn per property the schema names, so every keyword is actually exercised.
    keys = [*schema["properties"], "d", "é"]
    _agrees(schema, data.draw(st.dictionaries(st.sampled_from(keys), _values, max_size=4) | _values))


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer"}, 1.0),
        ({"type": "integer"}, True),
        ({"type": "number"}, False),
        ({"type": "integer", "maximum": 2**53}, 2**53 + 1),
        ({"type": "integer", "minimum": -(2**70)}, -(2**70) - 1),
        ({"const": 2**53}, 2**53 + 1),
        ({"enum": [1]}, True),
        ({"uniqueItems": True}, [1, True]),
        ({"uniqueItems": True}, [1, 1.0]),
        ({"uniqueItems": True}, [0, False, [1], [True]]),
        ({"maxLength": 1}, "😀"),
        ({"maxLength": 1}, "e\u0301"),
        ({"maxLength": 1}, "\ud800"),
        ({"type": "array"}, (1, 2)),
        ({"type": "integer"}, Decimal(1)),
        ({"type": "object", "additionalProperties": False}, {1: 2}),
        ({"multipleOf": 0.1}, 0.3),
        ({"pattern": r"^\W$"}, "é"),
        ({"patternProperties": {r"^\w$": False}}, {"é": 1}),
        ({"propertyNames": {"pattern": r"^\W$"}}, {"é": 1}),
        ({"format": "email"}, "not an address"),
        ({"format": "iri"}, "no scheme"),
        ({"format": "date"}, "2026-02-30"),
        ({"format": "date-time"}, "2026-12-03T23:59:60Z"),
        ({"format": "regex"}, r"\p{L}"),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 2, "exclusiveMaximum": True}, 2),
        ({"$schema": "http://json-schema.org/draft-06/schema#", "format": "email"}, "x"),
        ({"$schema": "https://example.com/own-dialect", "type": "string"}, 1),
    ],
)
def test_an_edge_where_validators_differ_gets_jsonschemas_verdict(schema: dict[str, Any], value: Any) -> None:
    _agrees({"type": "object", "properties": {"a": schema}}, {"a": value})
    _agrees(schema, value)


_catalogs = pytest.mark.skipif(not catalogs_present(), reason="no shared catalogs")


@_catalogs
def test_every_catalog_payload_gets_jsonschemas_verdicts_and_messages() -> None:
    # The grounded payload, then each required argument left out and each argument of the wrong type.
    for _server, tool in catalog_tools():
        schema = tool.get("inputSchema") or {}
        valid = grounded_request(tool).expected_payload()
        _agrees(schema, valid)
        for name in [r for r in schema.get("required") or [] if r in valid]:
            _agrees(schema, {k: v for k, v in valid.items() if k != name})
        for name in valid:
            _agrees(schema, {**valid, name: 12345 if isinstance(valid[name], str) else "not-this-type"})


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
def test_every_bound_gets_jsonschemas_verdict(keyword: str, offset: int) -> None:
    schema = {"type": "object", "properties": {"a": {keyword: 2}}}
    sized = {
        "minLength": "x" * (2 + offset),
        "maxLength": "x" * (2 + offset),
        "minItems": [0] * (2 + offset),
        "maxItems": [0] * (2 + offset),
    }
    for value in (sized.get(keyword, 2 + offset), float(2 + offset) + 0.5 * offset):
        _agrees(schema, {"a": value})


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
