"""A call that says the change the user asked for (`_meta` dev.preflight/intended_change), through the gateway
in front of the demo smart home: three providers over real stdio, two whose differently named tools make the
change and one whose tool is named like it but cannot."""

from __future__ import annotations

import json
import sys
from typing import Any

import mcp_types as types
import pytest

from console import connectors, models
from console.demo import home
from console.gateway.server import META_RECORD
from console.services.catalog import catalog_import

from .test_server import MODES, User, audit_kinds, gateway, run

TEXT = "Turn off the lights in the kitchen now."
ROOM_OFF = home.SPECS["homebase"][0][1]["state_change"]  # type: ignore[index]
LIGHT_STATE = home.SPECS["lumen"][0][1]["state_change"]  # type: ignore[index]


def span(part: str) -> dict[str, int]:
    return {"turn": 0, "start": TEXT.index(part), "end": TEXT.index(part) + len(part)}


def meta(intended: Any) -> dict[str, Any]:
    return {
        "dev.preflight/conversation": [{"role": "user", "content": TEXT, "trusted": True}],
        "dev.preflight/pointers": {"room": span("kitchen")},
        "dev.preflight/action_name": span("Turn off"),
        "dev.preflight/timing": {"mode": "immediate", "pointer": span("now")},
        "dev.preflight/intended_change": intended,
    }


@pytest.fixture
def smart_home(transactional_db: None, settings: Any, gateway_env: dict[str, str]) -> dict[str, str]:
    """The three providers, imported by an operator; the gateway process allows their commands."""
    commands = {p: [sys.executable, "-m", "console.demo.home", "--provider", p] for p in home.PROVIDERS}
    settings.PREFLIGHT_MCP_STDIO_ALLOW = list(commands.values())
    for provider, command in commands.items():
        connector = {"kind": "mcp_stdio", "command": command}
        catalog_import(
            server=f"home-{provider}",
            tools=connectors.list_tools(connector, timeout_s=30),
            annotations_trusted=False,
            connector=connector,
            actor="user:operator",
        )
    # Unset: the settings' default allows the demo servers' commands (this interpreter's among them).
    return {k: v for k, v in gateway_env.items() if k != "PREFLIGHT_MCP_STDIO_ALLOW"}


@pytest.mark.parametrize("mode", MODES)
def test_the_tool_named_like_the_change_but_unable_to_make_it_drops_out_and_the_user_picks_the_provider(
    smart_home: dict[str, str], gateway_argv: list[str], mode: str
) -> None:
    user = User({"fixed:tool": ROOM_OFF})

    async def call() -> types.CallToolResult:
        async with gateway(smart_home, gateway_argv, mode=mode, user=user) as client:
            return await client.call_tool(
                "turn_off_lights",
                {"room": "kitchen"},
                meta=meta({"effect": "lights_off"}),  # type: ignore[arg-type]
            )

    result = run(call)
    assert not result.is_error, result
    # One question, the action, in the providers' words for the change; no tool is named.
    assert len(user.asked) == 1
    form = user.asked[0]
    assert isinstance(form, types.ElicitRequestFormParams)
    choice = form.requested_schema["properties"]["fixed:tool"]
    assert sorted(choice["enum"]) == sorted([LIGHT_STATE, ROOM_OFF])
    assert not any(name in form.message for name in ("turn_off_lights", "switch_room_off", "set_light_state"))
    # The chosen provider's tool ran, once, with the room the user said; the reminder tool was never sent.
    assert json.loads(result.content[0].text) == {  # type: ignore[union-attr]
        "provider": "homebase",
        "done": {"room": "kitchen"},
    }
    record = json.loads(json.dumps(result.meta))[META_RECORD]
    assert (record["tool"], record["outcome"]) == ("home-homebase/switch_room_off", "executed")
    assert list(models.Outcome.objects.values_list("status", flat=True)) == ["executed"]
    assert audit_kinds().count("run") == 1


def test_a_change_no_fronted_tool_can_make_holds_and_nothing_is_sent(
    smart_home: dict[str, str], gateway_argv: list[str]
) -> None:
    async def call() -> types.CallToolResult:
        async with gateway(smart_home, gateway_argv, mode="2026-07-28", user=None) as client:
            return await client.call_tool(
                "turn_off_lights",
                {"room": "kitchen"},
                meta=meta({"effect": "door_locked"}),  # type: ignore[arg-type]
            )

    result = run(call)
    assert result.is_error
    execution = models.Execution.objects.get()
    assert execution.verdict == "hold"
    assert f"/executions/{execution.pk}/" in result.content[0].text  # type: ignore[union-attr]
    assert models.Outcome.objects.count() == 0


@pytest.mark.parametrize("intended", [{"effect": 5}, ["lights_off"], {"effect": {"x": 1}}])
def test_a_malformed_intended_change_is_a_tool_error_naming_it_and_nothing_is_sent(
    smart_home: dict[str, str], gateway_argv: list[str], intended: Any
) -> None:
    async def call() -> types.CallToolResult:
        async with gateway(smart_home, gateway_argv, mode="2026-07-28", user=User()) as client:
            return await client.call_tool(
                "turn_off_lights",
                {"room": "kitchen"},
                meta=meta(intended),  # type: ignore[arg-type]
            )

    result = run(call)
    assert result.is_error
    assert "intended_change" in result.content[0].text  # type: ignore[union-attr]
    assert models.Outcome.objects.count() == 0
