"""The one request parser: JSON, strictly. What the engine could not digest is refused here, with a 400."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from console import json_values
from console.json_values import MAX_DEPTH


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
    """`console.json_values.check_json`, refusing as the API does (a 400 naming the place)."""
    try:
        json_values.check_json(data)
    except json_values.JSONProblem as exc:
        raise JSONRejected(exc.detail, exc.code) from None
