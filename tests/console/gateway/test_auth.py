"""The gateway acts as an agent token, as the REST API does: over streamable HTTP each request's bearer
token, over stdio the one it was started with, checked at every call. A refusal sends nothing upstream."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from django.contrib.auth import get_user_model
from django.test import Client as Browser
from django.utils import timezone
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from console import models
from console.gateway.auth import TOKEN_ENV
from console.services.tokens import agent_token_create, operator_token_create

from .conftest import PRINCIPAL, REPO
from .test_server import CONTENT, User, run

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}


@contextmanager
def http_gateway(env: dict[str, str], argv: list[str]) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [*argv, "--transport", "http", "--port", str(port)],
        env={k: v for k, v in env.items() if k != TOKEN_ENV},  # over HTTP the requests carry it
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
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=20)


def client(url: str, secret: str, *, mode: str = "2026-07-28", user: Any = None) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {secret}"})
    return Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        elicitation_callback=user,
        read_timeout_seconds=60,
    )


def operator_secret() -> str:
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user("olga", password="x")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return operator_token_create(name="olgas-token", username="olga")[1]


def revoke(token: models.AgentToken) -> None:
    models.AgentToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())


def nothing_happened(scratch: Path, before: set[Path]) -> None:
    assert set(scratch.iterdir()) == before
    assert models.Execution.objects.count() == 0
    assert models.Outcome.objects.count() == 0
    assert not models.AuditEvent.objects.filter(kind="read_only_pass").exists()


def test_over_http_a_missing_unknown_revoked_or_operator_token_is_refused_before_the_mcp_layer(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    agent_token: tuple[models.AgentToken, str],
) -> None:
    revoked_row, revoked = agent_token_create(name="old", principals=[PRINCIPAL])
    revoke(revoked_row)
    operator = operator_secret()
    before = set(scratch.iterdir())
    with http_gateway(gateway_env, gateway_argv) as url:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        answers = {}
        for case, auth in {
            "missing": None,
            "unknown": "Bearer pfa_not-a-token",
            "revoked": f"Bearer {revoked}",
            "operator": f"Bearer {operator}",
        }.items():
            sent = {**headers, **({"Authorization": auth} if auth else {})}
            answers[case] = httpx2.post(url, json=INITIALIZE, headers=sent, timeout=30)
        good = httpx2.post(
            url, json=INITIALIZE, headers={**headers, "Authorization": f"Bearer {agent_token[1]}"}
        )
    for case in ("missing", "unknown", "revoked"):
        assert answers[case].status_code == 401, case
        assert answers[case].json()["error"] == "invalid_token"
        assert answers[case].headers["www-authenticate"].startswith("Bearer ")
    # An operator's token is a person's credential: it configures the gate and submits nothing.
    assert answers["operator"].status_code == 403
    assert answers["operator"].json() == {
        "error": "insufficient_scope",
        "error_description": "Required scope: agent",
    }
    assert good.status_code == 200
    nothing_happened(scratch, before)


def test_over_http_a_token_revoked_mid_session_is_refused_at_its_next_call(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    agent_token: tuple[models.AgentToken, str],
) -> None:
    note = scratch / "note.txt"
    note.write_text("before\n")
    target = scratch / "diary.txt"
    with http_gateway(gateway_env, gateway_argv) as url:

        async def calls() -> tuple[types.CallToolResult, BaseException | None]:
            async with client(url, agent_token[1]) as c:
                first = await c.call_tool("read_text_file", {"path": str(note)})
                await anyio_db(revoke, agent_token[0])
                try:
                    await c.call_tool("write_file", {"path": str(target), "content": CONTENT})
                except Exception as exc:  # the transport's 401, as the client reports it
                    return first, exc
                return first, None

        first, refused = run(calls)
    assert first.content[0].text == "before\n"  # type: ignore[union-attr]
    assert refused is not None
    assert not target.exists()
    assert models.Execution.objects.count() == 0


async def anyio_db(fn: Any, *args: Any) -> None:
    import anyio.to_thread
    from django.db import connection

    def job() -> None:
        fn(*args)
        connection.close()

    await anyio.to_thread.run_sync(job)


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_token_that_may_not_act_for_the_principal_gets_a_forbidden_error_and_nothing_is_sent(
    fs_catalog: Any, scratch: Path, gateway_env: dict[str, str], gateway_argv: list[str], transport: str
) -> None:
    _, bobs = agent_token_create(name="bobs-agent", principals=["user:bob"])
    target = scratch / "diary.txt"
    before = set(scratch.iterdir())

    async def call(c: Client) -> MCPError:
        with pytest.raises(MCPError) as refused:
            await c.call_tool("write_file", {"path": str(target), "content": CONTENT})
        return refused.value

    if transport == "http":
        with http_gateway(gateway_env, gateway_argv) as url:

            async def over_http() -> MCPError:
                async with client(url, bobs) as c:
                    return await call(c)

            error = run(over_http)
        assert error.error.data == {
            "error": "forbidden",
            "detail": f"this token may not act for principal {PRINCIPAL!r}",
        }
    else:
        # Over stdio the token is checked at start: the gateway refuses to start, no upstream is opened.
        env = {**gateway_env, TOKEN_ENV: bobs}
        done = subprocess.run(gateway_argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0
        assert f"forbidden: this token may not act for principal {PRINCIPAL!r}" in done.stderr
    nothing_happened(scratch, before)


@pytest.mark.parametrize("case", ["missing", "unknown", "revoked", "operator"])
def test_over_stdio_a_bad_token_stops_the_gateway_before_any_upstream_starts(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    agent_token: tuple[models.AgentToken, str],
    case: str,
) -> None:
    env = dict(gateway_env)
    if case == "missing":
        del env[TOKEN_ENV]
    elif case == "unknown":
        env[TOKEN_ENV] = "pfa_not-a-token"
    elif case == "revoked":
        revoke(agent_token[0])
    else:
        env[TOKEN_ENV] = operator_secret()
    before = set(scratch.iterdir())
    done = subprocess.run(gateway_argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    expected = {
        "missing": "unauthenticated: no agent token",
        "unknown": "unauthenticated: unknown or revoked token",
        "revoked": "unauthenticated: unknown or revoked token",
        "operator": "forbidden: this gateway is for agent tokens",
    }[case]
    assert expected in done.stderr
    # The filesystem server logs its sandbox on start: it never started.
    assert "Secure MCP Filesystem Server" not in done.stderr
    nothing_happened(scratch, before)


def test_over_stdio_the_token_comes_from_a_file_and_a_revocation_refuses_the_next_call(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    agent_token: tuple[models.AgentToken, str],
    tmp_path: Path,
) -> None:
    secret = tmp_path / "token"
    secret.write_text(agent_token[1] + "\n")
    env = {k: v for k, v in gateway_env.items() if k != TOKEN_ENV}
    argv = [*gateway_argv, "--token-file", str(secret)]
    note = scratch / "note.txt"
    note.write_text("before\n")
    target = scratch / "diary.txt"

    async def calls() -> tuple[types.CallToolResult, MCPError]:
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(REPO))
        async with Client(params, mode="2026-07-28", elicitation_callback=User()) as c:
            first = await c.call_tool("read_text_file", {"path": str(note)})
            await anyio_db(revoke, agent_token[0])
            with pytest.raises(MCPError) as refused:
                await c.call_tool("write_file", {"path": str(target), "content": CONTENT})
            return first, refused.value

    first, refused = run(calls)
    assert first.content[0].text == "before\n"  # type: ignore[union-attr]
    assert refused.error.data == {"error": "unauthenticated", "detail": "unknown or revoked token"}
    assert not target.exists()
    assert models.Execution.objects.count() == 0


def test_gateway_executions_belong_to_the_token_and_only_it_sees_them_through_the_rest_api(
    fs_catalog: Any,
    scratch: Path,
    gateway_env: dict[str, str],
    gateway_argv: list[str],
    agent_token: tuple[models.AgentToken, str],
) -> None:
    _, other = agent_token_create(name="other-agent", principals=[PRINCIPAL])
    target = scratch / "diary.txt"
    with http_gateway(gateway_env, gateway_argv) as url:

        async def call() -> types.CallToolResult:
            async with client(url, agent_token[1], user=User({"arg:content": CONTENT})) as c:
                return await c.call_tool("write_file", {"path": str(target)})

        result = run(call)
    assert not result.is_error, result
    execution = models.Execution.objects.get()
    assert execution.token_id == agent_token[0].pk
    api = Browser()
    mine = api.get(f"/api/v1/executions/{execution.pk}", HTTP_AUTHORIZATION=f"Bearer {agent_token[1]}")
    theirs = api.get(f"/api/v1/executions/{execution.pk}", HTTP_AUTHORIZATION=f"Bearer {other}")
    assert mine.status_code == 200 and mine.json()["verdict"] == "execute"
    assert theirs.status_code == 404
