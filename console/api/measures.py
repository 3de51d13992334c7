"""Measures: the lookups a contract's `measures` name (HTTP endpoints, read-only MCP tools, Python)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.common import OPERATOR_ACTION, actor, errors
from console.api.fields import AnyJSON, JSONObject, Number, Object, Text
from console.models import Measure
from console.services.measures import measure_create


class MeasureIn(serializers.Serializer[JSONObject]):
    name = Text(max_length=200, help_text="the `lookup` a contract's measure names, e.g. bank.balance")
    kind = serializers.ChoiceField(choices=list(Measure.KINDS))
    url = Text(required=False, allow_blank=True, max_length=2000)
    timeout_s = Number(
        required=False, default=5.0, min_value=0.01, max_value=settings.PREFLIGHT_MEASURE_TIMEOUT_MAX_S
    )
    config = Object(child=AnyJSON(), required=False)


class MeasureOut(serializers.Serializer[JSONObject]):
    name = serializers.CharField()
    kind = serializers.CharField()
    url = serializers.CharField()
    timeout_s = serializers.FloatField()
    config = serializers.DictField()
    created = serializers.BooleanField(help_text="false when an existing measure was redefined")


class MeasureCreateView(APIView):
    @extend_schema(
        operation_id="measures_create",
        summary="Register a lookup (or redefine one by name)",
        description=OPERATOR_ACTION,
        request=MeasureIn,
        responses={201: MeasureOut, 200: MeasureOut, **errors()},
    )
    def post(self, request: Request) -> Response:
        data = MeasureIn(data=request.data)
        data.is_valid(raise_exception=True)
        # Absent optional fields are left out of validated_data: the service's defaults apply.
        measure, created = measure_create(**data.validated_data, actor=actor(request))
        out = MeasureOut({**measure.as_connector_spec(), "created": created}).data
        return Response(out, status=201 if created else 200)
