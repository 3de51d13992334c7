"""Demo mail: ``send_email`` (the model drafts the body; the user consents to sending exactly that text) and
``delete_mailbox``, whose rules exist only in prose (a provider gap the gate holds).

Run: ``python -m console.demo.mail`` (stdio).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.demo._server import DemoTool, demo_tools, main

SERVER = "mail"

EXTENSIONS: dict[str, dict[str, Any]] = {
    "send_email": {
        "state_change": "an email with exactly this body is sent to the recipient",
        "effects": ["send_message"],
        "slots": {"body": {"sources": ["user_answer"], "question": "Send exactly this text?"}},
        "notices": ["A sent email cannot be recalled."],
    },
}

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "send_email": {
        "name": "send_email",
        "description": "Send an email.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string", "minLength": 1},
                "body": {"type": "string", "minLength": 1},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True},
    },
    "delete_mailbox": {
        "name": "delete_mailbox",
        "description": "Delete a mailbox and every message in it. Only the mailbox owner may do this, and it "
        "requires the owner's explicit confirmation.",
        "inputSchema": {
            "type": "object",
            "properties": {"mailbox": {"type": "string"}},
            "required": ["mailbox"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
}


def make_tools() -> Sequence[DemoTool]:
    sent: list[dict[str, Any]] = []

    def send_email(arguments: dict[str, Any]) -> dict[str, Any]:
        message = {"message_id": f"M{len(sent) + 1:04d}", **arguments}
        sent.append(message)
        return {"message_id": message["message_id"], "to": arguments["to"]}

    def delete_mailbox(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"deleted": arguments["mailbox"]}

    return demo_tools(TOOL_SPECS, EXTENSIONS, send_email, delete_mailbox)


if __name__ == "__main__":
    main(SERVER, make_tools)
