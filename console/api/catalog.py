"""Catalog import: a server's `tools/list` result becomes versioned tool contracts."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console import services
from console.api.common import actor, errors
from console.api.fields import AnyJSON, Array, Flag, Object, Text
from console.models import Server


class ConnectorIn(serializers.Serializer):
    kind = serializers.ChoiceField(choices=list(Server.CONNECTOR_KINDS))
    target = AnyJSON(required=False, help_text="python: a registry name; mcp_stdio: argv; mcp_http: a URL")
    timeout_s = serializers.FloatField(required=False, min_value=0.1, max_value=300)


class CatalogImportIn(serializers.Serializer):
    server = Text(max_length=200)
    tools = Array(
        child=AnyJSON(), help_text="MCP Tool objects, as `tools/list` returns them", max_length=2000
    )
    annotations_trusted = Flag(
        required=False,
        help_text="trust the tools' annotations (readOnlyHint...); absent: as the server already is (a new"
        " one is untrusted)",
    )
    connector = ConnectorIn(required=False, help_text="how the execution gate reaches this server")
    extensions = Object(
        child=AnyJSON(),
        required=False,
        help_text="side-car `x-preflight` per tool name (wins over the tool's own); a tool not named keeps"
        " the side-car stored by an earlier import, `null` removes it",
    )


class ImportedToolOut(serializers.Serializer):
    name = serializers.CharField()
    contract_digest = serializers.CharField(allow_null=True)
    obligations = serializers.ListField(child=serializers.DictField())
    problems = serializers.ListField(child=serializers.DictField())
    version = serializers.ChoiceField(choices=["new", "unchanged", "invalid"])


class CatalogImportOut(serializers.Serializer):
    server = serializers.CharField()
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
        description=(
            "An operator action: needs an operator token (manage.py create_operator_token NAME --user"
            " USERNAME) whose user holds the operator role at the time of the call. An agent token gets 403"
            " `forbidden` and nothing changes."
        ),
        request=CatalogImportIn,
        responses={201: CatalogImportOut, **errors()},
    )
    def post(self, request: Request) -> Response:
        data = CatalogImportIn(data=request.data)
        data.is_valid(raise_exception=True)
        v: dict[str, Any] = data.validated_data
        result = services.catalog_import(
            server=v["server"],
            tools=v["tools"],
            annotations_trusted=v.get("annotations_trusted"),
            connector=v.get("connector"),
            extensions=v.get("extensions"),
            actor=actor(request),
        )
        out = {
            "server": result.server.name,
            "tools": [
                {
                    "name": t.name,
                    "contract_digest": t.contract_digest,
                    "obligations": t.obligations,
                    "problems": t.problems,
                    "version": t.version,
                }
                for t in result.tools
            ],
            "retired": result.retired,
            "kept": result.kept,
        }
        return Response(CatalogImportOut(out).data, status=201)
