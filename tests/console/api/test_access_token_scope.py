"""An agent token sees only the executions it created, and a restricted token acts only for its principals."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from console_helpers import ALICE_SAVINGS, Agent, Downstream, transfer_request
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from console import models
from console.services.executions import execution_create
from console.services.tokens import agent_token_create

pytestmark = pytest.mark.django_db


def agent_for(*principals: str, name: str = "scoped-agent") -> Agent:
    _, token = agent_token_create(name=name, principals=principals)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return Agent(client, token)


def body_of(response: Any, status: int) -> Any:
    assert response.status_code == status, (response.status_code, response.content[:500])
    return response.json()


def not_found(execution_id: str) -> dict[str, str]:
    return {"error": "unknown_execution", "detail": f"no execution {execution_id}"}


def remember_savings(agent: Agent, principal: str = "user:alice") -> dict[str, Any]:
    """An execution whose answer the user asked to remember: one active preset of `principal`."""
    first = agent.post("/api/v1/executions", transfer_request(from_account=None, principal=principal)).json()
    answered = agent.post(
        f"/api/v1/executions/{first['id']}/answers",
        {"answers": {"arg:from_account": ALICE_SAVINGS}, "remember": ["arg:from_account"]},
    )
    assert answered.status_code == 200, answered.json()
    return dict(first)


def test_another_tokens_execution_answers_like_an_unknown_one(
    quick_bank: Downstream, quick_agent: Agent
) -> None:
    mine = body_of(quick_agent.post("/api/v1/executions", transfer_request()), 201)
    other = agent_for(name="other-agent")
    path = f"/api/v1/executions/{mine['id']}"
    unknown = not_found(mine["id"])

    assert body_of(other.get(path), 404) == unknown
    assert body_of(other.post(f"{path}/answers", {"answers": {"arg:memo": "x"}}), 404) == unknown
    assert body_of(other.post(f"{path}/run", {"grant": mine["grant"] or "x"}), 404) == unknown
    assert not models.Answer.objects.exists()
    assert not models.Outcome.objects.exists()
    assert body_of(quick_agent.get(path), 200)["id"] == mine["id"]


def test_an_execution_created_without_a_token_is_unknown_to_every_agent(
    quick_bank: Downstream, quick_agent: Agent
) -> None:
    execution = execution_create(body=transfer_request(), token=None, actor="console")

    response = quick_agent.get(f"/api/v1/executions/{execution.pk}")

    assert body_of(response, 404) == not_found(str(execution.pk))


def test_a_restricted_token_is_forbidden_for_another_principal(quick_bank: Downstream) -> None:
    alice_agent = agent_for("user:alice", "user:carol")

    refused = alice_agent.post("/api/v1/executions", transfer_request(principal="user:bob"))

    assert body_of(refused, 403) == {
        "error": "forbidden",
        "detail": "this token may not act for principal 'user:bob'",
    }
    assert not models.Execution.objects.exists()
    assert not models.AuditEvent.objects.filter(kind="preflight").exists()


def test_a_restricted_token_submits_for_its_own_principals(quick_bank: Downstream) -> None:
    alice_agent = agent_for("user:alice", "user:carol")

    for principal in ("user:alice", "user:carol"):
        record = body_of(alice_agent.post("/api/v1/executions", transfer_request(principal=principal)), 201)
        assert record["principal"] == principal


def test_a_token_created_without_principals_acts_for_any_principal(quick_bank: Downstream) -> None:
    out = StringIO()
    call_command("create_agent_token", "any-bot", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")

    for principal in ("user:alice", "user:bob"):
        response = client.post("/api/v1/executions", transfer_request(principal=principal), format="json")
        assert response.status_code == 201, response.json()
    assert models.AgentToken.objects.get(name="any-bot").principals == []


def test_create_agent_token_restricts_the_token_to_the_principals_given() -> None:
    args = ["shop-bot", "--principal", "user:alice", "--principal", "user:bob"]
    call_command("create_agent_token", *args, stdout=StringIO())

    token = models.AgentToken.objects.get(name="shop-bot")
    assert token.principals == ["user:alice", "user:bob"]
    assert models.AuditEvent.objects.get(kind="agent_token").body["principals"] == ["user:alice", "user:bob"]


def test_create_agent_token_refuses_a_blank_principal() -> None:
    with pytest.raises(CommandError, match="principals"):
        call_command("create_agent_token", "shop-bot", "--principal", " ", stdout=StringIO())
    assert not models.AgentToken.objects.exists()


def test_a_restricted_token_lists_presets_only_of_its_principals(agent: Agent, bank: Downstream) -> None:
    remember_savings(agent)
    alice_agent = agent_for("user:alice")
    bob_agent = agent_for("user:bob")

    listed = body_of(alice_agent.get("/api/v1/presets", {"principal": "user:alice"}), 200)
    refused = bob_agent.get("/api/v1/presets", {"principal": "user:alice"})

    assert [p["value"] for p in listed] == [ALICE_SAVINGS]
    assert body_of(refused, 403) == {
        "error": "forbidden",
        "detail": "this token may not act for principal 'user:alice'",
    }


def test_an_unrestricted_token_lists_presets_only_of_principals_it_submitted_for(
    agent: Agent, bank: Downstream
) -> None:
    remember_savings(agent)
    newcomer = agent_for(name="newcomer")

    before = newcomer.get("/api/v1/presets", {"principal": "user:alice"})
    newcomer.post("/api/v1/executions", transfer_request(principal="user:alice"))
    after = newcomer.get("/api/v1/presets", {"principal": "user:alice"})

    assert body_of(before, 403)["error"] == "forbidden"
    assert [p["value"] for p in body_of(after, 200)] == [ALICE_SAVINGS]
    assert [p["value"] for p in body_of(agent.get("/api/v1/presets", {"principal": "user:alice"}), 200)] == [
        ALICE_SAVINGS
    ]


def test_a_preset_of_a_principal_the_token_may_not_see_cannot_be_revoked(
    agent: Agent, bank: Downstream
) -> None:
    remember_savings(agent)
    preset = models.Preset.objects.get()
    bob_agent = agent_for("user:bob")
    stranger = agent_for(name="stranger")

    for other in (bob_agent, stranger):
        assert body_of(other.delete(f"/api/v1/presets/{preset.pk}"), 404) == {
            "error": "unknown_preset",
            "detail": f"no active preset {preset.pk}",
        }
    preset.refresh_from_db()
    assert preset.revoked_at is None

    revoked = body_of(agent_for("user:alice").delete(f"/api/v1/presets/{preset.pk}"), 200)

    assert revoked["revoked_at"] is not None
