"""The agent API describes a working MCP connector, and a connector is never a way to run code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from console_helpers import TRANSFER, Agent, Downstream, make_operator, transfer_request
from django.conf import settings as django_settings

from console import connectors, models
from console.egress import parse_allowed_hosts
from console.services.catalog import catalog_import
from console.services.measures import measure_create

REPO = Path(__file__).resolve().parents[3]
PROBE = [sys.executable, str(REPO / "tests" / "console" / "mcp_probe_server.py")]
# What a stdio server may see of the environment: the deployment's names and the MCP SDK's short list.
MINIMAL_ENV = {"PATH", "LANG", "PYTHONUNBUFFERED", "HOME", "LOGNAME", "SHELL", "TERM", "USER", "LC_CTYPE"}


@pytest.fixture
def probe_allowed(settings: Any) -> list[str]:
    settings.PREFLIGHT_MCP_STDIO_ALLOW = [PROBE]
    return PROBE


def configuration() -> list[Any]:
    return [
        list(models.Server.objects.order_by("pk").values()),
        list(models.ToolContract.objects.order_by("pk").values("pk", "digest", "current")),
        list(models.Measure.objects.order_by("pk").values()),
        models.AuditEvent.objects.count(),
    ]


def test_an_api_imported_stdio_connector_runs_the_granted_call_on_a_real_mcp_server(
    agent: Agent, downstream: Downstream, probe_allowed: list[str]
) -> None:
    operator = make_operator()
    connector = {"kind": "mcp_stdio", "command": probe_allowed}
    imported = operator.post(
        "/api/v1/catalog/import",
        {"server": "bank", "tools": [TRANSFER], "annotations_trusted": True, "connector": connector},
    )
    assert imported.status_code == 201, imported.json()
    assert operator.post("/api/v1/measures", {"name": "bank.balance", "kind": "python"}).status_code == 201
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "execute", record

    run = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]}).json()

    assert run["outcome"] == "executed", run
    seen = run["result"]["structuredContent"]
    assert seen["received"] == {
        "from_account": "DE89370400440532013000",
        "to_account": "DE02120300000000202051",
        "amount": 120,
    }
    assert set(seen["env"]) <= MINIMAL_ENV  # not this process's secrets: no PREFLIGHT_*, DATABASE_URL
    assert seen["cwd"] == str(django_settings.PREFLIGHT_MCP_STDIO_CWD)
    assert models.Server.objects.get(name="bank").connector == connector


@pytest.mark.django_db
def test_an_http_connector_is_stored_in_the_documented_shape(quick_operator: Agent) -> None:
    connector = {"kind": "mcp_http", "url": "http://127.0.0.1:8765/mcp", "connect_timeout_s": 5}

    imported = quick_operator.post(
        "/api/v1/catalog/import", {"server": "bank", "tools": [TRANSFER], "connector": connector}
    )
    again = quick_operator.post("/api/v1/catalog/import", {"server": "bank", "tools": [TRANSFER]}).json()

    assert imported.status_code == 201, imported.json()
    assert "connector" in again["kept"]
    assert models.Server.objects.get(name="bank").connector == connector


def marker_command(marker: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]


def smuggled_connectors(marker: Path) -> list[tuple[dict[str, Any], str]]:
    """Connector payloads that would run `marker`'s program (or something else of the caller's choosing),
    each with the error code the gate must answer."""
    touch = f"open({str(marker)!r}, 'w')"
    startup = marker.with_suffix(".py")
    startup.write_text(touch)
    return [
        ({"kind": "mcp_stdio", "command": marker_command(marker)}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": [*PROBE, "-c", touch]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": [sys.executable, "-c", touch, *PROBE[1:]]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": PROBE[:1]}, "command_not_allowed"),
        # Spellings of the allowed line that are not it: the allow-list compares argv exactly.
        ({"kind": "mcp_stdio", "command": [PROBE[0] + " ", *PROBE[1:]]}, "command_not_allowed"),
        (
            {"kind": "mcp_stdio", "command": [PROBE[0], PROBE[1].replace("/tests/", "/./tests/")]},
            "command_not_allowed",
        ),
        (
            {"kind": "mcp_stdio", "command": [PROBE[0], PROBE[1].replace("/tests/", "/tests/../tests/")]},
            "command_not_allowed",
        ),
        (
            {"kind": "mcp_stdio", "command": [PROBE[0].replace("python", "pyth\u043en"), *PROBE[1:]]},
            "command_not_allowed",
        ),
        ({"kind": "mcp_stdio", "command": [PROBE[0], PROBE[1] + "\u200b"]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": [PROBE[0], PROBE[1].upper()]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": [" ".join(PROBE)]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": [PROBE[0], "-I", PROBE[1]]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": [*PROBE, "--transport", "http"]}, "command_not_allowed"),
        ({"kind": "mcp_stdio", "command": {"0": PROBE[0], "1": PROBE[1]}}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": [PROBE[0], [PROBE[1]]]}, "invalid_connector"),
        ({"kind": "MCP_STDIO", "command": PROBE}, "invalid_connector"),
        ({"kind": ["mcp_stdio"], "command": PROBE}, "invalid_connector"),
        ({"kind": "mcp_http", "url": "http://127.0.0.1:8765/mcp", "kind ": "mcp_stdio"}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": " ".join(PROBE)}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": [*PROBE, ""]}, "invalid_connector"),
        (
            {"kind": "mcp_stdio", "command": PROBE, "env": {"PYTHONSTARTUP": str(startup)}},
            "invalid_connector",
        ),
        ({"kind": "mcp_stdio", "command": PROBE, "env": {"PYTHONINSPECT": "1"}}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": PROBE, "cwd": str(marker.parent)}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": PROBE, "args": ["-c", touch]}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": PROBE, "target": marker_command(marker)}, "invalid_connector"),
        ({"kind": "mcp_stdio", "target": marker_command(marker)}, "invalid_connector"),
        ({"kind": "mcp_stdio", "command": PROBE, "timeout_s": "1"}, "invalid_connector"),
        (
            {"kind": "mcp_http", "url": "http://127.0.0.1:8765/mcp", "headers": {"Host": "x"}},
            "invalid_connector",
        ),
        ({"kind": "shell", "command": marker_command(marker)}, "invalid_connector"),
        ({"kind": "python", "target": "os.system"}, "invalid_connector"),
        ({"kind": "mcp_http", "url": "http://169.254.169.254/latest/meta-data"}, "host_not_allowed"),
        ({"kind": "mcp_http", "url": "http://127.0.0.1:6379/"}, "host_not_allowed"),
        ({"kind": "mcp_http", "url": "file:///etc/passwd"}, "invalid_connector"),
    ]


@pytest.mark.django_db
def test_no_smuggled_connector_is_accepted_by_the_api_or_ever_started(
    quick_operator: Agent, probe_allowed: list[str], settings: Any, tmp_path: Path
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = ()  # the demo's HTTP servers are not the point here
    marker = tmp_path / "ran"
    before = configuration()

    for connector, code in smuggled_connectors(marker):
        response = quick_operator.post(
            "/api/v1/catalog/import", {"server": "bank", "tools": [TRANSFER], "connector": connector}
        )
        assert response.status_code in (400, 422), (connector, response.json())
        assert response.json()["error"] == code, (connector, response.json())
        measure = quick_operator.post(
            "/api/v1/measures",
            {"name": "m", "kind": "mcp", "config": {"connector": connector, "tool": "transfer"}},
        )
        assert measure.status_code in (400, 422), (connector, measure.json())
        assert measure.json()["error"] == code, (connector, measure.json())

    assert configuration() == before
    assert not marker.exists()


def test_a_stored_connector_that_smuggles_code_is_refused_at_call_time_and_never_started(
    probe_allowed: list[str], tmp_path: Path, settings: Any
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = ()
    marker = tmp_path / "ran"

    for connector, code in smuggled_connectors(marker):
        with pytest.raises(connectors.ToolCallFailed):
            connectors.call_tool(connector, "bank", "transfer", {}, timeout_s=5)
        if connector.get("kind") in ("mcp_stdio", "mcp_http"):
            with pytest.raises(connectors.ToolCallFailed, match=code):
                connectors.list_tools(connector, timeout_s=5)

    assert not marker.exists()


def test_a_connector_whose_command_left_the_allow_list_is_refused_when_the_gate_runs_it(
    agent: Agent, downstream: Downstream, probe_allowed: list[str], settings: Any
) -> None:
    catalog_import(
        server="bank",
        tools=[TRANSFER],
        annotations_trusted=True,
        connector={"kind": "mcp_stdio", "command": PROBE},
        actor="test",
    )
    measure_create(name="bank.balance", kind="python", actor="test")
    record = agent.post("/api/v1/executions", transfer_request()).json()
    settings.PREFLIGHT_MCP_STDIO_ALLOW = []

    run = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]}).json()

    assert run["outcome"] == "failed"
    assert "command_not_allowed" in run["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://169.254.169.254/latest/meta-data/iam", "host_not_allowed"),
        ("http://127.0.0.1:6379/", "host_not_allowed"),
        ("http://2130706433:8765/", "host_not_allowed"),
        ("http://[::ffff:127.0.0.1]:8765/", "host_not_allowed"),
        ("http://127.0.0.1:8765@evil.example/", "host_not_allowed"),
        ("http://evil.example/", "host_not_allowed"),
        ("file:///etc/passwd", "invalid_connector"),
        ("gopher://127.0.0.1:8765/_", "invalid_connector"),
    ],
)
def test_a_measure_that_would_reach_an_unlisted_place_is_refused_and_the_old_one_kept(
    quick_operator: Agent, settings: Any, url: str, code: str
) -> None:
    settings.PREFLIGHT_HTTP_ALLOW = parse_allowed_hosts(["127.0.0.1:8765"])  # as a deployment's default
    measure_create(name="bank.balance", kind="http", url="http://127.0.0.1:8765/m", actor="test")
    before = configuration()

    response = quick_operator.post(
        "/api/v1/measures", {"name": "bank.balance", "kind": "http", "url": url, "timeout_s": 1}
    )

    assert response.status_code in (400, 422)
    assert response.json()["error"] == code
    assert configuration() == before


@pytest.mark.parametrize("change", ["description", "inputSchema", "annotations"])
def test_a_server_that_lists_its_tool_otherwise_than_its_contract_gets_no_call(
    agent: Agent, downstream: Downstream, probe_allowed: list[str], settings: Any, tmp_path: Path, change: str
) -> None:
    marker = tmp_path / "called"
    catalog_import(
        server="bank",
        tools=[TRANSFER],
        annotations_trusted=True,
        connector={"kind": "mcp_stdio", "command": PROBE},
        actor="test",
    )
    measure_create(name="bank.balance", kind="python", actor="test")
    record = agent.post("/api/v1/executions", transfer_request()).json()
    assert record["verdict"] == "execute", record
    before = configuration()
    # After the import and the preflight, the server changes what it says the tool is.
    settings.PREFLIGHT_MCP_STDIO_ENV = {
        **settings.PREFLIGHT_MCP_STDIO_ENV,
        "PROBE_CHANGE": change,
        "PROBE_MARKER": str(marker),
    }

    run = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]}).json()

    assert run["outcome"] == "failed", run
    assert f"another {change}" in run["detail"] and "nothing was sent" in run["detail"]
    assert not marker.exists()
    assert configuration()[:3] == before[:3]  # the contract stays what the operator imported


def test_a_server_that_lists_its_tool_as_imported_is_called_and_the_marker_proves_it(
    agent: Agent, downstream: Downstream, probe_allowed: list[str], settings: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "called"
    catalog_import(
        server="bank",
        tools=[TRANSFER],
        annotations_trusted=True,
        connector={"kind": "mcp_stdio", "command": PROBE},
        actor="test",
    )
    measure_create(name="bank.balance", kind="python", actor="test")
    record = agent.post("/api/v1/executions", transfer_request()).json()
    settings.PREFLIGHT_MCP_STDIO_ENV = {**settings.PREFLIGHT_MCP_STDIO_ENV, "PROBE_MARKER": str(marker)}

    run = agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": record["grant"]}).json()

    assert run["outcome"] == "executed", run
    assert marker.read_text() == "called\n"
