"""Reading a candidate execution: shapes the engine cannot read are request errors naming the field."""

from __future__ import annotations

import pytest

from preflight.errors import RequestError
from preflight.request import parse_request


def test_two_candidates_for_one_argument_are_a_request_error_not_a_silent_choice() -> None:
    body = {
        "principal": "user:alice",
        "candidates": {"amount": {"value": 5}, "arg:amount": {"value": 500}},
    }
    with pytest.raises(RequestError) as caught:
        parse_request(body)
    assert caught.value.field == "candidates.arg:amount"


def test_a_candidate_may_name_its_argument_with_or_without_the_slot_prefix() -> None:
    request = parse_request({"principal": "user:alice", "candidates": {"arg:amount": {"value": 5}}})
    assert request.candidates["amount"].value == 5


@pytest.mark.parametrize(
    "value",
    [2**53, -(2**53), 10**30, float("inf"), "\ud800", {"a": ["\udfff"]}],
    ids=["2**53", "-2**53", "1e30-int", "inf", "lone-surrogate", "nested-surrogate"],
)
def test_a_candidate_value_no_digest_can_represent_is_a_request_error_naming_it(value: object) -> None:
    body = {"principal": "user:alice", "candidates": {"n": {"value": value}}}
    with pytest.raises(RequestError) as error:
        parse_request(body)
    assert error.value.field == "candidates.n.value"


def test_a_turn_with_a_lone_surrogate_is_a_request_error() -> None:
    body = {
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": "Pay \ud83d", "trusted": True}],
    }
    with pytest.raises(RequestError) as error:
        parse_request(body)
    assert error.value.field == "conversation[0].content"


def test_the_largest_exact_integer_is_a_value_like_any_other() -> None:
    body = {"principal": "user:alice", "candidates": {"n": {"value": 2**53 - 1}}}
    assert parse_request(body).candidates["n"].value == 2**53 - 1
