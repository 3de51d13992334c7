"""`manage.py mcp_gateway --principal user:alice`: the MCP gateway, over stdio (default) or streamable HTTP.

It fronts the catalog's MCP servers (every server whose connector an operator set to `mcp_stdio` or
`mcp_http`, or those named with `--server`), keeps one session open to each, and preflights every call.
Nothing is printed to standard output: over stdio that is the protocol's channel.

It acts as an agent token (console/gateway/auth.py): over HTTP each request's `Authorization: Bearer`, over
stdio `PREFLIGHT_AGENT_TOKEN` or `--token-file` (never an argument: command lines are public in `ps`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console import connectors, models
from console.gateway import auth
from console.gateway.server import Gateway
from console.gateway.upstream import Upstream, UpstreamConfig

MCP_KINDS = ("mcp_stdio", "mcp_http")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Command(BaseCommand):
    help = "Serve the MCP gateway: every tools/call preflighted, the user asked by elicitation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--principal", required=True, help="the user this gateway acts for (user:NAME)")
        parser.add_argument(
            "--server", action="append", default=[], help="a catalog server to front (repeat)"
        )
        parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="HTTP: address to bind (loopback by default; elsewhere put TLS in front: tokens cross it)",
        )
        parser.add_argument(
            "--token-file",
            type=Path,
            help=f"stdio: a file with the agent token (else ${auth.TOKEN_ENV}); HTTP requests send their own",
        )
        parser.add_argument("--port", type=int, default=8766)
        parser.add_argument("--public-url", help="the console's URL (PREFLIGHT_PUBLIC_URL)")

    def handle(self, *args: Any, **options: Any) -> None:
        principal = options["principal"]
        if not principal.startswith("user:") or len(principal) <= len("user:"):
            raise CommandError("--principal: user:NAME")
        token = None
        if options["transport"] == "stdio":
            token = _stdio_token(options["token_file"])
            try:
                auth.check(token, principal)  # refused before any upstream is started
            except auth.TokenRefused as exc:
                raise CommandError(f"{exc.kind}: {exc.detail}") from None
        elif options["token_file"] is not None:
            raise CommandError("--token-file is for stdio; over HTTP every request carries its own token")
        rows = models.Server.objects.filter(connector__kind__in=MCP_KINDS).order_by("name")
        if options["server"]:
            rows = rows.filter(name__in=options["server"])
            missing = set(options["server"]) - {r.name for r in rows}
            if missing:
                raise CommandError(
                    f"--server: no MCP server named {', '.join(sorted(missing))} in the catalog"
                )
        upstreams = [
            Upstream(
                UpstreamConfig(
                    server=row.name,
                    connector=dict(row.connector),
                    timeout_s=float(row.connector.get("timeout_s") or settings.PREFLIGHT_TOOL_TIMEOUT_S),
                )
            )
            for row in rows
        ]
        if not upstreams:
            raise CommandError("no MCP server in the catalog to front; an operator imports one first")
        gateway = Gateway(upstreams, principal=principal, public_url=options["public_url"], token=token)
        try:
            anyio.run(_serve, gateway, options["transport"], options["host"], options["port"])
        except connectors.ToolCallFailed as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            pass


def _stdio_token(path: Path | None) -> str | None:
    if path is None:
        return os.environ.get(auth.TOKEN_ENV)
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise CommandError(f"--token-file: {exc.strerror}: {path}") from None


async def _serve(gateway: Gateway, transport: str, host: str, port: int) -> None:
    async with anyio.create_task_group() as tg:
        await gateway.open(tg)
        server = gateway.server()
        try:
            if transport == "stdio":
                from mcp.server.stdio import stdio_server

                async with stdio_server() as (read_stream, write_stream):
                    await server.run(read_stream, write_stream, server.create_initialization_options())
            else:
                import uvicorn
                from mcp.server.auth.settings import AuthSettings
                from pydantic import AnyHttpUrl

                if host not in LOOPBACK:
                    print(
                        f"mcp gateway: bound to {host}, not loopback: agent tokens cross the network, put TLS"
                        " in front",
                        file=sys.stderr,
                        flush=True,
                    )
                # Every request is authenticated by the SDK's bearer middleware against the agent tokens; an
                # MCP session is bound to the token that opened it.
                app = server.streamable_http_app(
                    host=host,
                    auth=AuthSettings(
                        # No OAuth here: the console issues the tokens (manage.py create_agent_token).
                        issuer_url=AnyHttpUrl(gateway.public_url or "http://127.0.0.1"),
                        resource_server_url=None,
                        required_scopes=[auth.AGENT_SCOPE],
                    ),
                    token_verifier=auth.AgentTokenVerifier(),
                )
                config = uvicorn.Config(app, host=host, port=port, log_level="warning")
                print(f"mcp gateway: http://{host}:{port}/mcp", file=sys.stderr, flush=True)
                await uvicorn.Server(config).serve()
        finally:
            await gateway.close()
            tg.cancel_scope.cancel()
