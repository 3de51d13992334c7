"""Rules: checked with the line of each error, saved as new versions, in force at the next preflight."""

from __future__ import annotations

import json
from typing import Any

import pytest
from console_helpers import TRANSFER, transfer_request
from operator_support import user_with

from console import models
from console.errors import Conflict, Unprocessable
from console.selectors.rules import checklist_parts, rule_slots
from console.services.catalog import (
    catalog_import,
)
from console.services.executions import execution_create
from console.services.rules import check_rules_text, json_path_line, next_version, path_steps, ruleset_save
from preflight.canonical import digest

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Any:
    return user_with("olga", "operator")


# ---- rules ---------------------------------------------------------------------------------------------

RULES: dict[str, Any] = {
    "id": "org",
    "version": "1",
    "rules": [
        {
            "id": "small_transfers",
            "kind": "condition",
            "tools": ["bank/transfer"],
            "check": "arg.amount <= 500",
            "on_false": "hold",
        }
    ],
}


def _text(data: Any) -> str:
    return json.dumps(data, indent=2)


def test_valid_rules_check_clean() -> None:
    checked = check_rules_text(_text(RULES))
    assert checked.ok and checked.data == RULES


def test_a_json_syntax_error_names_its_line() -> None:
    text = _text(RULES).replace('"version": "1",', '"version": "1"')
    checked = check_rules_text(text)
    assert checked.problem is not None
    assert checked.problem.line == 4  # where the parser noticed the missing comma
    assert "not JSON" in checked.problem.message


def test_a_schema_error_names_the_rule_and_its_line() -> None:
    data = json.loads(json.dumps(RULES))
    data["rules"].append(
        {"id": "second", "kind": "condition", "check": "arg.amount > 0", "on_false": "explode"}
    )
    text = _text(data)

    checked = check_rules_text(text)

    assert checked.problem is not None
    assert checked.problem.path == "rules[1].on_false (second)"
    lines = text.splitlines()
    assert '"on_false": "explode"' in lines[checked.problem.line - 1]  # type: ignore[operator]


def test_an_expression_error_names_the_rule_and_its_line() -> None:
    data = json.loads(json.dumps(RULES))
    data["rules"][0]["check"] = "arg.amount <= "
    text = _text(data)

    checked = check_rules_text(text)

    assert checked.problem is not None
    assert checked.problem.path == "rules[0] (small_transfers).check"
    assert '"check": "arg.amount <= "' in text.splitlines()[checked.problem.line - 1]  # type: ignore[operator]


def test_a_duplicate_rule_id_names_the_second_rule() -> None:
    data = json.loads(json.dumps(RULES))
    data["rules"].append(dict(data["rules"][0]))
    text = _text(data)

    checked = check_rules_text(text)

    assert checked.problem is not None
    assert checked.problem.message == "rule id is used twice"
    assert checked.problem.path == "rules[1] (small_transfers)"
    assert checked.problem.line == text.splitlines().index("    {", 10) + 1


def test_a_missing_top_level_field_points_at_the_object() -> None:
    checked = check_rules_text('{\n  "id": "org",\n  "rules": []\n}')
    assert checked.problem is not None
    assert "version" in checked.problem.message
    assert checked.problem.line == 1


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("(top level)", []),
        ("rules", ["rules"]),
        ("rules[2].check", ["rules", 2, "check"]),
        ("rules[2] (max_amount).check", ["rules", 2, "check"]),
        ("rules[0].tools[1] (x)", ["rules", 0, "tools", 1]),
    ],
)
def test_engine_paths_are_read_back_as_steps(path: str, steps: list[Any]) -> None:
    assert path_steps(path) == steps


def test_json_path_line_finds_nested_values_and_gives_up_politely() -> None:
    text = '{\n  "a": [1,\n    {"b": {"c": 2}},\n    [3]\n  ],\n  "d": "x"\n}'
    assert json_path_line(text, []) == 1
    assert json_path_line(text, ["a", 1, "b", "c"]) == 3
    assert json_path_line(text, ["a", 2, 0]) == 4
    assert json_path_line(text, ["d"]) == 6
    assert json_path_line(text, ["a", 5]) is None
    assert json_path_line(text, ["zz"]) is None
    assert json_path_line("{broken", ["a"]) is None


def test_saving_rules_makes_a_new_active_version(operator: Any) -> None:
    first = ruleset_save(text=_text(RULES), user=operator)
    second = ruleset_save(text=_text({**RULES, "version": "2"}), user=operator)

    first.refresh_from_db()
    assert (first.active, second.active) == (False, True)
    assert models.AuditEvent.objects.filter(kind="ruleset", body__actor="user:olga").count() == 2


def test_a_version_is_never_reused_for_other_rules(operator: Any) -> None:
    ruleset_save(text=_text(RULES), user=operator)
    changed = json.loads(json.dumps(RULES))
    changed["rules"][0]["check"] = "arg.amount <= 100"
    text = _text(changed)

    with pytest.raises(
        Conflict,
        match=r"line 3, version: org@1 already exists with other rules; use a new version \(e\.g\. 2\)",
    ):
        ruleset_save(text=text, user=operator)
    # Saving the same rules again is harmless.
    ruleset_save(text=_text(RULES), user=operator)


def test_invalid_rules_are_not_saved_and_the_error_names_the_line(operator: Any) -> None:
    data = json.loads(json.dumps(RULES))
    data["rules"][0]["check"] = "measure.balance > 0"
    with pytest.raises(Unprocessable, match=r"line \d+, rules\[0\] \(small_transfers\): user rules may read"):
        ruleset_save(text=_text(data), user=operator)
    assert not models.RuleSet.objects.exists()


def test_a_rule_change_takes_effect_on_the_next_preflight_and_the_record_names_it(operator: Any) -> None:
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=False, actor="test")
    before = execution_create(body=transfer_request(amount=900), token=None, actor="test")

    saved = ruleset_save(text=_text(RULES), user=operator)
    after = execution_create(body=transfer_request(amount=900), token=None, actor="test")

    old = models.PreflightRecord.objects.get(execution=before)
    new = models.PreflightRecord.objects.get(execution=after)
    stamp = f"org@1#{digest(saved.data)[7:19]}"
    assert stamp not in old.checklist_version
    assert checklist_parts(new.checklist_version)["rules"] == [stamp]
    assert rule_slots(new.record) == ["user:small_transfers"]
    assert rule_slots(old.record) == []


@pytest.mark.parametrize(
    ("version", "bumped"), [("1", "2"), ("2024-01", "2024-02"), ("v1.9", "v1.10"), ("x", "x.1")]
)
def test_next_version_suggestions(version: str, bumped: str) -> None:
    assert next_version(version) == bumped
