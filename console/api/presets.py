"""Presets: answers a principal consented to have remembered. Listed and revoked, never edited."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console import models
from console.api.common import AGENT_PERMISSIONS, actor, agent_token, errors
from console.api.fields import AnyJSON, JSONObject
from console.selectors.presets import preset_list
from console.services.presets import preset_revoke


class PresetOut(serializers.Serializer[models.Preset]):
    id = serializers.IntegerField()
    principal = serializers.CharField()
    tool = serializers.CharField(help_text="server/tool the value was given for")
    slot_key = serializers.CharField()
    value = AnyJSON()
    consent = serializers.DictField(help_text="who consented, when, in which execution")
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


class PresetQuery(serializers.Serializer[JSONObject]):
    # A CharField refuses NUL (which PostgreSQL cannot compare against) and blank values alike.
    principal = serializers.CharField()


class PresetListView(APIView):
    permission_classes = AGENT_PERMISSIONS

    @extend_schema(
        operation_id="presets_list",
        summary="The active presets of one principal the token may see (403 otherwise)",
        parameters=[OpenApiParameter("principal", OpenApiTypes.STR, required=True)],
        responses={200: PresetOut(many=True), **errors(403)},
    )
    def get(self, request: Request) -> Response:
        query = PresetQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        principal = query.validated_data["principal"]
        presets = preset_list(principal=principal, token=agent_token(request))
        # many=True makes a list serializer of instances, which the stubs do not model.
        return Response(PresetOut(presets, many=True).data)  # type: ignore[arg-type]


class PresetRevokeView(APIView):
    permission_classes = AGENT_PERMISSIONS

    @extend_schema(
        operation_id="presets_revoke",
        summary="Revoke a preset; later executions ask again",
        responses={200: PresetOut, **errors(404)},
    )
    def delete(self, request: Request, preset_id: int) -> Response:
        preset = preset_revoke(preset_id=preset_id, actor=actor(request), token=agent_token(request))
        return Response(PresetOut(preset).data)
