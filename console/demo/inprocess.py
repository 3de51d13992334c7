"""The demo bank and shop as in-process Python tools and lookups, for embedded mode (no server process).

``register()`` registers, for ``{"kind": "python"}`` connectors and measures:

- tools ``bank/transfer_funds``, ``bank/get_balance``, ``shop/place_order``, ``shop/get_stock``;
- lookups ``bank.balance`` (account -> number) and ``shop.stock`` (sku -> integer), the names the demo
  ``x-preflight`` extensions use.

A stdio server starts from its opening state on every call (one process per call), so a transfer could never
show up in a later balance. Here one state lives as long as the process, which is what a demo needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from console import connectors
from console.demo import bank, shop
from console.demo._server import DemoTool, Refused

# The development server answers requests on several threads; the handlers mutate plain dicts.
_lock = threading.Lock()


def _python_tool(demo_tool: DemoTool) -> Callable[..., Any]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(demo_tool.definition.input_schema)

    def run(**arguments: Any) -> dict[str, Any]:
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            raise connectors.ToolCallFailed("; ".join(e.message for e in errors))
        with _lock:
            try:
                return demo_tool.handler(arguments)
            except Refused as refusal:
                raise connectors.ToolCallFailed(str(refusal)) from refusal

    return run


_bank = {tool.definition.name: tool for tool in bank.make_tools()}
_shop = {tool.definition.name: tool for tool in shop.make_tools()}


def bank_balance(account: str) -> float:
    with _lock:
        return float(_bank["get_balance"].handler({"account": account})["balance"])


def shop_stock(sku: str) -> int:
    with _lock:
        return int(_shop["get_stock"].handler({"sku": sku})["in_stock"])


def register() -> None:
    """Point the registries at this process's demo state. Idempotent; call again to win back a name
    (``bank.balance``) that something else registered meanwhile."""
    for server, tools in ((bank.SERVER, _bank), (shop.SERVER, _shop)):
        for name, tool in tools.items():
            connectors.register_tool(server, name)(_python_tool(tool))
    connectors.register_lookup("bank.balance")(bank_balance)
    connectors.register_lookup("shop.stock")(shop_stock)


def tool_definitions(server: str) -> list[dict[str, Any]]:
    """The ``tools/list`` answer the MCP server would give, for catalog import without a server process."""
    tools = {bank.SERVER: _bank, shop.SERVER: _shop}[server]
    return [
        tool.definition.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools.values()
    ]
