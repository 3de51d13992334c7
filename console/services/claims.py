"""Claims on held executions: an approver says "I am on it", so two approvers do not review the same
call while others wait. One approver at a time; everyone sees who holds it; its holder releases it. A
claim is not a decision: it grants nothing and refuses nothing."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from console import models
from console.errors import Conflict
from console.services.common import identity, lock_execution
from console.web.review_rows import when_text


@transaction.atomic
def claim_take(*, execution_id: Any, approver: User) -> models.ReviewClaim:
    """Claim a held execution for `approver`; taking one's own claim again changes nothing. Refused (409)
    when another approver holds it, when it no longer waits, and for the call's own requester, who may not
    approve it either."""
    execution = lock_execution(execution_id)  # serializes two approvers claiming at once
    if execution.final_at is not None or execution.verdict not in models.HELD_VERDICTS:
        raise Conflict("decided", "this execution no longer waits for a decision")
    if execution.principal == identity(approver):
        raise Conflict("own_execution", "you requested this execution; another approver must decide it")
    claim = models.ReviewClaim.objects.select_related("approver").filter(execution=execution).first()
    if claim is None:
        return models.ReviewClaim.objects.create(execution=execution, approver=approver)
    if claim.approver_id != approver.pk:
        since = when_text(claim.created_at)
        raise Conflict("claimed", f"{claim.approver.get_username()} has claimed this execution since {since}")
    return claim


@transaction.atomic
def claim_release(*, execution_id: Any, approver: User) -> None:
    """Release `approver`'s claim. Releasing what nobody holds changes nothing; another approver's claim is
    theirs to release (409)."""
    execution = lock_execution(execution_id)
    claim = models.ReviewClaim.objects.select_related("approver").filter(execution=execution).first()
    if claim is None:
        return
    if claim.approver_id != approver.pk:
        raise Conflict(
            "claimed", f"{claim.approver.get_username()} holds this claim; only they can release it"
        )
    claim.delete()
