"""Request-size guard for the agent API: more than 1 MiB is a 413 with the API's error shape."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse


class APIBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            refused = self.check(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    def check(self, request: HttpRequest) -> HttpResponse | None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            return JsonResponse(
                {"error": "malformed_request", "detail": "Content-Length is not a number"}, status=400
            )
        if length > limit:
            return too_large(limit)
        try:
            # Reads at most Content-Length bytes; Django refuses more than the limit on the stream too.
            body = request.body
        except RequestDataTooBig:
            return too_large(limit)
        if len(body) > limit:
            return too_large(limit)
        return None


def too_large(limit: int) -> JsonResponse:
    return JsonResponse(
        {"error": "too_large", "detail": f"the request body is larger than {limit} bytes (1 MiB)"}, status=413
    )
