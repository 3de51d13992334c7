"""Approvals: a person's yes to one exact {slot, value} pair.

An approval stores the digest of the value, not the value, so it cannot be stretched to cover anything
else: change one character of the value and the approval no longer holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from preflight.canonical import digest
from preflight.record import SlotApproval

__all__ = ["Approval", "ApprovalState", "approval_state", "approve", "slot_approval", "value_digest"]

ApprovalState = Literal["approved", "void", "none"]


def value_digest(value: object) -> str:
    """The digest an approval binds to. TypeError if the value is not JSON."""
    return digest(value)


@dataclass(frozen=True, slots=True)
class Approval:
    slot_key: str
    value_digest: str
    approver: str
    approved_at: datetime


def approve(slot_key: str, value: object, *, approver: str, at: datetime) -> Approval:
    # A naive time in an audit record is ambiguous by hours; refuse it where it is made.
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("approval time must be timezone-aware")
    return Approval(slot_key=slot_key, value_digest=value_digest(value), approver=approver, approved_at=at)


def approval_state(
    approvals: Iterable[Approval], slot_key: str, value: object, *, excluding: str | None = None
) -> ApprovalState:
    """`approved` if an approval holds for this exact value; `void` if the slot was approved but for a
    different value (the console shows the old -> new change); `none` if it was never approved.
    `excluding`: an approver whose approval does not count (four eyes: the one who edited the value)."""
    current = value_digest(value)
    seen_key = False
    for approval in approvals:
        if approval.slot_key != slot_key or approval.approver == excluding:
            continue
        if approval.value_digest == current:
            return "approved"
        seen_key = True
    return "void" if seen_key else "none"


def slot_approval(state: ApprovalState) -> SlotApproval:
    """What a slot that needs an approval records of the approvals held: with none, one is `required`."""
    return "required" if state == "none" else state
