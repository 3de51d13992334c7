from __future__ import annotations

import hashlib
from types import MappingProxyType

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from preflight.canonical import canonical_json, digest


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert canonical_json({"b": [1, "x"], "a": None, "c": True}) == b'{"a":null,"b":[1,"x"],"c":true}'


def test_canonical_digest_is_independent_of_key_order() -> None:
    assert digest({"amount": 10, "to": "alice"}) == digest({"to": "alice", "amount": 10})


def test_canonical_digest_treats_1_and_1_point_0_as_the_same_number() -> None:
    assert canonical_json({"n": 1.0}) == b'{"n":1}'
    assert digest({"n": 1}) == digest({"n": 1.0})


def test_a_different_value_has_a_different_digest() -> None:
    assert digest({"amount": 10}) != digest({"amount": 11})
    assert digest("1") != digest(1)


def test_digest_is_sha256_of_the_canonical_bytes() -> None:
    value = {"z": [1.5, "é"], "a": {"k": False}}
    assert digest(value) == "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def test_tuples_and_read_only_mappings_canonicalize_like_lists_and_dicts() -> None:
    assert canonical_json(MappingProxyType({"a": (1, 2)})) == canonical_json({"a": [1, 2]})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinities_raise_type_error(bad: float) -> None:
    with pytest.raises(TypeError, match=r"\$\.x\[1\]"):
        canonical_json({"x": [0, bad]})


@pytest.mark.parametrize(
    ("bad", "named"),
    [({1, 2}, "set"), (b"raw", "bytes"), (object(), "object"), (frozenset(), "frozenset")],
)
def test_non_json_values_raise_type_error_instead_of_being_stringified(bad: object, named: str) -> None:
    with pytest.raises(TypeError, match=named):
        canonical_json({"v": bad})
    with pytest.raises(TypeError):
        digest(bad)


def test_non_string_keys_raise_type_error() -> None:
    with pytest.raises(TypeError, match="key 1"):
        canonical_json({1: "a"})


def test_integers_beyond_double_precision_raise_type_error() -> None:
    assert canonical_json(2**53 - 1) == b"9007199254740991"
    with pytest.raises(TypeError, match="outside"):
        canonical_json(2**53)


def test_a_value_that_contains_itself_raises_type_error() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(TypeError, match="contains itself"):
        canonical_json(loop)


def test_a_shared_but_acyclic_subvalue_is_fine() -> None:
    shared = [1]
    assert canonical_json([shared, shared]) == b"[[1],[1]]"


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(_json_values)
def test_the_fast_encoder_writes_exactly_the_rfc_8785_bytes(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)  # type: ignore[arg-type]
