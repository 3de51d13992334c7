from __future__ import annotations

from datetime import UTC, datetime

import pytest

from preflight.approvals import Approval, approval_state, approve, value_digest
from preflight.canonical import digest

AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_approve_binds_the_digest_of_the_value_not_the_value() -> None:
    approval = approve("arg.to", {"iban": "DE01", "name": "Alice"}, approver="u:7", at=AT)
    assert approval == Approval(
        slot_key="arg.to",
        value_digest=digest({"iban": "DE01", "name": "Alice"}),
        approver="u:7",
        approved_at=AT,
    )
    assert value_digest(5) == digest(5)


def test_an_approval_holds_for_the_same_value_in_any_key_order() -> None:
    approval = approve("arg.to", {"iban": "DE01", "name": "Alice"}, approver="u:7", at=AT)
    assert approval_state([approval], "arg.to", {"name": "Alice", "iban": "DE01"}) == "approved"


def test_a_changed_value_voids_its_approval() -> None:
    approval = approve("arg.amount", 100, approver="u:7", at=AT)
    assert approval_state([approval], "arg.amount", 100.0) == "approved"
    assert approval_state([approval], "arg.amount", 101) == "void"


def test_an_approval_does_not_hold_for_another_slot_with_the_same_value() -> None:
    approval = approve("arg.amount", 100, approver="u:7", at=AT)
    assert approval_state([approval], "arg.fee", 100) == "none"


def test_approval_state_is_approved_when_any_approval_matches_the_current_value() -> None:
    old = approve("arg.amount", 100, approver="u:7", at=AT)
    new = approve("arg.amount", 120, approver="u:7", at=AT)
    assert approval_state([old, new], "arg.amount", 120) == "approved"
    assert approval_state(iter([new, old]), "arg.amount", 100) == "approved"


def test_approval_state_is_void_for_an_approved_slot_and_none_for_an_unapproved_one() -> None:
    approvals = [approve("arg.amount", 100, approver="u:7", at=AT)]
    assert approval_state(approvals, "arg.amount", 99) == "void"
    assert approval_state(approvals, "arg.to", "alice") == "none"
    assert approval_state([], "arg.amount", 100) == "none"


def test_approvals_are_immutable() -> None:
    approval = approve("arg.amount", 100, approver="u:7", at=AT)
    with pytest.raises(AttributeError):
        approval.value_digest = digest(101)  # type: ignore[misc]


def test_approving_a_non_json_value_raises_type_error() -> None:
    with pytest.raises(TypeError):
        approve("arg.amount", float("nan"), approver="u:7", at=AT)


def test_an_approval_time_without_a_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        approve("arg.amount", 100, approver="u:7", at=datetime(2025, 1, 2))
