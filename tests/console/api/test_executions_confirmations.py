"""Confirmations and consent through the answers endpoint: the requesting user's yes or no, bound to what
the latest record's question showed. An approver sees them as evidence and can neither give nor approve
them; a value an approver edited needs another approver. Every refusal leaves the tool uncalled."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from console_helpers import BOB, GET_BALANCE, TRANSFER, Agent, Downstream, transfer_request
from django.contrib.auth import get_user_model

from console import models
from console.errors import Conflict, Unprocessable
from console.services.catalog import catalog_import
from console.services.review import approval_create, execution_reviewer_answer
from preflight.approvals import value_digest
from preflight.canonical import digest

pytestmark = pytest.mark.django_db(transaction=True)

CONFIRM_TO = "confirm:arg:to_account"


def import_transfer(**extension: Any) -> None:
    tool = copy.deepcopy(TRANSFER)
    tool["x-preflight"].update(extension)
    catalog_import(
        server="bank",
        tools=[tool, GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )


@pytest.fixture
def confirming(bank: Downstream) -> Downstream:
    tool = copy.deepcopy(TRANSFER)
    tool["x-preflight"]["slots"]["to_account"] = {"sources": ["user_answer", "instruction"], "confirm": True}
    catalog_import(
        server="bank",
        tools=[tool, GET_BALANCE],
        annotations_trusted=True,
        connector={"kind": "python"},
        actor="test",
    )
    return bank


@pytest.fixture
def consenting(bank: Downstream) -> Downstream:
    import_transfer(consent="Before a transfer, list its details and get the user's explicit yes.")
    return bank


def submit(agent: Agent) -> dict[str, Any]:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "ask", record["reasons"]
    return record


def answer(agent: Agent, record: dict[str, Any], answers: dict[str, Any]) -> Any:
    return agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": answers})


def question(record: dict[str, Any], slot: str) -> dict[str, Any]:
    return next(q for q in record["questions"] if q["slot"] == slot)


def test_the_user_confirms_the_value_shown_and_the_call_runs(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)
    asked = question(record, CONFIRM_TO)
    assert asked["kind"] == "confirmation" and asked["schema"] == {"type": "boolean"}
    assert asked["shows"] == {"slot": "arg:to_account", "value": BOB, "digest": value_digest(BOB)}

    after = answer(agent, record, {CONFIRM_TO: True}).json()

    assert after["verdict"] == "execute", after["reasons"]
    assert (
        agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": after["grant"]}).json()["outcome"]
        == "executed"
    )
    assert [c["to_account"] for c in confirming.calls] == [BOB]
    stored = models.Answer.objects.get(execution_id=record["id"], slot_key=CONFIRM_TO)
    assert stored.value == {"yes": True, "digest": value_digest(BOB)}


def test_a_yes_sent_with_a_new_value_binds_to_the_value_shown_and_the_new_one_is_asked(
    agent: Agent, confirming: Downstream
) -> None:
    record = submit(agent)

    after = answer(agent, record, {CONFIRM_TO: True, "arg:to_account": "DE00MALLORY"}).json()

    assert after["verdict"] == "ask" and after["grant"] is None
    assert question(after, CONFIRM_TO)["shows"]["value"] == "DE00MALLORY"
    assert confirming.calls == []


def test_a_yes_naming_another_digest_is_refused_and_records_nothing(
    agent: Agent, confirming: Downstream
) -> None:
    record = submit(agent)

    response = answer(agent, record, {CONFIRM_TO: {"yes": True, "digest": value_digest("DE00MALLORY")}})

    assert response.status_code == 409 and response.json()["error"] == "stale_value"
    assert not models.Answer.objects.filter(execution_id=record["id"]).exists()
    assert confirming.calls == []


def test_a_yes_to_a_question_that_was_not_asked_is_refused(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)

    response = answer(agent, record, {"consent:call": True})

    assert response.status_code == 409 and response.json()["error"] == "not_asked"
    assert not models.Answer.objects.filter(execution_id=record["id"]).exists()
    assert confirming.calls == []


@pytest.mark.parametrize("value", ["yes", 1, None, {"yes": True}, [True]])
def test_a_confirmation_that_is_not_a_yes_or_no_is_refused(
    agent: Agent, confirming: Downstream, value: Any
) -> None:
    record = submit(agent)

    response = answer(agent, record, {CONFIRM_TO: value})

    assert response.status_code == 422 and response.json()["error"] == "invalid_answer"
    assert not models.Answer.objects.filter(execution_id=record["id"]).exists()
    assert confirming.calls == []


def test_a_refused_yes_or_no_names_its_slot_and_is_audited_and_a_yes_beside_its_digest_counts(
    agent: Agent, confirming: Downstream
) -> None:
    record = submit(agent)
    (question,) = [q for q in record["questions"] if q["kind"] == "confirmation"]
    assert question["schema"] == {"type": "boolean"}

    refused = answer(agent, record, {CONFIRM_TO: {"yes": "yes", "digest": question["shows"]["digest"]}})

    assert refused.status_code == 422
    assert (refused.json()["error"], refused.json()["slot"]) == ("invalid_answer", CONFIRM_TO)
    events = models.AuditEvent.objects.filter(execution_id=record["id"], kind="answer_refused")
    assert [(e.body["error"], e.body["slot"]) for e in events] == [("invalid_answer", CONFIRM_TO)]
    assert not models.Answer.objects.filter(execution_id=record["id"]).exists()

    after = answer(agent, record, {CONFIRM_TO: {"yes": True, "digest": question["shows"]["digest"]}})

    assert after.status_code == 200
    slot = next(s for s in after.json()["slots"] if s["key"] == CONFIRM_TO)
    assert slot["status"] == "known" and slot["value"] == question["shows"]["digest"]
    assert confirming.calls == []


def test_the_users_no_is_recorded_and_the_call_does_not_run(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)

    after = answer(agent, record, {CONFIRM_TO: False}).json()

    assert after["verdict"] == "block" and after["grant"] is None
    assert [u["id"] for u in after["unmet"]] == [CONFIRM_TO]
    assert models.Answer.objects.get(execution_id=record["id"], slot_key=CONFIRM_TO).value["yes"] is False
    assert confirming.calls == []


def test_a_reviewer_cannot_confirm_for_the_user(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)
    carol = get_user_model().objects.create_user("carol")

    with pytest.raises(Unprocessable, match="not_answerable"):
        execution_reviewer_answer(execution_id=record["id"], slot_key=CONFIRM_TO, value=True, reviewer=carol)
    assert not models.Answer.objects.filter(execution_id=record["id"]).exists()
    assert confirming.calls == []


def test_an_approver_cannot_approve_a_users_confirmation(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)
    carol = get_user_model().objects.create_user("carol")

    with pytest.raises(Conflict, match="not_approvable"):
        approval_create(
            execution_id=record["id"],
            slot_key=CONFIRM_TO,
            value_digest_seen=value_digest(digest(BOB)),
            approver=carol,
        )
    assert agent.get(f"/api/v1/executions/{record['id']}").json()["verdict"] == "ask"
    assert not models.Approval.objects.exists() and confirming.calls == []


# ---- consent ----------------------------------------------------------------------------------------------


def test_consent_to_the_payload_in_words_lets_the_call_through(agent: Agent, consenting: Downstream) -> None:
    record = submit(agent)
    asked = question(record, "consent:call")
    assert asked["kind"] == "consent"
    assert (
        asked["shows"]["payload"] == record["payload"]
        and asked["shows"]["digest"] == record["payload_digest"]
    )
    assert BOB in asked["text"] and "120" in asked["text"] and "bank/transfer" not in asked["text"]

    after = answer(agent, record, {"consent:call": True}).json()

    assert after["verdict"] == "execute", after["reasons"]


def test_consent_for_payload_a_does_not_run_payload_b(agent: Agent, consenting: Downstream) -> None:
    record = submit(agent)

    after = answer(agent, record, {"consent:call": True, "arg:amount": 1200}).json()

    assert after["verdict"] == "ask" and after["grant"] is None
    assert question(after, "consent:call")["shows"]["payload"]["amount"] == 1200
    assert consenting.calls == []


def test_a_no_to_the_call_blocks_it(agent: Agent, consenting: Downstream) -> None:
    record = submit(agent)

    after = answer(agent, record, {"consent:call": False}).json()

    assert after["verdict"] == "block" and after["grant"] is None
    assert consenting.calls == []


# ---- four eyes ---------------------------------------------------------------------------------------------


def test_a_value_an_approver_edited_waits_for_another_approver(agent: Agent, bank: Downstream) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    carol = get_user_model().objects.create_user("carol")
    dave = get_user_model().objects.create_user("dave")

    edited = execution_reviewer_answer(
        execution_id=record["id"], slot_key="arg:amount", value=110, reviewer=carol
    )
    assert edited.verdict == "hold"
    with pytest.raises(Conflict, match="four_eyes"):
        approval_create(
            execution_id=record["id"],
            slot_key="arg:amount",
            value_digest_seen=value_digest(110),
            approver=carol,
        )
    approval_create(
        execution_id=record["id"], slot_key="arg:amount", value_digest_seen=value_digest(110), approver=dave
    )

    after = agent.get(f"/api/v1/executions/{record['id']}").json()
    assert after["verdict"] == "execute", after["reasons"]
    assert after["payload"]["amount"] == 110
    assert bank.calls == []


def test_the_user_may_say_yes_after_a_no_to_the_same_value(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)
    answer(agent, record, {CONFIRM_TO: False})

    after = answer(agent, record, {CONFIRM_TO: True}).json()

    assert after["verdict"] == "execute", after["reasons"]


def test_the_user_may_withdraw_a_yes_before_the_call_runs(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)
    granted = answer(agent, record, {CONFIRM_TO: True}).json()

    withdrawn = answer(agent, record, {CONFIRM_TO: False}).json()
    response = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": granted["grant"]})

    assert withdrawn["verdict"] == "block"
    assert response.status_code == 409 and response.json()["error"] == "grant_superseded"
    assert confirming.calls == []


def test_a_yes_is_never_remembered(agent: Agent, confirming: Downstream) -> None:
    record = submit(agent)

    response = agent.post(
        f"/api/v1/executions/{record['id']}/answers",
        {"answers": {CONFIRM_TO: True}, "remember": [CONFIRM_TO]},
    )

    assert response.status_code == 422 and response.json()["error"] == "not_answerable"
    assert not models.Preset.objects.exists() and not models.Answer.objects.exists()
    assert confirming.calls == []
