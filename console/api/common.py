"""What every agent API view shares: who is calling, and the error answers to document."""

from __future__ import annotations

from typing import cast

from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from console.api.permissions import IsAgent
from console.api.record_serializers import ErrorOut
from console.models import AgentToken

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
