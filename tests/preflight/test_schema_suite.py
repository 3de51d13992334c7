"""The JSON-Schema-Test-Suite (draft 2020-12) as an oracle: every object instance, as a grounded call.

`PREFLIGHT_SCHEMA_SUITE` may name another directory of suite files (a held-out set) to run instead.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from builders import NOW
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from schema_suite import SUITE, Case, cases, json_equal, of_kind, run_case

from preflight import Evidence, compile_plan, contract_from_mcp, preflight
from preflight.record import Record
from preflight.request import parse_request

DIRECTORY = Path(os.environ.get("PREFLIGHT_SCHEMA_SUITE") or SUITE)
GOAL = 0.90


@cache
def outcomes() -> tuple[tuple[Case, Record], ...]:
    out = []
    for case in cases(DIRECTORY):
        if not of_kind(case.instance):
            continue
        record = run_case(case)
        if record is not None:
            out.append((case, record))
    return tuple(out)


@cache
def _drops_undeclared() -> bool:
    """Issue 13 makes a verified value for an argument the schema does not list a slot of the payload; until
    it lands the engine leaves such a value out, and an instance with one cannot run as stated."""
    tool = {"name": "t", "inputSchema": {"type": "object"}, "x-preflight": {"state_change": "x"}}
    body = {
        "principal": "user:alice",
        "conversation": [{"role": "user", "content": "Do it now ; 7", "trusted": True}],
        "candidates": {"n": {"value": 7, "pointer": {"turn": 0, "start": 12, "end": 13}}},
        "action_name": {"turn": 0, "start": 0, "end": 5},
        "timing": {"mode": "immediate", "pointer": {"turn": 0, "start": 6, "end": 9}},
    }
    record = preflight(compile_plan(contract_from_mcp("s", tool)), parse_request(body), Evidence(now=NOW))
    return record.verdict == "execute" and record.payload == {}


WAITS_FOR_13 = pytest.mark.xfail(
    condition=_drops_undeclared(),
    reason="issue 13: values for arguments the schema does not list are left out of the payload",
    strict=True,
)


def test_the_suite_offers_instances_of_both_verdicts() -> None:
    verdicts = Counter(case.valid for case, _ in outcomes())
    assert verdicts[True] >= 50 and verdicts[False] >= 50, verdicts


def test_no_executed_payload_is_refused_by_the_schema_or_holds_a_value_the_user_did_not_state() -> None:
    wrong = []
    for case, record in outcomes():
        if record.verdict != "execute":
            continue
        payload = record.payload or {}
        cls = validator_for(case.schema, default=Draft202012Validator)
        if not cls(case.schema).is_valid(payload):
            wrong.append(f"{case.name}: ran {payload}, which the schema refuses")
        if not json_equal(payload, _within(case.instance, payload)):
            wrong.append(f"{case.name}: ran {payload}, the user stated {case.instance}")
    assert not wrong, "\n".join(wrong)


def _within(stated: Any, ran: Any) -> Any:
    """The part of what the user stated that the payload has keys for (recursively)."""
    if isinstance(stated, dict) and isinstance(ran, dict):
        return {k: _within(v, ran[k]) for k, v in stated.items() if k in ran}
    return stated


@WAITS_FOR_13
def test_no_instance_the_suite_calls_invalid_executes_and_none_runs_other_than_stated() -> None:
    wrong = []
    for case, record in outcomes():
        if record.verdict != "execute":
            continue
        if not case.valid:
            wrong.append(f"{case.name}: executed an instance the suite calls invalid: {case.instance}")
        elif not json_equal(record.payload, case.instance):
            wrong.append(f"{case.name}: ran {record.payload}, the user stated {case.instance}")
    assert not wrong, "\n".join(wrong)


def _share(capsys: pytest.CaptureFixture[str], record_property: Any) -> float:
    valid = [(c, r) for c, r in outcomes() if c.valid]
    ran = [c for c, r in valid if r.verdict == "execute" and json_equal(r.payload, c.instance)]
    share = len(ran) / len(valid)
    invalid = [(c, r) for c, r in outcomes() if not c.valid]
    executed = sum(r.verdict == "execute" for _, r in invalid)
    with capsys.disabled():
        print(
            f"\nJSON-Schema-Test-Suite ({DIRECTORY.name}): {len(ran)}/{len(valid)} valid object instances "
            f"reach execute as stated ({100 * share:.1f}%); {executed} of {len(invalid)} invalid ones "
            "executed, with what the schema refuses left out (must be 0)"
        )
        by_file = Counter(c.file for c, r in valid if c not in ran)
        for file, n in by_file.most_common():
            print(f"  not executed: {n:>3} {file}")
    record_property("suite_share", f"{len(ran)}/{len(valid)}")
    return share


def test_the_share_of_valid_instances_reaching_execute_as_stated_is_reported(
    capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    assert 0 < _share(capsys, record_property) <= 1


@WAITS_FOR_13
def test_at_least_nine_in_ten_valid_instances_reach_execute_as_stated(
    capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    assert _share(capsys, record_property) >= GOAL
