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
from console.web.operator_charts import nice_max, sparkline, stacked_bars, stacked_columns

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


# ---- chart geometry --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peak", "axis", "step"), [(0, 1, 1), (1, 1, 1), (3, 3, 1), (7, 8, 2), (37, 40, 10), (120, 150, 50)]
)
def test_axis_maximum_is_a_round_number(peak: int, axis: int, step: int) -> None:
    assert nice_max(peak) == (axis, step)


def test_stacked_columns_stack_to_the_day_total() -> None:
    from datetime import date

    days = [date(2025, 1, d) for d in range(1, 5)]
    chart = stacked_columns(
        id="c",
        title="t",
        days=days,
        series={"user_gap": [1, 0, 2, 0], "provider_gap": [3, 0, 2, 0]},
        order=["user_gap", "provider_gap"],
        labels={"user_gap": "User gaps", "provider_gap": "Provider gaps"},
        unit="executions",
    )
    assert chart.total == 8
    day3 = [m for m in chart.marks if "Jan 03" in m.title]
    assert len(day3) == 2
    # The two segments touch, and the 4-high column fills the axis (max 4).
    lower, upper = day3
    assert abs(upper.y + upper.h - lower.y) < 0.2
    assert abs(lower.y + lower.h - chart.plot_bottom) < 0.2
    assert abs(upper.y - chart.plot_top) < 0.2
    assert "busiest day Jan 01 with 4" in chart.desc


def test_bars_are_proportional_and_labelled() -> None:
    chart = stacked_bars(
        id="b",
        title="t",
        rows=[("a/x", {"user_gap": 4}, "?tool=x"), ("b/y", {"user_gap": 2}, "")],
        order=["user_gap"],
        labels={"user_gap": "User gaps"},
        unit="gaps",
    )
    a, b = chart.rows
    assert a.marks[0].w == pytest.approx(2 * b.marks[0].w, rel=0.01)
    assert a.href == "?tool=x" and "a/x with 4 gaps" in chart.desc


def test_sparkline_of_flat_and_empty_series() -> None:
    flat = sparkline([0, 0, 0], what="x")
    assert flat.peak == 0 and flat.points.count(",") == 3
    single = sparkline([5], what="x")
    assert single.last == 5
