"""Operator pages: provider gap reports, the catalog (imports, trust, versions and diffs) and user/org rules.

Every page needs a login and the operator role (gap reports can also be read by auditors). Forms post with
CSRF and work without JavaScript; where htmx is present a few parts swap in place (`{% partialdef %}`).
Writes go through console/services/, which appends to the audit chain.
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import zip_longest
from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Count, Max, Prefetch, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import models, notifications
from console.errors import ServiceError
from console.selectors import catalog as catalog_selectors
from console.selectors.catalog import contract_preview, pretty_json
from console.selectors.gap_reports import (
    GAP_CLASSES,
    REPORTABLE_CLASSES,
    default_title,
    gap_evidence,
    report_json,
    report_markdown,
)
from console.selectors.rules import checklist_parts, rule_slots
from console.selectors.sidecars import (
    sidecar_arguments,
    sidecar_check,
    sidecar_export,
    sidecar_of,
)
from console.services.catalog import (
    PastedCatalogError,
    catalog_import_from_mcp,
    catalog_import_pasted,
    mcp_connector,
    server_set_trust,
)
from console.services.gap_reports import gap_report_create, gap_report_set_status
from console.services.rules import RulesCheck, check_rules_text, next_version, ruleset_save
from console.services.sidecars import sidecar_compose, sidecar_import, sidecar_save
from console.web.access import role_required
from console.web.filters import form_problems
from console.web.requests import SignedInRequest, render_partial
from preflight.canonical import digest

operator_only = role_required("operator")
operator_or_auditor = role_required("operator", "auditor")


def _error(request: SignedInRequest, title: str, reason: str, status: int) -> HttpResponse:
    return render(request, "console/operator/error.html", {"title": title, "reason": reason}, status=status)


# ---- provider gap reports ------------------------------------------------------------------------------


class GapReportForm(forms.Form):
    cls = forms.ChoiceField(choices=[(c, c) for c in GAP_CLASSES], widget=forms.HiddenInput)
    server = forms.CharField(max_length=200, widget=forms.HiddenInput)
    tool = forms.CharField(max_length=200, widget=forms.HiddenInput)
    slot = forms.CharField(max_length=500, widget=forms.HiddenInput)
    contract_digest = forms.CharField(max_length=80, required=False, widget=forms.HiddenInput)
    title = forms.CharField(max_length=300)
    detail = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), help_text="what the definition lacks")
    notes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        help_text="anything the provider should know (sent with the report)",
    )


class StatusForm(forms.Form):
    status = forms.ChoiceField(choices=[(s, s) for s in models.GapReport.STATUSES])
    note = forms.CharField(max_length=500, required=False)


@require_http_methods(["GET", "POST"])
@operator_only
def gap_report_new(request: SignedInRequest) -> HttpResponse:
    source = request.POST if request.method == "POST" else request.GET
    key = {k: source.get(k, "") for k in ("cls", "server", "tool", "slot", "contract_digest")}
    if not all(key[k] for k in ("cls", "server", "tool", "slot")):
        reason = "Open this form from a gap on the dashboards (Report to provider)."
        return _error(request, "Which gap?", reason, status=400)
    try:
        evidence = gap_evidence(**key)
    except ServiceError as exc:
        return _error(request, "No such gap", exc.detail, status=404)
    problem = ""
    initial = {
        **key,
        "contract_digest": evidence.contract_digest,
        "title": default_title(evidence),
        "detail": evidence.details[0] if evidence.details else "",
    }
    form = GapReportForm(request.POST if request.method == "POST" else None, initial=initial)
    if form.is_valid():
        try:
            report = gap_report_create(**form.cleaned_data, user=request.user)
        except ServiceError as exc:
            problem = exc.detail
        else:
            return redirect("operator:gap-report", report.pk)
    if key["cls"] not in REPORTABLE_CLASSES:
        problem = problem or f"{key['cls']} is not sent to providers; only provider gaps are."
    open_reports = models.GapReport.objects.filter(
        server=key["server"], tool=key["tool"], slot=key["slot"], status__in=("open", "sent")
    ).order_by("-created_at")
    return render(
        request,
        "console/operator/gap_report_new.html",
        {"form": form, "evidence": evidence, "problem": problem, "open_reports": open_reports},
        status=422 if request.method == "POST" else 200,
    )


@require_GET
@operator_or_auditor
def gap_reports(request: SignedInRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    reports = models.GapReport.objects.order_by("-created_at")
    if status in models.GapReport.STATUSES:
        reports = reports.filter(status=status)
    else:
        status = ""
    counts = dict(models.GapReport.objects.values_list("status").annotate(n=Count("id")))
    context = {
        "reports": reports[:200],
        "status": status,
        "statuses": [(s, counts.get(s, 0)) for s in models.GapReport.STATUSES],
        "total": sum(counts.values()),
    }
    return render_partial(request, "console/operator/gap_reports.html", context, "list")


def _report_context(report: models.GapReport, problem: str = "") -> dict[str, Any]:
    return {
        "report": report,
        "export": report_json(report),
        "history": [{**h, "at": datetime.fromisoformat(h["at"])} for h in report.history],
        "status_form": StatusForm(initial={"status": report.status}),
        "problem": problem,
    }


@require_GET
@operator_or_auditor
def gap_report_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    report = get_object_or_404(models.GapReport, pk=pk)
    return render(request, "console/operator/gap_report.html", _report_context(report))


@require_POST
@operator_only
def gap_report_status(request: SignedInRequest, pk: int) -> HttpResponse:
    report = get_object_or_404(models.GapReport, pk=pk)
    form = StatusForm(request.POST)
    problem = ""
    if form.is_valid():
        try:
            report = gap_report_set_status(report_id=report.pk, **form.cleaned_data, user=request.user)
        except ServiceError as exc:
            problem = exc.detail
    else:
        problem = "; ".join(form_problems(form))
    if not problem and not request.htmx:
        return redirect("operator:gap-report", report.pk)
    context = _report_context(report, problem)
    status = 200 if request.htmx else 422
    return render_partial(request, "console/operator/gap_report.html", context, "status", status=status)


@require_GET
@operator_or_auditor
def gap_report_export(request: SignedInRequest, pk: int, fmt: str) -> HttpResponse:
    report = get_object_or_404(models.GapReport, pk=pk)
    name = f"gap-report-{report.pk}-{report.server}-{report.tool}"
    name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    if fmt == "md":
        response = HttpResponse(report_markdown(report), content_type="text/markdown; charset=utf-8")
    elif fmt == "json":
        body = json.dumps(report_json(report), indent=2, ensure_ascii=False) + "\n"
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
    else:
        raise Http404("export formats: md, json")
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


# ---- catalog -------------------------------------------------------------------------------------------


# A checkbox cannot say "leave it": unticked leaves a trusted server trusted; its page withdraws trust.
def _trust_field() -> forms.BooleanField:
    help_text = "unticked keeps a server's current trust; withdraw trust on the server's page"
    return forms.BooleanField(required=False, label="trust this server's annotations", help_text=help_text)


class PastedImportForm(forms.Form):
    server = forms.CharField(max_length=200, help_text="the MCP server's name in this catalog")
    tools = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false", "class": "code"}),
        label="tools/list result (JSON)",
        help_text='{"tools": [...]}, a JSON-RPC answer carrying one, or a bare list of Tool objects',
    )
    annotations_trusted = _trust_field()


class McpImportForm(forms.Form):
    server = forms.CharField(max_length=200)
    kind = forms.ChoiceField(
        choices=[("mcp_stdio", "stdio (a command this host runs)"), ("mcp_http", "streamable HTTP (a URL)")],
        widget=forms.RadioSelect,
        initial="mcp_stdio",
    )
    command = forms.CharField(
        max_length=2000,
        required=False,
        help_text="shell-quoted, e.g. python -m console.demo.bank; only a command line exactly as listed in "
        "PREFLIGHT_MCP_STDIO_ALLOW runs",
    )
    url = forms.CharField(
        max_length=2000,
        required=False,
        help_text="e.g. https://tools.example.com/mcp; only hosts listed in PREFLIGHT_HTTP_ALLOW",
    )
    timeout_s = forms.FloatField(min_value=1, max_value=120, initial=15, label="timeout (s)")
    annotations_trusted = _trust_field()


@require_GET
@operator_only
def catalog(request: SignedInRequest) -> HttpResponse:
    servers = models.Server.objects.order_by("name").annotate(
        tools=Count("contracts", filter=Q(contracts__current=True)),
        versions=Count("contracts"),
        invalid=Count("contracts", filter=Q(contracts__valid=False)),
        last_import=Max("contracts__created_at"),
    )
    current = Prefetch("contracts", models.ToolContract.objects.filter(current=True).order_by("name"))
    rows = [{"server": s, "contracts": list(s.contracts.all())} for s in servers.prefetch_related(current)]
    return render(request, "console/operator/catalog.html", {"rows": rows})


def _import_result(request: SignedInRequest, result: Any) -> HttpResponse:
    return render(request, "console/operator/import_result.html", {"result": result}, status=201)


@require_http_methods(["GET", "POST"])
@operator_only
def catalog_import(request: SignedInRequest) -> HttpResponse:
    problem: PastedCatalogError | None = None
    service_problem = ""
    form = PastedImportForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            result = catalog_import_pasted(
                server=form.cleaned_data["server"],
                text=form.cleaned_data["tools"],
                # Unticked is "not asked", not "distrust": a re-import never drops trust silently.
                annotations_trusted=form.cleaned_data["annotations_trusted"] or None,
                user=request.user,
            )
        except PastedCatalogError as exc:
            problem = exc
        except ServiceError as exc:
            service_problem = exc.detail
        else:
            return _import_result(request, result)
    return render(
        request,
        "console/operator/catalog_import.html",
        {"form": form, "problem": problem, "service_problem": service_problem},
        status=422 if request.method == "POST" else 200,
    )


@require_http_methods(["GET", "POST"])
@operator_only
def catalog_import_mcp(request: SignedInRequest) -> HttpResponse:
    problem = ""
    form = McpImportForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        d = form.cleaned_data
        try:
            connector = mcp_connector(kind=d["kind"], command=d["command"], url=d["url"])
            result = catalog_import_from_mcp(
                server=d["server"],
                connector=connector,
                annotations_trusted=d["annotations_trusted"] or None,
                timeout_s=d["timeout_s"],
                user=request.user,
            )
        except ServiceError as exc:
            problem = exc.detail
        else:
            return _import_result(request, result)
    return render(
        request,
        "console/operator/catalog_import_mcp.html",
        {"form": form, "problem": problem},
        status=422 if request.method == "POST" else 200,
    )


@require_GET
@operator_only
def server_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(models.Server, pk=pk)
    return render_partial(request, "console/operator/server.html", _server_page(server), "tools")


class ReviewPolicyForm(forms.Form):
    tool = forms.CharField(max_length=200, required=False, help_text="empty: every tool of this server")
    emails = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="approvers to mail when a call waits, one per line or comma-separated",
    )
    webhook_url = forms.CharField(
        max_length=2000, required=False, help_text="Slack-compatible webhook (a host in PREFLIGHT_HTTP_ALLOW)"
    )
    deadline_minutes = forms.IntegerField(
        min_value=1, required=False, help_text="a waiting call expires after this long; empty: never"
    )


def _server_page(server: models.Server, form: ReviewPolicyForm | None = None) -> dict[str, Any]:
    page = {"server": server, "tools": _server_tools(server), "problem": ""}
    policies = models.ReviewPolicy.objects.filter(server=server).order_by("tool")
    return {**page, "policies": policies, "policy_form": form or ReviewPolicyForm()}


@require_POST
@operator_only
def server_review_policy(request: SignedInRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(models.Server, pk=pk)
    form = ReviewPolicyForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        minutes = data["deadline_minutes"]
        try:
            notifications.review_policy_set(
                server_id=server.pk,
                tool=data["tool"],
                emails=data["emails"].replace(",", "\n").splitlines(),
                webhook_url=data["webhook_url"],
                deadline_s=None if minutes is None else minutes * 60,
                user=request.user,
            )
        except ServiceError as exc:
            field = exc.detail.split(":", 1)[0] if ":" in exc.detail else None
            form.add_error(field if field in form.fields else None, exc.detail)
        else:
            which = data["tool"] or "every tool"
            messages.success(request, f"{server.name}: review policy for {which} saved.")
            return redirect("operator:server", server.pk)
    return render(request, "console/operator/server.html", _server_page(server, form), status=422)


def _server_tools(
    server: models.Server,
) -> list[tuple[str, list[tuple[models.ToolContract, models.ToolContract | None]]]]:
    """Per tool name, its versions newest first, each with the version before it (for "diff vs previous")."""
    tools: dict[str, list[models.ToolContract]] = {}
    for c in models.ToolContract.objects.filter(server=server).order_by("name", "-created_at", "-pk"):
        tools.setdefault(c.name, []).append(c)
    return [(name, list(zip_longest(versions, versions[1:]))) for name, versions in sorted(tools.items())]


@require_POST
@operator_only
def server_trust(request: SignedInRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(models.Server, pk=pk)
    trusted = request.POST.get("trusted") == "1"
    problem = ""
    try:
        server_set_trust(server_id=server.pk, trusted=trusted, user=request.user)
    except ServiceError as exc:
        problem = exc.detail
    server.refresh_from_db()
    if not problem and not request.htmx:  # an htmx swap shows the new state itself
        state = "trusted" if trusted else "not trusted"
        messages.success(
            request, f"{server.name}: annotations are now {state}; current tools got new versions."
        )
        return redirect("operator:server", server.pk)
    context = {"server": server, "tools": _server_tools(server), "problem": problem}
    status = 409 if problem and not request.htmx else 200
    return render_partial(request, "console/operator/server.html", context, "tools", status=status)


@require_GET
@operator_only
def contract_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    contract = get_object_or_404(models.ToolContract.objects.select_related("server"), pk=pk)
    versions = list(
        models.ToolContract.objects.filter(server=contract.server, name=contract.name).order_by("-created_at")
    )
    problem = ""
    try:
        preview = contract_preview(contract)
    except Exception as exc:  # a stored definition that no longer compiles is shown, not a 500
        preview, problem = [], f"{type(exc).__name__}: {exc}"
    return render(
        request,
        "console/operator/contract.html",
        {
            "contract": contract,
            "versions": versions,
            "previous": next((v for v in versions if v.created_at < contract.created_at), None),
            "preview": preview,
            "preview_problem": problem,
            "definition": pretty_json(contract.definition),
            "records": models.PreflightRecord.objects.filter(contract=contract).count(),
        },
    )


@require_GET
@operator_only
def contract_diff(request: SignedInRequest, pk: int, other: int) -> HttpResponse:
    old = get_object_or_404(models.ToolContract.objects.select_related("server"), pk=pk)
    new = get_object_or_404(models.ToolContract.objects.select_related("server"), pk=other)
    if (old.server_id, old.name) != (new.server_id, new.name):
        return _error(request, "Not comparable", "A diff compares two versions of the same tool.", status=400)
    text = catalog_selectors.contract_diff(old, new)
    lines = [
        (next((k for p, k in _DIFF_KINDS if line.startswith(p)), ""), line) for line in text.splitlines()
    ]
    return render(
        request,
        "console/operator/contract_diff.html",
        {"old": old, "new": new, "lines": lines, "same": not text},
    )


# A diff line's kind by its prefix, the file headers first (they start like an added or a removed line).
_DIFF_KINDS = (("+++", "file"), ("---", "file"), ("+", "add"), ("-", "del"), ("@@", "hunk"))


# ---- user/org rules --------------------------------------------------------------------------------------

RULES_TEMPLATE = {
    "id": "org",
    "version": "1",
    "rules": [
        {
            "id": "small_transfers_only",
            "kind": "condition",
            "text": "Transfers above 500 need another way",
            "principals": ["user:alice"],
            "tools": ["bank/transfer"],
            "check": "arg.amount <= 500",
            "on_false": "hold",
        }
    ],
}


class RulesForm(forms.Form):
    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 24, "spellcheck": "false", "class": "code"}),
        label="rules (JSON)",
        max_length=200_000,
    )


@require_GET
@operator_only
def rules(request: SignedInRequest) -> HttpResponse:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in models.RuleSet.objects.order_by("name", "-created_at"):
        stamp = f"{r.name}@{r.version}#{digest(r.data)[7:19]}"
        applied = models.PreflightRecord.objects.filter(checklist_version__contains=stamp).count()
        grouped.setdefault(r.name, []).append(
            {"row": r, "stamp": stamp, "rules": len(r.data.get("rules", [])), "applied": applied}
        )
    recent = [
        {
            "record": rec,
            "rules": checklist_parts(rec.checklist_version)["rules"],
            "rule_slots": rule_slots(rec.record),
            "tool": f"{rec.record.get('server')}/{rec.record.get('tool')}",
        }
        for rec in models.PreflightRecord.objects.order_by("-created_at").select_related("execution")[:20]
    ]
    return render(
        request, "console/operator/rules.html", {"groups": sorted(grouped.items()), "recent": recent}
    )


def _numbered(text: str, line: int | None, around: int = 3) -> list[tuple[int, str, bool]]:
    if not line:
        return []
    lines = text.splitlines()
    start, end = max(1, line - around), min(len(lines), line + around)
    return [(n, lines[n - 1], n == line) for n in range(start, end + 1)]


@require_http_methods(["GET", "POST"])
@operator_only
def rules_edit(request: SignedInRequest, name: str = "") -> HttpResponse:
    current = models.RuleSet.objects.filter(name=name, active=True).first() if name else None
    if name and current is None:
        current = models.RuleSet.objects.filter(name=name).order_by("-created_at").first()
        if current is None:
            raise Http404(f"no rules named {name}")
    draft = RULES_TEMPLATE  # a new rule set starts from the example; an edit from the next version
    if current is not None:
        draft = {**current.data, "version": next_version(str(current.data.get("version", "1")))}
    initial = {"text": json.dumps(draft, indent=2, ensure_ascii=False)}
    form = RulesForm(request.POST if request.method == "POST" else None, initial=initial)
    check: RulesCheck | None = None
    problem = ""
    saved: models.RuleSet | None = None
    if form.is_valid():
        text = form.cleaned_data["text"]
        check = check_rules_text(text)
        if request.POST.get("action") == "save" and check.ok:
            try:
                saved = ruleset_save(text=text, user=request.user)
            except ServiceError as exc:
                problem = exc.detail
            else:
                messages.success(
                    request, f"Saved {saved.name}@{saved.version}; it applies from the next preflight on."
                )
                if not request.htmx:
                    return redirect("operator:rules")
    context = {
        "form": form,
        "current": current,
        "check": check,
        "problem": problem,
        "saved": saved,
        "listing": _numbered(form.data["text"], check.problem.line) if check and check.problem else [],
    }
    invalid = request.method == "POST" and (problem or (check is not None and not check.ok))
    status = 422 if invalid and not request.htmx else 200
    return render_partial(request, "console/operator/rules_edit.html", context, "result", status=status)


# ---- the contract workbench ------------------------------------------------------------------------------


class SidecarForm(forms.Form):
    state_change = forms.CharField(
        required=False, max_length=2000, label="State change", help_text="what a call of this tool changes"
    )
    prose_reviewed = forms.BooleanField(
        required=False,
        label="Prose reviewed",
        help_text="the rules found in the description are declared below",
    )
    notices = forms.CharField(
        required=False,
        max_length=20_000,
        label="Notices",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="one per line, shown with every call",
    )
    text = forms.CharField(
        required=False,
        max_length=200_000,
        label="x-preflight (JSON)",
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "code"}),
        help_text="measures, conditions (CEL), extra approvals, per-argument sources: the fields above win",
    )
    sample = forms.CharField(
        required=False,
        max_length=20_000,
        label="Sample values (JSON)",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "code"}),
        help_text='argument values the preview treats as the user\'s answers, e.g. {"path": "/tmp/a.txt"}',
    )
    why = forms.CharField(
        required=False, max_length=2000, label="Why", help_text="recorded with the new version"
    )


@require_http_methods(["GET", "POST"])
@operator_only
def contract_sidecar(request: SignedInRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(models.ToolContract.objects.select_related("server"), pk=pk)
    if not row.valid:
        raise Http404("an invalid definition has no contract to write a side-car for")
    current = sidecar_of(row)
    arguments = sidecar_arguments(row)
    problem = ""
    if request.method == "POST":
        form = SidecarForm(request.POST)
        form.is_valid()
        fields: dict[str, Any] = {
            k: form.cleaned_data.get(k) for k in ("state_change", "prose_reviewed", "notices")
        }
        post = request.POST
        # Per argument, (confirm, question) as the page shows them: as posted, else as saved.
        typed = {
            n: (post.get(f"slot-{n}-confirm") == "on", post.get(f"slot-{n}-question", "")) for n in arguments
        }
        fields["slots"] = {n: {"confirm": c, "question": q.strip()} for n, (c, q) in typed.items()}
        extension, compose_problem = sidecar_compose(text=form.cleaned_data.get("text", ""), fields=fields)
        try:
            sample = json.loads(form.cleaned_data.get("sample") or "{}")
        except json.JSONDecodeError as exc:
            sample, compose_problem = {}, compose_problem or f"sample values: not JSON ({exc.msg})"
        if not isinstance(sample, dict):
            sample, compose_problem = {}, compose_problem or "sample values: a JSON object of argument values"
        check = sidecar_check(row=row, extension=extension, problem=compose_problem, sample=sample)
        if request.POST.get("action") == "save" and check.ok:
            try:
                saved = sidecar_save(
                    contract_id=row.pk,
                    extension=extension,
                    why=form.cleaned_data.get("why", ""),
                    user=request.user,
                )
            except ServiceError as exc:
                problem = exc.detail
            else:
                messages.success(
                    request,
                    f"Saved {row.server.name}/{row.name}@{saved.contract.digest[7:19]}; "
                    f"{len(saved.resolved_reports)} gap report(s) resolved, "
                    f"{len(saved.rechecked)} held execution(s) preflighted again.",
                )
                return redirect("operator:contract", saved.contract.pk)
    else:
        text = json.dumps(current, indent=2, ensure_ascii=False) if current else "{}"
        form = SidecarForm(
            initial={
                "state_change": current.get("state_change", ""),
                "prose_reviewed": bool(current.get("prose_reviewed")),
                "notices": "\n".join(current.get("notices") or []),
                "text": text,
            }
        )
        slots = current.get("slots") or {}
        typed = {
            name: (bool(slots.get(name, {}).get("confirm")), slots.get(name, {}).get("question", ""))
            for name in arguments
        }
        check = sidecar_check(row=row, extension=current)
    context = {
        "contract": row,
        "form": form,
        "check": check,
        "problem": problem,
        "draft": pretty_json(check.extension) if check.extension is not None else "",
        "arguments": [{"name": n, "confirm": c, "question": q} for n, (c, q) in typed.items()],
    }
    invalid = request.method == "POST" and (problem or not check.ok)
    status = 422 if invalid and not request.htmx else 200
    return render_partial(request, "console/operator/sidecar.html", context, "result", status=status)


@require_GET
@operator_only
def server_sidecar_export(request: SignedInRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(models.Server, pk=pk)
    body = json.dumps(sidecar_export(server), indent=2, ensure_ascii=False) + "\n"
    attachment = {"Content-Disposition": f'attachment; filename="{server.name}.json"'}
    return HttpResponse(body, content_type="application/json", headers=attachment)


@require_POST
@operator_only
def server_sidecar_import(request: SignedInRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(models.Server, pk=pk)
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise ServiceError("invalid", "choose a side-car file")
        result = sidecar_import(server=server, content=upload.read(), user=request.user)
    except ServiceError as exc:
        return _error(request, "Side-car not imported", exc.detail, status=422)
    messages.success(request, f"Imported the side-car: {len(result.tools)} tool(s) checked.")
    return redirect("operator:server", server.pk)


@require_GET
@operator_only
def tool_sidecar(request: SignedInRequest) -> HttpResponse:
    """From a gap row or a gap report (which name a server and a tool): the current version's workbench."""
    row = (
        models.ToolContract.objects.filter(
            server__name=request.GET.get("server", ""),
            name=request.GET.get("tool", ""),
            current=True,
            valid=True,
        )
        .only("pk")
        .first()
    )
    if row is None:
        raise Http404("no current contract of that tool")
    return redirect("operator:contract-sidecar", row.pk)
