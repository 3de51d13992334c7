"""The failure classes the execution gate records (see the package docstring)."""

from __future__ import annotations

from typing import Any

from console import json_values


class _Recorded(Exception):
    def __init__(self, detail: str) -> None:
        detail = json_values.storable_text(detail)  # it may quote a server, and it is recorded
        super().__init__(detail)
        self.detail = detail


class ToolCallFailed(_Recorded):
    """Nothing reached the tool, or the tool refused or reported an error: the outcome is ``failed``."""

    def __init__(self, detail: str, *, result: Any = None) -> None:
        super().__init__(detail)
        # The tool's own error result (MCP isError), kept so the record can show what the provider said.
        self.result = result


class OutcomeUnknown(_Recorded):
    """The request was sent and then the answer was lost: the side effect may have happened."""


class MeasureFailed(_Recorded):
    """A lookup gave no trustworthy value (bad status, timeout, malformed answer, exception)."""
