"""What a JSON value must be to be stored and digested here: what PostgreSQL's jsonb and canonical JSON
(RFC 8785) can hold. Checked on what callers send (console/api/parsers.py) and on what servers answer (tool
results, lookups: console/connectors/, console/services/), so neither side can make a write fail."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 64
# Canonical JSON (RFC 8785) numbers are doubles; a larger integer would digest differently elsewhere.
MAX_SAFE_INT = 2**53 - 1


class JSONProblem(ValueError):
    """Why a value cannot be stored; `code` is the API's error code for it."""

    def __init__(self, detail: str, code: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code


def check_json(data: Any) -> None:
    """Depth, number range and valid Unicode, checked without recursion (the input chooses the depth)."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "$")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, Mapping | list):
            if depth > MAX_DEPTH:
                raise JSONProblem(f"nested deeper than {MAX_DEPTH} levels at {where}", "too_deep")
            if isinstance(value, Mapping):
                for key, item in value.items():
                    _check_text(key, where)
                    stack.append((item, depth + 1, f"{where}.{key}"))
            else:
                stack.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, int):  # a bool too: 0 or 1
            if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                raise JSONProblem(f"{where}: integer outside ±(2**53 - 1)", "invalid_number")
        elif isinstance(value, float) and not math.isfinite(value):
            raise JSONProblem(f"{where}: number out of range", "invalid_number")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JSONProblem(
            f"{where}: string holds a lone surrogate (\\ud800-\\udfff)", "malformed_json"
        ) from None
    if "\x00" in text:
        # PostgreSQL text and jsonb cannot hold U+0000: refused here, not a 500 when it is stored.
        raise JSONProblem(f"{where}: string holds a NUL character (\\u0000)", "malformed_json")


def storable_text(text: str) -> str:
    """`text` as PostgreSQL can store it: a NUL or a lone surrogate (in a server's error message, say) is
    written as its escape, so recording why something failed can never fail itself."""
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
