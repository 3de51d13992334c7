"""The hand-written shape check of POST /executions never accepts a body that ExecutionIn refuses."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from console_helpers import transfer_request

from console.api.executions import ExecutionIn, plainly_valid

ODD_VALUES: list[Any] = [None, "", "x", "a\x00b", 0, -1, 1.5, True, False, [], [1], {}, {"x": 1}]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value: object keys and array indexes, parents before children."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield (*prefix, key)
            yield from paths(sub, (*prefix, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield (*prefix, i)
            yield from paths(sub, (*prefix, i))


def replaced(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(body)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return out


def removed(body: Any, path: tuple[Any, ...]) -> Any:
    out = copy.deepcopy(body)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return out


def bases() -> list[dict[str, Any]]:
    full = transfer_request()
    full["conversation"].append({"role": "tool", "content": "", "trusted": False})
    full["candidates"]["memo"] = {"value": None, "pointer": [full["candidates"]["amount"]["pointer"]]}
    full["intended_change"] = {"effect": "money_moves"}
    full["environment"] = ""
    candidates = {k: v for k, v in transfer_request().items() if k not in ("server", "tool")}
    candidates["tool_candidates"] = [{"server": "bank", "tool": "transfer"}, {"server": "w", "tool": "wire"}]
    at = transfer_request(timing={"mode": "at", "at": "2030-01-01T10:00:00+00:00", "pointer": None})
    return [full, candidates, at, {"principal": "user:a", "server": "s", "tool": "t"}]


def mutations() -> Iterator[Any]:
    for base in bases():
        yield base
        for path in paths(base):
            yield removed(base, path)
            for value in ODD_VALUES:
                yield replaced(base, path, value)
        for key in ("server", "tool", "tool_candidates", "action_name", "timing", "intended_change"):
            for value in ODD_VALUES:
                yield {**base, key: value}
    yield from ([], "body", None, 5, {})


def test_the_shape_check_accepts_nothing_the_serializer_refuses() -> None:
    accepted = refused = 0
    for body in mutations():
        if plainly_valid(body):
            accepted += 1
            serializer = ExecutionIn(data=body)
            assert serializer.is_valid(), (body, serializer.errors)
        else:
            refused += 1

    assert accepted > 50 and refused > 500  # the mutations cover both sides


def test_the_shape_check_accepts_the_requests_agents_send() -> None:
    for body in bases():
        assert plainly_valid(body), body
        assert ExecutionIn(data=body).is_valid()
