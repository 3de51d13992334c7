"""The requester's answer page (where the gateway sends questions an MCP form cannot carry)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from console import models
from console.services.catalog import catalog_import
from console.services.executions import execution_create

TOOL = {
    "name": "apply_edits",
    "description": "Apply edits to a document.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                },
            }
        },
        "required": ["edits"],
    },
    "x-preflight": {"state_change": "the document has the edits applied"},
}


@pytest.fixture
def execution(db: None) -> models.Execution:
    catalog_import(server="docs", tools=[TOOL], annotations_trusted=False, actor="user:operator")
    text = "apply my edits now"
    return execution_create(
        body={
            "server": "docs",
            "tool": "apply_edits",
            "principal": "user:alice",
            "conversation": [{"role": "user", "content": text, "trusted": True}],
            "candidates": {},
            "action_name": {"turn": 0, "start": 0, "end": 5},
            "timing": {"mode": "immediate", "pointer": {"turn": 0, "start": 15, "end": 18}},
        },
        token=None,
        actor="test",
    )


def browser_for(name: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user(name, password="x"))
    return client


def page(execution: models.Execution) -> str:
    return f"/executions/{execution.pk}/answers/"


def test_the_requester_sees_what_their_execution_still_needs(execution: models.Execution) -> None:
    response = browser_for("alice").get(page(execution))
    assert response.status_code == 200
    assert 'data-slot="arg:edits"' in response.content.decode()


def test_the_requesters_answer_is_recorded_as_theirs_and_preflighted_again(
    execution: models.Execution,
) -> None:
    edits = [{"old": "a", "new": "b"}]
    response = browser_for("alice").post(
        page(execution), {"slot": "arg:edits", "value": '[{"old": "a", "new": "b"}]'}
    )
    assert response.status_code == 302
    answer = models.Answer.objects.get(execution=execution)
    assert (answer.slot_key, answer.value, answer.answered_by) == ("arg:edits", edits, "user:alice")
    execution.refresh_from_db()
    assert execution.records == 2


def test_someone_else_cannot_answer_and_nothing_is_recorded(execution: models.Execution) -> None:
    response = browser_for("mallory").post(page(execution), {"slot": "arg:edits", "value": "[]"})
    assert response.status_code == 403
    assert not models.Answer.objects.exists()


def test_an_answer_that_does_not_read_is_refused_with_the_reason(execution: models.Execution) -> None:
    browser: Any = browser_for("alice")
    response = browser.post(page(execution), {"slot": "arg:edits", "value": "[{not json"}, follow=True)
    assert "arg:edits" in response.content.decode()
    assert not models.Answer.objects.exists()


def test_signing_in_comes_first(execution: models.Execution) -> None:
    response = Client().get(page(execution))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
