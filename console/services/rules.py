"""User/org rules: storing a checklist version, and checking edited rules text first."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from console import models
from console.api import parsers as json_text
from console.audit import audit_append
from console.errors import Conflict, Unprocessable
from console.services.common import identity
from preflight import load_rules
from preflight.errors import ChecklistError


@transaction.atomic
def ruleset_create(*, data: Mapping[str, Any], actor: str) -> models.RuleSet:
    """Store a user/org checklist as the active version of its id; older versions stop applying."""
    try:
        checklist = load_rules(data)
    except ChecklistError as exc:
        raise Unprocessable("invalid_checklist", str(exc)) from None
    models.RuleSet.objects.filter(name=checklist.id, active=True).update(active=False)
    row, _ = models.RuleSet.objects.update_or_create(
        name=checklist.id, version=checklist.version, defaults={"data": dict(data), "active": True}
    )
    audit_append(
        kind="ruleset",
        execution_id=None,
        body={"name": checklist.id, "version": checklist.version, "stamp": checklist.stamp, "actor": actor},
    )
    return row


@dataclass(frozen=True, slots=True)
class RuleProblem:
    message: str
    path: str  # e.g. rules[1].check (max_amount); "(top level)" or "" for the whole text
    line: int | None  # 1-based line of the textarea, when it can be found


@dataclass(frozen=True, slots=True)
class RulesCheck:
    data: Any
    problem: RuleProblem | None

    @property
    def ok(self) -> bool:
        return self.problem is None


_WS = re.compile(r"[ \t\n\r]*")
_ID_NOTE = re.compile(r" \([^()]*\)")
_STEP = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def path_steps(path: str) -> list[str | int]:
    """`rules[1] (max_amount).check` → ["rules", 1, "check"] (the engine's way of naming an item)."""
    if path.strip() in ("", "(top level)"):
        return []
    return [int(i) if i else name for i, name in _STEP.findall(_ID_NOTE.sub("", path))]


def json_path_line(text: str, steps: Sequence[str | int]) -> int | None:
    """The 1-based line where the value at `steps` starts in the JSON `text`, or None if not found."""
    decoder = json.JSONDecoder()

    def ws(i: int) -> int:
        m = _WS.match(text, i)
        return m.end() if m else i

    i = ws(0)
    try:
        for step in steps:
            if isinstance(step, int):
                if text[i] != "[":
                    return None
                i = ws(i + 1)
                for _ in range(step):
                    _, i = decoder.raw_decode(text, i)
                    i = ws(i)
                    if text[i] != ",":
                        return None
                    i = ws(i + 1)
                if text[i] == "]":
                    return None
                continue
            if text[i] != "{":
                return None
            i = ws(i + 1)
            while True:
                if text[i] == "}":
                    return None
                key, j = decoder.raw_decode(text, i)
                j = ws(j)
                if text[j] != ":":
                    return None
                j = ws(j + 1)
                if key == step:
                    i = j
                    break
                _, j = decoder.raw_decode(text, j)
                j = ws(j)
                if text[j] != ",":
                    return None
                i = ws(j + 1)
    except (IndexError, ValueError):
        return None
    return text.count("\n", 0, i) + 1


def check_rules_text(text: str) -> RulesCheck:
    """Parse and validate a checklist as the engine will (`load_rules`); a problem names its line."""
    try:
        data = json_text.loads(text)
    except json.JSONDecodeError as exc:
        return RulesCheck(None, RuleProblem(f"not JSON: {exc.msg} (column {exc.colno})", "", exc.lineno))
    try:
        load_rules(data)
    except ChecklistError as exc:
        line = json_path_line(text, path_steps(exc.line))
        return RulesCheck(data, RuleProblem(exc.reason, exc.line, line))
    return RulesCheck(data, None)


def next_version(version: str) -> str:
    """A suggestion for the version after `version`: its last number plus one, else `version.1`."""
    m = re.search(r"(\d+)(?!.*\d)", version)
    if m is None:
        return f"{version}.1"
    number = str(int(m.group(1)) + 1).zfill(len(m.group(1)))  # 01 → 02, 9 → 10
    return f"{version[: m.start()]}{number}{version[m.end() :]}"


@transaction.atomic
def ruleset_save(*, text: str, user: AbstractBaseUser) -> models.RuleSet:
    """Save edited rules as a new active version (through ruleset_create). A version number is
    never reused for different rules: records name the version that applied, so it must stay what it was."""
    checked = check_rules_text(text)
    if checked.problem is not None:
        p = checked.problem
        where = f"line {p.line}, " if p.line else ""
        raise Unprocessable("invalid_checklist", f"{where}{p.path or '(text)'}: {p.message}")
    data = checked.data
    existing = models.RuleSet.objects.filter(name=data["id"], version=data["version"]).first()
    if existing is not None and existing.data != data:
        line = json_path_line(text, ["version"])
        where = f"line {line}, " if line else ""
        raise Conflict(
            "version_exists",
            f"{where}version: {data['id']}@{data['version']} already exists with other rules; "
            f"use a new version (e.g. {next_version(data['version'])})",
        )
    return ruleset_create(data=data, actor=identity(user))
