"""Fetching what a view names, as a 404 in the API's error shape when it does not exist."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from console.errors import NotFound
from console.models import AgentToken, Execution


def execution_or_404(execution_id: Any, token: AgentToken | None) -> Execution:
    """The execution `token` created. One created by another token, or by none (the console, the demo), is
    answered exactly like an unknown id, so an agent learns nothing about executions that are not its own."""
    try:
        if token is None:
            raise Execution.DoesNotExist
        return Execution.objects.get(pk=execution_id, token_id=token.pk)
    except (Execution.DoesNotExist, ValidationError, ValueError):
        raise NotFound("unknown_execution", f"no execution {execution_id}") from None
