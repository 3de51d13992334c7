"""Demo shop: ``place_order`` (state-changing, a ``oneOf`` of payment branches) and ``get_stock`` (read-only).

Run: ``python -m console.demo.shop --transport stdio``, or ``--transport http --port 8766`` (path ``/mcp``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.demo._server import SIDECARS, DemoTool, Refused, demo_tools, main
from preflight.sidecars import load_sidecar

SERVER = "shop"

OPENING_STOCK: dict[str, int] = {"MUG-001": 25, "TSHIRT-M": 5, "POSTER-A2": 0}

# The side-car is data (sidecars/shop.json); the demo server also serves it in each Tool's _meta.
EXTENSIONS: dict[str, Any] = dict(load_sidecar(SIDECARS / "shop.json").tools)

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "place_order": {
        "name": "place_order",
        "description": (
            "Order a product. Pay by card (card_token) or on invoice (invoice_ref), never both.\n"
            "[confirm] The shipping address must be confirmed by the buyer."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "sku": {"type": "string"},
                "quantity": {"type": "integer", "minimum": 1},
                "shipping": {
                    "type": "object",
                    "properties": {
                        "address": {"type": "string"},
                        "city": {"type": "string"},
                        "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
                    },
                    "required": ["address", "city", "country"],
                    "additionalProperties": False,
                },
                "card_token": {"type": "string"},
                "invoice_ref": {"type": "string"},
            },
            "required": ["sku", "quantity", "shipping"],
            "oneOf": [{"required": ["card_token"]}, {"required": ["invoice_ref"]}],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "sku": {"type": "string"},
                "quantity": {"type": "integer"},
                "payment": {"enum": ["card", "invoice"]},
                "status": {"type": "string"},
            },
            "required": ["order_id", "sku", "quantity", "payment", "status"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    },
    "get_stock": {
        "name": "get_stock",
        "description": "Units of one product in stock.",
        "inputSchema": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "in_stock": {"type": "integer"}},
            "required": ["sku", "in_stock"],
        },
        "annotations": {"readOnlyHint": True, "idempotentHint": True},
    },
}


def make_tools() -> Sequence[DemoTool]:
    """Fresh tools over fresh state: every server process (and every test) starts from OPENING_STOCK."""
    stock = dict(OPENING_STOCK)
    orders: list[dict[str, Any]] = []

    def get_stock(arguments: dict[str, Any]) -> dict[str, Any]:
        sku = arguments["sku"]
        if sku not in stock:
            raise Refused(f"unknown sku {sku}")
        return {"sku": sku, "in_stock": stock[sku]}

    def place_order(arguments: dict[str, Any]) -> dict[str, Any]:
        sku, quantity = arguments["sku"], arguments["quantity"]
        if sku not in stock:
            raise Refused(f"unknown sku {sku}")
        if quantity > stock[sku]:
            raise Refused(f"only {stock[sku]} of {sku} in stock")
        stock[sku] -= quantity
        record = {
            "order_id": f"O{len(orders) + 1:04d}",
            "sku": sku,
            "quantity": quantity,
            "payment": "card" if "card_token" in arguments else "invoice",
            "status": "placed",
        }
        orders.append(record)
        return record

    return demo_tools(TOOL_SPECS, EXTENSIONS, place_order, get_stock)


if __name__ == "__main__":
    main(SERVER, make_tools)
