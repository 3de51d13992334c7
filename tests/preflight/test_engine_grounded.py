"""What reaches a tool is exactly what the user grounded: undeclared arguments, refused values, proposals.

Each refused call is shown by its verdict (never `execute`) and by its payload: an engine record that is
not `execute` never gets a grant, so no call reaches the tool.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import NOW, Said, request

from preflight import Answer, Evidence, Preset, compile_plan, contract_from_mcp, preflight
from preflight.record import Record

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "isbn": {"type": "string", "pattern": "^97[89][0-9]{10}$"},
        "qty": {"type": "integer", "exclusiveMinimum": 0},
        "note": {"type": "string"},
    },
    "required": ["isbn", "qty"],
}


def order(schema: dict[str, Any] | None = None, **slots: Any) -> dict[str, Any]:
    return {
        "name": "order_book",
        "inputSchema": schema if schema is not None else ORDER_SCHEMA,
        "x-preflight": {"state_change": "a book is ordered", "prose_reviewed": True, "slots": slots},
    }


def run(definition: dict[str, Any], said: Said, candidates: dict[str, Any], **evidence: Any) -> Record:
    plan = compile_plan(contract_from_mcp("shop", definition))
    return preflight(plan, request(said, candidates, action="Order"), Evidence(now=NOW, **evidence))


SAID = Said("Order 3 of 9783161484100 now, gift wrap yes")
GROUNDED = {"qty": (3, "3"), "isbn": ("9783161484100", "9783161484100")}


def closed(**keywords: Any) -> dict[str, Any]:
    return {**ORDER_SCHEMA, **keywords}


# --- undeclared arguments ---------------------------------------------------------------------------------


def test_a_verified_value_for_an_undeclared_argument_goes_into_the_payload() -> None:
    record = run(order(), SAID, {**GROUNDED, "gift_wrap": (True, "yes")})
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"isbn": "9783161484100", "qty": 3, "gift_wrap": True}
    slot = record.slot("arg:gift_wrap")
    assert (slot.status, slot.source, slot.defined_by) == ("known", "instruction", "user")


def test_an_answer_for_an_undeclared_argument_goes_into_the_payload() -> None:
    answers = {"arg:gift_wrap": Answer("blue paper", "user:alice", "a1")}
    record = run(order(), SAID, GROUNDED, answers=answers)
    assert record.verdict == "execute" and record.payload is not None
    assert record.payload["gift_wrap"] == "blue paper"


@pytest.mark.parametrize(
    "keywords",
    [
        {"additionalProperties": False},
        {"unevaluatedProperties": False},
        {"propertyNames": {"enum": ["isbn", "qty", "note"]}},
        {"maxProperties": 2},
        {"patternProperties": {"^x-": {}}, "additionalProperties": False},
    ],
    ids=[
        "additionalProperties",
        "unevaluatedProperties",
        "propertyNames",
        "maxProperties",
        "patternProperties",
    ],
)
def test_an_undeclared_argument_the_tool_cannot_take_asks_whether_to_go_ahead_without_it(
    keywords: dict[str, Any],
) -> None:
    record = run(order(closed(**keywords)), SAID, {**GROUNDED, "gift_wrap": (True, "yes")})
    assert record.verdict == "ask" and record.verdict != "execute", record.reasons
    slot = record.slot("arg:gift_wrap")
    assert (slot.status, slot.route, slot.gap) == ("unknown", "ask_user", "user_gap")
    assert (
        slot.candidate is True and slot.refused is not None and "no setting for 'gift_wrap'" in slot.refused
    )
    (question,) = record.questions
    assert question.kind == "without" and question.schema == {"type": "null"}
    assert question.text == "This action has no setting for 'gift_wrap'; go ahead without it?"
    assert record.payload == {"isbn": "9783161484100", "qty": 3}  # what would run, were it allowed to


def test_going_ahead_without_an_undeclared_argument_is_the_users_null_answer() -> None:
    answers = {"arg:gift_wrap": Answer(None, "user:alice", "a1")}
    record = run(
        order(closed(additionalProperties=False)),
        SAID,
        {**GROUNDED, "gift_wrap": (True, "yes")},
        answers=answers,
    )
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"isbn": "9783161484100", "qty": 3}
    assert record.slot("arg:gift_wrap").status == "null"


def test_of_several_undeclared_arguments_only_the_ones_the_tool_refuses_are_asked_about() -> None:
    schema = closed(propertyNames={"pattern": "^[a-z]+$"})
    said = Said("Order 3 of 9783161484100 now, wrap yes, gift-tag Bob")
    cands = {**GROUNDED, "wrap": (True, "yes"), "gift_tag": ("Bob", "Bob")}
    record = run(order(schema), said, cands)
    assert record.verdict == "ask"
    assert [q.slot for q in record.questions] == ["arg:gift_tag"]
    assert record.slot("arg:wrap").status == "known"


def test_an_undeclared_argument_proposed_without_a_source_is_asked_with_the_proposal_beside_it() -> None:
    record = run(order(), SAID, {**GROUNDED, "gift_wrap": (True, None)})
    assert record.verdict == "ask"
    (question,) = record.questions
    assert question.slot == "arg:gift_wrap" and question.proposed == (True,)
    assert record.payload is not None and "gift_wrap" not in record.payload


def test_an_undeclared_member_of_a_declared_object_is_a_slot_of_that_object() -> None:
    schema = {
        "type": "object",
        "properties": {
            "qty": {"type": "integer"},
            "ship": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "additionalProperties": False,
            },
        },
        "required": ["qty", "ship"],
    }
    said = Said("Order 3 now to Paris, zip 75001")
    cands = {"qty": (3, "3"), "ship.city": ("Paris", "Paris"), "ship.zip": ("75001", "75001")}
    record = run(order(schema), said, cands)
    assert record.verdict == "ask"
    assert record.slot("arg:ship.zip").refused is not None
    assert [q.kind for q in record.questions] == ["without"]


def test_an_undeclared_path_inside_a_scalar_argument_holds() -> None:
    said = Said("Order 3 of 9783161484100 now, 7 of them")
    record = run(order(), said, {**GROUNDED, "qty.extra": (7, "7")})
    assert record.verdict == "hold"
    assert record.slot("arg:qty.extra").route == "hold"


@pytest.mark.parametrize(
    "name",
    [
        "QTY",  # another case
        "q\u0442y",  # a Cyrillic te
        "\uff51\uff54\uff59",  # fullwidth
        "qty\u200b",  # a zero-width space
        "qty ",  # an edge space
        "q_ty",  # separators a reader skips
        "\u0430dmin",  # one script's letter inside another's word
        "__proto__",
        "constructor",
        "gift\twrap",
    ],
)
def test_an_undeclared_name_that_looks_like_another_or_like_machinery_holds_and_reaches_no_tool(
    name: str,
) -> None:
    said = Said("Order 3 of 9783161484100 now, and 30")
    record = run(order(), said, {**GROUNDED, name: (30, "30")})
    assert record.verdict == "hold"
    slot = record.slot(f"arg:{name}")
    assert (slot.status, slot.route) == ("unknown", "hold")
    assert record.payload == {"isbn": "9783161484100", "qty": 3}


def test_an_answer_for_an_undeclared_look_alike_of_a_declared_argument_holds() -> None:
    answers = {"arg:q\u0442y": Answer(30, "user:alice", "a1")}
    record = run(order(), SAID, GROUNDED, answers=answers)
    assert record.verdict == "hold"
    assert record.payload is not None and "q\u0442y" not in record.payload


def test_two_undeclared_names_that_look_alike_both_hold() -> None:
    said = Said("Order 3 of 9783161484100 now, wrap yes")
    record = run(order(), said, {**GROUNDED, "gift_wrap": (True, "yes"), "giftWrap": (True, "yes")})
    assert record.verdict == "hold"
    assert {record.slot("arg:gift_wrap").route, record.slot("arg:giftWrap").route} == {"hold"}


def test_undeclared_names_of_other_scripts_or_with_slashes_are_arguments_like_any_other() -> None:
    said = Said("Order 3 of 9783161484100 now, wrap yes")
    cands = {**GROUNDED, "\u043f\u043e\u0434\u0430\u0440\u043e\u043a": (True, "yes"), "a/b~0": (True, "yes")}
    record = run(order(), said, cands)
    assert record.verdict == "execute", record.reasons
    assert record.payload is not None and record.payload["a/b~0"] is True


SHIP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "qty": {"type": "integer"},
        "ship": {"type": "object", "properties": {"to": {"type": "string"}}},
    },
    "required": ["qty"],
}


@pytest.mark.parametrize(
    "member",
    [
        {"candidates": {"ship.to": ("Bob", "Bob")}},
        {"answers": {"arg:ship.to": Answer("Bob", "user:alice", "a2")}},
    ],
    ids=["verified-candidate", "answer"],
)
def test_a_whole_object_never_silently_drops_a_member_stated_otherwise(member: dict[str, Any]) -> None:
    said = Said("Order 3 now to Bob")
    answers = {"arg:ship": Answer({"to": "Ann"}, "user:alice", "a1"), **member.get("answers", {})}
    record = run(order(SHIP_SCHEMA), said, {"qty": (3, "3"), **member.get("candidates", {})}, answers=answers)
    assert record.verdict == "ask"
    slot = record.slot("arg:ship")
    assert slot.status == "unknown" and slot.refused is not None and "'Bob'" in slot.refused
    assert record.payload == {"qty": 3}


def test_a_whole_object_that_holds_the_member_stated_for_it_settles() -> None:
    said = Said("Order 3 now to Bob")
    answers = {"arg:ship": Answer({"to": "Bob"}, "user:alice", "a1")}
    record = run(order(SHIP_SCHEMA), said, {"qty": (3, "3"), "ship.to": ("Bob", "Bob")}, answers=answers)
    assert record.verdict == "execute", record.reasons
    assert record.payload == {"qty": 3, "ship": {"to": "Bob"}}


# --- values the tool's schema refuses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "candidates", "slot"),
    [
        (
            Said("Order 3 of 978316148410 now"),
            {"qty": (3, "3"), "isbn": ("978316148410", "978316148410")},
            "isbn",
        ),
        (Said("Order -5 of 9783161484100 now"), {"qty": (-5, "-5"), "isbn": GROUNDED["isbn"]}, "qty"),
        (Said("Order 0 of 9783161484100 now"), {"qty": (0, "0"), "isbn": GROUNDED["isbn"]}, "qty"),
    ],
    ids=["isbn-pattern", "negative-quantity", "zero-quantity"],
)
def test_a_stated_value_the_tool_refuses_is_asked_again_with_the_reason_not_held(
    said: Said, candidates: dict[str, Any], slot: str
) -> None:
    record = run(order(), said, candidates)
    assert record.verdict == "ask", record.reasons
    state = record.slot(f"arg:{slot}")
    assert (state.status, state.route, state.gap) == ("unknown", "ask_user", "user_gap")
    assert state.refused and state.candidate == candidates[slot][0]
    (question,) = record.questions
    assert question.slot == f"arg:{slot}" and question.reason == state.refused
    assert record.payload is not None and slot not in record.payload


def test_a_string_answer_for_a_number_is_asked_again_not_held() -> None:
    answers = {"arg:qty": Answer("1500", "user:alice", "a1")}
    record = run(order(), SAID, {"isbn": GROUNDED["isbn"]}, answers=answers)
    assert record.verdict == "ask"
    assert record.slot("arg:qty").refused == "'1500' is not of type 'integer'"


def test_a_refused_value_is_not_read_by_any_condition() -> None:
    definition = order()
    definition["x-preflight"]["conditions"] = [{"id": "few", "check": "arg.qty < 10", "on_false": "block"}]
    said = Said("Order -5 of 9783161484100 now")
    record = run(definition, said, {"qty": (-5, "-5"), "isbn": GROUNDED["isbn"]})
    assert record.verdict == "ask"
    assert record.slot("cond:few").status == "unknown" and record.slot("cond:few").route == "ask_user"


def test_a_value_nobody_may_restate_holds_when_the_tool_refuses_it() -> None:
    definition = order(isbn={"sources": ["preset"]})
    presets = {"arg:isbn": Preset("123", "p1")}
    record = run(definition, SAID, {"qty": (3, "3")}, presets=presets)
    assert record.verdict == "hold"
    slot = record.slot("arg:isbn")
    assert (slot.route, slot.gap) == ("hold", "source_gap") and slot.refused
    assert all(q.slot != "arg:isbn" for q in record.questions)


def test_an_optional_question_takes_null_and_its_schema_says_so() -> None:
    record = run(order(), SAID, {**GROUNDED, "note": ("rush", None)})
    (question,) = record.questions
    assert question.schema == {"anyOf": [{"type": "string"}, {"type": "null"}]}


def test_a_question_schema_carries_the_definitions_its_references_name() -> None:
    schema = {
        "type": "object",
        "$defs": {"isbn": {"type": "string", "pattern": "^97[89][0-9]{10}$"}},
        "properties": {"isbn": {"$ref": "#/$defs/isbn"}, "qty": {"type": "integer"}},
        "required": ["isbn", "qty"],
    }
    record = run(order(schema), SAID, {"qty": (3, "3")})
    (question,) = record.questions
    assert question.schema["pattern"] == "^97[89][0-9]{10}$"


# --- proposals are never lost from the record -------------------------------------------------------------


def test_a_candidate_for_a_slot_that_does_not_take_instructions_is_kept_beside_its_question() -> None:
    definition = order(isbn={"sources": ["user_answer"]})
    record = run(definition, SAID, GROUNDED)
    assert record.verdict == "ask"
    slot = record.slot("arg:isbn")
    assert slot.unverified and slot.candidate == "9783161484100"
    assert slot.to_json()["candidate"] == {"value": "9783161484100", "verified": False}
    assert any("does not take values from the conversation" in (f.detail or "") for f in slot.findings)
    (question,) = record.questions
    assert question.proposed == ("9783161484100",)


def test_a_remembered_value_does_not_quietly_override_what_the_conversation_proposes() -> None:
    definition = order(isbn={"sources": ["user_answer", "preset"]})
    presets = {"arg:isbn": Preset("9780306406157", "p1")}
    record = run(definition, SAID, GROUNDED, presets=presets)
    assert record.verdict == "ask"
    slot = record.slot("arg:isbn")
    assert slot.route == "ask_user" and slot.candidate == "9780306406157"  # the remembered value
    (question,) = record.questions
    assert question.proposed == ("9783161484100",)  # and the one the conversation proposes, beside it


def test_a_candidate_beside_a_settling_answer_stays_in_the_record() -> None:
    answers = {"arg:qty": Answer(4, "user:alice", "a1")}
    record = run(order(), SAID, GROUNDED, answers=answers)
    slot = record.slot("arg:qty")
    assert (slot.value, slot.source) == (4, "user_answer")
    assert slot.to_json()["candidate"] == {"value": 3, "verified": False}
    assert record.verdict == "execute" and record.payload == {"isbn": "9783161484100", "qty": 4}


def test_an_undeclared_dotted_name_holds_rather_than_guessing_it_is_nested() -> None:
    said = Said("Order 3 of 9783161484100 now, a.b is 7")
    record = run(order(), said, {**GROUNDED, "a.b": (7, "7")})
    assert record.verdict == "hold"
    assert record.slot("arg:a.b").route == "hold"
    assert record.payload is not None and "a" not in record.payload


# --- schemas the validator cannot fully read ----------------------------------------------------------------


def test_a_reference_nothing_local_resolves_holds_and_is_never_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import urllib.request

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the gate opened a URL a tool schema named")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = {
        "$id": "http://localhost:1234/tool.json",
        "type": "object",
        "properties": {"qty": {"type": "integer"}, "isbn": {"$ref": "#/$defs/isbn"}},
        "$defs": {"isbn": {"$id": "folder/", "allOf": [{"$ref": "isbn.json"}]}},
        "required": ["qty", "isbn"],
    }
    record = run(order(schema), SAID, GROUNDED)
    assert record.verdict == "hold"
    slot = record.slot("arg:isbn")
    assert (slot.status, slot.route) == ("unknown", "hold")
    assert any(f.outcome == "error" and "reference" in (f.detail or "") for f in slot.findings)


def test_an_argument_named_only_by_a_dependency_is_still_subject_to_it() -> None:
    # {"dependentRequired": {"gift_wrap": ["note"]}} with no `properties`: gift_wrap is not an undeclared
    # extra that slips past the dependency, it is an argument whose presence makes `note` obligatory.
    schema = {**ORDER_SCHEMA, "dependentRequired": {"gift_wrap": ["wrap_colour"]}}
    record = run(order(schema), SAID, {**GROUNDED, "gift_wrap": (True, "yes")})
    assert record.verdict == "ask"
    assert [q.slot for q in record.questions] == ["arg:wrap_colour"]
