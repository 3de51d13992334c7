"""An answer is checked against its question before it counts."""

from __future__ import annotations

from typing import Any

import pytest

from preflight import compile_plan, contract_from_mcp
from preflight.answers import accepted_form, answer_problem, normalise_answer, rememberable
from preflight.engine import Plan

TOOL: dict[str, Any] = {
    "name": "order_book",
    "inputSchema": {
        "type": "object",
        "$defs": {"isbn": {"type": "string", "pattern": "^97[89][0-9]{10}$"}},
        "properties": {
            "isbn": {"$ref": "#/$defs/isbn"},
            "qty": {"type": "integer", "exclusiveMinimum": 0},
            "note": {"type": "string"},
            "vat_id": {"type": "string"},
            "ship": {"type": "object", "properties": {"city": {"type": "string", "minLength": 2}}},
        },
        "required": ["isbn", "qty"],
    },
    "x-preflight": {
        "state_change": "a book is ordered",
        "slots": {
            "isbn": {"sources": ["user_answer", "instruction"]},
            "note": {"sources": ["preset", "user_answer"]},
            "ship.city": {"sources": ["user_answer", "instruction"]},
            "vat_id": {"sources": ["preset", "instruction"]},
        },
    },
}


@pytest.fixture(scope="module")
def plan() -> Plan:
    return compile_plan(contract_from_mcp("shop", TOOL))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("arg:isbn", "978316148410"),  # its pattern, through a $ref
        ("arg:isbn", None),  # required: null cannot leave it out
        ("arg:qty", -5),
        ("arg:qty", 0),
        ("arg:qty", "3"),
        ("arg:qty", 1.5),
        ("arg:qty", True),
        ("arg:note", 7),
        ("arg:ship.city", "X"),
        ("fixed:timing", "soon"),
        ("fixed:timing", "2026-12-01T10:00:00"),  # a date-time needs its offset
        ("fixed:action_name", ""),
    ],
)
def test_an_answer_its_question_would_refuse_has_a_problem(plan: Plan, key: str, value: Any) -> None:
    assert answer_problem(plan, key, value, {}) is not None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("arg:isbn", "9783161484100"),
        ("arg:qty", 3),
        ("arg:note", None),  # optional: null leaves it out
        ("arg:note", "rush"),
        ("arg:ship.city", "Paris"),
        ("arg:gift_wrap", {"colour": "blue"}),  # undeclared: the whole-payload validation decides
        ("fixed:timing", "immediate"),
        ("fixed:timing", "2026-12-01T10:00:00+00:00"),
    ],
)
def test_an_answer_its_question_takes_has_none(plan: Plan, key: str, value: Any) -> None:
    assert answer_problem(plan, key, value, {}) is None


def test_the_question_asked_now_is_the_schema_an_answer_meets(plan: Plan) -> None:
    asked = {"arg:gift_wrap": {"type": "null"}}  # "no setting for it; go ahead without it?"
    assert answer_problem(plan, "arg:gift_wrap", None, asked) is None
    assert answer_problem(plan, "arg:gift_wrap", True, asked) == "True is not of type 'null'"


def test_a_choice_is_answered_by_its_label_or_its_index_and_nothing_else(plan: Plan) -> None:
    asked = {"branch:#/oneOf": {"enum": ["by card", "by transfer"]}}
    assert answer_problem(plan, "branch:#/oneOf", "by card", asked) is None
    assert answer_problem(plan, "branch:#/oneOf", 1, asked) is None
    assert answer_problem(plan, "branch:#/oneOf", 2, asked) is not None
    assert answer_problem(plan, "branch:#/oneOf", "by cash", asked) is not None
    assert answer_problem(plan, "branch:#/oneOf", True, asked) is not None


def test_only_a_slot_that_takes_answers_and_presets_may_remember_one(plan: Plan) -> None:
    assert rememberable(plan, "arg:qty")  # the default sources: user_answer, instruction, preset
    assert rememberable(plan, "arg:note")
    assert not rememberable(plan, "arg:isbn")
    assert rememberable(plan, "fixed:timing")
    assert not rememberable(plan, "fixed:tool")
    assert not rememberable(None, "arg:qty")


def test_an_answer_for_a_slot_whose_sources_lack_user_answer_is_refused_not_swallowed(plan: Plan) -> None:
    problem = answer_problem(plan, "arg:vat_id", "DE123456789", {})
    assert problem is not None and "not settled by an answer" in problem
    # Also when a question for it would otherwise take the value.
    assert answer_problem(plan, "arg:vat_id", "DE123456789", {"arg:vat_id": {"type": "string"}}) is not None


@pytest.mark.parametrize("said", ["now", "Now", " right  away ", "immediately"])
def test_words_for_at_once_answer_the_timing_question_as_immediate(plan: Plan, said: str) -> None:
    value = normalise_answer("fixed:timing", said)
    assert value == "immediate" and answer_problem(plan, "fixed:timing", value, {}) is None


def test_other_answers_are_taken_as_given() -> None:
    assert normalise_answer("fixed:timing", "next tuesday maybe") == "next tuesday maybe"
    assert normalise_answer("arg:note", "now") == "now"


def test_a_timing_that_does_not_read_is_refused_in_words(plan: Plan) -> None:
    assert answer_problem(plan, "fixed:timing", "next tuesday maybe", {}) == (
        '"next tuesday maybe" is not a time the gate can read'
    )


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("arg:qty", "a whole number greater than 0 (digits, no quotes), e.g. 120"),
        ("arg:isbn", "text matching the pattern ^97[89][0-9]{10}$"),
        ("arg:ship.city", "text of at least 2 characters or null (leave it out)"),
        ("fixed:action_name", "text of at least 1 character"),
        ("arg:gift_wrap", None),  # undeclared: nothing here says what it takes
    ],
)
def test_the_accepted_form_is_read_from_the_schema_the_answer_is_checked_against(
    plan: Plan, key: str, words: str | None
) -> None:
    assert accepted_form(plan, key, {}) == words


def test_the_accepted_form_of_an_open_question_is_its_schema(plan: Plan) -> None:
    asked = {"branch:#/oneOf": {"enum": ["by card", "by transfer"]}}
    assert accepted_form(plan, "branch:#/oneOf", asked) == 'one of "by card", "by transfer"'
