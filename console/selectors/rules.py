"""User/org rules as records name them: the rule slots, a checklist version's parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rule_slots(record: Mapping[str, Any]) -> list[str]:
    """The user/org rule obligations that applied to one record (slot keys `user:<rule id>`, approvals)."""
    return [s["key"] for s in record.get("slots", ()) if s["key"].startswith("user:")]


def checklist_parts(checklist_version: str) -> dict[str, Any]:
    """`fixed@1;org@3#abc,ops@1#def;contract=123` → fixed, rule stamps and contract, as a dict."""
    parts = checklist_version.split(";")
    out: dict[str, Any] = {"fixed": parts[0] if parts else "", "rules": [], "contract": ""}
    for part in parts[1:]:
        if part.startswith("contract="):
            out["contract"] = part[len("contract=") :]
        elif part:
            out["rules"] = part.split(",")
    return out
