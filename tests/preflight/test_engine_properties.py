"""Properties of one preflight over generated schemas and generated grounded states.

Schemas stay in the supported subset (scalar properties, root and nested `required`, oneOf/anyOf of
`required` branches, dependentRequired, if/then/else on a const discriminator, allOf, local $ref/$defs),
or carry exactly one construct the engine does not interpret. Each argument is given one state: verified in
a trusted user turn, answered by the user, or proposed without a usable source (no pointer, a pointer into an
untrusted or assistant turn, a pointer at words that do not hold it); unverified values are distinct
markers, so they can be told apart from clean ones wherever they turn up.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from preflight import (
    Answer,
    Candidate,
    ContractError,
    Evidence,
    ExecutionRequest,
    Plan,
    Record,
    Span,
    Timing,
    Turn,
    compile_plan,
    contract_from_mcp,
    preflight,
)

EXTENSION = {"state_change": "the declared effect happens", "prose_reviewed": True}
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PRINCIPAL = "user:alice"
PREAMBLE = "Please do it now."

ROOT = ("a", "b", "c", "d")
CHILD = ("x", "y")
SCALARS = ("string", "integer", "number", "boolean")
DISCRIMINATOR = "k"
NESTED = "n"

# verified: settles with the instruction; answer: settles with the user's answer; the rest never settle.
CLEAN = ("verified", "answer")
# lookalike: a pointer at the value inside a longer token ("taintq" in "1taintq7"); fullwidth: at the value
# spelled in fullwidth forms. Both point into the trusted turn, and neither may verify.
TAINTED = ("unpointed", "untrusted_tool", "untrusted_user", "assistant", "mismatch", "lookalike", "fullwidth")
CLEAN_POOL = ("absent", "absent", "verified", "verified", "answer", "answer_over_tainted")
STATES = (*CLEAN_POOL, *TAINTED)

# Modest by default (the suite runs on two cores); PREFLIGHT_PROPERTY_EXAMPLES=2000 for a deeper search.
FAST = settings(
    max_examples=int(os.environ.get("PREFLIGHT_PROPERTY_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Case:
    schema: dict[str, Any]
    types: dict[str, str]  # leaf argument path -> scalar type ("enum" for the discriminator)
    states: dict[str, str]  # leaf argument path -> state
    clean: dict[str, Any]  # leaf argument path -> the value a clean source gives
    tainted: dict[str, Any]  # leaf argument path -> the marker an unverified proposal carries


def _clean_value(path: str, kind: str, index: int, pick: int) -> Any:
    return {
        "string": f"val{path.replace('.', '')}",
        "integer": 10 + index,
        "number": index + 0.25,
        "boolean": True,
        "enum": ("on", "off")[pick],
    }[kind]


def _tainted_value(path: str, kind: str, index: int) -> Any:
    return {
        "string": f"taint{path.replace('.', '')}",
        "integer": 900 + index,
        "number": 900.5 + index,
        "boolean": False,
        "enum": "off",
    }[kind]


def _names(draw: st.DrawFn, pool: tuple[str, ...], min_size: int = 0, max_size: int = 3) -> list[str]:
    return draw(st.lists(st.sampled_from(pool), unique=True, min_size=min_size, max_size=max_size))


@st.composite
def supported_schemas(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    types = {n: draw(st.sampled_from(SCALARS)) for n in ROOT}
    defs: dict[str, Any] = {}
    props: dict[str, Any] = {}
    by_ref = draw(st.sets(st.sampled_from(ROOT), max_size=2))
    for n in ROOT:
        if n in by_ref:
            defs[f"{n}_type"] = {"type": types[n]}
            props[n] = {"$ref": f"#/$defs/{n}_type"}
        else:
            props[n] = {"type": types[n]}
    props[DISCRIMINATOR] = {"type": "string", "enum": ["on", "off"]}
    leaf_types: dict[str, str] = {**types, DISCRIMINATOR: "enum"}
    names: tuple[str, ...] = (*ROOT, DISCRIMINATOR)
    if draw(st.booleans()):
        child_types = {c: draw(st.sampled_from(SCALARS)) for c in CHILD}
        nested: dict[str, Any] = {
            "type": "object",
            "properties": {c: {"type": t} for c, t in child_types.items()},
        }
        if required := _names(draw, CHILD, max_size=2):
            nested["required"] = required
        if draw(st.booleans()):
            defs["nested"] = nested
            props[NESTED] = {"$ref": "#/$defs/nested"}
        else:
            props[NESTED] = nested
        leaf_types |= {f"{NESTED}.{c}": t for c, t in child_types.items()}
        names = (*names, NESTED)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required := _names(draw, names):
        schema["required"] = required
    all_of: list[dict[str, Any]] = []
    if draw(st.booleans()):
        kind = draw(st.sampled_from(("oneOf", "anyOf")))
        branches = [
            {"required": _names(draw, names, min_size=1, max_size=2)} for _ in range(draw(st.integers(2, 3)))
        ]
        if draw(st.booleans()):
            all_of.append({kind: branches})
        else:
            schema[kind] = branches
    if draw(st.booleans()):
        table = {
            n: needs
            for n in _names(draw, names, min_size=1, max_size=2)
            if (needs := [m for m in _names(draw, names, min_size=1, max_size=2) if m != n])
        }
        if table:
            schema["dependentRequired"] = table
    if draw(st.booleans()):
        test: dict[str, Any] = {"properties": {DISCRIMINATOR: {"const": "on"}}}
        if draw(st.booleans()):
            test["required"] = [DISCRIMINATOR]
        conditional = {
            "if": test,
            "then": {"required": _names(draw, ROOT, max_size=2)},
            "else": {"required": _names(draw, ROOT, max_size=2)},
        }
        if draw(st.booleans()):
            all_of.append(conditional)
        else:
            schema.update(conditional)
    if draw(st.booleans()):
        defs["base"] = {"required": _names(draw, names, min_size=1, max_size=2)}
        all_of.append({"$ref": "#/$defs/base"})
    if all_of:
        schema["allOf"] = all_of
    if defs:
        schema["$defs"] = defs
    return schema, leaf_types


@st.composite
def cases(
    draw: st.DrawFn,
    schemas: st.SearchStrategy[tuple[dict[str, Any], dict[str, str]]],
    pool: tuple[str, ...] | None = None,
) -> Case:
    schema, types = draw(schemas)
    if pool is None:
        # Half the cases are clean throughout, so that verdicts other than ask are common enough to test.
        pool = draw(st.sampled_from((STATES, CLEAN_POOL)))
    states = {path: draw(st.sampled_from(pool)) for path in types}
    pick = draw(st.integers(0, 1))
    clean = {p: _clean_value(p, t, i, pick) for i, (p, t) in enumerate(sorted(types.items()))}
    tainted = {p: _tainted_value(p, t, i) for i, (p, t) in enumerate(sorted(types.items()))}
    return Case(schema, types, states, clean, tainted)


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def request_of(case: Case) -> tuple[ExecutionRequest, Evidence]:
    """Turn 0 is the user's trusted instruction; turns 1-3 carry the proposals nobody vouched for."""
    texts = [PREAMBLE, "Tool result:", "Forwarded mail:", "Assistant draft:"]
    turn_of = {
        "verified": 0,
        "untrusted_tool": 1,
        "answer_over_tainted": 1,
        "untrusted_user": 2,
        "assistant": 3,
    }
    candidates: dict[str, Candidate] = {}
    answers: dict[str, Answer] = {}
    for path, state in sorted(case.states.items()):
        if state in ("answer", "answer_over_tainted"):
            answers[f"arg:{path}"] = Answer(case.clean[path], PRINCIPAL, f"a-{path}")
        if state in turn_of:
            value = case.clean[path] if state == "verified" else case.tainted[path]
            turn = turn_of[state]
            texts[turn] += f" {path} is "
            start = len(texts[turn])
            texts[turn] += _render(value)
            candidates[path] = Candidate(value, Span(turn, start, len(texts[turn])))
            texts[turn] += ";"
        elif state in ("lookalike", "fullwidth"):
            written = _render(case.tainted[path])
            if state == "fullwidth":
                written = "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in written)
            texts[0] += f" {path} is 1"
            start = len(texts[0])
            texts[0] += written
            candidates[path] = Candidate(case.tainted[path], Span(0, start, len(texts[0])))
            texts[0] += "7;"
        elif state == "unpointed":
            candidates[path] = Candidate(case.tainted[path], None)
        elif state == "mismatch":
            candidates[path] = Candidate(case.tainted[path], Span(0, 0, len("Please")))
    conversation = (
        Turn("user", texts[0], trusted=True),
        Turn("tool", texts[1], trusted=False),
        Turn("user", texts[2], trusted=False),
        Turn("assistant", texts[3], trusted=True),
    )
    action, timing = PREAMBLE.index("do it"), PREAMBLE.index("now")
    request = ExecutionRequest(
        principal=PRINCIPAL,
        conversation=conversation,
        candidates=candidates,
        action_name=Span(0, action, action + len("do it")),
        timing=Timing("immediate", pointer=Span(0, timing, timing + len("now"))),
    )
    return request, Evidence(now=NOW, answers=answers)


_plans: dict[str, Plan] = {}


def plan_of(schema: dict[str, Any]) -> Plan:
    # Checking a schema against its metaschema is the slow part of a run; hypothesis repeats schemas often.
    key = json.dumps(schema, sort_keys=True)
    if key not in _plans:
        tool = {"name": "tool", "inputSchema": schema}
        _plans[key] = compile_plan(contract_from_mcp("generated", tool, extension=EXTENSION))
    return _plans[key]


def run(case: Case) -> Record:
    plan = plan_of(case.schema)
    request, evidence = request_of(case)
    return preflight(plan, request, evidence)


def clean_payload(case: Case) -> dict[str, Any]:
    """What the clean sources alone assemble: the payload an honest engine would build."""
    out: dict[str, Any] = {}
    for path, state in case.states.items():
        if state in (*CLEAN, "answer_over_tainted"):
            target = out
            *parents, leaf = path.split(".")
            for part in parents:
                target = target.setdefault(part, {})
            target[leaf] = case.clean[path]
    return out


def leaves(payload: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in payload.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping) and value:
            yield from leaves(value, path)
        else:
            yield path, value


# --- supported schemas ------------------------------------------------------------------------------------


@FAST
@given(cases(supported_schemas()))
def test_an_execute_verdict_means_a_valid_payload_whose_every_value_has_a_found_source(case: Case) -> None:
    record = run(case)
    if record.verdict != "execute":
        return
    assert record.payload is not None
    assert Draft202012Validator(case.schema).is_valid(record.payload), record.payload
    for path, value in leaves(record.payload):
        slot = record.slot(f"arg:{path}")
        assert slot.source is not None, slot
        assert slot.findings and slot.findings[-1].outcome == "found", slot.findings
        assert slot.value == value


@FAST
@given(cases(supported_schemas()))
def test_a_value_proposed_without_a_verified_source_never_reaches_the_payload(case: Case) -> None:
    record = run(case)
    payload = dict(leaves(record.payload or {}))
    for path, state in case.states.items():
        if state in TAINTED:
            assert path not in payload, f"{path} ({state}) = {payload.get(path)!r}"
        elif state == "answer_over_tainted" and path in payload:
            assert payload[path] == case.clean[path]
            assert record.slot(f"arg:{path}").source == "user_answer"


@FAST
@given(cases(supported_schemas()))
def test_nothing_executes_while_a_proposed_value_is_unverified(case: Case) -> None:
    record = run(case)
    unverified = sorted(p for p, s in case.states.items() if s in TAINTED)
    if unverified:
        assert record.verdict != "execute", unverified


@FAST
@given(cases(supported_schemas()))
def test_the_verdict_is_execute_exactly_when_no_slot_is_unknown_and_the_payload_is_valid(case: Case) -> None:
    record = run(case)
    complete = record.unknown_count == 0 and record.payload_valid is True
    assert (record.verdict == "execute") == complete, (record.verdict, record.reasons)


_NESTED_PROPS = {
    "a": {"type": "string"},
    "n": {"type": "object", "properties": {"x": {"type": "string"}}},
}
_NESTED_TYPES = {"a": "string", "n.x": "string"}
_NESTED_CLEAN = {"a": "vala", "n.x": "valnx"}
_NESTED_TAINT = {"a": "tainta", "n.x": "taintnx"}
# A nested object named by a branch or a dependency is present once one of its members is settled.
NESTED_BRANCH = Case(
    {"type": "object", "properties": _NESTED_PROPS, "oneOf": [{"required": ["n"]}, {"required": ["a"]}]},
    _NESTED_TYPES,
    {"a": "absent", "n.x": "verified"},
    _NESTED_CLEAN,
    _NESTED_TAINT,
)
NESTED_DEPENDENCY = Case(
    {"type": "object", "properties": _NESTED_PROPS, "dependentRequired": {"n": ["a"]}},
    _NESTED_TYPES,
    {"a": "absent", "n.x": "verified"},
    _NESTED_CLEAN,
    _NESTED_TAINT,
)


@FAST
@given(cases(supported_schemas()))
def test_every_argument_the_schema_makes_obligatory_is_a_slot_so_a_settled_payload_never_misses_one(
    case: Case,
) -> None:
    """Every generated value fits its type, so a payload can only fail the schema by missing an argument,
    which means an obligation was never materialized: it can be neither asked nor answered."""
    record = run(case)
    assert record.payload_valid is not False, (record.payload, record.payload_errors)


@FAST
@given(cases(supported_schemas(), pool=("absent", "verified", "answer")))
def test_clean_values_that_satisfy_the_schema_execute_as_exactly_that_payload(case: Case) -> None:
    """Completeness: when everything proposed is verified and the values validate, nothing is left to ask."""
    expected = clean_payload(case)
    if not Draft202012Validator(case.schema).is_valid(expected):
        return
    record = run(case)
    assert record.verdict == "execute", (record.reasons, [s.key for s in record.slots if not s.settled])
    assert record.payload == expected


def test_a_branch_naming_a_nested_object_is_complete_once_a_member_of_that_object_is_verified() -> None:
    record = run(NESTED_BRANCH)
    assert record.verdict == "execute", (record.reasons, [s.key for s in record.slots if not s.settled])
    assert record.payload == {"n": {"x": "valnx"}}


def test_a_dependency_of_a_nested_object_is_asked_once_a_member_of_that_object_is_verified() -> None:
    record = run(NESTED_DEPENDENCY)
    assert record.verdict == "ask", record.reasons
    assert record.slot("arg:a").route == "ask_user"


@FAST
@given(cases(supported_schemas()))
def test_the_same_inputs_give_the_same_record(case: Case) -> None:
    assert run(case).to_json() == run(case).to_json()


# --- undeclared arguments and closed schemas ----------------------------------------------------------------

EXTRA = ("q", "r")  # names no generated schema declares
CLOSURES: tuple[dict[str, Any], ...] = (
    {},
    {"additionalProperties": False},
    {"unevaluatedProperties": False},
    {"propertyNames": {"pattern": "^[a-dkn]$"}},
    {"maxProperties": 3},
    {"additionalProperties": {"type": "string"}},
)


@st.composite
def open_schemas(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    """Supported schemas that may refuse undeclared arguments, with candidates for some undeclared ones."""
    schema, types = draw(supported_schemas())
    schema = {**schema, **draw(st.sampled_from(CLOSURES))}
    for name in _names(draw, EXTRA, max_size=2):
        types[name] = draw(st.sampled_from(SCALARS))
    return schema, types


def grounded_paths(case: Case) -> set[str]:
    return {p for p, s in case.states.items() if s in (*CLEAN, "answer_over_tainted")}


@FAST
@given(cases(open_schemas()))
def test_execute_means_the_payload_validates_and_is_exactly_the_grounded_values(case: Case) -> None:
    """Undeclared arguments included, look-alike spans among the proposals: nothing dropped, nothing added."""
    record = run(case)
    if record.verdict != "execute":
        return
    assert record.payload is not None
    assert Draft202012Validator(case.schema).is_valid(record.payload), record.payload
    assert record.payload == clean_payload(case), (record.payload, case.states)


@FAST
@given(cases(open_schemas()))
def test_nothing_the_user_stated_or_the_model_proposed_is_missing_from_the_record(case: Case) -> None:
    record = run(case)
    keys = {s.key for s in record.slots}
    for path, state in case.states.items():
        if state == "absent":
            continue
        assert f"arg:{path}" in keys, (path, state, sorted(keys))
        slot = record.slot(f"arg:{path}")
        if path in grounded_paths(case):
            # Settled, or not settled because the tool refuses it, and then the record says why.
            assert slot.status == "known" or slot.refused is not None, slot
        elif slot.status == "unknown":
            assert slot.unverified and slot.candidate == case.tainted[path], slot


@FAST
@given(cases(open_schemas()))
def test_a_grounded_undeclared_argument_the_tool_refuses_is_asked_about_never_run_without(case: Case) -> None:
    record = run(case)
    grounded = grounded_paths(case)
    expected = clean_payload(case)
    extras = [p for p in EXTRA if p in grounded]
    if not extras or Draft202012Validator(case.schema).is_valid(expected):
        return
    assert record.verdict != "execute", record.payload


@FAST
@given(cases(open_schemas(), pool=("absent", "verified", "answer")))
def test_clean_values_that_a_closed_or_open_schema_takes_execute_as_exactly_that_payload(case: Case) -> None:
    expected = clean_payload(case)
    if not Draft202012Validator(case.schema).is_valid(expected):
        return
    record = run(case)
    assert record.verdict == "execute", (record.reasons, [s.key for s in record.slots if not s.settled])
    assert record.payload == expected


# --- unsupported constructs -------------------------------------------------------------------------------

# Constructs the engine does not read, each refusing every payload: they must hold, naming the construct.
UNSUPPORTED: tuple[tuple[str, Any], ...] = (
    ("not", {}),
    ("minProperties", 1000),
    ("dependentSchemas", {name: False for name in ("a", "b", "c", "d", "k", "n", "x", "y", "remote")}),
    ("$ref", "https://schemas.example.com/remote.json"),
    ("if", {"properties": {"__never__": {"maxLength": 3}}}),  # passes on every payload: `then` refuses
    ("oneOf", [{"required": ["a"], "not": {}}, {"not": {}}]),
    ("const", "not an object"),
)
# Constructs the engine does not read that accept every generated payload: the validator settles them.
SATISFIED: tuple[tuple[str, Any], ...] = (
    ("not", {"required": ["__never__"]}),
    ("maxProperties", 1000),
    ("propertyNames", {"maxLength": 10}),
    ("dependentSchemas", {"__never__": False}),
    ("patternProperties", {"^__never__$": False}),
    ("if", {"properties": {"a": {"minimum": 3}}, "required": ["__never__"]}),
)


def _place(draw: st.DrawFn, schema: dict[str, Any], keyword: str, value: Any) -> None:
    construct = {keyword: value} if keyword != "if" else {"if": value, "then": False}
    if keyword == "dependentSchemas" and value.get("a") is False:
        construct = {keyword: value, "minProperties": 1}  # some argument is there, so its dependency refuses
    if keyword == "$ref":
        construct = {"properties": {"remote": {"$ref": value}}, "required": ["remote"]}
    where = draw(st.sampled_from(("allOf", "nested", "property")))
    if where == "nested" and NESTED in schema["properties"] and "$ref" not in schema["properties"][NESTED]:
        schema["properties"][NESTED] = {**schema["properties"][NESTED], "allOf": [construct]}
        schema["required"] = sorted({*schema.get("required", []), NESTED})
    elif where == "property" and keyword == "$ref":
        schema["properties"]["remote"] = {"$ref": value}
    else:
        schema["allOf"] = [*schema.get("allOf", []), construct]


@st.composite
def unsupported_schemas(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    schema, types = draw(supported_schemas())
    keyword, value = draw(st.sampled_from(UNSUPPORTED))
    _place(draw, schema, keyword, value)
    return schema, types


@st.composite
def satisfied_schemas(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    schema, types = draw(supported_schemas())
    keyword, value = draw(st.sampled_from(SATISFIED))
    _place(draw, schema, keyword, value)
    return schema, types


@FAST
@given(cases(unsupported_schemas()))
def test_a_construct_the_engine_does_not_read_never_executes_a_payload_it_refuses(case: Case) -> None:
    try:
        record = run(case)
    except ContractError:
        pytest.fail("a valid schema with an unsupported construct was refused instead of held")
    assert record.verdict != "execute"
    unsupported = [s for s in record.slots if s.route == "unsupported"]
    assert all(s.status == "unknown" and s.gap == "implementation_gap" for s in unsupported)
    if record.unknown_count == len(unsupported) and record.payload_valid is not True:
        # nothing else is open: the construct that refuses the payload holds it, named
        assert unsupported, [s.key for s in record.slots]
        assert record.verdict == "hold"


@FAST
@given(cases(satisfied_schemas(), pool=("absent", "verified", "answer")))
def test_a_construct_the_engine_does_not_read_but_the_payload_satisfies_does_not_stop_it(case: Case) -> None:
    """The validator is the authority on complete: the clean payload executes as it would without it."""
    expected = clean_payload(case)
    if not Draft202012Validator(case.schema).is_valid(expected):
        return
    record = run(case)
    assert record.verdict == "execute", (record.reasons, [s.key for s in record.slots if not s.settled])
    assert record.payload == expected


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]},
        {
            "type": "object",
            "$defs": {"node": {"type": "object", "properties": {"kids": {"$ref": "#/$defs/node"}}}},
            "properties": {"tree": {"$ref": "#/$defs/node"}},
            "required": ["tree"],
        },
        {"type": "object", "allOf": [{"$ref": "#"}], "properties": {"a": {"type": "string"}}},
    ],
    ids=["root-reference", "defs-reference", "root-applies-itself"],
)
def test_a_recursive_local_reference_neither_crashes_nor_executes_unasked(schema: dict[str, Any]) -> None:
    case = Case(schema, {}, {}, {}, {})
    record = run(case)
    assert record.verdict in ("ask", "hold")


def test_a_property_name_with_a_dot_reaches_the_payload_under_its_own_name_or_is_reported_unsupported() -> (
    None
):
    """`a.b` is a legal property name; read as the path a -> b it can never satisfy `required: ["a.b"]`."""
    schema = {"type": "object", "properties": {"a.b": {"type": "string"}}, "required": ["a.b"]}
    case = Case(schema, {"a.b": "string"}, {"a.b": "verified"}, {"a.b": "valab"}, {"a.b": "taintab"})
    record = run(case)
    unsupported = [s for s in record.slots if s.route == "unsupported"]
    if not unsupported:
        assert record.verdict == "execute", record.reasons
        assert record.payload == {"a.b": "valab"}


@FAST
@given(cases(st.one_of(satisfied_schemas(), unsupported_schemas())))
def test_with_constructs_left_to_the_validator_an_execute_still_means_a_valid_payload_of_found_values(
    case: Case,
) -> None:
    record = run(case)
    if record.verdict != "execute":
        return
    assert record.payload is not None
    assert Draft202012Validator(case.schema).is_valid(record.payload), record.payload
    for path, value in leaves(record.payload):
        slot = record.slot(f"arg:{path}")
        assert slot.findings and slot.findings[-1].outcome == "found" and slot.value == value, slot
