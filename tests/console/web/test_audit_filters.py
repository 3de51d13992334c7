"""The audit list's filters reach its exports and its pages: an export is exactly the rows the screen lists,
and an invalid filter is refused with the reason instead of listing or exporting everything."""

from __future__ import annotations

import csv
import io
import json
import re
from html import unescape
from typing import Any

import pytest
from console_helpers import said
from django.test import Client
from review_support import person, signed_in, use_demo_bank

from console.demo import review_data
from console.services.catalog import catalog_import
from console.services.executions import execution_create
from console.web import audit

pytestmark = pytest.mark.django_db

DELETE_REPO: dict[str, Any] = {
    "name": "delete_repo",
    "description": "Deletes a repository. Requires admin rights.",
    "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
}


@pytest.fixture
def two_servers(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    use_demo_bank(monkeypatch)
    catalog_import(server="repo", tools=[DELETE_REPO], annotations_trusted=False, actor="test")
    for amount in (10, 20, 30):
        review_data.held_transfer(amount=amount)
    for name in ("acme/web", "acme/api"):
        text = f"Delete the repository {name} now."
        body = said("repo", "delete_repo", text, {"repo": name}, action="Delete")
        execution_create(body=body, token=None, actor="test")


@pytest.fixture
def auditor(db: None) -> Client:
    return signed_in(person("erin", "auditor"))


def export_link(html: str, ext: str) -> str:
    match = re.search(rf'href="(/audit/export\.{ext}[^"]*)"', html)
    assert match, html
    return unescape(match.group(1))


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_a_filtered_export_holds_exactly_the_rows_the_page_lists(
    auditor: Client, two_servers: None, ext: str
) -> None:
    page = auditor.get("/audit/", {"server": "repo"})
    shown = [r["record_digest"] for r in page.context["page"]]
    assert len(shown) == 2

    body = b"".join(auditor.get(export_link(page.content.decode(), ext)).streaming_content).decode()

    if ext == "csv":
        exported = [r["record_digest"] for r in csv.DictReader(io.StringIO(body))]
    else:
        exported = [json.loads(line)["record_digest"] for line in body.splitlines()]
    assert exported == shown


def test_paging_links_keep_the_filters(
    auditor: Client, two_servers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "PAGE_SIZE", 2)

    html = auditor.get("/audit/", {"server": "bank"}).content.decode()

    older = re.search(r'<a href="([^"]*)">older', html)
    assert older and unescape(older.group(1)) == "?server=bank&page=2"
    assert len(auditor.get("/audit/" + unescape(older.group(1))).context["page"]) == 1
    assert "??" not in html


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"server": "retail"}, "server: Select a valid choice. retail is not one of the available choices."),
        ({"date_from": "2026-13-40"}, "date_from: Enter a valid date."),
        ({"verdict": "maybe"}, "verdict: Select a valid choice."),
    ],
)
def test_an_invalid_filter_is_refused_with_the_reason_on_the_page_and_in_exports(
    auditor: Client, two_servers: None, params: dict[str, str], reason: str
) -> None:
    page = auditor.get("/audit/", params)

    assert page.status_code == 400
    assert reason in unescape(page.content.decode())
    assert len(page.context["page"]) == 0
    for path in ("/audit/export.csv", "/audit/export.jsonl"):
        export = auditor.get(path, params)
        assert export.status_code == 400
        assert reason in export.content.decode()
