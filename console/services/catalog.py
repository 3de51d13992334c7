"""The catalog: importing a server's tools (an API body, a pasted `tools/list`, a live MCP server) and
trusting its annotations."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from console import connectors, egress, models, storage
from console.api import parsers as json_text
from console.audit import audit_append
from console.errors import BadInput, Conflict, NotFound, Unprocessable
from console.services import common
from console.services.common import identity
from preflight import ContractError, contract_from_mcp
from preflight.canonical import digest


@dataclass(frozen=True, slots=True)
class ImportedTool:
    name: str
    contract_digest: str | None
    obligations: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    version: str  # "new", "unchanged" or "invalid"


@dataclass(frozen=True, slots=True)
class CatalogImport:
    server: models.Server
    tools: list[ImportedTool]
    retired: list[str]
    # What this import did not name and so carried over from the operator's earlier decisions, e.g.
    # "annotations_trusted", "connector", "extensions.transfer".
    kept: list[str] = field(default_factory=list)


def _extension_of(tool: Mapping[str, Any], sidecar: Mapping[str, Any] | None) -> Any:
    # Side-car wins; then the Tool object's own field; then `_meta`, the one free-form place MCP SDKs keep.
    if sidecar is not None:
        return sidecar
    if "x-preflight" in tool:
        return None  # contract_from_mcp reads it from the definition
    meta = tool.get("_meta")
    return meta.get("x-preflight") if isinstance(meta, Mapping) else None


@transaction.atomic
def catalog_import(
    *,
    server: str,
    tools: Sequence[Any],
    actor: str,
    annotations_trusted: bool | None = None,
    connector: Mapping[str, Any] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> CatalogImport:
    """Import a `tools/list` result. Each tool is checked on its own: a bad one is reported, not fatal.

    The list is the server's whole catalog: tools missing from it stop being current (their versions stay,
    so records that name them keep their contract). What an operator decided before and this import does
    not name is kept, never silently reset: trust (None: as it was; a new server is untrusted), the
    connector (None: as it was), each tool's side-car extension (a tool not in `extensions` keeps its
    stored one; `null` for a tool removes it)."""
    if not server:
        raise BadInput("invalid", "server: required, a non-empty string")
    if connector is not None:
        connector = _checked(connectors.checked_connector, connector)
        # A tool is called inside the web request: a timeout the web worker's own limit cannot fit would
        # end in a killed worker and no outcome, so it is refused when configured (PREFLIGHT_WEB_TIMEOUT_S).
        timeout_s = connector.get("timeout_s")
        limit = settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S
        if timeout_s is not None and float(timeout_s) > limit:
            raise Unprocessable(
                "timeout_too_long",
                f"connector.timeout_s: {timeout_s:g}s does not fit inside the web worker's limit"
                f" ({settings.PREFLIGHT_WEB_TIMEOUT_S}s, PREFLIGHT_WEB_TIMEOUT_S); at most {limit}s",
            )
    srv, created = models.Server.objects.select_for_update().get_or_create(
        name=server, defaults={"connector": dict(connector or {"kind": "python"})}
    )
    changed, kept = [], []
    if annotations_trusted is None:
        if not created and srv.annotations_trusted:
            kept.append("annotations_trusted")
    elif srv.annotations_trusted != annotations_trusted:
        srv.annotations_trusted = annotations_trusted
        changed.append("annotations_trusted")
    if connector is None:
        if not created:
            kept.append("connector")
    elif srv.connector != dict(connector):
        srv.connector = dict(connector)
        changed.append("connector")
    sidecars = dict(srv.extensions or {})
    for ext_name, extension in (extensions or {}).items():
        if extension is None:
            sidecars.pop(ext_name, None)
        else:
            sidecars[ext_name] = extension
    if sidecars != (srv.extensions or {}):
        srv.extensions = sidecars
        changed.append("extensions")
    listed = {t.get("name") for t in tools if isinstance(t, Mapping)}
    kept += [f"extensions.{n}" for n in sorted(sidecars) if n in listed and n not in (extensions or {})]
    if changed:
        srv.save(update_fields=[*changed, "updated_at"])

    now = common._now()
    results: list[ImportedTool] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, Mapping) else None
        if not isinstance(name, str) or not name:
            problem = {
                "class": "invalid",
                "where": f"tools[{i}]",
                "detail": "a tool is an object with a name",
            }
            results.append(ImportedTool(f"tools[{i}]", None, [], [problem], "invalid"))
            continue
        if name in seen:
            problem = {"class": "invalid", "where": f"tools[{i}]", "detail": f"tool {name!r} is listed twice"}
            results.append(ImportedTool(name, None, [], [problem], "invalid"))
            continue
        seen.add(name)
        results.append(_import_tool(srv, tool, _extension_of(tool, sidecars.get(name)), now))

    retired = list(
        models.ToolContract.objects.filter(server=srv, current=True)
        .exclude(name__in=seen)
        .values_list("name", flat=True)
    )
    models.ToolContract.objects.filter(server=srv, current=True, name__in=retired).update(current=False)
    audit_append(
        kind="catalog_import",
        execution_id=None,
        body={
            "server": server,
            "annotations_trusted": srv.annotations_trusted,
            "actor": actor,
            "tools": [{"name": t.name, "digest": t.contract_digest, "version": t.version} for t in results],
            "retired": retired,
            "changed": changed,
            "kept": kept,
        },
    )
    return CatalogImport(srv, results, retired, kept)


def _import_tool(srv: models.Server, tool: Mapping[str, Any], extension: Any, now: datetime) -> ImportedTool:
    name = tool["name"]
    try:
        contract = contract_from_mcp(
            srv.name, tool, annotations_trusted=srv.annotations_trusted, extension=extension
        )
    except ContractError as exc:
        problem = {"class": "invalid", "where": exc.path or "", "detail": exc.reason}
        definition = dict(tool) if extension is None else {**tool, "x-preflight": extension}
        try:
            bad_digest = digest(
                {"server": srv.name, "tool": definition, "annotations_trusted": srv.annotations_trusted}
            )
        except TypeError as err:
            return ImportedTool(name, None, [], [{**problem, "detail": str(err)}], "invalid")
        # Kept as a version so the operator sees what was offered, but never current: nothing can run on it.
        models.ToolContract.objects.get_or_create(
            server=srv,
            name=name,
            digest=bad_digest,
            defaults={
                "definition": definition,
                "annotations_trusted": srv.annotations_trusted,
                "problems": [problem],
                "valid": False,
                "current": False,
            },
        )
        models.ToolContract.objects.filter(server=srv, name=name, current=True).update(current=False)
        return ImportedTool(name, None, [], [problem], "invalid")

    obligations, problems = storage.contract_preview(contract, now)
    row = models.ToolContract.objects.filter(server=srv, name=name, digest=contract.digest).first()
    version = "unchanged" if row is not None and row.current else "new"
    models.ToolContract.objects.filter(server=srv, name=name, current=True).exclude(
        digest=contract.digest
    ).update(current=False)
    if row is None:
        models.ToolContract.objects.create(
            server=srv,
            name=name,
            digest=contract.digest,
            definition=dict(contract.definition),
            annotations_trusted=srv.annotations_trusted,
            obligations=obligations,
            problems=problems,
            valid=True,
            current=True,
        )
    elif not row.current:
        row.current = True
        row.save(update_fields=["current"])
    return ImportedTool(name, contract.digest, obligations, problems, version)


def _checked(check: Callable[..., Any], *args: Any) -> Any:
    """`check`'s answer; its egress refusal as the API's error (400 for a shape, 422 for a place)."""
    try:
        return check(*args)
    except egress.EgressRefused as exc:
        error = BadInput if exc.code == "invalid_connector" else Unprocessable
        raise error(exc.code, exc.detail) from None


@transaction.atomic
def server_set_trust(*, server_id: Any, trusted: bool, user: AbstractBaseUser) -> CatalogImport:
    """Mark a server's annotations trusted (or not). Trust is part of each contract's digest, so the current
    tools are imported again under the new setting: new versions; records keep the versions they used."""
    try:
        srv = models.Server.objects.select_for_update().get(pk=server_id)
    except (models.Server.DoesNotExist, ValueError, TypeError):
        raise NotFound("unknown_server", f"no server {server_id}") from None
    if srv.annotations_trusted == trusted:
        raise Conflict(
            "unchanged", f"{srv.name}: annotations are already {'trusted' if trusted else 'untrusted'}"
        )
    who = identity(user)
    definitions = [
        row.definition
        for row in models.ToolContract.objects.filter(server=srv, current=True).order_by("name")
    ]
    result = catalog_import(server=srv.name, tools=definitions, annotations_trusted=trusted, actor=who)
    audit_append(
        kind="annotation_trust",
        execution_id=None,
        body={
            "server": srv.name,
            "trusted": trusted,
            "actor": who,
            "tools": [{"name": t.name, "digest": t.contract_digest} for t in result.tools],
        },
    )
    return result


class PastedCatalogError(Exception):
    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message if line is None else f"line {line}: {message}")


def parse_tools_list(text: str) -> list[Any]:
    """A pasted `tools/list` result: `{"tools": [...]}`, a JSON-RPC answer carrying one, or a bare list."""
    try:
        data = json_text.loads(text)
    except json.JSONDecodeError as exc:
        raise PastedCatalogError(f"not JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    if isinstance(data, Mapping) and isinstance(data.get("result"), Mapping):
        data = data["result"]
    if isinstance(data, Mapping) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise PastedCatalogError('expected a tools/list result: {"tools": [...]} or a list of tools', 1)
    if not data:
        raise PastedCatalogError("the list has no tools", 1)
    return data


def catalog_import_pasted(
    *, server: str, text: str, annotations_trusted: bool | None, user: AbstractBaseUser
) -> CatalogImport:
    tools = parse_tools_list(text)
    return catalog_import(
        server=server.strip(), tools=tools, annotations_trusted=annotations_trusted, actor=identity(user)
    )


def mcp_connector(*, kind: str, command: str = "", url: str = "") -> dict[str, Any]:
    """A connector spec from the form: a stdio command line (shell-quoted) or a streamable HTTP URL."""
    if kind == "mcp_stdio":
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise BadInput("invalid", f"command: {exc}") from None
        if not argv:
            raise BadInput("invalid", "command: required for a stdio server")
        spec: dict[str, Any] = {"kind": "mcp_stdio", "command": argv}
    elif kind == "mcp_http":
        spec = {"kind": "mcp_http", "url": url.strip()}
    else:
        raise BadInput("invalid", "kind: mcp_stdio or mcp_http")
    try:
        return connectors.checked_connector(spec)
    except egress.EgressRefused as exc:
        detail = exc.detail.removeprefix("connector.")
        if exc.code == "command_not_allowed":
            detail = (
                "command: not allowed on this host (the deployment lists them in PREFLIGHT_MCP_STDIO_ALLOW)"
            )
        raise (BadInput if exc.code == "invalid_connector" else Unprocessable)(exc.code, detail) from None


def catalog_import_from_mcp(
    *,
    server: str,
    connector: Mapping[str, Any],
    annotations_trusted: bool | None,
    user: AbstractBaseUser,
    timeout_s: float = 15.0,
) -> CatalogImport:
    """List a live MCP server's tools and import them; the connector is kept so the gate can reach it."""
    try:
        tools = connectors.list_tools(connector, timeout_s=timeout_s)
    except connectors.ToolCallFailed as exc:
        raise Unprocessable("list_failed", f"tools/list failed: {exc}") from None
    return catalog_import(
        server=server.strip(),
        tools=tools,
        annotations_trusted=annotations_trusted,
        connector=connector,
        actor=identity(user),
    )
