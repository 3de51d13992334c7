"""Demo bank: ``transfer_funds`` (state-changing, gated) and ``get_balance`` (read-only, a measure source).

Run: ``python -m console.demo.bank --transport stdio``, or ``--transport http --port 8765`` (path ``/mcp``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.demo._server import SIDECARS, DemoTool, Refused, demo_tools, main
from preflight.sidecars import load_sidecar

SERVER = "bank"
CURRENCY = "EUR"

# Well-known example IBANs, so a demo conversation can quote them verbatim.
OPENING_BALANCES: dict[str, float] = {
    "DE89370400440532013000": 2500.00,  # Alice, current account
    "DE75512108001245126199": 10000.00,  # Alice, savings
    "DE02120300000000202051": 300.00,  # Bob
}

# The side-car is data (sidecars/bank.json); the demo server also serves it in each Tool's _meta.
EXTENSIONS: dict[str, Any] = dict(load_sidecar(SIDECARS / "bank.json").tools)

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "transfer_funds": {
        "name": "transfer_funds",
        "description": (
            "Move money between accounts.\n[confirm] The recipient must be confirmed by the account holder."
        ),
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
        "outputSchema": {
            "type": "object",
            "properties": {
                "transfer_id": {"type": "string"},
                "from_account": {"type": "string"},
                "to_account": {"type": "string"},
                "amount": {"type": "number"},
                "currency": {"type": "string"},
                "balance_after": {"type": "number"},
            },
            "required": ["transfer_id", "from_account", "to_account", "amount", "currency", "balance_after"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    },
    "get_balance": {
        "name": "get_balance",
        "description": "Current balance of one account.",
        "inputSchema": {
            "type": "object",
            "properties": {"account": {"type": "string"}},
            "required": ["account"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "account": {"type": "string"},
                "balance": {"type": "number"},
                "currency": {"type": "string"},
            },
            "required": ["account", "balance", "currency"],
        },
        "annotations": {"readOnlyHint": True, "idempotentHint": True},
    },
}


def make_tools() -> Sequence[DemoTool]:
    """Fresh tools over fresh state: every server process (and every test) starts from OPENING_BALANCES."""
    balances = dict(OPENING_BALANCES)
    transfers: list[dict[str, Any]] = []

    def get_balance(arguments: dict[str, Any]) -> dict[str, Any]:
        account = arguments["account"]
        if account not in balances:
            raise Refused(f"unknown account {account}")
        return {"account": account, "balance": balances[account], "currency": CURRENCY}

    def transfer_funds(arguments: dict[str, Any]) -> dict[str, Any]:
        source, target, amount = arguments["from_account"], arguments["to_account"], arguments["amount"]
        for account in (source, target):
            if account not in balances:
                raise Refused(f"unknown account {account}")
        if source == target:
            raise Refused("from_account and to_account are the same account")
        # Cents, not floats, decide coverage: 0.1 + 0.2 must not overdraw an account by a rounding error.
        if round(amount * 100) > round(balances[source] * 100):
            raise Refused(f"insufficient funds in {source}")
        balances[source] = round(balances[source] - amount, 2)
        balances[target] = round(balances[target] + amount, 2)
        record = {
            "transfer_id": f"T{len(transfers) + 1:04d}",
            "from_account": source,
            "to_account": target,
            "amount": amount,
            "currency": CURRENCY,
            "balance_after": balances[source],
        }
        transfers.append(record)
        return record

    return demo_tools(TOOL_SPECS, EXTENSIONS, transfer_funds, get_balance)


if __name__ == "__main__":
    main(SERVER, make_tools)
