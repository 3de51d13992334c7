"""How the console writes times and identifiers: one filter each, so every page says them the same way."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from console.web.review_rows import when_text

register = template.Library()


@register.filter
def when(value: datetime | str | None) -> str:
    """`2026-12-02 10:21:43 UTC`: the time in the console's time zone, always with that zone's name."""
    return when_text(value, timezone.get_current_timezone())
