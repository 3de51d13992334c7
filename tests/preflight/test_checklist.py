from __future__ import annotations

from typing import Any

import pytest
from builders import NOW, Said, request, tool
from test_engine import confirmed_to, observed

from preflight import Evidence, ExecutionRequest, compile_plan, contract_from_mcp, load_rules, preflight
from preflight.checklist import FIXED_CHECKLIST, FIXED_CHECKLIST_DATA, load_fixed_checklist
from preflight.errors import ChecklistError
from preflight.record import Record


def rules(*items: dict[str, Any], version: str = "1") -> Any:
    return load_rules({"id": "acme", "version": version, "rules": list(items)})


def run_with(checklist: Any, req: ExecutionRequest, *, principal: str = "user:alice") -> Record:
    from dataclasses import replace

    plan = compile_plan(contract_from_mcp("bank", tool()), [checklist])
    confirmed = {k: replace(a, answered_by=principal) for k, a in confirmed_to().items()}
    evidence = Evidence(now=NOW, observations=observed(req, 9000), answers=confirmed)
    return preflight(plan, replace(req, principal=principal), evidence)


LIMIT = {
    "id": "alice_limit",
    "kind": "condition",
    "principals": ["user:alice"],
    "check": "arg.amount <= 100",
    "on_false": "hold",
    "text": "Alice may send at most 100.",
}


def test_a_user_rule_holds_an_amount_over_that_users_limit(grounded: ExecutionRequest) -> None:
    record = run_with(rules(LIMIT), grounded)
    assert record.verdict == "hold"
    slot = record.slot("user:alice_limit")
    assert slot.defined_by == "user" and slot.met is False
    assert [u.id for u in record.unmet] == ["alice_limit"]


def test_a_user_rule_does_not_apply_to_another_user(grounded: ExecutionRequest) -> None:
    record = run_with(rules(LIMIT), grounded, principal="user:bob")
    assert record.verdict == "execute"
    assert all(s.key != "user:alice_limit" for s in record.slots)


def test_an_org_rule_can_require_an_optional_argument(grounded: ExecutionRequest) -> None:
    record = run_with(rules({"id": "memo", "kind": "require", "arg": "memo"}), grounded)
    assert record.verdict == "ask" and [q.slot for q in record.questions] == ["arg:memo"]


def test_an_org_rule_can_demand_an_approval(grounded: ExecutionRequest) -> None:
    record = run_with(rules({"id": "four_eyes", "kind": "approval", "when": "arg.amount > 50"}), grounded)
    slot = record.slot("approval:four_eyes")
    assert slot.defined_by == "policy" and slot.approval == "required" and record.verdict == "hold"


def test_a_rule_reading_an_argument_the_tool_lacks_does_not_apply(grounded: ExecutionRequest) -> None:
    record = run_with(
        rules({"id": "q", "kind": "condition", "check": "arg.quantity < 5", "on_false": "block"}), grounded
    )
    assert record.verdict == "execute"


def test_the_record_names_which_rules_applied(grounded: ExecutionRequest) -> None:
    one = run_with(rules(LIMIT, version="1"), grounded)
    two = run_with(rules(LIMIT, version="2"), grounded)
    assert "acme@1" in one.checklist_version and "acme@2" in two.checklist_version


@pytest.mark.parametrize(
    ("data", "line", "reason"),
    [
        (
            {"id": "x", "version": "1", "rules": [{"id": "a", "kind": "condition", "check": "arg.a >"}]},
            "rules[0]",
            "on_false",
        ),
        (
            {
                "id": "x",
                "version": "1",
                "rules": [{"id": "a", "kind": "condition", "check": "arg.a >", "on_false": "hold"}],
            },
            "rules[0] (a).check",
            "parse",
        ),
        (
            {
                "id": "x",
                "version": "1",
                "rules": [
                    {"id": "a", "kind": "require", "arg": "m"},
                    {"id": "a", "kind": "require", "arg": "n"},
                ],
            },
            "rules[1] (a)",
            "twice",
        ),
        (
            {
                "id": "x",
                "version": "1",
                "rules": [{"id": "a", "kind": "condition", "check": "measure.x > 1", "on_false": "hold"}],
            },
            "rules[0] (a)",
            "measure",
        ),
        ({"id": "x", "version": "1", "rules": [{"id": "a", "kind": "shout"}]}, "rules[0].kind (a)", "shout"),
        ({"id": "x", "rules": []}, "(top level)", "version"),
    ],
)
def test_a_malformed_checklist_is_an_error_naming_the_line(
    data: dict[str, Any], line: str, reason: str
) -> None:
    with pytest.raises(ChecklistError) as err:
        load_rules(data)
    assert err.value.line.startswith(line.split(" ")[0]) and line.split(" ")[0] in str(err.value)
    assert reason in str(err.value)


def test_the_fixed_checklist_is_data_and_is_validated() -> None:
    assert [o.key for o in FIXED_CHECKLIST] == [
        "fixed:tool",
        "fixed:action_name",
        "fixed:intended_change",
        "fixed:timing",
    ]
    broken = {
        **FIXED_CHECKLIST_DATA,
        "obligations": [{**FIXED_CHECKLIST_DATA["obligations"][0], "sources": []}],
    }
    with pytest.raises(ChecklistError):
        load_fixed_checklist(broken)


def test_a_user_answer_from_an_untrusted_source_is_not_a_rule_bypass(alice: Said) -> None:
    # the rule reads the settled value, never the candidate: an unverified 50 cannot satisfy "<= 100"
    req = request(
        alice,
        {
            "amount": (50, None),
            "from_account": ("DE11", "DE11"),
            "to_account": ("DE02120300000000202051", "DE02 1203 0000 0000 2020 51"),
        },
    )
    record = run_with(rules(LIMIT), req)
    assert record.slot("user:alice_limit").status == "unknown"
    assert record.verdict == "ask"
