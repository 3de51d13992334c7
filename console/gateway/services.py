"""The gateway's own writes. Same rules as console/services/: keyword-only, one transaction each, every
action on the audit chain. Everything else the gateway does goes through console/services/, as the REST
API's calls do (execution_create, execution_answer, execution_run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from console import models, storage
from console.audit import audit_append
from console.services.catalog import _extension_of
from console.services.common import lock_execution
from console.services.preflights import _store_record
from preflight import ContractError, contract_from_mcp
from preflight.approvals import value_digest
from preflight.canonical import canonical_json, digest
from preflight.record import Finding, Gap, Record, SlotState

PIN_SLOT = "fixed:tool"
CHECKLIST = "gateway-pin"


def pinned_contract(server: str, tool: str) -> models.ToolContract | None:
    return (
        models.ToolContract.objects.select_related("server")
        .filter(server__name=server, name=tool, current=True, valid=True)
        .first()
    )


# Live definition (as canonical JSON) -> its contract digest: building a contract checks the whole schema,
# and the gateway asks at every call about a definition that almost never changes.
_DIGESTS: dict[str, str | None] = {}


def live_digest(
    server: str, tool: Mapping[str, Any], *, annotations_trusted: bool, sidecar: Mapping[str, Any] | None
) -> str | None:
    """The contract digest a catalog import would give the live definition (None: not a valid contract)."""
    key = canonical_json([server, dict(tool), annotations_trusted, sidecar]).decode()
    if key in _DIGESTS:
        return _DIGESTS[key]
    try:
        found: str | None = contract_from_mcp(
            server,
            tool,
            annotations_trusted=annotations_trusted,
            extension=_extension_of(tool, sidecar),
        ).digest
    except ContractError:
        found = None
    if len(_DIGESTS) > 10_000:
        _DIGESTS.clear()
    _DIGESTS[key] = found
    return found


@transaction.atomic
def gateway_pin_refusal(
    *,
    server: str,
    tool: str,
    live: Mapping[str, Any] | None,
    live_contract_digest: str | None,
    principal: str,
    arguments: Mapping[str, Any],
    token: models.AgentToken | None,
    actor: str,
) -> models.Execution:
    """A call refused because the upstream's live definition is not the pinned one (a description or schema
    changed after import, or the tool is gone). Nothing was sent. Recorded as an execution whose record
    blocks with a provider gap (so the dashboards and gap reports show it), and the live definition is kept
    as a version that is not current, for the operator to compare and re-pin with a catalog import."""
    pinned = pinned_contract(server, tool)
    srv = pinned.server if pinned is not None else models.Server.objects.filter(name=server).first()
    if live is not None and live_contract_digest is not None and srv is not None:
        models.ToolContract.objects.get_or_create(
            server=srv,
            name=tool,
            digest=live_contract_digest,
            defaults={
                "definition": dict(live),
                "annotations_trusted": srv.annotations_trusted,
                "problems": [{"class": "provider_gap", "where": "", "detail": "changed after it was pinned"}],
                "valid": True,
                "current": False,
            },
        )
    pinned_digest = pinned.digest if pinned is not None else None
    if live is None:
        detail = f"the upstream no longer lists {tool!r}"
    else:
        detail = (
            f"the upstream definition changed after it was pinned ({pinned_digest} → {live_contract_digest})"
        )
    now = timezone.now()
    found = Finding("observed", "error", {"pinned": pinned_digest, "live": live_contract_digest}, detail)
    slot = SlotState.provider_gap(
        PIN_SLOT, "the action", detail, kind="value", defined_by="fixed", findings=(found,)
    )
    record = Record.one_open_slot(
        verdict="block",
        server=server,
        tool=tool,
        contract_digest=pinned_digest or "",
        principal=principal,
        checklist_version=CHECKLIST,
        slot=slot,
        gaps=(Gap("provider_gap", PIN_SLOT, detail),),
        reason=f"refused before sending: {detail}",
        evaluated_at=now.isoformat(),
    )
    request = {
        "server": server,
        "tool": tool,
        "principal": principal,
        "arguments_digest": digest(dict(arguments)),
    }
    # The caller's token owns it, as any execution it submits: the REST API shows it to that token only.
    execution = models.Execution(principal=principal, token=token, request=request, verdict="")
    _store_record(execution, record, pinned, trigger="create", audit={"actor": actor, "pin_refused": True})
    return execution


@transaction.atomic
def gateway_read_only_pass(
    *,
    contract: models.ToolContract,
    principal: str,
    arguments: Mapping[str, Any],
    token: models.AgentToken | None,
    actor: str,
) -> None:
    """A read-only call on a server whose annotations the operator trusts, passed without the full gate. The
    pass itself is on the audit chain, with what was passed."""
    audit_append(
        kind="read_only_pass",
        execution_id=None,
        body={
            "server": contract.server.name,
            "tool": contract.name,
            "contract_digest": contract.digest,
            "principal": principal,
            "arguments_digest": digest(dict(arguments)),
            "annotations_trusted": contract.annotations_trusted,
            "token": token.pk if token is not None else None,
            "actor": actor,
        },
    )


@transaction.atomic
def gateway_decline(*, execution_id: Any, action: str, asked: list[str], principal: str, actor: str) -> None:
    """The user declined or cancelled an elicitation: recorded, and the call ends with nothing executed."""
    execution = lock_execution(execution_id)
    audit_append(
        kind="elicitation_" + ("declined" if action == "decline" else "cancelled"),
        execution_id=execution.pk,
        body={"action": action, "asked": asked, "principal": principal, "actor": actor},
    )


@transaction.atomic
def gateway_confirm(*, execution_id: Any, payload: Any, principal: str, actor: str) -> None:
    """The user's yes to the call (a trusted `destructiveHint`), bound to the payload it was shown."""
    execution = lock_execution(execution_id)
    latest = storage.latest_record(execution)
    audit_append(
        kind="action_confirmed",
        execution_id=execution.pk,
        body={
            "payload_digest": value_digest(payload),
            "record_seq": latest.seq,
            "principal": principal,
            "actor": actor,
        },
    )
