"""User/org rules as records name them: the rule slots, a checklist version's parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rule_slots(record: Mapping[str, Any]) -> list[str]:
    """The user/org rule obligations that applied to one record (slot keys `user:<rule id>`, approvals)."""
    return [s["key"] for s in record.get("slots", ()) if s["key"].startswith("user:")]


def checklist_parts(checklist_version: str) -> dict[str, Any]:
    """`fixed@1;org@3#abc,ops@1#def;contract=123` → the rule stamps (`rules`), as a dict."""
    rules: list[str] = []
    for part in checklist_version.split(";")[1:]:
        if part and not part.startswith("contract="):
            rules = part.split(",")
    return {"rules": rules}
