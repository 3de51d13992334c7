"""Who a gateway call is from: an agent token, looked up exactly as the REST API looks it up
(`console.api.auth.active_token`, one fresh query, so a revoked token is refused at once).

Over streamable HTTP every request carries `Authorization: Bearer <token>`; the SDK's bearer middleware asks
`AgentTokenVerifier` (401 for a missing, unknown or revoked token; 403 `insufficient_scope` for an operator
token) and binds each MCP session to the token that opened it. Over stdio the token comes from the
environment (`PREFLIGHT_AGENT_TOKEN`) or `--token-file`, never from the command line (process listings).
Either way `check` runs again at every call, before anything reaches an upstream.
"""

from __future__ import annotations

import anyio.to_thread
import mcp_types as types
from django.db import close_old_connections
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError

from console.api.auth import active_token
from console.models import AgentToken

TOKEN_ENV = "PREFLIGHT_AGENT_TOKEN"
# The scope an agent token carries; an operator token carries the other one and is refused (403).
AGENT_SCOPE = "agent"
OPERATOR_SCOPE = "operator"


class TokenRefused(MCPError):
    """A call (or a start) whose token may not act here. `data` is the REST API's error shape."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(
            code=types.INVALID_REQUEST, message=f"{error}: {detail}", data={"error": error, "detail": detail}
        )
        # Not `error`: MCPError keeps its ErrorData there.
        self.kind = error
        self.detail = detail


def check(raw: str | None, principal: str) -> AgentToken:
    """The agent token `raw`, if it may submit for `principal` now; else `TokenRefused` saying why."""
    if not raw or not raw.strip():
        raise TokenRefused(
            "unauthenticated",
            "no agent token: over HTTP send 'Authorization: Bearer <token>'; over stdio set "
            f"{TOKEN_ENV} or --token-file (manage.py create_agent_token NAME)",
        )
    token = active_token(raw)
    if token is None:
        raise TokenRefused("unauthenticated", "unknown or revoked token")
    if token.is_operator_token:
        raise TokenRefused(
            "forbidden",
            "this gateway is for agent tokens; an operator token configures the gate and submits nothing",
        )
    if not token.may_act_for(principal):
        raise TokenRefused("forbidden", f"this token may not act for principal {principal!r}")
    return token


class AgentTokenVerifier:
    """The SDK's `TokenVerifier` over the agent tokens: every HTTP request is checked before the MCP layer
    sees it. The principal is checked per call (`check`), so a foreign principal gets an MCP error that says
    so rather than a bare 401."""

    async def verify_token(self, token: str) -> AccessToken | None:
        def job() -> AgentToken | None:
            close_old_connections()
            return active_token(token)

        row = await anyio.to_thread.run_sync(job)
        if row is None:
            return None
        return AccessToken(
            token=token,
            client_id=f"agent-token:{row.pk}",
            scopes=[OPERATOR_SCOPE if row.is_operator_token else AGENT_SCOPE],
        )
