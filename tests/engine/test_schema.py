"""Which slots exist: required names, branches by counting, conditionals, dependencies, references."""

from __future__ import annotations

from typing import Any

import pytest
from builders import NOW, Said, request, run

from preflight import Answer, Evidence
from preflight.record import Record

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


@pytest.mark.parametrize(
    "construct",
    [
        {"not": {"required": ["a"]}},
        {"minProperties": 1},
        {"dependentSchemas": {"a": {"required": ["b"]}}},
        {"properties": {"a": {"$ref": "https://example.com/a.json"}}, "required": ["a"]},
        {"if": {"properties": {"a": {"minimum": 3}}}, "then": {"required": ["b"]}},
        {"oneOf": [{"required": ["a"]}, {"not": {"required": ["b"]}}]},
    ],
)
def test_a_construct_the_engine_does_not_understand_holds_as_unsupported(construct: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, **construct}
    record = pay(schema, "now", {})
    unsupported = [s for s in record.slots if s.route == "unsupported"]
    assert unsupported and all(s.gap == "implementation_gap" for s in unsupported)
    assert record.verdict == "hold"


def test_a_recursive_ref_is_unsupported_not_an_endless_loop() -> None:
    schema = {
        "type": "object",
        "$defs": {"n": {"$ref": "#/$defs/n"}},
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "required": ["a"],
    }
    assert any(s.route == "unsupported" for s in pay(schema, "now", {}).slots)
