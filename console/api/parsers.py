"""The one request parser: JSON, strictly. What the engine could not digest is refused here, with a 400."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 64
# Canonical JSON (RFC 8785) numbers are doubles; a larger integer would digest differently elsewhere.
MAX_SAFE_INT = 2**53 - 1


class JSONRejected(ParseError):
    default_code = "malformed_json"

    def __init__(self, detail: str, code: str) -> None:
        super().__init__(detail, code)
        self.error_code = code


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise JSONRejected(f"nested deeper than {MAX_DEPTH} levels", "too_deep") from None
        except ParseError as exc:
            raise JSONRejected(f"malformed JSON: {exc.detail}", "malformed_json") from None
        check_json(data)
        return data


def loads(text: str) -> Any:
    """JSON text a person typed or pasted into the console, held to what the API's parser accepts (no NaN or
    Infinity, no NUL or lone surrogate, no depth past MAX_DEPTH, no integer past 2**53 - 1). A refusal is a
    json.JSONDecodeError, as from json.loads, so a form reports it like any other unreadable JSON."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
        check_json(data)
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", text, 0) from None
    except JSONRejected as exc:
        raise json.JSONDecodeError(str(exc.detail), text, 0) from None
    return data


def _reject_constant(token: str) -> Any:
    raise JSONRejected(f"{token} is not a JSON number", "invalid_number")


def check_json(data: Any) -> None:
    """Depth, number range and valid Unicode, checked without recursion (the input chooses the depth)."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "$")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, Mapping | list):
            if depth > MAX_DEPTH:
                raise JSONRejected(f"nested deeper than {MAX_DEPTH} levels at {where}", "too_deep")
            if isinstance(value, Mapping):
                for key, item in value.items():
                    _check_text(key, where)
                    stack.append((item, depth + 1, f"{where}.{key}"))
            else:
                stack.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                raise JSONRejected(f"{where}: integer outside ±(2**53 - 1)", "invalid_number")
        elif isinstance(value, float) and not math.isfinite(value):
            raise JSONRejected(f"{where}: number out of range", "invalid_number")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JSONRejected(
            f"{where}: string holds a lone surrogate (\\ud800-\\udfff)", "malformed_json"
        ) from None
    if "\x00" in text:
        # PostgreSQL text and jsonb cannot hold U+0000: refused here, not a 500 when it is stored.
        raise JSONRejected(f"{where}: string holds a NUL character (\\u0000)", "malformed_json")
