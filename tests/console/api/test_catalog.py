"""Catalog import and measures: contracts versioned by digest, problems reported per tool."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from console_helpers import GET_BALANCE, TRANSFER, Agent, transfer_v2

from console import models

pytestmark = pytest.mark.django_db


def imported(agent: Agent, tools: list[Any], **extra: Any) -> Any:
    return agent.post("/api/v1/catalog/import", {"server": "bank", "tools": tools, **extra})


def test_an_import_answers_each_tool_with_its_digest_and_obligations(quick_operator: Agent) -> None:
    response = imported(quick_operator, [TRANSFER, GET_BALANCE])

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["server"] == "bank"
    transfer = body["tools"][0]
    assert transfer["name"] == "transfer"
    assert transfer["contract_digest"].startswith("sha256:")
    assert transfer["problems"] == []
    keys = [o["key"] for o in transfer["obligations"]]
    assert {"fixed:tool", "fixed:timing", "arg:from_account", "arg:to_account", "arg:amount"} <= set(keys)
    assert {"cond:balance_covers_amount", "cond:not_to_self"} <= set(keys)
    assert next(o for o in transfer["obligations"] if o["key"] == "arg:from_account")["sources"] == [
        "user_answer",
        "instruction",
        "preset",
    ]


def test_a_bad_tool_is_reported_and_the_rest_of_the_batch_imports(quick_operator: Agent) -> None:
    broken = {"name": "broken", "inputSchema": {"type": "object", "properties": {"a": {"type": "nope"}}}}

    body = imported(quick_operator, [broken, TRANSFER, "not a tool", {"description": "no name"}]).json()

    by_name = {t["name"]: t for t in body["tools"]}
    assert by_name["broken"]["contract_digest"] is None
    assert by_name["broken"]["version"] == "invalid"
    assert "inputSchema" in by_name["broken"]["problems"][0]["where"]
    assert by_name["transfer"]["version"] == "new"
    assert by_name["tools[2]"]["problems"][0]["class"] == "invalid"
    assert by_name["tools[3]"]["problems"][0]["class"] == "invalid"
    assert models.ToolContract.objects.filter(current=True).count() == 1


def test_provider_gaps_are_reported_as_problems(quick_operator: Agent) -> None:
    vague = {
        "name": "delete_repo",
        "description": "Deletes a repository. Requires admin rights.",
        "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]},
    }

    problems = imported(quick_operator, [vague]).json()["tools"][0]["problems"]

    assert {p["slot"] for p in problems} >= {"fixed:intended_change", "cond:prose-1"}
    assert all(p["class"] == "provider_gap" for p in problems)


def test_a_changed_definition_is_a_new_version_and_old_records_keep_theirs(quick_operator: Agent) -> None:
    first = imported(quick_operator, [TRANSFER]).json()["tools"][0]
    again = imported(quick_operator, [TRANSFER]).json()["tools"][0]
    second = imported(quick_operator, [transfer_v2()]).json()["tools"][0]

    assert again["version"] == "unchanged"
    assert again["contract_digest"] == first["contract_digest"]
    assert second["version"] == "new"
    assert second["contract_digest"] != first["contract_digest"]
    versions = models.ToolContract.objects.filter(name="transfer").order_by("pk")
    assert [(v.digest, v.current) for v in versions] == [
        (first["contract_digest"], False),
        (second["contract_digest"], True),
    ]


def test_tools_missing_from_a_new_list_are_retired(quick_operator: Agent) -> None:
    imported(quick_operator, [TRANSFER, GET_BALANCE])

    body = imported(quick_operator, [TRANSFER]).json()

    assert body["retired"] == ["get_balance"]
    assert not models.ToolContract.objects.filter(name="get_balance", current=True).exists()


def test_annotations_are_untrusted_unless_the_operator_says_so(quick_operator: Agent) -> None:
    untrusted = imported(quick_operator, [GET_BALANCE]).json()["tools"][0]
    trusted = imported(quick_operator, [GET_BALANCE], annotations_trusted=True).json()["tools"][0]

    assert untrusted["contract_digest"] != trusted["contract_digest"]
    untrusted_keys = {o["key"] for o in untrusted["obligations"]}
    trusted_keys = {o["key"] for o in trusted["obligations"]}
    assert "fixed:timing" in untrusted_keys  # a read-only claim from an untrusted server changes nothing
    assert "fixed:timing" not in trusted_keys


def test_an_extension_in_meta_or_a_side_car_is_read(quick_operator: Agent) -> None:
    plain = copy.deepcopy(TRANSFER)
    extension = plain.pop("x-preflight")
    in_meta = {**plain, "_meta": {"x-preflight": extension}}

    from_meta = imported(quick_operator, [in_meta]).json()["tools"][0]
    from_side_car = imported(quick_operator, [plain], extensions={"transfer": extension}).json()["tools"][0]

    for tool in (from_meta, from_side_car):
        assert "cond:not_to_self" in {o["key"] for o in tool["obligations"]}


def test_a_reimport_that_names_no_trust_keeps_the_servers_trust(quick_operator: Agent) -> None:
    trusted = imported(quick_operator, [GET_BALANCE], annotations_trusted=True).json()["tools"][0]

    again = imported(quick_operator, [GET_BALANCE]).json()

    assert again["tools"][0]["contract_digest"] == trusted["contract_digest"]
    assert again["tools"][0]["version"] == "unchanged"
    assert "annotations_trusted" in again["kept"]
    assert models.Server.objects.get(name="bank").annotations_trusted is True


def test_withdrawing_trust_takes_an_explicit_false(quick_operator: Agent) -> None:
    imported(quick_operator, [GET_BALANCE], annotations_trusted=True)

    withdrawn = imported(quick_operator, [GET_BALANCE], annotations_trusted=False).json()

    assert withdrawn["tools"][0]["version"] == "new"
    assert models.Server.objects.get(name="bank").annotations_trusted is False
    assert models.AuditEvent.objects.filter(kind="catalog_import").latest("seq").body["changed"] == [
        "annotations_trusted"
    ]


def test_a_reimport_without_side_cars_keeps_each_tools_stored_side_car(quick_operator: Agent) -> None:
    plain = copy.deepcopy(TRANSFER)
    extension = plain.pop("x-preflight")
    first = imported(quick_operator, [plain], extensions={"transfer": extension}).json()["tools"][0]

    again = imported(quick_operator, [plain]).json()

    assert again["tools"][0]["contract_digest"] == first["contract_digest"]
    assert "cond:not_to_self" in {o["key"] for o in again["tools"][0]["obligations"]}
    assert "extensions.transfer" in again["kept"]


def test_a_side_car_given_as_null_is_removed(quick_operator: Agent) -> None:
    plain = copy.deepcopy(TRANSFER)
    extension = plain.pop("x-preflight")
    imported(quick_operator, [plain], extensions={"transfer": extension})

    removed = imported(quick_operator, [plain], extensions={"transfer": None}).json()

    assert "cond:not_to_self" not in {o["key"] for o in removed["tools"][0]["obligations"]}
    assert models.Server.objects.get(name="bank").extensions == {}


def test_an_import_needs_a_server_and_a_list_of_tools(quick_operator: Agent) -> None:
    response = quick_operator.post("/api/v1/catalog/import", {"server": 3, "tools": {}})

    assert response.status_code == 400
    assert "server" in response.json()["detail"] and "tools" in response.json()["detail"]


def test_a_measure_is_created_then_redefined_by_name(quick_operator: Agent) -> None:
    body = {"name": "bank.balance", "kind": "http", "url": "http://127.0.0.1:9/balance", "timeout_s": 2}

    created = quick_operator.post("/api/v1/measures", body)
    redefined = quick_operator.post("/api/v1/measures", body | {"timeout_s": 3})

    assert created.status_code == 201
    assert created.json() == body | {"config": {}, "created": True}
    assert redefined.status_code == 200
    assert models.Measure.objects.get().timeout_s == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "m", "kind": "ftp"}, "kind"),
        ({"name": "m", "kind": "http"}, "url"),
        ({"name": "m", "kind": "python", "timeout_s": 0}, "timeout_s"),
        ({"name": "m", "kind": "python", "timeout_s": "2"}, "timeout_s"),
        ({"kind": "python"}, "name"),
    ],
)
def test_a_bad_measure_is_400_naming_the_field(
    quick_operator: Agent, body: dict[str, Any], field: str
) -> None:
    response = quick_operator.post("/api/v1/measures", body)

    assert response.status_code == 400
    assert response.json()["detail"].startswith(field)


def test_a_connector_timeout_that_cannot_fit_inside_the_web_workers_limit_is_refused(
    quick_operator: Agent, settings: Any
) -> None:
    limit = settings.PREFLIGHT_TOOL_TIMEOUT_MAX_S
    assert limit <= settings.PREFLIGHT_WEB_TIMEOUT_S - 8  # a real margin for the run's own writes
    too_long = {"kind": "python", "timeout_s": limit + 1}

    refused = imported(quick_operator, [TRANSFER], connector=too_long)
    fits = imported(quick_operator, [TRANSFER], connector={"kind": "python", "timeout_s": limit})

    assert refused.status_code == 422
    assert refused.json()["error"] == "timeout_too_long"
    assert "PREFLIGHT_WEB_TIMEOUT_S" in refused.json()["detail"]
    assert fits.status_code == 201
    assert models.Server.objects.get(name="bank").connector == {"kind": "python", "timeout_s": limit}


def test_a_measure_timeout_beyond_the_lookup_tasks_limit_is_refused(
    quick_operator: Agent, settings: Any
) -> None:
    body = {"name": "m", "kind": "python", "timeout_s": settings.PREFLIGHT_MEASURE_TIMEOUT_MAX_S + 1}

    response = quick_operator.post("/api/v1/measures", body)

    assert response.status_code == 400
    assert response.json()["detail"].startswith("timeout_s")
    assert not models.Measure.objects.exists()
