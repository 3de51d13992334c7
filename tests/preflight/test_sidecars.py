"""Side-car files: the ones shipped in sidecars/ build contracts for their catalogs' tools, and what they
declare (the principal as a source and a lookup argument, list helpers in conditions) holds at run time."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from builders import Said
from catalog_util import CATALOGS, catalogs_present

from preflight import Answer, ContractError, Evidence, Plan, compile_plan, contract_from_mcp, preflight
from preflight.confirmations import bound_answer
from preflight.recheck import recheck_for
from preflight.record import Record
from preflight.request import ExecutionRequest, parse_request
from preflight.runner import settle
from preflight.sidecars import load_sidecar, parse_sidecar

SIDECARS = Path(__file__).resolve().parents[2] / "sidecars"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
needs_catalogs = pytest.mark.skipif(not catalogs_present(), reason=f"no shared catalogs at {CATALOGS}")


def _consented(plan: Plan, request: ExecutionRequest, evidence: Evidence, record: Record) -> Record:
    """The user's yes to the call as shown: the retail side-car asks for it, as tau-bench's policy does."""
    if record.verdict != "ask":
        return record
    (question,) = record.questions
    assert question.kind == "consent" and question.shows is not None
    yes = Answer(bound_answer(True, question.shows["digest"]), request.principal, "consent-1")
    return preflight(plan, request, replace(evidence, answers={**evidence.answers, "consent:call": yes}))


def _catalog(stem: str) -> dict[str, dict[str, Any]]:
    tools = json.loads((CATALOGS / f"{stem}.json").read_text(encoding="utf-8"))["tools"]
    return {tool["name"]: tool for tool in tools}


def _provider_gaps(server: str, tool: dict[str, Any], extension: Any) -> list[str]:
    contract = contract_from_mcp(server, tool, extension=extension)
    record = preflight(compile_plan(contract), ExecutionRequest(principal="preview"), Evidence(now=NOW))
    return [g.slot for g in record.gaps if g.cls == "provider_gap"]


def test_a_side_car_file_names_its_server_and_an_extension_per_tool() -> None:
    sidecar = parse_sidecar({"server": "fs", "tools": {"write_file": {"state_change": "a file is written"}}})
    assert sidecar.server == "fs"
    assert dict(sidecar.tools) == {"write_file": {"state_change": "a file is written"}}


@pytest.mark.parametrize(
    "data",
    [[], {"tools": {}}, {"server": "", "tools": {}}, {"server": "fs", "tools": {"t": "x"}}, {"server": "fs"}],
    ids=["not-an-object", "no-server", "empty-server", "extension-not-an-object", "no-tools"],
)
def test_a_malformed_side_car_file_is_refused_with_the_reason(data: Any) -> None:
    with pytest.raises(ContractError, match="not a side-car file"):
        parse_sidecar(data)


def test_an_unreadable_side_car_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ContractError, match="cannot read"):
        load_sidecar(path)


@needs_catalogs
@pytest.mark.parametrize("path", sorted(SIDECARS.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_side_car_builds_a_contract_for_each_tool_it_names(path: Path) -> None:
    sidecar = load_sidecar(path)
    assert sidecar.tools
    if not (CATALOGS / f"{sidecar.server}.json").exists():
        pytest.skip(
            f"{sidecar.server} is a demo server: console/demo serves its side-car, tests/console check it"
        )
    tools = _catalog(sidecar.server)
    for name, extension in sidecar.tools.items():
        assert name in tools, f"{path.name} names {name!r}, which {sidecar.server} does not list"
        contract_from_mcp(sidecar.server, tools[name], extension=extension)


@needs_catalogs
def test_every_filesystem_tool_is_a_provider_gap_without_its_side_car_and_none_is_with_it() -> None:
    sidecar = load_sidecar(SIDECARS / "mcp-server-filesystem.json")
    tools = _catalog("mcp-server-filesystem")
    assert set(sidecar.tools) == set(tools)
    for name, tool in tools.items():
        assert _provider_gaps(sidecar.server, tool, None), name
        assert _provider_gaps(sidecar.server, tool, sidecar.tools[name]) == [], name


# --- the tau-bench retail policy as data ------------------------------------------------------------------

RETAIL = load_sidecar(SIDECARS / "tau-bench-retail.json")
ORDER = {
    "user_id": "sara_doe_496",
    "status": "delivered",
    "items": [{"item_id": "1008292230", "product_id": "shirt"}, {"item_id": "2001", "product_id": "shoe"}],
}
ITEMS = {
    "1008292231": {"product_id": "shirt", "available": True},
    "3001": {"product_id": "shoe", "available": True},
    "9999": {"product_id": "lamp", "available": True},
}
USER = {"payment_methods": {"gift_card_0000000": {"balance": 50}}}


def _exchange(
    words: str, candidates: dict[str, Any], principal: str = "user:sara_doe_496", *, consent: bool = True
) -> Record:
    said = Said(words)
    body = {
        "principal": principal,
        "conversation": [said.turn],
        "candidates": {
            name: {
                "value": value,
                "pointer": [said.at(v) for v in value] if isinstance(value, list) else said.at(value),
            }
            for name, value in candidates.items()
        },
        "action_name": said.at("Exchange"),
        "timing": {"mode": "immediate", "pointer": said.at("now")},
    }
    tool = _catalog("tau-bench-retail")["exchange_delivered_order_items"]
    plan = compile_plan(
        contract_from_mcp("tau-bench-retail", tool, extension=RETAIL.tools["exchange_delivered_order_items"])
    )
    seen: dict[str, Any] = {}

    def user(args: dict[str, Any]) -> Any:
        seen["user"] = args
        return USER

    lookups = {
        "retail.order": lambda args: ORDER,
        "retail.user": user,
        "retail.items": lambda args: {i: ITEMS[i] for i in args["item_ids"]},
    }
    request = parse_request(body)
    record, evidence = settle(plan, request, Evidence(now=NOW), lookups)
    if consent:
        record = _consented(plan, request, evidence, record)
    if "user" in seen:  # the lookup's argument is the principal's id, whatever the agent sent
        assert seen["user"] == {"user_id": principal.partition(":")[2]}
    return record


@needs_catalogs
def test_an_exchange_of_items_for_other_options_of_the_same_products_executes() -> None:
    record = _exchange(
        "Exchange now: order #W1 items 1008292230 and 2001 for 1008292231 and 3001, pay: gift_card_0000000",
        {
            "order_id": "#W1",
            "item_ids": ["1008292230", "2001"],
            "new_item_ids": ["1008292231", "3001"],
            "payment_method_id": "gift_card_0000000",
        },
    )
    assert record.verdict == "execute", record.reasons


@needs_catalogs
def test_an_exchange_that_changes_the_product_type_in_one_position_is_blocked() -> None:
    # Both new products exist in the order, but position by position the shirt would become a lamp.
    record = _exchange(
        "Exchange now: order #W1 items 1008292230 and 2001 for 9999 and 3001, pay with gift_card_0000000",
        {
            "order_id": "#W1",
            "item_ids": ["1008292230", "2001"],
            "new_item_ids": ["9999", "3001"],
            "payment_method_id": "gift_card_0000000",
        },
    )
    assert record.verdict == "block"
    assert [u.id for u in record.unmet] == ["same_product_other_option"]


@needs_catalogs
def test_an_exchange_for_another_users_order_is_blocked_by_the_principal() -> None:
    record = _exchange(
        "Exchange now: order #W1 item 1008292230 for 1008292231, pay with gift_card_0000000",
        {
            "order_id": "#W1",
            "item_ids": ["1008292230"],
            "new_item_ids": ["1008292231"],
            "payment_method_id": "gift_card_0000000",
        },
        principal="user:someone_else",
    )
    assert record.verdict == "block"
    assert "own_order" in [u.id for u in record.unmet]


@needs_catalogs
def test_a_principal_source_settles_the_user_id_whatever_the_agent_proposes() -> None:
    said = Said("Change my address now to 1 Main St, Apt 1, Springfield, IL, USA, 62701")
    proposal = {
        "address1": "1 Main St",
        "address2": "Apt 1",
        "city": "Springfield",
        "state": "IL",
        "country": "USA",
        "zip": "62701",
    }
    body = {
        "principal": "user:sara_doe_496",
        "conversation": [said.turn],
        "candidates": {
            **{name: {"value": v, "pointer": said.at(v)} for name, v in proposal.items()},
            "user_id": {"value": "someone_else"},
        },
        "action_name": said.at("Change my address"),
        "timing": {"mode": "immediate", "pointer": said.at("now")},
    }
    tool = _catalog("tau-bench-retail")["modify_user_address"]
    plan = compile_plan(
        contract_from_mcp("tau-bench-retail", tool, extension=RETAIL.tools["modify_user_address"])
    )
    request = parse_request(body)
    record = _consented(plan, request, Evidence(now=NOW), preflight(plan, request, Evidence(now=NOW)))
    assert record.verdict == "execute", record.reasons
    assert record.payload == {**proposal, "user_id": "sara_doe_496"}
    slot = record.slot("arg:user_id")
    assert slot.source == "principal" and slot.pointer == {"principal": "user:sara_doe_496"}


@needs_catalogs
def test_the_retail_side_car_asks_the_users_explicit_yes_and_serializes_runs_on_one_order() -> None:
    exchange = {
        "order_id": "#W1",
        "item_ids": ["1008292230"],
        "new_item_ids": ["1008292231"],
        "payment_method_id": "gift_card_0000000",
    }
    record = _exchange(
        "Exchange now: order #W1 item 1008292230 for 1008292231, pay with gift_card_0000000",
        exchange,
        consent=False,
    )

    assert record.verdict == "ask" and [q.kind for q in record.questions] == ["consent"]
    assert record.slot("cond:effect_key").value == "tau-bench-retail/order:#W1"
    contract = contract_from_mcp(
        "tau-bench-retail",
        _catalog("tau-bench-retail")["exchange_delivered_order_items"],
        extension=RETAIL.tools["exchange_delivered_order_items"],
    )
    recheck = recheck_for(contract, exchange, principal="user:sara_doe_496")
    assert recheck is not None and recheck.key == "tau-bench-retail/order:#W1"
    assert "delivered" in [c.id for c in recheck.conditions]
    # Measured again with the arguments the preflight gave them, the principal's id included.
    assert {m.measure: dict(m.args) for m in recheck.lookups}["user"] == {"user_id": "sara_doe_496"}
