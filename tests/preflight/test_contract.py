from __future__ import annotations

from typing import Any

import pytest
from builders import tool

from preflight import compile_plan, contract_from_mcp
from preflight.errors import ContractError


def test_the_contract_digest_changes_with_the_definition() -> None:
    a = contract_from_mcp("bank", tool())
    b = contract_from_mcp("bank", tool(description="Move money between two accounts."))
    assert a.digest != b.digest
    assert a.digest == contract_from_mcp("bank", tool()).digest


def test_trusting_a_servers_annotations_is_part_of_the_contract() -> None:
    assert (
        contract_from_mcp("bank", tool()).digest
        != contract_from_mcp("bank", tool(), annotations_trusted=True).digest
    )


def test_a_tool_without_input_schema_is_not_a_tool_without_arguments() -> None:
    definition = tool()
    del definition["inputSchema"]
    contract = contract_from_mcp("bank", definition)
    assert contract.input_schema is None
    assert compile_plan(contract).root is None


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "object", "properties": {"a": {"type": "strng"}}}, "not a valid JSON Schema"),
        ({"type": "object", "required": "a"}, "not a valid JSON Schema"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_an_invalid_schema_is_a_typed_error_with_a_reason(schema: Any, reason: str) -> None:
    with pytest.raises(ContractError) as err:
        contract_from_mcp("bank", tool(inputSchema=schema))
    assert reason in err.value.reason and err.value.tool == "transfer_funds"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"conditions": [{"id": "c", "check": "arg.amount >", "on_false": "hold"}]}, "does not parse"),
        ({"conditions": [{"id": "c", "check": "arg.nope > 1", "on_false": "hold"}]}, "not an argument"),
        (
            {"conditions": [{"id": "c", "check": "measure.nope > 1", "on_false": "hold"}]},
            "undeclared measure",
        ),
        ({"conditions": [{"id": "c", "check": "true", "on_false": "maybe"}]}, "maybe"),
        ({"slots": {"nope": {"confirm": True}}}, "not an argument"),
        ({"slots": {"amount": {"sources": ["observed"]}}}, "needs the measure"),
        ({"measures": {"m": {"lookup": "x", "args": {"a": "arg:nope"}}}}, "not an argument"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_malformed_extension_is_rejected_with_where_and_why(change: dict[str, Any], reason: str) -> None:
    definition = tool()
    definition["x-preflight"] = {**definition["x-preflight"], **change}
    with pytest.raises(ContractError) as err:
        contract_from_mcp("bank", definition)
    assert reason in err.value.reason
    assert err.value.path.startswith("x-preflight")


def test_a_side_car_extension_wins_over_the_embedded_one() -> None:
    contract = contract_from_mcp("bank", tool(), extension={"state_change": "from the side-car"})
    assert contract.extension.state_change == "from the side-car"
    assert contract.extension.conditions == ()


def test_annotations_of_an_untrusted_server_are_not_authoritative() -> None:
    definition = tool(annotations={"readOnlyHint": True})
    assert not contract_from_mcp("bank", definition).read_only
    assert contract_from_mcp("bank", definition, annotations_trusted=True).read_only


def test_a_plan_is_compiled_once_per_contract() -> None:
    contract = contract_from_mcp("bank", tool())
    assert compile_plan(contract) is compile_plan(contract_from_mcp("bank", tool()))


def test_an_extension_carried_in_meta_is_read_like_an_embedded_one() -> None:
    definition = tool()
    extension = definition.pop("x-preflight")
    definition["_meta"] = {"x-preflight": extension}
    contract = contract_from_mcp("bank", definition)
    assert contract.extension.state_change == extension["state_change"]
    assert [c.id for c in contract.extension.conditions] == ["balance_covers_amount", "not_to_self"]
