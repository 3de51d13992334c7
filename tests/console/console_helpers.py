"""Catalog data and request builders shared by the console tests."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from rest_framework.test import APIClient

from console.services.tokens import agent_token_create

ALICE_MAIN = "DE89370400440532013000"
ALICE_SAVINGS = "DE75512108001245126199"
BOB = "DE02120300000000202051"

TRANSFER: dict[str, Any] = {
    "name": "transfer",
    "description": "Move money between accounts.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "from_account": {"type": "string"},
            "to_account": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "memo": {"type": "string"},
        },
        "required": ["from_account", "to_account", "amount"],
        "additionalProperties": False,
    },
    "annotations": {"destructiveHint": True},
    "x-preflight": {
        "state_change": "money leaves from_account and arrives at to_account",
        "effects": ["money_moves"],
        "slots": {"from_account": {"sources": ["user_answer", "instruction", "preset"]}},
        "measures": {
            "balance": {"lookup": "bank.balance", "args": {"account": "arg:from_account"}, "max_age_s": 60}
        },
        "conditions": [
            {"id": "balance_covers_amount", "check": "measure.balance >= arg.amount", "on_false": "hold"},
            {"id": "not_to_self", "check": "arg.from_account != arg.to_account", "on_false": "block"},
        ],
    },
}

# Same effect, other server: a second candidate for "money moves".
WIRE: dict[str, Any] = {
    "name": "wire",
    "description": "Send a wire transfer abroad.",
    "inputSchema": {
        "type": "object",
        "properties": {"iban": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["iban", "amount"],
    },
    "x-preflight": {"state_change": "money leaves the account by wire", "effects": ["money_moves"]},
}

GET_BALANCE: dict[str, Any] = {
    "name": "get_balance",
    "description": "Current balance of one account.",
    "inputSchema": {"type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]},
    "annotations": {"readOnlyHint": True},
}


def transfer_v2() -> dict[str, Any]:
    """A changed definition of the same tool: a new contract version."""
    tool = copy.deepcopy(TRANSFER)
    tool["description"] = "Move money between two accounts."
    return tool


def span(text: str, part: str, turn: int = 0) -> dict[str, int]:
    start = text.index(part)
    return {"turn": turn, "start": start, "end": start + len(part)}


def said(
    server: str,
    tool: str,
    text: str,
    values: Mapping[str, Any],
    *,
    action: str,
    principal: str = "user:alice",
    when: str = "now",
) -> dict[str, Any]:
    """A request the user made in one trusted turn of `text`: each value pointed at where the text says it,
    the action at `action`, an immediate timing at `when`."""
    return {
        "server": server,
        "tool": tool,
        "principal": principal,
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": {k: {"value": v, "pointer": span(text, str(v))} for k, v in values.items()},
        "action_name": span(text, action),
        "timing": {"mode": "immediate", "pointer": span(text, when)},
    }


def transfer_request(
    *,
    amount: int = 120,
    from_account: str | None = ALICE_MAIN,
    to_account: str = BOB,
    principal: str = "user:alice",
    when: str = "now",
    timing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A request whose every value the user said, in one trusted turn, each pointed at."""
    source = f" from {from_account}" if from_account else ""
    text = f"Send {amount} EUR{source} to {to_account} {when}."
    candidates: dict[str, Any] = {
        "amount": {"value": amount, "pointer": span(text, str(amount))},
        "to_account": {"value": to_account, "pointer": span(text, to_account)},
    }
    if from_account:
        candidates["from_account"] = {"value": from_account, "pointer": span(text, from_account)}
    return {
        "server": "bank",
        "tool": "transfer",
        "principal": principal,
        "conversation": [{"role": "user", "content": text, "trusted": True}],
        "candidates": candidates,
        "action_name": span(text, "Send"),
        "timing": timing or {"mode": "immediate", "pointer": span(text, when)},
    }


class Downstream:
    """The bank's side of the gate: counts the calls that actually arrived."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.balances = {ALICE_MAIN: 2500.0, ALICE_SAVINGS: 10000.0, BOB: 300.0}
        self.lookups = 0
        self.fail_with: Exception | None = None

    def transfer(self, **arguments: Any) -> dict[str, Any]:
        with self.lock:
            self.calls.append(arguments)
        if self.fail_with is not None:
            raise self.fail_with
        return {"transfer_id": f"t{len(self.calls)}", "amount": arguments["amount"]}

    def balance(self, account: str) -> float:
        with self.lock:
            self.lookups += 1
        return self.balances[account]


class Agent:
    """An API client that sends JSON with a bearer token."""

    def __init__(self, client: APIClient, token: str) -> None:
        self.client = client
        self.token = token

    def post(self, path: str, data: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("format", "json")
        return self.client.post(path, data, **kwargs)

    def get(self, path: str, data: Any = None, **kwargs: Any) -> Any:
        return self.client.get(path, data, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.client.delete(path, **kwargs)


def make_agent() -> Agent:
    _, token = agent_token_create(name="test-agent")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return Agent(client, token)


def make_operator(username: str = "olga") -> Agent:
    """An API client holding an operator token of `username`, a console user with the operator role."""
    from django.contrib.auth.models import Group, User

    from console.services.tokens import operator_token_create

    user, _ = User.objects.get_or_create(username=username)
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    _, token = operator_token_create(name=f"{username}-ci", username=username)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return Agent(client, token)
