"""Side-car files: one server's `x-preflight` extensions kept as data, beside (not inside) its tool catalog.

A side-car file is ``{"server": "<name>", "tools": {"<tool name>": {<x-preflight>}, ...}}`` with optional
``"source"`` and ``"notes"`` strings saying where the rules come from. Operators keep these files in version
control; each extension is checked when a contract is built from it (`contract_from_mcp`), so this module
checks only the file's shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema

from .errors import ContractError

__all__ = ["Sidecar", "load_sidecar", "parse_sidecar"]

_FILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["server", "tools"],
    "properties": {
        "server": {"type": "string", "minLength": 1},
        "source": {"type": "string"},
        "notes": {"type": "string"},
        "tools": {"type": "object", "additionalProperties": {"type": "object"}},
    },
}
_FILE_VALIDATOR = jsonschema.Draft202012Validator(_FILE_SCHEMA)


@dataclass(frozen=True, slots=True)
class Sidecar:
    server: str
    tools: Mapping[str, Mapping[str, Any]]  # tool name -> its x-preflight
    source: str = ""


def parse_sidecar(data: Any, where: str = "side-car") -> Sidecar:
    """Read a side-car document; raises ContractError naming the offending part."""
    error = jsonschema.exceptions.best_match(_FILE_VALIDATOR.iter_errors(data))
    if error is not None:
        path = "".join(f"/{p}" for p in error.absolute_path)
        raise ContractError(where, f"not a side-car file: {error.message}", path)
    return Sidecar(data["server"], MappingProxyType(dict(data["tools"])), data.get("source", ""))


def load_sidecar(path: Path) -> Sidecar:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ContractError(path.name, f"cannot read the side-car file: {exc}") from None
    return parse_sidecar(data, path.name)
