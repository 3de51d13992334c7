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


def contract_diff(old: models.ToolContract, new: models.ToolContract) -> str:
    a = pretty_json({"annotations_trusted": old.annotations_trusted, "definition": old.definition})
    b = pretty_json({"annotations_trusted": new.annotations_trusted, "definition": new.definition})
    return "".join(
        difflib.unified_diff(
            a.splitlines(keepends=True),
            b.splitlines(keepends=True),
            fromfile=f"{old.name}@{old.digest[7:19]}",
            tofile=f"{new.name}@{new.digest[7:19]}",
        )
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
