"""Every API error is `{"error": code, "detail": text}`. Bad input is a 4xx, always; a 5xx means our fault."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from console.errors import BadInput, Conflict, InvalidAnswer, NotFound, ServiceError, Unprocessable
from console.storage import ContractTampered
from preflight import RequestError

logger = logging.getLogger(__name__)

_SERVICE_STATUS: dict[type[ServiceError], int] = {
    NotFound: 404,
    BadInput: 400,
    Unprocessable: 422,
    Conflict: 409,
}

# The API's codes where DRF's (an exception's `default_code`) differ.
_DRF_RENAMES = {
    "parse_error": "malformed_json",
    "not_authenticated": "unauthorized",
    "authentication_failed": "unauthorized",
    "permission_denied": "forbidden",
}


def error(code: str, detail: str, status_code: int) -> Response:
    return Response({"error": code, "detail": detail}, status=status_code)


def flatten(detail: Any, prefix: str = "") -> list[str]:
    """DRF's nested error structure as lines that name the field: `conversation[0].content: ...`."""
    if isinstance(detail, Mapping):
        lines = []
        for key, sub in detail.items():
            if key in ("non_field_errors", "__all__"):
                lines += flatten(sub, prefix)
            elif isinstance(key, int):
                lines += flatten(sub, f"{prefix}[{key}]")
            else:
                lines += flatten(sub, f"{prefix}.{key}" if prefix else str(key))
        return lines
    if isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            return [f"{prefix}: {item}" if prefix else str(item) for item in detail]
        lines = []
        for i, item in enumerate(detail):
            if item:
                lines += flatten(item, f"{prefix}[{i}]")
        return lines
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    set_rollback()
    if isinstance(exc, InvalidAnswer):
        body = {"error": exc.code, "detail": exc.detail, "slot": exc.slot, "reason": exc.reason}
        if exc.accepts:
            body["accepts"] = exc.accepts
        return Response(body, status=422)
    if isinstance(exc, ServiceError):
        return error(exc.code, exc.detail, _SERVICE_STATUS.get(type(exc), 400))
    if isinstance(exc, RequestError):
        return error("invalid", f"{exc.field}: {exc.reason}", 400)
    if isinstance(exc, Http404):
        return error("not_found", "no such resource", 404)
    if isinstance(exc, PermissionDenied):
        return error("forbidden", str(exc) or "not allowed", 403)
    if isinstance(exc, RequestDataTooBig):
        return error("too_large", "the request body is larger than 1 MiB", 413)
    if isinstance(exc, exceptions.APIException):
        code = getattr(exc, "error_code", None) or _DRF_RENAMES.get(exc.default_code, exc.default_code)
        detail = (
            "; ".join(flatten(exc.detail)) if isinstance(exc, exceptions.ValidationError) else str(exc.detail)
        )
        # DRF's own answer gives the status and headers (WWW-Authenticate, Retry-After); the body is ours.
        response = drf_exception_handler(exc, dict(context))
        assert response is not None  # DRF answers every APIException
        response.data = {"error": code, "detail": detail}
        return response
    if isinstance(exc, OperationalError | InterfaceError):
        logger.exception("database unavailable")
        return error("unavailable", "the database is unavailable; nothing was recorded, retry later", 503)
    if isinstance(exc, ContractTampered):
        logger.error("%s", exc)
        return error("contract_tampered", "the stored tool contract fails its digest; ask an operator", 409)
    if isinstance(exc, DatabaseError):
        logger.exception("database error")
        return error(
            "internal_error", "the request could not be recorded", status.HTTP_500_INTERNAL_SERVER_ERROR
        )
    logger.exception("unhandled error in %s", context.get("view"))
    return error("internal_error", "an internal error occurred", status.HTTP_500_INTERNAL_SERVER_ERROR)
