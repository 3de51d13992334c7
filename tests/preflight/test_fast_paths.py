"""Every shortcut the engine takes for speed agrees with the general path it skips.

The plan marks flat object nodes (no branches, conditionals, dependencies or nested objects) so a preflight
can skip branch selection; records digest the typed part of their JSON without walking it; expressions hand
CEL only the roots they read; pointers read Python's own spelling of a number or a boolean word directly.
Each is compared here with the path it replaces, on the real catalogs where that matters.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest
import rfc8785
from catalog_util import EXTENSION, catalog_tools, catalogs_present, grounded_request, sample_value
from hypothesis import given
from hypothesis import strategies as st

from preflight import (
    Candidate,
    Evidence,
    ExecutionRequest,
    Plan,
    Span,
    Turn,
    compile_plan,
    contract_from_mcp,
    load_rules,
    preflight,
    resolve,
)
from preflight.canonical import canonical_json, digest, digest_written_as_is, written_as_is
from preflight.errors import ExpressionError
from preflight.expressions import ROOTS, compile_expression, evaluate
from preflight.pointers import values_match
from preflight.record import Finding, MeasureRequest, Question, Record, SlotState

TOOLS: list[tuple[str, dict[str, Any]]] = list(catalog_tools()) if catalogs_present() else []
needs_catalogs = pytest.mark.skipif(not TOOLS, reason="the shared tool catalogs are not present")


def _general(plan: Plan) -> Plan:
    """The same plan with every node marked as needing branch selection: the path before the shortcut."""
    return replace(plan, nodes={k: replace(n, flat=False) for k, n in plan.nodes.items()})


def _variants(
    tool: dict[str, Any], principal: str = "user:alice"
) -> list[tuple[str, ExecutionRequest, Evidence]]:
    g = grounded_request(tool, principal)
    req, ev = g.request, g.evidence
    cands = dict(req.candidates)
    half = {k: v for i, (k, v) in enumerate(cands.items()) if i % 2 == 0}
    shifted = {
        k: Candidate(v.value, Span(v.pointer.turn, v.pointer.start + 1, v.pointer.end) if v.pointer else None)
        for k, v in cands.items()
    }
    # optional scalar arguments proposed too, each pointed at in the same user turn
    text = req.conversation[0].content
    extra = dict(cands)
    for name, sub in list(((tool.get("inputSchema") or {}).get("properties") or {}).items())[:6]:
        value = sample_value(sub, name) if isinstance(sub, dict) else None
        if name in extra or value is None or isinstance(value, list | dict):
            continue
        text += f" {name} is "
        start = len(text)
        text += "true" if value is True else "false" if value is False else str(value)
        extra[name] = Candidate(value, Span(0, start, len(text)))
    more = replace(req, conversation=(Turn("user", text, trusted=True),), candidates=extra)
    return [
        ("grounded", req, ev),
        ("empty", ExecutionRequest(principal=principal), Evidence(now=ev.now)),
        ("half", replace(req, candidates=half), ev),
        ("shifted", replace(req, candidates=shifted), ev),
        ("optional", more, ev),
    ]


@needs_catalogs
def test_the_flat_node_shortcut_gives_the_same_record_as_branch_selection_for_every_catalog_tool() -> None:
    compared = flat = 0
    for server, tool in TOOLS:
        plan = compile_plan(contract_from_mcp(server, tool, extension=EXTENSION))
        general = _general(plan)
        flat += plan.root is not None and plan.nodes[plan.root.location].flat
        for label, req, ev in _variants(tool):
            fast = preflight(plan, req, ev).to_json()
            assert fast == preflight(general, req, ev).to_json(), f"{server}/{tool['name']} ({label})"
            compared += 1
    assert compared == 5 * len(TOOLS)
    assert flat > len(TOOLS) // 2  # the shortcut is actually taken on most catalog tools


@needs_catalogs
def test_a_rule_that_requires_an_optional_argument_is_honoured_on_the_flat_path_too() -> None:
    checked = 0
    for server, tool in TOOLS:
        schema = tool.get("inputSchema") or {}
        optional = [p for p in schema.get("properties") or {} if p not in (schema.get("required") or [])]
        if not optional:
            continue
        rules = load_rules(
            {"id": "org", "version": "1", "rules": [{"id": "must", "kind": "require", "arg": optional[0]}]}
        )
        plan = compile_plan(contract_from_mcp(server, tool, extension=EXTENSION), [rules])
        for label, req, ev in _variants(tool):
            fast = preflight(plan, req, ev)
            assert fast.to_json() == preflight(_general(plan), req, ev).to_json(), f"{server} {label}"
            if label == "grounded" and optional[0] not in req.candidates:
                assert any(s.key == f"arg:{optional[0]}" for s in fast.slots)
                checked += 1
    assert checked > 0


# --- record digests ----------------------------------------------------------------------------------------


_POINTER = {"turn": 0, "start": 1, "end": 5}


def _record(place: str, odd: Any) -> Record:
    """A record with `odd` in one place that holds a value from outside the engine, plain JSON elsewhere."""

    def at(where: str, plain: Any) -> Any:
        if place != where:
            return plain
        # pointers, schemas, lookup arguments and the payload are JSON objects by type
        return {"k": odd} if isinstance(plain, dict) and not isinstance(odd, dict | MappingProxyType) else odd

    settled = SlotState(
        key="arg:x",
        kind="value",
        defined_by="provider",
        label="x",
        status="known",
        value=at("value", "IBAN DE11"),
        source="instruction",
        pointer=at("pointer", _POINTER),
        findings=(Finding("instruction", "found", at("finding", _POINTER)),),
    )
    unsettled = SlotState(
        key="arg:y",
        kind="value",
        defined_by="provider",
        label="y",
        status="unknown",
        route="ask_user",
        candidate=at("candidate", 7),
        unverified=True,
    )
    return Record(
        verdict="ask",
        server="s",
        tool="t",
        contract_digest="sha256:0",
        principal="user:alice",
        checklist_version="fixed@1",
        slots=(settled, unsettled),
        questions=(Question("arg:y", "What is y?", at("schema", {"type": "number"})),),
        measures=(MeasureRequest("m", "bank.m", at("args", {"a": 1}), "sha256:1", 60.0),),
        unmet=(),
        gaps=(),
        notices=(),
        payload=at("payload", {"x": "IBAN DE11"}),
        payload_digest=None,
        payload_valid=None,
        payload_errors=(),
        unknown_count=1,
        reasons=("ok",),
        evaluated_at="2026-11-30T12:00:00+00:00",
    )


def _rfc8785_digest(body: dict[str, Any]) -> str:
    # json round trip: tuples become lists and read-only mappings dicts, as RFC 8785 sees them
    plain = json.loads(json.dumps(body, default=dict))
    return "sha256:" + hashlib.sha256(rfc8785.dumps(plain)).hexdigest()


_PLACES = ("value", "pointer", "finding", "candidate", "schema", "args", "payload")
_ODD = [
    120.0,  # RFC 8785 writes 120
    1e-7,  # the exponent spellings differ
    {"n": 3.0},
    (1, 2),
    MappingProxyType({"k": (1.0,)}),
    {"\U0001f600": 1, "\uff5e": 2},  # keys sort by UTF-16 code units, not code points
    2**53 - 1,
]


@pytest.mark.parametrize("place", _PLACES)
@pytest.mark.parametrize("odd", _ODD, ids=repr)
def test_the_record_digest_is_rfc_8785_wherever_a_foreign_value_sits(place: str, odd: Any) -> None:
    record = _record(place, odd)
    out = record.to_json()
    body = {k: v for k, v in out.items() if k != "record_digest"}
    assert out["record_digest"] == record.digest() == digest(record.body()) == _rfc8785_digest(body)


def test_a_record_holding_a_value_that_is_not_json_still_fails_with_its_location() -> None:
    for place in _PLACES:
        with pytest.raises(TypeError, match="set"):
            _record(place, {"v": {1, 2}}).to_json()
        with pytest.raises(TypeError, match="outside"):
            _record(place, [2**60]).to_json()


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4).map(MappingProxyType)
    ),
    max_leaves=20,
)


@given(_json)
def test_a_value_written_as_is_gets_the_same_bytes_as_rfc8785(value: Any) -> None:
    expected = rfc8785.dumps(json.loads(json.dumps(value, default=dict)))
    assert canonical_json(value) == expected
    if written_as_is(value):
        assert digest_written_as_is(value) == "sha256:" + hashlib.sha256(expected).hexdigest()


# --- expressions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "measure.balance >= arg.amount",
        "arg.amount > 10 && principal == 'user:alice'",
        "env.environment == 'prod' || arg.amount < 5",
        "size(arg) == 2",
        "arg.items.all(measure, measure > 0)",  # a bound name that shadows a root
        "'arg.amount' != principal",  # a root named only inside a string literal
        "measure.missing > 1",  # fails: no such measure
        "arg.amount",  # fails: not a boolean
    ],
)
def test_an_expression_given_only_the_roots_it_reads_evaluates_as_with_all_of_them(source: str) -> None:
    expr = compile_expression(source)
    everything = replace(expr, roots=frozenset(ROOTS))
    inputs: dict[str, Any] = {
        "args": {"amount": 20, "items": [1, 2]},
        "measures": {"balance": 30},
        "principal": "user:alice",
        "env": {"environment": "prod"},
    }

    def outcome(e: Any) -> object:
        try:
            return evaluate(e, **inputs)
        except ExpressionError as error:
            return ("error", error.reason)

    assert outcome(expr) == outcome(everything)


# --- pointers ----------------------------------------------------------------------------------------------


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_in_its_own_spelling_matches_where_the_decimal_point_is_known(value: float) -> None:
    text = repr(value)
    assert values_match(text, value, mark=".") is (not ("e" in text or "inf" in text))


def test_a_nan_float_is_not_matched_by_its_spelling() -> None:
    assert not values_match("nan", math.nan)


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)


@given(st.lists(st.dictionaries(st.text(max_size=3), _SCALARS, max_size=3), min_size=1, max_size=6))
def test_a_kept_args_digest_is_the_digest_of_those_args_whatever_came_before(
    batch: list[dict[str, Any]],
) -> None:
    # Equal in Python but not in JSON (1, 1.0, True; 0 and False): each keeps its own digest.
    for args in [*batch, {"n": 1}, {"n": 1.0}, {"n": True}, {"n": 0}, {"n": False}, *batch]:
        assert resolve._args_digest(args) == digest(args)


def test_args_with_a_list_are_digested_each_time_and_right() -> None:
    args = {"accounts": ["a", "b"], "n": 1}
    assert resolve._args_digest(args) == resolve._args_digest(dict(args)) == digest(args)
