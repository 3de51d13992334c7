"""How Preflight reaches the outside world: tool calls (python, MCP over stdio or streamable HTTP), lookups.

Everything here is synchronous on purpose: callers are Django views and Celery tasks. The MCP SDK is async, so
each call runs its own short event loop (``anyio.run``), in a helper thread when the caller already has one.
HTTP lookups are the exception to one-thread-per-call: they all run on one event loop thread per process with
one pooled httpx client (`transport._HttpLookups`), since a batch starts ten at once.

Failure classes, the distinction the execution gate records:

- ``ToolCallFailed``: nothing reached the tool, or the tool said no before acting. Recorded as ``failed``.
- ``OutcomeUnknown``: the request may have been acted on (timeout, lost connection, crash after sending).
  The side effect may have happened, so nobody may retry it blindly.
- ``MeasureFailed``: a lookup produced no trustworthy value. Always an ``error`` finding (fail closed).

Connectors (plain data, stored with the server's catalog entry; `checked_connector` is the one shape)::

    {"kind": "python"}
    {"kind": "mcp_stdio", "command": ["python", "-m", "console.demo.bank"]}
    {"kind": "mcp_http", "url": "http://127.0.0.1:8765/mcp"}

A stdio command must equal a PREFLIGHT_MCP_STDIO_ALLOW line; its environment and directory are the
deployment's, never a connector's. An HTTP URL's host must be in PREFLIGHT_HTTP_ALLOW (console/egress.py).
Either MCP kind may carry ``connect_timeout_s``; otherwise connecting gets ``max(timeout_s, 10 s)``, because
spawning a server process has a fixed cost that says nothing about how long the tool itself may take. Any
kind may carry ``timeout_s`` (the tool call's).
"""

from console.connectors.errors import MeasureFailed, OutcomeUnknown, ToolCallFailed
from console.connectors.measures import (
    StartedMeasure,
    register_lookup,
    start_measure,
)
from console.connectors.tools import (
    CONNECT_TIMEOUT_FLOOR_S,
    call_tool,
    checked_connector,
    list_tools,
    register_tool,
)

__all__ = [
    "CONNECT_TIMEOUT_FLOOR_S",
    "MeasureFailed",
    "OutcomeUnknown",
    "StartedMeasure",
    "ToolCallFailed",
    "call_tool",
    "checked_connector",
    "list_tools",
    "register_lookup",
    "register_tool",
    "start_measure",
]
