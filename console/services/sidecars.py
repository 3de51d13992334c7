"""The contract workbench's writes: a tool's side-car saved as a contract version, side-car files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from console import models
from console.audit import audit_append
from console.errors import BadInput, Conflict, NotFound, Unprocessable
from console.selectors.sidecars import sidecar_check
from console.services.catalog import CatalogImport, catalog_import
from console.services.common import identity
from console.services.executions import execution_repreflight
from console.services.gap_reports import gap_report_set_status
from preflight import ContractError
from preflight.sidecars import parse_sidecar


def sidecar_compose(*, text: str, fields: Mapping[str, Any]) -> tuple[Any, str]:
    """The draft: the JSON text with the form's fields laid over it. Returns (extension, problem)."""
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        return None, f"the JSON is not valid: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    if not isinstance(data, dict):
        return None, "the side-car is a JSON object"
    if fields.get("state_change", "").strip():
        data["state_change"] = fields["state_change"].strip()
    if fields.get("prose_reviewed"):
        data["prose_reviewed"] = True
    notices = [n.strip() for n in str(fields.get("notices", "")).splitlines() if n.strip()]
    if notices:
        data["notices"] = notices
    for name, slot in (fields.get("slots") or {}).items():
        cfg = {k: v for k, v in slot.items() if v not in (None, "", False)}
        if cfg:
            current = data.setdefault("slots", {})
            if isinstance(current, dict):
                current[name] = {**current.get(name, {}), **cfg}
    return data, ""


@dataclass(frozen=True, slots=True)
class SidecarSaved:
    contract: models.ToolContract
    resolved_reports: list[int]
    rechecked: list[str]  # executions preflighted again under the new version


@transaction.atomic
def sidecar_save(*, contract_id: Any, extension: Any, why: str, user: AbstractBaseUser) -> SidecarSaved:
    """Save a tool's side-car as a new contract version (recording who and why), mark the provider-gap
    reports it resolves, and preflight again the executions held under the version it replaces."""
    if not why.strip():
        raise BadInput("invalid", "why: say why the side-car changes (it goes into the audit record)")
    try:
        row = models.ToolContract.objects.select_related("server").get(pk=contract_id)
    except (models.ToolContract.DoesNotExist, ValueError, TypeError):
        raise NotFound("unknown_contract", f"no contract {contract_id}") from None
    if not row.current:
        raise Conflict(
            "not_current", f"{row} is not the current version: write the side-car of the current one"
        )
    check = sidecar_check(row=row, extension=extension)
    if not check.ok:
        raise Unprocessable("invalid_sidecar", f"{check.where or 'x-preflight'}: {check.problem}")
    who = identity(user)
    srv = models.Server.objects.select_for_update().get(pk=row.server_id)
    definitions = [
        r.definition for r in models.ToolContract.objects.filter(server=srv, current=True).order_by("name")
    ]
    result = catalog_import(
        server=srv.name,
        tools=definitions,
        annotations_trusted=srv.annotations_trusted,
        actor=who,
        extensions={row.name: extension},
    )
    new = models.ToolContract.objects.get(server=srv, name=row.name, current=True)
    if new.pk == row.pk:
        raise Conflict("unchanged", "the side-car is the one this version already has")
    reports = list(
        models.GapReport.objects.select_for_update()
        .filter(cls="provider_gap", server=srv.name, tool=row.name, slot__in=check.resolves)
        .exclude(status="resolved")
    )
    for report in reports:
        gap_report_set_status(
            report_id=report.pk,
            status="resolved",
            user=user,
            note=f"side-car {new.digest[7:19]}: {why.strip()}",
        )
    rows = models.GapRow.objects.filter(
        record__contract=row, cls="provider_gap", slot__in=check.resolves
    ).count()
    audit_append(
        kind="sidecar",
        execution_id=None,
        body={
            "server": srv.name,
            "tool": row.name,
            "from": row.digest,
            "to": new.digest,
            "actor": who,
            "why": why.strip(),
            "resolves": check.resolves,
            "gap_rows_resolved": rows,
            "reports_resolved": [r.pk for r in reports],
            "imported": [t.name for t in result.tools if t.version == "new"],
        },
    )
    held = list(
        models.Execution.objects.filter(
            contract=row, verdict="hold", rejected_at__isnull=True, expired_at__isnull=True
        )
        .order_by("created_at")
        .values_list("pk", flat=True)[:100]
    )
    for pk in held:
        execution_repreflight(execution_id=pk, trigger="contract")
    return SidecarSaved(new, [r.pk for r in reports], [str(pk) for pk in held])


@transaction.atomic
def sidecar_import(*, server: models.Server, content: bytes, user: AbstractBaseUser) -> CatalogImport:
    """Apply an uploaded side-car file to a server's current tools (as `manage.py load_sidecars` does)."""
    try:
        sidecar = parse_sidecar(json.loads(content.decode("utf-8")), "the file")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput("invalid", f"the file is not JSON: {exc}") from None
    except ContractError as exc:
        raise BadInput("invalid", f"{exc.reason}{f' at {exc.path}' if exc.path else ''}") from None
    if sidecar.server != server.name:
        raise BadInput("invalid", f"the file is the side-car of {sidecar.server!r}, not of {server.name!r}")
    srv = models.Server.objects.select_for_update().get(pk=server.pk)
    rows = {r.name: r for r in models.ToolContract.objects.filter(server=srv, current=True)}
    unknown = sorted(set(sidecar.tools) - set(rows))
    if unknown:
        raise BadInput("invalid", f"no current tool {', '.join(unknown)} on {server.name}")
    for name, extension in sidecar.tools.items():
        check = sidecar_check(row=rows[name], extension=extension)
        if not check.ok:
            raise Unprocessable("invalid_sidecar", f"{name}: {check.where or 'x-preflight'}: {check.problem}")
    who = identity(user)
    result = catalog_import(
        server=srv.name,
        tools=[rows[n].definition for n in sorted(rows)],
        annotations_trusted=srv.annotations_trusted,
        actor=who,
        extensions=sidecar.tools,
    )
    audit_append(
        kind="sidecar",
        execution_id=None,
        body={
            "server": srv.name,
            "actor": who,
            "why": "imported from a side-car file",
            "tools": sorted(sidecar.tools),
        },
    )
    return result
