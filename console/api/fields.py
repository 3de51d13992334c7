"""JSON-strict serializer fields: a value of the wrong JSON type is an error, never coerced.

DRF's own fields accept 12 for a string and "true" for a boolean; for an API whose point is to know where
every value came from, a silently converted value is a value nobody sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

# The instance type of the API's serializers (Serializer's type argument): each one reads or describes a JSON
# object; the input ones are only ever given data.
type JSONObject = Mapping[str, object]


class Text(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        # Never trim: pointers are offsets into this text.
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string, not {_json_type(data)}")
        return str(super().to_internal_value(data))


class Flag(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError(f"must be true or false, not {_json_type(data)}")
        return data


class Integer(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(f"must be an integer, not {_json_type(data)}")
        return int(super().to_internal_value(data))


class Number(serializers.FloatField):
    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            raise serializers.ValidationError(f"must be a number, not {_json_type(data)}")
        return float(super().to_internal_value(data))


class Object(serializers.DictField):
    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError(f"must be an object, not {_json_type(data)}")
        return dict(super().to_internal_value(data))


class Array(serializers.ListField):
    def to_internal_value(self, data: Any) -> list[Any]:
        if not isinstance(data, list):
            raise serializers.ValidationError(f"must be an array, not {_json_type(data)}")
        return list(super().to_internal_value(data))


@extend_schema_field(OpenApiTypes.ANY)
class AnyJSON(serializers.JSONField):
    """Any JSON value, null included, passed through as parsed."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


# In order: a bool is an int to isinstance.
_JSON_TYPES = (
    (type(None), "null"),
    (bool, "a boolean"),
    (int | float, "a number"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
)


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)
