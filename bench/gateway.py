"""The MCP gateway: what it adds to a call, and how many times it turns to the user.

    .venv/bin/python bench/gateway.py                 # 200 passing calls, 50 ask rounds, the demo scenarios
    .venv/bin/python bench/gateway.py --calls 500 --asks 100

Self-contained: a scratch PostgreSQL database (`--sqlite`: a SQLite file; lookups in-process), the real npm
filesystem server (tests/console/gateway/js, installed by .ci/node) in a scratch directory, the demo
servers, and the gateway as a real `manage.py mcp_gateway` process over stdio, driven by the official
Python client (protocol 2026-07-28). Nothing of it outlives the run.

1. Added latency, p50/p99: each call through the gateway against the same call made directly on a kept
   session to the same upstream (the gateway keeps its own), one at a time:
   - a passing read-only call (`read_text_file`, annotations trusted: passes without the gate, recorded);
   - a passing gated call (`order_book` with the ISBN, the action and the timing pointed at in `_meta`:
     preflight, record, grant, run, outcome);
   - an ask round (`write_file` without content: preflight, one form, the answer recorded, preflight
     again, grant, run; the scripted user answers at once, so this is the gateway's own time).
2. User turns per execution over the demo scenarios (console/demo/agent.py) and a few with more blanks:
   the gateway's turns (one form per frontier, a confirmation, a URL round) against asking one question
   per blank (every question answered, each confirmation and URL round counted once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FS_SERVER = (
    REPO / "tests/console/gateway/js/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DB = "preflight_bench_gateway"


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def setup(tmp: Path, *, sqlite: bool) -> dict[str, str]:
    if sqlite:
        url = f"sqlite:///{tmp / 'bench.sqlite3'}"
    else:
        admin(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
        admin(f'CREATE DATABASE "{PG_DB}"')
        url = f"postgres://postgres@127.0.0.1:5432/{PG_DB}"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "DATABASE_URL": url,
        # Lookups in-process: the demo transfer's balance lookup runs inside the call, as in embedded mode.
        "PREFLIGHT_EAGER_TASKS": "1",
        "PREFLIGHT_SECRET_KEY": "bench-only-not-a-secret",
        "PREFLIGHT_SIGNING_KEY_PATH": str(tmp / "grant.pem"),
        "PREFLIGHT_LOG_LEVEL": "ERROR",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    os.environ.update(env)
    if not FS_SERVER.exists():
        subprocess.run(["bash", str(REPO / ".ci/node")], check=True)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="passing calls per kind")
    parser.add_argument("--asks", type=int, default=50, help="ask rounds")
    parser.add_argument("--sqlite", action="store_true", help="a scratch SQLite file (embedded) instead")
    options = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    bank = None
    try:
        env = setup(tmp, sqlite=options.sqlite)
        scratch = tmp / "scratch"
        scratch.mkdir()
        node = shutil.which("node") or "node"
        fs_command = [node, str(FS_SERVER), str(scratch)]
        allow = [fs_command, [sys.executable, "-m", "console.demo.bookstore"]]
        import shlex

        env["PREFLIGHT_MCP_STDIO_ALLOW"] = os.environ["PREFLIGHT_MCP_STDIO_ALLOW"] = (
            ",".join(shlex.join(c) for c in allow)
            + ","
            + ",".join(
                f"{shlex.quote(sys.executable)} -m console.demo.{d}"
                for d in ("mail", "home --provider lumen", "home --provider homebase", "home --provider tips")
            )
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        import anyio

        from console.demo.agent import REQUESTER
        from console.services.tokens import agent_token_create

        # The gateway acts as an agent token (over stdio, from the environment).
        secret = agent_token_create(name="bench-agent", principals=[REQUESTER])[1]
        env["PREFLIGHT_AGENT_TOKEN"] = os.environ["PREFLIGHT_AGENT_TOKEN"] = secret

        bank_port = _free_port()
        os.environ["PREFLIGHT_HTTP_ALLOW"] = env["PREFLIGHT_HTTP_ALLOW"] = f"127.0.0.1:{bank_port}"
        from django.conf import settings

        from config.env import env_hosts

        settings.PREFLIGHT_HTTP_ALLOW = env_hosts("PREFLIGHT_HTTP_ALLOW", [])
        bank = subprocess.Popen(
            [sys.executable, "-m", "console.demo.bank", "--transport", "http", "--port", str(bank_port)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _catalog(fs_command, bank_port)
        where = "SQLite" if options.sqlite else "PostgreSQL"
        print(f"gateway bench ({where}): {options.calls} passing calls per kind, {options.asks} ask rounds")
        anyio.run(_latency, env, fs_command, scratch, options.calls, options.asks)
        anyio.run(_turns, env, scratch)
    finally:
        if bank is not None:
            bank.terminate()
            bank.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
        if not options.sqlite:
            from django.db import connections

            connections.close_all()
            admin(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _catalog(fs_command: list[str], bank_port: int) -> None:
    from console import connectors
    from console.management.commands.demo import Command
    from console.services.catalog import catalog_import

    connector = {"kind": "mcp_stdio", "command": fs_command}
    extensions = {"write_file": {"state_change": "the file at path holds exactly content"}}
    catalog_import(
        server="fs",
        tools=connectors.list_tools(connector, timeout_s=30),
        annotations_trusted=True,
        connector=connector,
        actor="user:operator",
        extensions=extensions,
    )
    for _ in range(100):
        try:
            Command().seed_catalog(f"http://127.0.0.1:{bank_port}/mcp")
            return
        except connectors.ToolCallFailed:
            time.sleep(0.1)  # the bank server is still starting


def _gateway(env: dict[str, str], user: Any) -> Any:
    from mcp import Client, StdioServerParameters

    from console.demo.agent import REQUESTER

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "manage.py"), "mcp_gateway", "--principal", REQUESTER],
        env=env,
        cwd=str(REPO),
    )
    return Client(params, mode="2026-07-28", elicitation_callback=user, read_timeout_seconds=60)


class _Instant:
    """A user who answers every form at once: the content, the confirmation, each proposal kept, the
    scenario's own answers (which action, for an intended change)."""

    def __init__(self) -> None:
        self.turns = 0
        self.answers: dict[str, Any] = {}

    async def __call__(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        from console.gateway.server import CONFIRM_FIELD

        self.turns += 1
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        content: dict[str, Any] = {}
        for key, prop in params.requested_schema["properties"].items():
            if key in self.answers:
                content[key] = self.answers[key]
            elif key == CONFIRM_FIELD:
                content[key] = True
            elif key == "fixed:timing":
                content[key] = "immediate"
            elif "default" in prop:
                content[key] = prop["default"]
            elif "enum" in prop or "oneOf" in prop:
                # A form offers only its options; the first one is the scripted user's pick.
                content[key] = prop["enum"][0] if "enum" in prop else prop["oneOf"][0]["const"]
            elif prop.get("type") == "string":
                content[key] = f"an answer to {key}"
            elif prop.get("type") == "boolean":
                content[key] = True
        return types.ElicitResult(action="accept", content=content)


async def _timed(call: Any, n: int) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        result = await call(i)
        times.append((time.perf_counter() - t0) * 1000)
        assert not result.is_error, result
    return times


async def _latency(env: dict[str, str], fs_command: list[str], scratch: Path, calls: int, asks: int) -> None:
    from mcp import Client, StdioServerParameters

    from console.demo.agent import Scenario

    note = scratch / "note.txt"
    note.write_text("bench\n")
    order = Scenario(
        "order",
        "order_book",
        {"isbn": "9780131103627"},
        "Please order the book with ISBN 9780131103627 now.",
        {"isbn": "9780131103627"},
        "order",
        {"mode": "immediate", "said": "now"},
    )
    direct_fs = Client(StdioServerParameters(command=fs_command[0], args=fs_command[1:]), mode="auto")
    direct_books = Client(
        StdioServerParameters(command=sys.executable, args=["-m", "console.demo.bookstore"], cwd=str(REPO)),
        mode="auto",
    )
    rows = []
    async with direct_fs as fs, direct_books as books, _gateway(env, _Instant()) as gw:
        await gw.call_tool("read_text_file", {"path": str(note)})  # the gateway process is up
        for _ in range(5):  # warm both paths
            await fs.call_tool("read_text_file", {"path": str(note)})
            await books.call_tool("order_book", order.arguments)
            await gw.call_tool("read_text_file", {"path": str(note)})
            await gw.call_tool("order_book", order.arguments, meta=order.meta())  # type: ignore[arg-type]

        def read(c: Any) -> Any:
            return lambda i: c.call_tool("read_text_file", {"path": str(note)})

        rows.append(("read-only pass", await _timed(read(fs), calls), await _timed(read(gw), calls)))
        rows.append(
            (
                "gated execute",
                await _timed(lambda i: books.call_tool("order_book", order.arguments), calls),
                await _timed(lambda i: gw.call_tool("order_book", order.arguments, meta=order.meta()), calls),  # type: ignore[arg-type]
            )
        )
        rows.append(
            (
                "ask round (1 form)",
                await _timed(
                    lambda i: fs.call_tool(
                        "write_file", {"path": str(scratch / f"d{i}.txt"), "content": "x"}
                    ),
                    asks,
                ),
                await _timed(
                    lambda i: gw.call_tool("write_file", {"path": str(scratch / f"g{i}.txt")}), asks
                ),
            )
        )
    head = ("call", "direct p50", "p99", "gateway p50", "p99", "added p50", "p99")
    print(
        f"{head[0]:<20} {head[1]:>10} {head[2]:>7}  {head[3]:>11} {head[4]:>7}  {head[5]:>9} {head[6]:>7}  ms"
    )
    for name, direct, through in rows:
        d50, d99, g50, g99 = pct(direct, 50), pct(direct, 99), pct(through, 50), pct(through, 99)
        added = (g50 - d50, g99 - d99)
        cells = f"{d50:>10.1f} {d99:>7.1f}  {g50:>11.1f} {g99:>7.1f}  {added[0]:>9.1f} {added[1]:>7.1f}"
        print(f"{name:<20} {cells}")


class _Counting(_Instant):
    def __init__(self) -> None:
        super().__init__()
        self.questions = 0
        self.singles = 0  # confirmations and URL rounds: one turn each either way

    async def __call__(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        from console.gateway.server import CONFIRM_FIELD

        if isinstance(params, types.ElicitRequestURLParams):
            self.singles += 1
        else:
            fields = [k for k in params.requested_schema["properties"] if k != CONFIRM_FIELD]
            self.questions += len(fields)
            self.singles += CONFIRM_FIELD in params.requested_schema["properties"] and not fields
        return await super().__call__(context, params)


async def _turns(env: dict[str, str], scratch: Path) -> None:
    from datetime import UTC, datetime

    from console.demo.agent import BOB, Scenario, scenarios

    more = [
        Scenario(
            "a file with nothing said (path, content, action, timing)",
            "write_file",
            {"path": str(scratch / "blank.txt")},
            "write a file",
        ),
        Scenario(
            "a transfer with only the amount said",
            "transfer_funds",
            {"amount": 40},
            "Pay 40 EUR.",
            {"amount": "40"},
            "Pay",
        ),
        Scenario(
            "a transfer with the source account missing",
            "transfer_funds",
            {"to_account": BOB, "amount": 60},
            f"Send 60 EUR to {BOB} now.",
            {"to_account": BOB, "amount": "60"},
            "Send",
            {"mode": "immediate", "said": "now"},
        ),
        Scenario(
            "a book by title only, nothing else said",
            "order_book",
            {"title": "Python Crash Course"},
            "get me that python book",
            answers={"branch:#/oneOf": "author and title"},
        ),
    ]
    plan = [s for s in scenarios(datetime.now(UTC)) if s.reply == "accept"] + more
    print()
    print(f"{'scenario':<72} {'gateway':>7} {'per blank':>9}  user turns")
    total_gw = total_blank = 0
    user = _Counting()
    async with _gateway(env, user) as gw:
        for scenario in plan:
            user.turns = user.questions = user.singles = 0
            user.answers = scenario.answers
            await gw.call_tool(scenario.tool, scenario.arguments, meta=scenario.meta())  # type: ignore[arg-type]
            per_blank = user.questions + user.singles
            total_gw += user.turns
            total_blank += per_blank
            print(f"{scenario.name[:72]:<72} {user.turns:>7} {per_blank:>9}")
    n = len(plan)
    print(f"{'mean per execution':<72} {total_gw / n:>7.2f} {total_blank / n:>9.2f}")


if __name__ == "__main__":
    main()
