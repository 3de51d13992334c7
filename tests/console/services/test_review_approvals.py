"""Approvals from the console: bound to the value the approver saw, never by the requester themself."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from console_helpers import BOB, TRANSFER, Agent, Downstream, transfer_request
from django.contrib.auth import get_user_model

from console import models
from console.errors import Conflict
from console.services.catalog import catalog_import
from console.services.executions import execution_repreflight
from console.services.review import approval_create
from preflight.approvals import value_digest

pytestmark = pytest.mark.django_db


@pytest.fixture
def confirmed(quick_bank: Downstream) -> Downstream:
    tool = copy.deepcopy(TRANSFER)
    tool["x-preflight"]["slots"]["to_account"] = {
        "sources": ["user_answer", "instruction"],
        "confirm": {"by": "approver"},
    }
    catalog_import(
        server="bank", tools=[tool], annotations_trusted=True, connector={"kind": "python"}, actor="test"
    )
    return quick_bank


def held(agent: Agent) -> dict[str, Any]:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    key = record["measures"][0]["key"]
    from console import tasks

    tasks.measure_run(record["id"], key)
    execution_repreflight(execution_id=record["id"], trigger="lookups")
    held = agent.get(f"/api/v1/executions/{record['id']}").json()
    assert held["verdict"] == "hold", held["reasons"]
    return held


def test_an_approval_of_the_value_shown_lets_the_execution_through(
    confirmed: Downstream, quick_agent: Agent
) -> None:
    record = held(quick_agent)
    carol = get_user_model().objects.create_user("carol")

    approval_create(
        execution_id=record["id"],
        slot_key="arg:to_account",
        value_digest_seen=value_digest(BOB),
        approver=carol,
    )

    after = quick_agent.get(f"/api/v1/executions/{record['id']}").json()
    assert after["verdict"] == "execute", after["reasons"]
    assert next(s for s in after["slots"] if s["key"] == "arg:to_account")["approval"] == "approved"
    assert models.AuditEvent.objects.filter(kind="approval").count() == 1


def test_the_requester_cannot_approve_their_own_execution(confirmed: Downstream, quick_agent: Agent) -> None:
    record = held(quick_agent)
    alice = get_user_model().objects.create_user("alice")

    with pytest.raises(Conflict, match="own_request"):
        approval_create(
            execution_id=record["id"],
            slot_key="arg:to_account",
            value_digest_seen=value_digest(BOB),
            approver=alice,
        )


def test_an_approval_of_a_value_that_has_changed_is_refused(
    confirmed: Downstream, quick_agent: Agent
) -> None:
    record = held(quick_agent)
    carol = get_user_model().objects.create_user("carol")

    with pytest.raises(Conflict, match="stale_value"):
        approval_create(
            execution_id=record["id"],
            slot_key="arg:to_account",
            value_digest_seen=value_digest("DE00"),
            approver=carol,
        )


def test_a_slot_that_awaits_no_approval_cannot_be_approved(confirmed: Downstream, quick_agent: Agent) -> None:
    record = held(quick_agent)
    carol = get_user_model().objects.create_user("carol")

    with pytest.raises(Conflict, match="not_approvable"):
        approval_create(
            execution_id=record["id"],
            slot_key="arg:amount",
            value_digest_seen=value_digest(120),
            approver=carol,
        )
