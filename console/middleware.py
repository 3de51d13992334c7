"""Request guards: more than 1 MiB to the agent API is a 413 in its error shape; a NUL in a URL is a 400."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse


class APIBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            int(raw)
        except ValueError:
            return JsonResponse(
                {"error": "malformed_request", "detail": "Content-Length is not a number"}, status=400
            )
        try:
            # Django refuses a Content-Length over the limit unread (RequestDataTooBig), and reads at most it.
            body = request.body
        except RequestDataTooBig:
            return too_large(limit)
        if len(body) > limit:
            return too_large(limit)
        return self.get_response(request)


def too_large(limit: int) -> JsonResponse:
    return JsonResponse(
        {"error": "too_large", "detail": f"the request body is larger than {limit} bytes (1 MiB)"}, status=413
    )


class NulRefusalMiddleware:
    """A NUL in the path or the query string is a 400 before any view sees it: PostgreSQL cannot compare text
    with U+0000, so a view that looks the value up would fail with a 500 (`/rules/%00/edit/`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.GET.lists()
        if "\x00" in request.path or any("\x00" in k or any("\x00" in v for v in vs) for k, vs in query):
            detail = "the path or the query string holds a NUL character (%00)"
            if request.path.startswith("/api/"):
                return JsonResponse({"error": "invalid", "detail": detail}, status=400)
            return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
