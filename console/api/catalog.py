"""Catalog import: a server's `tools/list` result becomes versioned tool contracts."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.common import OPERATOR_ACTION, actor, errors
from console.api.fields import AnyJSON, Array, Flag, JSONObject, Object, Text
from console.models import Server
from console.services.catalog import CatalogImport, ImportedTool, catalog_import


class ConnectorIn(serializers.Serializer[JSONObject]):
    """The one connector shape (`connectors.checked_connector`), as the schema documents it."""

    kind = serializers.ChoiceField(choices=list(Server.CONNECTOR_KINDS))
    command = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="mcp_stdio: the argv, equal to one of the deployment's PREFLIGHT_MCP_STDIO_ALLOW command"
        " lines (no extra arguments; no env or cwd: the deployment's PREFLIGHT_MCP_STDIO_ENV and _CWD apply)",
    )
    url = serializers.CharField(
        required=False,
        help_text="mcp_http: the streamable HTTP endpoint; its host must be in PREFLIGHT_HTTP_ALLOW",
    )
    timeout_s = serializers.FloatField(required=False, help_text="the tool call's limit, at most 300")
    connect_timeout_s = serializers.FloatField(required=False, help_text="MCP: connecting, at most 120")


@extend_schema_field(ConnectorIn)
class ConnectorField(AnyJSON):
    """Passed whole to the service, which refuses any field it does not know (`invalid_connector`) rather
    than dropping it: a serializer would silently drop `env`, `cwd`, `args`."""


class CatalogImportIn(serializers.Serializer[JSONObject]):
    server = Text(max_length=200)
    tools = Array(
        child=AnyJSON(), help_text="MCP Tool objects, as `tools/list` returns them", max_length=2000
    )
    annotations_trusted = Flag(
        required=False,
        help_text="trust the tools' annotations (readOnlyHint...); absent: as the server already is (a new"
        " one is untrusted)",
    )
    connector = ConnectorField(
        required=False,
        allow_null=False,
        help_text="how the execution gate reaches this server; absent: as it was (a new server: python)",
    )
    extensions = Object(
        child=AnyJSON(),
        required=False,
        help_text="side-car `x-preflight` per tool name (wins over the tool's own); a tool not named keeps"
        " the side-car stored by an earlier import, `null` removes it",
    )


class ImportedToolOut(serializers.Serializer[ImportedTool]):
    name = serializers.CharField()
    contract_digest = serializers.CharField(allow_null=True)
    obligations = serializers.ListField(child=serializers.DictField())
    problems = serializers.ListField(child=serializers.DictField())
    version = serializers.ChoiceField(choices=["new", "unchanged", "invalid"])


class CatalogImportOut(serializers.Serializer[CatalogImport]):
    server = serializers.CharField(source="server.name")
    tools = ImportedToolOut(many=True)
    retired = serializers.ListField(child=serializers.CharField(), help_text="tools no longer in the list")
    kept = serializers.ListField(
        child=serializers.CharField(),
        help_text="operator decisions this import did not name, carried over: annotations_trusted, connector,"
        " extensions.<tool>",
    )


class CatalogImportView(APIView):
    @extend_schema(
        operation_id="catalog_import",
        summary="Import a tools/list result; each tool is checked on its own, problems reported per tool",
        description=OPERATOR_ACTION,
        request=CatalogImportIn,
        responses={201: CatalogImportOut, **errors()},
    )
    def post(self, request: Request) -> Response:
        data = CatalogImportIn(data=request.data)
        data.is_valid(raise_exception=True)
        # Absent optional fields are left out of validated_data: the service's defaults apply.
        result = catalog_import(**data.validated_data, actor=actor(request))
        return Response(CatalogImportOut(result).data, status=201)
