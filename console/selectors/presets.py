"""Presets: which a principal has, and which an agent token may see."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from console import models
from console.services.common import _refuse_principal


def token_sees_presets_of(token: models.AgentToken, principal: str) -> bool:
    """Whether an agent token may list and revoke the presets of `principal`.

    A token restricted to principals: only theirs. An unrestricted token (it may submit for anyone): only
    the principals it has already submitted an execution for, so one agent cannot enumerate or revoke what
    the users of other agents consented to have remembered. Fail closed: a principal the token has never
    acted for is refused, even though submitting for them would be allowed."""
    if token.principals:
        return principal in token.principals
    return models.Execution.objects.filter(token=token, principal=principal).exists()


def preset_list(*, principal: str, token: models.AgentToken | None = None) -> list[models.Preset]:
    """The active presets of `principal`. With a token (the agent API): 403 unless `token_sees_presets_of`."""
    if token is not None and not token_sees_presets_of(token, principal):
        if token.principals:
            raise _refuse_principal(principal)
        raise PermissionDenied(f"this token has submitted no execution for principal {principal!r}")
    return list(
        models.Preset.objects.filter(principal=principal, revoked_at__isnull=True).order_by(
            "tool", "slot_key"
        )
    )
