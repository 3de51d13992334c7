"""Real tool catalogs and grounded requests built from their schemas (shared by tests and bench/engine.py).

A grounded request settles every required argument the way an honest agent would: each scalar value is
written into one trusted user turn and pointed at; arrays and free-form objects, which no span can hold,
come as the user's answers. The side-car extension declares the state change and marks the prose reviewed,
so what remains is the engine's argument logic alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from preflight import Answer, Candidate, Evidence, ExecutionRequest, Span, Timing, Turn

__all__ = [
    "CATALOGS",
    "EXTENSION",
    "Grounded",
    "catalog_tools",
    "catalogs_present",
    "grounded_request",
    "sample_value",
]

# tests/preflight/catalog_util.py -> repo root -> its parent holds shared/ (CI clones the repo beside a copy).
CATALOGS = Path(__file__).resolve().parents[2].parent / "shared" / "catalogs"

# Isolates argument logic: the intended change is declared and the description's prose counts as reviewed.
EXTENSION: dict[str, Any] = {"state_change": "the tool's declared effect happens", "prose_reviewed": True}

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PREAMBLE = "Please do it now."
ACTION = PREAMBLE.index("do it")
TIMING = PREAMBLE.index("now")
_SCALARS = ("string", "integer", "number", "boolean")


def catalogs_present() -> bool:
    return CATALOGS.is_dir() and any(CATALOGS.glob("*.json"))


def catalog_tools() -> Iterator[tuple[str, dict[str, Any]]]:
    """(server, MCP Tool object) for every tool of every catalog; the server is the catalog file stem."""
    for path in sorted(CATALOGS.glob("*.json")):
        for tool in json.loads(path.read_text(encoding="utf-8"))["tools"]:
            yield path.stem, tool


def _type_of(schema: Mapping[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if t is None and "enum" in schema and schema["enum"]:
        first = schema["enum"][0]
        return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(type(first))
    return t if isinstance(t, str) else None


def sample_value(schema: Mapping[str, Any], name: str) -> Any:
    """A value that satisfies `schema` for the common keywords (enum, const, format, bounds, lengths)."""
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    t = _type_of(schema)
    if t == "integer" or t == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value: int | float = int(low) + 1 if t == "integer" else float(low) + 1.5
        if "maximum" in schema and value > schema["maximum"]:
            value = schema["maximum"]
        return value
    if t == "boolean":
        return True
    if t == "array":
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else {}
        count = max(1, int(schema.get("minItems", 1)))
        return [sample_value(items, name) for _ in range(count)]
    if t == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        return {
            r: sample_value(props.get(r, {}), r) for r in schema.get("required", []) if isinstance(r, str)
        }
    if t in (None, "string"):
        fmt = schema.get("format")
        text = {
            "date": "2026-12-01",
            "date-time": "2026-12-01T09:00:00+00:00",
            "email": "alice@example.com",
            "uri": "https://example.com/x",
        }.get(fmt if isinstance(fmt, str) else "", f"val{name.replace('.', '')[:12]}")
        text = text[: schema.get("maxLength", len(text))]
        return text.ljust(int(schema.get("minLength", 0)), "x")
    return f"val{name}"


@dataclass
class Grounded:
    request: ExecutionRequest
    evidence: Evidence
    pointed: dict[str, Any] = field(default_factory=dict)  # argument path -> value placed in the user turn
    answered: dict[str, Any] = field(default_factory=dict)  # argument path -> value given as an answer

    def expected_payload(self) -> dict[str, Any]:
        """The argument object an honest assembly of these values gives (nested paths become objects)."""
        out: dict[str, Any] = {}
        for path, value in (*self.pointed.items(), *self.answered.items()):
            target = out
            *parents, leaf = path.split(".")
            for part in parents:
                target = target.setdefault(part, {})
            target[leaf] = value
        return out


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _is_scalar(schema: Mapping[str, Any]) -> bool:
    return _type_of(schema) in _SCALARS or (schema.get("type") is None and "properties" not in schema)


def _has_children(schema: Mapping[str, Any]) -> bool:
    props = schema.get("properties")
    t = schema.get("type")
    is_object = t is None or t == "object" or (isinstance(t, list) and "object" in t)
    return isinstance(props, Mapping) and bool(props) and is_object


def grounded_request(tool: Mapping[str, Any], principal: str = "user:alice") -> Grounded:
    """A request that grounds every required argument (nested required ones included) of `tool`."""
    schema = tool.get("inputSchema") or {}
    pieces: list[tuple[str, Any]] = []  # (path, value) to point at, in order
    answered: dict[str, Any] = {}

    def visit(node: Mapping[str, Any], prefix: str) -> None:
        props = node.get("properties") if isinstance(node.get("properties"), Mapping) else {}
        for req in node.get("required") or []:
            if not isinstance(req, str):
                continue
            sub = props.get(req, {})
            sub = sub if isinstance(sub, Mapping) else {}
            path = f"{prefix}.{req}" if prefix else req
            if _has_children(sub) and sub.get("required"):
                visit(sub, path)
            elif _is_scalar(sub):
                pieces.append((path, sample_value(sub, path)))
            else:
                # arrays and objects (free-form, or with only optional members): nothing a span can hold
                answered[path] = sample_value(sub, path)

    visit(schema, "")
    text = PREAMBLE
    candidates: dict[str, Candidate] = {}
    for path, value in pieces:
        text += f" {path} is "
        start = len(text)
        text += _render(value)
        candidates[path] = Candidate(value, Span(0, start, len(text)))
        text += ";"
    request = ExecutionRequest(
        principal=principal,
        conversation=(Turn("user", text, trusted=True),),
        candidates=candidates,
        action_name=Span(0, ACTION, ACTION + len("do it")),
        timing=Timing("immediate", pointer=Span(0, TIMING, TIMING + len("now"))),
    )
    answers = {f"arg:{p}": Answer(v, principal, f"a-{i}") for i, (p, v) in enumerate(answered.items())}
    return Grounded(request, Evidence(now=NOW, answers=answers), dict(pieces), answered)
