"""Data for the review and audit page tests: people with roles, and the demo bank's held transfer."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from console import connectors, models, review_services, services
from console.demo import review_data
from console.demo.review_data import ALICE_MAIN, BOB
from preflight.approvals import value_digest


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
    monkeypatch.setattr(connectors, "_TOOLS", dict(connectors._TOOLS))
    monkeypatch.setattr(connectors, "_LOOKUPS", dict(connectors._LOOKUPS))
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


def settle_all_but_the_call(
    execution: models.Execution, user: User, capture: Callable[..., Any]
) -> dict[str, Any]:
    """Approve the recipient, answer the memo and the account (whose balance lookup then runs): what is left
    is the approval of the whole call."""
    services.approval_create(
        execution_id=execution.pk,
        slot_key="arg:to_account",
        value_digest_seen=value_digest(BOB),
        approver=user,
    )
    review_services.execution_reviewer_answer(
        execution_id=execution.pk, slot_key="arg:memo", value="rent", reviewer=user
    )
    with capture(execute=True):
        review_services.execution_reviewer_answer(
            execution_id=execution.pk, slot_key="arg:from_account", value=ALICE_MAIN, reviewer=user
        )
    record = latest(execution)
    assert record["verdict"] == "hold", record["reasons"]
    return record
