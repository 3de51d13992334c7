"""The contract workbench: an operator writes a tool's side-car, previews it, saves it as a new contract
version (who and why recorded), resolving the gap reports it closes and re-checking held executions; side-car
files export and import."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from operator_support import user_with

from console import models
from console.services.catalog import catalog_import
from console.services.executions import execution_create
from console.services.gap_reports import gap_report_create
from console.services.sidecars import sidecar_save

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
CATALOG = Path(__file__).resolve().parents[3].parent / "shared" / "catalogs" / "mcp-server-filesystem.json"
WRITE_FILE = (
    next(t for t in json.loads(CATALOG.read_text(encoding="utf-8"))["tools"] if t["name"] == "write_file")
    if CATALOG.exists()
    else {}
)
pytestmark = [pytestmark, pytest.mark.skipif(not CATALOG.exists(), reason=f"no {CATALOG}")]
TEXT = "Write hello to /tmp/notes.txt now."


def span(part: str) -> dict[str, int]:
    start = TEXT.index(part)
    return {"turn": 0, "start": start, "end": start + len(part)}


def write_request() -> dict[str, Any]:
    return {
        "server": "fs",
        "tool": "write_file",
        "principal": "user:carol",
        "conversation": [{"role": "user", "content": TEXT, "trusted": True}],
        "candidates": {
            "path": {"value": "/tmp/notes.txt", "pointer": span("/tmp/notes.txt")},
            "content": {"value": "hello", "pointer": span("hello")},
        },
        "action_name": span("Write"),
        "timing": {"mode": "immediate", "pointer": span("now")},
    }


@pytest.fixture
def write_file() -> models.ToolContract:
    catalog_import(server="fs", tools=[WRITE_FILE], annotations_trusted=False, actor="test")
    return models.ToolContract.objects.get(server__name="fs", name="write_file", current=True)


@pytest.fixture
def operator(client: Client) -> Any:
    user = user_with("olga", "operator")
    client.force_login(user)
    return user


def url(row: models.ToolContract) -> str:
    return f"/catalog/contracts/{row.pk}/sidecar/"


def test_the_workbench_lists_the_arguments_and_the_current_provider_gap(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    page = client.get(url(write_file)).content.decode()
    assert 'name="slot-path-confirm"' in page and 'name="slot-content-question"' in page
    assert 'data-slot="fixed:intended_change" data-outcome="held"' in page
    assert client.get(f"/catalog/contracts/{write_file.pk}/").content.decode().count(url(write_file)) == 1


def test_a_condition_that_does_not_compile_is_reported_as_you_type_with_where_it_is(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    text = json.dumps({"conditions": [{"id": "c", "check": "arg.path.startsWith(", "on_false": "block"}]})
    response = client.post(url(write_file), {"text": text, "state_change": "a file is written"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and body.strip().startswith('<section id="sidecar-result"')
    assert "x-preflight/conditions/0/check" in body and "does not parse" in body
    assert models.ToolContract.objects.filter(name="write_file").count() == 1


def test_the_preview_shows_what_the_sample_values_leave_and_the_diff(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    form = {
        "state_change": "the file at path is written",
        "slot-path-confirm": "on",
        "text": "{}",
        "sample": json.dumps({"path": "/tmp/a.txt", "content": "x"}),
    }
    body = html.unescape(client.post(url(write_file), form, **HTMX).content.decode())
    assert "it resolves fixed:intended_change" in body
    assert 'data-slot="arg:content" data-outcome="settled"' in body
    assert '+  "state_change": "the file at path is written"' in body
    assert '"confirm": true' in body


def test_saving_makes_a_new_version_records_who_and_why_resolves_reports_and_rechecks_held_executions(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    held = execution_create(body=write_request(), token=None, actor="test")
    assert held.verdict == "hold"
    report = gap_report_create(
        cls="provider_gap",
        server="fs",
        tool="write_file",
        slot="fixed:intended_change",
        contract_digest=write_file.digest,
        detail="",
        title="",
        notes="",
        user=operator,
    )
    form = {
        "state_change": "the file at path is written",
        "text": "{}",
        "why": "declared from the README",
        "action": "save",
    }
    response = client.post(url(write_file), form)
    new = models.ToolContract.objects.get(server__name="fs", name="write_file", current=True)
    assert response.status_code == 302 and response["Location"] == f"/catalog/contracts/{new.pk}/"
    assert new.pk != write_file.pk and new.definition["x-preflight"] == {
        "state_change": "the file at path is written"
    }
    event = models.AuditEvent.objects.filter(kind="sidecar").get()
    assert event.body["actor"] == "user:olga" and event.body["why"] == "declared from the README"
    assert event.body["from"] == write_file.digest and event.body["to"] == new.digest
    report.refresh_from_db()
    assert report.status == "resolved"
    held.refresh_from_db()
    assert held.verdict == "execute" and held.contract_id == new.pk


def test_saving_without_saying_why_changes_nothing(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    response = client.post(url(write_file), {"state_change": "x", "text": "{}", "action": "save"})
    assert response.status_code == 422
    assert models.ToolContract.objects.filter(name="write_file").count() == 1


def test_a_side_car_file_exports_and_imports_back(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    sidecar_save(contract_id=write_file.pk, extension={"state_change": "written"}, why="t", user=operator)
    server = write_file.server
    exported = json.loads(client.get(f"/catalog/servers/{server.pk}/sidecar.json").content)
    assert exported["server"] == "fs" and exported["tools"] == {"write_file": {"state_change": "written"}}
    exported["tools"]["write_file"]["notices"] = ["Overwrites without warning."]
    upload = SimpleUploadedFile("fs.json", json.dumps(exported).encode(), content_type="application/json")
    response = client.post(f"/catalog/servers/{server.pk}/sidecar/import/", {"file": upload})
    assert response.status_code == 302
    current = models.ToolContract.objects.get(server__name="fs", name="write_file", current=True)
    assert current.definition["x-preflight"]["notices"] == ["Overwrites without warning."]


def test_importing_another_servers_side_car_is_refused(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    upload = SimpleUploadedFile("x.json", json.dumps({"server": "bank", "tools": {}}).encode())
    response = client.post(f"/catalog/servers/{write_file.server.pk}/sidecar/import/", {"file": upload})
    assert response.status_code == 422
    assert models.ToolContract.objects.filter(name="write_file").count() == 1


def test_an_approver_may_not_open_the_workbench(client: Client, write_file: models.ToolContract) -> None:
    client.force_login(user_with("anna", "approver"))
    assert client.get(url(write_file)).status_code == 403


def test_a_gap_row_or_report_names_a_tool_and_leads_to_its_current_workbench(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    response = client.get("/catalog/sidecar/?server=fs&tool=write_file")
    assert response.status_code == 302 and response["Location"] == url(write_file)
    assert client.get("/catalog/sidecar/?server=fs&tool=nope").status_code == 404


def test_a_condition_is_evaluated_against_the_sample_values_in_the_preview(
    client: Client, operator: Any, write_file: models.ToolContract
) -> None:
    text = json.dumps(
        {"conditions": [{"id": "in_tmp", "check": 'arg.path.startsWith("/tmp/")', "on_false": "block"}]}
    )
    form = {
        "state_change": "written",
        "text": text,
        "sample": json.dumps({"path": "/etc/passwd", "content": "x"}),
    }
    body = client.post(url(write_file), form, **HTMX).content.decode()
    assert 'data-slot="cond:in_tmp" data-outcome="false: blocks"' in body
    form["sample"] = json.dumps({"path": "/tmp/a", "content": "x"})
    body = client.post(url(write_file), form, **HTMX).content.decode()
    assert 'data-slot="cond:in_tmp" data-outcome="settled"' in body
