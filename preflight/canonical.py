"""Canonical JSON (RFC 8785) and the digests built on it.

Every digest in Preflight (payload, contract, record, approved value) goes through here, so two parties
that hold the same JSON value always compute the same digest, whatever key order or number spelling they
started from. RFC 8785 deliberately makes 1 and 1.0 the same bytes: JSON has one number type.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import rfc8785

__all__ = ["canonical_json", "digest", "digest_written_as_is", "written_as_is"]

# RFC 8785 numbers are IEEE 754 doubles; a larger int would be silently rounded by any other party.
_INT_LIMIT = 2**53 - 1


def canonical_json(obj: object) -> bytes:
    """The RFC 8785 bytes of a JSON value.

    Raises TypeError naming the offending location for anything that is not JSON (sets, bytes, NaN,
    infinities, non-string keys, integers beyond 2**53 - 1, arbitrary objects): guessing a
    representation would let two different values share a digest.
    """
    try:
        # Most values are already plain: then sorted compact json.dumps is byte-for-byte RFC 8785 and far
        # cheaper than the pure-Python encoder, which the rare rest (integral floats, Mappings) goes through.
        if written_as_is(obj):
            return _ENCODER.encode(obj).encode("utf-8")
    except (RecursionError, UnicodeEncodeError):
        pass  # a cycle or a lone surrogate: the walk below names it
    # _plain has produced only JSON types; rfc8785 just cannot see that through `object`.
    return rfc8785.dumps(_plain(obj, "$", set()))  # type: ignore[arg-type]


# Cycles never reach the encoder (written_as_is recurses until RecursionError on one first), so its own
# circular-reference bookkeeping is pure cost.
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


def written_as_is(obj: Any) -> bool:
    """True when json.dumps already writes `obj` exactly as RFC 8785: nothing but dicts (str keys, none
    beyond the Basic Multilingual Plane), lists and tuples, holding exact str, bool, None, ints within
    ±(2**53 - 1) and non-integral floats that Python and ECMAScript spell alike. False means "take the
    general path" (rfc8785 after a walk that also decides what is an error)."""
    t = type(obj)
    if t is dict:
        for key in obj:
            if type(key) is not str or not (key.isascii() or max(map(ord, key)) <= 0xFFFF):
                return False
        values = obj.values()
    elif t is list or t is tuple:
        values = obj
    else:
        return t is str or t is bool or obj is None or _scalar_as_is(obj)
    for value in values:
        vt = type(value)
        if vt is str or vt is bool or value is None:
            continue
        if vt is dict or vt is list or vt is tuple:
            if not written_as_is(value):
                return False
        elif not _scalar_as_is(value):
            return False
    return True


def _scalar_as_is(value: Any) -> bool:
    vt = type(value)
    if vt is int:
        return bool(-_INT_LIMIT <= value <= _INT_LIMIT)
    # NaN and the infinities fail the range test; integral floats need rewriting (120.0 is written 120).
    # In this range Python's repr and ECMAScript's Number::toString both write the shortest round-trip
    # digits in plain decimal notation; outside it their exponent forms differ.
    return vt is float and 1e-4 <= abs(value) < 1e16 and not value.is_integer()


def digest(obj: object) -> str:
    """`sha256:<hex>` over the canonical JSON of a value."""
    return "sha256:" + hashlib.sha256(canonical_json(obj)).hexdigest()


def digest_written_as_is(obj: object) -> str:
    """`digest(obj)` for a value whose parts RFC 8785 could spell differently (numbers, object keys, non-dict
    mappings) the caller already checked with `written_as_is`. Anything the encoder refuses goes through
    `digest`, which names it in its error."""
    try:
        data = _ENCODER.encode(obj).encode("utf-8")
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return digest(obj)
    return "sha256:" + hashlib.sha256(data).hexdigest()


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
