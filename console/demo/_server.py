"""What the demo servers share: a tool table, argument validation, and the command line.

The servers use the SDK's low-level ``Server`` rather than ``MCPServer``: the demo needs exact, hand-written
input schemas (``oneOf`` branches, ``exclusiveMinimum``), which schemas generated from signatures do not give.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

Handler = Callable[[dict[str, Any]], dict[str, Any]]

# Side-car files kept in the repository (one per server): the demo's and real catalogs'.
SIDECARS = Path(__file__).resolve().parents[2] / "sidecars"


class Refused(Exception):
    """The tool checked the request and did nothing (unknown account, not enough stock)."""


@dataclass(frozen=True)
class DemoTool:
    definition: types.Tool
    handler: Handler

    @property
    def read_only(self) -> bool:
        annotations = self.definition.annotations
        return bool(annotations and annotations.read_only_hint)


def tool_definition(spec: Mapping[str, Any], extension: Mapping[str, Any] | None) -> types.Tool:
    """Build a Tool from its wire-shaped (camelCase) spec.

    The SDK's Tool model drops unknown top-level fields, so an ``x-preflight`` key beside ``inputSchema``
    would never reach a client. ``_meta`` is the one free-form place the protocol carries, so the extension
    rides there under the same key; the module-level ``EXTENSIONS`` dict is the side-car form of that data.
    """
    data = dict(spec)
    if extension is not None:
        data["_meta"] = {"x-preflight": extension}
    return types.Tool.model_validate(data)


def demo_tools(
    specs: Mapping[str, Mapping[str, Any]], extensions: Mapping[str, Any], *handlers: Handler
) -> list[DemoTool]:
    """Each handler as the tool of its name, with the side-car extension declared for it, if any."""
    return [DemoTool(tool_definition(specs[h.__name__], extensions.get(h.__name__)), h) for h in handlers]


def _text_result(payload: Mapping[str, Any], *, is_error: bool) -> types.CallToolResult:
    text = json.dumps(payload, sort_keys=True)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=None if is_error else dict(payload),
        is_error=is_error,
    )


def build_server(name: str, tools: Sequence[DemoTool], *, reply_delay_s: float = 0.0) -> Server[Any]:
    # Imported here so that main() can decide how jsonschema loads before it does.
    from jsonschema import Draft202012Validator

    by_name = {tool.definition.name: tool for tool in tools}
    validators = {tool.definition.name: Draft202012Validator(tool.definition.input_schema) for tool in tools}

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool.definition for tool in tools])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            # The spec's protocol error for an unknown tool: the request is refused, nothing ran.
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        arguments = dict(params.arguments or {})
        errors = sorted(validators[params.name].iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            detail = "; ".join(f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors)
            return _text_result({"error": "invalid_arguments", "detail": detail}, is_error=True)
        try:
            outcome = tool.handler(arguments)
        except Refused as refusal:
            return _text_result({"error": "refused", "detail": str(refusal)}, is_error=True)
        if reply_delay_s and not tool.read_only:
            # After acting, before answering: the side effect has happened but the caller may give up waiting,
            # which is exactly the outcome_unknown case the execution gate must not retry.
            await anyio.sleep(reply_delay_s)
        return _text_result(outcome, is_error=False)

    def input_schema(tool_name: str) -> Mapping[str, Any] | None:
        tool = by_name.get(tool_name)
        return None if tool is None else tool.definition.input_schema

    return Server(
        name,
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=input_schema,
    )


def main(name: str, make_tools: Callable[[], Sequence[DemoTool]], argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m console.demo.{name}", description=f"Demo MCP server '{name}'."
    )
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--reply-delay-s",
        type=float,
        default=0.0,
        help="wait this long after a state-changing tool acted before answering (simulates a lost reply)",
    )
    options = parser.parse_args(argv)
    # rfc3987_syntax compiles an IRI grammar when jsonschema imports it: wasted on a server spawned per call
    # whose validators assert no formats. Only in this process: main() is never an in-process import.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    server = build_server(name, make_tools(), reply_delay_s=options.reply_delay_s)

    if options.transport == "stdio":

        async def serve_stdio() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

        anyio.run(serve_stdio)
        return

    import uvicorn

    app = server.streamable_http_app(host=options.host)
    uvicorn.run(app, host=options.host, port=options.port, log_level="warning")
