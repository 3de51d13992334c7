"""Measures: registering the lookups a contract's conditions read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction

from console import connectors, egress, models
from console.audit import audit_append
from console.errors import BadInput
from console.services.catalog import _checked


@transaction.atomic
def measure_create(
    *,
    name: str,
    kind: str,
    url: str = "",
    timeout_s: float = 5.0,
    config: Mapping[str, Any] | None = None,
    actor: str,
) -> tuple[models.Measure, bool]:
    """Register (or redefine) a lookup. Returns (measure, created). Where it leads is checked against the
    deployment's allow-lists here and again on every lookup (console/egress.py)."""
    if kind not in models.Measure.KINDS:
        raise BadInput("invalid", f"kind: one of {', '.join(models.Measure.KINDS)}")
    if kind == "http" and not url:
        raise BadInput("invalid", f"url: required for a {kind} measure")
    limit = settings.PREFLIGHT_MEASURE_TIMEOUT_MAX_S  # inside the lookup task's limits (settings.py)
    if not 0 < timeout_s <= limit:
        raise BadInput("invalid", f"timeout_s: more than 0 and at most {limit} seconds")
    config = _checked(_measure_config, kind, url, dict(config or {}))
    measure, created = models.Measure.objects.update_or_create(
        name=name, defaults={"kind": kind, "url": url, "timeout_s": timeout_s, "config": dict(config or {})}
    )
    audit_append(
        kind="measure",
        execution_id=None,
        body={
            "name": name,
            "kind": kind,
            "url": url,
            "timeout_s": timeout_s,
            "created": created,
            "actor": actor,
        },
    )
    return measure, created


# What each measure kind's config may hold: anything else is refused rather than stored unread.
_MEASURE_CONFIG = {
    "http": frozenset(),
    "python": frozenset({"lookup"}),
    "mcp": frozenset({"connector", "tool", "field"}),
}


def _measure_config(kind: str, url: str, config: dict[str, Any]) -> dict[str, Any]:
    extra = sorted(set(config) - _MEASURE_CONFIG[kind])
    if extra:
        raise egress.EgressRefused(
            "invalid_connector", f"config.{extra[0]}: not accepted for a {kind} measure"
        )
    if kind == "http":
        egress.check_url(url)
    elif kind == "mcp":
        if url:
            raise egress.EgressRefused(
                "invalid_connector", "url: an mcp measure's server is config.connector"
            )
        config["connector"] = connectors.checked_connector(config.get("connector"), what="config.connector")
        if config["connector"]["kind"] == "python":
            raise egress.EgressRefused("invalid_connector", "config.connector.kind: mcp_stdio or mcp_http")
        for key in ("tool", "field"):
            if (key in config or key == "tool") and not (isinstance(config.get(key), str) and config[key]):
                raise egress.EgressRefused("invalid_connector", f"config.{key}: a tool's name, a string")
    elif kind == "python" and "lookup" in config and not isinstance(config["lookup"], str):
        raise egress.EgressRefused("invalid_connector", "config.lookup: a registered lookup's name")
    return config
