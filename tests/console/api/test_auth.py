"""A token counts only in the Authorization header, only while it is active, and only for its own work."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import Agent, Downstream, make_agent, make_operator, transfer_request
from rest_framework.test import APIClient

from console import models

pytestmark = pytest.mark.django_db

IMPORT = {"server": "evil", "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}


def state() -> list[Any]:
    return [
        models.Server.objects.count(),
        models.ToolContract.objects.count(),
        models.Execution.objects.count(),
        models.AuditEvent.objects.count(),
    ]


@pytest.mark.parametrize("where", ["query", "cookie", "body", "other header", "lower-case scheme twice"])
@pytest.mark.parametrize("holder", ["agent", "operator"])
def test_a_token_anywhere_but_the_authorization_header_authenticates_nothing(
    quick_bank: Downstream, where: str, holder: str
) -> None:
    token = (make_agent() if holder == "agent" else make_operator()).token
    client = APIClient()
    path, body = (
        ("/api/v1/executions", transfer_request())
        if holder == "agent"
        else ("/api/v1/catalog/import", IMPORT)
    )
    before = state()
    if where == "query":
        response = client.post(f"{path}?token={token}&access_token={token}", body, format="json")
    elif where == "cookie":
        client.cookies["token"] = token
        client.cookies["sessionid"] = token
        response = client.post(path, body, format="json")
    elif where == "body":
        response = client.post(
            path, {**body, "token": token, "authorization": f"Bearer {token}"}, format="json"
        )
    elif where == "other header":
        response = client.post(
            path, body, format="json", HTTP_X_API_KEY=token, HTTP_PROXY_AUTHORIZATION=token
        )
    else:
        response = client.post(path, body, format="json", HTTP_AUTHORIZATION=f"bearer bearer {token}")

    assert response.status_code == 401, response.content
    assert state() == before
    assert quick_bank.calls == []


def test_another_agents_grant_cannot_run_its_execution(bank: Downstream, agent: Agent) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "execute", record
    thief = make_agent()

    response = thief.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]})

    assert response.status_code == 404
    assert bank.calls == []
    assert not models.Outcome.objects.filter(status="executed").exists()


def test_an_operator_token_cannot_run_a_grant_it_holds(bank: Downstream, agent: Agent) -> None:
    record = agent.post("/api/v1/executions", transfer_request()).json()
    operator = make_operator()

    response = operator.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]})

    assert response.status_code == 403
    assert bank.calls == []


def test_a_token_revoked_between_two_calls_is_refused_on_the_second(bank: Downstream, agent: Agent) -> None:
    from django.utils import timezone

    record = agent.post("/api/v1/executions", transfer_request()).json()
    models.AgentToken.objects.update(revoked_at=timezone.now())

    response = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]})

    assert response.status_code == 401
    assert bank.calls == []
