"""The one-line summary of a call: a contract's `x-preflight.summary` template, checked when the contract is
built, or the tool and its first settled arguments."""

from __future__ import annotations

from typing import Any

import pytest

from preflight import ContractError, contract_from_mcp
from preflight.summary import summarize

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "to_account": {"type": "string"},
        "memo": {"type": "string"},
        "order": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}


def tool(summary: Any) -> dict[str, Any]:
    return {"name": "transfer_funds", "inputSchema": SCHEMA, "x-preflight": {"summary": summary}}


def slot(name: str, value: Any, status: str = "known") -> dict[str, Any]:
    return {"key": f"arg:{name}", "status": status, "value": value}


def test_a_template_is_filled_from_settled_values() -> None:
    contract = contract_from_mcp("bank", tool("send {arg.amount} EUR to {arg.to_account} for {principal}"))
    line = summarize(
        contract.extension.summary,
        "transfer_funds",
        "user:alice",
        [slot("amount", 120), slot("to_account", "DE02 1203")],
    )
    assert line == "send 120 EUR to DE02 1203 for user:alice"


def test_a_value_that_is_not_settled_shows_as_a_question_mark_never_as_its_candidate() -> None:
    contract = contract_from_mcp("bank", tool("send {arg.amount} EUR to {arg.to_account}"))
    slots = [slot("amount", 120), {"key": "arg:to_account", "status": "unknown", "value": None}]
    assert summarize(contract.extension.summary, "transfer_funds", "user:a", slots) == "send 120 EUR to ?"


def test_nested_arguments_can_be_named() -> None:
    contract = contract_from_mcp("shop", tool("cancel order {arg.order.id}"))
    line = summarize(contract.extension.summary, "cancel", "user:a", [slot("order.id", "W123")])
    assert line == "cancel order W123"


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("send {arg.amt}", "unknown placeholder {arg.amt}: 'amt' is not an argument"),
        ("send {amount}", "unknown placeholder {amount}"),
        ("send {arg.amount:>10}", "may not carry a format"),
        ("send {arg.amount!r}", "may not carry a format or a conversion"),
        ("send {arg.amount", "malformed template"),
        ("", "should be non-empty"),
    ],
)
def test_an_invalid_template_refuses_the_contract_with_the_reason(template: str, reason: str) -> None:
    with pytest.raises(ContractError) as refused:
        contract_from_mcp("bank", tool(template))
    assert reason in refused.value.reason
    assert refused.value.path == "x-preflight/summary"


def test_without_a_template_the_tool_and_its_first_settled_arguments_are_shown() -> None:
    slots = [
        slot("amount", 120),
        slot("to_account", "DE02"),
        {"key": "cond:balance", "status": "known", "value": True},
        slot("memo", "rent"),
        slot("order.id", "W1"),
    ]
    assert summarize(None, "transfer_funds", "user:a", slots) == (
        "transfer_funds: amount=120, to_account=DE02, memo=rent (+1 more)"
    )


def test_characters_that_do_not_show_themselves_are_spelled_out_and_the_line_stays_one_line() -> None:
    contract = contract_from_mcp("bank", tool("to {arg.to_account}"))
    line = summarize(contract.extension.summary, "t", "user:a", [slot("to_account", "Bob\u202e\nEve")])
    assert line == "to Bob\\u202e\\u000aEve"


def test_a_long_value_is_cut_so_one_line_stays_short() -> None:
    line = summarize(None, "t", "user:a", [slot("memo", "x" * 500)])
    assert len(line) < 80 and line.endswith("…")
