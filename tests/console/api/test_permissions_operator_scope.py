"""Agents submit; operators define. An agent token configuring the gate is refused and changes nothing."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from console_helpers import GET_BALANCE, TRANSFER, Agent, make_operator
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from console import models
from console.services.catalog import catalog_import
from console.services.measures import measure_create

pytestmark = pytest.mark.django_db

IMPORT = {
    "server": "bank",
    "tools": [TRANSFER, GET_BALANCE],
    "annotations_trusted": True,
    "connector": {"kind": "python"},
}
MEASURE = {"name": "bank.balance", "kind": "http", "url": "http://127.0.0.1:8765/m", "timeout_s": 1}

# Every operator endpoint with a body that an operator would get a 2xx for.
OPERATOR_CALLS = [("/api/v1/catalog/import", IMPORT), ("/api/v1/measures", MEASURE)]


def configuration() -> list[Any]:
    """Everything an operator action could change, in a form that compares equal when nothing did."""
    return [
        list(models.Server.objects.order_by("pk").values()),
        list(
            models.ToolContract.objects.order_by("pk").values(
                "pk", "digest", "current", "annotations_trusted"
            )
        ),
        list(models.Measure.objects.order_by("pk").values()),
        list(models.RuleSet.objects.order_by("pk").values()),
        models.AuditEvent.objects.count(),
    ]


@pytest.fixture
def configured() -> None:
    """An operator's setup an attacker would like to replace: an untrusted bank and a defined lookup."""
    catalog_import(server="bank", tools=[TRANSFER], annotations_trusted=False, actor="test")
    measure_create(name="bank.balance", kind="python", timeout_s=2, actor="test")


def body_of(response: Any, status: int) -> Any:
    assert response.status_code == status, (response.status_code, response.content[:500])
    return response.json()


@pytest.mark.parametrize(("path", "body"), OPERATOR_CALLS)
def test_an_agent_token_is_forbidden_to_configure_the_gate_and_nothing_changes(
    configured: None, quick_agent: Agent, path: str, body: dict[str, Any]
) -> None:
    before = configuration()

    refused = body_of(quick_agent.post(path, body), 403)

    assert refused["error"] == "forbidden"
    assert "operator" in refused["detail"]
    assert configuration() == before


@pytest.mark.parametrize(("path", "body"), OPERATOR_CALLS)
@pytest.mark.parametrize(
    "variant",
    [
        {"HTTP_X_HTTP_METHOD_OVERRIDE": "GET"},
        {"HTTP_X_HTTP_METHOD_OVERRIDE": "DELETE"},
        {"HTTP_X_METHOD_OVERRIDE": "GET"},
        {"QUERY_STRING": "_method=GET"},
        {"QUERY_STRING": "format=api"},
        {"HTTP_ACCEPT": "text/html"},
        {"HTTP_ACCEPT": "application/openapi+json"},
    ],
)
def test_an_agent_token_cannot_reach_an_operator_endpoint_by_method_override_or_accept_header(
    configured: None, quick_agent: Agent, path: str, body: dict[str, Any], variant: dict[str, str]
) -> None:
    before = configuration()

    response = quick_agent.post(path, body, **variant)

    assert response.status_code in (403, 404, 406)  # a format the API does not render: 404/406
    assert configuration() == before


@pytest.mark.parametrize(("path", "body"), OPERATOR_CALLS)
@pytest.mark.parametrize(
    ("content_type", "encode"),
    [
        ("application/x-www-form-urlencoded", lambda b: "server=bank&tools=%5B%5D&annotations_trusted=true"),
        (
            "multipart/form-data; boundary=x",
            lambda b: '--x\r\nContent-Disposition: form-data; name="server"\r\n\r\nbank\r\n--x--\r\n',
        ),
        ("text/plain", lambda b: __import__("json").dumps(b)),
        ("application/json; charset=utf-16", lambda b: __import__("json").dumps(b)),
        ("application/merge-patch+json", lambda b: __import__("json").dumps(b)),
    ],
)
def test_an_agent_token_cannot_reach_an_operator_endpoint_with_another_content_type(
    configured: None, quick_agent: Agent, path: str, body: dict[str, Any], content_type: str, encode: Any
) -> None:
    before = configuration()

    response = quick_agent.client.post(path, data=encode(body), content_type=content_type)

    assert response.status_code in (403, 415)
    assert configuration() == before


@pytest.mark.parametrize("method", ["put", "patch", "delete", "get", "options"])
@pytest.mark.parametrize(("path", "body"), OPERATOR_CALLS)
def test_an_agent_token_cannot_configure_through_another_method(
    configured: None, quick_agent: Agent, method: str, path: str, body: dict[str, Any]
) -> None:
    before = configuration()

    response = getattr(quick_agent.client, method)(path, body, format="json")

    assert response.status_code in (403, 405)
    assert configuration() == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/catalog/import/",
        "/api/v1//catalog/import",
        "/api/v1/catalog//import",
        "/api/v1/catalog/import%2F",
        "/api/v1/CATALOG/import",
        "/api/v1/catalog/./import",
        "/api/v1/executions/../catalog/import",
        "/api/v1/measures/",
        "/api/v1/measures;x",
        "/api//v1/measures",
        "/api/schema/",
        "/api/docs/",
    ],
)
def test_an_agent_token_cannot_configure_through_another_spelling_of_the_path(
    configured: None, quick_agent: Agent, path: str
) -> None:
    before = configuration()

    response = quick_agent.post(path, IMPORT | MEASURE)

    assert response.status_code in (403, 404, 405)
    assert configuration() == before


def test_the_openapi_schema_marks_operator_operations_as_forbidden_to_agents(quick_agent: Agent) -> None:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    for path in ("/api/v1/catalog/import", "/api/v1/measures"):
        assert "403" in schema["paths"][path]["post"]["responses"]
    assert "operator" in schema["paths"]["/api/v1/catalog/import"]["post"]["description"]


@pytest.mark.parametrize(("path", "body"), OPERATOR_CALLS)
def test_an_operator_token_configures_the_gate(
    configured: None, quick_operator: Agent, path: str, body: dict[str, Any]
) -> None:
    response = quick_operator.post(path, body)

    assert response.status_code in (200, 201), response.json()


def test_an_operator_tokens_actions_are_audited_as_its_operator_and_token(
    configured: None, quick_operator: Agent
) -> None:
    quick_operator.post("/api/v1/measures", MEASURE)

    event = models.AuditEvent.objects.filter(kind="measure").latest("seq")
    assert event.body["actor"] == "operator:olga (token olga-ci)"


def test_removing_the_operator_role_revokes_the_token_at_once(
    configured: None, quick_operator: Agent
) -> None:
    assert quick_operator.post("/api/v1/measures", MEASURE).status_code == 200
    olga = User.objects.get(username="olga")
    olga.groups.remove(Group.objects.get(name="operator"))
    before = configuration()

    refused = body_of(quick_operator.post("/api/v1/catalog/import", IMPORT), 403)

    assert refused["error"] == "forbidden"
    assert "no longer holds the operator role" in refused["detail"]
    assert configuration() == before


def test_a_deactivated_operators_token_is_refused(configured: None, quick_operator: Agent) -> None:
    User.objects.filter(username="olga").update(is_active=False)
    before = configuration()

    assert body_of(quick_operator.post("/api/v1/measures", MEASURE), 403)["error"] == "forbidden"
    assert configuration() == before


def test_a_superusers_operator_token_needs_no_group(configured: None) -> None:
    User.objects.create_superuser(username="root", password="x")
    out = StringIO()
    call_command("create_operator_token", "root-ci", "--user", "root", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")

    assert client.post("/api/v1/measures", MEASURE, format="json").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/api/v1/executions", {"principal": "user:alice", "conversation": []}),
        ("get", "/api/v1/executions/00000000-0000-0000-0000-000000000000", None),
        ("post", "/api/v1/executions/00000000-0000-0000-0000-000000000000/answers", {"answers": {}}),
        ("post", "/api/v1/executions/00000000-0000-0000-0000-000000000000/run", {"grant": "x"}),
        ("get", "/api/v1/presets?principal=user:alice", None),
        ("delete", "/api/v1/presets/1", None),
    ],
)
def test_an_operator_token_is_not_an_agent(quick_operator: Agent, method: str, path: str, body: Any) -> None:
    before = models.Execution.objects.count(), models.AuditEvent.objects.count()

    response = getattr(quick_operator.client, method)(path, body, format="json")

    assert body_of(response, 403)["error"] == "forbidden"
    assert (models.Execution.objects.count(), models.AuditEvent.objects.count()) == before


def test_create_operator_token_prints_a_token_for_an_operator_only() -> None:
    User.objects.create_user(username="ann")
    with pytest.raises(CommandError, match="does not hold the operator role"):
        call_command("create_operator_token", "x", "--user", "ann", stdout=StringIO())
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("create_operator_token", "x", "--user", "nobody", stdout=StringIO())
    assert not models.AgentToken.objects.exists()

    operator = make_operator("ann")

    assert operator.token.startswith("pfo_")
    row = models.AgentToken.objects.get()
    assert row.user.username == "ann"
    assert operator.token not in str(list(models.AgentToken.objects.values()))
