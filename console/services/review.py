"""What a reviewer does: approve a value or the whole call, answer (edit) a value, reject; and expiry.

The reviewer's identity is always the signed-in user passed in by the view, never a form field."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from console import models, storage
from console.audit import audit_append, audit_batch
from console.errors import BadInput, Conflict
from console.selectors.review import live_grant, pending_call_approvals
from console.services.common import _has_run, identity, lock_execution
from console.services.executions import execution_answer
from console.services.gate import grant_issue
from console.services.preflights import _preflight_and_record, _store_record
from preflight import Record
from preflight.approvals import value_digest
from preflight.confirmations import is_user_yes_key
from preflight.record import Finding, SlotState, Unmet


@transaction.atomic
@audit_batch()
def approval_create(
    *, execution_id: Any, slot_key: str, value_digest_seen: str, approver: User
) -> models.Approval:
    """A person's yes to the value of one slot as they saw it (by digest). Approvers cannot approve their own
    request, and an approval of a value that has since changed is refused rather than moved to the new one."""
    who = identity(approver)
    execution = lock_execution(execution_id)
    if execution.principal == who:
        raise Conflict("own_request", "an approver cannot approve an execution they requested")
    if _has_run(execution):
        raise Conflict("already_ran", "this execution already ran")
    latest = storage.latest_record(execution)
    if is_user_yes_key(slot_key):
        raise Conflict("not_approvable", f"{slot_key}: the requesting user's to answer, not an approver's")
    editor = storage.editor_of(latest.record, slot_key)
    if editor == who:
        raise Conflict("four_eyes", f"{slot_key}: you edited this value; another approver has to approve it")
    approvable, value = storage.approval_value(latest.record, slot_key)
    if not approvable:
        raise Conflict("not_approvable", f"{slot_key}: nothing awaits approval in the latest record")
    current = value_digest(value)
    if current != value_digest_seen:
        raise Conflict("stale_value", f"{slot_key}: the value changed since it was shown; review it again")
    approval = models.Approval.objects.create(
        execution=execution, slot_key=slot_key, value_digest=current, approver=approver
    )
    audit_append(
        kind="approval",
        execution_id=execution.pk,
        body={
            "slot": slot_key,
            "value_digest": current,
            "approver": who,
            "record_seq": latest.seq,
        },
    )
    _preflight_and_record(execution, trigger="approval")
    return approval


REJECTED_SLOT = "review:rejected"
EXPIRED_SLOT = "review:expired"


def execution_reviewer_answer(
    *, execution_id: Any, slot_key: str, value: Any, reviewer: User
) -> models.PreflightRecord:
    """A reviewer's value for one slot, recorded as their answer (channel "reviewer", their identity) and
    preflighted again in place. The slot's approval, any approval of the whole call and any grant no longer
    match the new values, so the new record voids them."""
    who = identity(reviewer)
    return execution_answer(
        execution_id=execution_id, answers={slot_key: value}, answered_by=who, channel="reviewer", actor=who
    )


def execution_approve(
    *, execution_id: Any, payload_digest_seen: str, approver: User
) -> models.PreflightRecord:
    """Approve the whole call as shown (by payload digest): settles the `approval:` slots, after which the
    count says `execute` and the grant is issued with that record. On a record that already says `execute`
    and whose grant expired unused, issues a fresh grant for it. A hold past its deadline expires first (in
    its own transaction, so the expiry stays recorded) and is refused."""
    execution_expire(execution_id=execution_id)
    with transaction.atomic():
        execution = lock_execution(execution_id)
        if execution.final_at is not None:
            raise execution.final_conflict()
        if execution.principal == identity(approver):
            raise Conflict("own_request", "an approver cannot approve an execution they requested")
        if _has_run(execution):
            raise Conflict("already_ran", "this execution already ran")
        latest = storage.latest_record(execution)
        if latest.payload_digest != payload_digest_seen:
            raise Conflict("stale_value", "the payload changed since it was shown; review it again")
        if latest.verdict == "execute":
            if live_grant(latest) is None and grant_issue(execution_id=execution.pk) is None:
                # Its observations had gone stale: it was preflighted again instead (its lookups run again).
                execution.refresh_from_db(fields=["records"])
                return storage.latest_record(execution)
            return latest
        pending, why_not = pending_call_approvals(latest.record)
        if why_not is not None:
            raise Conflict("not_ready", why_not)
        for key in pending:
            # Approval slots bind to the payload digest: approval_create checks it against the latest record.
            approval_create(
                execution_id=execution.pk,
                slot_key=key,
                value_digest_seen=value_digest(payload_digest_seen),
                approver=approver,
            )
        execution.refresh_from_db(fields=["records"])
        return storage.latest_record(execution)


@transaction.atomic
def execution_reject(*, execution_id: Any, reason: str, reviewer: User) -> models.Rejection:
    """A reviewer's no, with a reason: recorded as a `block` verdict (which supersedes any grant) and final —
    no later answer, lookup or approval gives the execution another verdict."""
    reason = reason.strip()
    if not reason:
        raise BadInput("invalid", "reason: say why the execution is rejected")
    execution = lock_execution(execution_id)
    if execution.rejected_at is not None:
        raise Conflict("already_rejected", "this execution was already rejected")
    if execution.expired_at is not None:
        raise execution.final_conflict()
    if _has_run(execution):
        raise Conflict("already_ran", "this execution already ran")
    who = identity(reviewer)
    now = timezone.now()
    latest = storage.latest_record(execution)
    record = rejection_record(latest.record, reviewer=who, reason=reason, at=now.isoformat())
    stored = _store_record(
        execution, record, execution.contract, trigger="reject", audit={"reviewer": who, "reason": reason}
    )
    execution.rejected_at = now
    execution.save(update_fields=["rejected_at", "updated_at"])
    rejection = models.Rejection.objects.create(
        execution=execution, reviewer=reviewer, reason=reason, record=stored
    )
    audit_append(
        kind="rejection",
        execution_id=execution.pk,
        body={
            "reviewer": who,
            "reason": reason,
            "record_seq": stored.seq,
            "record_digest": stored.record_digest,
        },
    )
    return rejection


@transaction.atomic
def execution_expire(*, execution_id: Any, now: datetime | None = None) -> bool:
    """Expire a hold whose deadline passed with no decision: recorded as a `block` naming the deadline, as
    final as a rejection (no later answer, lookup or approval changes it). False when it is not due."""
    now = now or timezone.now()
    execution = lock_execution(execution_id)
    if (
        execution.expires_at is None
        or execution.expires_at > now
        or execution.final_at is not None
        or execution.verdict not in models.HELD_VERDICTS
        or _has_run(execution)
    ):
        return False
    when = f"{execution.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    reason = f"no decision was made before its deadline ({when})"
    latest = storage.latest_record(execution)
    record = final_record(
        latest.record,
        slot_key=EXPIRED_SLOT,
        label="the review deadline",
        source="deadline",
        by="preflight",
        reason=reason,
        detail=f"expired: {reason}",
        summary=f"expired: {reason}",
        at=now.isoformat(),
    )
    stored = _store_record(execution, record, execution.contract, trigger="expire")
    execution.expired_at = now
    execution.save(update_fields=["expired_at", "updated_at"])
    audit_append(
        kind="expiry",
        execution_id=execution.pk,
        body={
            "deadline": execution.expires_at.isoformat(),
            "record_seq": stored.seq,
            "record_digest": stored.record_digest,
        },
    )
    return True


def holds_expire(now: datetime | None = None) -> int:
    """The sweep's part: expire the held executions whose deadline has passed, each under its own lock."""
    now = now or timezone.now()
    due = models.Execution.objects.filter(
        expires_at__lte=now,
        expired_at__isnull=True,
        rejected_at__isnull=True,
        verdict__in=models.HELD_VERDICTS,
    ).values_list("pk", flat=True)
    return sum(execution_expire(execution_id=pk, now=now) for pk in list(due[:500]))


def rejection_record(latest: Mapping[str, Any], *, reviewer: str, reason: str, at: str) -> Record:
    """The latest record as it stood, plus the reviewer's decision as a condition that blocks."""
    return final_record(
        latest,
        slot_key=REJECTED_SLOT,
        label="a reviewer's decision",
        source="reviewer",
        by=reviewer,
        reason=reason,
        detail=f"rejected: {reason}",
        summary=f"rejected by {reviewer}: {reason}",
        at=at,
    )


def final_record(
    latest: Mapping[str, Any],
    *,
    slot_key: str,
    label: str,
    source: str,
    by: str,
    reason: str,
    detail: str,
    summary: str,
    at: str,
) -> Record:
    """The latest record as it stood, plus a final decision (a rejection, an expiry) as a condition that
    blocks: what the agent reads back is a `block` naming it."""
    decision = SlotState(
        key=slot_key,
        kind="condition",
        defined_by="policy",
        label=label,
        status="known",
        value=False,
        source=source,
        pointer={"by": by},
        findings=(Finding(source, "found", {"by": by}, reason),),
        met=False,
        detail=detail,
    )
    base = Record.from_json(latest)
    return attrs.evolve(
        base,
        verdict="block",
        slots=(*base.slots, decision),
        questions=(),
        measures=(),
        unmet=(*base.unmet, Unmet(slot_key, "block", reason)),
        reasons=(summary,),
        evaluated_at=at,
        fresh_until=None,
    )
