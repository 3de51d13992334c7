"""The gap dashboards: who may see them, what they show, the htmx panel, and the charts' geometry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from operator_support import import_catalog, make_gaps, user_with

from console import models
from console.web import dashboards

pytestmark = pytest.mark.django_db

URL = "/dashboards/"


@pytest.fixture
def gaps() -> list[models.Execution]:
    import_catalog()
    return make_gaps(provider=3, user=2, purge=1)


def login(client: Client, *roles: str) -> Any:
    user = user_with("-".join(roles) or "nobody", *roles)
    client.force_login(user)
    return user


# ---- access ----------------------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_sign_in(client: Client) -> None:
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/dashboards/")


def test_an_approver_is_refused_with_the_reason(client: Client) -> None:
    login(client, "approver")
    response = client.get(URL)
    assert response.status_code == 403
    assert b"needs the operator or auditor role" in response.content


@pytest.mark.parametrize("role", ["operator", "auditor"])
def test_operators_and_auditors_see_the_dashboards(client: Client, gaps: Any, role: str) -> None:
    login(client, role)
    response = client.get(URL)
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" in body
    for label in ("User gaps", "Provider gaps", "Source gaps", "Implementation gaps"):
        assert label in body
    assert body.count("<svg") >= 7  # four sparklines, the time chart and the bar charts
    assert 'role="img"' in body and '<title id="chart-over-time-title">' in body


def test_only_operators_get_the_report_button(client: Client, gaps: Any) -> None:
    login(client, "auditor")
    assert b"Report to provider" not in client.get(URL).content
    client.logout()
    login(client, "operator")
    body = client.get(URL).content.decode()
    assert "Report to provider" in body
    assert (
        "/gap-reports/new/?cls=provider_gap&amp;server=repo&amp;tool=delete_repo&amp;slot=cond%3Aprose-1"
        in body
    )
    # User gaps are fixed in the conversation, not by the provider: no button on them.
    row = body.split('data-slot="arg:from_account"')[1].split("</tr>")[0]
    assert "Report to provider" not in row


def test_an_htmx_request_gets_only_the_panel(client: Client, gaps: Any) -> None:
    login(client, "operator")
    response = client.get(URL, {"cls": "provider_gap"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="dashboard-panel"')
    assert "<html" not in body and "<form" not in body
    assert "cond:prose-1" in body and "arg:from_account" not in body


# ---- content ---------------------------------------------------------------------------------------------


def test_the_panel_separates_causes_and_counts_gaps(gaps: Any) -> None:
    data = dashboards.dashboard_data(dashboards.Filters(30, "", "", ""))

    tiles = {t["cls"]: t for t in data["tiles"]}
    # provider: 3 delete_repo executions with 2 slots each, 1 purge_cache with 1; user: 2 transfers, 1 each
    assert tiles["provider_gap"]["gaps"] == 7
    assert tiles["user_gap"]["gaps"] == 2
    assert tiles["source_gap"]["gaps"] == tiles["implementation_gap"]["gaps"] == 0
    kinds = {r.label: r.total for r in data["provider_chart"].rows}
    assert kinds == {"undeclared condition": 3, "undeclared state change": 3, "missing schema": 1}
    tools = {r.label: r.total for r in data["tools_chart"].rows}
    assert tools == {"repo/delete_repo": 6, "bank/transfer": 2, "repo/purge_cache": 1}
    user = data["user_chart"].rows
    assert [(r.label, r.total) for r in user] == [("transfer · arg:from_account", 2)]
    today = data["series_rows"][-1]
    assert today["total"] == 6  # executions with a gap today (4 provider + 2 user)


def test_filters_narrow_every_chart(gaps: Any) -> None:
    data = dashboards.dashboard_data(dashboards.Filters(7, "", "repo", "purge_cache"))
    assert [(r["slot"], r["executions"]) for r in data["table"]] == [("schema:#", 1)]
    assert {t["cls"]: t["gaps"] for t in data["tiles"]}["provider_gap"] == 1
    assert len(data["days"]) == 7


def test_gaps_are_placed_on_their_day_and_old_ones_leave_the_window(gaps: Any) -> None:
    now = timezone.now()
    models.GapRow.objects.filter(tool="purge_cache").update(created_at=now - timedelta(days=3))
    models.GapRow.objects.filter(tool="transfer").update(created_at=now - timedelta(days=45))

    data = dashboards.dashboard_data(dashboards.Filters(30, "", "", ""), now=now)

    provider = next(t for t in data["tiles"] if t["cls"] == "provider_gap")
    assert provider["spark"].last == 3
    by_day = {r["day"]: r["total"] for r in data["series_rows"]}
    assert by_day[timezone.localdate(now) - timedelta(days=3)] == 1
    assert by_day[timezone.localdate(now)] == 3
    assert next(t for t in data["tiles"] if t["cls"] == "user_gap")["gaps"] == 0


def test_the_dashboard_reads_its_gap_rows_in_a_few_queries_however_many_there_are(gaps: Any) -> None:
    # A budget, not the statements: a query per row or per server would show here.
    with CaptureQueriesContext(connection) as queries:
        dashboards.dashboard_data(dashboards.Filters(30, "", "", ""))
    assert len(queries.captured_queries) <= 3


def test_bad_filter_values_are_reported_not_fatal(client: Client, gaps: Any) -> None:
    login(client, "operator")
    response = client.get(URL, {"days": "9999", "cls": "nonsense", "server": "repo"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "Ignored:" in body
    assert "repo/delete_repo" in body and "bank/transfer" not in body.split('id="gap-table"')[1]


def test_an_empty_database_renders(client: Client) -> None:
    login(client, "auditor")
    response = client.get(URL)
    assert response.status_code == 200
    assert b"No gaps recorded in this window." in response.content
