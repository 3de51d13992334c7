"""The catalog as operators read it: a contract's obligations, versions diffed."""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.utils import timezone

from console import models, storage
from preflight import Evidence, ExecutionRequest, compile_plan, preflight
from preflight.canonical import canonical_json


def pretty_json(value: Any) -> str:
    """Canonical JSON, pretty-printed: the same value always prints the same lines (diffable)."""
    return json.dumps(json.loads(canonical_json(value)), indent=2, sort_keys=True, ensure_ascii=False)


def json_diff(old: Any, new: Any, *, fromfile: str, tofile: str) -> str:
    """A unified diff of two JSON values, each as `pretty_json` prints it."""
    a, b = (pretty_json(value).splitlines(keepends=True) for value in (old, new))
    return "".join(difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile))


def contract_diff(old: models.ToolContract, new: models.ToolContract) -> str:
    return json_diff(
        {"annotations_trusted": old.annotations_trusted, "definition": old.definition},
        {"annotations_trusted": new.annotations_trusted, "definition": new.definition},
        fromfile=f"{old.name}@{old.digest[7:19]}",
        tofile=f"{new.name}@{new.digest[7:19]}",
    )


def contract_preview(row: models.ToolContract) -> list[dict[str, Any]]:
    """The obligations a call of this version must settle before anything is known, with the user/org
    rules active now (the stored preview was computed at import, without rules)."""
    if not row.valid:
        return []
    plan = compile_plan(storage.engine_contract(row), storage.active_rules())
    record = preflight(plan, ExecutionRequest(principal="preview"), Evidence(now=timezone.now()))
    return [
        {
            "key": s.key,
            "kind": s.kind,
            "defined_by": s.defined_by,
            "label": s.label,
            "labels": list(s.labels),
            "route": s.route,
            "gap": s.gap,
            "detail": s.detail,
        }
        for s in record.slots
    ]
