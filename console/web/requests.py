"""The request types the console's views are written against."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request through django-htmx's middleware (settings.MIDDLEWARE): `htmx` says whether htmx sent it.
    A type only; Django builds the request."""

    htmx: HtmxDetails


class SignedInRequest(HtmxHttpRequest):
    """What a view behind console.web.access.role_required (or login_required) gets: a signed-in user."""

    user: User
