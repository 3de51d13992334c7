"""The contract workbench in a real browser: the filesystem server's real `write_file` holds (it declares no
state change); an operator writes its side-car, sees the preview, saves, and the same execution then runs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from console import connectors, models, storage
from console.services.catalog import catalog_import
from console.services.executions import execution_create
from console.services.gate import execution_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CATALOG = Path(__file__).resolve().parents[2].parent / "shared" / "catalogs" / "mcp-server-filesystem.json"
TEXT = "Write hello to /tmp/notes.txt now."


def span(part: str) -> dict[str, int]:
    start = TEXT.index(part)
    return {"turn": 0, "start": start, "end": start + len(part)}


@pytest.mark.skipif(not CATALOG.exists(), reason=f"no {CATALOG}")
def test_an_operator_writes_the_side_car_of_a_held_real_tool_and_the_same_execution_then_runs(
    browser_page: Callable[..., Any], screenshot: Callable[[Any, str], Path]
) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    tool = next(
        t for t in json.loads(CATALOG.read_text(encoding="utf-8"))["tools"] if t["name"] == "write_file"
    )
    catalog_import(
        server="fs", tools=[tool], annotations_trusted=False, connector={"kind": "python"}, actor="test"
    )
    written: list[dict[str, Any]] = []
    connectors.register_tool("fs", "write_file")(lambda **kw: written.append(kw) or {"ok": True})
    body = {
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
    execution = execution_create(body=body, token=None, actor="test")
    assert execution.verdict == "hold"
    held = models.ToolContract.objects.get(server__name="fs", name="write_file", current=True)

    olga = get_user_model().objects.create_user("olga", password="olga-pass-Preflight1")
    olga.groups.add(Group.objects.get_or_create(name="operator")[0])
    page = browser_page(olga)
    page.goto(f"/catalog/contracts/{held.pk}/")
    page.get_by_role("link", name="Write side-car").click()
    expect(page.get_by_role("heading", name="Side-car for fs/write_file")).to_be_visible()
    expect(page.locator("tr[data-slot='fixed:intended_change']")).to_have_attribute("data-outcome", "held")

    # A condition that does not compile is reported as it is typed, where it is.
    page.get_by_label("x-preflight (JSON)").fill(
        '{"conditions": [{"id": "in_tmp", "check": "arg.path.startsWith(", "on_false": "block"}]}'
    )
    expect(page.get_by_test_id("sidecar-problem")).to_contain_text("x-preflight/conditions/0/check")

    page.get_by_label("x-preflight (JSON)").fill(
        '{"conditions": [{"id": "in_tmp", "check": "arg.path.startsWith(\\"/tmp/\\")", "on_false": "block"}]}'
    )
    page.get_by_label("State change", exact=True).fill(
        "the file at path is created or overwritten with content"
    )
    page.get_by_label("Question for path").fill("Which file should be written?")
    page.get_by_label("Sample values (JSON)").fill('{"path": "/tmp/a.txt", "content": "x"}')
    expect(page.get_by_test_id("sidecar-ok")).to_contain_text("it resolves fixed:intended_change")
    expect(page.locator("tr[data-slot='cond:in_tmp']")).to_have_attribute("data-outcome", "settled")
    expect(page.get_by_test_id("sidecar-diff")).to_contain_text('"state_change"')
    screenshot(page, "workbench-preview")

    page.get_by_label("Why").fill(
        "write_file declares no state change; the server's README says what it does"
    )
    page.get_by_role("button", name="Save as new contract version").click()

    saved = models.ToolContract.objects.get(server__name="fs", name="write_file", current=True)
    expect(page).to_have_url(re.compile(rf"/catalog/contracts/{saved.pk}/$"))
    expect(page.get_by_role("status").or_(page.locator(".messages"))).to_contain_text("1 held execution")
    assert saved.pk != held.pk
    assert saved.definition["x-preflight"]["conditions"][0]["check"] == 'arg.path.startsWith("/tmp/")'
    event = models.AuditEvent.objects.filter(kind="sidecar").get()
    assert event.body["actor"] == "user:olga" and event.body["why"].startswith("write_file declares")

    execution.refresh_from_db()
    assert execution.verdict == "execute"
    answer = storage.record_answer(execution)
    assert answer["slots"] and answer["grant"]
    outcome = execution_run(execution_id=execution.pk, token=answer["grant"], actor="agent")
    assert outcome.outcome == "executed"
    assert written == [{"path": "/tmp/notes.txt", "content": "hello"}]
