"""Data for the review and audit page tests: people with roles, and the demo bank's held transfer."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from console import models
from console.connectors import measures
from console.connectors import tools as connector_tools
from console.demo import review_data
from console.demo.review_data import ALICE_MAIN
from console.services.executions import execution_answer
from console.services.review import execution_reviewer_answer


def person(username: str, *roles: str) -> User:
    # No password: tests sign in with force_login, and hashing one costs about a second per user.
    user = User.objects.create_user(username)
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def use_demo_bank(monkeypatch: pytest.MonkeyPatch) -> None:
    # The connector registries are process-wide: each test registers into its own copy.
    monkeypatch.setattr(connector_tools, "_TOOLS", dict(connector_tools._TOOLS))
    monkeypatch.setattr(measures, "_LOOKUPS", dict(measures._LOOKUPS))
    review_data.register_bank()


def slot_row(html: str, key: str) -> str:
    """The <tr> of one slot in the review table."""
    match = re.search(rf'<tr class="slot([^"]*)"[^>]*data-key="{re.escape(key)}".*?</tr>', html, re.S)
    assert match, f"no row for {key}"
    return match.group(0)


def latest(execution: models.Execution) -> dict[str, Any]:
    execution.refresh_from_db()
    return models.PreflightRecord.objects.get(execution=execution, seq=execution.records).record


def slot(record: dict[str, Any], key: str) -> dict[str, Any]:
    return next(s for s in record["slots"] if s["key"] == key)


def user_answers(execution: models.Execution, answers: dict[str, Any]) -> None:
    """The requesting user's answers, relayed by the agent (the user's channel)."""
    execution_answer(
        execution_id=execution.pk,
        answers=answers,
        answered_by=execution.principal,
        channel="agent",
        actor="agent",
    )


def settle_all_but_the_call(execution: models.Execution, capture: Callable[..., Any]) -> dict[str, Any]:
    """The user answers the memo and the account (whose balance lookup then runs), then confirms the
    recipient and consents to the call as shown: what is left is an approver's approval of the whole call."""
    with capture(execute=True):
        user_answers(execution, {"arg:memo": "rent", "arg:from_account": ALICE_MAIN})
    asked = latest(execution)
    assert [q["slot"] for q in asked["questions"]] == ["confirm:arg:to_account", "consent:call"], asked[
        "reasons"
    ]
    user_answers(execution, {"confirm:arg:to_account": True, "consent:call": True})
    record = latest(execution)
    assert record["verdict"] == "hold", record["reasons"]
    return record


def edited_by(
    execution: models.Execution, user: User, slot_key: str = "arg:memo", value: Any = "rent"
) -> None:
    """An approver's edit of one value: it then awaits another approver's approval (four eyes)."""
    execution_reviewer_answer(execution_id=execution.pk, slot_key=slot_key, value=value, reviewer=user)


def field_error(html: str, key: str) -> str:
    """The refusal shown on one slot's edit field, as the reviewer reads it."""
    match = re.search(r'data-testid="edit-error">(.*?)</p>', slot_row(html, key), re.S)
    assert match, f"no field error on {key}"
    return unescape(match.group(1)).strip()


def text_of(html: str) -> str:
    """The words of some HTML, tags dropped and spaces folded: what a reader sees."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())
