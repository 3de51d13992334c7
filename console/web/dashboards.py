"""Gap dashboards: what is missing, whose problem it is, over time and by server/tool.

Two aggregate queries over GapRow per page (per day and class, and per class, tool and slot), both reading the
(created_at, cls) index for the time window; everything else is arithmetic on their results. The unit is
named on every chart: per day we count executions with a gap; elsewhere a "gap" is one slot of one execution.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any, TypedDict
from urllib.parse import urlencode

from django import forms
from django.db.models import Count, Max
from django.db.models.functions import TruncDate
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from console import models
from console.selectors.gap_reports import (
    GAP_CLASS_LABELS,
    GAP_CLASS_OWNERS,
    GAP_CLASSES,
    REPORTABLE_CLASSES,
    gap_kind,
)
from console.web.access import role_required
from console.web.operator_charts import sparkline, stacked_bars, stacked_columns
from console.web.requests import SignedInRequest, render_partial

DAY_CHOICES = (7, 14, 30, 90)
TOP_ROWS = 12
TABLE_ROWS = 100


class DashboardFilters(forms.Form):
    days = forms.TypedChoiceField(
        choices=[(d, f"last {d} days") for d in DAY_CHOICES],
        coerce=int,
        required=False,
        # django-stubs types empty_value as str; Django takes any value.
        empty_value=30,  # type: ignore[arg-type]
    )
    cls = forms.ChoiceField(
        choices=[("", "all causes"), *((c, GAP_CLASS_LABELS[c]) for c in GAP_CLASSES)],
        required=False,
        label="cause",
    )
    server = forms.CharField(required=False, max_length=200)
    tool = forms.CharField(required=False, max_length=200)


class SlotGaps(TypedDict):
    """Query 2's row: the gaps of one slot of one tool, of one class, with the kind of gap it is."""

    cls: str
    server: str
    tool: str
    slot: str
    executions: int
    records: int
    last: datetime
    detail: str
    kind: str


class ReportRef(TypedDict):
    """An open or sent provider-gap report, as the gap table links to it."""

    id: int
    server: str
    tool: str
    slot: str
    status: str


class TableRow(SlotGaps):
    """A row of the gap table: the slot's gaps, the report already filed for it, how to file one."""

    report: ReportRef | None
    reportable: bool
    report_query: str
    label: str


@dataclass(frozen=True, slots=True)
class Filters:
    days: int
    cls: str
    server: str
    tool: str

    def query(self, **override: Any) -> str:
        values = {"days": self.days, "cls": self.cls, "server": self.server, "tool": self.tool, **override}
        return urlencode({k: v for k, v in values.items() if v not in ("", None)})


def dashboard_data(filters: Filters, *, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    today = timezone.localdate(now)
    first_day = today - timedelta(days=filters.days - 1)
    since = timezone.make_aware(datetime.combine(first_day, time.min))
    base = models.GapRow.objects.filter(created_at__gte=since)
    if filters.cls:
        base = base.filter(cls=filters.cls)
    if filters.server:
        base = base.filter(server=filters.server)
    if filters.tool:
        base = base.filter(tool=filters.tool)

    # Query 1: executions with a gap, per day and class.
    per_day = (
        base.annotate(day=TruncDate("created_at"))
        .values("day", "cls")
        .annotate(n=Count("execution", distinct=True))
        .order_by()
    )
    days = [first_day + timedelta(days=i) for i in range(filters.days)]
    index = {d: i for i, d in enumerate(days)}
    series: dict[str, list[int]] = {c: [0] * len(days) for c in GAP_CLASSES}
    for cell in per_day:
        day = cell["day"]
        if isinstance(day, datetime):
            day = day.date()
        if day in index and cell["cls"] in series:
            series[cell["cls"]][index[day]] += cell["n"]

    # Query 2: gaps (one slot of one execution) per class, tool and slot.
    per_slot: list[SlotGaps] = [
        {**row, "kind": gap_kind(row["cls"], row["slot"])}
        for row in base.values("cls", "server", "tool", "slot")
        .annotate(
            executions=Count("execution", distinct=True),
            records=Count("record", distinct=True),
            last=Max("created_at"),
            detail=Max("detail"),
        )
        .order_by("-executions", "cls", "server", "tool", "slot")
    ]

    classes = [c for c in GAP_CLASSES if not filters.cls or c == filters.cls]
    totals: dict[str, int] = defaultdict(int)
    records: dict[str, int] = defaultdict(int)
    by_tool: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in per_slot:
        totals[row["cls"]] += row["executions"]
        records[row["cls"]] += row["records"]
        by_tool[(row["server"], row["tool"])][row["cls"]] += row["executions"]
        if row["cls"] == "provider_gap":
            by_kind[row["kind"]][row["cls"]] += row["executions"]

    tiles = [
        {
            "cls": c,
            "label": GAP_CLASS_LABELS[c],
            "owner": GAP_CLASS_OWNERS[c],
            "gaps": totals[c],
            "records": records[c],
            "slots": sum(1 for r in per_slot if r["cls"] == c),
            "spark": sparkline(series[c], what=f"{GAP_CLASS_LABELS[c]}, executions per day"),
            "query": filters.query(cls=c),
        }
        for c in GAP_CLASSES
    ]
    over_time = stacked_columns(
        id="chart-over-time",
        title=f"Executions with a gap, per day (last {filters.days} days)",
        days=days,
        series=series,
        order=classes,
        labels=GAP_CLASS_LABELS,
        unit="executions",
    )
    tool_rows = sorted(by_tool.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))[:TOP_ROWS]
    tools_chart = stacked_bars(
        id="chart-by-tool",
        title="Gaps by server/tool",
        rows=[(f"{s}/{t}", v, "?" + filters.query(server=s, tool=t)) for (s, t), v in tool_rows],
        order=classes,
        labels=GAP_CLASS_LABELS,
        unit="gaps",
    )
    user_rows = [r for r in per_slot if r["cls"] == "user_gap"][:TOP_ROWS]
    user_chart = stacked_bars(
        id="chart-user-slots",
        title="User gaps: what users leave out, by tool and slot",
        rows=[
            (
                f"{r['tool']} · {r['slot']}",
                {"user_gap": r["executions"]},
                "?" + filters.query(server=r["server"], tool=r["tool"]),
            )
            for r in user_rows
        ],
        order=["user_gap"],
        labels=GAP_CLASS_LABELS,
        unit="gaps",
    )
    kind_rows = sorted(by_kind.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    provider_chart = stacked_bars(
        id="chart-provider-kinds",
        title="Provider gaps by kind: what tool definitions leave out",
        rows=[(k, v, "") for k, v in kind_rows],
        order=["provider_gap"],
        labels=GAP_CLASS_LABELS,
        unit="gaps",
    )
    reported: dict[tuple[str, str, str], ReportRef] = {
        (r["server"], r["tool"], r["slot"]): r
        for r in models.GapReport.objects.filter(status__in=("open", "sent"))
        .order_by("created_at")
        .values("id", "server", "tool", "slot", "status")
    }
    table: list[TableRow] = [
        {
            **row,
            "report": reported.get((row["server"], row["tool"], row["slot"])),
            "reportable": row["cls"] in REPORTABLE_CLASSES,
            "report_query": urlencode(
                {"cls": row["cls"], "server": row["server"], "tool": row["tool"], "slot": row["slot"]}
            ),
            "label": GAP_CLASS_LABELS[row["cls"]],
        }
        for row in per_slot[:TABLE_ROWS]
    ]
    return {
        "filters": filters,
        "days": days,
        "tiles": tiles,
        "over_time": over_time,
        "tools_chart": tools_chart,
        "user_chart": user_chart,
        "provider_chart": provider_chart,
        "source_rows": [r for r in per_slot if r["cls"] == "source_gap"][:TOP_ROWS],
        "implementation_rows": [r for r in per_slot if r["cls"] == "implementation_gap"][:TOP_ROWS],
        "table": table,
        "table_more": max(0, len(per_slot) - TABLE_ROWS),
        "series_rows": [
            {"day": d, "values": [series[c][i] for c in classes], "total": sum(series[c][i] for c in classes)}
            for i, d in enumerate(days)
        ],
        "classes": [(c, GAP_CLASS_LABELS[c]) for c in classes],
        "first_day": first_day,
        "today": today,
    }


@require_GET
@role_required("operator", "auditor")
def index(request: SignedInRequest) -> HttpResponse:
    form = DashboardFilters(request.GET or None)
    data: dict[str, Any] = {"days": 30, "cls": "", "server": "", "tool": ""}
    if form.is_bound:
        # Only the valid fields are cleaned: a bad value is shown as an error beside the filters, never a 500.
        form.is_valid()
        data.update(form.cleaned_data)
    filters = Filters(**data)
    context = dashboard_data(filters)
    pairs = list(models.ToolContract.objects.filter(current=True).values_list("server__name", "name"))
    servers, tools = sorted({s for s, _ in pairs}), sorted({t for _, t in pairs})
    # A retired tool's gaps stay reachable by link; its name must still show as the selected filter.
    if filters.server and filters.server not in servers:
        servers.append(filters.server)
    if filters.tool and filters.tool not in tools:
        tools.append(filters.tool)
    context.update(form=form, servers=servers, tools=tools, day_choices=DAY_CHOICES)
    return render_partial(request, "console/dashboards/index.html", context, "panel")
