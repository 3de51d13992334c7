"""The charts' geometry: round axis maxima, stacked columns and bars, sparklines."""

from __future__ import annotations

import pytest

from console.web.operator_charts import nice_max, sparkline, stacked_bars, stacked_columns

pytestmark = pytest.mark.django_db


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
