"""What every agent API view shares: who is calling, and the error answers to document."""

from __future__ import annotations

from rest_framework.request import Request

from console.api.records import ErrorOut

ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    413: ErrorOut,
}


def actor(request: Request) -> str:
    return str(request.user)


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    return {**ERRORS, **{s: ErrorOut for s in statuses}}
