"""Answers are checked against their questions before they count; undeclared arguments are never dropped."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from console_helpers import (
    ALICE_MAIN,
    ALICE_SAVINGS,
    BOB,
    TRANSFER,
    Agent,
    Downstream,
    span,
    transfer_request,
)

from console import models
from console.services.catalog import catalog_import
from console.services.executions import execution_repreflight

pytestmark = pytest.mark.django_db


def slot(record: dict[str, Any], key: str) -> dict[str, Any]:
    return next(s for s in record["slots"] if s["key"] == key)


def answer(agent: Agent, record: dict[str, Any], answers: dict[str, Any], **more: Any) -> Any:
    return agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": answers, **more})


def unchanged(record: dict[str, Any]) -> None:
    """Nothing was settled: no answer stored, no new preflight, the latest record as it was."""
    assert not models.Answer.objects.filter(execution_id=record["id"]).exists()
    execution = models.Execution.objects.get(pk=record["id"])
    assert execution.records == models.PreflightRecord.objects.filter(execution_id=record["id"]).count()
    assert (
        models.PreflightRecord.objects.get(execution=execution, seq=execution.records).record_digest
        == (record["record_digest"])
    )


def refused_audit(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e.body for e in models.AuditEvent.objects.filter(execution_id=record["id"], kind="answer_refused")
    ]


def test_an_answer_its_question_refuses_gets_invalid_answer_and_settles_nothing(
    agent: Agent, bank: Downstream
) -> None:
    record = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    assert record["verdict"] == "ask"
    (question,) = record["questions"]
    assert question["schema"] == {"type": "string"} and question["kind"] == "value"

    response = answer(agent, record, {"arg:from_account": 12345})

    assert response.status_code == 422
    body = response.json()
    assert body == {
        "error": "invalid_answer",
        "detail": "arg:from_account: 12345 is not of type 'string'",
        "slot": "arg:from_account",
        "reason": "12345 is not of type 'string'",
        "accepts": "text",
    }
    unchanged(record)
    (audit,) = refused_audit(record)
    assert (audit["error"], audit["slot"]) == ("invalid_answer", "arg:from_account")
    assert bank.calls == [] and bank.lookups == 0


@pytest.mark.parametrize(
    ("answers", "slot_key"),
    [
        ({"arg:amount": -5}, "arg:amount"),
        ({"arg:amount": "1500"}, "arg:amount"),
        ({"arg:amount": None}, "arg:amount"),  # required: null cannot leave it out
        ({"arg:from_account": ALICE_MAIN, "arg:amount": 0}, "arg:amount"),  # one bad answer refuses all
        ({"fixed:timing": "tomorrow-ish"}, "fixed:timing"),
        ({"arg:memo": 7}, "arg:memo"),
    ],
)
def test_an_answer_the_tools_schema_refuses_is_refused_before_it_counts(
    agent: Agent, bank: Downstream, answers: dict[str, Any], slot_key: str
) -> None:
    record = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()

    response = answer(agent, record, answers)

    assert response.status_code == 422, response.json()
    assert response.json()["error"] == "invalid_answer" and response.json()["slot"] == slot_key
    unchanged(record)
    assert bank.calls == []


def test_an_optional_argument_answered_null_is_left_out(agent: Agent, bank: Downstream) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    after = answer(agent, record, {"arg:memo": None})
    assert after.status_code == 200, after.json()
    assert after.json()["verdict"] == "execute" and "memo" not in after.json()["payload"]


def test_a_value_the_user_stated_that_the_tool_refuses_is_asked_again_with_the_reason(
    agent: Agent, bank: Downstream
) -> None:
    body = transfer_request(amount=5)
    text = body["conversation"][0]["content"].replace("Send 5 EUR", "Send -5 EUR")
    body["conversation"][0]["content"] = text
    body["candidates"]["amount"] = {"value": -5, "pointer": span(text, "-5")}
    body["candidates"]["to_account"]["pointer"] = span(text, BOB)
    body["candidates"]["from_account"]["pointer"] = span(text, ALICE_MAIN)
    body["action_name"], body["timing"]["pointer"] = span(text, "Send"), span(text, "now")

    record = agent.post("/api/v1/executions", body).json()

    assert record["verdict"] == "ask", record["reasons"]
    amount = slot(record, "arg:amount")
    assert (amount["route"], amount["gap"]) == ("ask_user", "user_gap")
    assert amount["refused"] == {"value": -5, "reason": "-5 is less than or equal to the minimum of 0"}
    (question,) = record["questions"]
    assert question["slot"] == "arg:amount" and question["reason"] == amount["refused"]["reason"]
    assert record["grant"] is None and bank.calls == []

    fixed = answer(agent, record, {"arg:amount": 5}).json()
    assert fixed["verdict"] == "execute", fixed["reasons"]


def test_an_undeclared_argument_the_tool_cannot_take_is_asked_about_and_never_run_without(
    agent: Agent, bank: Downstream
) -> None:
    body = transfer_request()
    text = body["conversation"][0]["content"] + " Priority urgent."
    body["conversation"][0]["content"] = text
    body["candidates"]["priority"] = {"value": "urgent", "pointer": span(text, "urgent")}

    record = agent.post("/api/v1/executions", body).json()

    assert record["verdict"] == "ask", record["reasons"]
    (question,) = record["questions"]
    assert question == {
        "slot": "arg:priority",
        "kind": "without",
        "text": "This action has no setting for 'priority'; go ahead without it?",
        "schema": {"type": "null"},
        "reason": slot(record, "arg:priority")["refused"]["reason"],
    }
    assert record["grant"] is None and bank.calls == []

    refused = answer(agent, record, {"arg:priority": "urgent"})
    assert refused.status_code == 422 and refused.json()["error"] == "invalid_answer"

    ahead = answer(agent, record, {"arg:priority": None}).json()
    assert ahead["verdict"] == "execute", ahead["reasons"]
    ran = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": ahead["grant"]})
    assert ran.json()["outcome"] == "executed"
    assert bank.calls == [{"from_account": ALICE_MAIN, "to_account": BOB, "amount": 120}]


def test_an_answer_for_an_undeclared_argument_is_a_slot_that_reaches_the_payload(
    agent: Agent, bank: Downstream
) -> None:
    open_tool = copy.deepcopy(TRANSFER)
    del open_tool["inputSchema"]["additionalProperties"]
    catalog_import(server="bank", tools=[open_tool], annotations_trusted=False, actor="test")
    record = agent.post("/api/v1/executions", transfer_request()).json()

    after = answer(agent, record, {"arg:reference": "INV-7"}).json()

    assert slot(after, "arg:reference")["source"] == "user_answer"
    assert after["verdict"] == "execute" and after["payload"]["reference"] == "INV-7"
    agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": after["grant"]})
    assert bank.calls == [
        {"from_account": ALICE_MAIN, "to_account": BOB, "amount": 120, "reference": "INV-7"}
    ]


def test_remember_makes_a_preset_only_where_the_slot_takes_both_answers_and_presets(
    agent: Agent, bank: Downstream
) -> None:
    strict = copy.deepcopy(TRANSFER)
    strict["x-preflight"]["slots"]["to_account"] = {"sources": ["user_answer", "instruction"]}
    catalog_import(server="bank", tools=[strict], annotations_trusted=False, actor="test")
    record = agent.post("/api/v1/executions", transfer_request()).json()

    response = answer(agent, record, {"arg:to_account": ALICE_SAVINGS}, remember=["arg:to_account"])

    assert response.status_code == 422
    assert response.json()["error"] == "not_rememberable" and response.json()["slot"] == "arg:to_account"
    assert not models.Preset.objects.exists()
    unchanged(record)
    assert [a["error"] for a in refused_audit(record)] == ["not_rememberable"]


def test_a_preset_made_during_an_execution_never_settles_a_slot_of_that_execution(
    agent: Agent, bank: Downstream
) -> None:
    record = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    answer(agent, record, {"arg:from_account": ALICE_SAVINGS}, remember=["arg:from_account"])
    assert models.Preset.objects.count() == 1
    # Were the answer gone, only the preset it made would be left for this execution: it must not count.
    models.Answer.objects.filter(execution_id=record["id"]).delete()

    again = execution_repreflight(execution_id=record["id"], trigger="test")

    assert again.record["verdict"] == "ask"
    assert slot(again.record, "arg:from_account")["status"] == "unknown"
    later = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    assert slot(later, "arg:from_account")["source"] == "preset"


def test_an_answer_for_a_slot_that_takes_no_answers_is_refused_and_settles_nothing(
    agent: Agent, bank: Downstream
) -> None:
    strict = copy.deepcopy(TRANSFER)
    strict["x-preflight"]["slots"]["from_account"] = {"sources": ["instruction"]}
    catalog_import(server="bank", tools=[strict], annotations_trusted=False, actor="test")
    record = agent.post("/api/v1/executions", transfer_request(from_account=None)).json()
    assert record["verdict"] != "execute"

    response = answer(agent, record, {"arg:from_account": ALICE_SAVINGS})

    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_answer" and body["slot"] == "arg:from_account"
    assert "not settled by an answer" in body["reason"]
    unchanged(record)
    assert bank.calls == []


def test_an_answer_for_a_look_alike_of_a_declared_argument_holds_and_reaches_no_tool(
    agent: Agent, bank: Downstream
) -> None:
    open_tool = copy.deepcopy(TRANSFER)
    del open_tool["inputSchema"]["additionalProperties"]
    catalog_import(server="bank", tools=[open_tool], annotations_trusted=False, actor="test")
    record = agent.post("/api/v1/executions", transfer_request()).json()

    after = answer(agent, record, {"arg:\u0430mount": 9000}).json()  # a Cyrillic a

    assert after["verdict"] == "hold" and after.get("grant") is None
    assert slot(after, "arg:\u0430mount")["route"] == "hold"
    assert "\u0430mount" not in (after["payload"] or {})
    assert bank.calls == []
