"""Operator pages: gap reports, catalog, rules. Per page: who may open it (allowed, 403, sign-in), what a
full page and an htmx partial contain, and that forms need CSRF and work without JavaScript."""

from __future__ import annotations

import json
from typing import Any

import pytest
from console_helpers import TRANSFER, transfer_v2
from django.test import Client
from operator_support import import_catalog, make_gaps, user_with

from console import connectors, models
from console.egress import parse_allowed_hosts
from console.selectors.gap_reports import report_json, report_markdown
from console.services.catalog import catalog_import
from console.services.executions import execution_create
from console.services.gap_reports import gap_report_create, gap_report_set_status
from console.services.rules import ruleset_save

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
PROVIDER_GAP = {"cls": "provider_gap", "server": "repo", "tool": "delete_repo", "slot": "cond:prose-1"}


@pytest.fixture
def gaps() -> list[models.Execution]:
    import_catalog()
    return make_gaps(provider=3, user=2, purge=1)


@pytest.fixture
def operator(client: Client) -> Any:
    user = user_with("olga", "operator")
    client.force_login(user)
    return user


def as_role(client: Client, role: str) -> Any:
    user = user_with(f"{role}-user", role)
    client.force_login(user)
    return user


def file_report(user: Any, **gap: str) -> models.GapReport:
    return gap_report_create(
        **{**PROVIDER_GAP, **gap}, contract_digest="", detail="", title="", notes="", user=user
    )


# ---- access, page by page ----------------------------------------------------------------------------------

OPERATOR_ONLY_GET = [
    "/gap-reports/new/?cls=provider_gap&server=repo&tool=delete_repo&slot=cond:prose-1",
    "/catalog/",
    "/catalog/import/",
    "/catalog/import/mcp/",
    "/rules/",
    "/rules/new/",
]
READABLE_BY_AUDITORS = ["/dashboards/", "/gap-reports/"]


@pytest.mark.parametrize("url", OPERATOR_ONLY_GET + READABLE_BY_AUDITORS)
def test_every_page_needs_a_login(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("url", OPERATOR_ONLY_GET)
def test_operator_pages_refuse_auditors_and_approvers_with_a_reason(
    client: Client, gaps: Any, url: str
) -> None:
    for role in ("auditor", "approver"):
        as_role(client, role)
        response = client.get(url)
        assert response.status_code == 403, (url, role)
        assert b"needs the operator role" in response.content
        client.logout()


@pytest.mark.parametrize("url", OPERATOR_ONLY_GET + READABLE_BY_AUDITORS)
def test_operators_open_every_page(client: Client, gaps: Any, operator: Any, url: str) -> None:
    assert client.get(url).status_code == 200


def test_pages_of_one_server_and_one_contract_need_the_operator_role(client: Client, gaps: Any) -> None:
    server = models.Server.objects.get(name="repo")
    contract = models.ToolContract.objects.filter(server=server).first()
    assert contract is not None
    urls = [f"/catalog/servers/{server.pk}/", f"/catalog/contracts/{contract.pk}/", "/rules/org/edit/"]
    as_role(client, "auditor")
    for url in urls:
        assert client.get(url).status_code == 403


def test_a_superuser_holds_every_role(client: Client, gaps: Any) -> None:
    client.force_login(user_with("root", superuser=True))
    assert client.get("/catalog/").status_code == 200


def test_auditors_read_reports_but_cannot_file_or_change_them(client: Client, gaps: Any) -> None:
    report = file_report(user_with("olga", "operator"))
    as_role(client, "auditor")

    detail = client.get(f"/gap-reports/{report.pk}/")
    assert detail.status_code == 200
    assert b"Update status" not in detail.content
    assert client.get(f"/gap-reports/{report.pk}/export.md").status_code == 200
    assert client.post(f"/gap-reports/{report.pk}/status/", {"status": "sent"}).status_code == 403
    assert client.post("/gap-reports/new/", {**PROVIDER_GAP, "title": "t", "detail": "d"}).status_code == 403
    report.refresh_from_db()
    assert report.status == "open"


def test_forms_need_the_csrf_token(gaps: Any) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user_with("olga", "operator"))
    response = strict.post("/gap-reports/new/", {**PROVIDER_GAP, "title": "t", "detail": "d"})
    assert response.status_code == 403
    assert not models.GapReport.objects.exists()
    page = strict.get("/gap-reports/new/", PROVIDER_GAP)
    assert b'name="csrfmiddlewaretoken"' in page.content


# ---- provider gap reports ------------------------------------------------------------------------------


def test_the_report_form_is_prefilled_with_the_evidence(client: Client, gaps: Any, operator: Any) -> None:
    response = client.get("/gap-reports/new/", PROVIDER_GAP)
    body = response.content.decode()
    digest = models.ToolContract.objects.get(name="delete_repo", current=True).digest
    assert response.status_code == 200
    assert f'value="{digest}"' in body
    assert 'value="repo/delete_repo: undeclared condition (cond:prose-1)"' in body
    assert "Requires admin rights." in body
    assert '<strong data-testid="records-affected">3</strong>' in body
    for execution in gaps[:3]:
        assert str(execution.pk) in body


def test_the_report_form_without_a_gap_says_where_to_start(client: Client, operator: Any) -> None:
    response = client.get("/gap-reports/new/")
    assert response.status_code == 400
    assert b"Report to provider" in response.content
    assert client.get("/gap-reports/new/", {**PROVIDER_GAP, "slot": "nope"}).status_code == 404


def test_filing_a_report_redirects_to_it(client: Client, gaps: Any, operator: Any) -> None:
    response = client.post(
        "/gap-reports/new/",
        {
            **PROVIDER_GAP,
            "contract_digest": "",
            "title": "Declare the admin check",
            "detail": "d",
            "notes": "n",
        },
    )
    report = models.GapReport.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/gap-reports/{report.pk}/"
    assert (report.title, report.detail, report.notes, report.evidence["records"]) == (
        "Declare the admin check",
        "d",
        "n",
        3,
    )
    page = client.get(response["Location"]).content.decode()
    assert "Declare the admin check" in page and "Export Markdown" in page


def test_a_report_on_a_user_gap_is_refused_on_the_form(client: Client, gaps: Any, operator: Any) -> None:
    gap = {"cls": "user_gap", "server": "bank", "tool": "transfer", "slot": "arg:from_account"}
    response = client.post("/gap-reports/new/", {**gap, "title": "t", "detail": "d"})
    assert response.status_code == 422
    assert b"only provider_gap" in response.content
    assert not models.GapReport.objects.exists()


def test_the_dashboard_links_a_reported_gap_to_its_report(client: Client, gaps: Any, operator: Any) -> None:
    report = file_report(operator)
    body = client.get("/dashboards/").content.decode()
    assert f'href="/gap-reports/{report.pk}/">report #{report.pk} (open)' in body


def test_status_changes_without_javascript_redirect(client: Client, gaps: Any, operator: Any) -> None:
    report = file_report(operator)
    response = client.post(f"/gap-reports/{report.pk}/status/", {"status": "sent", "note": "emailed"})
    assert response.status_code == 302
    report.refresh_from_db()
    assert report.status == "sent" and report.history[-1]["note"] == "emailed"


def test_status_changes_with_htmx_swap_the_status_card(client: Client, gaps: Any, operator: Any) -> None:
    report = file_report(operator)
    response = client.post(f"/gap-reports/{report.pk}/status/", {"status": "resolved"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section class="card" id="report-status">')
    assert 'data-testid="report-status">resolved<' in body
    # Setting the status it already has is explained in place.
    again = client.post(f"/gap-reports/{report.pk}/status/", {"status": "resolved"}, **HTMX)
    assert b"already resolved" in again.content


def test_the_report_list_filters_by_status_and_swaps_with_htmx(
    client: Client, gaps: Any, operator: Any
) -> None:
    first = file_report(operator)
    second = file_report(operator, tool="purge_cache", slot="schema:#")
    gap_report_set_status(report_id=second.pk, status="sent", user=operator)

    full = client.get("/gap-reports/").content.decode()
    assert f"#{first.pk}" in full and f"#{second.pk}" in full and "<html" in full
    partial = client.get("/gap-reports/", {"status": "sent"}, **HTMX).content.decode()
    assert partial.lstrip().startswith('<section id="report-list">')
    assert f'href="/gap-reports/{second.pk}/"' in partial
    assert f'href="/gap-reports/{first.pk}/"' not in partial


def test_exports_download_as_markdown_and_json(client: Client, gaps: Any, operator: Any) -> None:
    report = file_report(operator)

    md = client.get(f"/gap-reports/{report.pk}/export.md")
    assert md.status_code == 200
    assert md["Content-Type"] == "text/markdown; charset=utf-8"
    assert md["Content-Disposition"] == f'attachment; filename="gap-report-{report.pk}-repo-delete_repo.md"'
    assert md.content.decode() == report_markdown(report)

    js = client.get(f"/gap-reports/{report.pk}/export.json")
    assert js["Content-Type"] == "application/json; charset=utf-8"
    assert js["Content-Disposition"].endswith('.json"')
    assert json.loads(js.content) == json.loads(json.dumps(report_json(report)))

    assert client.get(f"/gap-reports/{report.pk}/export.pdf").status_code == 404
    assert client.get(f"/gap-reports/{report.pk + 1}/export.md").status_code == 404


# ---- catalog --------------------------------------------------------------------------------------------


def test_the_catalog_lists_servers_and_current_tools(client: Client, gaps: Any, operator: Any) -> None:
    body = client.get("/catalog/").content.decode()
    for name in ("bank", "repo", "transfer", "get_balance", "delete_repo", "purge_cache"):
        assert name in body
    assert "annotations trusted" in body and "annotations untrusted" in body


def test_importing_a_pasted_tools_list(client: Client, operator: Any) -> None:
    text = json.dumps({"tools": [TRANSFER, {"name": "broken", "inputSchema": {"type": "nope"}}]})
    response = client.post("/catalog/import/", {"server": "bank", "tools": text})
    body = response.content.decode()
    assert response.status_code == 201
    assert "Imported 2 tools into bank" in body
    assert "transfer" in body and "invalid" in body
    assert models.ToolContract.objects.filter(server__name="bank", current=True).count() == 1


def test_a_pasted_text_that_is_not_json_names_the_line(client: Client, operator: Any) -> None:
    response = client.post("/catalog/import/", {"server": "bank", "tools": '{\n"tools": [\n  {"name": }\n]}'})
    assert response.status_code == 422
    assert b"Line 3: not JSON" in response.content
    assert not models.Server.objects.exists()


def test_importing_from_an_mcp_server(
    client: Client, operator: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["tools.example"])
    seen: dict[str, Any] = {}

    def fake_list(connector: Any, *, timeout_s: float) -> list[dict[str, Any]]:
        seen.update(connector=connector, timeout_s=timeout_s)
        return [TRANSFER]

    monkeypatch.setattr(connectors, "list_tools", fake_list)
    response = client.post(
        "/catalog/import/mcp/",
        {"server": "live", "kind": "mcp_http", "url": "https://tools.example/mcp", "timeout_s": "7"},
    )
    assert response.status_code == 201
    assert seen == {"connector": {"kind": "mcp_http", "url": "https://tools.example/mcp"}, "timeout_s": 7.0}
    assert models.Server.objects.get(name="live").connector["url"] == "https://tools.example/mcp"


def test_an_mcp_import_that_fails_says_why(client: Client, operator: Any) -> None:
    response = client.post(
        "/catalog/import/mcp/", {"server": "x", "kind": "mcp_stdio", "command": "", "timeout_s": 5}
    )
    assert response.status_code == 422
    assert b"command: required" in response.content


def test_server_page_shows_versions_and_the_trust_toggle(client: Client, operator: Any) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=False, actor="test")
    catalog_import(server="bank", tools=[transfer_v2()], annotations_trusted=False, actor="test")
    server = models.Server.objects.get(name="bank")
    old, new = models.ToolContract.objects.filter(server=server).order_by("created_at", "pk")

    body = client.get(f"/catalog/servers/{server.pk}/").content.decode()

    assert f'href="/catalog/contracts/{old.pk}/diff/{new.pk}/">vs previous' in body
    assert 'data-testid="trust-state">untrusted' in body and "Trust annotations</button>" in body


def test_toggling_trust_without_javascript(client: Client, operator: Any) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=False, actor="test")
    server = models.Server.objects.get(name="bank")

    response = client.post(f"/catalog/servers/{server.pk}/trust/", {"trusted": "1"})

    assert response.status_code == 302
    server.refresh_from_db()
    assert server.annotations_trusted
    assert models.ToolContract.objects.get(server=server, current=True).annotations_trusted
    follow = client.get(response["Location"]).content.decode()
    assert "annotations are now trusted" in follow


def test_toggling_trust_with_htmx_swaps_the_tools(client: Client, operator: Any) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=True, actor="test")
    server = models.Server.objects.get(name="bank")

    response = client.post(f"/catalog/servers/{server.pk}/trust/", {"trusted": "0"}, **HTMX)
    body = response.content.decode()

    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="server-tools">')
    assert 'data-testid="trust-state">untrusted' in body
    again = client.post(f"/catalog/servers/{server.pk}/trust/", {"trusted": "0"}, **HTMX)
    assert b"already untrusted" in again.content


def test_contract_page_previews_obligations_and_definition(client: Client, gaps: Any, operator: Any) -> None:
    contract = models.ToolContract.objects.get(name="delete_repo", current=True)
    body = client.get(f"/catalog/contracts/{contract.pk}/").content.decode()
    assert "<code>arg:repo</code>" in body
    assert "<code>cond:prose-1</code>" in body and "provider_gap" in body
    assert "3 preflight records used this version" in body
    assert "&quot;Deletes a repository. Requires admin rights.&quot;" in body


def test_contract_diff_page(client: Client, operator: Any) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=False, actor="test")
    catalog_import(server="bank", tools=[transfer_v2()], annotations_trusted=False, actor="test")
    catalog_import(server="other", tools=[TRANSFER], annotations_trusted=False, actor="test")
    old, new = models.ToolContract.objects.filter(server__name="bank").order_by("created_at", "pk")
    other = models.ToolContract.objects.get(server__name="other")

    body = client.get(f"/catalog/contracts/{old.pk}/diff/{new.pk}/").content.decode()

    assert (
        '<span class="del">-    &quot;description&quot;: &quot;Move money between accounts.&quot;,</span>'
        in body
    )
    assert (
        '<span class="add">+    &quot;description&quot;: &quot;Move money between two accounts.&quot;,</span>'
        in body
    )
    assert client.get(f"/catalog/contracts/{old.pk}/diff/{other.pk}/").status_code == 400


# ---- rules ---------------------------------------------------------------------------------------------

RULES = {
    "id": "org",
    "version": "1",
    "rules": [
        {
            "id": "small_transfers",
            "kind": "condition",
            "tools": ["bank/transfer"],
            "check": "arg.amount <= 500",
            "on_false": "hold",
        }
    ],
}


def test_new_rules_start_from_an_example(client: Client, operator: Any) -> None:
    body = client.get("/rules/new/").content.decode()
    assert "small_transfers_only" in body and 'name="csrfmiddlewaretoken"' in body


def test_editing_rules_starts_from_the_active_version_bumped(client: Client, operator: Any) -> None:
    ruleset_save(text=json.dumps(RULES), user=operator)
    body = client.get("/rules/org/edit/").content.decode()
    assert "&quot;version&quot;: &quot;2&quot;" in body
    assert client.get("/rules/nope/edit/").status_code == 404


def test_checking_invalid_rules_names_the_line(client: Client, operator: Any) -> None:
    data = json.loads(json.dumps(RULES))
    data["rules"][0]["on_false"] = "explode"
    text = json.dumps(data, indent=2)

    response = client.post("/rules/new/", {"text": text, "action": "save"})

    body = response.content.decode()
    assert response.status_code == 422
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "explode" in ln)
    assert f"Line {line}, <code>rules[0].on_false (small_transfers)</code>" in body
    assert f'<span class="bad"><span class="ln">{line}</span>' in body
    assert not models.RuleSet.objects.exists()


def test_checking_rules_with_htmx_returns_the_result_only(client: Client, operator: Any) -> None:
    response = client.post("/rules/new/", {"text": json.dumps(RULES), "action": "check"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="rules-result"')
    assert "Valid: 1 rule in org@1" in body
    assert not models.RuleSet.objects.exists()  # checking saves nothing


def test_saving_rules_redirects_and_they_apply_without_a_deploy(client: Client, operator: Any) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=False, actor="test")

    response = client.post("/rules/new/", {"text": json.dumps(RULES, indent=2), "action": "save"})

    assert response.status_code == 302 and response["Location"] == "/rules/"
    from console_helpers import transfer_request

    execution_create(body=transfer_request(amount=900), token=None, actor="test")
    page = client.get("/rules/").content.decode()
    assert "Saved org@1; it applies from the next preflight on." in page
    assert "<code>user:small_transfers</code>" in page
    assert "1 record</td>" in page  # applied on


def test_reusing_a_version_for_other_rules_is_refused_on_the_page(client: Client, operator: Any) -> None:
    ruleset_save(text=json.dumps(RULES), user=operator)
    changed = json.loads(json.dumps(RULES))
    changed["rules"][0]["check"] = "arg.amount <= 10"
    response = client.post("/rules/org/edit/", {"text": json.dumps(changed, indent=2), "action": "save"})
    assert response.status_code == 422
    assert b"already exists with other rules" in response.content


def test_a_pasted_reimport_with_the_trust_box_unticked_keeps_the_servers_trust(
    client: Client, operator: Any
) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=True, actor="test")

    response = client.post("/catalog/import/", {"server": "bank", "tools": json.dumps({"tools": [TRANSFER]})})

    assert response.status_code == 201
    assert models.Server.objects.get(name="bank").annotations_trusted is True
    assert models.ToolContract.objects.get(name="transfer", current=True).annotations_trusted is True


@pytest.mark.parametrize(
    "form",
    [
        {"kind": "mcp_http", "url": "http://169.254.169.254/latest/meta-data"},
        {"kind": "mcp_http", "url": "http://127.0.0.1:6379/"},
        {"kind": "mcp_stdio", "command": "python -c 'import os; os.system(\"id\")'"},
        {"kind": "mcp_stdio", "command": "python -m console.demo.bank --config /etc/passwd"},
    ],
)
def test_an_mcp_import_the_deployment_does_not_allow_is_refused_before_connecting(
    client: Client, operator: Any, monkeypatch: pytest.MonkeyPatch, form: dict[str, str], settings: Any
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["127.0.0.1:8765"])  # as a deployment's default
    listed: list[Any] = []
    monkeypatch.setattr(connectors, "list_tools", lambda connector, **kw: listed.append(connector) or [])

    response = client.post("/catalog/import/mcp/", {"server": "evil", "timeout_s": "5", **form})

    assert response.status_code == 422
    assert b"PREFLIGHT_" in response.content
    assert listed == []
    assert not models.Server.objects.exists()


def test_no_one_but_an_operator_can_change_the_catalog_trust_or_rules_from_the_console(
    client: Client, gaps: Any
) -> None:
    server = models.Server.objects.get(name="repo")
    posts = [
        (
            "/catalog/import/",
            {"server": "repo", "tools": json.dumps({"tools": [TRANSFER]}), "annotations_trusted": "on"},
        ),
        (
            "/catalog/import/mcp/",
            {"server": "repo", "kind": "mcp_http", "url": "http://127.0.0.1:8765/mcp", "timeout_s": "5"},
        ),
        (f"/catalog/servers/{server.pk}/trust/", {"trusted": "0" if server.annotations_trusted else "1"}),
        ("/rules/new/", {"text": json.dumps({"id": "org", "version": "9", "rules": []}), "action": "save"}),
    ]

    def state() -> list[Any]:
        return [
            list(models.Server.objects.order_by("pk").values()),
            list(models.ToolContract.objects.order_by("pk").values("pk", "current", "annotations_trusted")),
            list(models.RuleSet.objects.order_by("pk").values()),
            models.AuditEvent.objects.count(),
        ]

    before = state()
    for role in ("auditor", "approver"):
        as_role(client, role)
        for url, data in posts:
            assert client.post(url, data).status_code == 403, (url, role)
        client.logout()

    assert state() == before


HOSTILE_JSON = {
    "nested past the parser's depth": "[" * 5000 + "]" * 5000,
    "a NUL escape": '{"tools": [{"name": "t\\u0000", "inputSchema": {"type": "object"}}]}',
    "a lone surrogate": '{"tools": [{"name": "t\\ud800", "inputSchema": {"type": "object"}}]}',
    "NaN": '{"tools": [{"name": "t", "inputSchema": {"type": "object", "maximum": NaN}}]}',
    "an integer past 2**53": '{"tools": [{"name": "t", "inputSchema": {"maximum": 1' + "0" * 30 + "}}]}",
}


@pytest.mark.parametrize("text", HOSTILE_JSON.values(), ids=HOSTILE_JSON.keys())
def test_pasted_tools_json_the_api_would_refuse_is_a_422_and_the_catalog_is_untouched(
    client: Client, operator: Any, text: str
) -> None:
    response = client.post("/catalog/import/", {"server": "bank", "tools": text})

    assert response.status_code == 422
    assert b"not JSON" in response.content
    assert not models.Server.objects.exists() and not models.ToolContract.objects.exists()


@pytest.mark.parametrize("text", HOSTILE_JSON.values(), ids=HOSTILE_JSON.keys())
def test_rules_json_the_api_would_refuse_is_a_422_and_no_rules_are_saved(
    client: Client, operator: Any, text: str
) -> None:
    response = client.post("/rules/new/", {"text": text, "action": "save"})

    assert response.status_code == 422
    assert not models.RuleSet.objects.exists()
