"""Gap reports: the gap classes, the evidence the gap rows hold for one gap, and a report's exports."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min

from console import models
from console.errors import NotFound

GAP_CLASSES = ("user_gap", "provider_gap", "source_gap", "implementation_gap")
GAP_CLASS_LABELS = {
    "user_gap": "User gaps",
    "provider_gap": "Provider gaps",
    "source_gap": "Source gaps",
    "implementation_gap": "Implementation gaps",
}
# Whose problem each class is: the dashboards lead with this, because the fix goes to different people.
GAP_CLASS_OWNERS = {
    "user_gap": "what users leave out — a conversation-design problem",
    "provider_gap": "what the tool definition leaves out — a tool-definition problem",
    "source_gap": "system slots no permitted source could fill — a lookup/preset problem",
    "implementation_gap": "schema constructs this implementation cannot interpret — our problem",
}
# Only these go to a provider: the others are fixed by us or by the conversation, not by the tool's author.
REPORTABLE_CLASSES = ("provider_gap",)
MAX_EVIDENCE_IDS = 100


# A provider gap's kind by its slot key's prefix, and the kind of each other class.
_PROVIDER_KINDS = (
    ("label:", "malformed label"),
    ("cond:prose-", "undeclared condition"),
    ("schema:", "missing schema"),
)
_KINDS = {
    "implementation_gap": "unsupported schema",
    "user_gap": "not said by the user",
    "source_gap": "no source had a value",
}


def gap_kind(cls: str, slot: str) -> str:
    """The finer cause of a gap, read off its slot key (what the provider would have to change)."""
    if cls != "provider_gap":
        return _KINDS.get(cls, cls)
    if slot == "fixed:intended_change":
        return "undeclared state change"
    return next((kind for prefix, kind in _PROVIDER_KINDS if slot.startswith(prefix)), "other")


_ASKS = {
    "malformed label": (
        "A line of the description looks like a label but does not parse. Labels are one per line: "
        "`[required:<argument>] reason`, `[confirm:<argument>] text`, `[confirm] text` or `[notice] text`. "
        "A broken label is an obligation we cannot read, so every call holds until it is fixed."
    ),
    "undeclared condition": (
        "The description states a condition in prose only. Please declare it as data, e.g. in "
        '`x-preflight.conditions` (`{"id": ..., "check": "<CEL expression>", "on_false": "hold"}`) with the '
        "measure it needs, so it can be checked before the call instead of being held for a person. An "
        "explicit user confirmation of the whole call is `x-preflight.consent`; a condition another run can "
        "change (only once) wants `recheck: true` or an `effect_key`."
    ),
    "missing schema": (
        "The tool publishes no `inputSchema`. A missing schema is not a tool without arguments: please "
        "publish a JSON Schema (2020-12) object schema for the arguments, with `required` listed."
    ),
    "undeclared state change": (
        "The tool does not declare what it changes. Please add `x-preflight.state_change` (one sentence: "
        "what changes, for whom) so callers can confirm the intended change before the call."
    ),
    "other": "The tool definition lacks something a call needs; see the detail above.",
}


@dataclass(frozen=True, slots=True)
class GapEvidence:
    cls: str
    server: str
    tool: str
    slot: str
    contract_digest: str
    details: list[str]
    records: int
    executions: int
    execution_ids: list[str]
    record_refs: list[dict[str, Any]]
    first_seen: datetime | None
    last_seen: datetime | None
    other_digests: list[str]

    @property
    def kind(self) -> str:
        return gap_kind(self.cls, self.slot)

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "executions": self.executions,
            "execution_ids": self.execution_ids,
            "record_refs": self.record_refs,
            "details": self.details,
            "first_seen": self.first_seen.isoformat() if self.first_seen else None,
            "last_seen": self.last_seen.isoformat() if self.last_seen else None,
            "other_digests": self.other_digests,
        }


def gap_evidence(*, cls: str, server: str, tool: str, slot: str, contract_digest: str = "") -> GapEvidence:
    """What the gap rows say about one gap: the contract version it was seen on and the records affected.

    Without a digest, the version the gap was seen on most recently. Counts are over that version only:
    a report is about one definition, and a later version may have fixed it."""
    rows = models.GapRow.objects.filter(cls=cls, server=server, tool=tool, slot=slot)
    digests = list(
        rows.values("record__contract__digest")
        .annotate(last=Max("created_at"))
        .order_by("-last")
        .values_list("record__contract__digest", flat=True)
    )
    if not digests:
        raise NotFound("unknown_gap", f"no {cls} on {server}/{tool} {slot} was recorded")
    if not contract_digest:
        contract_digest = digests[0] or ""
    elif contract_digest not in digests:
        raise NotFound("unknown_gap", f"no {cls} on {server}/{tool} {slot} with contract {contract_digest}")
    rows = rows.filter(record__contract__digest=contract_digest) if contract_digest else rows
    agg = rows.aggregate(
        records=Count("record", distinct=True),
        executions=Count("execution", distinct=True),
        first=Min("created_at"),
        last=Max("created_at"),
    )
    execution_ids = [
        str(e)
        for e in rows.values("execution_id")
        .annotate(last=Max("created_at"))
        .order_by("-last")
        .values_list("execution_id", flat=True)[:MAX_EVIDENCE_IDS]
    ]
    refs = [
        {"execution": str(ex), "seq": seq, "record_digest": rd}
        for ex, seq, rd in rows.order_by("-created_at").values_list(
            "execution_id", "record__seq", "record__record_digest"
        )[:MAX_EVIDENCE_IDS]
    ]
    details = list(rows.order_by("detail").values_list("detail", flat=True).distinct()[:5])
    return GapEvidence(
        cls=cls,
        server=server,
        tool=tool,
        slot=slot,
        contract_digest=contract_digest,
        details=details,
        records=agg["records"],
        executions=agg["executions"],
        execution_ids=execution_ids,
        record_refs=refs,
        first_seen=agg["first"],
        last_seen=agg["last"],
        other_digests=[d for d in digests if d and d != contract_digest],
    )


def default_title(evidence: GapEvidence) -> str:
    return f"{evidence.server}/{evidence.tool}: {evidence.kind} ({evidence.slot})"


def report_json(report: models.GapReport) -> dict[str, Any]:
    """The export a provider receives (and a tracker can ingest). Stable field names; more may be added."""
    kind = gap_kind(report.cls, report.slot)
    return {
        "format": "preflight.gap_report/1",
        "id": report.pk,
        "title": report.title,
        "status": report.status,
        "gap": {"class": report.cls, "kind": kind, "slot": report.slot, "detail": report.detail},
        "tool": {"server": report.server, "name": report.tool, "contract_digest": report.contract_digest},
        "ask": _ASKS.get(kind, _ASKS["other"]),
        "evidence": report.evidence,
        "notes": report.notes,
        "filed_by": report.history[0]["by"] if report.history else None,
        "filed_at": report.created_at.isoformat(),
        "history": report.history,
    }


def report_markdown(report: models.GapReport) -> str:
    data = report_json(report)
    ev = data["evidence"]
    lines = [
        f"# Provider gap report #{report.pk}: {report.title}",
        "",
        f"- **Status:** {report.status}",
        f"- **Tool:** `{report.server}/{report.tool}`",
        f"- **Contract digest:** `{report.contract_digest or '(none)'}`",
        f"- **Gap:** {report.cls} — {data['gap']['kind']}",
        f"- **Slot:** `{report.slot}`",
        f"- **Filed:** {data['filed_at']} by {data['filed_by']}",
        "",
        "## What is missing",
        "",
        report.detail,
        "",
        "## What we ask",
        "",
        data["ask"],
        "",
        "## Evidence",
        "",
        f"Seen on **{ev.get('records', 0)} preflight records** of **{ev.get('executions', 0)} executions**"
        f" between {ev.get('first_seen') or '?'} and {ev.get('last_seen') or '?'}.",
        "",
    ]
    if ev.get("details"):
        lines += ["Details as recorded:", ""]
        lines += ["- " + d.replace("|", "\\|").replace("\n", " ") for d in ev["details"]]
        lines.append("")
    refs = ev.get("record_refs") or []
    if refs:
        lines += ["| execution | record | record digest |", "|---|---|---|"]
        lines += [f"| `{r['execution']}` | #{r['seq']} | `{r['record_digest']}` |" for r in refs]
        if ev.get("records", 0) > len(refs):
            lines += ["", f"(the {len(refs)} most recent of {ev['records']} records)"]
        lines.append("")
    if report.notes:
        lines += ["## Notes", "", report.notes, ""]
    if len(report.history) > 1:
        lines += ["## History", ""]
        for h in report.history:
            note = f" — {h['note']}" if h.get("note") else ""
            lines.append(f"- {h['at']}: {h['status']} by {h['by']}{note}")
        lines.append("")
    return "\n".join(lines)
