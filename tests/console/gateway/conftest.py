"""Gateway fixtures: the real `@modelcontextprotocol/server-filesystem` (npm) in a scratch directory,
imported into the catalog by an operator, and the gateway as a real `manage.py mcp_gateway` process."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from console import connectors
from console.services.catalog import catalog_import
from console.services.tokens import agent_token_create

REPO = Path(__file__).resolve().parents[3]
JS = Path(__file__).resolve().parent / "js"
FS_SERVER = JS / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
PRINCIPAL = "user:alice"

# What an operator declares beside the filesystem server's definitions: the state change each writing tool
# makes (the server declares none), and, for move_file, that its prose condition ("both paths within the
# allowed directories") is checked by an approver before the call runs.
FS_EXTENSIONS = {
    "write_file": {"state_change": "the file at path holds exactly content"},
    "edit_file": {"state_change": "the file at path has the edits applied"},
    "move_file": {
        "state_change": "the file at source is at destination",
        "prose_reviewed": True,
        "extra_approval": [{"id": "paths_within_allowed_directories"}],
    },
}


def node_modules() -> Path:
    """The npm packages the tests use, installed from package-lock.json on first use (CI does it up front)."""
    if not FS_SERVER.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed for the gateway tests (apt-get install npm)")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, capture_output=True)
    return JS / "node_modules"


@dataclass
class Filesystem:
    root: Path
    command: list[str]

    @property
    def connector(self) -> dict[str, Any]:
        return {"kind": "mcp_stdio", "command": self.command}


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    root = tmp_path / "scratch"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def filesystem(scratch: Path, settings: Any) -> Filesystem:
    node_modules()
    command = [shutil.which("node") or "node", str(FS_SERVER), str(scratch)]
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [command]
    return Filesystem(scratch, command)


@pytest.fixture
def fs_catalog(transactional_db: None, filesystem: Filesystem) -> list[dict[str, Any]]:
    """The operator's import of the live server (trusted annotations), as `tools/list` gave it."""
    tools = connectors.list_tools(filesystem.connector, timeout_s=30)
    catalog_import(
        server="fs",
        tools=tools,
        annotations_trusted=True,
        connector=filesystem.connector,
        actor="user:operator",
        extensions=FS_EXTENSIONS,
    )
    return tools


def _database_url() -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


@pytest.fixture(autouse=True)
def signing_key(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """One grant key for the test and its gateway process: an approval in the test issues the grant the
    gateway then runs."""
    from console import signing

    path = tmp_path / "keys" / "grant_signing_key.pem"
    settings.PREFLIGHT_SIGNING_KEY_PATH = path
    signing._signers.clear()
    yield path
    signing._signers.clear()


@pytest.fixture
def agent_token(transactional_db: None) -> tuple[Any, str]:
    """The agent's token (row, secret), restricted to the principal the gateway acts for."""
    return agent_token_create(name="alices-agent", principals=[PRINCIPAL])


@pytest.fixture
def gateway_env(
    filesystem: Filesystem, tmp_path: Path, signing_key: Path, agent_token: tuple[Any, str]
) -> dict[str, str]:
    """The environment of a gateway process on the test database, with the agent's token (stdio)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "DATABASE_URL": _database_url(),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "PREFLIGHT_SECRET_KEY": os.environ.get("PREFLIGHT_SECRET_KEY", "test-only-not-a-secret"),
        "PREFLIGHT_SIGNING_KEY_PATH": str(signing_key),
        "PREFLIGHT_MCP_STDIO_ALLOW": shlex.join(filesystem.command),
        "PREFLIGHT_PUBLIC_URL": "http://console.test",
        "PREFLIGHT_LOG_LEVEL": "WARNING",
        "PREFLIGHT_AGENT_TOKEN": agent_token[1],
    }
    return env


@pytest.fixture
def gateway_argv() -> list[str]:
    return [sys.executable, str(REPO / "manage.py"), "mcp_gateway", "--principal", PRINCIPAL]


@pytest.fixture
def gateway_stderr(tmp_path: Path) -> Iterator[Any]:
    with open(tmp_path / "gateway-stderr.log", "w+") as f:
        yield f
