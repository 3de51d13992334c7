"""The contract workbench's reads: a tool's side-car, a draft checked against a sample, the export."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.utils import timezone

from console import models, storage
from console.selectors.catalog import json_diff
from preflight import (
    Answer,
    ContractError,
    Evidence,
    ExecutionRequest,
    compile_plan,
    contract_from_mcp,
    preflight,
)


@dataclass(frozen=True, slots=True)
class SidecarCheck:
    """What the workbench shows for one draft side-car of one tool version."""

    extension: Any  # the x-preflight as it would be saved (form fields merged into the JSON)
    problem: str  # "" when the draft builds a contract
    where: str  # the offending part, e.g. x-preflight/conditions/0/check
    obligations: list[dict[str, Any]]  # the draft's obligations for the sample request
    diff: str  # unified diff of the x-preflight, current -> draft
    variables: list[str]  # what a condition may read
    prose: tuple[str, ...]  # rules stated only in the description, to declare or mark reviewed
    resolves: list[str]  # provider-gap slots of the current version the draft closes

    @property
    def ok(self) -> bool:
        return not self.problem


def sidecar_of(row: models.ToolContract) -> dict[str, Any]:
    ext = row.definition.get("x-preflight")
    if ext is None and isinstance(row.definition.get("_meta"), Mapping):
        ext = row.definition["_meta"].get("x-preflight")
    return dict(ext) if isinstance(ext, Mapping) else {}


def _outcome(slot: Any) -> str:
    """settled / asked / measured / held, and for a condition evaluated false what it does (block, hold)."""
    if slot.met is False:
        return "false: blocks" if slot.detail == "unmet: block" else "false: holds"
    if slot.status != "unknown":
        return "settled"
    return {"ask_user": "asked", "measure": "measured"}.get(
        slot.route or "", "held" if slot.route else "waits"
    )


def _obligations(contract: Any, sample: Mapping[str, Any]) -> list[dict[str, Any]]:
    plan = compile_plan(contract, storage.active_rules())
    # Sample values stand in for a user's answers: the preview shows what is left once they are given.
    answers = {f"arg:{k}": Answer(v, "preview") for k, v in sample.items()}
    answers |= {
        "fixed:action_name": Answer("preview", "preview"),
        "fixed:timing": Answer("immediate", "preview"),
    }
    evidence = Evidence(now=timezone.now(), answers=answers)
    record = preflight(plan, ExecutionRequest(principal="preview"), evidence)
    return [
        {
            "key": s.key,
            "label": s.label,
            "status": s.status,
            "route": s.route,
            "outcome": _outcome(s),
            "gap": s.gap,
            "detail": s.detail,
        }
        for s in record.slots
    ]


def sidecar_check(
    *, row: models.ToolContract, extension: Any, problem: str = "", sample: Mapping[str, Any] | None = None
) -> SidecarCheck:
    sample = sample or {}
    base = {k: v for k, v in row.definition.items() if k != "x-preflight"}
    raw = contract_from_mcp(row.server.name, base, annotations_trusted=row.annotations_trusted)
    current = _obligations(storage.engine_contract(row), sample)
    variables = ["principal", "env.<key>", *(f"arg.{p}" for p in sidecar_arguments(row))]
    # A draft that builds no contract shows its problem, and no preview or diff.
    refused = SidecarCheck(extension, problem, "", [], "", variables, raw.prose_conditions, [])
    if problem:
        return refused
    try:
        draft = contract_from_mcp(
            row.server.name, base, annotations_trusted=row.annotations_trusted, extension=extension
        )
    except ContractError as exc:
        return replace(refused, problem=exc.reason, where=exc.path)
    obligations = _obligations(draft, sample)
    gaps_now = {o["key"] for o in current if o["gap"] == "provider_gap"}
    gaps_after = {o["key"] for o in obligations if o["gap"] == "provider_gap"}
    where = f"{row.name}@{row.digest[7:19]} x-preflight"
    diff = json_diff(sidecar_of(row), extension, fromfile=where, tofile="draft x-preflight")
    return replace(
        refused,
        obligations=obligations,
        diff=diff,
        variables=[*variables, *(f"measure.{m}" for m in sorted(draft.extension.measures or {}))],
        resolves=sorted(gaps_now - gaps_after),
    )


def sidecar_arguments(row: models.ToolContract) -> list[str]:
    """The argument paths a side-car may name (slots, conditions), in order."""
    plan = compile_plan(storage.engine_contract(row))
    return sorted(plan.arguments)


def sidecar_export(server: models.Server) -> dict[str, Any]:
    """The server's side-car file: every current tool's x-preflight, as `load_sidecars` reads it back."""
    rows = models.ToolContract.objects.filter(server=server, current=True, valid=True).order_by("name")
    tools = {r.name: sidecar_of(r) for r in rows if sidecar_of(r)}
    return {
        "server": server.name,
        "source": f"exported from the console at {timezone.now().isoformat()}",
        "tools": tools,
    }
