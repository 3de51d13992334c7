"""Through the API: a pointer that does not prove the user wrote the value grants nothing; nothing runs."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import ALICE_MAIN, BOB, Agent, Downstream, span

pytestmark = pytest.mark.django_db


def request_saying(text: str, amount: Any, words: str) -> dict[str, Any]:
    return {
        "server": "bank",
        "tool": "transfer",
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {
            "amount": {"value": amount, "pointer": span(text, words)},
            "from_account": {"value": ALICE_MAIN, "pointer": span(text, ALICE_MAIN)},
            "to_account": {"value": BOB, "pointer": span(text, BOB)},
        },
        "action_name": span(text, "Send"),
        "timing": {"mode": "immediate", "pointer": span(text, "now")},
    }


@pytest.mark.parametrize(
    ("said", "amount", "words"),
    [
        ("Send 1500 EUR", 500, "500"),  # inside a longer number
        ("Send 50¹ EUR", 501, "50¹"),  # a superscript is not a digit
        ("Send 50¹ EUR", 50, "50"),
        ("Send -5 EUR", 5, "5"),  # the sign changes it
        ("Send 1.5 EUR", 15, "1.5"),
        ("Send \uff15\uff10\uff10 EUR", 500, "\uff15\uff10\uff10"),  # fullwidth
        ("Send 1.500 EUR", 1500, "1.500"),  # two readings, nothing in the conversation picks one
        ("Send 1 500 EUR", 500, "500"),
    ],
)
def test_a_look_alike_span_grants_nothing_and_no_call_reaches_the_tool(
    agent: Agent, bank: Downstream, said: str, amount: Any, words: str
) -> None:
    text = f"{said} from {ALICE_MAIN} to {BOB} now."
    record = agent.post("/api/v1/executions", request_saying(text, amount, words)).json()

    assert record["verdict"] == "ask", record["reasons"]
    assert record["grant"] is None
    slot = next(s for s in record["slots"] if s["key"] == "arg:amount")
    assert slot["status"] == "unknown" and slot["candidate"] == {"value": amount, "verified": False}
    assert bank.calls == [] and bank.lookups == 0


def test_the_same_number_on_token_boundaries_with_one_reading_is_granted(
    agent: Agent, bank: Downstream
) -> None:
    text = f"Send 1.500 EUR (that is 1.500,00) from {ALICE_MAIN} to {BOB} now."
    record = agent.post("/api/v1/executions", request_saying(text, 1500, "1.500")).json()

    assert record["verdict"] == "execute", record["reasons"]
    agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]})
    assert bank.calls == [{"from_account": ALICE_MAIN, "to_account": BOB, "amount": 1500}]
