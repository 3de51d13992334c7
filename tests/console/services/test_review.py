"""The reviewer's services: edit, approve the call, reject."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from review_support import latest, person, settle_all_but_the_call, slot, use_demo_bank

from console import models, storage
from console.audit import verify_all
from console.demo import review_data
from console.demo.review_data import ALICE_MAIN, ALICE_SAVINGS, BOB
from console.errors import BadInput, Conflict
from console.selectors.review import live_grant, pending_call_approvals
from console.services.executions import execution_answer, execution_repreflight
from console.services.gate import execution_run
from console.services.review import (
    REJECTED_SLOT,
    execution_approve,
    execution_reject,
    execution_reviewer_answer,
    rejection_record,
)
from console.services.tokens import agent_token_create
from console.signing import token_for
from preflight import (
    Answer,
    Evidence,
    ExecutionRequest,
    GrantClaims,
    compile_plan,
    contract_from_mcp,
    preflight,
)
from preflight.approvals import value_digest

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(db: None, monkeypatch: pytest.MonkeyPatch) -> models.Execution:
    use_demo_bank(monkeypatch)
    return review_data.held_transfer()


@pytest.fixture
def carol(db: None) -> User:
    return person("carol", "approver")


# ---- a reviewer's edit --------------------------------------------------------------------------------


def test_a_reviewers_edit_is_their_answer_and_is_preflighted_in_place(
    carol: User, held: models.Execution
) -> None:
    stored = execution_reviewer_answer(
        execution_id=held.pk, slot_key="arg:to_account", value=ALICE_SAVINGS, reviewer=carol
    )

    answer = models.Answer.objects.get(execution=held)
    assert (answer.channel, answer.answered_by) == ("reviewer", "user:carol")
    assert stored.trigger == "answer" and stored.seq == 2
    recipient = slot(stored.record, "arg:to_account")
    assert (recipient["value"], recipient["source"]) == (ALICE_SAVINGS, "user_answer")
    event = models.AuditEvent.objects.filter(kind="answer").get()
    assert event.body["answered_by"] == "user:carol" and event.body["channel"] == "reviewer"


def test_an_edit_voids_the_users_confirmation_the_calls_approval_and_the_grant(
    carol: User, held: models.Execution, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)
    executed = execution_approve(
        execution_id=held.pk, payload_digest_seen=record["payload_digest"], approver=carol
    )
    grant = models.Grant.objects.get(record=executed)

    after = execution_reviewer_answer(
        execution_id=held.pk, slot_key="arg:to_account", value=ALICE_SAVINGS, reviewer=carol
    )

    # The user is asked to confirm the new recipient and consent again; another approver must approve it.
    assert after.verdict == "ask"
    assert [q["slot"] for q in after.record["questions"]] == ["confirm:arg:to_account", "consent:call"]
    assert slot(after.record, "arg:to_account")["approval"] == "required"
    assert slot(after.record, "approval:large_transfer")["approval"] == "void"  # the payload changed
    with pytest.raises(Conflict, match="grant_superseded"):
        execution_run(execution_id=held.pk, token=token_for(GrantClaims(**grant.claims)), actor="test")


# ---- approving the whole call -------------------------------------------------------------------------


def test_approving_the_call_settles_its_approvals_and_grants_it(
    carol: User, held: models.Execution, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)
    assert pending_call_approvals(record) == (
        ["approval:large_transfer"],
        None,
    )

    stored = execution_approve(
        execution_id=held.pk, payload_digest_seen=record["payload_digest"], approver=carol
    )

    assert stored.verdict == "execute"
    assert models.Grant.objects.filter(record=stored, used_at__isnull=True).exists()
    approvals = models.Approval.objects.filter(execution=held, slot_key__startswith="approval:")
    assert {a.value_digest for a in approvals} == {value_digest(record["payload_digest"])}


def test_approving_a_call_that_is_not_ready_is_refused(carol: User, held: models.Execution) -> None:
    with pytest.raises(Conflict, match="not_ready: the verdict is ask"):
        execution_approve(
            execution_id=held.pk, payload_digest_seen=latest(held)["payload_digest"], approver=carol
        )


def test_approving_another_payload_than_the_one_shown_is_refused(
    carol: User, held: models.Execution, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    settle_all_but_the_call(held, django_capture_on_commit_callbacks)

    with pytest.raises(Conflict, match="stale_value"):
        execution_approve(execution_id=held.pk, payload_digest_seen="sha256:0", approver=carol)


def test_the_requester_cannot_approve_the_call(
    carol: User, held: models.Execution, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)

    with pytest.raises(Conflict, match="own_request"):
        execution_approve(
            execution_id=held.pk,
            payload_digest_seen=record["payload_digest"],
            approver=person("alice", "approver"),
        )


def test_an_expired_grant_is_issued_again_for_the_same_record(
    carol: User, held: models.Execution, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)
    stored = execution_approve(
        execution_id=held.pk, payload_digest_seen=record["payload_digest"], approver=carol
    )
    models.Grant.objects.filter(record=stored).update(expires_at=datetime(2000, 1, 1, tzinfo=UTC))

    again = execution_approve(
        execution_id=held.pk, payload_digest_seen=record["payload_digest"], approver=carol
    )

    assert again.pk == stored.pk  # no new preflight: the same record, a fresh grant
    assert models.Grant.objects.filter(record=stored).count() == 2
    assert live_grant(stored) is not None


def test_pending_call_approvals_names_what_still_stands_in_the_way() -> None:
    def record(**kw: Any) -> dict[str, Any]:
        base = {"verdict": "hold", "unmet": [], "payload_valid": True, "slots": []}
        return {**base, **kw}

    call = {"key": "approval:x", "status": "unknown", "approval": "required"}
    confirm = {"key": "arg:to", "status": "known", "approval": "required"}
    missing = {"key": "arg:from", "status": "unknown", "route": "ask_user"}
    assert pending_call_approvals(record(slots=[call])) == (["approval:x"], None)
    assert pending_call_approvals(record(slots=[call, confirm]))[1] == ("arg:to awaits approval of its value")
    assert pending_call_approvals(record(slots=[call, missing]))[1] == ("arg:from is unresolved (ask_user)")
    assert pending_call_approvals(record(slots=[call], unmet=[{"id": "c"}]))[1] == ("a condition is unmet")
    assert pending_call_approvals(record(slots=[call], payload_valid=None))[1] == (
        "the payload is not complete and valid yet"
    )
    assert pending_call_approvals(record(slots=[]))[1] == ("nothing awaits an approval of the whole call")


# ---- rejecting ----------------------------------------------------------------------------------------


def test_a_rejection_is_recorded_as_a_block_with_the_reason(carol: User, held: models.Execution) -> None:
    rejection = execution_reject(execution_id=held.pk, reason=" not on file ", reviewer=carol)

    assert rejection.reason == "not on file"
    record = latest(held)
    assert record["verdict"] == "block"
    assert record["reasons"] == ["rejected by user:carol: not on file"]
    decision = slot(record, REJECTED_SLOT)
    assert (decision["met"], decision["source"], decision["pointer"]) == (
        False,
        "reviewer",
        {"by": "user:carol"},
    )
    assert slot(record, "arg:to_account")["value"] == BOB  # the record as it stood, plus the decision
    assert storage.record_body_digest(record) == record["record_digest"]
    assert models.AuditEvent.objects.filter(kind="rejection", body__reason="not on file").exists()
    assert verify_all().ok


def test_a_rejection_is_final(
    carol: User, held: models.Execution, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    record = settle_all_but_the_call(held, django_capture_on_commit_callbacks)
    stored = execution_approve(
        execution_id=held.pk, payload_digest_seen=record["payload_digest"], approver=carol
    )
    token = token_for(GrantClaims(**models.Grant.objects.get(record=stored).claims))

    execution_reject(execution_id=held.pk, reason="fraud suspected", reviewer=carol)

    # No later answer, lookup or approval gives it another verdict, and the grant it had is dead.
    with pytest.raises(Conflict, match="rejected"):
        execution_answer(
            execution_id=held.pk,
            answers={"arg:memo": "y"},
            answered_by="user:alice",
            channel="agent",
            actor="t",
        )
    with pytest.raises(Conflict, match="rejected"):
        execution_repreflight(execution_id=held.pk, trigger="lookups")
    with pytest.raises(Conflict, match="grant_superseded"):
        execution_run(execution_id=held.pk, token=token, actor="test")
    with pytest.raises(Conflict, match="already_rejected"):
        execution_reject(execution_id=held.pk, reason="again", reviewer=carol)
    assert latest(held)["verdict"] == "block"
    assert not models.Answer.objects.filter(value="y").exists()


def test_a_rejection_keeps_every_slot_as_it_stood_a_refused_value_included() -> None:
    definition = {
        "name": "pay",
        "inputSchema": {
            "type": "object",
            "properties": {"amount": {"type": "number", "exclusiveMinimum": 0}},
            "required": ["amount"],
        },
        "x-preflight": {"state_change": "money moves"},
    }
    now = datetime(2026, 1, 1, tzinfo=UTC)
    evidence = Evidence(now=now, answers={"arg:amount": Answer(-5, "user:alice")})
    plan = compile_plan(contract_from_mcp("bank", definition))
    latest = preflight(plan, ExecutionRequest(principal="user:alice"), evidence).to_json()
    assert slot(latest, "arg:amount")["refused"]["value"] == -5
    at = now.isoformat()
    rejection = rejection_record(latest, reviewer="user:carol", reason="no", at=at)
    assert rejection.verdict == "block"
    assert rejection.to_json()["slots"][:-1] == latest["slots"]


def test_a_rejection_needs_a_reason(carol: User, held: models.Execution) -> None:
    with pytest.raises(BadInput, match="reason"):
        execution_reject(execution_id=held.pk, reason="   ", reviewer=carol)
    assert latest(held)["verdict"] == "ask"


# ---- the rows and the conversation marks --------------------------------------------------------------


def test_an_agent_answering_a_rejected_execution_is_told_it_was_rejected(
    carol: User, held: models.Execution
) -> None:
    from rest_framework.test import APIClient

    row, token = agent_token_create(name="agent")
    models.Execution.objects.filter(pk=held.pk).update(token=row)  # the agent's own execution
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    execution_reject(execution_id=held.pk, reason="not on file", reviewer=carol)

    read = agent.get(f"/api/v1/executions/{held.pk}")
    answered = agent.post(
        f"/api/v1/executions/{held.pk}/answers", {"answers": {"arg:from_account": ALICE_MAIN}}, format="json"
    )

    assert read.json()["verdict"] == "block"
    assert read.json()["reasons"] == ["rejected by user:carol: not on file"]
    assert answered.status_code == 409
    assert answered.json()["error"] == "rejected"
