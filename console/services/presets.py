"""Presets: a remembered answer stored (with consent) and revoked."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from console import models
from console.audit import audit_append
from console.errors import NotFound
from console.selectors.presets import token_sees_presets_of
from console.services import common
from preflight.approvals import value_digest


def _preset_put(execution: models.Execution, tool: str, key: str, value: Any, who: str) -> None:
    now = common._now()
    models.Preset.objects.filter(
        principal=execution.principal, tool=tool, slot_key=key, revoked_at__isnull=True
    ).update(revoked_at=now)
    consent = {"who": who, "when": now.isoformat(), "execution": str(execution.pk)}
    preset = models.Preset.objects.create(
        principal=execution.principal, tool=tool, slot_key=key, value=value, consent=consent
    )
    audit_append(
        kind="preset",
        execution_id=execution.pk,
        body={
            "action": "create",
            "preset": preset.pk,
            "principal": execution.principal,
            "tool": tool,
            "slot": key,
            "value_digest": value_digest(value),
            "consent": consent,
        },
    )


@transaction.atomic
def preset_revoke(*, preset_id: Any, actor: str, token: models.AgentToken | None = None) -> models.Preset:
    """Revoke an active preset. With a token (the agent API), a preset of a principal the token may not see
    (`token_sees_presets_of`) is answered like an unknown one, so its existence does not leak."""
    try:
        preset = models.Preset.objects.select_for_update().get(pk=preset_id, revoked_at__isnull=True)
    except (models.Preset.DoesNotExist, ValueError, ValidationError):
        raise NotFound("unknown_preset", f"no active preset {preset_id}") from None
    if token is not None and not token_sees_presets_of(token, preset.principal):
        raise NotFound("unknown_preset", f"no active preset {preset_id}")
    preset.revoked_at = common._now()
    preset.save(update_fields=["revoked_at"])
    audit_append(
        kind="preset",
        execution_id=None,
        body={
            "action": "revoke",
            "preset": preset.pk,
            "principal": preset.principal,
            "tool": preset.tool,
            "slot": preset.slot_key,
            "actor": actor,
        },
    )
    return preset
