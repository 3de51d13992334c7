"""The requester's own page for the questions of their execution that an MCP form cannot carry (an array of
objects): the gateway's URL elicitation sends them here. Only the execution's principal may answer; the
answer is theirs, recorded as the Agent API records one, and the execution is preflighted again."""

from __future__ import annotations

import json
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from console import models, storage
from console.errors import ServiceError
from console.services.common import identity
from console.services.executions import execution_answer
from console.web.requests import SignedInRequest
from console.web.review_rows import arg_schema, parse_edit


class UserAnswerForm(forms.Form):
    slot = forms.CharField(max_length=500)
    value = forms.CharField(widget=forms.Textarea, required=False, strip=False)


@login_required
def user_answers(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    execution = get_object_or_404(models.Execution.objects.select_related("contract"), pk=execution_id)
    if execution.principal != identity(request.user):
        raise PermissionDenied(f"Only {execution.principal} answers the questions of this execution.")
    if request.method == "POST":
        form = UserAnswerForm(request.POST)
        if form.is_valid():
            slot = form.cleaned_data["slot"]
            definition = execution.contract.definition if execution.contract else None
            try:
                value = parse_edit(form.cleaned_data["value"], arg_schema(definition, slot))
                who = identity(request.user)
                execution_answer(
                    execution_id=execution.pk,
                    answers={slot: value},
                    answered_by=who,
                    channel="agent",
                    actor=f"{who} (console)",
                )
            except ValueError as exc:
                messages.error(request, f"{slot}: {exc}")
            except ServiceError as exc:
                messages.error(request, f"{slot}: {exc.detail}")
            else:
                messages.success(request, f"{slot}: recorded. Go back to your assistant and accept there.")
        return redirect("user-answers", execution_id=execution.pk)
    latest = storage.record_answer(execution)
    questions = [
        {**q, "schema_json": json.dumps(q.get("schema"), indent=2, sort_keys=True)}
        for q in latest.get("questions") or []
    ]
    return render(request, "console/user_answers.html", {"record": latest, "questions": questions})
