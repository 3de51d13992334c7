"""The JSON-Schema-Test-Suite as candidate calls: each object instance, grounded in a user's words.

A suite case is a schema and instances it calls valid or invalid. Each instance of the identifier-keyed object
kind (an object whose keys are identifiers, whose values can be pointed at in text: non-empty strings, finite
numbers, booleans, non-empty lists of those, nested objects of the same kind) becomes the conversation
"Do it now; a is 1; b.c is x; ...", with every value pointed at. The engine may then answer anything but
`execute` for an instance the suite calls invalid, or run a payload other than the instance.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders import NOW

from preflight import Evidence, compile_plan, contract_from_mcp, preflight
from preflight.errors import ContractError
from preflight.record import Record
from preflight.request import parse_request

SUITE = Path(__file__).parent / "data" / "json-schema-test-suite" / "draft2020-12"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class Case:
    file: str
    description: str
    schema: Any
    instance: Any
    valid: bool

    @property
    def name(self) -> str:
        return f"{self.file}: {self.description}"


def cases(directory: Path = SUITE) -> Iterator[Case]:
    for path in sorted(directory.rglob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            for test in group["tests"]:
                yield Case(
                    str(path.relative_to(directory)),
                    f"{group['description']} / {test['description']}",
                    group["schema"],
                    test["data"],
                    bool(test["valid"]),
                )


def _scalar(value: Any) -> bool:
    if isinstance(value, bool) or type(value) is int:
        return True
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is str and value.strip() != ""


def of_kind(instance: Any) -> bool:
    """An object with identifier keys whose every value a user can state and a pointer can hold."""
    if not isinstance(instance, dict) or not all(
        isinstance(k, str) and _IDENTIFIER.match(k) for k in instance
    ):
        return False
    for value in instance.values():
        if isinstance(value, dict):
            if not value or not of_kind(value):
                return False
        elif isinstance(value, list):
            if not value or not all(_scalar(v) for v in value):
                return False
        elif not _scalar(value):
            return False
    return True


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is float:
        return repr(value)
    return str(value)


def grounded_request(instance: Mapping[str, Any]) -> dict[str, Any]:
    """The request an honest agent sends: every value in a trusted user turn, every candidate pointed at."""
    text = "Do it now"
    candidates: dict[str, Any] = {}

    def say(value: Any) -> dict[str, int]:
        nonlocal text
        text += " ; "
        start = len(text)
        text += _text(value)
        return {"turn": 0, "start": start, "end": len(text)}

    def walk(obj: Mapping[str, Any], prefix: str) -> None:
        for key, value in obj.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, path + ".")
                continue
            text_label = f" ; {path} is"
            nonlocal text
            text += text_label
            if isinstance(value, list):
                candidates[path] = {"value": value, "pointer": [say(v) for v in value]}
            else:
                candidates[path] = {"value": value, "pointer": say(value)}

    walk(instance, "")
    return {
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": text + " .", "trusted": True}],
        "candidates": candidates,
        "action_name": {"turn": 0, "start": 0, "end": 5},
        "timing": {"mode": "immediate", "pointer": {"turn": 0, "start": 6, "end": 9}},
    }


def run_case(case: Case) -> Record | None:
    """The engine's record for this instance as a candidate call; None if the schema is no tool's schema."""
    if not isinstance(case.schema, dict):
        return None  # an inputSchema is an object; `true` / `false` schemas are no tool's
    tool = {
        "name": "suite_tool",
        "description": "A tool whose arguments are the suite's schema.",
        "inputSchema": case.schema,
        "x-preflight": {"state_change": "does what the suite's schema describes"},
    }
    try:
        plan = compile_plan(contract_from_mcp("suite", tool))
    except ContractError:
        return None
    return preflight(plan, parse_request(grounded_request(case.instance)), Evidence(now=NOW))


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, key order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)
