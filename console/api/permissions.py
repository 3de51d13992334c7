"""Who may call what. Agents submit; operators define (DESIGN: trust model).

An agent token may submit executions, answer, read its own executions, run a grant and list/revoke presets of
principals it may act for: views that say so declare `IsAgent`. Everything else is an operator action and
is the default (`IsOperator`), so a view that forgets to declare its audience is closed to agents.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from console.models import AgentToken
from console.web.access import OPERATOR


def _token(request: Request) -> AgentToken | None:
    token = getattr(request, "auth", None)
    return token if isinstance(token, AgentToken) else None


def operator_username(user_id: Any) -> str | None:
    """The username of the user an operator token belongs to, if that user is active and an operator (or a
    superuser) right now; otherwise None. One query, never cached: removing the role or deactivating the user
    revokes the token at once."""
    operators = Q(is_superuser=True) | Q(groups__name=OPERATOR)
    users = get_user_model().objects.filter(operators, pk=user_id, is_active=True)
    return next(iter(users.values_list("username", flat=True)[:1]), None)


class IsAgent(BasePermission):
    """An agent's token. An operator token is refused here: a person's credential is not an agent's, and an
    execution submitted with it would be attributed to no agent."""

    message = "this endpoint is for agent tokens; an operator token configures the gate and submits nothing"

    def has_permission(self, request: Request, view: Any) -> bool:
        token = _token(request)
        return token is not None and not token.is_operator_token


class IsOperator(BasePermission):
    """An operator token whose user holds the operator role at the moment of the call."""

    def has_permission(self, request: Request, view: Any) -> bool:
        token = _token(request)
        if token is None:
            return False
        if not token.is_operator_token:
            self.message = (
                "an agent token may not configure the gate: this is an operator action"
                " (an operator token: manage.py create_operator_token NAME --user USERNAME)"
            )
            return False
        username = operator_username(token.user_id)
        if username is None:
            self.message = "this operator token's user no longer holds the operator role (or is inactive)"
            return False
        # The audit chain names the person, which outlives the token (and the user row).
        request.user.username = f"operator:{username} (token {token.name})"
        return True
