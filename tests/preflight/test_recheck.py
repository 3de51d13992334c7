"""What the gate re-checks at run time: the conditions marked `recheck` (or all that read a measure, with an
`effect_key`), measured again with the granted payload's arguments, under one lock per effect key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from builders import NOW, Said, request
from catalog_util import catalog_tools, catalogs_present

from preflight import ContractError, Evidence, Observation, compile_plan, contract_from_mcp, preflight
from preflight.errors import ExpressionError
from preflight.recheck import Recheck, RecheckFailure, recheck_failures, recheck_for
from preflight.record import Record

PAYLOAD = {"order_id": "W1", "item": "lamp"}


def exchange(**extension: Any) -> dict[str, Any]:
    """A tau-bench-like "exchange this order once": allowed only while the order is still delivered."""
    return {
        "name": "exchange_items",
        "inputSchema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "item": {"type": "string"}},
            "required": ["order_id", "item"],
        },
        "x-preflight": {
            "state_change": "the order's items are exchanged",
            "measures": {"order": {"lookup": "shop.order", "args": {"id": "arg:order_id"}, "max_age_s": 30}},
            "conditions": [
                {"id": "delivered", "check": 'measure.order.status == "delivered"', "on_false": "hold"},
                {"id": "not_lamp_only", "check": 'arg.item != ""', "on_false": "block"},
            ],
            **extension,
        },
    }


def plan(**extension: Any) -> Recheck | None:
    return recheck_for(contract_from_mcp("shop", exchange(**extension)), PAYLOAD, principal="user:alice")


def seen(
    recheck: Recheck, value: Any = None, *, age_s: float = 0, error: str | None = None
) -> dict[str, Observation]:
    (lookup,) = recheck.lookups
    obs = Observation(
        lookup.measure, lookup.args_digest, NOW - timedelta(seconds=age_s), value=value, error=error
    )
    return {obs.key: obs}


def failures(recheck: Recheck, observations: dict[str, Observation]) -> tuple[RecheckFailure, ...]:
    return recheck_failures(recheck, PAYLOAD, observations, principal="user:alice", environment="", now=NOW)


def test_an_effect_key_locks_on_the_payloads_key_and_rechecks_what_reads_a_measure() -> None:
    recheck = plan(effect_key='"order:" + arg.order_id')

    assert recheck is not None
    assert recheck.key == "shop/order:W1"
    assert [c.id for c in recheck.conditions] == ["delivered"]
    assert [(m.measure, dict(m.args)) for m in recheck.lookups] == [("order", {"id": "W1"})]


def test_a_condition_marked_recheck_without_an_effect_key_locks_the_whole_tool() -> None:
    tool = exchange()
    tool["x-preflight"]["conditions"][0]["recheck"] = True

    recheck = recheck_for(contract_from_mcp("shop", tool), PAYLOAD, principal="user:alice")

    assert recheck is not None and recheck.key == "shop/exchange_items/*"
    assert [c.id for c in recheck.conditions] == ["delivered"]


def test_a_contract_that_declares_neither_is_not_rechecked() -> None:
    assert plan() is None


def test_a_condition_that_still_holds_is_no_failure() -> None:
    recheck = plan(effect_key='"order:" + arg.order_id')
    assert recheck is not None

    assert failures(recheck, seen(recheck, {"status": "delivered"})) == ()


def test_a_condition_that_no_longer_holds_is_a_changed_state() -> None:
    recheck = plan(effect_key='"order:" + arg.order_id')
    assert recheck is not None

    (failure,) = failures(recheck, seen(recheck, {"status": "exchange requested"}))

    assert failure.condition == "delivered" and failure.reason == "false"


@pytest.mark.parametrize(
    "found",
    [
        lambda r: {},
        lambda r: seen(r, error="timed out"),
        lambda r: seen(r, {"status": "delivered"}, age_s=31),
        lambda r: seen(r, "not an object"),
        lambda r: seen(r, {"status": "delivered"}, age_s=-3600),
    ],
    ids=["missing", "error", "stale", "odd value", "from the future"],
)
def test_a_lookup_that_failed_is_missing_or_stale_fails_the_recheck_never_passes(
    found: Callable[[Recheck], dict[str, Observation]],
) -> None:
    recheck = plan(effect_key='"order:" + arg.order_id')
    assert recheck is not None

    (failure,) = failures(recheck, found(recheck))

    assert failure.reason == "error"


def test_a_recheck_on_a_condition_that_reads_no_measure_is_a_contract_error() -> None:
    tool = exchange()
    tool["x-preflight"]["conditions"][1]["recheck"] = True

    with pytest.raises(ContractError, match="recheck must read a measure"):
        contract_from_mcp("shop", tool)


def test_an_effect_key_that_reads_a_measure_is_a_contract_error() -> None:
    with pytest.raises(ContractError, match="effect_key may read only arguments"):
        contract_from_mcp("shop", exchange(effect_key='"order:" + measure.order.id'))


def test_an_effect_key_without_a_string_value_for_the_payload_raises() -> None:
    contract = contract_from_mcp("shop", exchange(effect_key="arg.order_id == 'W1'"))

    with pytest.raises(ExpressionError, match="not a key"):
        recheck_for(contract, PAYLOAD, principal="user:alice")


@pytest.mark.skipif(not catalogs_present(), reason="the shared catalogs are not beside the repo")
def test_tau_bench_exchange_and_return_of_one_order_share_one_effect_key() -> None:
    """ "For a delivered order, return or exchange can be only done once": both tools lock the order."""
    tools = {t["name"]: t for _, t in catalog_tools() if t["name"].endswith("_delivered_order_items")}
    side_car = {
        "state_change": "a delivered order is exchanged or returned, once",
        "prose_reviewed": True,
        "effect_key": '"order:" + arg.order_id',
        "measures": {"order": {"lookup": "retail.order", "args": {"id": "arg:order_id"}}},
        "conditions": [
            {"id": "delivered", "check": 'measure.order.status == "delivered"', "on_false": "hold"}
        ],
    }
    payload = {"order_id": "#W0000000", "item_ids": ["1"], "new_item_ids": ["2"], "payment_method_id": "gift"}

    keys = {
        name: recheck_for(contract_from_mcp("retail", tool, extension=side_car), payload, principal="user:a")
        for name, tool in tools.items()
    }

    assert set(keys) == {"exchange_delivered_order_items", "return_delivered_order_items"}
    assert {r.key for r in keys.values() if r is not None} == {"retail/order:#W0000000"}


def preflighted(tool: dict[str, Any], values: dict[str, Any]) -> Record:
    text = "Exchange " + " ".join(f"{v}" for v in values.values()) + " now"
    said = Said(text)
    req = request(said, {k: (v, str(v)) for k, v in values.items()}, action="Exchange")
    return preflight(compile_plan(contract_from_mcp("shop", tool)), req, Evidence(now=NOW))


def test_the_record_shows_the_effect_key_the_gate_will_lock() -> None:
    tool = exchange(effect_key='"order:" + arg.order_id')
    del tool["x-preflight"]["conditions"][0]  # nothing to measure: the record is complete at once

    record = preflighted(tool, {"order_id": "W1", "item": "lamp"})

    assert record.verdict == "execute", record.reasons
    assert record.slot("cond:effect_key").value == "shop/order:W1"


def test_an_effect_key_with_no_value_for_the_payload_holds_instead_of_granting() -> None:
    tool = exchange(effect_key='"order:" + arg.note')
    tool["inputSchema"]["properties"]["note"] = {"type": "string"}
    del tool["x-preflight"]["conditions"][0]

    record = preflighted(tool, {"order_id": "W1", "item": "lamp"})

    assert record.verdict == "hold"
    assert record.slot("cond:effect_key").route == "hold"
