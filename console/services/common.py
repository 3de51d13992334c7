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


# What a preflight again reads and writes of the execution it locked, the rest deferred; in the model's field
# order, as Model.from_db takes them.
_LOCKED_FIELDS = (
    *("id", "principal", "contract_id", "request", "verdict", "timing_at", "records"),
    *("rejected_at", "expired_at"),
)


def lock_execution_read(execution_id: Any) -> storage.Read:
    """`lock_execution(execution_id, contract=False)` as a plain read, for a caller that sends it in one round
    trip with the reads after it (`storage.raw_reads`); `locked_execution` makes its row the execution."""
    return _lock_sql(), [_execution_pk(execution_id)]


@storage.per_vendor
def _lock_sql() -> str:
    # The same lock as lock_execution's (SQLite has none: a write there locks the database).
    lock = " FOR NO KEY UPDATE" if connection.features.has_select_for_update else ""
    columns = ", ".join(connection.ops.quote_name(f) for f in _LOCKED_FIELDS)
    return f"SELECT {columns} FROM {storage.table(models.Execution)} WHERE id = %s{lock}"


def locked_execution(rows: list[tuple[Any, ...]]) -> models.Execution | None:
    """The execution `lock_execution_read` read, or None if there is none."""
    if not rows:
        return None
    pk = models.Execution._meta.pk
    assert pk is not None
    values = dict(zip(_LOCKED_FIELDS, rows[0], strict=True))
    values["id"] = pk.to_python(values["id"])  # SQLite gives it as text
    values["request"] = storage.json_value(values["request"])
    for name in ("timing_at", "rejected_at", "expired_at"):
        values[name] = storage.datetime_value(values[name])
    return models.Execution.from_db(connection.alias, _LOCKED_FIELDS, tuple(values.values()))


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
