"""Agent authentication: `Authorization: Bearer <token>`, checked against the stored SHA-256 of the token."""

from __future__ import annotations

import hashlib
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from console.models import AgentToken


class Agent:
    """The authenticated caller of the agent API: a token, not a console user."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, token: AgentToken) -> None:
        self.token = token
        # An operator token's actions are audited as the operator's; whether the user still holds the role
        # is `console.api.permissions.IsOperator`'s question, asked on every call.
        self.username = f"operator-token:{token.name}" if token.is_operator_token else f"agent:{token.name}"

    def __str__(self) -> str:
        return self.username


# What a request needs of its token. Through Manager.raw(), which still gives a model (the JSON column
# decoded, the rest deferred) but skips compiling a queryset on every API request.
_TOKEN_FIELDS = ("id", "name", "token_sha256", "prefix", "principals", "user_id")
_ACTIVE_TOKEN_SQL = (
    f"SELECT {', '.join(_TOKEN_FIELDS)} FROM {AgentToken._meta.db_table}"
    " WHERE token_sha256 = %s AND revoked_at IS NULL"
)


def active_token(raw: str) -> AgentToken | None:
    """The active token `raw` is (by its SHA-256), read afresh on every request (one indexed query, never
    cached), so a token revoked a moment ago is refused at once."""
    digest = hashlib.sha256(raw.strip().encode("utf-8", "surrogatepass")).hexdigest()
    # token_sha256 is unique: at most one row.
    return next(iter(AgentToken.objects.raw(_ACTIVE_TOKEN_SQL, (digest,))), None)


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Agent, AgentToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationFailed("expected 'Authorization: Bearer <token>'")
        row = active_token(token)
        if row is None:
            raise AuthenticationFailed("unknown or revoked token")
        return Agent(row), row

    def authenticate_header(self, request: Request) -> str:
        # Present, so DRF answers 401 (not 403) when the token is missing.
        return 'Bearer realm="preflight"'


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = BearerTokenAuthentication
    name = "agentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "python manage.py create_agent_token NAME (agents: executions, answers, runs, presets);"
                " python manage.py create_operator_token NAME --user USERNAME (operators: catalog, measures)"
            ),
        }
