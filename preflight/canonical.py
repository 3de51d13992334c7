"""Canonical JSON (RFC 8785) and the digests built on it.

Every digest in Preflight (payload, contract, record, approved value) goes through here, so two parties
that hold the same JSON value always compute the same digest, whatever key order or number spelling they
started from. RFC 8785 deliberately makes 1 and 1.0 the same bytes: JSON has one number type.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import rfc8785

__all__ = ["canonical_json", "digest"]

# RFC 8785 numbers are IEEE 754 doubles; a larger int would be silently rounded by any other party.
_INT_LIMIT = 2**53 - 1


def canonical_json(obj: object) -> bytes:
    """The RFC 8785 bytes of a JSON value.

    Raises TypeError naming the offending location for anything that is not JSON (sets, bytes, NaN,
    infinities, non-string keys, integers beyond 2**53 - 1, arbitrary objects): guessing a
    representation would let two different values share a digest.
    """
    # _plain has produced only JSON types; rfc8785 just cannot see that through `object`.
    return rfc8785.dumps(_plain(obj, "$", set()))  # type: ignore[arg-type]


def digest(obj: object) -> str:
    """`sha256:<hex>` over the canonical JSON of a value."""
    return "sha256:" + hashlib.sha256(canonical_json(obj)).hexdigest()


def _plain(obj: object, path: str, open_containers: set[int]) -> object:
    # We validate ourselves instead of relying on rfc8785's errors: it reports ValueErrors without a
    # location, and it only knows dict/list/tuple, while engine values are often read-only Mappings.
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        if not -_INT_LIMIT <= obj <= _INT_LIMIT:
            raise TypeError(f"not canonical JSON at {path}: integer {obj} is outside ±(2**53 - 1)")
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise TypeError(f"not canonical JSON at {path}: {obj!r} is not a JSON number")
        return obj
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            raise TypeError(
                f"not canonical JSON at {path}: string is not valid Unicode (lone surrogate)"
            ) from None
        return obj
    if isinstance(obj, Mapping | list | tuple):
        # A cycle has no JSON form; report it rather than die in a RecursionError.
        if id(obj) in open_containers:
            raise TypeError(f"not canonical JSON at {path}: the value contains itself")
        open_containers.add(id(obj))
        try:
            if isinstance(obj, Mapping):
                out: dict[str, object] = {}
                for key, value in obj.items():
                    if not isinstance(key, str):
                        raise TypeError(
                            f"not canonical JSON at {path}: object key {key!r} is a {type(key).__name__}, "
                            "not a string"
                        )
                    out[key] = _plain(value, f"{path}.{key}", open_containers)
                return out
            return [_plain(item, f"{path}[{i}]", open_containers) for i, item in enumerate(obj)]
        finally:
            open_containers.discard(id(obj))
    raise TypeError(f"not canonical JSON at {path}: {type(obj).__name__} is not a JSON value")
