"""Who may call what. Agents submit; operators define (DESIGN: trust model).

An agent token may submit executions, answer, read its own executions, run a grant and list/revoke presets of
principals it may act for: views that say so declare `IsAgent`. Everything else is an operator action and
is the default (`IsOperator`), so a view that forgets to declare its audience is closed to agents.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from console.models import AgentToken
from console.web.access import OPERATOR


def _token(request: Request) -> AgentToken | None:
    token = getattr(request, "auth", None)
    return token if isinstance(token, AgentToken) else None


def operator_holds_role(user_id: Any) -> bool:
    """Whether the user an operator token belongs to is active and an operator (or a superuser) right now.
    One query per call, never cached: removing the role or deactivating the user revokes the token at once."""
    users = get_user_model().objects.filter(pk=user_id, is_active=True)
    return users.filter(is_superuser=True).exists() or users.filter(groups__name=OPERATOR).exists()


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
        if not operator_holds_role(token.user_id):
            self.message = "this operator token's user no longer holds the operator role (or is inactive)"
            return False
        return True
