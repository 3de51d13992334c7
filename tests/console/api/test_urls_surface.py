"""Every URL of the API, the schema and the docs, with every method and every kind of body a hostile caller
can send: never a 5xx, an API error always in the {"error", "detail"} shape, and nothing changes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from console_helpers import TRANSFER, Agent, Downstream, make_agent, make_operator, transfer_request
from django.test import Client

from console import models

pytestmark = pytest.mark.django_db

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"]

DEEP = b"[" * 100_000 + b"]" * 100_000
BODIES: list[tuple[str, bytes | str]] = [
    ("application/json", b""),
    ("application/json", b'{"server": "bank", "server": "evil", "tool": "transfer"}'),
    ("application/json", DEEP),
    ("application/json", b'{"a":' * 5000 + b"1" + b"}" * 5000),
    ("application/json", b'{"principal": "\xff\xfe"}'),
    ("application/json", b"\xef\xbb\xbf{}"),
    ("application/json", b'{"amount": NaN, "x": Infinity, "y": -Infinity}'),
    ("application/json", b'{"amount": 1e999}'),
    ("application/json", b'{"amount": 123456789012345678901234567890}'),
    ("application/json", b'{"principal": "\\ud800"}'),
    ("application/json", b'{"principal": "\\u0000"}'),
    ("application/json", ('{"principal": "' + "a" * 2_000_000 + '"}').encode()),
    ("application/json", b"[]"),
    ("application/json", b"null"),
    ("application/json; charset=latin-1", '{"principal": "é"}'.encode("latin-1")),
    ("application/json; charset=utf-16", '{"principal": "x"}'.encode("utf-16")),
    ("application/x-www-form-urlencoded", b"server=bank&tool=transfer"),
    (
        "multipart/form-data; boundary=xx",
        b"--xx\r\nContent-Disposition: form-data; name=a\r\n\r\nb\r\n--xx--",
    ),
    ("multipart/form-data", b"garbage"),
    ("text/plain", b"hello"),
    ("application/xml", b"<a/>"),
    ("", b"{}"),
]


def paths(execution: str, preset: int) -> list[str]:
    return [
        "/api/v1/catalog/import",
        "/api/v1/measures",
        "/api/v1/executions",
        f"/api/v1/executions/{execution}",
        f"/api/v1/executions/{execution}/answers",
        f"/api/v1/executions/{execution}/run",
        f"/api/v1/executions/{uuid.uuid4()}",
        f"/api/v1/executions/{uuid.uuid4()}/run",
        "/api/v1/executions/not-a-uuid",
        "/api/v1/presets",
        "/api/v1/presets?principal=user:alice",
        "/api/v1/presets?principal=" + "x" * 50_000,
        "/api/v1/presets?principal=%ff%fe",
        "/api/v1/presets?principal=%00",
        f"/api/v1/presets/{preset}",
        "/api/v1/presets/99999999999999999999999",
        "/api/v1/nothing/here",
        "/api/v1/",
        "/api/schema/",
        "/api/schema/?format=json",
        "/api/schema/?format=yaml",
        "/api/schema/?lang=xx&version=%ff",
        "/api/docs/",
    ]


def state() -> list[Any]:
    return [
        list(models.Server.objects.order_by("pk").values()),
        list(
            models.ToolContract.objects.order_by("pk").values(
                "pk", "digest", "current", "annotations_trusted"
            )
        ),
        list(models.Measure.objects.order_by("pk").values()),
        list(models.RuleSet.objects.order_by("pk").values()),
        models.Execution.objects.count(),
        models.AuditEvent.objects.count(),
    ]


def test_no_url_method_or_body_any_caller_sends_gets_a_5xx_or_an_unshaped_error(
    quick_bank: Downstream,
) -> None:
    agent, operator = make_agent(), make_operator()
    callers: dict[str, dict[str, str]] = {
        "nobody": {},
        "agent": {"HTTP_AUTHORIZATION": f"Bearer {agent.token}"},
        "operator": {"HTTP_AUTHORIZATION": f"Bearer {operator.token}"},
        "garbage": {"HTTP_AUTHORIZATION": "Bearer \udcff\x00"},
    }
    execution, preset = str(uuid.uuid4()), 1
    before = state()
    client = Client(raise_request_exception=False)
    bad: list[tuple[Any, ...]] = []
    for who, headers in callers.items():
        for path in paths(execution, preset):
            for method in METHODS:
                bodies = BODIES if method in ("POST", "PUT", "PATCH", "DELETE") else BODIES[:1]
                for content_type, body in bodies:
                    response = client.generic(method, path, body, content_type=content_type, **headers)
                    if response.status_code >= 500:
                        bad.append((who, method, path[:60], content_type, body[:40], response.status_code))
                        continue
                    if path.startswith("/api/v1/") and response.status_code >= 400 and method != "HEAD":
                        try:
                            shape = set(response.json())
                        except ValueError:
                            shape = set()
                        if shape != {"error", "detail"}:
                            bad.append(
                                (
                                    who,
                                    method,
                                    path[:60],
                                    content_type,
                                    body[:40],
                                    response.status_code,
                                    response.content[:120],
                                )
                            )
    assert not bad, "\n".join(map(repr, bad[:60])) + f"\n... {len(bad)} in all"
    assert state() == before
    assert quick_bank.calls == []


NUL_PLACES = [
    (
        "conversation",
        lambda b: b["conversation"].append({"role": "tool", "content": "x", "trusted": False, "k\x00": 1}),
    ),
    ("candidate value", lambda b: b["candidates"].update(memo={"value": "a\x00b", "pointer": None})),
    ("candidate key", lambda b: b["candidates"].update({"me\x00mo": {"value": "a", "pointer": None}})),
]


@pytest.mark.parametrize(("where", "poison"), NUL_PLACES, ids=[p[0] for p in NUL_PLACES])
def test_a_nul_character_anywhere_in_an_execution_body_is_a_400_and_nothing_is_recorded(
    quick_bank: Downstream, quick_agent: Agent, where: str, poison: Any
) -> None:
    body = transfer_request()
    poison(body)
    before = state()

    response = quick_agent.post("/api/v1/executions", body)

    assert response.status_code == 400, response.content
    assert response.json()["error"] == "malformed_json"
    assert state() == before
    assert quick_bank.calls == [] and quick_bank.lookups == 0


def test_a_nul_character_in_an_imported_tool_is_a_400_and_the_catalog_is_kept(quick_bank: Downstream) -> None:
    operator = make_operator()
    tool = {**TRANSFER, "description": "Move money.\x00"}
    before = state()

    response = operator.post("/api/v1/catalog/import", {"server": "bank", "tools": [tool]})

    assert response.status_code == 400, response.content
    assert response.json()["error"] == "malformed_json"
    assert state() == before


def test_a_nul_character_in_a_query_parameter_is_a_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    response = quick_agent.get("/api/v1/presets", {"principal": "user:\x00alice"})

    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid"


def test_a_nul_in_an_api_path_is_a_400_in_the_api_shape(quick_bank: Downstream, quick_agent: Agent) -> None:
    response = quick_agent.get("/api/v1/executions/%00")

    assert response.status_code == 400
    assert set(response.json()) == {"error", "detail"}


def test_a_body_too_large_is_refused_with_the_policy_like_every_answer(quick_agent: Agent) -> None:
    response = quick_agent.client.generic(
        "POST", "/api/v1/executions", b"x" * (2 << 20), content_type="application/json"
    )

    assert response.status_code == 413
    assert "script-src 'self'" in response["Content-Security-Policy"]
