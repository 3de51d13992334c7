"""The auditor's pages: verdict history across all executions, one record in full, "verify chain", exports.

Read-only: nothing here writes. The verify button runs console.audit.verify_all, the same function as
`manage.py verify_audit`, so the console and the command can never disagree about the chain.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.core.paginator import Paginator
from django.db.models import F, QuerySet
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from console import models
from console.audit import verify_all
from console.storage import record_body_digest
from console.web.access import AUDITOR, role_required
from console.web.csv_cells import csv_cell
from console.web.filters import CatalogFilter, form_problems
from console.web.requests import SignedInRequest, render_partial

VERDICTS = ("execute", "ask", "measure", "hold", "block", "deferred")
PAGE_SIZE = 50
EXPORT_COLUMNS = (
    "created_at",
    "execution_id",
    "seq",
    "trigger",
    "verdict",
    "server",
    "tool",
    "principal",
    "unknown_count",
    "record_digest",
    "payload_digest",
    "checklist_version",
)


class RecordFilter(CatalogFilter):
    verdict = forms.ChoiceField(required=False, choices=[("", "any verdict"), *((v, v) for v in VERDICTS)])
    principal = forms.CharField(required=False, max_length=200)
    date_from = forms.DateField(required=False, label="from", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, label="to", widget=forms.DateInput(attrs={"type": "date"}))
    q = forms.CharField(required=False, max_length=100, label="execution id or digest")

    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field.widget.attrs["aria-label"] = name


def filtered(data: dict[str, Any]) -> QuerySet[models.PreflightRecord]:
    qs = models.PreflightRecord.objects.all()
    if data.get("server"):
        qs = qs.filter(contract__server__name=data["server"])
    if data.get("tool"):
        qs = qs.filter(contract__name=data["tool"])
    if data.get("verdict"):
        qs = qs.filter(verdict=data["verdict"])
    if data.get("principal"):
        qs = qs.filter(execution__principal=data["principal"].strip())
    # Whole days in UTC, the time every record and audit event is kept in.
    if data.get("date_from"):
        qs = qs.filter(created_at__gte=datetime.combine(data["date_from"], time.min, UTC))
    if data.get("date_to"):
        qs = qs.filter(created_at__lt=datetime.combine(data["date_to"] + timedelta(days=1), time.min, UTC))
    q = (data.get("q") or "").strip()
    if q:
        try:
            qs = qs.filter(execution_id=uuid.UUID(q))
        except ValueError:
            digest = q if q.startswith("sha256:") else f"sha256:{q}"
            qs = qs.filter(record_digest__startswith=digest) | qs.filter(payload_digest__startswith=digest)
    return qs


def _rows(
    qs: QuerySet[models.PreflightRecord], *, with_record: bool = False
) -> QuerySet[models.PreflightRecord, dict[str, Any]]:
    # The record JSON only for the JSONL export: a list of thousands must not load thousands of documents.
    extra = ("record",) if with_record else ()
    rows: QuerySet[models.PreflightRecord, dict[str, Any]] = qs.order_by("-created_at", "-pk").values(
        *extra,
        "pk",
        "execution_id",
        "seq",
        "verdict",
        "trigger",
        "created_at",
        "record_digest",
        "payload_digest",
        "checklist_version",
        "unknown_count",
        principal=F("execution__principal"),
        server=F("contract__server__name"),
        tool=F("contract__name"),
    )
    return rows


@role_required(AUDITOR)
@require_GET
def records(request: SignedInRequest) -> HttpResponse:
    form = RecordFilter(request.GET)
    template = "console/audit/records.html"
    if not form.is_valid():
        empty = Paginator(models.PreflightRecord.objects.none(), PAGE_SIZE).get_page(1)
        context = {"form": form, "page": empty, "problems": form_problems(form)}
        return render(request, template, context, status=400)
    page = Paginator(_rows(filtered(form.cleaned_data)), PAGE_SIZE).get_page(form.cleaned_data["page"])
    return render_partial(request, template, {"form": form, "page": page}, "records")


@role_required(AUDITOR)
@require_GET
def record_detail(request: SignedInRequest, record_id: int) -> HttpResponse:
    row = get_object_or_404(models.PreflightRecord.objects.select_related("execution"), pk=record_id)
    recomputed = record_body_digest(row.record)
    events = models.AuditEvent.objects.filter(execution_id=row.execution_id).order_by("seq")
    context = {
        "row": row,
        "record_json": json.dumps(row.record, indent=2, ensure_ascii=False, sort_keys=True),
        "recomputed": recomputed,
        "digest_ok": recomputed == row.record_digest and row.record.get("record_digest") == row.record_digest,
        "events": events.values("seq", "kind", "hash", "created_at")[:500],
    }
    return render(request, "console/audit/record.html", context)


@role_required(AUDITOR)
@require_http_methods(["GET", "POST"])
def verify(request: SignedInRequest) -> HttpResponse:
    # POST, not GET: a walk of the whole chain is work someone asked for, not something a crawler or a
    # prefetching browser should start.
    report = verify_all() if request.method == "POST" else None
    context = {"report": report, "checked_at": timezone.now()}
    return render_partial(request, "console/audit/verify.html", context, "result")


class _Echo:
    def write(self, value: str) -> str:
        return value


def _export(
    request: SignedInRequest,
    ext: str,
    content_type: str,
    lines: Callable[[Iterator[dict[str, Any]]], Iterator[str]],
    *,
    with_record: bool = False,
) -> HttpResponse | StreamingHttpResponse:
    """The records the list page's filters select (an export is exactly what the page lists), as `lines`
    writes them; a 400 naming the invalid filters instead."""
    form = RecordFilter(request.GET)
    if not form.is_valid():
        reason = "These filters are not valid, so nothing is exported: " + "; ".join(form_problems(form))
        return HttpResponseBadRequest(reason, content_type="text/plain; charset=utf-8")
    # Streamed in chunks from a server-side cursor: an export of every record never sits in memory.
    rows = _rows(filtered(form.cleaned_data), with_record=with_record).iterator(chunk_size=200)
    response = StreamingHttpResponse(lines(rows), content_type=content_type)
    name = f"preflight-records-{timezone.now():%Y%m%dT%H%M%SZ}.{ext}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@role_required(AUDITOR)
@require_GET
def export_csv(request: SignedInRequest) -> HttpResponse | StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
        yield writer.writerow(EXPORT_COLUMNS)
        for row in rows:
            row["created_at"] = row["created_at"].isoformat()
            yield writer.writerow([csv_cell(row[c]) for c in EXPORT_COLUMNS])

    return _export(request, "csv", "text/csv; charset=utf-8", lines)


@role_required(AUDITOR)
@require_GET
def export_jsonl(request: SignedInRequest) -> HttpResponse | StreamingHttpResponse:
    """One line per record: the columns of the CSV plus the full record, which its digest can be checked
    against (sha256 over the RFC 8785 canonical JSON of the record without `record_digest`)."""

    def lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
        for row in rows:
            out = {c: row[c] for c in EXPORT_COLUMNS}
            out["created_at"] = row["created_at"].isoformat()
            out["execution_id"] = str(row["execution_id"])
            out["record"] = row["record"]
            yield json.dumps(out, ensure_ascii=False, sort_keys=True) + "\n"

    return _export(request, "jsonl", "application/x-ndjson; charset=utf-8", lines, with_record=True)
