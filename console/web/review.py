"""The approver's review form of one execution (the queue is console/web/queue.py).

Every view is a recipe: check the role, fetch, validate a form, call one service, then render or redirect.
Without JavaScript each form is a full POST answered by a redirect back to the page; with htmx the same
view answers with the `#review` partial, which the page swaps in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, TypedDict
from urllib.parse import urlencode
from uuid import UUID

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reswap, retarget

from console import models
from console.errors import InvalidAnswer, ServiceError
from console.selectors.review import pending_call_approvals
from console.services.common import identity
from console.services.review import (
    approval_create,
    execution_approve,
    execution_expire,
    execution_reject,
    execution_reviewer_answer,
)
from console.web import review_queue
from console.web.access import APPROVER, AUDITOR, has_role, role_required
from console.web.filters import form_problems
from console.web.requests import SignedInRequest, render_partial
from console.web.review_rows import (
    Context,
    approved_values,
    arg_schema,
    conversation,
    parse_edit,
    slot_rows,
    values_before_edits,
)
from preflight.record import AWAITING_APPROVAL

REVIEW = "console/review/review.html"
ACTION = "Approving, editing or rejecting an execution"


class ApproveSlotForm(forms.Form):
    slot = forms.CharField(max_length=500)
    value_digest = forms.CharField(max_length=80)


class AnswerForm(forms.Form):
    slot = forms.CharField(max_length=500)
    value = forms.CharField(max_length=10_000, strip=False)


class ApproveExecutionForm(forms.Form):
    payload_digest = forms.CharField(max_length=80)


class RejectForm(forms.Form):
    reason = forms.CharField(max_length=2000, widget=forms.Textarea)
    # Set by the confirm step (a page without JS, a dialog with it): a rejection is final.
    confirmed = forms.BooleanField(required=False)


# ---- review form --------------------------------------------------------------------------------------


def _execution(execution_id: UUID) -> models.Execution:
    executions = models.Execution.objects.select_related("contract__server", "rejection__reviewer")
    return get_object_or_404(executions, pk=execution_id)


def _review_context(request: SignedInRequest, execution: models.Execution) -> dict[str, Any]:
    latest = models.PreflightRecord.objects.get(execution=execution, seq=execution.records)
    record = latest.record
    approver = has_role(request.user, APPROVER)
    own = execution.principal == identity(request.user)
    # A missing reverse one-to-one raises RelatedObjectDoesNotExist, an AttributeError.
    rejection: models.Rejection | None = getattr(execution, "rejection", None)
    outcome = (
        models.Outcome.objects.filter(
            execution=execution, status__in=("executed", "failed", "outcome_unknown")
        )
        .order_by("-pk")
        .first()
    )
    open_ = rejection is None and execution.expired_at is None and outcome is None
    answers = {
        f"answer-{pk}": (channel, by)
        for pk, channel, by in models.Answer.objects.filter(execution=execution).values_list(
            "pk", "channel", "answered_by"
        )
    }
    void = [s["key"] for s in record.get("slots") or [] if s.get("approval") == "void"]
    approved = approved_values(_older_records(execution, latest.seq), void) if void else {}
    ctx = Context(
        now=timezone.now(),
        answers=answers,
        approved=approved,
        definition=execution.contract.definition if execution.contract else None,
        can_edit=approver and open_,
        can_approve=approver and open_ and not own,
        final=not open_,
    )
    edited = [s["key"] for s in record.get("slots") or [] if _by_reviewer(s, answers)]
    if edited:
        ctx.before = values_before_edits(_older_records(execution, latest.seq), edited, ctx)
    rows = slot_rows(record, ctx)
    pending, why_not = pending_call_approvals(record)
    grant = models.Grant.objects.filter(record=latest).order_by("-pk").first()
    history = models.PreflightRecord.objects.filter(execution=execution).order_by("-seq")
    payload = record.get("payload")
    return {
        "execution": execution,
        "latest": latest,
        "record": record,
        "rows": [row.as_dict() for row in rows],
        "urls": {  # reversed once, not once per slot row
            name.replace("-", "_"): reverse(f"review-{name}", args=[execution.pk])
            for name in ("approve-slot", "answer", "approve-execution", "reject")
        },
        "turns": conversation(execution.request, rows),
        "counts": {
            "unresolved": sum(1 for r in rows if r.status == "unknown"),
            "unverified": sum(1 for r in rows if r.candidate is not None),
            "awaiting": sum(1 for r in rows if r.approval in AWAITING_APPROVAL),
            "slots": len(rows),
        },
        "payload_json": json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True)
        if payload
        else None,
        "pending_call": pending,
        "why_not": why_not,
        "grant": grant,
        "grant_live": grant is not None and grant.used_at is None and grant.expires_at > timezone.now(),
        "history": history.values(
            "seq", "verdict", "trigger", "record_digest", "created_at", "unknown_count"
        ),
        "observations": _observations(execution),
        "rejection": rejection,
        "outcome": outcome,
        "open": open_,
        "own": own,
        "approver": approver,
        "provider_gaps": _provider_gaps(record) if open_ and why_not else [],
        "version": _version(execution),
        "next_held": review_queue.next_held(execution),
    }


def _by_reviewer(s: Mapping[str, Any], answers: Mapping[str, tuple[str, str]]) -> bool:
    pointer = s.get("pointer") or {}
    return (
        s.get("source") == "user_answer" and answers.get(str(pointer.get("answer")), ("",))[0] == "reviewer"
    )


def _provider_gaps(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The provider gaps a hold rests on, each with its report when one was filed, else the query an operator
    files one with: what can be done about a hold no answer or approval settles."""
    gaps = [g for g in record.get("gaps") or [] if g.get("class") == "provider_gap"]
    if not gaps:
        return []
    server, tool = record.get("server") or "", record.get("tool") or ""
    reports = {
        r.slot: r
        for r in models.GapReport.objects.filter(
            cls="provider_gap", server=server, tool=tool, slot__in=[g["slot"] for g in gaps]
        ).order_by("pk")
    }
    query = {"cls": "provider_gap", "server": server, "tool": tool}
    digest = record.get("contract_digest") or ""
    return [
        {
            "slot": g["slot"],
            "detail": g.get("detail") or "",
            "report": reports.get(g["slot"]),
            "query": urlencode({**query, "slot": g["slot"], "contract_digest": digest}),
        }
        for g in gaps
    ]


def _version(execution: models.Execution) -> str:
    """What the live poll compares: any record, decision or run moves it (each writes the execution row)."""
    return f"{execution.records}-{execution.updated_at.timestamp():.6f}"


def _older_records(execution: models.Execution, seq: int, chunk: int = 10) -> Iterator[dict[str, Any]]:
    """Records before `seq`, newest first, a few at a time: the approval a diff needs is usually recent."""
    while seq > 1:
        batch = list(
            models.PreflightRecord.objects.filter(execution=execution, seq__lt=seq, seq__gte=seq - chunk)
            .order_by("-seq")
            .values_list("record", flat=True)
        )
        yield from batch
        seq -= chunk


class ObservationRow(TypedDict):
    """A lookup of the execution as the progress list shows it: running for `running_s`, or its answer."""

    measure: str
    lookup: str
    args: Mapping[str, object]  # JSON
    value: object  # JSON; None until it returns
    error: str | None
    observed_at: datetime | None
    dispatched_at: datetime
    running_s: float | None
    value_text: str


def _observations(execution: models.Execution) -> list[ObservationRow]:
    now = timezone.now()
    rows = (
        models.Observation.objects.filter(execution=execution)
        .order_by("-pk")
        .values("measure", "lookup", "args", "value", "error", "observed_at", "dispatched_at")[:20]
    )
    return [
        {
            **row,
            "running_s": (now - row["dispatched_at"]).total_seconds() if row["observed_at"] is None else None,
            "value_text": json.dumps(row["value"], ensure_ascii=False),
        }
        for row in rows
    ]


@role_required(APPROVER, AUDITOR)
@require_GET
def review(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    execution = _execution(execution_id)
    if execution.deadline_passed and execution_expire(execution_id=execution.pk):
        execution = _execution(execution_id)
    return render_partial(request, REVIEW, _review_context(request, execution), "review")


@role_required(APPROVER, AUDITOR)
@require_GET
def progress(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    """Polled while lookups run. Once the execution has a newer record, answers with the whole
    review region instead; its fresh #progress polls again only if the new verdict is still `measure`."""
    execution = _execution(execution_id)
    if not request.htmx:
        return redirect("review-execution", execution.pk)
    if request.GET.get("seq") != str(execution.records):
        response = render(request, REVIEW + "#review", _review_context(request, execution))
        return retarget(reswap(response, "outerHTML"), "#review")
    context = {"execution": execution, "observations": _observations(execution)}
    return render(request, REVIEW + "#progress", context)


@role_required(APPROVER, AUDITOR)
@require_GET
def live(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    """Polled by the open page: 204 (nothing to swap) while the version it shows is current, the
    whole review region once another approver acted, a lookup returned or the verdict moved."""
    execution = _execution(execution_id)
    if not request.htmx:
        return redirect("review-execution", execution.pk)
    if execution.deadline_passed and execution_expire(execution_id=execution.pk):
        execution = _execution(execution_id)
    if request.GET.get("v") == _version(execution):
        return HttpResponse(status=204)
    response = render(request, REVIEW + "#review", _review_context(request, execution))
    return retarget(reswap(response, "outerHTML"), "#review")


def _done(request: SignedInRequest, execution: models.Execution) -> HttpResponse:
    """After an action: the swapped partial for htmx, a redirect back to the page otherwise."""
    if request.htmx:
        return render(request, REVIEW + "#review", _review_context(request, _execution(execution.pk)))
    return redirect(reverse("review-execution", args=[execution.pk]) + "#review")


def _refused(request: SignedInRequest, exc: ServiceError) -> None:
    if exc.code == "own_request":
        # Not a matter of a stale page: this person may never approve this execution.
        raise PermissionDenied(
            f"You requested this execution ({exc.detail}). Another approver has to review it."
        )
    messages.error(request, exc.detail)


def _label(execution: models.Execution, slot_key: str) -> str:
    """A slot's label in the latest record, for messages that name it in words."""
    record = models.PreflightRecord.objects.get(execution=execution, seq=execution.records).record
    return next(
        (s.get("label") or slot_key for s in record.get("slots") or [] if s["key"] == slot_key), slot_key
    )


def _invalid(request: SignedInRequest, form: forms.Form) -> bool:
    """Whether `form` is invalid; its errors become messages on the page."""
    for problem in form_problems(form):
        messages.error(request, problem)
    return bool(form.errors)


@role_required(APPROVER, what=ACTION)
@require_POST
def approve_slot(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    execution = _execution(execution_id)
    form = ApproveSlotForm(request.POST)
    if _invalid(request, form):
        return _done(request, execution)
    slot = form.cleaned_data["slot"]
    try:
        approval_create(
            execution_id=execution.pk,
            slot_key=slot,
            value_digest_seen=form.cleaned_data["value_digest"],
            approver=request.user,
        )
    except ServiceError as exc:
        _refused(request, exc)
    else:
        messages.success(request, f"{_label(execution, slot)}: approved")
    return _done(request, execution)


@role_required(APPROVER, what=ACTION)
@require_POST
def answer_slot(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    execution = _execution(execution_id)
    form = AnswerForm(request.POST)
    if _invalid(request, form):
        return _done(request, execution)
    slot, text = form.cleaned_data["slot"], form.cleaned_data["value"]
    definition = execution.contract.definition if execution.contract else None
    try:
        execution_reviewer_answer(
            execution_id=execution.pk,
            slot_key=slot,
            value=parse_edit(text, arg_schema(definition, slot)),
            reviewer=request.user,
        )
    except InvalidAnswer as exc:
        # The engine's answer check refused it, so it settled nothing: the page again (422, the partial for
        # htmx), the field keeping what was typed, the reason and the accepted form on it.
        error = {"slot": exc.slot, "reason": exc.reason, "accepts": exc.accepts, "value": text}
        context = {**_review_context(request, execution), "edit_error": error}
        return render_partial(request, REVIEW, context, "review", status=422)
    except ServiceError as exc:
        _refused(request, exc)
    else:
        label = _label(_execution(execution.pk), slot)
        messages.success(request, f"{label}: your value is recorded and the execution was preflighted again")
    return _done(request, execution)


@role_required(APPROVER, what=ACTION)
@require_POST
def approve_execution(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    execution = _execution(execution_id)
    form = ApproveExecutionForm(request.POST)
    if _invalid(request, form):
        return _done(request, execution)
    try:
        stored = execution_approve(
            execution_id=execution.pk,
            payload_digest_seen=form.cleaned_data["payload_digest"],
            approver=request.user,
        )
    except ServiceError as exc:
        _refused(request, exc)
    else:
        messages.success(request, f"Execution approved: the verdict is {stored.verdict}")
    return _done(request, execution)


@role_required(APPROVER, what=ACTION)
@require_POST
def reject(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    execution = _execution(execution_id)
    form = RejectForm(request.POST)
    if _invalid(request, form):
        return _done(request, execution)
    if not form.cleaned_data["confirmed"]:
        # Final, so asked once more: a page of its own without JS (with JS the dialog set `confirmed`).
        context = {"execution": execution, "reason": form.cleaned_data["reason"]}
        return render(request, "console/review/reject_confirm.html", context)
    try:
        execution_reject(
            execution_id=execution.pk,
            reason=form.cleaned_data["reason"],
            reviewer=request.user,
        )
    except ServiceError as exc:
        _refused(request, exc)
    else:
        messages.success(request, "Execution rejected: it is blocked, and no later answer can reopen it")
    return _done(request, execution)
