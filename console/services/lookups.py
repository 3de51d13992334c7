"""Lookups: recording their results and preflighting once a frontier is settled; broker outages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Case, Field, Value, When
from django.db.models.functions import Cast

from console import models, queries, storage
from console.audit import audit_append, audit_batch
from console.errors import NotFound
from console.services import common
from console.services.common import _execution_pk, _has_run, lock_execution
from console.services.preflights import _preflight_and_record


@dataclass(frozen=True, slots=True)
class LookupResult:
    observation_id: int
    value: Any
    error: str | None
    observed_at: datetime


def observations_fill(*, results: Sequence[LookupResult]) -> int:
    """Record lookups' results in one UPDATE; returns how many were recorded. Conditional, so of two
    deliveries of one task only the first counts. Not wrapped in a transaction of its own (its BEGIN and
    COMMIT were two more round trips); inside a caller's transaction it is part of that one."""
    if not results:
        return 0
    if connection.vendor == "postgresql":
        rows = [(r.observation_id, None if r.error else r.value, r.error, r.observed_at) for r in results]
        return len(storage.raw_rows(*queries.fill_read(rows)))
    meta = models.Observation._meta

    def each(name: str, values: Sequence[Any]) -> Case:
        field = cast("Field[Any, Any]", meta.get_field(name))  # a concrete column, not a relation
        pairs = zip(results, values, strict=True)
        # Cast: a branch of NULLs only is untyped for PostgreSQL (text), which a jsonb column refuses.
        whens = [When(pk=r.observation_id, then=Cast(Value(v, output_field=field), field)) for r, v in pairs]
        return Case(*whens, output_field=field)

    return models.Observation.objects.filter(
        pk__in=[r.observation_id for r in results], observed_at__isnull=True
    ).update(
        value=each("value", [None if r.error else r.value for r in results]),
        error=each("error", [r.error for r in results]),
        observed_at=each("observed_at", [r.observed_at for r in results]),
    )


@storage.per_vendor
def _pending_sql() -> str:
    return (
        f"SELECT 1 FROM {storage.table(models.Observation)}"
        " WHERE execution_id = %s AND observed_at IS NULL LIMIT 1"
    )


@transaction.atomic
def lookups_settled(
    *,
    execution_id: Any,
    filled: bool = False,
    results: Sequence[LookupResult] = (),
) -> models.PreflightRecord | None:
    """A lookup task is done: record its last `results`, and preflight again if none of the execution's
    lookups is pending any more and the latest record waits on lookups. `filled`: the task recorded results
    before these (a redelivered copy finds them recorded). Returns the new record, if one was made.

    The results are recorded and the pending lookups read under the execution's row lock, in one
    transaction, by every task of a group. So the looks are one after another, each after the commit of the
    one before, and the task that locks last sees every fill of the group (a fill a task made earlier, on its
    own, committed before its own look): none is skipped under READ COMMITTED, and lookups are only added by
    a preflight under that lock. The locks before the last find a lookup pending and stop; one that comes
    after the last finds the next group pending, or the record no longer `measure`, and changes nothing.
    (A fill under the lock in one task and a look without it in another could each miss the other's, so
    every task takes the lock.)

    Not again if that has happened with these results already (a redelivered copy): a second preflight of an
    `execute` would mint a new grant and void the one the agent holds."""
    try:
        execution = lock_execution(execution_id, contract=False)
    except NotFound:
        return None
    if results:
        filled = observations_fill(results=results) > 0 or filled
    if storage.raw_rows(_pending_sql(), [_execution_pk(execution.pk)]):
        return None  # another task of the group is still to record, or a newer group was dispatched
    if execution.verdict != "measure" and not (filled and _may_wait_on_lookups(execution)):
        return None
    if _has_run(execution):
        return None  # a fresh `execute` would mint a second grant for a call that happened
    return _preflight_and_record(execution, trigger="lookups", none_pending=True)


def _may_wait_on_lookups(execution: models.Execution) -> bool:
    """For a lookup just recorded, whether the latest record (not `measure`) may have been made without it.
    A record that is not `measure` dispatches nothing, so the lookup was dispatched before it and was still
    running when it was made (an `ask`, say, that came while the group ran); at worst another preflight came
    after the fill, and this one repeats it. Decided from what the server stores, not from the wording of the
    engine's findings.

    Not after `execute`: nothing that record needed was running, and a new preflight would void the grant the
    agent holds. Not after a reviewer's rejection, which is final."""
    return execution.verdict != "execute" and execution.final_at is None


@transaction.atomic
@audit_batch()
def lookups_unsent(*, execution_id: Any, keys: Sequence[str], reason: str) -> int:
    """The broker refused the frontier: its lookups stay pending, marked as waiting to be sent, and the
    execution stays `measure` (waiting) until the sweep sends them (`lookups_sent`). A broker outage is
    ours, not the provider's: it never becomes a hold. Returns how many were newly marked."""
    execution = lock_execution(execution_id)
    marked = models.Observation.objects.filter(
        execution=execution, key__in=keys, observed_at__isnull=True, unsent__isnull=True
    ).update(unsent=reason)
    if marked:  # once per outage, not at every sweep that finds the broker still down
        audit_append(
            kind="lookup_dispatch_failed",
            execution_id=execution.pk,
            body={"keys": list(keys), "reason": reason},
        )
    return marked


@transaction.atomic
@audit_batch()
def lookups_sent(*, execution_id: Any, keys: Sequence[str]) -> int:
    """Lookups that waited for the broker were handed to it now; their time limit counts from now."""
    execution = lock_execution(execution_id)
    # Not only the pending ones: in-process tasks (embedded mode) have recorded theirs already.
    sent = models.Observation.objects.filter(execution=execution, key__in=keys, unsent__isnull=False).update(
        unsent=None, dispatched_at=common._now()
    )
    if sent:
        audit_append(kind="lookup_dispatched", execution_id=execution.pk, body={"keys": list(keys)})
    return sent
