"""Lookups: the held executions whose lost lookup is due to be looked up again."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Exists, F, OuterRef

from console import models
from console.services import common


def infra_retry_due(*, execution_id: Any | None = None, now: datetime | None = None) -> list[Any]:
    """Held executions with a lookup lost to our infrastructure whose backoff has passed since their latest
    preflight (that is, not looked up again yet): the next preflight looks it up again."""
    now = now or common._now()
    newer = models.Observation.objects.filter(
        execution_id=OuterRef("execution_id"), key=OuterRef("key"), pk__gt=OuterRef("pk")
    )
    due = models.Observation.objects.filter(
        retry_after__lte=now, retry_after__gt=F("execution__updated_at"), execution__verdict="hold"
    ).filter(~Exists(newer))
    if execution_id is not None:
        due = due.filter(execution_id=execution_id)
    return list(due.values_list("execution_id", flat=True).distinct())
