"""Who may see and do what in the console. Roles are Django groups (`manage.py grant_role USER ROLE`).

- approver: reviews held executions (approve, edit, reject). Identity is always the login.
- operator: maintains the catalog and rules, files provider-gap reports.
- auditor:  reads verdict history, verifies the chain, exports evidence. Read-only.

A superuser holds every role. Every refusal is a 403 whose page says why (templates/403.html shows the
reason given to PermissionDenied), so nobody is left guessing which role they lack.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, cast
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import resolve_url
from django_htmx.http import HttpResponseClientRedirect

from console.web.requests import SignedInRequest

APPROVER = "approver"
OPERATOR = "operator"
AUDITOR = "auditor"
ROLES = (APPROVER, OPERATOR, AUDITOR)


def roles_of(user: Any) -> frozenset[str]:
    """The roles a user holds, read once per request (cached on the user object the request carries)."""
    if not user.is_authenticated or not isinstance(user, AbstractUser):
        return frozenset()  # anonymous, or an API token's caller (console.api.auth.Agent): no console role
    cached: frozenset[str] | None = getattr(user, "_preflight_roles", None)
    if cached is None:
        if user.is_superuser:
            cached = frozenset(ROLES)
        else:
            cached = frozenset(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        # A per-request cache, not a field: set by name, as the user model declares no such attribute.
        setattr(user, "_preflight_roles", cached)  # noqa: B010
    return cached


def has_role(user: Any, *roles: str) -> bool:
    return bool(roles_of(user) & set(roles))


def role_required[**P, R: HttpResponseBase](
    *roles: str, what: str = "This page"
) -> Callable[
    [Callable[Concatenate[SignedInRequest, P], R]], Callable[Concatenate[HttpRequest, P], R | HttpResponse]
]:
    """Login required, then one of `roles`; otherwise a 403 that names the missing role. `what` names the
    page or action in that sentence ("Approving")."""

    def decorator(
        view: Callable[Concatenate[SignedInRequest, P], R],
    ) -> Callable[Concatenate[HttpRequest, P], R | HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs) -> R | HttpResponse:
            if not request.user.is_authenticated:
                if not getattr(request, "htmx", False):
                    return redirect_to_login(request.get_full_path())
                # A polled partial must not swap a login form into the page: send the whole window there.
                login = f"{resolve_url(settings.LOGIN_URL)}?next={quote(request.path)}"
                return HttpResponseClientRedirect(login)
            if not has_role(request.user, *roles):
                name = request.user.get_username()
                held = ", ".join(sorted(roles_of(request.user))) or "no console role"
                raise PermissionDenied(
                    f"{what} needs the {' or '.join(roles)} role. You are signed in as {name} ({held}). "
                    f"An administrator can grant it with: manage.py grant_role {name} {roles[0]}"
                )
            # Signed in (checked above) and through HtmxMiddleware (settings.MIDDLEWARE).
            return view(cast(SignedInRequest, request), *args, **kwargs)

        return wrapped

    return decorator


def console_roles(request: HttpRequest) -> dict[str, Any]:
    """Context processor: templates show each area's links only to those who may use them."""
    roles = roles_of(request.user) if hasattr(request, "user") else frozenset()
    return {"console_roles": {role: role in roles for role in ROLES}}
