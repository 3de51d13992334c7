"""What every agent API view shares: who is calling, the error answers to document, and fetching what a view
names (a 404 in the API's error shape when it does not exist)."""

from __future__ import annotations

from typing import Any, cast

from django.core.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from console.api.permissions import IsAgent
from console.api.record_serializers import ErrorOut
from console.errors import NotFound
from console.models import AgentToken, Execution

# What an agent's views declare; every other API view is an operator action (the settings' default).
AGENT_PERMISSIONS = [IsAuthenticated, IsAgent]
# The OpenAPI description of every operator action.
OPERATOR_ACTION = (
    "An operator action: needs an operator token (manage.py create_operator_token NAME --user USERNAME) whose"
    " user holds the operator role at the time of the call. An agent token gets 403 `forbidden` and nothing"
    " changes."
)

# The error answers every view may give (bad input, no or a refused token, a body past the limit).
ERRORS = (400, 401, 403, 413)


def actor(request: Request) -> str:
    return str(request.user)


def agent_token(request: Request) -> AgentToken | None:
    """The token the caller authenticated with: BearerTokenAuthentication, the only authenticator, sets it
    (the stubs type request.auth as DRF's authtoken Token)."""
    return cast(AgentToken | None, request.auth)


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    return dict.fromkeys((*ERRORS, *statuses), ErrorOut)


def execution_or_404(execution_id: Any, token: AgentToken | None) -> Execution:
    """The execution `token` created. One created by another token, or by none (the console, the demo), is
    answered exactly like an unknown id, so an agent learns nothing about executions that are not its own."""
    try:
        if token is None:
            raise Execution.DoesNotExist
        return Execution.objects.get(pk=execution_id, token_id=token.pk)
    except (Execution.DoesNotExist, ValidationError, ValueError):
        raise NotFound("unknown_execution", f"no execution {execution_id}") from None
