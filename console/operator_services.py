"""What operators do: provider gap reports, the catalog (imports, trust, versions) and user/org rules.

Writes are keyword-only, one transaction each, and append to the audit chain inside it (as in
console/services.py, whose catalog and rules services these build on). Reads that several pages share
(gap evidence, contract previews, diffs, rules validation) live here too, so views stay thin.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction
from django.db.models import Count, Max, Min
from django.utils import timezone

from console import connectors, egress, models, records, services
from console.api import parsers as json_text
from console.audit import audit_append
from console.errors import BadInput, Conflict, NotFound, Unprocessable
from preflight import (
    Answer,
    ChecklistError,
    ContractError,
    Evidence,
    ExecutionRequest,
    compile_plan,
    contract_from_mcp,
    load_rules,
    preflight,
)
from preflight.canonical import canonical_json
from preflight.sidecars import parse_sidecar

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


def actor_name(user: AbstractBaseUser) -> str:
    return f"user:{user.get_username()}"


def gap_kind(cls: str, slot: str) -> str:
    """The finer cause of a gap, read off its slot key (what the provider would have to change)."""
    if cls == "provider_gap":
        if slot.startswith("label:"):
            return "malformed label"
        if slot.startswith("cond:prose-"):
            return "undeclared condition"
        if slot.startswith("schema:"):
            return "missing schema"
        if slot == "fixed:intended_change":
            return "undeclared state change"
        return "other"
    if cls == "implementation_gap":
        return "unsupported schema"
    if cls == "user_gap":
        return "not said by the user"
    if cls == "source_gap":
        return "no source had a value"
    return cls


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


# ---- provider gap reports ------------------------------------------------------------------------------


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
    other_digests: list[str] = field(default_factory=list)

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


@transaction.atomic
def gap_report_create(
    *,
    cls: str,
    server: str,
    tool: str,
    slot: str,
    contract_digest: str,
    detail: str,
    title: str,
    notes: str,
    user: User,
) -> models.GapReport:
    """File a report from a recorded gap. The evidence (counts, ids) is recomputed here from the gap rows,
    never taken from the form: the report says what the record says."""
    if cls not in REPORTABLE_CLASSES:
        raise BadInput("invalid", f"cls: only {', '.join(REPORTABLE_CLASSES)} is reported to a provider")
    evidence = gap_evidence(cls=cls, server=server, tool=tool, slot=slot, contract_digest=contract_digest)
    title = (title or "").strip() or default_title(evidence)
    if len(title) > 300:
        raise BadInput("invalid", "title: at most 300 characters")
    detail = (detail or "").strip() or (evidence.details[0] if evidence.details else slot)
    now = timezone.now()
    who = actor_name(user)
    report = models.GapReport.objects.create(
        cls=cls,
        server=server,
        tool=tool,
        contract_digest=evidence.contract_digest,
        slot=slot,
        detail=detail,
        title=title,
        notes=(notes or "").strip(),
        evidence=evidence.to_json(),
        status="open",
        history=[{"status": "open", "at": now.isoformat(), "by": who, "note": "filed"}],
        created_by=user,
    )
    audit_append(
        kind="gap_report",
        execution_id=None,
        body={
            "action": "create",
            "report": report.pk,
            "class": cls,
            "server": server,
            "tool": tool,
            "slot": slot,
            "contract_digest": evidence.contract_digest,
            "records": evidence.records,
            "executions": evidence.executions,
            "actor": who,
        },
    )
    return report


@transaction.atomic
def gap_report_set_status(
    *, report_id: Any, status: str, user: AbstractBaseUser, note: str = ""
) -> models.GapReport:
    if status not in models.GapReport.STATUSES:
        raise BadInput("invalid", f"status: one of {', '.join(models.GapReport.STATUSES)}")
    try:
        report = models.GapReport.objects.select_for_update().get(pk=report_id)
    except (models.GapReport.DoesNotExist, ValueError, TypeError):
        raise NotFound("unknown_report", f"no gap report {report_id}") from None
    if report.status == status:
        raise Conflict("unchanged", f"the report is already {status}")
    who = actor_name(user)
    previous = report.status
    report.status = status
    report.history = [
        *report.history,
        {"status": status, "at": timezone.now().isoformat(), "by": who, "note": (note or "").strip()},
    ]
    report.save(update_fields=["status", "history", "updated_at"])
    audit_append(
        kind="gap_report",
        execution_id=None,
        body={"action": "status", "report": report.pk, "from": previous, "to": status, "actor": who},
    )
    return report


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


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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
        lines += [f"- {_md_escape(d)}" for d in ev["details"]]
        lines.append("")
    refs = ev.get("record_refs") or []
    if refs:
        lines += ["| execution | record | record digest |", "|---|---|---|"]
        lines += [f"| `{r['execution']}` | #{r['seq']} | `{r['record_digest']}` |" for r in refs]
        if ev.get("records", 0) > len(refs):
            lines.append("")
            lines.append(f"(the {len(refs)} most recent of {ev['records']} records)")
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


# ---- catalog -------------------------------------------------------------------------------------------


@transaction.atomic
def server_set_trust(*, server_id: Any, trusted: bool, user: AbstractBaseUser) -> services.CatalogImport:
    """Mark a server's annotations trusted (or not). Trust is part of each contract's digest, so the current
    tools are imported again under the new setting: new versions; records keep the versions they used."""
    try:
        srv = models.Server.objects.select_for_update().get(pk=server_id)
    except (models.Server.DoesNotExist, ValueError, TypeError):
        raise NotFound("unknown_server", f"no server {server_id}") from None
    if srv.annotations_trusted == trusted:
        raise Conflict(
            "unchanged", f"{srv.name}: annotations are already {'trusted' if trusted else 'untrusted'}"
        )
    who = actor_name(user)
    definitions = [
        row.definition
        for row in models.ToolContract.objects.filter(server=srv, current=True).order_by("name")
    ]
    result = services.catalog_import(
        server=srv.name, tools=definitions, annotations_trusted=trusted, actor=who
    )
    audit_append(
        kind="annotation_trust",
        execution_id=None,
        body={
            "server": srv.name,
            "trusted": trusted,
            "actor": who,
            "tools": [{"name": t.name, "digest": t.contract_digest} for t in result.tools],
        },
    )
    return result


class PastedCatalogError(Exception):
    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message if line is None else f"line {line}: {message}")


def parse_tools_list(text: str) -> list[Any]:
    """A pasted `tools/list` result: `{"tools": [...]}`, a JSON-RPC answer carrying one, or a bare list."""
    try:
        data = json_text.loads(text)
    except json.JSONDecodeError as exc:
        raise PastedCatalogError(f"not JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    if isinstance(data, Mapping) and isinstance(data.get("result"), Mapping):
        data = data["result"]
    if isinstance(data, Mapping) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise PastedCatalogError('expected a tools/list result: {"tools": [...]} or a list of tools', 1)
    if not data:
        raise PastedCatalogError("the list has no tools", 1)
    return data


def catalog_import_pasted(
    *, server: str, text: str, annotations_trusted: bool | None, user: AbstractBaseUser
) -> services.CatalogImport:
    tools = parse_tools_list(text)
    return services.catalog_import(
        server=server.strip(), tools=tools, annotations_trusted=annotations_trusted, actor=actor_name(user)
    )


def mcp_connector(*, kind: str, command: str = "", url: str = "") -> dict[str, Any]:
    """A connector spec from the form: a stdio command line (shell-quoted) or a streamable HTTP URL."""
    if kind == "mcp_stdio":
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise BadInput("invalid", f"command: {exc}") from None
        if not argv:
            raise BadInput("invalid", "command: required for a stdio server")
        spec: dict[str, Any] = {"kind": "mcp_stdio", "command": argv}
    elif kind == "mcp_http":
        spec = {"kind": "mcp_http", "url": url.strip()}
    else:
        raise BadInput("invalid", "kind: mcp_stdio or mcp_http")
    try:
        return connectors.checked_connector(spec)
    except egress.EgressRefused as exc:
        detail = exc.detail.removeprefix("connector.")
        if exc.code == "command_not_allowed":
            detail = (
                "command: not allowed on this host (the deployment lists them in PREFLIGHT_MCP_STDIO_ALLOW)"
            )
        raise (BadInput if exc.code == "invalid_connector" else Unprocessable)(exc.code, detail) from None


def catalog_import_from_mcp(
    *,
    server: str,
    connector: Mapping[str, Any],
    annotations_trusted: bool | None,
    user: AbstractBaseUser,
    timeout_s: float = 15.0,
) -> services.CatalogImport:
    """List a live MCP server's tools and import them; the connector is kept so the gate can reach it."""
    try:
        tools = connectors.list_tools(connector, timeout_s=timeout_s)
    except connectors.ToolCallFailed as exc:
        raise Unprocessable("list_failed", f"tools/list failed: {exc}") from None
    return services.catalog_import(
        server=server.strip(),
        tools=tools,
        annotations_trusted=annotations_trusted,
        connector=connector,
        actor=actor_name(user),
    )


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
    plan = compile_plan(records.engine_contract(row), records.active_rules())
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


# ---- user/org rules --------------------------------------------------------------------------------------


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
    """Save edited rules as a new active version (through services.ruleset_create). A version number is
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
    return services.ruleset_create(data=data, actor=actor_name(user))


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


@transaction.atomic
def operator_token_create(*, name: str, username: str) -> tuple[models.AgentToken, str]:
    """An API token that acts as the operator `username`; printed once, only its SHA-256 stored. It carries
    no role itself: every call checks that the user still holds the operator role (api/permissions.py)."""
    from django.contrib.auth import get_user_model

    from console.api.permissions import operator_holds_role

    if not name:
        raise BadInput("invalid", "name: required, a non-empty string")
    user_model = get_user_model()
    try:
        user = user_model.objects.get(**{user_model.USERNAME_FIELD: username})
    except user_model.DoesNotExist:
        raise NotFound("unknown_user", f"no user {username!r}") from None
    if not operator_holds_role(user.pk):
        raise BadInput(
            "not_an_operator",
            f"{username} does not hold the operator role: manage.py grant_role {username} operator",
        )
    token = "pfo_" + secrets.token_urlsafe(32)
    row = models.AgentToken.objects.create(
        name=name, token_sha256=hashlib.sha256(token.encode()).hexdigest(), prefix=token[:10], user=user
    )
    audit_append(
        kind="operator_token", execution_id=None, body={"name": name, "prefix": row.prefix, "user": username}
    )
    return row, token


# ---- the contract workbench: a tool's side-car, written, previewed and saved as a contract version ---------


@dataclass(frozen=True, slots=True)
class SidecarCheck:
    """What the workbench shows for one draft side-car of one tool version."""

    extension: Any  # the x-preflight as it would be saved (form fields merged into the JSON)
    problem: str  # "" when the draft builds a contract
    where: str  # the offending part, e.g. x-preflight/conditions/0/check
    obligations: list[dict[str, Any]]  # the draft's obligations for the sample request
    current: list[dict[str, Any]]  # the current version's, for the same request
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


def _sample_evidence(sample: Mapping[str, Any]) -> Evidence:
    # Sample values stand in for a user's answers: the preview shows what is left once they are given.
    answers = {f"arg:{k}": Answer(v, "preview") for k, v in sample.items()}
    answers |= {
        "fixed:action_name": Answer("preview", "preview"),
        "fixed:timing": Answer("immediate", "preview"),
    }
    return Evidence(now=timezone.now(), answers=answers)


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
    plan = compile_plan(contract, records.active_rules())
    record = preflight(plan, ExecutionRequest(principal="preview"), _sample_evidence(sample))
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
    current_contract = records.engine_contract(row)
    current = _obligations(current_contract, sample)
    old = pretty_json(sidecar_of(row))
    variables = ["principal", "env.<key>", *(f"arg.{p}" for p in sorted(sidecar_arguments(row)))]
    if problem:
        return SidecarCheck(extension, problem, "", [], current, "", variables, raw.prose_conditions, [])
    try:
        draft = contract_from_mcp(
            row.server.name, base, annotations_trusted=row.annotations_trusted, extension=extension
        )
    except ContractError as exc:
        return SidecarCheck(
            extension, exc.reason, exc.path, [], current, "", variables, raw.prose_conditions, []
        )
    variables += [f"measure.{m}" for m in sorted(draft.extension.measures or {})]
    obligations = _obligations(draft, sample)
    gaps_now = {o["key"] for o in current if o["gap"] == "provider_gap"}
    gaps_after = {o["key"] for o in obligations if o["gap"] == "provider_gap"}
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            pretty_json(extension).splitlines(keepends=True),
            fromfile=f"{row.name}@{row.digest[7:19]} x-preflight",
            tofile="draft x-preflight",
        )
    )
    return SidecarCheck(
        extension,
        "",
        "",
        obligations,
        current,
        diff,
        variables,
        raw.prose_conditions,
        sorted(gaps_now - gaps_after),
    )


def sidecar_arguments(row: models.ToolContract) -> list[str]:
    """The argument paths a side-car may name (slots, conditions), in order."""
    plan = compile_plan(records.engine_contract(row))
    return sorted(plan.arguments)


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
    who = actor_name(user)
    srv = models.Server.objects.select_for_update().get(pk=row.server_id)
    definitions = [
        r.definition for r in models.ToolContract.objects.filter(server=srv, current=True).order_by("name")
    ]
    result = services.catalog_import(
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
    rechecked = []
    for pk in held:
        services.execution_repreflight(execution_id=pk, trigger="contract")
        rechecked.append(str(pk))
    return SidecarSaved(new, [r.pk for r in reports], rechecked)


def sidecar_export(server: models.Server) -> dict[str, Any]:
    """The server's side-car file: every current tool's x-preflight, as `load_sidecars` reads it back."""
    rows = models.ToolContract.objects.filter(server=server, current=True, valid=True).order_by("name")
    tools = {r.name: sidecar_of(r) for r in rows if sidecar_of(r)}
    return {
        "server": server.name,
        "source": f"exported from the console at {timezone.now().isoformat()}",
        "tools": tools,
    }


@transaction.atomic
def sidecar_import(
    *, server: models.Server, content: bytes, user: AbstractBaseUser
) -> services.CatalogImport:
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
    who = actor_name(user)
    result = services.catalog_import(
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
