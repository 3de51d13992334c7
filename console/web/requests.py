"""The request types the console's views are written against, and the one render that answers htmx."""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request through django-htmx's middleware (settings.MIDDLEWARE): `htmx` says whether htmx sent it.
    A type only; Django builds the request."""

    htmx: HtmxDetails


class SignedInRequest(HtmxHttpRequest):
    """What a view behind console.web.access.role_required (or login_required) gets: a signed-in user."""

    user: User


def render_partial(
    request: HtmxHttpRequest, template: str, context: Mapping[str, object], partial: str, *, status: int = 200
) -> HttpResponse:
    """The page, or for an htmx request only its `{% partialdef partial %}`, the part htmx swaps."""
    if request.htmx:
        template = f"{template}#{partial}"
    return render(request, template, context, status=status)
