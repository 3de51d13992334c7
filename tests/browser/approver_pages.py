"""What the approver's browser tests share: people with roles, the demo bank's held transfers and a held
repository deletion, the user's answers, and the review page's slot rows and edit form."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect

from console import models
from console.demo.review_data import ALICE_MAIN, span
from console.services.catalog import catalog_import
from console.services.executions import execution_answer, execution_create

# Held on every call: its description states a rule in prose only (a provider gap).
DELETE_REPO: dict[str, Any] = {
    "name": "delete_repo",
    "description": "Deletes a repository. Requires admin rights.",
    "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
    "x-preflight": {"state_change": "the repository is gone", "summary": "delete the repository {arg.repo}"},
}


def person(username: str, role: str, *, password: str | None = None) -> Any:
    # A password only for whoever signs in through the form: hashing one takes about a second.
    user = get_user_model().objects.create_user(username, password=password)
    call_command("grant_role", username, role, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return user


def register_repo() -> None:
    catalog_import(server="repo", tools=[DELETE_REPO], annotations_trusted=False, actor="test")


def held_deletion(repo: str, principal: str = "user:dave") -> models.Execution:
    """A repository deletion the user asked for in one trusted turn, held on the tool's provider gap."""
    text = f"Delete the repository {repo} now."
    body = {
        "server": "repo",
        "tool": "delete_repo",
        "principal": principal,
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {"repo": {"value": repo, "pointer": span(text, repo)}},
        "action_name": span(text, "Delete"),
        "timing": {"mode": "immediate", "pointer": span(text, "now")},
    }
    return execution_create(body=body, token=None, actor="test")


def user_answers(execution: models.Execution, answers: dict[str, Any]) -> None:
    """The requesting user's answers, relayed by the agent (the user's channel)."""
    execution_answer(
        execution_id=execution.pk,
        answers=answers,
        answered_by=execution.principal,
        channel="agent",
        actor="agent",
    )


def settle_all_but_the_call(execution: models.Execution) -> None:
    """The user answers the memo and the account (its balance lookup runs in-process), confirms the
    recipient and consents: what is left is an approver's approval of the whole call."""
    user_answers(execution, {"arg:memo": "rent", "arg:from_account": ALICE_MAIN})
    user_answers(execution, {"confirm:arg:to_account": True, "consent:call": True})
    execution.refresh_from_db()
    assert execution.verdict == "hold", execution.verdict


def slot(page: Any, key: str) -> Any:
    return page.locator(f"tr[data-key='{key}']")


def edit(page: Any, key: str, value: str, *, shown: str | None = None) -> None:
    """Save `value` as the approver's answer for `key`, and wait until the row shows it (as `shown`)."""
    row = slot(page, key)
    row.locator("summary").click()
    row.locator("input[name=value]").fill(value)
    row.get_by_role("button", name="Save as my answer").click()
    # The row is swapped in once the execution was preflighted again; wait for it before the next action.
    expect(slot(page, key).locator(".v")).to_have_text(value if shown is None else shown)
