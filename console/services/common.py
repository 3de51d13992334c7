"""What every execution service shares: the clock, the execution's row lock, whether it ran, and how a
user is named in records."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.utils import timezone

from console import json_values, models, storage
from console.errors import NotFound
from preflight.canonical import canonical_json


def _now() -> datetime:
    return timezone.now()


def lock_execution(execution_id: Any, *, contract: bool = True) -> models.Execution:
    """The execution, its row locked until commit: the one way an action takes it. `contract=False`: without
    its contract and server joined in (loaded on first use), for a preflight again, which reads the current
    contract itself."""
    # Only the execution row (its contract is shared by every execution of the tool), and NO KEY:
    # PostgreSQL checks foreign keys to it at commit with KEY SHARE, which must not wait on this lock while
    # holding the audit lock (that ordering deadlocks concurrent runs).
    query = models.Execution.objects.select_for_update(of=("self",), no_key=True)
    if contract:
        query = query.select_related("contract__server")
    try:
        return query.get(pk=execution_id)
    except (models.Execution.DoesNotExist, ValidationError, ValueError):
        raise NotFound("unknown_execution", f"no execution {execution_id}") from None


def _has_run(execution: models.Execution) -> bool:
    # Plain SQL, built once: every re-preflight asks, and building this read through the ORM each time cost
    # more CPU than the read itself (bench/lookups.py).
    return bool(storage.raw_rows(_has_run_sql(), [_execution_pk(execution.pk)]))


@storage.per_vendor
def _has_run_sql() -> str:
    return (
        f"SELECT 1 FROM {storage.table(models.Grant)} WHERE execution_id = %s AND used_at IS NOT NULL LIMIT 1"
    )


def _refuse_principal(principal: str) -> PermissionDenied:
    return PermissionDenied(f"this token may not act for principal {principal!r}")


def _execution_pk(execution_id: Any) -> Any:
    pk = models.Execution._meta.pk
    assert pk is not None
    return pk.get_db_prep_value(pk.to_python(execution_id), connection)


def json_safe(value: Any) -> Any:
    """The value if it is canonical JSON that PostgreSQL can store (no NUL, no lone surrogate: a tool's answer
    is a server's text), else a description of it: a record must always be writable, above all the record
    that a call ran."""
    try:
        canonical_json(value)
        json_values.check_json(value)
        return value
    except (TypeError, json_values.JSONProblem):
        return {"unrepresentable": repr(value)[:10_000]}


def identity(user: AbstractBaseUser) -> str:
    """How a console user appears in records and the audit chain (the API's principals use the same form)."""
    return f"user:{user.get_username()}"
