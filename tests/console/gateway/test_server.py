"""The gateway over real stdio, driven by the official Python client in both protocol eras, in front of the
real filesystem server (npm) in a scratch directory."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from console import models, storage
from console.gateway.server import CONFIRM_FIELD, META_RECORD
from console.services.catalog import catalog_import
from console.services.measures import measure_create
from console.services.review import execution_approve

from .conftest import FS_EXTENSIONS, PRINCIPAL, REPO

MODES = ["2026-07-28", "legacy"]
CONTENT = "Dear diary,\nthe gateway asked me.\n"

Callback = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]


class User:
    """The person behind the client's elicitation UI: fills each form, counts what was asked."""

    def __init__(self, answers: dict[str, Any] | None = None, action: str = "accept") -> None:
        self.answers = answers or {}
        self.action = action
        self.asked: list[types.ElicitRequestParams] = []
        self.on_url: Callable[[types.ElicitRequestURLParams], Awaitable[None]] | None = None

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)  # type: ignore[arg-type]
        if isinstance(params, types.ElicitRequestURLParams):
            if self.on_url is not None:
                await self.on_url(params)
            return types.ElicitResult(action="accept")
        content: dict[str, Any] = {}
        for key, prop in params.requested_schema["properties"].items():
            if key in self.answers:
                content[key] = self.answers[key]
            elif key == CONFIRM_FIELD:
                content[key] = True
            elif key == "fixed:action_name":
                content[key] = "save my note"
            elif key == "fixed:timing":
                content[key] = "immediate"
            elif "default" in prop:
                content[key] = prop["default"]
        return types.ElicitResult(action="accept", content=content)


def gateway(env: dict[str, str], argv: list[str], *, mode: str, user: Callback | None) -> Client:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(REPO))
    return Client(params, mode=mode, elicitation_callback=user, read_timeout_seconds=60)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def outcomes(status: str) -> int:
    return models.Outcome.objects.filter(status=status).count()


def audit_kinds() -> list[str]:
    return list(models.AuditEvent.objects.values_list("kind", flat=True))


@pytest.mark.parametrize("mode", MODES)
def test_tools_list_through_the_gateway_equals_the_upstream_listing(
    fs_catalog: list[dict[str, Any]],
    filesystem: Any,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    mode: str,
) -> None:
    async def both() -> tuple[list[Any], list[Any]]:
        command = filesystem.command
        direct = Client(StdioServerParameters(command=command[0], args=command[1:]), mode="auto")
        async with direct:
            upstream = (await direct.list_tools()).tools
        async with gateway(gateway_env, gateway_argv, mode=mode, user=None) as client:
            fronted = (await client.list_tools()).tools
        return upstream, fronted

    upstream, fronted = run(both)
    dump = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in upstream]
    if mode != "legacy":
        # `execution` (task support) exists only on the 2025-11-25 wire; 2026-07-28 removed it.
        dump = [{k: v for k, v in t.items() if k != "execution"} for t in dump]
    through = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in fronted]
    for mine, theirs in zip(through, dump, strict=True):
        assert mine == theirs, {
            k: (mine.get(k), theirs.get(k)) for k in {*mine, *theirs} if mine.get(k) != theirs.get(k)
        }
    assert len(dump) == 14


@pytest.mark.parametrize("mode", MODES)
def test_a_trusted_read_only_tool_returns_the_file_and_the_pass_is_recorded(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    note = scratch / "note.txt"
    note.write_text("hello from disk\n")

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=User()) as client:
            return await client.call_tool("read_text_file", {"path": str(note)})

    result = run(call)
    assert not result.is_error
    assert result.content[0].text == "hello from disk\n"  # type: ignore[union-attr]
    assert audit_kinds().count("read_only_pass") == 1
    assert models.Execution.objects.count() == 0


@pytest.mark.parametrize("mode", MODES)
def test_write_file_without_content_asks_one_form_and_writes_exactly_the_answer(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    target = scratch / "diary.txt"
    user = User({"arg:content": CONTENT})

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool("write_file", {"path": str(target)})

    result = run(call)
    assert not result.is_error, result
    assert len(user.asked) == 1
    form = user.asked[0]
    assert isinstance(form, types.ElicitRequestFormParams)
    # The model's path is shown as the default for the user to keep; the content is the user's to give.
    assert form.requested_schema["properties"]["arg:path"]["default"] == str(target)
    assert "default" not in form.requested_schema["properties"]["arg:content"]
    assert target.read_bytes() == CONTENT.encode()
    assert outcomes("executed") == 1
    execution = models.Execution.objects.get()
    assert result.meta is not None and result.meta[META_RECORD]["id"] == str(execution.pk)
    answers = dict(models.Answer.objects.values_list("slot_key", "value"))
    assert answers["arg:content"] == CONTENT and answers["arg:path"] == str(target)


def test_a_tampered_request_state_is_refused_and_nothing_is_written(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    target = scratch / "diary.txt"

    async def call() -> None:
        async with gateway(gateway_env, gateway_argv, mode="2026-07-28", user=User()) as client:
            first = await client.session.call_tool(
                "write_file", {"path": str(target)}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult), first.content
            assert first.request_state is not None
            form = first.input_requests["preflight"].params  # type: ignore[index]
            assert isinstance(form, types.ElicitRequestFormParams)
            content = {
                k: p.get("default", "immediate") for k, p in form.requested_schema["properties"].items()
            }
            content.update({"arg:content": "injected", "fixed:action_name": "write", CONFIRM_FIELD: True})
            answer = types.ElicitResult(action="accept", content=content)
            state = first.request_state
            tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(
                    "write_file",
                    {"path": str(target)},
                    input_responses={"preflight": answer},
                    request_state=tampered,
                    allow_input_required=True,
                )
            assert refused.value.error.code == types.INVALID_PARAMS
            # The same state for other arguments is refused too: it is bound to the call it was minted for.
            with pytest.raises(MCPError):
                await client.session.call_tool(
                    "write_file",
                    {"path": str(scratch / "elsewhere.txt")},
                    input_responses={"preflight": answer},
                    request_state=state,
                    allow_input_required=True,
                )

    run(call)
    assert not target.exists() and not (scratch / "elsewhere.txt").exists()
    assert models.Answer.objects.count() == 0
    assert models.Outcome.objects.count() == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_form_is_recorded_and_nothing_is_written(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    mode: str,
    action: str,
) -> None:
    target = scratch / "diary.txt"
    user = User(action=action)

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool("write_file", {"path": str(target)})

    result = run(call)
    assert result.is_error
    assert "nothing was executed" in result.content[0].text  # type: ignore[union-attr]
    assert not target.exists()
    assert models.Outcome.objects.count() == 0
    assert (
        audit_kinds().count("elicitation_declined" if action == "decline" else "elicitation_cancelled") == 1
    )


@pytest.mark.parametrize("mode", MODES)
def test_move_file_is_held_for_review_by_url_and_moves_only_once_approved(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    source, destination = scratch / "draft.txt", scratch / "final.txt"
    source.write_text("draft\n")
    approver = get_user_model().objects.create_user("bea", password="x")
    seen: dict[str, Any] = {}
    user = User()

    async def review(params: types.ElicitRequestURLParams) -> None:
        seen["url"] = params.url
        seen["before"] = (source.exists(), destination.exists())

        def approve() -> None:
            execution = models.Execution.objects.get()
            seen["console_url"] = storage.record_answer(execution)["console_url"]
            latest = storage.latest_record(execution)
            execution_approve(
                execution_id=execution.pk, payload_digest_seen=latest.payload_digest, approver=approver
            )
            connection.close()  # this worker thread's own connection

        await anyio.to_thread.run_sync(approve)

    user.on_url = review

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool(
                "move_file", {"source": str(source), "destination": str(destination)}
            )

    result = run(call)
    assert not result.is_error, result
    kinds = [type(p).__name__ for p in user.asked]
    assert kinds == ["ElicitRequestFormParams", "ElicitRequestURLParams"]
    assert seen["url"].startswith("http://console.test/")
    assert seen["url"].endswith(seen["console_url"])
    assert seen["before"] == (True, False)
    assert not source.exists() and destination.read_text() == "draft\n"
    assert outcomes("executed") == 1


@pytest.mark.parametrize("mode", MODES)
def test_an_upstream_definition_changed_after_import_is_refused_before_sending(
    transactional_db: None,
    filesystem: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    mode: str,
) -> None:
    from console import connectors

    live = connectors.list_tools(filesystem.connector, timeout_s=30)
    # What the operator approved said something else: the live description is not the pinned one.
    approved = [
        {**t, "description": "Create a file. Never overwrites anything."} if t["name"] == "write_file" else t
        for t in live
    ]
    catalog_import(
        server="fs",
        tools=approved,
        annotations_trusted=True,
        connector=filesystem.connector,
        actor="user:operator",
        extensions=FS_EXTENSIONS,
    )
    target = scratch / "diary.txt"
    user = User({"arg:content": CONTENT})

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool("write_file", {"path": str(target), "content": CONTENT})

    result = run(call)
    assert result.is_error
    assert "definition changed" in result.content[0].text  # type: ignore[union-attr]
    assert user.asked == []
    assert not target.exists()
    assert models.Outcome.objects.count() == 0
    gap = models.GapRow.objects.get()
    assert (gap.cls, gap.tool, gap.slot) == ("provider_gap", "write_file", "fixed:tool")
    assert models.Execution.objects.get().verdict == "block"
    # The live definition is kept beside the pinned one for the operator to compare; it is not current.
    versions = models.ToolContract.objects.filter(name="write_file")
    assert [v.current for v in versions.order_by("pk")] == [True, False]


@pytest.mark.parametrize("mode", MODES)
def test_a_client_without_elicitation_gets_an_error_saying_what_is_missing(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    target = scratch / "diary.txt"

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=None) as client:
            return await client.call_tool("write_file", {"path": str(target)})

    result = run(call)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "no form elicitation capability" in text and "content" in text
    assert not target.exists()
    assert models.Outcome.objects.count() == 0
    assert json.loads(json.dumps(result.meta))[META_RECORD]["verdict"] == "ask"


def _upstream_pids(scratch: Path) -> set[int]:
    """The filesystem server processes serving this test's scratch directory (only this test starts any)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(scratch).encode() in argv and any(a.endswith(b"index.js") for a in argv):
            pids.add(int(proc.name))
    return pids


def test_the_upstream_session_is_kept_across_calls_and_reopened_after_it_died(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str]
) -> None:
    import os
    import signal

    note = scratch / "note.txt"
    note.write_text("kept\n")
    seen: list[set[int]] = []

    async def calls() -> list[types.CallToolResult]:
        results = []
        async with gateway(gateway_env, gateway_argv, mode="2026-07-28", user=User()) as client:
            for _ in range(2):
                results.append(await client.call_tool("read_text_file", {"path": str(note)}))
                seen.append(_upstream_pids(scratch))
            (pid,) = seen[-1]
            os.kill(pid, signal.SIGKILL)  # the upstream this test's gateway started
            for _ in range(100):
                if pid not in _upstream_pids(scratch):
                    break
                await anyio.sleep(0.05)
            results.append(await client.call_tool("read_text_file", {"path": str(note)}))
            seen.append(_upstream_pids(scratch))
        return results

    results = run(calls)
    assert [r.content[0].text for r in results] == ["kept\n"] * 3  # type: ignore[union-attr]
    assert len(seen[0]) == 1 and seen[0] == seen[1]  # one process served both calls
    assert len(seen[2]) == 1 and seen[2] != seen[1]  # a new one after the first died


@pytest.mark.parametrize("mode", MODES)
def test_the_gateway_serves_streamable_http_too(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    mode: str,
    agent_token: tuple[Any, str],
) -> None:
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [*gateway_argv, "--transport", "http", "--port", str(port)],
        env=gateway_env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, "the gateway exited"
                time.sleep(0.1)
        target = scratch / "diary.txt"
        user = User({"arg:content": CONTENT})

        async def call() -> types.CallToolResult:
            url = f"http://127.0.0.1:{port}/mcp"
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {agent_token[1]}"})
            transport = streamable_http_client(url, http_client=http)
            async with Client(
                transport, mode=mode, elicitation_callback=user, read_timeout_seconds=60
            ) as client:
                return await client.call_tool("write_file", {"path": str(target)})

        result = run(call)
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert not result.is_error, result
    assert len(user.asked) == 1
    assert target.read_bytes() == CONTENT.encode()
    assert outcomes("executed") == 1
    assert models.Execution.objects.get().token_id == agent_token[0].pk


@pytest.mark.parametrize("mode", MODES)
def test_a_question_a_form_cannot_carry_goes_by_url_to_the_requesters_page_and_nothing_is_edited(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    note = scratch / "note.txt"
    note.write_text("one\n")
    user = User()

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool("edit_file", {"path": str(note)})

    result = run(call)
    assert result.is_error
    # What a form can carry is asked in one; the edits (an array of objects) by URL, on the console.
    assert [type(p).__name__ for p in user.asked] == ["ElicitRequestFormParams", "ElicitRequestURLParams"]
    form, page = user.asked
    assert "arg:edits" not in form.requested_schema["properties"]  # type: ignore[union-attr]
    execution = models.Execution.objects.get()
    assert page.url == f"http://console.test/executions/{execution.pk}/answers/"  # type: ignore[union-attr]
    assert "Still waiting for the answers" in result.content[0].text  # type: ignore[union-attr]
    assert note.read_text() == "one\n"
    assert models.Outcome.objects.count() == 0


@pytest.mark.parametrize("mode", MODES)
def test_the_edits_answered_on_the_requesters_page_are_exactly_what_runs(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    from django.test import Client as Browser

    note = scratch / "note.txt"
    note.write_text("one\n")
    alice = get_user_model().objects.create_user("alice", password="x")
    user = User()

    async def answer_on_the_page(params: types.ElicitRequestURLParams) -> None:
        def post() -> None:
            browser = Browser()
            browser.force_login(alice)
            path = params.url.removeprefix("http://console.test")
            assert "arg:edits" in browser.get(path).content.decode()
            edits = json.dumps([{"oldText": "one", "newText": "two"}])
            browser.post(path, {"slot": "arg:edits", "value": edits})
            connection.close()

        await anyio.to_thread.run_sync(post)

    user.on_url = answer_on_the_page

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool("edit_file", {"path": str(note)})

    result = run(call)
    assert not result.is_error, result
    # The form, the page, then the confirmation of the whole call (the edits were not in the form).
    assert [type(p).__name__ for p in user.asked] == [
        "ElicitRequestFormParams",
        "ElicitRequestURLParams",
        "ElicitRequestFormParams",
    ]
    assert note.read_text() == "two\n"
    assert outcomes("executed") == 1
    edits = models.Answer.objects.get(slot_key="arg:edits")
    assert (edits.value, edits.answered_by) == ([{"oldText": "one", "newText": "two"}], PRINCIPAL)


def test_a_call_whose_answer_is_lost_is_recorded_outcome_unknown_and_never_sent_again(
    transactional_db: None, gateway_env: dict[str, str], gateway_argv: list[str], settings: Any
) -> None:
    import shlex
    import sys

    from console import connectors

    # The demo bookstore acts, then answers 3 s later; the gateway waits 1 s for it.
    command = [sys.executable, "-m", "console.demo.bookstore", "--reply-delay-s", "3"]
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [command]
    connector = {"kind": "mcp_stdio", "command": command, "timeout_s": 1}
    catalog_import(
        server="bookstore",
        tools=connectors.list_tools(connector, timeout_s=30),
        annotations_trusted=True,
        connector=connector,
        actor="user:operator",
    )
    env = {**gateway_env, "PREFLIGHT_MCP_STDIO_ALLOW": shlex.join(command)}
    text = "Please order the book with ISBN 9780131103627 now."

    def at(part: str) -> dict[str, int]:
        return {"turn": 0, "start": text.index(part), "end": text.index(part) + len(part)}

    meta = {
        "dev.preflight/conversation": [{"role": "user", "content": text, "trusted": True}],
        "dev.preflight/pointers": {"isbn": at("9780131103627")},
        "dev.preflight/action_name": at("order"),
        "dev.preflight/timing": {"mode": "immediate", "pointer": at("now")},
    }

    async def call() -> types.CallToolResult:
        async with gateway(
            env, [*gateway_argv, "--server", "bookstore"], mode="2026-07-28", user=User()
        ) as c:
            return await c.call_tool("order_book", {"isbn": "9780131103627"}, meta=meta)  # type: ignore[arg-type]

    result = run(call)
    assert result.is_error
    assert "not retried" in result.content[0].text  # type: ignore[union-attr]
    assert list(models.Outcome.objects.values_list("status", flat=True)) == ["outcome_unknown"]
    assert audit_kinds().count("run") == 1


def test_the_gateway_declares_no_roots_to_the_upstream(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], tmp_path: Path
) -> None:
    from mcp.client.stdio import stdio_client

    note = scratch / "note.txt"
    note.write_text("sandboxed\n")
    params = StdioServerParameters(
        command=gateway_argv[0], args=gateway_argv[1:], env=gateway_env, cwd=str(REPO)
    )

    async def call() -> types.CallToolResult:
        with open(tmp_path / "gateway-stderr.log", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="2026-07-28") as client:
                return await client.call_tool("read_text_file", {"path": str(note)})

    result = run(call)
    assert result.content[0].text == "sandboxed\n"  # type: ignore[union-attr]
    # The filesystem server says which sandbox it uses: with roots declared it would take the client's.
    log = (tmp_path / "gateway-stderr.log").read_text()
    assert "Client does not support MCP Roots, using allowed directories set from server args" in log


@pytest.mark.parametrize("mode", MODES)
def test_a_destructive_call_the_user_does_not_confirm_writes_nothing(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    target = scratch / "diary.txt"
    user = User({"arg:content": CONTENT, CONFIRM_FIELD: False})

    async def call() -> types.CallToolResult:
        async with gateway(gateway_env, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool("write_file", {"path": str(target)})

    result = run(call)
    assert result.is_error
    assert "nothing was executed" in result.content[0].text  # type: ignore[union-attr]
    # The form's yes was not given, so the call was put to the user once more, alone, and refused there.
    assert len(user.asked) == 2
    assert list(user.asked[1].requested_schema["properties"]) == [CONFIRM_FIELD]  # type: ignore[union-attr]
    assert not target.exists()
    assert models.Outcome.objects.count() == 0
    assert audit_kinds().count("elicitation_declined") == 1


def _bookstore(settings: Any, gateway_env: dict[str, str]) -> dict[str, str]:
    """The demo bookstore imported and allowed; the environment of a gateway in front of it."""
    import shlex
    import sys

    from console import connectors

    command = [sys.executable, "-m", "console.demo.bookstore"]
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [command]
    connector = {"kind": "mcp_stdio", "command": command}
    catalog_import(
        server="bookstore",
        tools=connectors.list_tools(connector, timeout_s=30),
        annotations_trusted=True,
        connector=connector,
        actor="user:operator",
    )
    return {**gateway_env, "PREFLIGHT_MCP_STDIO_ALLOW": shlex.join(command)}


@pytest.mark.parametrize("mode", MODES)
def test_a_call_for_a_later_time_is_deferred_with_when_and_how_to_check_and_nothing_is_sent(
    transactional_db: None,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    settings: Any,
    agent_token: tuple[Any, str],
    mode: str,
) -> None:
    from datetime import UTC, datetime, timedelta

    from django.test import Client as Browser

    env = _bookstore(settings, gateway_env)
    text = "Please order the book with ISBN 9780131103627 tomorrow at nine."
    at = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)

    def span(part: str) -> dict[str, int]:
        return {"turn": 0, "start": text.index(part), "end": text.index(part) + len(part)}

    meta = {
        "dev.preflight/conversation": [{"role": "user", "content": text, "trusted": True}],
        "dev.preflight/pointers": {"isbn": span("9780131103627")},
        "dev.preflight/action_name": span("order"),
        "dev.preflight/timing": {"mode": "at", "at": at.isoformat(), "pointer": span("tomorrow at nine")},
    }
    user = User()

    async def call() -> types.CallToolResult:
        async with gateway(env, [*gateway_argv, "--server", "bookstore"], mode=mode, user=user) as c:
            return await c.call_tool("order_book", {"isbn": "9780131103627"}, meta=meta)  # type: ignore[arg-type]

    result = run(call)
    # Not an error: the user asked for later. It says when it is looked at again and where to check.
    assert not result.is_error, result
    assert user.asked == []
    execution = models.Execution.objects.get()
    assert execution.verdict == "deferred" and execution.timing_at == at
    record = json.loads(json.dumps(result.meta))[META_RECORD]
    api = f"http://console.test/api/v1/executions/{execution.pk}"
    assert record == {
        "id": str(execution.pk),
        "verdict": "deferred",
        "console_url": f"http://console.test/executions/{execution.pk}/",
        "timing_at": at.isoformat(),
        "api_url": api,
    }
    words = result.content[0].text  # type: ignore[union-attr]
    assert at.isoformat() in words and f"GET {api}" in words and "nothing ran now" in words
    assert models.Outcome.objects.count() == 0
    assert audit_kinds().count("run") == 0
    # The check it names works with the agent's own token.
    seen = Browser().get(
        api.removeprefix("http://console.test"), HTTP_AUTHORIZATION=f"Bearer {agent_token[1]}"
    )
    assert seen.status_code == 200 and seen.json()["verdict"] == "deferred"


def test_lookups_still_running_after_the_wait_answer_2026_with_only_the_state_and_the_retry_resumes(
    transactional_db: None,
    filesystem: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    settings: Any,
) -> None:
    import http.server
    import threading
    from datetime import UTC, datetime

    from console import connectors, tasks
    from console.egress import parse_allowed_hosts

    class Lookup(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            now = datetime.now(UTC).isoformat()
            raw = json.dumps({"value": 10_000, "observed_at": now}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    lookups = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Lookup)
    threading.Thread(target=lookups.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{lookups.server_address[1]}"
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts([host])
    measure_create(name="disk.free", kind="http", url=f"http://{host}/", actor="user:operator")
    # write_file also needs the free space on the disk, looked up by a worker: none runs for this gateway.
    extensions = {
        **FS_EXTENSIONS,
        "write_file": {
            **FS_EXTENSIONS["write_file"],
            "measures": {"free": {"lookup": "disk.free", "args": {"path": "arg:path"}, "max_age_s": 60}},
            "conditions": [{"id": "room_on_disk", "check": "measure.free >= 0", "on_false": "hold"}],
        },
    }
    catalog_import(
        server="fs",
        tools=connectors.list_tools(filesystem.connector, timeout_s=30),
        annotations_trusted=True,
        connector=filesystem.connector,
        actor="user:operator",
        extensions=extensions,
    )
    target = scratch / "diary.txt"
    text = f"Write hello into {target} now."

    def span(part: str) -> dict[str, int]:
        return {"turn": 0, "start": text.index(part), "end": text.index(part) + len(part)}

    meta = {
        "dev.preflight/conversation": [{"role": "user", "content": text, "trusted": True}],
        "dev.preflight/pointers": {"path": span(str(target)), "content": span("hello")},
        "dev.preflight/action_name": span("Write"),
        "dev.preflight/timing": {"mode": "immediate", "pointer": span("now")},
    }
    env = {**gateway_env, "PREFLIGHT_EAGER_TASKS": "0", "PREFLIGHT_HTTP_ALLOW": host}
    seen: dict[str, Any] = {}
    arguments = {"path": str(target), "content": "hello"}

    async def calls() -> tuple[Any, Any, Any]:
        async with gateway(env, gateway_argv, mode="2026-07-28", user=User()) as c:
            first = await c.session.call_tool("write_file", arguments, meta=meta, allow_input_required=True)  # type: ignore[arg-type]
            assert isinstance(first, types.InputRequiredResult), first.content
            again = await c.session.call_tool(
                "write_file", arguments, request_state=first.request_state, allow_input_required=True
            )
            assert isinstance(again, types.InputRequiredResult)

            def look_up() -> None:
                # What a worker would do with the queued task: every pending lookup of the execution.
                execution = models.Execution.objects.get()
                keys = list(
                    models.Observation.objects.filter(execution=execution).values_list("key", flat=True)
                )
                tasks._run_lookups(str(execution.pk), keys)
                seen["rows"] = list(models.Observation.objects.filter(execution=execution).values())
                connection.close()

            await anyio.to_thread.run_sync(look_up)
            after = await c.session.call_tool(
                "write_file", arguments, request_state=again.request_state, allow_input_required=True
            )
            return first, again, after

    try:
        first, again, after = run(calls)
    finally:
        lookups.shutdown()
    # Still running after the wait: no question, only the state to come back with; nothing was written.
    for waiting in (first, again):
        assert not waiting.input_requests
        assert waiting.request_state
    # Looked up: the same call goes on through the gate (the trusted destructiveHint's confirmation).
    assert isinstance(after, types.InputRequiredResult)
    assert after.input_requests, seen
    confirm = after.input_requests["preflight"].params
    assert isinstance(confirm, types.ElicitRequestFormParams), models.Execution.objects.get().verdict
    assert list(confirm.requested_schema["properties"]) == [CONFIRM_FIELD]  # type: ignore[union-attr]
    assert not target.exists()
    assert models.Outcome.objects.count() == 0
