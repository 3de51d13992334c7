"""The held-executions queue: filters, counts per route, one page — a fixed handful of indexed queries however
many executions wait (10,000 render in well under 100 ms; see bench/console.py).

Route, gap class and unknown count are columns of the execution (of its latest record, as its verdict is),
so the counts and the page read one partial index and never a record's JSON. Executions of one conversation
are shown together, at the place of the first of them, with a link to all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django import forms
from django.db.models import Count, F, QuerySet
from django.utils import timezone

from console import models
from console.web.filters import CatalogFilter
from console.web.review_rows import age

HELD = models.HELD_VERDICTS
ROUTES = ("ask_user", "measure", "hold", "provider_gap", "unsupported")
GAP_CLASSES = ("user_gap", "provider_gap", "source_gap", "implementation_gap")
AGES = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
}
PAGE_SIZE = 50


class QueueFilter(CatalogFilter):
    route = forms.ChoiceField(required=False, choices=[("", "any route"), *((r, r) for r in ROUTES)])
    gap = forms.ChoiceField(required=False, choices=[("", "any gap"), *((g, g) for g in GAP_CLASSES)])
    age = forms.ChoiceField(
        required=False,
        choices=[
            ("", "any age"),
            ("5m", "waiting > 5 min"),
            ("1h", "waiting > 1 h"),
            ("1d", "waiting > 1 day"),
            ("7d", "waiting > 7 days"),
        ],
    )
    page = forms.IntegerField(required=False, min_value=1)
    conversation = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)

    def selects(self) -> list[tuple[str, list[tuple[str, str]], str]]:
        """(name, choices, selected) of each drop-down, for the template to write out itself: Django's widget
        templates would render every <option> through the template engine, on every 5 s refresh."""
        out = []
        for name, field in self.fields.items():
            if isinstance(field, forms.ChoiceField):
                out.append((name, list(field.choices), str(self.data.get(name, ""))))  # type: ignore[arg-type]
        return out


@dataclass(frozen=True, slots=True)
class QueuePage:
    rows: list[dict[str, Any]]
    counts: dict[str, int]  # per route, over the other filters
    total: int  # held executions matching every filter
    number: int
    pages: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages


def held(filters: dict[str, Any]) -> QueuePage:
    base: QuerySet[models.Execution] = models.Execution.objects.filter(verdict__in=HELD)
    if filters.get("server"):
        base = base.filter(contract__server__name=filters["server"])
    if filters.get("tool"):
        base = base.filter(contract__name=filters["tool"])
    if filters.get("gap"):
        base = base.filter(gap_classes__contains=f" {filters['gap']} ")
    if filters.get("age") in AGES:
        base = base.filter(created_at__lte=timezone.now() - AGES[filters["age"]])
    if filters.get("conversation"):
        base = base.filter(conversation_key=filters["conversation"])

    # Every count from one pass over the partial index: executions per combination of routes (a handful of
    # distinct values), summed per route here. The route counts ignore the route filter, so each one says
    # what picking it would give.
    counts = dict.fromkeys(ROUTES, 0)
    everything = 0
    for routes, n in base.values_list("routes").annotate(n=Count("*")).order_by():
        everything += n
        for route in routes.split():
            counts[route] = counts.get(route, 0) + n
    rows_qs = base
    total = everything
    if filters.get("route") in ROUTES:
        rows_qs = base.filter(routes__contains=f" {filters['route']} ")
        total = counts[filters["route"]]

    pages = max(1, -(-total // PAGE_SIZE))
    number = min(filters.get("page") or 1, pages)
    start = (number - 1) * PAGE_SIZE
    rows = list(
        rows_qs.order_by("created_at", "id").values(
            "id",
            "principal",
            "verdict",
            "created_at",
            "conversation_key",
            "routes",
            "gap_classes",
            "unknown_count",
            server=F("contract__server__name"),
            tool=F("contract__name"),
        )[start : start + PAGE_SIZE]
    )
    return QueuePage(_grouped(rows), counts, total, number, pages)


def _grouped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Executions of one conversation next to each other, where the first of them is. Calls made in parallel
    arrive together, so they are nearly always on one page; the header links to all of them."""
    keys = {row["conversation_key"] for row in rows}
    sizes = dict(
        models.Execution.objects.filter(verdict__in=HELD, conversation_key__in=keys)
        .values_list("conversation_key")
        .annotate(n=Count("*"))
        .order_by()
    )
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["conversation_key"], []).append(row)
    now = timezone.now()
    out = []
    for key, members in groups.items():
        for i, row in enumerate(members):
            row["group_size"] = sizes.get(key, 1)
            row["group_first"] = i == 0
            row["route_list"] = row["routes"].split()
            row["gap_list"] = row["gap_classes"].split()
            row["waiting"] = age((now - row["created_at"]).total_seconds())
            out.append(row)
    return out
