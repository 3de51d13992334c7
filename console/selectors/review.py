"""Review: what an approval of the whole call would settle, and a record's live grant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils import timezone

from console import models
from preflight.record import AWAITING_APPROVAL


def pending_call_approvals(record: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """(approval slots an "approve execution" would settle, why it cannot yet).

    Ready means the count says everything else is done: every value and condition settled, every confirmed
    value approved, nothing unmet, the payload complete and valid. What is left is the approval of the
    whole call, bound to the payload digest."""
    verdict = record.get("verdict")
    if verdict == "execute":
        return [], "every obligation is settled and approved: the call is granted"
    if verdict != "hold":
        return [], f"the verdict is {verdict}: settle the open slots first"
    if record.get("unmet"):
        return [], "a condition is unmet"
    if record.get("payload_valid") is not True:
        return [], "the payload is not complete and valid yet"
    pending = []
    for slot in record.get("slots") or []:
        key = slot["key"]
        if key.startswith("approval:"):
            if slot["status"] == "unknown":
                if slot.get("approval") not in AWAITING_APPROVAL:
                    return [], f"{key}: {slot.get('detail') or 'cannot be approved yet'}"
                pending.append(key)
            continue
        if slot["status"] == "unknown":
            return [], f"{key} is unresolved ({slot.get('route')})"
        if slot.get("approval") in AWAITING_APPROVAL:
            return [], f"{key} awaits approval of its value"
    if not pending:
        return [], "nothing awaits an approval of the whole call"
    return pending, None


def live_grant(stored: models.PreflightRecord) -> models.Grant | None:
    """The unused, unexpired grant of a record, if any: what the agent can still run the call with."""
    return (
        models.Grant.objects.filter(record=stored, used_at__isnull=True, expires_at__gt=timezone.now())
        .order_by("-pk")
        .first()
    )
