"""Server-rendered SVG charts: geometry computed here, drawn by templates/console/dashboards/_charts.html.

No chart library and no JavaScript: every chart is plain SVG with a <title>/<desc> for screen readers, a
<title> per mark for hover, and the same numbers as a table beside it. Colours come from static/charts.css
by gap class, so the palette (colour-blind safe, Okabe-Ito) lives in one place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date


def nice_max(value: float, ticks: int = 4) -> tuple[float, float]:
    """(axis maximum, tick step) with a step of 1, 2 or 5 times 10^k and at most `ticks` steps."""
    if value <= 0:
        return 1.0, 1.0
    raw = value / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    # The first of 1, 2, 5 or 10 times the magnitude to reach `raw` (10 always does); counts: no fractions.
    step = max(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw), 1.0)
    return math.ceil(value / step) * step, step


@dataclass(frozen=True, slots=True)
class Mark:
    x: float
    y: float
    w: float
    h: float
    cls: str  # CSS class suffix (a gap class)
    title: str  # hover text and the accessible name of the mark

    @classmethod
    def at(cls, x: float, y: float, w: float, h: float, css: str, title: str) -> Mark:
        """A mark with its geometry rounded to the tenth of a pixel the SVG is written in."""
        return cls(round(x, 1), round(y, 1), round(w, 1), round(h, 1), css, title)


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(slots=True)
class ColumnChart:
    """Stacked columns over time."""

    id: str
    title: str
    desc: str
    width: int
    height: int
    plot_left: int
    plot_top: int
    plot_bottom: int
    plot_right: int
    y_label_x: int = 0
    x_label_y: int = 0
    marks: list[Mark] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    total: int = 0


def stacked_columns(
    *,
    id: str,
    title: str,
    days: Sequence[date],
    series: Mapping[str, Sequence[int]],
    order: Sequence[str],
    labels: Mapping[str, str],
    unit: str,
) -> ColumnChart:
    width, height = 1180, 240
    left, right, top, bottom = 40, 10, 10, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(series.get(c, [0] * len(days))[i] for c in order) for i in range(len(days))]
    peak = max(totals, default=0)
    axis_max, step = nice_max(peak)
    chart = ColumnChart(
        id=id,
        title=title,
        desc="",
        width=width,
        height=height,
        plot_left=left,
        plot_top=top,
        plot_bottom=top + plot_h,
        plot_right=left + plot_w,
        y_label_x=left - 6,
        x_label_y=top + plot_h + 16,
        total=sum(totals),
    )
    n = max(len(days), 1)
    slot_w = plot_w / n
    bar_w = max(slot_w * 0.72, 1.0)
    scale = plot_h / axis_max
    for i, day in enumerate(days):
        x = left + i * slot_w + (slot_w - bar_w) / 2
        y: float = top + plot_h
        for c in order:
            v = series.get(c, [0] * len(days))[i]
            if not v:
                continue
            h = v * scale
            y -= h
            title = f"{day:%b %d}: {v} {labels[c].lower()} ({unit})"
            chart.marks.append(Mark.at(x, y, bar_w, h, c, title))
    for k in range(round(axis_max / step) + 1):
        tick = k * step
        chart.y_ticks.append(Tick(round(top + plot_h - tick * scale, 1), f"{tick:g}"))
    every = max(1, math.ceil(n / 8))
    for i, day in enumerate(days):
        if (n - 1 - i) % every == 0:  # counted back from today, so the last day always has its label
            chart.x_ticks.append(Tick(round(left + (i + 0.5) * slot_w, 1), f"{day:%b %d}"))
    chart.desc = f"{sum(totals)} {unit} over {len(days)} days" + (
        f"; busiest day {days[totals.index(peak)]:%b %d} with {peak}." if peak else "; none recorded."
    )
    return chart


@dataclass(frozen=True, slots=True)
class BarRow:
    label: str
    total: int
    y: float
    text_y: float
    value_x: float
    marks: tuple[Mark, ...]
    href: str = ""  # where the row's label links (a filtered view), if anywhere


@dataclass(slots=True)
class BarChart:
    """Horizontal bars, optionally stacked by gap class: one row per tool, slot or kind."""

    id: str
    title: str
    desc: str
    width: int
    height: int
    label_w: int
    rows: list[BarRow] = field(default_factory=list)

    @property
    def label_x(self) -> int:
        return self.label_w - 8

    @property
    def label_chars(self) -> int:
        """How many characters of a 12 px label fit left of the bars (a longer one is cut, never clipped)."""
        return self.label_x // 8


def stacked_bars(
    *,
    id: str,
    title: str,
    rows: Sequence[tuple[str, Mapping[str, int], str]],
    order: Sequence[str],
    labels: Mapping[str, str],
    unit: str,
) -> BarChart:
    """`rows`: (label, {class: count}, link or ""), drawn in the order given."""
    width, label_w, row_h = 440, 170, 22
    plot_w = width - label_w - 50
    peak = max((sum(v.values()) for _, v, _ in rows), default=0)
    scale = plot_w / peak if peak else 0.0
    chart = BarChart(id, title, "", width, max(len(rows), 1) * row_h + 4, label_w)
    for i, (label, values, href) in enumerate(rows):
        y = i * row_h + 2
        x = float(label_w)
        marks = []
        for c in order:
            v = values.get(c, 0)
            if not v:
                continue
            w = max(v * scale, 1.5)
            marks.append(Mark.at(x, y + 3, w, row_h - 8, c, f"{label}: {v} {labels[c].lower()} ({unit})"))
            x += w
        chart.rows.append(BarRow(label, sum(values.values()), y, y + 14, round(x + 6, 1), tuple(marks), href))
    top = chart.rows[0] if chart.rows else None
    chart.desc = (
        f"{len(rows)} rows; the largest is {top.label} with {top.total} {unit}."
        if top
        else "Nothing recorded."
    )
    return chart


@dataclass(frozen=True, slots=True)
class Sparkline:
    points: str  # SVG polyline points
    area: str  # closed polygon under the line
    width: int
    height: int
    last: int
    peak: int
    desc: str


def sparkline(values: Sequence[int], *, width: int = 160, height: int = 36, what: str = "") -> Sparkline:
    n = len(values)
    peak = max(values, default=0)
    top = 3
    usable = height - top - 2
    if n < 2:
        values = [*values, *values] if values else [0, 0]
        n = 2
    step = (width - 2) / (n - 1)
    coords = [(1 + i * step, top + usable - (v / peak * usable if peak else 0)) for i, v in enumerate(values)]
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    base = top + usable
    area = f"1.0,{base:.1f} {points} {coords[-1][0]:.1f},{base:.1f}"
    return Sparkline(
        points,
        area,
        width,
        height,
        values[-1],
        peak,
        f"{what}: {sum(values)} in {n} days, at most {peak} a day, {values[-1]} on the last day",
    )
