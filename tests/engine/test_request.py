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
