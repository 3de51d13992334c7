"""The operator's work in a real browser: sign in, read the gap dashboards, file a provider gap report from a
gap, mark it sent, and export it as Markdown. Screenshots go to artifacts/."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from playwright.sync_api import expect

from console import models
from console.services.catalog import catalog_import
from console.services.executions import execution_create
from console.web import dashboards

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "olga-pass-Preflight1"

# A condition stated only in prose, and no declared state change: provider gaps on every call.
DELETE_REPO = {
    "name": "delete_repo",
    "description": "Deletes a repository. Requires admin rights.",
    "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
}
# No inputSchema at all.
PURGE = {
    "name": "purge_cache",
    "description": "Purges the cache.",
    "x-preflight": {"state_change": "cache emptied"},
}
TRANSFER = {
    "name": "transfer",
    "description": "Move money between accounts.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "number"},
        },
        "required": ["from_account", "to_account", "amount"],
    },
    "x-preflight": {"state_change": "money moves", "slots": {"from_account": {"sources": ["user_answer"]}}},
}


def span(text: str, part: str) -> dict[str, int]:
    start = text.index(part)
    return {"turn": 0, "start": start, "end": start + len(part)}


def request(server: str, tool: str, text: str, candidates: dict[str, str], action: str) -> dict[str, Any]:
    return {
        "server": server,
        "tool": tool,
        "principal": "user:carol",
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {k: {"value": v, "pointer": span(text, v)} for k, v in candidates.items()},
        "action_name": span(text, action),
        "timing": {"mode": "immediate", "pointer": span(text, "now")},
    }


# A slot only a preset may fill, and nobody has one: a source gap. An external $ref: an implementation gap.
CLOSE_ACCOUNT = {
    "name": "close_account",
    "description": "Close an account.",
    "inputSchema": {"type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]},
    "x-preflight": {"state_change": "the account is closed", "slots": {"account": {"sources": ["preset"]}}},
}
SYNC_CONTACT = {
    "name": "sync_contact",
    "description": "Copy a contact to the CRM.",
    "inputSchema": {
        "type": "object",
        "properties": {"contact": {"$ref": "https://schemas.example/contact.json"}},
        "required": ["contact"],
    },
    "x-preflight": {"state_change": "the CRM gets a contact"},
}


def _at(execution: models.Execution, days_ago: int) -> None:
    # History for the charts: gap rows are append-only through the ORM, so the test moves them with SQL-level
    # updates, as a backfill would.
    when = timezone.now() - timedelta(days=days_ago, hours=days_ago % 5)
    models.GapRow.objects.filter(execution=execution).update(created_at=when)


def seed_gaps() -> None:
    """A month of gaps of every cause; the four newest delete_repo calls are today's."""
    catalog_import(server="repo", tools=[DELETE_REPO, PURGE], annotations_trusted=False, actor="test")
    catalog_import(server="bank", tools=[TRANSFER, CLOSE_ACCOUNT], annotations_trusted=False, actor="test")
    catalog_import(server="crm", tools=[SYNC_CONTACT], annotations_trusted=False, actor="test")
    for i in range(4):
        text = f"Delete the repository acme/repo{i} now."
        body = request("repo", "delete_repo", text, {"repo": f"acme/repo{i}"}, "Delete")
        execution_create(body=body, token=None, actor="test")
    execution_create(
        body=request("repo", "purge_cache", "Purge the cache now.", {}, "Purge"), token=None, actor="test"
    )
    for amount in ("120", "75", "300"):
        execution_create(body=transfer(amount), token=None, actor="test")
    # Older history, never touching delete_repo (the report below counts exactly four records of it).
    for day in range(1, 28):
        for _ in range(1 + (day * 7) % 4):
            _at(execution_create(body=transfer(str(10 + day)), token=None, actor="test"), day)
        if day % 3 == 0:
            body = request("repo", "purge_cache", "Purge the cache now.", {}, "Purge")
            _at(execution_create(body=body, token=None, actor="test"), day)
        if day % 4 == 1:
            text = "Close my old account now."
            body = request("bank", "close_account", text, {}, "Close")
            _at(execution_create(body=body, token=None, actor="test"), day)
        if day % 9 == 2:
            text = "Copy Dana to the CRM now."
            _at(
                execution_create(
                    body=request("crm", "sync_contact", text, {}, "Copy"), token=None, actor="test"
                ),
                day,
            )


def transfer(amount: str) -> dict[str, Any]:
    text = f"Send {amount} EUR to DE02120300000000202051 now."
    body = request("bank", "transfer", text, {"to_account": "DE02120300000000202051"}, "Send")
    body["candidates"]["amount"] = {"value": int(amount), "pointer": span(text, amount)}
    return body


def test_an_operator_files_a_provider_gap_report_from_the_dashboards_and_exports_it(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path], tmp_path: Path
) -> None:
    seed_gaps()
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    olga.groups.add(Group.objects.get_or_create(name="operator")[0])

    page = browser_page()
    page.goto("/dashboards/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/dashboards/"))
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(re.compile(r"/dashboards/$"))
    expect(page.get_by_role("heading", name="Gap dashboards")).to_be_visible()
    expected = {
        t["cls"]: t["gaps"] for t in dashboards.dashboard_data(dashboards.Filters(30, "", "", ""))["tiles"]
    }
    assert all(expected.values())  # every cause has gaps in this month
    for cls, gaps in expected.items():
        expect(page.locator(f"a.tile.gap-{cls} .tile-number")).to_have_text(str(gaps))
    expect(page.get_by_role("img", name=re.compile("Executions with a gap, per day"))).to_be_visible()
    screenshot(page, "dashboards")

    # The filter swaps the panel in place (htmx) and the URL follows.
    page.get_by_label("Cause").select_option("provider_gap")
    expect(page).to_have_url(re.compile(r"cls=provider_gap"))
    expect(page.locator("tr.gap-row[data-slot='arg:from_account']")).to_have_count(0)
    expect(page.locator("tr.gap-row[data-slot='cond:prose-1']")).to_have_count(1)

    row = page.locator("tr.gap-row[data-slot='cond:prose-1']")
    row.get_by_role("link", name="Report to provider").click()

    expect(page.get_by_role("heading", name="Report a provider gap")).to_be_visible()
    expect(page.get_by_test_id("records-affected")).to_have_text("4")
    contract = models.ToolContract.objects.get(name="delete_repo", current=True)
    expect(page.locator("dl.facts")).to_contain_text(contract.digest)
    expect(page.get_by_label("Title")).to_have_value("repo/delete_repo: undeclared condition (cond:prose-1)")
    page.get_by_label("Notes").fill("Calls hold for a person until the admin check is declared.")
    page.get_by_role("button", name="File report").click()

    expect(page).to_have_url(re.compile(r"/gap-reports/\d+/$"))
    expect(page.get_by_test_id("report-status")).to_have_text("open")
    page.get_by_label("New status").select_option("sent")
    page.get_by_label("Note").fill("emailed to the repo team")
    page.get_by_role("button", name="Update status").click()
    expect(page.get_by_test_id("report-status")).to_have_text("sent")
    screenshot(page, "gap-report")

    with page.expect_download() as download_info:
        page.get_by_test_id("export-md").click()
    download = download_info.value
    report = models.GapReport.objects.get()
    assert download.suggested_filename == f"gap-report-{report.pk}-repo-delete_repo.md"
    target = tmp_path / download.suggested_filename
    download.save_as(target)
    markdown = target.read_text()
    assert markdown.startswith(f"# Provider gap report #{report.pk}: repo/delete_repo: undeclared condition")
    assert "- **Status:** sent" in markdown
    assert f"- **Contract digest:** `{contract.digest}`" in markdown
    assert "- **Slot:** `cond:prose-1`" in markdown
    assert "Seen on **4 preflight records** of **4 executions**" in markdown
    assert "Calls hold for a person until the admin check is declared." in markdown
    for execution_id in report.evidence["execution_ids"]:
        assert execution_id in markdown

    with page.expect_download() as json_info:
        page.get_by_test_id("export-json").click()
    assert json_info.value.suggested_filename.endswith(".json")

    # Back on the dashboards the gap links to its report instead of offering a second one.
    page.goto("/dashboards/?cls=provider_gap")
    expect(page.locator("tr.gap-row[data-slot='cond:prose-1']")).to_contain_text(
        f"report #{report.pk} (sent)"
    )


def test_dashboards_and_report_pages_work_without_javascript(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    seed_gaps()
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    olga.groups.add(Group.objects.get_or_create(name="operator")[0])
    page = browser_page(olga, javascript=False)

    page.goto("/dashboards/")
    page.get_by_label("Cause").select_option("provider_gap")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"cls=provider_gap"))
    page.locator("tr.gap-row[data-slot='schema:#']").get_by_role("link", name="Report to provider").click()
    page.get_by_role("button", name="File report").click()
    expect(page.get_by_test_id("report-status")).to_have_text("open")
    page.get_by_label("New status").select_option("resolved")
    page.get_by_role("button", name="Update status").click()
    expect(page.get_by_test_id("report-status")).to_have_text("resolved")


def test_an_operator_imports_a_catalog_diffs_versions_and_edits_rules(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    olga = get_user_model().objects.create_user("olga", password=PASSWORD)
    olga.groups.add(Group.objects.get_or_create(name="operator")[0])
    page = browser_page(olga)

    # Import a pasted tools/list, then a changed definition: two versions of one tool.
    page.goto("/catalog/import/")
    page.get_by_label("Server").first.fill("bank")
    page.get_by_label("tools/list result (JSON)").fill(json.dumps({"tools": [TRANSFER, PURGE]}))
    page.get_by_role("button", name="Import").click()
    expect(page.get_by_role("heading", name="Imported 2 tools into bank")).to_be_visible()
    changed = dict(
        TRANSFER, description="Move money between two accounts.\n[confirm:to_account] Check the payee."
    )
    page.goto("/catalog/import/")
    page.get_by_label("Server").first.fill("bank")
    page.get_by_label("tools/list result (JSON)").fill(json.dumps({"tools": [changed, PURGE]}))
    page.get_by_role("button", name="Import").click()
    page.get_by_role("link", name="Open bank").click()

    # Trust the server's annotations (htmx swaps the tools in place).
    expect(page.get_by_test_id("trust-state")).to_have_text("untrusted")
    page.get_by_role("button", name="Trust annotations").click()
    expect(page.get_by_test_id("trust-state")).to_have_text("trusted")
    assert models.Server.objects.get(name="bank").annotations_trusted

    transfer = page.locator("section.card", has=page.get_by_role("heading", name="transfer", exact=True))
    transfer.get_by_role("link", name="vs previous").last.click()  # the oldest change: the new description
    expect(page.locator("pre.diff .add").first).to_be_visible()
    expect(page.locator("pre.diff")).to_contain_text("[confirm:to_account] Check the payee.")
    screenshot(page, "contract-diff")

    # Rules: a mistake is named with its line, checked in place; the fixed rules are saved as a version.
    page.goto("/rules/new/")
    rules = {
        "id": "org",
        "version": "1",
        "rules": [
            {
                "id": "cap",
                "kind": "condition",
                "tools": ["bank/transfer"],
                "check": "arg.amount <=",
                "on_false": "hold",
            }
        ],
    }
    text = json.dumps(rules, indent=2)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '"check"' in t)
    page.get_by_label("rules (JSON)").fill(text)
    page.get_by_role("button", name="Check").click()
    problem = page.get_by_test_id("rules-problem")
    expect(problem).to_contain_text(f"Line {line}, rules[0] (cap).check")
    expect(page.locator("pre.listing .bad")).to_contain_text('"check": "arg.amount <="')
    screenshot(page, "rules-error")
    rules["rules"][0]["check"] = "arg.amount <= 500"
    page.get_by_label("rules (JSON)").fill(json.dumps(rules, indent=2))
    page.get_by_role("button", name="Check").click()
    expect(page.get_by_role("status")).to_contain_text("Valid: 1 rule in org@1")
    page.get_by_role("button", name="Save as new version").click()
    expect(page).to_have_url(re.compile(r"/rules/$"))
    expect(page.locator("ul.messages")).to_contain_text("Saved org@1")
    assert models.RuleSet.objects.get(name="org", active=True).version == "1"
