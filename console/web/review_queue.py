"""The held-executions queue: filters, search, counts per route, one page — a fixed handful of indexed
queries however many executions wait — and the recently decided executions, so work that leaves the queue
can still be found.

Route, gap class, unknown count and the call's one-line summary are columns of the execution (of its latest
record, as its verdict is), so the counts and the page read one partial index and never a record's JSON.
Executions of one conversation are shown together, at the place of the first of them, with a link to all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from console import models
from console.selectors.gap_reports import GAP_CLASSES
from console.web.filters import CatalogFilter
from console.web.review_rows import age
from preflight.record import ROUTES

HELD = models.HELD_VERDICTS
# Why a call waits, in words, per route of its unresolved slots.
ROUTE_WORDS = {
    "ask_user": "waits for the user's answer",
    "measure": "waits for a lookup",
    "hold": "held for an approver's decision",
    "provider_gap": "the tool's definition lacks what is needed",
    "unsupported": "uses a schema construct the gate cannot read",
}
VERDICT_ROUTE = {"ask": "ask_user", "measure": "measure", "hold": "hold"}
AGES = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
}
SORTS = {"oldest": ("created_at", "id"), "newest": ("-created_at", "-id")}
DECISIONS = ("granted", "rejected", "expired")
PAGE_SIZE = 50


class _Choices(CatalogFilter):
    q = forms.CharField(required=False, max_length=100, strip=True)
    page = forms.IntegerField(required=False, min_value=1)

    def selects(self) -> list[tuple[str, list[tuple[str, str]], str]]:
        """(name, choices, selected) of each drop-down, for the template to write out itself: Django's widget
        templates would render every <option> through the template engine, on every refresh."""
        out = []
        for name, field in self.fields.items():
            if isinstance(field, forms.ChoiceField):
                # Flat (value, label) pairs: these filters declare no option groups, which the stubs allow.
                out.append((name, list(field.choices), str(self.data.get(name, ""))))  # type: ignore[arg-type]
        return out


class QueueFilter(_Choices):
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
    sort = forms.ChoiceField(required=False, choices=[("", "oldest first"), ("newest", "newest first")])
    mine = forms.BooleanField(required=False)
    conversation = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)


class DecidedFilter(_Choices):
    decision = forms.ChoiceField(required=False, choices=[("", "any decision"), *((d, d) for d in DECISIONS)])


@dataclass(frozen=True, slots=True)
class QueuePage:
    rows: list[dict[str, Any]]
    counts: dict[str, int]  # per route (per decision in the decided view), over the other filters
    total: int  # executions matching every filter
    number: int
    pages: int


def _searched(qs: QuerySet[models.Execution], q: str) -> QuerySet[models.Execution]:
    """Words of the summary, the tool, the principal or the server, each word anywhere in one of them.

    The tools a word names are read first (the catalog is small): a condition on the execution's own columns
    alone lets PostgreSQL combine its trigram indexes (migration 0013) instead of reading every row."""
    for word in q.split()[:5]:
        named = models.ToolContract.objects.filter(Q(name__icontains=word) | Q(server__name__icontains=word))
        qs = qs.filter(
            Q(summary__icontains=word)
            | Q(principal__icontains=word)
            | Q(contract__in=list(named.values_list("pk", flat=True)))
        )
    return qs


def _catalog(qs: QuerySet[models.Execution], filters: dict[str, Any]) -> QuerySet[models.Execution]:
    if filters.get("server"):
        qs = qs.filter(contract__server__name=filters["server"])
    if filters.get("tool"):
        qs = qs.filter(contract__name=filters["tool"])
    if filters.get("q"):
        qs = _searched(qs, filters["q"])
    return qs


_ROW_FIELDS = (
    "id",
    "principal",
    "verdict",
    "created_at",
    "updated_at",
    "conversation_key",
    "routes",
    "gap_classes",
    "unknown_count",
    "summary",
)


def _page(
    qs: QuerySet[models.Execution],
    total: int,
    filters: dict[str, Any],
    order: Sequence[str],
    *fields: str,
    **more: F,
) -> tuple[list[dict[str, Any]], int, int]:
    """The rows of the page `filters` asks for (the last one past the end), its number and the page count."""
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(filters.get("page") or 1, pages)
    start = (number - 1) * PAGE_SIZE
    rows = qs.order_by(*order).values(
        *_ROW_FIELDS, *fields, server=F("contract__server__name"), tool=F("contract__name"), **more
    )
    return list(rows[start : start + PAGE_SIZE]), number, pages


def held(filters: dict[str, Any], *, user: User | None = None) -> QueuePage:
    """The page of held executions `filters` (QueueFilter's cleaned data) asks for; `mine` needs `user`."""
    base: QuerySet[models.Execution] = _catalog(models.Execution.objects.filter(verdict__in=HELD), filters)
    if filters.get("gap"):
        base = base.filter(gap_classes__contains=f" {filters['gap']} ")
    if filters.get("age") in AGES:
        base = base.filter(created_at__lte=timezone.now() - AGES[filters["age"]])
    if filters.get("conversation"):
        base = base.filter(conversation_key=filters["conversation"])
    if filters.get("mine") and user is not None:
        base = base.filter(claim__approver=user)

    # One pass over the partial index: executions per combination of routes (a handful), summed per route
    # here. The route counts ignore the route filter, so each says what picking it would give.
    counts: dict[str, int] = dict.fromkeys(ROUTES, 0)
    total = 0
    for routes, n in base.values_list("routes").annotate(n=Count("*")).order_by():
        total += n
        for route in routes.split():
            counts[route] = counts.get(route, 0) + n
    rows_qs = base
    if filters.get("route") in ROUTES:
        rows_qs = base.filter(routes__contains=f" {filters['route']} ")
        total = counts[filters["route"]]

    order = SORTS.get(filters.get("sort") or "oldest", SORTS["oldest"])
    rows, number, pages = _page(rows_qs, total, filters, order, claimed_by=F("claim__approver__username"))
    return QueuePage(_grouped(rows), counts, total, number, pages)


def decided(filters: dict[str, Any]) -> QueuePage:
    """Executions that waited and were decided — granted, rejected or expired — most recent first: decided
    work leaves the queue but not the approver's sight."""
    # `IN (held records)` rather than a correlated EXISTS: PostgreSQL hashes it once; an EXISTS runs per row.
    waited = models.PreflightRecord.objects.filter(verdict__in=HELD).values("execution_id")
    kinds = {
        "rejected": Q(rejected_at__isnull=False),
        "expired": Q(expired_at__isnull=False),
        "granted": Q(verdict="execute", rejected_at__isnull=True, expired_at__isnull=True, pk__in=waited),
    }
    # A rejection and an expiry are recorded as a block: the verdict index leaves out every waiting call.
    base = _catalog(models.Execution.objects.filter(verdict__in=("execute", "block")), filters)
    base = base.filter(kinds["rejected"] | kinds["expired"] | kinds["granted"])
    aggregate = base.aggregate(**{k: Count("pk", filter=q) for k, q in kinds.items()})
    counts = {k: aggregate[k] or 0 for k in DECISIONS}
    rows_qs = base
    total = sum(counts.values())
    if filters.get("decision") in DECISIONS:
        rows_qs = base.filter(kinds[filters["decision"]])
        total = counts[filters["decision"]]
    rows, number, pages = _page(
        rows_qs,
        total,
        filters,
        ("-updated_at", "-id"),
        "rejected_at",
        "expired_at",
        rejected_by=F("rejection__reviewer__username"),
        rejected_for=F("rejection__reason"),
    )
    now = timezone.now()
    for row in rows:
        row["decision"] = "rejected" if row["rejected_at"] else "expired" if row["expired_at"] else "granted"
        row["decided_at"] = row["rejected_at"] or row["expired_at"] or row["updated_at"]
        row["decided_ago"] = age((now - row["decided_at"]).total_seconds())
    return QueuePage(rows, counts, total, number, pages)


def _after(at: Any, pk: Any) -> Q:
    """Later than (at, pk) oldest first: a tie on the time is broken by the id, as the list breaks it."""
    return Q(created_at__gt=at) | Q(created_at=at, id__gt=pk)


def next_held(execution: models.Execution) -> Any | None:
    """The held execution the queue (oldest first) lists after `execution`, else the queue's first: where
    "next" leads after a decision. The queue lists one conversation's executions together, at the place of
    the first of them, so the rest of this one's conversation come first, then the next conversation's."""
    held = models.Execution.objects.filter(verdict__in=HELD)
    order = SORTS["oldest"]
    here = (execution.created_at, execution.pk)
    siblings = held.filter(conversation_key=execution.conversation_key).exclude(pk=execution.pk)
    later = siblings.filter(_after(*here)).order_by(*order).values_list("pk", flat=True).first()
    if later is not None:
        return later
    # Where this conversation is listed: at its first execution still held, or at this one.
    place = siblings.filter(~_after(*here)).order_by(*order).values_list("created_at", "pk").first() or here
    earlier = held.filter(conversation_key=OuterRef("conversation_key")).exclude(
        _after(OuterRef("created_at"), OuterRef("id"))
    )
    firsts = held.exclude(pk=execution.pk).filter(~Exists(earlier.exclude(pk=OuterRef("pk"))))
    following = firsts.exclude(conversation_key=execution.conversation_key).filter(_after(*place))
    nxt = following.order_by(*order).values_list("pk", flat=True).first()
    return nxt or firsts.order_by(*order).values_list("pk", flat=True).first()


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
            # A hold with no unresolved slot waits for an approval (of a value or of the call).
            row["why"] = [ROUTE_WORDS[r] for r in row["route_list"] if r in ROUTE_WORDS] or [
                ROUTE_WORDS[VERDICT_ROUTE[row["verdict"]]]
            ]
            row["gap_list"] = row["gap_classes"].split()
            row["waiting"] = age((now - row["created_at"]).total_seconds())
            out.append(row)
    return out
