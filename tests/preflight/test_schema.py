"""Which slots exist: required names, branches by counting, conditionals, dependencies, references."""

from __future__ import annotations

from typing import Any

import pytest
from builders import NOW, Said, request, run

from preflight import Answer, Evidence
from preflight.record import Record
from preflight.request import parse_request

PAY_BY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer"},
        "card_token": {"type": "string"},
        "iban": {"type": "string"},
        "bic": {"type": "string"},
    },
    "required": ["amount"],
    "oneOf": [{"required": ["card_token"]}, {"required": ["iban", "bic"]}],
}


def pay(
    schema: dict[str, Any],
    said: str,
    grounded: dict[str, tuple[Any, str]],
    answers: dict[str, Any] | None = None,
) -> Record:
    words = Said("Pay: " + said)
    definition = {
        "name": "pay",
        "description": "Pay.",
        "inputSchema": schema,
        "x-preflight": {"state_change": "money is paid"},
    }
    evidence = Evidence(now=NOW, answers={k: Answer(v, "user:alice") for k, v in (answers or {}).items()})
    return run(definition, request(words, grounded, action="Pay"), evidence)


def keys(record: Record, prefix: str = "") -> list[str]:
    return [s.key for s in record.slots if s.key.startswith(prefix)]


# ---- the branch table ----------------------------------------------------------------------------------


def test_a_one_of_with_nothing_grounded_asks_which_branch() -> None:
    record = pay(PAY_BY, "Pay 10 now", {"amount": (10, "10")})
    slot = record.slot("branch:#/oneOf")
    assert slot.route == "ask_user" and record.verdict == "ask"
    question = next(q for q in record.questions if q.slot == "branch:#/oneOf")
    assert question.options == ("card_token", "bic and iban")


def test_a_one_of_with_one_complete_branch_resolves() -> None:
    record = pay(
        PAY_BY, "Pay 10 with card tok_9 now", {"amount": (10, "10"), "card_token": ("tok_9", "tok_9")}
    )
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"amount": 10, "card_token": "tok_9"}
    assert keys(record, "branch:") == []


def test_a_one_of_with_one_partial_branch_asks_only_its_remainder() -> None:
    record = pay(PAY_BY, "Pay 10 to DE11 now", {"amount": (10, "10"), "iban": ("DE11", "DE11")})
    assert record.verdict == "ask"
    assert [q.slot for q in record.questions] == ["arg:bic"]
    assert "arg:card_token" not in keys(record)


def test_a_one_of_with_two_complete_branches_is_a_conflict_that_holds() -> None:
    record = pay(
        PAY_BY,
        "Pay 10 with tok_9 or DE11 BICX now",
        {
            "amount": (10, "10"),
            "card_token": ("tok_9", "tok_9"),
            "iban": ("DE11", "DE11"),
            "bic": ("BICX", "BICX"),
        },
    )
    assert record.verdict == "hold"
    assert "conflict" in (record.slot("branch:#/oneOf").detail or "")


def test_an_answer_picks_the_branch_nothing_grounded_picked() -> None:
    record = pay(PAY_BY, "Pay 10 now", {"amount": (10, "10")}, answers={"branch:#/oneOf": 1})
    assert [q.slot for q in record.questions] == ["arg:iban", "arg:bic"]


def test_an_unverified_candidate_does_not_pick_a_branch() -> None:
    record = pay(PAY_BY, "Pay 10 now", {"amount": (10, "10"), "iban": ("DE11", "now")})
    assert record.slot("branch:#/oneOf").route == "ask_user"


def test_an_any_of_with_two_complete_branches_is_satisfied() -> None:
    schema = {**PAY_BY, "anyOf": PAY_BY["oneOf"]}
    del schema["oneOf"]
    record = pay(
        schema,
        "Pay 10 with tok_9 or DE11 BICX now",
        {
            "amount": (10, "10"),
            "card_token": ("tok_9", "tok_9"),
            "iban": ("DE11", "DE11"),
            "bic": ("BICX", "BICX"),
        },
    )
    assert record.verdict == "execute", record.reasons


def test_an_any_of_with_nothing_grounded_asks_which_branch() -> None:
    schema = {**PAY_BY, "anyOf": PAY_BY["oneOf"]}
    del schema["oneOf"]
    assert pay(schema, "Pay 10 now", {"amount": (10, "10")}).slot("branch:#/anyOf").route == "ask_user"


# ---- conditionals, dependencies, composition, references -----------------------------------------------

SHIP: dict[str, Any] = {
    "type": "object",
    "properties": {
        "method": {"type": "string", "enum": ["pickup", "delivery"]},
        "address": {"type": "string"},
        "store": {"type": "string"},
    },
    "required": ["method"],
    "if": {"properties": {"method": {"const": "delivery"}}, "required": ["method"]},
    "then": {"required": ["address"]},
    "else": {"required": ["store"]},
}


def test_if_then_applies_on_a_grounded_discriminator() -> None:
    record = pay(SHIP, "Deliver it now please, delivery", {"method": ("delivery", "delivery")})
    assert [q.slot for q in record.questions] == ["arg:address"]


def test_if_else_applies_on_the_other_value() -> None:
    record = pay(SHIP, "I will pickup now", {"method": ("pickup", "pickup")})
    assert [q.slot for q in record.questions] == ["arg:store"]


def test_a_conditional_waits_for_its_discriminator_instead_of_guessing() -> None:
    record = pay(SHIP, "Send it now", {})
    assert [q.slot for q in record.questions] == ["arg:method"]


def test_dependent_required_adds_names_once_the_trigger_is_grounded() -> None:
    schema = {
        "type": "object",
        "properties": {"card": {"type": "string"}, "cvv": {"type": "string"}},
        "dependentRequired": {"card": ["cvv"]},
    }
    assert [q.slot for q in pay(schema, "card 4242 now", {"card": ("4242", "4242")}).questions] == ["arg:cvv"]
    assert pay(schema, "nothing now", {}).verdict == "execute"


def test_all_of_merges_required_names() -> None:
    schema = {
        "type": "object",
        "allOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        ],
    }
    assert [q.slot for q in pay(schema, "now", {}).questions] == ["arg:a", "arg:b"]


def test_a_local_ref_is_followed_into_defs() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "addr": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"],
            }
        },
        "properties": {"ship_to": {"$ref": "#/$defs/addr"}},
        "required": ["ship_to"],
    }
    record = pay(schema, "to Berlin now", {"ship_to.city": ("Berlin", "Berlin")})
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"ship_to": {"city": "Berlin"}}


def test_nested_required_names_become_dotted_slots() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ship_to": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city", "zip"],
            }
        },
        "required": ["ship_to"],
    }
    record = pay(schema, "to Berlin now", {"ship_to.city": ("Berlin", "Berlin")})
    assert [q.slot for q in record.questions] == ["arg:ship_to.zip"]


AB = {"a": {"type": "string"}, "b": {"type": "string"}}


@pytest.mark.parametrize(
    "construct",
    [
        {"not": {"required": ["a"]}},
        {"minProperties": 2},
        {"maxProperties": 0},
        {"propertyNames": {"maxLength": 0}},
        {"dependentSchemas": {"a": {"required": ["b"]}}},
        {"if": {"properties": {"a": {"minLength": 3}}}, "then": {"required": ["b"]}},
        {"oneOf": [{"required": ["b"]}, {"not": {"required": ["a"]}}]},
    ],
    ids=["not", "minProperties", "maxProperties", "propertyNames", "dependentSchemas", "if", "oneOf"],
)
def test_a_construct_the_engine_does_not_read_holds_as_unsupported_when_the_payload_fails_it(
    construct: dict[str, Any],
) -> None:
    schema = {"type": "object", "properties": AB, **construct}
    record = pay(schema, "abc now", {"a": ("abc", "abc")})
    unsupported = [s for s in record.slots if s.route == "unsupported"]
    assert unsupported and all(s.gap == "implementation_gap" and s.status == "unknown" for s in unsupported)
    assert unsupported[0].label in construct
    assert record.verdict == "hold"


@pytest.mark.parametrize(
    "construct",
    [
        {"not": {"required": ["b"]}},
        {"minProperties": 1},
        {"dependentSchemas": {"a": {"required": ["a"]}}},
        {"if": {"properties": {"a": {"minLength": 3}}}, "then": {"required": ["a"]}},
        {"oneOf": [{"required": ["b"]}, {"not": {"required": ["b"]}}]},
        {"patternProperties": {"^a$": {"maxLength": 3}}, "unevaluatedProperties": False},
    ],
    ids=["not", "minProperties", "dependentSchemas", "if", "oneOf", "patternProperties"],
)
def test_a_construct_the_grounded_payload_satisfies_is_settled_by_the_validator(
    construct: dict[str, Any],
) -> None:
    schema = {"type": "object", "properties": AB, **construct}
    record = pay(schema, "abc now", {"a": ("abc", "abc")})
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"a": "abc"}
    assert not [s for s in record.slots if s.route == "unsupported"]
    decided = [s for s in record.slots if s.key.startswith("schema:")]
    assert all(s.status == "known" and s.source == "validation" for s in decided)


def test_a_construct_left_to_the_validator_waits_while_an_argument_is_still_to_be_asked() -> None:
    schema = {"type": "object", "properties": AB, "required": ["b"], "minProperties": 2}
    record = pay(schema, "abc now", {"a": ("abc", "abc")})
    assert record.verdict == "ask"
    assert [q.slot for q in record.questions] == ["arg:b"]
    waiting = next(s for s in record.slots if s.key == "schema:#/minProperties")
    assert waiting.status == "unknown" and waiting.route is None


def test_a_reference_outside_the_document_holds_even_when_nothing_else_is_missing() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    record = pay(schema, "abc now", {"a": ("abc", "abc")})
    assert record.verdict == "hold"
    assert [s.key for s in record.slots if s.route == "unsupported"] == ["schema:#/properties/a"]


def test_references_that_loop_without_describing_anything_hold_instead_of_recursing() -> None:
    schema = {
        "type": "object",
        "$defs": {"n": {"$ref": "#/$defs/n"}},
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "required": ["a"],
    }
    record = pay(schema, "abc now", {"a": ("abc", "abc")})
    assert record.verdict == "hold"
    assert any(s.route == "unsupported" for s in record.slots)


def test_a_schema_that_contains_itself_executes_a_grounded_nested_value_the_validator_accepts() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "parent": {"$ref": "#"}}}
    record = pay(schema, "abc and xyz now", {"name": ("abc", "abc"), "parent.name": ("xyz", "xyz")})
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"name": "abc", "parent": {"name": "xyz"}}


# --- references, resolved as a validator resolves them ----------------------------------------------------

ADDRESS = {
    "type": "object",
    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
    "required": ["street", "city"],
}


@pytest.mark.parametrize(
    ("ref", "defs"),
    [
        ("#addr", {"address": {"$anchor": "addr", **ADDRESS}}),
        ("#/$defs/a%20b", {"a b": ADDRESS}),
        ("#/$defs/percent%25field", {"percent%field": ADDRESS}),
        ("#/$defs/slash~1field", {"slash/field": ADDRESS}),
        ("#/$defs/tilde~0field", {"tilde~field": ADDRESS}),
        ("#/allOf/0/$defs/addr", None),
        (
            "https://example.com/address.json",
            {"address": {"$id": "https://example.com/address.json", **ADDRESS}},
        ),
    ],
    ids=["anchor", "percent-space", "percent-percent", "slash", "tilde", "allOf-path", "embedded-id"],
)
def test_a_reference_asks_for_the_members_of_the_schema_it_points_at(
    ref: str, defs: dict[str, Any] | None
) -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"ship_to": {"$ref": ref}},
        "required": ["ship_to"],
        # a root key named like the anchor: a reference read as a path would land here
        "addr": {"type": "object", "properties": {"wrong": {"type": "string"}}, "required": ["wrong"]},
    }
    if defs is None:
        schema["allOf"] = [{"$defs": {"addr": ADDRESS}}]
    else:
        schema["$defs"] = defs
    record = pay(schema, "to Berlin now", {"ship_to.city": ("Berlin", "Berlin")})
    assert record.verdict == "ask", record.reasons
    assert [q.slot for q in record.questions] == ["arg:ship_to.street"]
    assert not [s for s in record.slots if s.route == "unsupported"]


def test_a_reference_inside_a_schema_with_its_own_id_resolves_against_that_id() -> None:
    schema = {
        "type": "object",
        "$id": "https://example.com/root.json",
        "$defs": {
            "inner": {
                "$id": "https://example.com/nested/inner.json",
                "type": "object",
                "properties": {"to": {"$ref": "address.json"}},
                "required": ["to"],
            },
            "address": {"$id": "https://example.com/nested/address.json", **ADDRESS},
        },
        "properties": {"order": {"$ref": "nested/inner.json"}},
        "required": ["order"],
    }
    record = pay(schema, "to Berlin now", {"order.to.city": ("Berlin", "Berlin")})
    assert [q.slot for q in record.questions] == ["arg:order.to.street"]


def test_siblings_of_a_reference_add_their_requirements_in_2020_12() -> None:
    schema = {
        "type": "object",
        "$defs": {"addr": ADDRESS},
        "properties": {"ship_to": {"$ref": "#/$defs/addr", "properties": {"zip": {}}, "required": ["zip"]}},
        "required": ["ship_to"],
    }
    record = pay(schema, "to Berlin now", {"ship_to.city": ("Berlin", "Berlin")})
    assert sorted(q.slot for q in record.questions) == ["arg:ship_to.street", "arg:ship_to.zip"]


def test_a_draft_07_schema_is_read_as_draft_07_where_a_reference_replaces_its_siblings() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"addr": ADDRESS},
        "properties": {"ship_to": {"$ref": "#/definitions/addr", "required": ["zip"]}},
        "required": ["ship_to"],
    }
    record = pay(schema, "to Berlin now", {"ship_to.city": ("Berlin", "Berlin")})
    assert [q.slot for q in record.questions] == ["arg:ship_to.street"]


def test_a_draft_07_schema_is_validated_as_draft_07() -> None:
    # In draft-07 a list under `items` is positional: the second item must be an integer.
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
        "required": ["pair"],
    }
    words = Said("Pay: abc and x now")
    spans = [words.at("abc"), words.at("x")]
    req = parse_request(
        {
            "principal": "user:alice",
            "conversation": [words.turn],
            "candidates": {"pair": {"value": ["abc", "x"], "pointer": spans}},
            "action_name": words.at("Pay"),
            "timing": {"mode": "immediate", "pointer": words.at("now")},
        }
    )
    definition = {"name": "pay", "inputSchema": schema, "x-preflight": {"state_change": "money is paid"}}
    record = run(definition, req)
    # Refused by draft-07's positional items (issue 13: asked again with the reason, no longer held).
    pair = record.slot("arg:pair")
    assert pair.refused == "'x' is not of type 'integer'" and pair.route == "ask_user"
    assert record.verdict == "ask" and record.payload == {}


def test_a_malformed_id_leaves_references_to_be_held_instead_of_raising() -> None:
    # contract_from_mcp refuses such a schema; the compiler must not depend on that to stay total.
    from preflight.schema import compile_object

    node = compile_object(
        {"$id": 5, "properties": {"a": {"$ref": "#nowhere"}, "b": {"$id": [], "type": "string"}}}
    )
    assert [u.construct for u in node.unsupported] == ["$ref"]
    assert set(node.properties) == {"a", "b"}
