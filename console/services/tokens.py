"""API tokens: agent tokens and operator tokens (only their SHA-256 is stored)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

from django.db import transaction

from console import models
from console.audit import audit_append
from console.errors import BadInput, NotFound


@transaction.atomic
def agent_token_create(*, name: str, principals: Sequence[str] = ()) -> tuple[models.AgentToken, str]:
    """A new agent token; only its SHA-256 is stored. `principals`: the only principals it may act for
    (none given: any principal). Either way it sees only the executions it created itself."""
    if not name:
        raise BadInput("invalid", "name: required, a non-empty string")
    wanted = list(dict.fromkeys(principals))
    bad = [p for p in wanted if not isinstance(p, str) or not p.strip() or p != p.strip()]
    if bad:
        raise BadInput("invalid", f"principals: not a principal: {bad[0]!r}")
    token = "pfa_" + secrets.token_urlsafe(32)
    row = models.AgentToken.objects.create(
        name=name,
        token_sha256=hashlib.sha256(token.encode()).hexdigest(),
        prefix=token[:10],
        principals=wanted,
    )
    audit_append(
        kind="agent_token",
        execution_id=None,
        body={"name": name, "prefix": row.prefix, "principals": wanted},
    )
    return row, token


@transaction.atomic
def operator_token_create(*, name: str, username: str) -> tuple[models.AgentToken, str]:
    """An API token that acts as the operator `username`; printed once, only its SHA-256 stored. It carries
    no role itself: every call checks that the user still holds the operator role (api/permissions.py)."""
    from django.contrib.auth import get_user_model

    from console.api.permissions import operator_username

    if not name:
        raise BadInput("invalid", "name: required, a non-empty string")
    user_model = get_user_model()
    try:
        user = user_model.objects.get_by_natural_key(username)
    except user_model.DoesNotExist:
        raise NotFound("unknown_user", f"no user {username!r}") from None
    if operator_username(user.pk) is None:
        raise BadInput(
            "not_an_operator",
            f"{username} does not hold the operator role: manage.py grant_role {username} operator",
        )
    token = "pfo_" + secrets.token_urlsafe(32)
    row = models.AgentToken.objects.create(
        name=name, token_sha256=hashlib.sha256(token.encode()).hexdigest(), prefix=token[:10], user=user
    )
    audit_append(
        kind="operator_token", execution_id=None, body={"name": name, "prefix": row.prefix, "user": username}
    )
    return row, token
