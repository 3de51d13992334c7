"""`manage.py demo` (what `make demo` runs): the first-run demo, embedded (SQLite, lookups in-process).

Migrates, loads the demo catalog from the demo MCP servers in console/demo/ (the bank over streamable HTTP,
the others over stdio), lets the scripted agent (console/demo/agent.py) call them through the MCP gateway,
then serves the console and the gateway (streamable HTTP) and prints where, the demo users and the MCP
client configuration. Ctrl-C (or SIGTERM) stops everything it started.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.env import env_hosts
from console import connectors, models
from console.api.auth import active_token
from console.demo import agent
from console.gateway import auth
from console.services.catalog import catalog_import
from console.services.measures import measure_create
from console.services.tokens import agent_token_create
from console.web.access import ROLES

REPO = Path(__file__).resolve().parents[3]
MANAGE = str(REPO / "manage.py")
# The gateway acting for the demo's requester (served over HTTP here, over stdio in the printed config).
GATEWAY = [MANAGE, "mcp_gateway", "--principal", agent.REQUESTER]
# One user per role, and the requester the agent acts for. Published passwords: embedded demo only.
USERS = {
    "requester": ("demo-requester", ()),
    "approver": ("demo-approver", ("approver",)),
    "operator": ("demo-operator", ("operator",)),
    "auditor": ("demo-auditor", ("auditor",)),
}
STDIO_SERVERS = {
    "bookstore": (["-m", "console.demo.bookstore"], True),
    "mail": (["-m", "console.demo.mail"], True),
    "home-lumen": (["-m", "console.demo.home", "--provider", "lumen"], False),
    "home-homebase": (["-m", "console.demo.home", "--provider", "homebase"], False),
    "home-tips": (["-m", "console.demo.home", "--provider", "tips"], False),
}


class Command(BaseCommand):
    help = "Run the first-run demo: catalog, scripted agent through the MCP gateway, console and gateway."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="the console")
        parser.add_argument(
            "--gateway-port", type=int, default=8766, help="the MCP gateway (streamable HTTP)"
        )
        parser.add_argument("--bank-port", type=int, default=8765, help="the demo bank's MCP server")
        parser.add_argument("--no-serve", action="store_true", help="load and drive the demo, then stop")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG or not settings.EMBEDDED:
            raise CommandError("the demo runs embedded only (no DATABASE_URL), where DEBUG is on")
        call_command("migrate", interactive=False, verbosity=0)
        children: list[subprocess.Popen[bytes]] = []
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        # The demo's own loopback servers are what this deployment may reach (the defaults name the default
        # ports); the children read the same variable.
        hosts = [f"127.0.0.1:{options['bank_port']}", f"127.0.0.1:{options['gateway_port']}"]
        os.environ["PREFLIGHT_HTTP_ALLOW"] = ",".join(
            dict.fromkeys([*filter(None, os.environ.get("PREFLIGHT_HTTP_ALLOW", "").split(",")), *hosts])
        )
        settings.PREFLIGHT_HTTP_ALLOW = env_hosts("PREFLIGHT_HTTP_ALLOW", [])
        try:
            bank_url = f"http://127.0.0.1:{options['bank_port']}/mcp"
            children.append(
                _start("-m", "console.demo.bank", "--transport", "http", "--port", str(options["bank_port"]))
            )
            _wait_for_port(options["bank_port"], children[-1])
            self.seed_users()
            token_file = self.agent_token()
            base = f"http://127.0.0.1:{options['port']}"
            # The scripted agent's gateway links to the console this demo serves (a hold's review page).
            os.environ["PREFLIGHT_PUBLIC_URL"] = base
            if not models.Server.objects.filter(name="bookstore").exists():
                self.seed_catalog(bank_url)
                self.drive()
            else:
                self.stdout.write("demo: already loaded (delete var/ to start over)")
            if options["no_serve"]:
                return
            children.append(_start(MANAGE, "runserver", "--noreload", f"127.0.0.1:{options['port']}"))
            gateway_port = str(options["gateway_port"])
            children.append(_start(*GATEWAY, "--transport", "http", "--port", gateway_port))
            _wait_for_port(options["port"], children[-2])
            _wait_for_port(options["gateway_port"], children[-1])
            self.banner(base, options["gateway_port"], token_file)
            while not stop.is_set():
                for child in children:
                    _still_running(child)
                stop.wait(0.5)
            self.stdout.write("demo: stopping")
        finally:
            for child in reversed(children):
                _stop(child)

    def seed_users(self) -> None:
        users = get_user_model().objects
        for role in ROLES:
            Group.objects.get_or_create(name=role)
        for name, (password, roles) in USERS.items():
            user = users.filter(username=name).first() or users.create_user(name, password=password)
            user.groups.add(*Group.objects.filter(name__in=roles))

    def agent_token(self) -> Path:
        """The demo agent's token (acting for the requester only), kept in var/ for the stdio client
        configuration's --token-file; a new one when the file is gone or its token revoked. The gateway
        acts as this token, over stdio from the environment, over HTTP from each request."""
        path = settings.VAR_DIR / "demo-agent-token"
        secret = path.read_text().strip() if path.exists() else ""
        if not secret or active_token(secret) is None:
            secret = agent_token_create(name="demo-agent", principals=[agent.REQUESTER])[1]
            path.touch(mode=0o600)
            path.write_text(secret + "\n")
        os.environ[auth.TOKEN_ENV] = secret  # the scripted agent's stdio gateway
        return path

    def seed_catalog(self, bank_url: str) -> None:
        """What an operator does once: list each demo server and import it (with its connector), and register
        the balance lookup as a read-only MCP tool of the bank."""
        bank = {"kind": "mcp_http", "url": bank_url}
        imports: list[tuple[str, Mapping[str, object], bool]] = [("bank", bank, True)]
        imports += [
            (name, {"kind": "mcp_stdio", "command": [sys.executable, *argv]}, trusted)
            for name, (argv, trusted) in STDIO_SERVERS.items()
        ]
        for server, connector, trusted in imports:
            tools = connectors.list_tools(connector, timeout_s=30)
            catalog_import(
                server=server,
                tools=tools,
                annotations_trusted=trusted,
                connector=connector,
                actor="user:operator",
            )
        measure_create(
            name="bank.balance",
            kind="mcp",
            timeout_s=5,
            config={"connector": bank, "tool": "get_balance", "field": "balance"},
            actor="user:operator",
        )
        self.stdout.write(f"catalog: {', '.join(s for s, _, _ in imports)} (demo MCP servers)")

    def drive(self) -> None:
        def report(outcome: agent.Outcome) -> None:
            done = f", {outcome.outcome}" if outcome.outcome else ""
            ran = f" by {outcome.tool}" if outcome.tool else ""
            self.stdout.write(
                f"  {outcome.verdict:<9} {outcome.turns} user turn(s){done}{ran}  — {outcome.scenario}"
                f"  {outcome.console_url or ''}"
            )

        self.stdout.write("scripted agent, through the MCP gateway:")
        agent.run_through_gateway(report)
        agent.run_lookup_in_flight(report)

    def banner(self, base: str, gateway_port: int, token_file: Path) -> None:
        secret = token_file.read_text().strip()
        gateway = {
            "mcpServers": {
                "preflight": {
                    "command": sys.executable,
                    "args": [*GATEWAY, "--token-file", str(token_file)],
                    "env": {"PREFLIGHT_PUBLIC_URL": base},
                }
            }
        }
        over_http = {
            "mcpServers": {
                "preflight": {
                    "url": f"http://127.0.0.1:{gateway_port}/mcp",
                    "headers": {"Authorization": f"Bearer {secret}"},
                }
            }
        }
        lines = [
            "",
            f"Preflight demo: {base}/  (queue: {base}/executions/)",
            "",
            "Sign in as:",
            *(
                f"  {name:<10} password {pw:<16} {' '.join(roles) or 'requester (the agent acts for them)'}"
                for name, (pw, roles) in USERS.items()
            ),
            "",
            f"MCP gateway (streamable HTTP): http://127.0.0.1:{gateway_port}/mcp",
            f"Demo agent token (acts for {agent.REQUESTER} only): {token_file}",
            "MCP client configuration (Claude Desktop, Cursor: stdio):",
            json.dumps(gateway, indent=2),
            "Or over streamable HTTP (clients that take a URL and headers):",
            json.dumps(over_http, indent=2),
            "",
            "Ctrl-C stops the demo.",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()


def _start(*argv: str) -> subprocess.Popen[bytes]:
    """A Python child of this interpreter, in the repository, with this process's environment."""
    return subprocess.Popen([sys.executable, *argv], cwd=REPO, stdin=subprocess.DEVNULL)


def _still_running(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        # Always an argv list (see _start).
        command = shlex.join(map(str, child.args)) if isinstance(child.args, list) else str(child.args)
        raise CommandError(f"demo: {command} exited ({child.returncode})")


def _wait_for_port(port: int, child: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _still_running(child)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise CommandError(f"demo: nothing answers on port {port} after {timeout_s}s")


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
