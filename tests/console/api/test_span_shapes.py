"""Pointers are checked by shape before anything is stored: an integer-only span passes as sent, anything
else is refused with the field's own message (console/api/executions.py checks plain spans without a
serializer per span; these pin that the refusals are unchanged)."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import Agent, Downstream, transfer_request

pytestmark = pytest.mark.django_db


def _pointer(value: Any) -> dict[str, Any]:
    body = transfer_request()
    body["candidates"]["amount"]["pointer"] = value
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            _pointer([{"turn": 0, "start": 0, "end": 1}, {"turn": True, "start": 0, "end": 1}]),
            b'{"error":"invalid","detail":"candidates.amount.pointer[1].turn:'
            b' must be an integer, not a boolean"}',
        ),
        (
            _pointer({"turn": 0, "start": 0}),
            b'{"error":"invalid","detail":"candidates.amount.pointer.end: This field is required."}',
        ),
        (
            _pointer({"turn": 0, "start": 0, "end": 1.0}),
            b'{"error":"invalid","detail":"candidates.amount.pointer.end: must be an integer, not a number"}',
        ),
        (
            _pointer([]),
            b'{"error":"invalid","detail":"candidates.amount.pointer: an array of spans must not be empty"}',
        ),
        (
            transfer_request() | {"action_name": {"turn": "0", "start": 0, "end": 1}},
            b'{"error":"invalid","detail":"action_name.turn: must be an integer, not a string"}',
        ),
        (
            transfer_request() | {"action_name": {"turn": 0, "end": False}},
            b'{"error":"invalid","detail":"action_name.start: This field is required.;'
            b' action_name.end: must be an integer, not a boolean"}',
        ),
    ],
)
def test_a_span_that_is_not_three_integers_is_refused_as_before(
    quick_bank: Downstream, quick_agent: Agent, body: dict[str, Any], expected: str
) -> None:
    response = quick_agent.post("/api/v1/executions", body)
    assert (response.status_code, response.content) == (400, expected)


def test_an_array_of_plain_spans_is_accepted(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request()
    pointer = body["candidates"]["amount"]["pointer"]
    response = quick_agent.post("/api/v1/executions", _pointer([pointer, pointer]))
    assert response.status_code == 201, response.content
