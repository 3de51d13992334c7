"""Every tool of the real-world catalogs (shared/catalogs) goes through the engine.

Two kinds of request per tool: an empty one (only the principal), which must materialize without an
exception and never execute; and a grounded one built from the tool's own schema (see catalog_util), which
isolates the argument logic: it must execute exactly when the payload validates and nothing is unsupported,
and every executed value must trace back to a verified source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from catalog_util import (
    CATALOGS,
    EXTENSION,
    Grounded,
    catalog_tools,
    catalogs_present,
    grounded_request,
)
from jsonschema.validators import validator_for
from test_sidecars import SIDECARS as SIDECAR_DIR

from preflight import (
    ContractError,
    Evidence,
    ExecutionRequest,
    Plan,
    Record,
    compile_plan,
    contract_from_mcp,
    preflight,
)
from preflight.sidecars import load_sidecar

pytestmark = pytest.mark.skipif(
    not catalogs_present(),
    reason=f"the shared tool catalogs are not beside the repository (looked in {CATALOGS})",
)

TOOLS: list[tuple[str, dict[str, Any]]] = list(catalog_tools()) if catalogs_present() else []
SERVERS: list[str] = sorted({server for server, _ in TOOLS})
EMPTY = ExecutionRequest(principal="user:alice")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass
class Outcome:
    server: str
    tool: dict[str, Any]
    plan: Plan
    grounded: Grounded
    record: Record

    @property
    def name(self) -> str:
        return f"{self.server}/{self.tool['name']}"


def _tools_of(server: str) -> list[dict[str, Any]]:
    return [tool for s, tool in TOOLS if s == server]


def _preflight_grounded(server: str, tool: Mapping[str, Any]) -> Outcome:
    plan = compile_plan(contract_from_mcp(server, tool, extension=EXTENSION))
    g = grounded_request(tool)
    return Outcome(server, dict(tool), plan, g, preflight(plan, g.request, g.evidence))


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return [_preflight_grounded(server, tool) for server, tool in TOOLS]


def _schema_is_valid(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


def _unsupported(record: Record) -> list[str]:
    return [s.key for s in record.slots if s.route == "unsupported"]


def _branches(record: Record) -> list[str]:
    return [s.key for s in record.slots if s.key.startswith("branch:") and s.status == "unknown"]


def _report(capsys: pytest.CaptureFixture[str], title: str, lines: list[str]) -> None:
    with capsys.disabled():
        print(f"\n{title}")
        for line in lines:
            print(f"  {line}")


def _walk_payload(payload: Mapping[str, Any], slot_paths: set[str], prefix: str = "") -> Iterator[str]:
    """Paths of payload values with no slot of their own (an object counts if all its members have one)."""
    for key, value in payload.items():
        path = f"{prefix}.{key}" if prefix else key
        if path in slot_paths:
            continue
        if isinstance(value, Mapping) and value:
            yield from _walk_payload(value, slot_paths, path)
        else:
            yield path


# --- loading and materializing ---------------------------------------------------------------------------


def test_every_catalog_holds_tools() -> None:
    assert SERVERS, "no catalog file holds a tool"
    for server in SERVERS:
        assert _tools_of(server), server


@pytest.mark.parametrize("server", SERVERS)
def test_every_tool_of_the_catalog_loads_and_materializes_from_an_empty_request(server: str) -> None:
    failures = []
    for tool in _tools_of(server):
        try:
            contract = contract_from_mcp(server, tool)
        except ContractError as exc:
            # Refusing is right only for a schema that really is invalid (the catalogs hold none).
            if _schema_is_valid(tool.get("inputSchema")) or "inputSchema" not in tool:
                failures.append(f"{tool['name']}: a valid tool was refused: {exc}")
            continue
        try:
            record = preflight(compile_plan(contract), EMPTY, Evidence(now=NOW))
            record.to_json()
        except Exception as exc:
            failures.append(f"{tool['name']}: {type(exc).__name__}: {exc}")
            continue
        if record.verdict == "execute":
            failures.append(f"{tool['name']}: an empty request executed")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("server", SERVERS)
def test_a_corrupted_schema_of_any_tool_is_refused_with_a_contract_error(server: str) -> None:
    failures = []
    for tool in _tools_of(server):
        for schema in ({**(tool.get("inputSchema") or {}), "type": 12}, ["not", "an", "object"]):
            try:
                contract_from_mcp(server, {**tool, "inputSchema": schema})
            except ContractError:
                continue
            except Exception as exc:
                failures.append(f"{tool['name']}: {type(exc).__name__} instead of ContractError: {exc}")
                continue
            failures.append(f"{tool['name']}: the corrupted schema {str(schema)[:60]} was accepted")
    assert not failures, "\n".join(failures)


def test_every_required_argument_of_a_catalog_tool_is_an_obligation(outcomes: list[Outcome]) -> None:
    """A required argument no slot stands for can be neither asked nor answered: the call holds forever."""
    failures = []
    for o in outcomes:
        record = preflight(o.plan, EMPTY, Evidence(now=NOW))
        keys = [s.key for s in record.slots]
        for name in (o.tool.get("inputSchema") or {}).get("required") or []:
            if not any(k == f"arg:{name}" or k.startswith(f"arg:{name}.") for k in keys):
                failures.append(f"{o.name}: required {name!r} has no slot (verdict {record.verdict})")
    assert not failures, "\n".join(failures)


# --- unsupported constructs -------------------------------------------------------------------------------


def test_the_share_of_catalog_tools_with_an_unsupported_slot_is_reported_and_each_one_holds(
    outcomes: list[Outcome], capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    with_unsupported: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    wrong = []
    for o in outcomes:
        totals[o.server] += 1
        if _unsupported(o.record):
            with_unsupported[o.server] += 1
            if o.record.verdict != "hold":
                wrong.append(f"{o.name}: unsupported {_unsupported(o.record)} but verdict {o.record.verdict}")
    lines = [
        f"{server:<24} {with_unsupported[server]:>3}/{totals[server]:<3} "
        f"{100 * with_unsupported[server] / totals[server]:5.1f}%"
        for server in SERVERS
    ]
    overall = sum(with_unsupported.values()), sum(totals.values())
    lines.append(f"{'overall':<24} {overall[0]:>3}/{overall[1]:<3} {100 * overall[0] / overall[1]:5.1f}%")
    _report(capsys, "tools whose record has an unsupported slot (grounded requests):", lines)
    record_property("unsupported_share", {s: f"{with_unsupported[s]}/{totals[s]}" for s in SERVERS})
    assert overall[1] == len(TOOLS)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("server", SERVERS)
def test_a_value_only_keyword_added_to_any_catalog_schema_that_the_payload_fails_holds_as_unsupported(
    server: str,
) -> None:
    failures = []
    for tool in _tools_of(server):
        schema = dict(tool.get("inputSchema") or {"type": "object"})
        schema["not"] = {}  # refuses every payload, and the engine cannot say what would satisfy it
        o = _preflight_grounded(server, {**tool, "inputSchema": schema})
        if "schema:#/not" not in _unsupported(o.record) or o.record.verdict != "hold":
            failures.append(
                f"{tool['name']}: verdict {o.record.verdict}, unsupported {_unsupported(o.record)}"
            )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("server", SERVERS)
def test_a_value_only_keyword_added_to_any_catalog_schema_that_the_payload_satisfies_is_settled_by_validation(
    server: str,
) -> None:
    failures = []
    for tool in _tools_of(server):
        schema = dict(tool.get("inputSchema") or {"type": "object"})
        schema["not"] = {"required": ["__preflight_never__"]}
        plain = _preflight_grounded(server, tool).record
        o = _preflight_grounded(server, {**tool, "inputSchema": schema})
        slot = next((s for s in o.record.slots if s.key == "schema:#/not"), None)
        if o.record.verdict != plain.verdict or (
            plain.payload_valid and (slot is None or slot.status != "known")
        ):
            failures.append(
                f"{tool['name']}: verdict {o.record.verdict} (without: {plain.verdict}), slot {slot}"
            )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("server", SERVERS)
def test_an_unresolvable_reference_added_to_any_catalog_schema_holds_a_grounded_request(server: str) -> None:
    failures = []
    for tool in _tools_of(server):
        schema = dict(tool.get("inputSchema") or {"type": "object"})
        schema["allOf"] = [*schema.get("allOf", []), {"$ref": "https://schemas.example.com/remote.json"}]
        o = _preflight_grounded(server, {**tool, "inputSchema": schema})
        if not _unsupported(o.record) or o.record.verdict != "hold":
            failures.append(
                f"{tool['name']}: verdict {o.record.verdict}, unsupported {_unsupported(o.record)}"
            )
    assert not failures, "\n".join(failures)


# --- shipped side-cars -----------------------------------------------------------------------------------

SIDECARS = {sc.server: sc for sc in (load_sidecar(p) for p in sorted(SIDECAR_DIR.glob("*.json")))}


def _without_provider_gap(server: str, tool: Mapping[str, Any], extension: Any) -> bool:
    contract = contract_from_mcp(server, tool, extension=extension)
    record = preflight(compile_plan(contract), EMPTY, Evidence(now=NOW))
    return not any(g.cls == "provider_gap" for g in record.gaps)


def test_tools_that_materialize_without_a_provider_gap_are_reported_per_catalog_with_and_without_side_cars(
    capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    raw: Counter[str] = Counter()
    shipped: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    worse = []
    for server, tool in TOOLS:
        totals[server] += 1
        extension = SIDECARS[server].tools.get(tool["name"]) if server in SIDECARS else None
        before = _without_provider_gap(server, tool, None)
        after = _without_provider_gap(server, tool, extension) if extension is not None else before
        raw[server] += before
        shipped[server] += after
        if before and not after:
            worse.append(f"{server}/{tool['name']}")
        if extension is not None and not after:
            worse.append(f"{server}/{tool['name']}: its shipped side-car leaves a provider gap")
    lines = [
        f"{server:<24} without {raw[server]:>3}/{totals[server]:<3}  with shipped side-cars "
        f"{shipped[server]:>3}/{totals[server]}"
        for server in SERVERS
    ]
    _report(capsys, "tools that materialize without a provider gap (empty request):", lines)
    record_property(
        "without_provider_gap",
        {s: {"raw": raw[s], "side-cars": shipped[s], "of": totals[s]} for s in SERVERS},
    )
    assert not worse, "\n".join(worse)
    assert shipped["mcp-server-filesystem"] == totals["mcp-server-filesystem"] > 0


# --- grounded requests ------------------------------------------------------------------------------------


def test_the_grounded_values_generated_for_each_catalog_tool_satisfy_its_schema(
    outcomes: list[Outcome],
) -> None:
    """A check of the generator itself, so that a failure below points at the engine, not at the test data."""
    failures = []
    for o in outcomes:
        schema = o.tool.get("inputSchema") or {}
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        errors = [e.message for e in cls(schema).iter_errors(o.grounded.expected_payload())]
        if errors:
            failures.append(f"{o.name}: {errors[:2]}")
    assert not failures, "\n".join(failures)


def test_a_grounded_catalog_tool_executes_exactly_when_its_payload_validates_and_nothing_is_unsupported(
    outcomes: list[Outcome],
) -> None:
    failures = []
    for o in outcomes:
        r = o.record
        expect = r.payload_valid is True and not _unsupported(r) and not _branches(r)
        if (r.verdict == "execute") != expect:
            failures.append(
                f"{o.name}: verdict {r.verdict}, payload_valid {r.payload_valid}, "
                f"unsupported {_unsupported(r)}, branches {_branches(r)}, reasons {r.reasons[:3]}"
            )
    assert not failures, "\n".join(failures)


def test_every_value_of_an_executed_catalog_payload_has_a_slot_with_a_verified_source(
    outcomes: list[Outcome],
) -> None:
    failures = []
    executed = [o for o in outcomes if o.record.verdict == "execute"]
    assert executed, "no catalog tool reached execute"
    for o in executed:
        r = o.record
        assert r.payload is not None
        slots = {s.key[4:]: s for s in r.slots if s.key.startswith("arg:")}
        settled = {p for p, s in slots.items() if s.status != "unknown"}
        for path in _walk_payload(r.payload, settled):
            failures.append(f"{o.name}: payload value {path!r} has no settled slot")
        for path in settled:
            s = slots[path]
            if s.source is None or not s.findings or s.findings[-1].outcome != "found":
                failures.append(f"{o.name}: {s.key} settled without a found source: {s.findings}")
        for path in o.grounded.pointed:
            if slots.get(path) is None or slots[path].source != "instruction":
                failures.append(f"{o.name}: {path!r} was pointed at but is not settled by the instruction")
        for path in o.grounded.answered:
            if slots.get(path) is None or slots[path].source != "user_answer":
                failures.append(f"{o.name}: {path!r} was answered but is not settled by the answer")
        if dict(r.payload) != o.grounded.expected_payload():
            failures.append(f"{o.name}: payload {r.payload} != grounded {o.grounded.expected_payload()}")
    assert not failures, "\n".join(failures)


def test_every_grounded_catalog_tool_reaches_execute(
    outcomes: list[Outcome], capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    """Every required argument is grounded with a value its schema accepts: nothing is left to ask."""
    executed: Counter[str] = Counter(o.server for o in outcomes if o.record.verdict == "execute")
    totals: Counter[str] = Counter(o.server for o in outcomes)
    lines = [f"{server:<24} {executed[server]:>3}/{totals[server]}" for server in SERVERS]
    lines.append(f"{'overall':<24} {sum(executed.values()):>3}/{sum(totals.values())}")
    _report(capsys, "grounded catalog tools that reached execute:", lines)
    record_property("executed", {s: f"{executed[s]}/{totals[s]}" for s in SERVERS})
    stuck = [
        f"{o.name}: {o.record.verdict}, unknown {o.record.unknown_count}, reasons {o.record.reasons[:2]}"
        for o in outcomes
        if o.record.verdict != "execute"
    ]
    assert not stuck, "\n".join(stuck)
