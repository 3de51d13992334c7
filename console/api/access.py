"""Fetching what a view names, as a 404 in the API's error shape when it does not exist."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from console.errors import NotFound
from console.models import Execution


def execution_or_404(execution_id: Any) -> Execution:
    try:
        return Execution.objects.get(pk=execution_id)
    except (Execution.DoesNotExist, ValidationError, ValueError):
        raise NotFound("unknown_execution", f"no execution {execution_id}") from None
