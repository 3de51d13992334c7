"""Builders for engine tests: a bank tool like DESIGN.md's, and requests grounded in a user's words."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from preflight import Evidence, ExecutionRequest, compile_plan, contract_from_mcp, preflight
from preflight.record import Record
from preflight.request import parse_request

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

TRANSFER: dict[str, Any] = {
    "name": "transfer_funds",
    "description": "Move money between accounts.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "memo": {"type": "string", "maxLength": 20},
        },
        "required": ["from_account", "to_account", "amount"],
    },
    "x-preflight": {
        "state_change": "money leaves from_account and arrives at to_account",
        "slots": {
            "from_account": {"sources": ["user_answer", "instruction", "preset"]},
            "to_account": {"sources": ["user_answer", "instruction"], "confirm": True},
        },
        "measures": {
            "balance": {"lookup": "bank.balance", "args": {"account": "arg:from_account"}, "max_age_s": 60}
        },
        "conditions": [
            {"id": "balance_covers_amount", "check": "measure.balance >= arg.amount", "on_false": "hold"},
            {"id": "not_to_self", "check": "arg.from_account != arg.to_account", "on_false": "block"},
        ],
        "extra_approval": [{"id": "large_transfer", "when": "arg.amount > 1000"}],
        "notices": ["Transfers cannot be recalled."],
    },
}


def tool(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(TRANSFER)
    out.update(changes)
    return out


class Said:
    """A user's turn, and pointers into it by the words they cover."""

    def __init__(self, text: str, *, role: str = "user", trusted: bool = True) -> None:
        self.text = text
        self.turn = {"role": role, "content": text, "trusted": trusted}

    def at(self, words: str, turn: int = 0) -> dict[str, int]:
        start = self.text.index(words)
        return {"turn": turn, "start": start, "end": start + len(words)}


def request(
    said: Said,
    candidates: dict[str, tuple[Any, str | None]],
    *,
    extra_turns: tuple[dict[str, Any], ...] = (),
    timing: dict[str, Any] | None = None,
    action: str | None = "Send",
    **more: Any,
) -> ExecutionRequest:
    body: dict[str, Any] = {
        "principal": "user:alice",
        "conversation": [said.turn, *extra_turns],
        "candidates": {
            name: {"value": value, **({"pointer": said.at(words)} if words is not None else {})}
            for name, (value, words) in candidates.items()
        },
        **more,
    }
    if action is not None:
        body["action_name"] = said.at(action)
    body["timing"] = timing if timing is not None else {"mode": "immediate", "pointer": said.at("now")}
    return parse_request(body)


def run(
    definition: dict[str, Any], req: ExecutionRequest, evidence: Evidence | None = None, **kw: Any
) -> Record:
    plan = compile_plan(contract_from_mcp("bank", definition, **kw))
    return preflight(plan, req, evidence or Evidence(now=NOW))
