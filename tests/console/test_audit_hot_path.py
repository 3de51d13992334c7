"""The create path's shortcuts keep its behaviour: batched audit appends, an answer not read back."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import Agent, Downstream, said, transfer_request
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from console import models
from console.audit import audit_append, audit_batch, verify_chain
from console.services.catalog import catalog_import
from console.services.measures import measure_create

pytestmark = pytest.mark.django_db

NOTE: dict[str, Any] = {
    "name": "post_note",
    "description": "Pin a note to the team board.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    "x-preflight": {"state_change": "a note appears on the board"},
}


def note_request() -> dict[str, Any]:
    return said(
        "board", "post_note", "Post the note lunch at noon now.", {"text": "lunch at noon"}, action="Post"
    )


def chain_is_intact() -> bool:
    return all(broken is None for _, broken in verify_chain())


def test_appends_in_a_batch_are_linked_in_order_when_it_ends() -> None:
    measure_create(name="before", kind="python", actor="test")
    with transaction.atomic(), audit_batch():
        audit_append(kind="first", execution_id=None, body={"n": 1})
        with audit_batch():  # a nested block joins the outer one
            audit_append(kind="second", execution_id=None, body={"n": 2})
        assert models.AuditEvent.objects.count() == 1  # nothing written before the block ends
    kinds = list(models.AuditEvent.objects.order_by("seq").values_list("seq", "kind"))

    assert kinds == [(1, "measure"), (2, "first"), (3, "second")]
    assert chain_is_intact()


def test_a_batch_that_raises_writes_nothing() -> None:
    with pytest.raises(ValueError), transaction.atomic(), audit_batch():
        audit_append(kind="lost", execution_id=None, body={})
        raise ValueError("the action failed")
    measure_create(name="after", kind="python", actor="test")

    assert list(models.AuditEvent.objects.values_list("seq", "kind")) == [(1, "measure")]


def test_a_nested_block_that_rolls_back_drops_only_its_own_events() -> None:
    with transaction.atomic(), audit_batch():
        audit_append(kind="kept", execution_id=None, body={})
        with pytest.raises(ValueError), transaction.atomic(), audit_batch():
            audit_append(kind="undone", execution_id=None, body={})
            raise ValueError("the inner action failed and its savepoint rolled back")
        audit_append(kind="also kept", execution_id=None, body={})

    assert list(models.AuditEvent.objects.values_list("seq", "kind")) == [(1, "kept"), (2, "also kept")]
    assert chain_is_intact()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite locks no row")
def test_a_preflight_takes_the_chain_lock_once(quick_bank: Downstream, quick_agent: Agent) -> None:
    with CaptureQueriesContext(connection) as queries:
        record = quick_agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    sqls = [q["sql"] for q in queries.captured_queries]
    # The head is locked by the UPDATE that moves it on (console/queries.py advance_head).
    locks = [sql for sql in sqls if sql.startswith("UPDATE") and "auditchain" in sql]
    kinds = list(
        models.AuditEvent.objects.filter(execution_id=record["id"])
        .order_by("seq")
        .values_list("kind", flat=True)
    )

    assert record["verdict"] == "ask"
    assert kinds == ["preflight", "gap_report"]
    assert len(locks) == 1
    assert chain_is_intact()


@pytest.mark.parametrize("case", ["ask", "execute", "measure"])
def test_the_create_answer_is_the_record_as_it_reads_back(case: str, agent: Agent, bank: Downstream) -> None:
    catalog_import(
        server="board", tools=[NOTE], annotations_trusted=True, connector={"kind": "python"}, actor="test"
    )
    body = {
        "ask": transfer_request(from_account=None),
        "execute": note_request(),
        # Lookups run in-process after commit (eager), so the answer is read back: it says `execute`.
        "measure": transfer_request(),
    }[case]

    created = agent.post("/api/v1/executions", body)
    read_back = agent.get(f"/api/v1/executions/{created.json()['id']}")

    assert created.status_code == 201, created.json()
    assert created.json() == read_back.json()
    assert created.json()["verdict"] == ("ask" if case == "ask" else "execute")
    if case != "ask":
        assert created.json()["grant"].startswith("pfg1.")
