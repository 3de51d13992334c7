"""Checklists kept as data: the fixed list every gated execution carries, and user/org rules.

The provider checklist is not stored here: it is read off each tool contract (schema, `x-preflight`,
description labels). Loading validates the data itself; a malformed item is a ChecklistError naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import jsonschema

from .canonical import digest
from .errors import ChecklistError, ExpressionError
from .expressions import Expression, compile_expression

__all__ = [
    "FIXED_CHECKLIST",
    "Checklist",
    "FixedObligation",
    "Rule",
    "load_fixed_checklist",
    "load_rules",
]

FixedSource = Literal["user_answer", "instruction", "preset", "contract"]


@dataclass(frozen=True, slots=True)
class FixedObligation:
    key: str
    kind: Literal["value", "condition", "intent"]
    question: str
    sources: tuple[FixedSource, ...]


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    kind: Literal["condition", "approval", "require"]
    text: str
    principals: frozenset[str]  # empty: everyone
    environments: frozenset[str]  # empty: every environment
    tools: frozenset[str]  # "server/tool"; empty: every tool whose arguments the rule reads
    check: Expression | None = None  # condition
    on_false: Literal["hold", "block"] = "hold"
    when: Expression | None = None  # approval
    arg: str | None = None  # require

    def applies(self, *, principal: str, environment: str, tool: str, arguments: frozenset[str]) -> bool:
        if self.principals and principal not in self.principals:
            return False
        if self.environments and environment not in self.environments:
            return False
        if self.tools:
            return tool in self.tools
        # A rule not bound to tools applies wherever everything it reads exists.
        reads = set()
        for expr in (self.check, self.when):
            if expr is not None:
                reads |= {r[4:] for r in expr.reads if r.startswith("arg:") and r != "arg:*"}
        if self.arg:
            reads.add(self.arg)
        return reads <= arguments


@dataclass(frozen=True, slots=True)
class Checklist:
    id: str
    version: str
    rules: tuple[Rule, ...]
    digest: str  # of the data: an edit without a version bump must still be a different checklist

    @property
    def stamp(self) -> str:
        return f"{self.id}@{self.version}#{self.digest[7:19]}"


_FIXED_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "version", "obligations"],
    "properties": {
        "id": {"const": "fixed"},
        "version": {"type": "string", "minLength": 1},
        "obligations": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "kind", "question", "sources"],
                "properties": {
                    "key": {
                        "enum": ["fixed:tool", "fixed:timing", "fixed:action_name", "fixed:intended_change"]
                    },
                    "kind": {"enum": ["value", "condition", "intent"]},
                    "question": {"type": "string", "minLength": 1},
                    "sources": {
                        "type": "array",
                        "minItems": 1,
                        "uniqueItems": True,
                        "items": {"enum": ["user_answer", "instruction", "preset", "contract"]},
                    },
                },
            },
        },
    },
}

_RULES_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "version", "rules"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
        "version": {"type": "string", "minLength": 1},
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "kind"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
                    "kind": {"enum": ["condition", "approval", "require"]},
                    "text": {"type": "string"},
                    "principals": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "environments": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "tools": {"type": "array", "items": {"type": "string", "pattern": "^[^/]+/[^/]+$"}},
                    "check": {"type": "string", "minLength": 1},
                    "on_false": {"enum": ["hold", "block"]},
                    "when": {"type": "string", "minLength": 1},
                    "arg": {"type": "string", "minLength": 1},
                },
                "allOf": [
                    {
                        "if": {"properties": {"kind": {"const": "condition"}}},
                        "then": {"required": ["check", "on_false"]},
                    },
                    {"if": {"properties": {"kind": {"const": "require"}}}, "then": {"required": ["arg"]}},
                ],
            },
        },
    },
}
_FIXED_VALIDATOR = jsonschema.Draft202012Validator(_FIXED_SCHEMA)
_RULES_VALIDATOR = jsonschema.Draft202012Validator(_RULES_SCHEMA)

FIXED_CHECKLIST_DATA: dict[str, Any] = {
    "id": "fixed",
    "version": "1",
    "obligations": [
        {
            "key": "fixed:tool",
            "kind": "intent",
            "question": "Which of these do you want to do?",
            "sources": ["user_answer", "instruction"],
        },
        {
            "key": "fixed:action_name",
            "kind": "intent",
            "question": "In your own words, what should be done?",
            "sources": ["user_answer", "instruction"],
        },
        {
            "key": "fixed:intended_change",
            "kind": "intent",
            "question": "What should change as a result?",
            "sources": ["contract"],
        },
        {
            "key": "fixed:timing",
            "kind": "intent",
            "question": "When should this happen?",
            "sources": ["user_answer", "instruction", "preset"],
        },
    ],
}


def _line(data: Any, error: jsonschema.ValidationError) -> str:
    path = list(error.absolute_path)
    parts: list[str] = []
    for p in path:
        parts.append(f"[{p}]" if isinstance(p, int) else f".{p}" if parts else str(p))
    line = "".join(parts) or "(top level)"
    if len(path) >= 2 and isinstance(path[1], int):
        item = data[path[0]][path[1]] if isinstance(data, Mapping) else None
        if isinstance(item, Mapping) and isinstance(item.get("id") or item.get("key"), str):
            line += f" ({item.get('id') or item.get('key')})"
    return line


def load_fixed_checklist(data: Mapping[str, Any]) -> tuple[FixedObligation, ...]:
    error = jsonschema.exceptions.best_match(_FIXED_VALIDATOR.iter_errors(data))
    if error is not None:
        raise ChecklistError("fixed", _line(data, error), error.message)
    keys = [o["key"] for o in data["obligations"]]
    if len(set(keys)) != len(keys):
        raise ChecklistError("fixed", "obligations", "a key is listed twice")
    return tuple(
        FixedObligation(
            o["key"], o["kind"], o["question"], cast(tuple[FixedSource, ...], tuple(o["sources"]))
        )
        for o in data["obligations"]
    )


def load_rules(data: Any) -> Checklist:
    """Load a user/org checklist. Every rule is validated, expressions compiled, ids unique."""
    if not isinstance(data, Mapping):
        raise ChecklistError("?", "(top level)", "a checklist must be a JSON object")
    name = data["id"] if isinstance(data.get("id"), str) else "?"
    error = jsonschema.exceptions.best_match(_RULES_VALIDATOR.iter_errors(data))
    if error is not None:
        raise ChecklistError(name, _line(data, error), error.message)
    rules = []
    seen: set[str] = set()
    for i, raw in enumerate(data["rules"]):
        line = f"rules[{i}] ({raw['id']})"
        if raw["id"] in seen:
            raise ChecklistError(name, line, "rule id is used twice")
        seen.add(raw["id"])
        rules.append(_rule(name, line, raw))
    return Checklist(name, data["version"], tuple(rules), digest(data))


def _rule(name: str, line: str, raw: Mapping[str, Any]) -> Rule:
    def compiled(key: str) -> Expression | None:
        if key not in raw:
            return None
        try:
            return compile_expression(raw[key])
        except ExpressionError as exc:
            raise ChecklistError(name, f"{line}.{key}", exc.reason) from None

    check, when = compiled("check"), compiled("when")
    for expr in (check, when):
        if expr is not None and any(r.startswith("measure:") for r in expr.reads):
            # Measures are declared per tool; a rule cannot ask for a lookup the tool does not declare.
            raise ChecklistError(name, line, "user rules may read arg, principal and env, not measure")
    return Rule(
        id=raw["id"],
        kind=raw["kind"],
        text=raw.get("text") or raw.get("check") or raw.get("when") or raw.get("arg") or raw["id"],
        principals=frozenset(raw.get("principals", ())),
        environments=frozenset(raw.get("environments", ())),
        tools=frozenset(raw.get("tools", ())),
        check=check,
        on_false=raw.get("on_false", "hold"),
        when=when,
        arg=raw.get("arg"),
    )


FIXED_CHECKLIST: tuple[FixedObligation, ...] = load_fixed_checklist(FIXED_CHECKLIST_DATA)
