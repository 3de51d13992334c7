"""The gate re-checks what a grant rests on: the tool's current contract, the freshness of the observations
its conditions read, and, under one lock per effect key, the conditions the contract marks for re-checking.
Every refusal is a 409 and the tool never hears of it."""

from __future__ import annotations

import copy
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from console_helpers import GET_BALANCE, Agent, Downstream, make_agent, said, transfer_request, transfer_v2
from django.db import connections
from rest_framework.test import APIClient

from console import connectors, effect_locks, models
from console.connectors import measures
from console.connectors import tools as connector_tools
from console.services.catalog import catalog_import
from console.services.gate import grant_issue
from console.services.measures import measure_create
from console.services.rules import ruleset_create

pytestmark = pytest.mark.django_db(transaction=True)

EXCHANGE: dict[str, Any] = {
    "name": "exchange_items",
    "description": "Exchange an item of a delivered order.",
    "inputSchema": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "item": {"type": "string"}},
        "required": ["order_id", "item"],
    },
    "x-preflight": {
        "state_change": "the order's item is exchanged; the order can be exchanged once",
        "effect_key": '"order:" + arg.order_id',
        "measures": {"order": {"lookup": "shop.order", "args": {"id": "arg:order_id"}, "max_age_s": 60}},
        "conditions": [
            {"id": "still_delivered", "check": 'measure.order.status == "delivered"', "on_false": "hold"}
        ],
    },
}


class Shop:
    """The shop behind the gate: one order, which an exchange moves out of `delivered`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.status = "delivered"
        self.calls: list[dict[str, Any]] = []
        self.lookups = 0
        self.lookup_fails = False

    def exchange_items(self, **arguments: Any) -> dict[str, Any]:
        with self.lock:
            self.calls.append(arguments)
            self.status = "exchange requested"
        return {"exchanged": arguments["item"]}

    def order(self, id: str) -> dict[str, Any]:
        with self.lock:
            self.lookups += 1
            if self.lookup_fails:
                raise RuntimeError("the shop is down")
            return {"id": id, "status": self.status}


@pytest.fixture
def shop(transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> Shop:
    monkeypatch.setattr(connector_tools, "_TOOLS", dict(connector_tools._TOOLS))
    monkeypatch.setattr(measures, "_LOOKUPS", dict(measures._LOOKUPS))
    shop = Shop()
    connectors.register_tool("shop", "exchange_items")(shop.exchange_items)
    connectors.register_lookup("shop.order")(shop.order)
    catalog_import(
        server="shop", tools=[EXCHANGE], annotations_trusted=False, connector={"kind": "python"}, actor="test"
    )
    measure_create(name="shop.order", kind="python", timeout_s=2, actor="test")
    return shop


def exchange_granted(agent: Agent | APIClient, item: str = "lamp") -> dict[str, Any]:
    body = said(
        "shop",
        "exchange_items",
        f"Exchange the {item} of order W1 now",
        {"order_id": "W1", "item": item},
        action="Exchange",
    )
    record = agent.post("/api/v1/executions", body, format="json").json()
    assert record["verdict"] == "execute", record["reasons"]
    return record


def run(agent: Agent | APIClient, record: dict[str, Any], grant: str | None = None) -> Any:
    return agent.post(
        f"/api/v1/executions/{record['id']}/run", {"grant": grant or record["grant"]}, format="json"
    )


def assert_refused(response: Any, code: str) -> None:
    assert response.status_code == 409, response.json()
    assert response.json()["error"] == code, response.json()


# ---- a catalog change voids outstanding grants ----------------------------------------------------------


def test_a_catalog_change_voids_a_grant_issued_under_the_old_contract(agent: Agent, bank: Downstream) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "execute", record["reasons"]
    catalog_import(
        server="bank",
        tools=[transfer_v2(), GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )

    response = run(agent, record)

    assert_refused(response, "contract_changed")
    assert bank.calls == []
    assert models.Grant.objects.get(execution_id=record["id"]).used_at is None
    assert models.Outcome.objects.get(execution_id=record["id"]).detail.startswith("contract_changed")


def test_a_tool_removed_from_the_catalog_voids_its_grants(agent: Agent, bank: Downstream) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    catalog_import(
        server="bank",
        tools=[GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )

    assert_refused(run(agent, record), "contract_changed")
    assert bank.calls == []


def test_a_rules_change_voids_a_grant_checked_against_the_old_rules(agent: Agent, bank: Downstream) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "execute", record["reasons"]
    rule = {"id": "limit", "kind": "condition", "check": "arg.amount <= 100", "on_false": "hold"}
    ruleset_create(data={"id": "acme", "version": "1", "rules": [rule]}, actor="test")

    response = run(agent, record)

    assert_refused(response, "contract_changed")
    assert "rules" in response.json()["detail"]
    assert bank.calls == []


def test_a_re_import_of_the_same_contract_leaves_grants_standing(agent: Agent, bank: Downstream) -> None:
    from console_helpers import TRANSFER

    record = agent.post("/api/v1/executions", transfer_request()).json()
    catalog_import(
        server="bank",
        tools=[copy.deepcopy(TRANSFER), GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )

    assert run(agent, record).json()["outcome"] == "executed"
    assert len(bank.calls) == 1


# ---- a grant lives no longer than the observations it rests on ----------------------------------------


def test_a_grant_expires_when_the_first_observation_its_conditions_read_goes_stale(
    agent: Agent, bank: Downstream, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PREFLIGHT_GRANT_TTL_S = 3600
    record = agent.post("/api/v1/executions", transfer_request()).json()
    observed_at = models.Observation.objects.get(execution_id=record["id"]).observed_at
    expires_at = datetime.fromisoformat(record["grant_expires_at"])

    assert record["fresh_until"] == (observed_at + timedelta(seconds=60)).isoformat()
    assert expires_at <= observed_at + timedelta(seconds=60)
    monkeypatch.setattr("console.services.common._now", lambda: observed_at + timedelta(seconds=61))
    assert_refused(run(agent, record), "grant_expired")
    assert bank.calls == []


def test_a_grant_on_stale_observations_is_not_issued_again_the_lookups_run_again(
    agent: Agent, bank: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    lookups = bank.lookups
    later = datetime.now(UTC) + timedelta(seconds=120)
    monkeypatch.setattr("console.services.common._now", lambda: later)

    assert grant_issue(execution_id=record["id"]) is None

    assert bank.lookups > lookups
    assert models.Grant.objects.filter(execution_id=record["id"]).count() == 1
    assert bank.calls == []


# ---- conditions re-checked under the effect key's lock ----------------------------------------------------


def test_the_second_grant_for_exchange_this_order_once_is_refused_as_state_changed(shop: Shop) -> None:
    agent = make_agent()
    first, second = exchange_granted(agent.client, "lamp"), exchange_granted(agent.client, "chair")

    assert run(agent.client, first).json()["outcome"] == "executed"
    response = run(agent.client, second)

    assert_refused(response, "state_changed")
    assert "still_delivered" in response.json()["detail"]
    assert shop.calls == [{"order_id": "W1", "item": "lamp"}]
    assert models.Grant.objects.get(execution_id=second["id"]).used_at is None


def test_two_concurrent_runs_of_exchange_this_order_once_reach_the_tool_exactly_once(shop: Shop) -> None:
    agent = make_agent()
    grants = [exchange_granted(agent.client, item) for item in ("lamp", "chair", "desk", "rug")]
    barrier = threading.Barrier(len(grants))
    answers: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def attempt(record: dict[str, Any]) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent.token}")
        try:
            barrier.wait()
            response = run(client, record)
            with lock:
                answers.append((response.status_code, response.json().get("error")))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt, args=(g,)) for g in grants]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(shop.calls) == 1
    assert Counter(answers) == {(200, None): 1, (409, "state_changed"): 3}
    assert models.Grant.objects.filter(used_at__isnull=False).count() == 1


def test_a_recheck_whose_lookup_fails_refuses_the_call(shop: Shop) -> None:
    agent = make_agent()
    record = exchange_granted(agent.client)
    shop.lookup_fails = True

    response = run(agent.client, record)

    assert_refused(response, "recheck_failed")
    assert "the shop is down" in response.json()["detail"]
    assert shop.calls == []


def test_a_recheck_is_recorded_in_the_audit_chain(shop: Shop) -> None:
    agent = make_agent()
    record = exchange_granted(agent.client)

    run(agent.client, record)

    event = models.AuditEvent.objects.get(kind="recheck")
    assert event.body["effect_key"] == "shop/order:W1"
    assert event.body["failures"] == []


def test_a_forged_grant_never_makes_the_gate_look_anything_up(shop: Shop) -> None:
    agent = make_agent()
    record = exchange_granted(agent.client)
    lookups = shop.lookups
    prefix, claims, signature = record["grant"].split(".")

    flipped = signature[:10] + ("B" if signature[10] != "B" else "C") + signature[11:]

    response = run(agent.client, record, f"{prefix}.{claims}.{flipped}")

    assert response.status_code == 409 and response.json()["error"] == "grant_bad_signature", response.json()
    assert shop.lookups == lookups
    assert shop.calls == []


def test_a_run_that_cannot_take_its_effect_keys_lock_is_refused_and_recorded(
    shop: Shop, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    agent = make_agent()
    record = exchange_granted(agent.client)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        try:
            with effect_locks.effect_lock("shop/order:W1", timeout_s=5):
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    settings.PREFLIGHT_TOOL_TIMEOUT_S = 0.05
    monkeypatch.setattr("console.services.gate.EFFECT_LOCK_MARGIN_S", 0.1)  # so it waits 0.2 s for the lock
    try:
        response = run(agent.client, record)
    finally:
        release.set()
        holder.join(10)

    assert_refused(response, "effect_busy")
    assert shop.calls == []
    assert models.Outcome.objects.get(execution_id=record["id"]).detail.startswith("effect_busy")
