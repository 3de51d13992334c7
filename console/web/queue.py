"""The approver's queue: held executions to triage (search, sort, filter, claim) and the recently decided.

Views are recipes: check the role, validate the filter form, call one selector or service, render or
redirect. An invalid filter is a 400 that says which and why, never the whole list. Without JavaScript the
filter form reloads the page and a claim is a POST answered by a redirect back; with htmx the filter form
and the periodic refresh swap only the `#queue` partial.
"""

from __future__ import annotations

from typing import Protocol
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from console.errors import ServiceError
from console.services.claims import claim_release, claim_take
from console.web import review_queue
from console.web.access import APPROVER, AUDITOR, role_required
from console.web.filters import form_problems
from console.web.requests import SignedInRequest, render_partial

QUEUE = "console/review/queue.html"
DECIDED = "console/review/decided.html"


class BackForm(forms.Form):
    next = forms.CharField(required=False, max_length=2000)


@role_required(APPROVER, AUDITOR)
@require_GET
def queue(request: SignedInRequest) -> HttpResponse:
    form = review_queue.QueueFilter(request.GET)
    if not form.is_valid():
        return _refused(request, QUEUE, form)
    page = review_queue.held(form.cleaned_data, user=request.user)
    # The filter form and the periodic refresh swap only the list.
    return render_partial(request, QUEUE, {"form": form, "page": page}, "queue")


@role_required(APPROVER, AUDITOR)
@require_GET
def decided(request: SignedInRequest) -> HttpResponse:
    form = review_queue.DecidedFilter(request.GET)
    if not form.is_valid():
        return _refused(request, DECIDED, form)
    page = review_queue.decided(form.cleaned_data)
    return render_partial(request, DECIDED, {"form": form, "page": page}, "queue")


@role_required(APPROVER, what="Claiming an execution")
@require_POST
def claim(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    return _claim_action(request, claim_take, execution_id, "Claimed: the others see it is yours.")


@role_required(APPROVER, what="Releasing a claim")
@require_POST
def unclaim(request: SignedInRequest, execution_id: UUID) -> HttpResponse:
    return _claim_action(request, claim_release, execution_id, "Released.")


class _ClaimService(Protocol):
    def __call__(self, *, execution_id: UUID, approver: User) -> object: ...


def _claim_action(
    request: SignedInRequest, service: _ClaimService, execution_id: UUID, done: str
) -> HttpResponse:
    try:
        service(execution_id=execution_id, approver=request.user)
    except ServiceError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, done)
    # Back to the queue as the approver was looking at it (only a path on this site).
    form = BackForm(request.POST)
    target = form.cleaned_data["next"] if form.is_valid() else ""
    safe = url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()})
    return redirect(target if target.startswith("/") and safe else "/executions/")


def _refused(
    request: SignedInRequest, template: str, form: review_queue.QueueFilter | review_queue.DecidedFilter
) -> HttpResponse:
    page = review_queue.QueuePage([], {}, 0, 1, 1)
    context = {"form": form, "page": page, "problems": form_problems(form)}
    return render(request, template, context, status=400)
