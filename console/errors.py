"""Errors services raise on purpose. Each has a stable code; the API maps the class to a status."""

from __future__ import annotations


class ServiceError(Exception):
    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")


class NotFound(ServiceError):
    """The named thing does not exist (404)."""


class BadInput(ServiceError):
    """The input has the wrong shape (400)."""


class Unprocessable(ServiceError):
    """Well-formed input that cannot be acted on (422): a pointer out of range, a contract that is invalid."""


class InvalidAnswer(Unprocessable):
    """An answer its question's schema refuses (422 `invalid_answer`): it settled nothing. `slot` names the
    question, `reason` says what the schema refuses, `accepts` what it takes (in words, from that schema)."""

    def __init__(
        self, slot: str, reason: str, code: str = "invalid_answer", accepts: str | None = None
    ) -> None:
        super().__init__(code, f"{slot}: {reason}")
        self.slot = slot
        self.reason = reason
        self.accepts = accepts


class Conflict(ServiceError):
    """The state of the execution does not allow this (409): a refused grant, a stale value, a used call."""
