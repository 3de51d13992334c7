"""CSV export cells: text a spreadsheet would run as a formula is written as text."""

from __future__ import annotations

import pytest

from console.web.csv_cells import csv_cell


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r"])
def test_text_that_would_start_a_formula_gets_a_leading_apostrophe(lead: str) -> None:
    assert csv_cell(f"{lead}cmd|' /C calc'!A0") == f"'{lead}cmd|' /C calc'!A0"


@pytest.mark.parametrize("value", ["user:alice", "sha256:ab", " =1", "a=b", ""])
def test_other_text_is_written_as_it_is(value: str) -> None:
    assert csv_cell(value) == value


def test_numbers_stay_numbers_and_none_is_empty() -> None:
    assert csv_cell(-5) == -5
    assert csv_cell(2.5) == 2.5
    assert csv_cell(None) == ""
