"""Typed errors. Each carries the data a caller needs to report it, not just a message."""

from __future__ import annotations

__all__ = [
    "ChecklistError",
    "ContractError",
    "ExpressionError",
    "GrantError",
    "PreflightError",
    "RequestError",
]


class PreflightError(Exception):
    """Base of every error the engine raises on purpose."""


class ContractError(PreflightError):
    """A tool definition the engine cannot turn into a contract."""

    def __init__(self, tool: str, reason: str, path: str = "") -> None:
        self.tool = tool
        self.reason = reason
        self.path = path
        where = f" at {path}" if path else ""
        super().__init__(f"tool {tool!r}: {reason}{where}")


class ChecklistError(PreflightError):
    """Checklist data that does not hold its own shape. `line` names the offending item."""

    def __init__(self, checklist: str, line: str, reason: str) -> None:
        self.checklist = checklist
        self.line = line
        self.reason = reason
        super().__init__(f"checklist {checklist!r}, {line}: {reason}")


class ExpressionError(PreflightError):
    """A condition expression that does not compile, or fails when evaluated."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"expression {source!r}: {reason}")


class GrantError(PreflightError):
    """A grant token the gate must refuse. `reason` is one of a fixed set; `field` names a mismatch."""

    def __init__(self, reason: str, field: str | None = None, detail: str = "") -> None:
        self.reason = reason
        self.field = field
        self.detail = detail
        text = reason if field is None else f"{reason}: {field}"
        super().__init__(f"{text} {detail}".strip())


class RequestError(PreflightError):
    """A candidate execution whose shape is wrong (the API turns it into a 4xx)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class SchemaUnusable(PreflightError):
    """A tool schema that cannot be evaluated here (a reference nothing local resolves): what it decides is
    unknown, so whatever rests on it holds."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
