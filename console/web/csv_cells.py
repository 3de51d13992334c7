"""CSV cells a spreadsheet cannot run: OWASP's CSV-injection defence for every console export."""

from __future__ import annotations

from typing import Any

# A cell starting with one of these is a formula to Excel, LibreOffice and Sheets (tab and CR too: some
# importers strip them and read what follows).
_FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """`value` as written to a CSV cell: text that would start a formula gets a leading apostrophe, which
    spreadsheets show as text and never evaluate. Numbers are left as numbers."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_LEADS):
        return "'" + value
    return value
