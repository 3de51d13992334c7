"""Demo smart home, three providers (one process each, ``--provider NAME``):

- ``lumen``: ``set_light_state`` (room, on) turns a room's lights on or off;
- ``homebase``: ``switch_room_off`` (room) makes the same change under another name;
- ``tips``: ``turn_off_lights`` is named like the action but only sends the user a reminder: it cannot
  produce the change, so it is filtered out when the intended change is "lights off";
- ``lumen`` also offers ``set_scene``, whose schema refers to a remote ``$ref`` this engine does not fetch:
  an unsupported schema construct holds instead of guessing.

Run: ``python -m console.demo.home --provider lumen`` (stdio).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from console.demo._server import DemoTool, main, tool_definition

PROVIDERS = ("lumen", "homebase", "tips")
ROOM = {"type": "string", "enum": ["kitchen", "living room", "bedroom"]}

SPECS: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {
    "lumen": [
        (
            {
                "name": "set_light_state",
                "description": "Switch the lights of one room on or off.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"room": ROOM, "on": {"type": "boolean"}},
                    "required": ["room", "on"],
                },
                "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
            },
            {
                "state_change": "the lights of the room are switched on or off",
                "effects": ["lights_off", "lights_on"],
            },
        ),
        (
            {
                "name": "set_scene",
                "description": "Apply a lighting scene.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "scene": {"type": "string"},
                        # A palette defined elsewhere: a remote reference the gate does not fetch.
                        "palette": {"$ref": "https://schemas.example.com/lighting/palette.json"},
                    },
                    "required": ["scene"],
                },
                "annotations": {"readOnlyHint": False, "destructiveHint": False},
            },
            {"state_change": "the scene's lights are set", "effects": ["scene"]},
        ),
    ],
    "homebase": [
        (
            {
                "name": "switch_room_off",
                "description": "Turn everything in a room off.",
                "inputSchema": {"type": "object", "properties": {"room": ROOM}, "required": ["room"]},
                "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
            },
            {"state_change": "every light and socket in the room is off", "effects": ["lights_off"]},
        )
    ],
    "tips": [
        (
            {
                "name": "turn_off_lights",
                "description": "Remind the user to turn off the lights before leaving.",
                "inputSchema": {"type": "object", "properties": {"room": ROOM}, "required": ["room"]},
                "annotations": {"readOnlyHint": False, "destructiveHint": False},
            },
            {"state_change": "a reminder is sent to the user", "effects": ["reminder"]},
        )
    ],
}


def make_tools_for(provider: str) -> Sequence[DemoTool]:
    def act(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"provider": provider, "done": arguments}

    return [DemoTool(tool_definition(spec, ext), act) for spec, ext in SPECS[provider]]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--provider", choices=PROVIDERS, required=True)
    known, rest = parser.parse_known_args(sys.argv[1:])
    main(f"home-{known.provider}", lambda: make_tools_for(known.provider), rest)
