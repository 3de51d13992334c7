"""How Preflight reaches the outside world: tool calls (python, MCP over stdio or streamable HTTP), lookups.

Everything here is synchronous on purpose: callers are Django views and Celery tasks. The MCP SDK is async, so
each call runs its own short event loop (``anyio.run``), in a helper thread when the caller already has one.
HTTP lookups are the exception to one-thread-per-call: they all run on one event loop thread per process with
one pooled httpx client (`_HttpLookups`), since a batch starts ten at once.

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

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import http.cookiejar
import inspect
import json
import logging
import math
import os
import queue
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio
from django.conf import settings

from console import egress, json_values
from preflight.canonical import canonical_json

if TYPE_CHECKING:
    import httpx2

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

CONNECT_TIMEOUT_FLOOR_S = 10.0
DEFAULT_MEASURE_TIMEOUT_S = 5.0
# A measurement stamped in the future would look fresh forever; allow only ordinary clock skew.
MAX_CLOCK_SKEW = timedelta(seconds=60)
MAX_MEASURE_BODY_BYTES = 1 << 20
# What of a tool's answer is kept (recorded, handed to the agent): a server must not fill the database or the
# worker's memory. An answer past it is recorded by size and digest; the call did run.
MAX_TOOL_RESULT_BYTES = 1 << 20
# A catalog is read by people and digested per tool: a listing past this is a server misbehaving.
MAX_TOOLS_LIST_BYTES = 8 << 20
# The SDK's own read timeout answers first; this backstop only catches a transport that blocks before it.
_CALL_GRACE_S = 1.0
_LIST_PAGE_CAP = 100
_STDERR_TAIL_CHARS = 2000


class ToolCallFailed(Exception):
    """Nothing reached the tool, or the tool refused or reported an error: the outcome is ``failed``."""

    def __init__(self, detail: str, *, result: Any = None) -> None:
        detail = json_values.storable_text(detail)  # it may quote a server, and it is recorded
        super().__init__(detail)
        self.detail = detail
        # The tool's own error result (MCP isError), kept so the record can show what the provider said.
        self.result = result


class OutcomeUnknown(Exception):
    """The request was sent and then the answer was lost: the side effect may have happened."""

    def __init__(self, detail: str) -> None:
        detail = json_values.storable_text(detail)  # it may quote a server, and it is recorded
        super().__init__(detail)
        self.detail = detail


class MeasureFailed(Exception):
    """A lookup gave no trustworthy value (bad status, timeout, malformed answer, exception)."""

    def __init__(self, detail: str) -> None:
        detail = json_values.storable_text(detail)  # it may quote a server, and it is recorded
        super().__init__(detail)
        self.detail = detail


# --------------------------------------------------------------------------------------------- registries

_TOOLS: dict[tuple[str, str], Callable[..., Any]] = {}
_LOOKUPS: dict[str, Callable[..., Any]] = {}


def register_tool(server: str, tool: str) -> Callable[[F], F]:
    """Register a Python callable as ``server``/``tool`` for ``{"kind": "python"}`` connectors.

    It is called with the arguments as keyword arguments. To refuse without acting it raises
    ``ToolCallFailed``; any other exception means it may have acted part-way and becomes ``OutcomeUnknown``.
    """

    def decorator(fn: F) -> F:
        _TOOLS[(server, tool)] = fn
        return fn

    return decorator


def register_lookup(name: str) -> Callable[[F], F]:
    """Register a Python callable as the lookup ``name`` for ``{"kind": "python"}`` measures.

    It is called with the measure's args as keyword arguments and returns the value, or
    ``(value, observed_at)`` with an offset-aware ``observed_at``. Without one, the call's start time is used.
    """

    def decorator(fn: F) -> F:
        _LOOKUPS[name] = fn
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
    _check_timeout(timeout_s, ToolCallFailed)
    kind = connector.get("kind")
    if kind == "python":
        return _call_python_tool(server, tool, arguments, timeout_s)
    if kind in ("mcp_stdio", "mcp_http"):
        result = _run_async(
            _mcp_call,
            connector,
            tool,
            dict(arguments),
            _connect_timeout(connector, timeout_s),
            timeout_s,
            False,
            expected,
        )
        result = _bounded_result(result)
        if result["isError"]:
            raise ToolCallFailed(f"{server}/{tool} reported an error: {_first_text(result)}", result=result)
        return result
    raise ToolCallFailed(f"unknown connector kind {kind!r}")


def _result_bytes(result: Any) -> bytes:
    return json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _bounded_result(result: dict[str, Any]) -> dict[str, Any]:
    raw = _result_bytes(result)
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
    _check_timeout(timeout_s, ToolCallFailed)
    if connector.get("kind") not in ("mcp_stdio", "mcp_http"):
        raise ToolCallFailed(f"connector kind {connector.get('kind')!r} cannot list tools")
    tools: list[dict[str, Any]] = _run_async(_mcp_list, connector, timeout_s)
    return tools


def _call_python_tool(server: str, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> Any:
    fn = _TOOLS.get((server, tool))
    if fn is None:
        raise ToolCallFailed(f"no python tool registered as {server}/{tool}")
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as exc:
        # Binding fails before the body runs, so the tool provably did nothing.
        raise ToolCallFailed(f"{server}/{tool} does not accept these arguments: {exc}") from exc
    outcome = _run_with_deadline(fn, dict(arguments), timeout_s)
    if outcome.timed_out:
        raise OutcomeUnknown(f"{server}/{tool} did not return within {timeout_s}s; it may still be acting")
    if isinstance(outcome.error, ToolCallFailed | OutcomeUnknown):
        raise outcome.error
    if outcome.error is not None:
        raise OutcomeUnknown(
            f"{server}/{tool} raised {type(outcome.error).__name__}: {outcome.error}; it may have acted"
        ) from outcome.error
    try:
        return _as_json(outcome.value)
    except ValueError as exc:
        raise OutcomeUnknown(f"{server}/{tool} returned a value that is not JSON: {exc}") from exc


# --------------------------------------------------------------------------------------------- MCP

# The sent/not-sent boundary (what separates ToolCallFailed from OutcomeUnknown):
#
# Connecting (spawn or HTTP connect, protocol negotiation) and tools/list happen before the tools/call request
# exists, so any failure there, a timeout included, is ToolCallFailed: the tool cannot have run. Listing first
# also lets "no such tool" fail before anything is sent, and 2026-07-28 servers expect it anyway.
#
# Once session.call_tool() is entered, the request is handed to the transport. The SDK does not report whether
# the bytes left (stdio writes from a pipe task, HTTP posts from a background task), so from that point every
# failure without an answer is OutcomeUnknown, unless the server itself answered with a JSON-RPC error that
# can only mean "refused before running" (_REFUSAL_CODES). INTERNAL_ERROR is what the SDK sends when a handler
# raised mid-way, and some codes are synthesized client-side from HTTP trouble after the server may have acted
# (PARSE_ERROR for an unreadable answer, INVALID_REQUEST for an odd content type), so those stay unknown.
_METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = -32602
_HEADER_MISMATCH = -32020
_MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
_UNSUPPORTED_PROTOCOL_VERSION = -32022
_URL_ELICITATION_REQUIRED = -32042
_REFUSAL_CODES = frozenset(
    {
        _METHOD_NOT_FOUND,
        _INVALID_PARAMS,
        _HEADER_MISMATCH,
        _MISSING_REQUIRED_CLIENT_CAPABILITY,
        _UNSUPPORTED_PROTOCOL_VERSION,
        _URL_ELICITATION_REQUIRED,
    }
)


def _connect_timeout(connector: Mapping[str, Any], timeout_s: float) -> float:
    explicit = connector.get("connect_timeout_s")
    if explicit is not None:
        _check_timeout(explicit, ToolCallFailed)
        return float(explicit)
    return max(float(timeout_s), CONNECT_TIMEOUT_FLOOR_S)


def stdio_command_allowed(command: Sequence[str]) -> bool:
    """Whether this host may start `command` as an MCP server: it must equal one of the command lines of
    PREFLIGHT_MCP_STDIO_ALLOW (extra arguments are code too: `-c`, `--config`)."""
    try:
        egress.check_command(list(command))
    except egress.EgressRefused:
        return False
    return True


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


def _allow_listed(connector: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return checked_connector(connector)
    except egress.EgressRefused as exc:
        raise ToolCallFailed(f"{exc.code}: {exc.detail}") from None


class _AllowListedBackend:
    """httpcore's AnyIO network backend, connecting only to addresses the allow-list admits: the host is
    resolved once here, each address checked, and the socket opened to a checked address (never a second
    resolution a rebinding DNS server could answer differently). TLS still verifies the URL's host name."""

    def __init__(self) -> None:
        import httpcore2

        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        name = egress._normal_host(host.strip("[]")) or host
        if not any(e.host == name and e.port in (None, port) for e in egress.allowed_hosts()):
            raise egress.EgressRefused("host_not_allowed", f"{host}:{port} is not in PREFLIGHT_HTTP_ALLOW")
        if egress._ip(name) is not None:  # taken as it is: no wait on DNS, no hop to a resolver thread
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        else:
            infos = await anyio.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        failure: Exception | None = None
        # Each checked address in turn, in the order DNS gave them, as httpcore itself would not.
        for info in egress.check_addresses(name, port, infos):
            try:
                return await self._backend.connect_tcp(
                    str(info[4][0]),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except Exception as exc:
                failure = exc
        assert failure is not None  # check_addresses refuses an empty answer
        raise failure

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        raise egress.EgressRefused("host_not_allowed", "unix sockets are not reachable from a connector")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def _checked_transport(
    ssl_context: ssl.SSLContext, limits: httpx2.Limits | None = None
) -> httpx2.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through `_AllowListedBackend`; without `limits`,
    httpcore's own."""
    import httpcore2
    import httpx2

    transport = httpx2.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
    # httpx builds its pool without a way to pass a network backend; this pool is the one it would build,
    # with ours. tests/console/test_egress.py proves a rebinding name reaches nothing through it.
    pool_limits = {} if limits is None else dataclasses.asdict(limits)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=ssl_context, network_backend=_AllowListedBackend(), **pool_limits
    )
    return transport


def _allow_listed_http_client() -> Any:
    """An httpx client for MCP over HTTP: no proxies from the environment (the allow-list is about where the
    bytes go), no redirects, connections only through `_AllowListedBackend`."""
    import httpx2

    transport = _checked_transport(httpx2.create_ssl_context(trust_env=False))
    # Per-operation limits as generous as the SDK's default client: the cancel scope around the whole
    # exchange is what bounds it.
    return httpx2.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False, timeout=httpx2.Timeout(30.0, read=300.0)
    )


async def _open_client(connector: Mapping[str, Any], stack: AsyncExitStack, errlog: TextIO | None) -> Any:
    """Enter an MCP ``Client`` for the connector on ``stack`` (connect + protocol negotiation)."""
    from mcp import Client, Implementation, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    # Checked again here, whatever was checked when it was stored: the row may predate the allow-lists.
    connector = _allow_listed(connector)
    kind = connector["kind"]
    transport: Any
    if kind == "mcp_stdio":
        command = connector["command"]
        params = StdioServerParameters(
            command=command[0],
            args=list(command[1:]),
            env=egress.stdio_environment(),
            cwd=str(settings.PREFLIGHT_MCP_STDIO_CWD),
        )
        # stdio_client directly rather than Client(StdioServerParameters): only this way can the server's
        # stderr be captured, and a server that dies at start-up explains itself there.
        transport = stdio_client(params, errlog=errlog or sys.stderr)
    elif kind == "mcp_http":
        http_client = _allow_listed_http_client()
        await stack.enter_async_context(http_client)
        transport = streamable_http_client(connector["url"], http_client=http_client)
    else:
        raise ToolCallFailed(f"unknown connector kind {kind!r}")

    # cache=None: the catalog digests what the server says now, never a cached listing.
    client = Client(transport, cache=None, client_info=Implementation(name="preflight", version="0.1.0"))
    return await stack.enter_async_context(client)


async def _list_all(client: Any) -> list[Any]:
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
    with _stderr_capture(connector) as errlog:
        with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as scope:
            try:
                async with AsyncExitStack() as stack:
                    client = await _open_client(connector, stack, errlog)
                    tools = await _list_all(client)
            except Exception as exc:
                if tools is None:
                    failure = _as_failure(exc, ToolCallFailed, "listing tools failed", errlog)
        if tools is None and failure is None and scope.cancelled_caught:
            failure = ToolCallFailed(f"no tools/list answer within {timeout_s}s{_stderr_tail(errlog)}")
    if tools is None:
        raise failure or ToolCallFailed("listing tools failed")
    listed = [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]
    if len(_result_bytes(listed)) > MAX_TOOLS_LIST_BYTES:
        raise ToolCallFailed(f"tools/list answered with more than {MAX_TOOLS_LIST_BYTES} bytes of tools")
    return listed


@dataclass
class _CallState:
    sent: bool = False
    result: dict[str, Any] | None = None
    failure: Exception | None = None


async def _mcp_call(
    connector: Mapping[str, Any],
    tool: str,
    arguments: dict[str, Any],
    connect_timeout_s: float,
    call_timeout_s: float,
    require_read_only: bool,
    expected: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    state = _CallState()
    with _stderr_capture(connector) as errlog:
        # One scope whose deadline moves from connecting to calling: a fail_after() around connecting alone
        # would have to close before the client's task groups do, which anyio forbids.
        with anyio.CancelScope(deadline=anyio.current_time() + connect_timeout_s) as scope:
            try:
                async with AsyncExitStack() as stack:
                    client = await _open_client(connector, stack, errlog)
                    await _call_on(
                        client, tool, arguments, call_timeout_s, require_read_only, scope, state, expected
                    )
            except Exception as exc:
                if state.result is None and state.failure is None:
                    kind = OutcomeUnknown if state.sent else ToolCallFailed
                    state.failure = _as_failure(exc, kind, repr(tool), errlog)
                else:
                    # Trouble while closing, after the answer arrived, does not change what the tool did.
                    logger.warning("closing the MCP connection after %r failed: %s", tool, _describe(exc))
        if state.result is None and state.failure is None and scope.cancelled_caught:
            if state.sent:
                state.failure = OutcomeUnknown(f"no answer from {tool!r} within {call_timeout_s}s")
            else:
                tail = _stderr_tail(errlog)
                state.failure = ToolCallFailed(f"could not connect within {connect_timeout_s}s{tail}")
    if state.result is None:
        raise state.failure or OutcomeUnknown(f"{tool!r} ended without an answer")
    return state.result


async def _call_on(
    client: Any,
    tool: str,
    arguments: dict[str, Any],
    call_timeout_s: float,
    require_read_only: bool,
    scope: anyio.CancelScope,
    state: _CallState,
    expected: Mapping[str, Any] | None = None,
) -> None:
    """List, check, call. Failures are stored on ``state``, not raised: anything raised inside the client
    context comes back wrapped in the SDK's task-group ExceptionGroups, losing its meaning."""
    from mcp import MCPError
    from mcp_types import CallToolResult

    definition = next((t for t in await _list_all(client) if t.name == tool), None)
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
    scope.deadline = anyio.current_time() + call_timeout_s + _CALL_GRACE_S
    try:
        answer = await client.session.call_tool(
            tool, arguments, read_timeout_seconds=call_timeout_s, allow_input_required=True
        )
    except MCPError as exc:
        state.failure = _classify_mcp_error(exc, tool)
        return
    except Exception as exc:
        # Includes the SDK's post-call output-schema check: the tool ran and its answer is unusable.
        state.failure = OutcomeUnknown(f"{tool!r}: {_describe(exc)}")
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


def _classify_mcp_error(exc: Any, tool: str) -> Exception:
    detail = f"{tool!r}: MCP error {exc.code}: {exc.message}"
    if exc.code in _REFUSAL_CODES:
        return ToolCallFailed(detail)
    return OutcomeUnknown(detail)


def _as_failure(exc: BaseException, kind: type[Exception], what: str, errlog: TextIO | None) -> Exception:
    leaf = _leaves(exc)
    for inner in leaf:
        if isinstance(inner, ToolCallFailed | OutcomeUnknown):
            return inner
    return kind(f"{what}: {_describe(exc)}{_stderr_tail(errlog)}")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException) -> str:
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in _leaves(exc))


@contextmanager
def _stderr_capture(connector: Mapping[str, Any]) -> Iterator[TextIO | None]:
    """A temporary file for a stdio server's stderr (the child needs a real descriptor); None for HTTP."""
    if connector.get("kind") != "mcp_stdio":
        yield None
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        yield errlog


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


def _first_text(result: Mapping[str, Any]) -> str:
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and block.get("type") == "text":
            return str(block.get("text", ""))
    return "(no text content)"


# --------------------------------------------------------------------------------------------- measures


def run_measure(measure: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[Any, datetime]:
    """Run one lookup; return ``(value, observed_at)`` with an aware ``observed_at`` in UTC.

    Raises ``MeasureFailed`` for every way of not getting a trustworthy value, so the caller records an
    ``error`` finding (hold) and never a silent ``no_result``.
    """
    return start_measure(measure, args).result()


class StartedMeasure:
    """A lookup under way, bounded by the measure's timeout: an HTTP one on the process's HTTP loop thread
    (`_HttpLookups`), any other in a thread of its own. Starting the lookups of a frontier one after another
    and then collecting them costs at most a thread each; calling `run_measure` in a thread of the caller's
    would cost two."""

    def __init__(
        self,
        name: str,
        call: _Pending | None = None,
        finish: Callable[[_Outcome], tuple[Any, datetime]] | None = None,
        failed: Exception | None = None,
    ) -> None:
        self.name, self._call, self._finish, self._failed = name, call, finish, failed

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the answer is in, or the lookup has failed or timed out; True once it has."""
        return self._call is None or self._call.wait(timeout)

    def result(self) -> tuple[Any, datetime]:
        """``(value, observed_at)``, waiting if need be; ``MeasureFailed`` without a trustworthy value."""
        try:
            if self._failed is not None:
                raise self._failed
            assert self._call is not None and self._finish is not None
            value, observed_at = self._finish(self._call.result())
            try:
                # A value is stored and digested: one PostgreSQL or canonical JSON cannot hold is no value.
                json_values.check_json(value)
            except json_values.JSONProblem as exc:
                raise MeasureFailed(f"the answer cannot be recorded: {exc.detail}") from None
            return value, observed_at
        except MeasureFailed as exc:
            if self.name and not exc.detail.startswith(f"{self.name}:"):
                raise MeasureFailed(f"{self.name}: {exc.detail}") from exc
            raise
        except Exception as exc:
            raise MeasureFailed(f"{self.name}: {type(exc).__name__}: {exc}") from exc


def start_measure(measure: Mapping[str, Any], args: Mapping[str, Any]) -> StartedMeasure:
    """Start one lookup and return at once; its `result()` is what `run_measure` returns or raises."""
    name = str(measure.get("name") or "")
    try:
        timeout_s = measure.get("timeout_s")
        timeout_s = DEFAULT_MEASURE_TIMEOUT_S if timeout_s is None else timeout_s
        _check_timeout(timeout_s, MeasureFailed)
        kind = measure.get("kind")
        if kind == "http":
            call, finish = _http_measure(name, measure.get("url"), args, float(timeout_s))
        elif kind == "python":
            config = measure.get("config") or {}
            call, finish = _python_measure(str(config.get("lookup") or name), args, float(timeout_s))
        elif kind == "mcp":
            call, finish = _mcp_measure(name, measure.get("config") or {}, args, float(timeout_s))
        else:
            raise MeasureFailed(f"unknown measure kind {kind!r}")
    except Exception as exc:
        return StartedMeasure(name, failed=exc)
    return StartedMeasure(name, call, finish)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # The system's trust store, as lookups have always used (not httpx's own default), built once per process:
    # loading the CA bundle is tens of ms of CPU under the GIL.
    return ssl.create_default_context()


_Started = tuple["_Pending", Callable[["_Outcome"], tuple[Any, datetime]]]


def _http_measure(name: str, url: Any, args: Mapping[str, Any], timeout_s: float) -> _Started:
    """POST the lookup to its URL; the answer must be 200 with ``{"value": ..., "observed_at": ...}``.

    Every HTTP lookup of the process runs on one event loop thread with one pooled httpx client
    (`_HttpLookups`): a batch starts ten at once, and ten threads each with a client fight over the GIL.
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MeasureFailed("http measure needs 'url': an http(s) URL")
    try:
        egress.check_url(url)
    except egress.EgressRefused as exc:
        raise MeasureFailed(f"{exc.code}: {exc.detail}") from None
    body = json.dumps({"measure": name, "args": dict(args)}, allow_nan=False).encode()
    call = _http_lookups.start(url, body, timeout_s)

    def finish(outcome: _Outcome) -> tuple[Any, datetime]:
        if outcome.timed_out:
            raise MeasureFailed(f"no answer within {timeout_s}s")
        if outcome.error is not None:
            raise MeasureFailed(f"request failed: {_describe_http_error(outcome.error)}")
        status, raw = outcome.value
        if status != 200:
            raise MeasureFailed(f"answered HTTP {status}, expected 200")
        if len(raw) > MAX_MEASURE_BODY_BYTES:
            raise MeasureFailed(f"answer larger than {MAX_MEASURE_BODY_BYTES} bytes")
        try:
            answer = json.loads(raw, parse_constant=_reject_constant)
        except ValueError as exc:
            raise MeasureFailed(f"answer is not JSON: {exc}") from exc
        if not isinstance(answer, dict):
            raise MeasureFailed("answer is not a JSON object")
        missing = [key for key in ("value", "observed_at") if key not in answer]
        if missing:
            raise MeasureFailed(f"answer lacks {', '.join(missing)}")
        return answer["value"], _parse_observed_at(answer["observed_at"])

    return call, finish


def _describe_http_error(exc: BaseException) -> str:
    # httpx wraps what broke; the operating system's own error (refused, unresolved, a certificate) says more.
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError):
            exc = cause
        cause = cause.__cause__ or cause.__context__  # httpcore re-raises its own `from None`
    return f"{type(exc).__name__}: {exc}"


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def _parse_observed_at(raw: Any) -> datetime:
    if not isinstance(raw, str):
        raise MeasureFailed("observed_at is not a string")
    try:
        observed = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise MeasureFailed(f"observed_at {raw!r} is not ISO 8601") from exc
    return _aware_utc(observed)


def _aware_utc(observed: datetime) -> datetime:
    if observed.tzinfo is None or observed.utcoffset() is None:
        # A naive time could be any zone; its age cannot be computed, so it cannot be fresh.
        raise MeasureFailed(f"observed_at {observed.isoformat()} has no UTC offset")
    observed = observed.astimezone(UTC)
    if observed > datetime.now(UTC) + MAX_CLOCK_SKEW:
        raise MeasureFailed(f"observed_at {observed.isoformat()} is in the future")
    return observed


def _python_measure(lookup: str, args: Mapping[str, Any], timeout_s: float) -> _Started:
    fn = _LOOKUPS.get(lookup)
    if fn is None:
        raise MeasureFailed(f"no python lookup registered as {lookup!r}")
    started = datetime.now(UTC)

    def finish(outcome: _Outcome) -> tuple[Any, datetime]:
        if outcome.timed_out:
            raise MeasureFailed(f"lookup {lookup!r} did not return within {timeout_s}s")
        if outcome.error is not None:
            raise MeasureFailed(f"lookup {lookup!r} raised {type(outcome.error).__name__}: {outcome.error}")
        value, observed_at = outcome.value, started
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], datetime):
            value, observed_at = value[0], _aware_utc(value[1])
        try:
            return _as_json(value), observed_at
        except ValueError as exc:
            raise MeasureFailed(f"lookup {lookup!r} returned a value that is not JSON: {exc}") from exc

    return _Call(fn, dict(args), timeout_s), finish


def _mcp_measure(name: str, config: Mapping[str, Any], args: Mapping[str, Any], timeout_s: float) -> _Started:
    connector, tool = config.get("connector"), config.get("tool")
    if not isinstance(connector, Mapping) or not isinstance(tool, str):
        raise MeasureFailed("mcp measure needs config.connector and config.tool")
    if connector.get("kind") not in ("mcp_stdio", "mcp_http"):
        raise MeasureFailed(f"mcp measure cannot use connector kind {connector.get('kind')!r}")
    # Stamped before the call: the server read the value after this moment, so its age is never understated.
    observed_at = datetime.now(UTC)
    connect_s = _connect_timeout(connector, timeout_s)

    def call() -> dict[str, Any]:
        result: dict[str, Any] = _run_async(
            _mcp_call, connector, tool, dict(args), connect_s, timeout_s, True
        )
        return result

    def finish(outcome: _Outcome) -> tuple[Any, datetime]:
        if (
            outcome.timed_out
        ):  # the SDK's own timeouts answer first; this only catches a transport that blocks
            raise MeasureFailed(f"{tool!r} lookup failed: no answer within {connect_s + timeout_s}s")
        if isinstance(outcome.error, ToolCallFailed | OutcomeUnknown):
            raise MeasureFailed(f"{tool!r} lookup failed: {outcome.error}") from outcome.error
        if outcome.error is not None:
            raise outcome.error
        result = outcome.value
        if len(_result_bytes(result)) > MAX_MEASURE_BODY_BYTES:
            raise MeasureFailed(f"{tool!r} answered with more than {MAX_MEASURE_BODY_BYTES} bytes")
        if result["isError"]:
            raise MeasureFailed(f"{tool!r} reported an error: {_first_text(result)}")
        value = result["structuredContent"]
        if value is None:
            text = next((c.get("text") for c in result["content"] if c.get("type") == "text"), None)
            if text is None:
                raise MeasureFailed(f"{tool!r} returned neither structuredContent nor text")
            try:
                value = json.loads(text, parse_constant=_reject_constant)
            except ValueError as exc:
                raise MeasureFailed(f"{tool!r} text content is not JSON: {exc}") from exc
        field = config.get("field")
        if field is not None:
            if not isinstance(value, dict) or field not in value:
                raise MeasureFailed(f"{tool!r} answer has no field {field!r}")
            value = value[field]
        return value, observed_at

    return _Call(call, {}, connect_s + timeout_s + _CALL_GRACE_S), finish


# --------------------------------------------------------------------------------------------- plumbing


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


def _run_with_deadline(fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout_s: float) -> _Outcome:
    """Call ``fn(**kwargs)`` in a daemon thread and stop waiting after ``timeout_s`` (see `_Call`)."""
    return _Call(fn, kwargs, timeout_s).result()


class _Pending:
    """A call under way: its ``outcome`` is in once ``done`` is set; waited for at most until ``timeout_s``
    (and ``grace_s``) from now."""

    def __init__(self, timeout_s: float, *, grace_s: float = 0.0) -> None:
        self.outcome = _Outcome()
        self.deadline = time.monotonic() + timeout_s + grace_s
        self.done = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until it returned or its time is up, or for `timeout`; True once either has happened."""
        left = self.deadline - time.monotonic()
        if timeout is not None and timeout < left:
            return self.done.wait(max(0.0, timeout))
        return self.done.wait(max(0.0, left)) or True

    def result(self) -> _Outcome:
        if not self.done.wait(max(0.0, self.deadline - time.monotonic())):
            return _Outcome(timed_out=True)
        return self.outcome


class _Call(_Pending):
    """``fn(**kwargs)`` running in a daemon thread from now on, waited for at most until ``timeout_s`` after
    it started.

    Python cannot interrupt a running function, so on timeout the thread is abandoned (daemon: it cannot keep
    the process alive). Django database connections opened by the call are closed when it ends, because
    nobody else can ever reuse or close them.
    """

    def __init__(self, fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout_s: float) -> None:
        super().__init__(timeout_s)
        outcome, done = self.outcome, self.done

        def target() -> None:
            try:
                outcome.value = fn(**kwargs)
            except BaseException as exc:
                outcome.error = exc
            finally:
                _close_thread_db_connections()
                done.set()

        _runners.run(target)


class _Runners:
    """Daemon threads for connector calls, kept between calls: starting a thread cost ~150 us of CPU here,
    ten of them per frontier of lookups, under the worker's GIL (bench/lookups.py). A call takes an idle
    thread or starts one; a thread whose call never returns is abandoned with it, as before, and only
    threads whose call returned are handed another."""

    MAX_IDLE = 32  # more idle than that end: a burst of calls leaves no crowd behind

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        # A forked child has none of its parent's threads: their queues would take calls nobody runs.
        os.register_at_fork(after_in_child=self._idle.clear)

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            serve = threading.Thread(target=self._serve, args=(jobs,), daemon=True)
            serve.name = "preflight-connector"
            serve.start()
        jobs.put(job)

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            jobs.get()()  # the job catches what its call raises
            with self._lock:
                if len(self._idle) >= self.MAX_IDLE:
                    return
                self._idle.append(jobs)


_runners = _Runners()


# --------------------------------------------------------------------------------------------- HTTP lookups

_HTTP_LOOP_GRACE_S = 0.005  # how long past its deadline a waiter gives the loop to report the timeout itself
# Connections kept open after an answer: a frontier's lookups of one measure service reuse them, without a TCP
# (and TLS) handshake each. Closed after a while idle, before common servers time them out (gunicorn: 2 s).
_KEPT_CONNECTIONS = 32
_IDLE_MAX_S = 1.5
# What lookups have always sent: no compression (the body limit is on the bytes that come), JSON both ways.
_LOOKUP_HEADERS = {
    "User-Agent": f"Python-urllib/{sys.version_info[0]}.{sys.version_info[1]}",
    "Accept-Encoding": "identity",
    "Content-Type": "application/json",
    "Accept": "application/json",
}


class _HttpLookups:
    """The process's HTTP lookups: one event loop thread, one pooled httpx client on it.

    Both are made on first use, and anew in a forked child (Celery prefork, gunicorn): the parent's loop
    thread is not there, and two processes on one connection would mix their answers.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx2.AsyncClient | None = None  # loop thread only
        self._tasks: set[asyncio.Task[None]] = set()  # loop thread only

    def start(self, url: str, body: bytes, timeout_s: float) -> _Pending:
        pending = _Pending(timeout_s, grace_s=_HTTP_LOOP_GRACE_S)
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="preflight-http", daemon=True).start()
            loop = self._loop
        loop.call_soon_threadsafe(self._spawn, self._exchange(pending, url, body, timeout_s), pending)
        return pending

    def in_flight(self) -> int:
        """How many lookups the loop holds (none once all have ended)."""
        return len(self._tasks)

    def forget_client(self) -> None:
        """The next lookup gets a new client: the environment's proxies and `_tls_context` are read anew."""
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._drop_client)

    def _spawn(self, work: Coroutine[Any, Any, None], pending: _Pending | None = None) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # the loop keeps only a weak reference to a task

        def ended(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if pending is not None:
                pending.done.set()

        task.add_done_callback(ended)

    def _drop_client(self) -> None:
        if self._client is not None:
            self._spawn(self._client.aclose())
            self._client = None

    async def _exchange(self, pending: _Pending, url: str, body: bytes, timeout_s: float) -> None:
        import httpx2

        try:
            if self._client is None:
                self._client = _lookup_client()
            pending.outcome.value = await _post(self._client, url, body, timeout_s)
        except (TimeoutError, httpx2.TimeoutException):
            pending.outcome.timed_out = True
        except Exception as exc:
            pending.outcome.error = exc


_http_lookups = _HttpLookups()


def _lookup_client() -> httpx2.AsyncClient:
    """No redirects (one would re-send the lookup's arguments to a place nobody configured), no cookies kept
    between lookups, proxies from the environment. Without a proxy, connections go only to addresses the
    allow-list admits (`_checked_transport`); through one, the proxy resolves the name `check_url`
    admitted."""
    import httpx2

    limits = httpx2.Limits(
        max_connections=None, max_keepalive_connections=_KEPT_CONNECTIONS, keepalive_expiry=_IDLE_MAX_S
    )
    client = httpx2.AsyncClient(
        verify=_tls_context(),
        limits=limits,
        follow_redirects=False,
        trust_env=True,
        headers=_LOOKUP_HEADERS,
        cookies=http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
    )
    del client.headers["Connection"]  # HTTP/1.1 keeps the connection without being told
    # Set after the fact: given a transport, httpx would read no proxies from the environment.
    client._transport = _checked_transport(_tls_context(), limits)
    return client


async def _post(client: httpx2.AsyncClient, url: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
    """``(status, body)``: the status only unless 2xx, at most one byte of the body past the limit."""
    import httpx2

    # The whole exchange, as httpx's own timeouts are per read: a server dripping its answer is cut off too.
    async with asyncio.timeout(timeout_s):
        while True:
            connected = False

            async def trace(event: str, info: Mapping[str, Any]) -> None:
                nonlocal connected
                connected = connected or event.startswith("connection.connect_tcp")

            request = client.build_request(
                "POST", url, content=body, timeout=timeout_s, extensions={"trace": trace}
            )
            try:
                response = await client.send(request, stream=True)
            except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError):
                if connected:
                    raise
                # A kept connection the server closed meanwhile (it may, between two requests): nothing of an
                # answer came, so the lookup, which reads and changes nothing, goes again on a new one.
                continue
            try:
                if not 200 <= response.status_code < 300:
                    return response.status_code, b""
                raw = bytearray()
                async for chunk in response.aiter_raw():
                    raw += chunk
                    if len(raw) > MAX_MEASURE_BODY_BYTES:
                        break
                return response.status_code, bytes(raw[: MAX_MEASURE_BODY_BYTES + 1])
            finally:
                await response.aclose()


def _close_thread_db_connections() -> None:
    if "django.db" not in sys.modules:
        return
    try:
        from django.db import connections

        connections.close_all()
    except Exception:
        logger.debug("closing a connector thread's database connections failed", exc_info=True)


def _run_async[T](fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run an async function to completion from synchronous code, in any thread.

    A thread that already runs an event loop (an async view, some test runners) cannot start another one, so
    the call then moves to a fresh worker thread and this thread blocks on it, as a sync API must.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn, *args)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="preflight-connector") as pool:
        return pool.submit(anyio.run, fn, *args).result()


def _check_timeout(timeout_s: Any, error: type[Exception]) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise error(f"timeout_s must be a positive number, not {timeout_s!r}")
    if math.isinf(timeout_s):
        raise error("timeout_s must be finite")


def _as_json(value: Any) -> Any:
    """Round-trip through JSON so callers hold exactly what a JSON column gives back (tuples become lists)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from exc
