"""The demo's scripted agent: calls the demo tools through the MCP gateway (a real `manage.py mcp_gateway`
over stdio, driven by the official Python client) the way an assistant would, with a scripted user behind
the elicitation UI, so that the console opens on one execution of every verdict and route.

The smart home's "lights off" goes through the gateway too: the model calls the tool whose name matches
(`turn_off_lights`, which only sends a reminder) with the intended change in `_meta`; the gateway adds the
fronted tools declaring that change (two providers, named differently), the one that cannot make it drops
out, and the user is asked which action, then it runs. A lookup still in flight goes through a gateway
of its own (a 2025-11-25 client): the embedded demo runs lookups in-process, so that gateway hands them to
an in-memory queue nobody reads, and the call says the lookups are still running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

from console.demo import home
from console.demo.review_data import ALICE_MAIN, ALICE_SAVINGS, BOB, span
from console.gateway.server import (
    CONFIRM_FIELD,
    META_ACTION,
    META_CONVERSATION,
    META_INTENDED,
    META_POINTERS,
    META_RECORD,
    META_TIMING,
)

REQUESTER = "user:requester"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Scenario:
    name: str
    tool: str
    arguments: dict[str, Any]
    text: str
    # Argument name -> the part of `text` that says it (the client's pointers).
    said: dict[str, str] = field(default_factory=dict)
    action: str | None = None
    timing: dict[str, Any] | None = None  # with "said": the words of the timing
    # How the scripted user answers: "accept" (with `answers`, else each field's default), "decline",
    # "cancel"; URL elicitations are accepted (the user opens the page) unless "decline".
    reply: str = "accept"
    answers: dict[str, Any] = field(default_factory=dict)
    intended_effect: str | None = None  # the change the user asked for, when the tool may not make it

    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            META_CONVERSATION: [{"role": "user", "content": self.text, "trusted": True}],
            META_POINTERS: {k: span(self.text, v) for k, v in self.said.items()},
        }
        if self.action:
            meta[META_ACTION] = span(self.text, self.action)
        if self.timing is not None:
            timing = {k: v for k, v in self.timing.items() if k != "said"}
            if "said" in self.timing:
                timing["pointer"] = span(self.text, self.timing["said"])
            meta[META_TIMING] = timing
        if self.intended_effect is not None:
            meta[META_INTENDED] = {"effect": self.intended_effect}
        return meta


# What homebase's switch_room_off declares it does: the option the user picks among the two actions.
ROOM_OFF = home.SPECS["homebase"][0][1]["state_change"]  # type: ignore[index]


def scenarios(now: datetime) -> list[Scenario]:
    tomorrow = (now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    immediate = {"mode": "immediate", "said": "now"}
    return [
        Scenario(
            "an order said in full runs at once",
            "order_book",
            {"isbn": "9780131103627"},
            "Please order the book with ISBN 9780131103627 now.",
            {"isbn": "9780131103627"},
            "order",
            immediate,
        ),
        Scenario(
            "a title without its author is asked about; the user lets it wait",
            "order_book",
            {"title": "Python Crash Course"},
            "Order Python Crash Course for me now.",
            {"title": "Python Crash Course"},
            "Order",
            immediate,
            reply="cancel",
        ),
        Scenario(
            "a large transfer: balance looked up, recipient confirmation and approval by a second person",
            "transfer_funds",
            {"from_account": ALICE_MAIN, "to_account": BOB, "amount": 1500},
            f"Send 1500 EUR from {ALICE_MAIN} to {BOB} now, it's the rent.",
            {"from_account": ALICE_MAIN, "to_account": BOB, "amount": "1500"},
            "Send",
            immediate,
        ),
        Scenario(
            "a transfer to the same account is blocked",
            "transfer_funds",
            {"from_account": ALICE_MAIN, "to_account": ALICE_MAIN, "amount": 50},
            f"Move 50 EUR from {ALICE_MAIN} to my account {ALICE_MAIN} now.",
            {"from_account": ALICE_MAIN, "to_account": ALICE_MAIN, "amount": "50"},
            "Move",
            immediate,
        ),
        Scenario(
            "an order for tomorrow is deferred and preflighted again then",
            "order_book",
            {"isbn": "9781593279288"},
            "Order ISBN 9781593279288 tomorrow at 9:00.",
            {"isbn": "9781593279288"},
            "Order",
            {"mode": "at", "at": tomorrow.isoformat(), "said": "tomorrow at 9:00"},
        ),
        Scenario(
            "a tool whose rules are only prose is held as a provider gap",
            "delete_mailbox",
            {"mailbox": "archive-2019"},
            "Delete my old mailbox archive-2019 now.",
            {"mailbox": "archive-2019"},
            "Delete",
            immediate,
        ),
        Scenario(
            "a schema construct the engine does not interpret holds",
            "set_scene",
            {"scene": "evening"},
            "Set the evening scene now.",
            {"scene": "evening"},
            "Set",
            immediate,
        ),
        Scenario(
            "lights off: the tool named so only reminds; of the two that can, the user picks one",
            "turn_off_lights",
            {"room": "kitchen"},
            "Turn off the lights in the kitchen now.",
            {"room": "kitchen"},
            "Turn off",
            immediate,
            answers={"fixed:tool": ROOM_OFF},
            intended_effect="lights_off",
        ),
        Scenario(
            "an email the model drafted is sent once the user consents to the text",
            "send_email",
            {"to": "bob@example.com", "subject": "Late", "body": "Hi Bob, I'll be 20 minutes late. Alice"},
            "Email bob@example.com with the subject Late that I'll be late, now.",
            {"to": "bob@example.com", "subject": "Late"},
            "Email",
            immediate,
        ),
    ]


class ScriptedUser:
    def __init__(self) -> None:
        self.scenario: Scenario | None = None
        self.turns = 0

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.turns += 1
        scenario = self.scenario
        assert scenario is not None
        if scenario.reply != "accept":
            return types.ElicitResult(action=scenario.reply)  # type: ignore[arg-type]
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")  # opened the page; the approver decides later
        content: dict[str, Any] = {}
        for key, prop in params.requested_schema["properties"].items():
            if key in scenario.answers:
                content[key] = scenario.answers[key]
            elif key == CONFIRM_FIELD or prop.get("type") == "boolean":
                # The gateway's own confirm, and the user's yes to a value or to the call as shown.
                content[key] = True
            elif key == "fixed:timing":
                content[key] = "immediate"
            elif "default" in prop:
                content[key] = prop["default"]
            elif prop.get("type") == "string":
                content[key] = scenario.text
        return types.ElicitResult(action="accept", content=content)


@dataclass
class Outcome:
    scenario: str
    verdict: str
    outcome: str | None
    turns: int
    console_url: str | None = None
    tool: str | None = None  # server/tool the record is for (the one chosen, for an intended change)


def gateway_params(env: Mapping[str, str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "manage.py"), "mcp_gateway", "--principal", REQUESTER],
        env=dict(env),
        cwd=str(REPO),
    )


async def _drive(
    params: StdioServerParameters,
    plan: list[Scenario],
    report: Callable[[Outcome], None],
    mode: str = "2026-07-28",
) -> None:
    user = ScriptedUser()
    async with Client(params, mode=mode, elicitation_callback=user, read_timeout_seconds=120) as client:
        for scenario in plan:
            user.scenario, user.turns = scenario, 0
            result = await client.call_tool(scenario.tool, scenario.arguments, meta=scenario.meta())  # type: ignore[arg-type]
            record = (result.meta or {}).get(META_RECORD, {})
            report(
                Outcome(
                    scenario.name,
                    str(record.get("verdict")),
                    record.get("outcome"),
                    user.turns,
                    record.get("console_url"),
                    record.get("tool"),
                )
            )


def run_through_gateway(report: Callable[[Outcome], None]) -> None:
    anyio.run(_drive, gateway_params(os.environ), scenarios(datetime.now(UTC)), report)


def run_lookup_in_flight(report: Callable[[Outcome], None]) -> None:
    """Through a gateway whose lookups go to an in-memory queue no worker reads: the call waits, then says
    the lookups are still running, and the execution stays at `measure`."""
    queued = {**os.environ, "PREFLIGHT_EAGER_TASKS": "0", "REDIS_URL": "memory://"}
    in_flight = Scenario(
        "a balance lookup still in flight",
        "transfer_funds",
        {"from_account": ALICE_SAVINGS, "to_account": BOB, "amount": 80},
        f"Send 80 EUR from {ALICE_SAVINGS} to {BOB} now.",
        {"from_account": ALICE_SAVINGS, "to_account": BOB, "amount": "80"},
        "Send",
        {"mode": "immediate", "said": "now"},
    )
    anyio.run(_drive, gateway_params(queued), [in_flight], report, "legacy")
