"""Confirmations and consent: the requesting user's own yes (or no), bound to what they were shown.

A confirmation is the user's answer to one `{slot, value}` pair; consent is their answer to the whole call.
Either is stored as an answer whose value names the digest it was given for, so it cannot be stretched to
cover anything else: the value (or any part of the payload) changes, and the answer no longer holds, yes or
no. An approver's yes is an approval (`preflight.approvals`), never one of these.

Slot keys: ``confirm:<slot key>`` (``confirm:arg:to_account``) and ``consent:call``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .approvals import value_digest
from .canonical import digest

__all__ = [
    "CONFIRM_PREFIX",
    "CONSENT_KEY",
    "AnswerState",
    "bound_answer",
    "bound_state",
    "confirmation_answer",
    "consent_answer",
    "is_user_yes_key",
]

CONFIRM_PREFIX = "confirm:"
CONSENT_KEY = "consent:call"

# `yes` / `no`: an answer for exactly this digest; `void`: an answer for something else (an earlier value);
# `none`: no answer.
AnswerState = Literal["yes", "no", "void", "none"]


def is_user_yes_key(key: str) -> bool:
    """Keys only the requesting user answers: an approver's edit of one is refused, never counted."""
    return key.startswith(CONFIRM_PREFIX) or key == CONSENT_KEY


def bound_answer(yes: bool, bound_digest: str) -> dict[str, Any]:
    """The stored value of a confirmation or consent answer."""
    return {"yes": yes, "digest": bound_digest}


def confirmation_answer(value: object, *, yes: bool = True) -> dict[str, Any]:
    """The answer value for `confirm:<slot>` given to this exact value (embedded use and tests)."""
    return bound_answer(yes, value_digest(value))


def consent_answer(payload: Mapping[str, Any], *, yes: bool = True) -> dict[str, Any]:
    """The answer value for `consent:call` given to this exact payload (embedded use and tests)."""
    return bound_answer(yes, digest(payload))


def bound_state(answer_value: object, current_digest: str) -> AnswerState:
    """What a stored confirmation/consent answer says about `current_digest`. Fails closed: anything but
    the stored shape is `void` (it is asked again), never a yes."""
    if not isinstance(answer_value, Mapping):
        return "void"
    yes, bound = answer_value.get("yes"), answer_value.get("digest")
    if not isinstance(yes, bool) or not isinstance(bound, str) or set(answer_value) != {"yes", "digest"}:
        return "void"
    if bound != current_digest:
        return "void"
    return "yes" if yes else "no"
