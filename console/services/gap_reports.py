"""Provider gap reports: filing one from recorded gaps, and moving its status."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction
from django.utils import timezone

from console import models
from console.audit import audit_append
from console.errors import BadInput, Conflict, NotFound
from console.selectors.gap_reports import REPORTABLE_CLASSES, default_title, gap_evidence
from console.services.common import identity


@transaction.atomic
def gap_report_create(
    *,
    cls: str,
    server: str,
    tool: str,
    slot: str,
    contract_digest: str,
    detail: str,
    title: str,
    notes: str,
    user: User,
) -> models.GapReport:
    """File a report from a recorded gap. The evidence (counts, ids) is recomputed here from the gap rows,
    never taken from the form: the report says what the record says."""
    if cls not in REPORTABLE_CLASSES:
        raise BadInput("invalid", f"cls: only {', '.join(REPORTABLE_CLASSES)} is reported to a provider")
    evidence = gap_evidence(cls=cls, server=server, tool=tool, slot=slot, contract_digest=contract_digest)
    title = (title or "").strip() or default_title(evidence)
    if len(title) > 300:
        raise BadInput("invalid", "title: at most 300 characters")
    detail = (detail or "").strip() or (evidence.details[0] if evidence.details else slot)
    now = timezone.now()
    who = identity(user)
    report = models.GapReport.objects.create(
        cls=cls,
        server=server,
        tool=tool,
        contract_digest=evidence.contract_digest,
        slot=slot,
        detail=detail,
        title=title,
        notes=(notes or "").strip(),
        evidence=evidence.to_json(),
        status="open",
        history=[{"status": "open", "at": now.isoformat(), "by": who, "note": "filed"}],
        created_by=user,
    )
    audit_append(
        kind="gap_report",
        execution_id=None,
        body={
            "action": "create",
            "report": report.pk,
            "class": cls,
            "server": server,
            "tool": tool,
            "slot": slot,
            "contract_digest": evidence.contract_digest,
            "records": evidence.records,
            "executions": evidence.executions,
            "actor": who,
        },
    )
    return report


@transaction.atomic
def gap_report_set_status(
    *, report_id: Any, status: str, user: AbstractBaseUser, note: str = ""
) -> models.GapReport:
    if status not in models.GapReport.STATUSES:
        raise BadInput("invalid", f"status: one of {', '.join(models.GapReport.STATUSES)}")
    try:
        report = models.GapReport.objects.select_for_update().get(pk=report_id)
    except (models.GapReport.DoesNotExist, ValueError, TypeError):
        raise NotFound("unknown_report", f"no gap report {report_id}") from None
    if report.status == status:
        raise Conflict("unchanged", f"the report is already {status}")
    who = identity(user)
    previous = report.status
    report.status = status
    report.history = [
        *report.history,
        {"status": status, "at": timezone.now().isoformat(), "by": who, "note": (note or "").strip()},
    ]
    report.save(update_fields=["status", "history", "updated_at"])
    audit_append(
        kind="gap_report",
        execution_id=None,
        body={"action": "status", "report": report.pk, "from": previous, "to": status, "actor": who},
    )
    return report
