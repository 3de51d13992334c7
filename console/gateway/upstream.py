"""One kept session per upstream MCP server: opened once, reused by every call, reopened after a failure.

A session lives in a task of its own (the SDK's client contexts must be entered and left by one task); calls
from other tasks use its `ClientSession`. The client is built by `console.connectors`, so the stdio allow-list
(PREFLIGHT_MCP_STDIO_ALLOW), the transport options and the rule that the gateway declares no `roots` are the
same as for any connector.

A call is sent at most once. A session that broke while a call was in flight reports `OutcomeUnknown` for
it and is reopened for the next call; only connecting and listing are ever repeated.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from console import connectors
from console.connectors import tools as connector_tools

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """What an operator configured for one upstream server (its catalog row)."""

    server: str
    connector: dict[str, Any]
    timeout_s: float = 30.0


class Upstream:
    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self._client: Any = None
        self._closed: anyio.Event | None = None
        self._lock = anyio.Lock()
        self._task_group: anyio.abc.TaskGroup | None = None

    @property
    def server(self) -> str:
        return self.config.server

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        await self._ensure()

    async def _ensure(self) -> Any:
        async with self._lock:
            if self._client is not None:
                return self._client
            if self._task_group is None:
                raise connectors.ToolCallFailed(f"upstream {self.server!r} is not started")
            opened: anyio.Event = anyio.Event()
            failure: list[BaseException] = []
            closed = anyio.Event()

            async def hold() -> None:
                try:
                    # One scope whose deadline bounds connecting and is then lifted: a fail_after() around
                    # connecting alone would close before the client's task groups do, which anyio forbids.
                    connect_s = connector_tools.connect_timeout(self.config.connector, self.config.timeout_s)
                    with anyio.CancelScope(deadline=anyio.current_time() + connect_s) as scope:
                        async with AsyncExitStack() as stack:
                            client = await connector_tools.open_client(self.config.connector, stack, None)
                            scope.deadline = math.inf
                            self._client = client
                            opened.set()
                            await closed.wait()
                    if scope.cancelled_caught and not opened.is_set():
                        failure.append(TimeoutError())
                except BaseException as exc:  # the session ended: the next call opens a new one
                    if not opened.is_set():
                        failure.append(exc)
                    else:
                        logger.warning("upstream %s: session ended: %s", self.server, exc)
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                finally:
                    self._client = None
                    opened.set()

            self._task_group.start_soon(hold)
            await opened.wait()
            if self._client is None:
                exc = failure[0] if failure else None
                raise connectors.ToolCallFailed(
                    f"could not connect to upstream {self.server!r}: {_describe(exc)}"
                ) from None
            self._closed = closed
            return self._client

    async def close(self) -> None:
        """Close the session (at shut-down, or a call saw it break); the next call reconnects."""
        if self._closed is not None:
            self._closed.set()
            self._closed = None
        self._client = None
        await anyio.lowlevel.checkpoint()

    async def list_tools(self) -> list[dict[str, Any]]:
        """The live `tools/list`, every page, as wire dicts. Retried once on a fresh session: listing acts on
        nothing."""
        for attempt in (1, 2):
            client = await self._ensure()
            try:
                # Listing acts on nothing: it gets the connect budget, not the tool's own timeout.
                with anyio.fail_after(
                    connector_tools.connect_timeout(self.config.connector, self.config.timeout_s)
                ):
                    tools = await connector_tools.list_all(client)
                return [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools]
            except connectors.ToolCallFailed:
                raise
            except Exception as exc:
                await self.close()
                if attempt == 2:
                    raise connectors.ToolCallFailed(
                        f"upstream {self.server!r}: tools/list failed: {_describe(exc)}"
                    ) from None
        raise AssertionError("unreachable")

    async def call(self, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one tools/call, once. The answer as `{"content", "structuredContent", "isError"}`."""
        from mcp import MCPError
        from mcp_types import CallToolResult

        client = await self._ensure()
        try:
            with anyio.fail_after(timeout_s + 1.0):
                answer = await client.session.call_tool(
                    tool, dict(arguments), read_timeout_seconds=timeout_s, allow_input_required=True
                )
        except MCPError as exc:
            raise connector_tools.classify_mcp_error(exc, tool) from None
        except Exception as exc:
            # Sent, then the answer was lost (a timeout, a dead process): it may have acted.
            await self.close()
            raise connectors.OutcomeUnknown(f"{tool!r}: {_describe(exc)}") from None
        if not isinstance(answer, CallToolResult):
            raise connectors.ToolCallFailed(f"{tool!r} asked for input mid-call")
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no reason given"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return connector_tools.describe_error(exc)
