"""Tool calls and catalog listings: registered Python tools, and MCP servers over stdio or streamable HTTP."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import sys
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, AsyncExitStack, nullcontext
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
from django.conf import settings

from console import egress
from console.connectors.errors import OutcomeUnknown, ToolCallFailed
from console.connectors.transport import (
    allow_listed_http_client,
    as_json,
    check_timeout,
    run_async,
    run_with_deadline,
)
from preflight.canonical import canonical_json

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_FLOOR_S = 10.0
# What of a tool's answer is kept (recorded, handed to the agent): a server must not fill the database or the
# worker's memory. An answer past it is recorded by size and digest; the call did run.
MAX_TOOL_RESULT_BYTES = 1 << 20
# A catalog is read by people and digested per tool: a listing past this is a server misbehaving.
MAX_TOOLS_LIST_BYTES = 8 << 20
# The SDK's own read timeout answers first; this backstop only catches a transport that blocks before it.
CALL_GRACE_S = 1.0
_LIST_PAGE_CAP = 100
_STDERR_TAIL_CHARS = 2000


_TOOLS: dict[tuple[str, str], Callable[..., Any]] = {}


def register_tool[F: Callable[..., Any]](server: str, tool: str) -> Callable[[F], F]:
    """Register a Python callable as ``server``/``tool`` for ``{"kind": "python"}`` connectors.

    It is called with the arguments as keyword arguments. To refuse without acting it raises
    ``ToolCallFailed``; any other exception means it may have acted part-way and becomes ``OutcomeUnknown``.
    """

    def decorator(fn: F) -> F:
        _TOOLS[(server, tool)] = fn
        return fn

    return decorator


# --------------------------------------------------------------------------------------------- tool calls


def call_tool(
    connector: Mapping[str, Any],
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    timeout_s: float,
    expected: Mapping[str, Any] | None = None,
) -> Any:
    """Run one tool call, once. Returns a JSON-able result; never retries.

    `expected` is the tool definition the call was preflighted against (the contract's): an MCP server
    whose live listing of the tool says otherwise (description, inputSchema, annotations) is refused before
    anything is sent, since the arguments were checked against a contract the server no longer offers.

    MCP results come back as ``{"content": [...], "structuredContent": ... | None, "isError": False}``;
    an ``isError`` result raises ``ToolCallFailed`` carrying that result.
    """
    check_timeout(timeout_s, ToolCallFailed)
    kind = connector.get("kind")
    if kind == "python":
        return _call_python_tool(server, tool, arguments, timeout_s)
    if kind in ("mcp_stdio", "mcp_http"):
        result = run_async(
            mcp_call,
            connector,
            tool,
            dict(arguments),
            connect_timeout(connector, timeout_s),
            timeout_s,
            False,
            expected,
        )
        result = _bounded_result(result)
        if result["isError"]:
            raise ToolCallFailed(f"{server}/{tool} reported an error: {first_text(result)}", result=result)
        return result
    raise ToolCallFailed(f"unknown connector kind {kind!r}")


def result_bytes(result: Any) -> bytes:
    return json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _bounded_result(result: dict[str, Any]) -> dict[str, Any]:
    raw = result_bytes(result)
    if len(raw) <= MAX_TOOL_RESULT_BYTES:
        return result
    note = (
        f"the server's answer was {len(raw)} bytes, more than the {MAX_TOOL_RESULT_BYTES} bytes kept;"
        f" its sha256 is {hashlib.sha256(raw).hexdigest()}"
    )
    text = {"type": "text", "text": note}
    return {"content": [text], "structuredContent": None, "isError": result["isError"]}


def list_tools(connector: Mapping[str, Any], *, timeout_s: float) -> list[dict[str, Any]]:
    """``tools/list`` of an MCP server, every page, as camelCase MCP Tool dicts (for catalog import).

    Connecting and listing together must finish within ``timeout_s``. Any failure raises ``ToolCallFailed``
    (listing acts on nothing, so there is no unknown outcome to report).
    """
    check_timeout(timeout_s, ToolCallFailed)
    if connector.get("kind") not in ("mcp_stdio", "mcp_http"):
        raise ToolCallFailed(f"connector kind {connector.get('kind')!r} cannot list tools")
    return run_async(_mcp_list, connector, timeout_s)


def _call_python_tool(server: str, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> Any:
    fn = _TOOLS.get((server, tool))
    if fn is None:
        raise ToolCallFailed(f"no python tool registered as {server}/{tool}")
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as exc:
        # Binding fails before the body runs, so the tool provably did nothing.
        raise ToolCallFailed(f"{server}/{tool} does not accept these arguments: {exc}") from exc
    outcome = run_with_deadline(fn, dict(arguments), timeout_s)
    if outcome.timed_out:
        raise OutcomeUnknown(f"{server}/{tool} did not return within {timeout_s}s; it may still be acting")
    if isinstance(outcome.error, ToolCallFailed | OutcomeUnknown):
        raise outcome.error
    if outcome.error is not None:
        raise OutcomeUnknown(
            f"{server}/{tool} raised {type(outcome.error).__name__}: {outcome.error}; it may have acted"
        ) from outcome.error
    try:
        return as_json(outcome.value)
    except ValueError as exc:
        raise OutcomeUnknown(f"{server}/{tool} returned a value that is not JSON: {exc}") from exc


# --------------------------------------------------------------------------------------------- MCP

# The sent/not-sent boundary (ToolCallFailed vs OutcomeUnknown). Connecting and tools/list come before the
# tools/call request exists, so a failure there, a timeout included, is ToolCallFailed: the tool cannot have
# run (listing first also refuses "no such tool" before anything is sent; 2026-07-28 servers expect it).
# Once session.call_tool() is entered the SDK does not report whether the bytes left, so every failure
# without an answer is OutcomeUnknown, unless the server answered with a JSON-RPC error that can only mean
# "refused before running" (classify_mcp_error). INTERNAL_ERROR (a handler raised mid-way) and the codes the
# client synthesizes from HTTP trouble after the server may have acted (PARSE_ERROR, INVALID_REQUEST) stay
# unknown.


def connect_timeout(connector: Mapping[str, Any], timeout_s: float) -> float:
    explicit = connector.get("connect_timeout_s")
    if explicit is not None:
        check_timeout(explicit, ToolCallFailed)
        return float(explicit)
    return max(float(timeout_s), CONNECT_TIMEOUT_FLOOR_S)


# The keys each connector kind may carry. Anything else (env, cwd, args, headers, target) is refused, never
# ignored: a field that is silently dropped is one an attacker learns to smuggle.
_CONNECTOR_KEYS = {
    "python": frozenset({"kind", "timeout_s"}),
    "mcp_stdio": frozenset({"kind", "command", "timeout_s", "connect_timeout_s"}),
    "mcp_http": frozenset({"kind", "url", "timeout_s", "connect_timeout_s"}),
}
_TIMEOUT_LIMITS = {"timeout_s": 300.0, "connect_timeout_s": 120.0}


def checked_connector(connector: Any, *, what: str = "connector") -> dict[str, Any]:
    """The connector as stored, when its shape is the one documented above and the deployment allows where it
    leads; otherwise egress.EgressRefused (`invalid_connector`, `command_not_allowed`, `host_not_allowed`).
    Run when an operator configures one and again before every connection."""
    if not isinstance(connector, Mapping):
        raise egress.EgressRefused("invalid_connector", f"{what}: an object with a kind")
    kind = connector.get("kind")
    if not isinstance(kind, str) or kind not in _CONNECTOR_KEYS:
        raise egress.EgressRefused("invalid_connector", f"{what}.kind: one of {', '.join(_CONNECTOR_KEYS)}")
    extra = sorted(str(k) for k in connector if k not in _CONNECTOR_KEYS[kind])
    if extra:
        raise egress.EgressRefused(
            "invalid_connector",
            f"{what}.{extra[0]}: not accepted for {kind} (a stdio server's environment, directory and"
            " arguments are the deployment's: PREFLIGHT_MCP_STDIO_ALLOW, _ENV, _CWD)",
        )
    out: dict[str, Any] = {"kind": kind}
    for key, limit in _TIMEOUT_LIMITS.items():
        if key in connector:
            value = connector[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= limit:
                raise egress.EgressRefused(
                    "invalid_connector", f"{what}.{key}: a number above 0, at most {limit:g}"
                )
            out[key] = value
    if kind == "mcp_stdio":
        out["command"] = egress.check_command(connector.get("command"), what=f"{what}.command")
    elif kind == "mcp_http":
        egress.check_url(connector.get("url"), what=f"{what}.url")
        out["url"] = connector["url"]
    return out


async def open_client(connector: Mapping[str, Any], stack: AsyncExitStack, errlog: TextIO | None) -> Any:
    """Enter an MCP ``Client`` for the connector on ``stack`` (connect + protocol negotiation)."""
    from mcp import Client, Implementation, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    # Checked again here, whatever was checked when it was stored: the row may predate the allow-lists.
    try:
        connector = checked_connector(connector)
    except egress.EgressRefused as exc:
        raise ToolCallFailed(f"{exc.code}: {exc.detail}") from None
    kind = connector["kind"]
    transport: Any
    if kind == "mcp_stdio":
        command = connector["command"]
        params = StdioServerParameters(
            command=command[0],
            args=list(command[1:]),
            # The whole environment: the deployment's, nothing from this process's secrets or a connector.
            env=dict(settings.PREFLIGHT_MCP_STDIO_ENV),
            cwd=str(settings.PREFLIGHT_MCP_STDIO_CWD),
        )
        # stdio_client directly rather than Client(StdioServerParameters): only this way can the server's
        # stderr be captured, and a server that dies at start-up explains itself there.
        transport = stdio_client(params, errlog=errlog or sys.stderr)
    elif kind == "mcp_http":
        http_client = allow_listed_http_client()
        await stack.enter_async_context(http_client)
        transport = streamable_http_client(connector["url"], http_client=http_client)
    else:
        raise ToolCallFailed(f"unknown connector kind {kind!r}")

    # cache=None: the catalog digests what the server says now, never a cached listing.
    client = Client(transport, cache=None, client_info=Implementation(name="preflight", version="0.1.0"))
    return await stack.enter_async_context(client)


async def list_all(client: Any) -> list[Any]:
    from mcp_types import PaginatedRequestParams

    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGE_CAP):
        page = await client.session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise ToolCallFailed(f"tools/list did not end within {_LIST_PAGE_CAP} pages")


async def _mcp_list(connector: Mapping[str, Any], timeout_s: float) -> list[dict[str, Any]]:
    tools: list[Any] | None = None
    failure: BaseException | None = None
    with stderr_capture(connector) as errlog:
        with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as scope:
            try:
                async with AsyncExitStack() as stack:
                    client = await open_client(connector, stack, errlog)
                    tools = await list_all(client)
            except Exception as exc:
                if tools is None:
                    failure = as_failure(exc, ToolCallFailed, "listing tools failed", errlog)
        if tools is None and failure is None and scope.cancelled_caught:
            failure = ToolCallFailed(f"no tools/list answer within {timeout_s}s{_stderr_tail(errlog)}")
    if tools is None:
        raise failure or ToolCallFailed("listing tools failed")
    listed = [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]
    if len(result_bytes(listed)) > MAX_TOOLS_LIST_BYTES:
        raise ToolCallFailed(f"tools/list answered with more than {MAX_TOOLS_LIST_BYTES} bytes of tools")
    return listed


@dataclass
class CallState:
    sent: bool = False
    result: dict[str, Any] | None = None
    failure: Exception | None = None


async def mcp_call(
    connector: Mapping[str, Any],
    tool: str,
    arguments: dict[str, Any],
    connect_timeout_s: float,
    call_timeout_s: float,
    require_read_only: bool,
    expected: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    state = CallState()
    with stderr_capture(connector) as errlog:
        # One scope whose deadline moves from connecting to calling: a fail_after() around connecting alone
        # would have to close before the client's task groups do, which anyio forbids.
        with anyio.CancelScope(deadline=anyio.current_time() + connect_timeout_s) as scope:
            try:
                async with AsyncExitStack() as stack:
                    client = await open_client(connector, stack, errlog)
                    await call_on(
                        client, tool, arguments, call_timeout_s, require_read_only, scope, state, expected
                    )
            except Exception as exc:
                if state.result is None and state.failure is None:
                    kind = OutcomeUnknown if state.sent else ToolCallFailed
                    state.failure = as_failure(exc, kind, repr(tool), errlog)
                else:
                    # Trouble while closing, after the answer arrived, does not change what the tool did.
                    logger.warning(
                        "closing the MCP connection after %r failed: %s", tool, describe_error(exc)
                    )
        if state.result is None and state.failure is None and scope.cancelled_caught:
            if state.sent:
                state.failure = OutcomeUnknown(f"no answer from {tool!r} within {call_timeout_s}s")
            else:
                tail = _stderr_tail(errlog)
                state.failure = ToolCallFailed(f"could not connect within {connect_timeout_s}s{tail}")
    if state.result is None:
        raise state.failure or OutcomeUnknown(f"{tool!r} ended without an answer")
    return state.result


async def call_on(
    client: Any,
    tool: str,
    arguments: dict[str, Any],
    call_timeout_s: float,
    require_read_only: bool,
    scope: anyio.CancelScope,
    state: CallState,
    expected: Mapping[str, Any] | None = None,
) -> None:
    """List, check, call. Failures are stored on ``state``, not raised: anything raised inside the client
    context comes back wrapped in the SDK's task-group ExceptionGroups, losing its meaning."""
    from mcp import MCPError
    from mcp_types import CallToolResult

    definition = next((t for t in await list_all(client) if t.name == tool), None)
    if definition is None:
        state.failure = ToolCallFailed(f"the server does not list a tool named {tool!r}")
        return
    if require_read_only and not (definition.annotations and definition.annotations.read_only_hint):
        state.failure = ToolCallFailed(f"{tool!r} is not annotated readOnlyHint; a lookup must not act")
        return
    changed = _changed_from(definition, expected)
    if changed:
        state.failure = ToolCallFailed(
            f"the server now lists {tool!r} with another {', '.join(changed)} than the contract this call was"
            " preflighted against; nothing was sent (an operator re-imports the server to accept the change)"
        )
        return
    state.sent = True
    scope.deadline = anyio.current_time() + call_timeout_s + CALL_GRACE_S
    try:
        answer = await client.session.call_tool(
            tool, arguments, read_timeout_seconds=call_timeout_s, allow_input_required=True
        )
    except MCPError as exc:
        state.failure = classify_mcp_error(exc, tool)
        return
    except Exception as exc:
        # Includes the SDK's post-call output-schema check: the tool ran and its answer is unusable.
        state.failure = OutcomeUnknown(f"{tool!r}: {describe_error(exc)}")
        return
    if not isinstance(answer, CallToolResult):
        # InputRequiredResult: the server wants an answer before it will run, and the gate has none to give.
        state.failure = ToolCallFailed(f"{tool!r} asked for input mid-call")
        return
    state.result = {
        "content": [
            block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in answer.content
        ],
        "structuredContent": answer.structured_content,
        "isError": bool(answer.is_error),
    }


# What of a listed tool the contract rests on: its arguments' schema, its prose (conditions, labels) and its
# annotations (trust, readOnlyHint). Absent and empty are the same.
_CONTRACT_FIELDS = {"description": "", "inputSchema": {}, "annotations": {}}


def _changed_from(definition: Any, expected: Mapping[str, Any] | None) -> list[str]:
    if expected is None:
        return []
    live = definition.model_dump(by_alias=True, mode="json", exclude_none=True)
    return [
        key
        for key, empty in _CONTRACT_FIELDS.items()
        if canonical_json(live.get(key) or empty) != canonical_json(expected.get(key) or empty)
    ]


def classify_mcp_error(exc: Any, tool: str) -> Exception:
    import mcp_types as types  # loaded already: the client that raised `exc` imported it

    detail = f"{tool!r}: MCP error {exc.code}: {exc.message}"
    if exc.code in (
        types.METHOD_NOT_FOUND,
        types.INVALID_PARAMS,
        types.HEADER_MISMATCH,
        types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        types.UNSUPPORTED_PROTOCOL_VERSION,
        types.URL_ELICITATION_REQUIRED,
    ):
        return ToolCallFailed(detail)
    return OutcomeUnknown(detail)


def as_failure(exc: BaseException, kind: type[Exception], what: str, errlog: TextIO | None) -> Exception:
    for inner in _leaves(exc):
        if isinstance(inner, ToolCallFailed | OutcomeUnknown):
            return inner
    return kind(f"{what}: {describe_error(exc)}{_stderr_tail(errlog)}")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def describe_error(exc: BaseException) -> str:
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in _leaves(exc))


def stderr_capture(connector: Mapping[str, Any]) -> AbstractContextManager[TextIO | None]:
    """A temporary file for a stdio server's stderr (the child needs a real descriptor); None for HTTP."""
    if connector.get("kind") != "mcp_stdio":
        return nullcontext()
    return tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")


def _stderr_tail(errlog: TextIO | None) -> str:
    if errlog is None or errlog.closed:
        return ""
    try:
        errlog.flush()
        errlog.seek(0)
        text = errlog.read().strip()
    except (OSError, ValueError):
        return ""
    return f"; server stderr: {text[-_STDERR_TAIL_CHARS:]}" if text else ""


def first_text(result: Mapping[str, Any]) -> str:
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and block.get("type") == "text":
            return str(block.get("text", ""))
    return "(no text content)"
