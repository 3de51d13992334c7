"""Every bad input is a 4xx with {"error", "detail"}; nothing a caller sends produces a 5xx."""

from __future__ import annotations

import json
from typing import Any

import pytest
from console_helpers import Agent, Downstream, transfer_request
from rest_framework.test import APIClient

from console import models

pytestmark = pytest.mark.django_db


def error_of(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"error", "detail"}, body
    assert body["error"] == code, body
    return str(body["detail"])


def post_raw(agent: Agent, path: str, raw: bytes | str) -> Any:
    return agent.client.generic("POST", path, raw, content_type="application/json")


def test_a_request_without_a_token_is_401(quick_bank: Downstream) -> None:
    response = APIClient().post("/api/v1/executions", transfer_request(), format="json")

    error_of(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_unknown_token_is_401(quick_bank: Downstream) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer pfa_nope")

    assert "unknown" in error_of(client.get("/api/v1/presets", {"principal": "x"}), 401, "unauthorized")


def test_a_revoked_token_is_401(quick_agent: Agent) -> None:
    from django.utils import timezone

    models.AgentToken.objects.update(revoked_at=timezone.now())

    error_of(quick_agent.get("/api/v1/presets", {"principal": "x"}), 401, "unauthorized")


def test_a_token_in_the_wrong_scheme_is_401(quick_agent: Agent) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token abc")

    error_of(client.get("/api/v1/presets", {"principal": "x"}), 401, "unauthorized")


def test_malformed_json_is_400(quick_agent: Agent) -> None:
    assert "malformed JSON" in error_of(
        post_raw(quick_agent, "/api/v1/executions", b'{"server": '), 400, "malformed_json"
    )


def test_not_a_json_object_is_400(quick_agent: Agent) -> None:
    error_of(quick_agent.post("/api/v1/executions", [1, 2]), 400, "invalid")


def test_a_non_json_content_type_is_415(quick_agent: Agent) -> None:
    response = quick_agent.client.generic("POST", "/api/v1/executions", b"a=b", content_type="text/plain")

    error_of(response, 415, "unsupported_media_type")


def test_a_wrong_type_is_400_naming_the_field(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request()
    body["principal"] = 5

    assert error_of(quick_agent.post("/api/v1/executions", body), 400, "invalid").startswith("principal:")


def test_a_nested_wrong_type_names_the_path(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request()
    body["conversation"][0]["content"] = ["not", "text"]
    body["candidates"]["amount"]["pointer"]["turn"] = "0"

    detail = error_of(quick_agent.post("/api/v1/executions", body), 400, "invalid")

    assert "conversation[0].content: must be a string" in detail
    assert "candidates.amount.pointer.turn: must be an integer" in detail


def test_a_string_is_never_coerced_from_a_number_or_a_boolean(
    quick_bank: Downstream, quick_agent: Agent
) -> None:
    body = transfer_request()
    body["conversation"][0]["trusted"] = "true"

    assert "conversation[0].trusted" in error_of(quick_agent.post("/api/v1/executions", body), 400, "invalid")


def test_a_missing_principal_is_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request()
    del body["principal"]

    assert "principal" in error_of(quick_agent.post("/api/v1/executions", body), 400, "invalid")


def test_a_tool_and_tool_candidates_together_are_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request() | {"tool_candidates": [{"server": "bank", "tool": "transfer"}]}

    assert "tool_candidates" in error_of(quick_agent.post("/api/v1/executions", body), 400, "invalid")


def test_an_unparseable_timing_is_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request(timing={"mode": "at", "at": "next tuesday"})

    assert "timing.at" in error_of(quick_agent.post("/api/v1/executions", body), 400, "invalid")


def test_an_unknown_tool_is_404_and_records_nothing(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request() | {"tool": "launch_missiles"}

    assert "bank/launch_missiles" in error_of(
        quick_agent.post("/api/v1/executions", body), 404, "unknown_tool"
    )
    assert not models.Execution.objects.exists()


def test_a_tool_whose_definition_is_invalid_is_422(quick_bank: Downstream, quick_agent: Agent) -> None:
    from console.services.catalog import catalog_import

    broken = {"name": "broken", "inputSchema": {"type": "object", "properties": {"a": {"type": "nope"}}}}
    catalog_import(server="junk", tools=[broken], annotations_trusted=False, actor="test")
    body = transfer_request() | {"server": "junk", "tool": "broken"}

    error_of(quick_agent.post("/api/v1/executions", body), 422, "contract_invalid")


@pytest.mark.parametrize(
    ("where", "pointer"),
    [
        ("candidates.amount.pointer", {"turn": 3, "start": 0, "end": 2}),
        ("candidates.amount.pointer", {"turn": 0, "start": 5, "end": 500}),
        ("candidates.amount.pointer", {"turn": 0, "start": 7, "end": 5}),
        ("candidates.amount.pointer", {"turn": -1, "start": 0, "end": 1}),
    ],
)
def test_a_pointer_out_of_range_is_422_naming_it(
    quick_bank: Downstream, quick_agent: Agent, where: str, pointer: dict[str, int]
) -> None:
    body = transfer_request()
    body["candidates"]["amount"]["pointer"] = pointer

    detail = error_of(quick_agent.post("/api/v1/executions", body), 422, "pointer_out_of_range")

    assert detail.startswith(where)
    assert not models.Execution.objects.exists()


def test_an_action_name_pointer_out_of_range_is_422(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request() | {"action_name": {"turn": 0, "start": 0, "end": 10_000}}

    assert error_of(quick_agent.post("/api/v1/executions", body), 422, "pointer_out_of_range").startswith(
        "action_name"
    )


def test_a_body_over_one_mebibyte_is_413(quick_bank: Downstream, quick_agent: Agent) -> None:
    body = transfer_request()
    body["conversation"].append({"role": "tool", "content": "x" * (1024 * 1024), "trusted": False})

    error_of(quick_agent.post("/api/v1/executions", body), 413, "too_large")


def test_a_lying_content_length_is_not_read_past_the_limit(quick_agent: Agent) -> None:
    response = quick_agent.client.generic(
        "POST",
        "/api/v1/executions",
        b"{}",
        content_type="application/json",
        CONTENT_LENGTH=str(2 * 1024 * 1024),
    )

    error_of(response, 413, "too_large")


def test_nesting_deeper_than_64_levels_is_400(quick_agent: Agent) -> None:
    deep: Any = "x"
    for _ in range(65):
        deep = [deep]
    body = transfer_request()
    body["candidates"]["memo"] = {"value": deep}

    error_of(quick_agent.post("/api/v1/executions", body), 400, "too_deep")


def test_nesting_deep_enough_to_break_the_parser_is_still_400(quick_agent: Agent) -> None:
    raw = "[" * 200_000 + "]" * 200_000

    error_of(post_raw(quick_agent, "/api/v1/executions", raw), 400, "too_deep")


def test_nesting_of_64_levels_is_accepted(quick_bank: Downstream, quick_agent: Agent) -> None:
    deep: Any = "x"
    for _ in range(61):  # body -> candidates -> memo -> value -> 61 arrays -> "x": 64 containers deep
        deep = [deep]
    body = transfer_request()
    body["candidates"]["memo"] = {"value": deep}

    assert quick_agent.post("/api/v1/executions", body).status_code == 201


@pytest.mark.parametrize("number", ["1e400", "9007199254740993", "-1e999"])
def test_a_number_no_digest_can_represent_is_400(quick_agent: Agent, number: str) -> None:
    raw = json.dumps(transfer_request()).replace('"value": 120', f'"value": {number}')

    error_of(post_raw(quick_agent, "/api/v1/executions", raw), 400, "invalid_number")


def test_nan_is_malformed_json(quick_agent: Agent) -> None:
    raw = json.dumps(transfer_request()).replace('"value": 120', '"value": NaN')

    error_of(post_raw(quick_agent, "/api/v1/executions", raw), 400, "malformed_json")


def test_a_lone_surrogate_is_400(quick_agent: Agent) -> None:
    raw = json.dumps(transfer_request()).replace('"value": 120', '"value": "\\ud800"')

    error_of(post_raw(quick_agent, "/api/v1/executions", raw), 400, "malformed_json")


def test_an_unknown_execution_is_404(quick_agent: Agent) -> None:
    missing = "00000000-0000-0000-0000-000000000000"

    error_of(quick_agent.get(f"/api/v1/executions/{missing}"), 404, "unknown_execution")
    error_of(
        quick_agent.post(f"/api/v1/executions/{missing}/answers", {"answers": {}}), 404, "unknown_execution"
    )
    error_of(quick_agent.post(f"/api/v1/executions/{missing}/run", {"grant": "x"}), 404, "unknown_execution")


def test_a_malformed_execution_id_is_a_json_404(quick_agent: Agent) -> None:
    error_of(quick_agent.get("/api/v1/executions/not-a-uuid"), 404, "not_found")


def test_an_unknown_api_path_is_a_json_404(quick_agent: Agent) -> None:
    error_of(quick_agent.get("/api/v1/nothing/here"), 404, "not_found")


def test_a_wrong_method_is_405(quick_agent: Agent) -> None:
    error_of(quick_agent.get("/api/v1/executions"), 405, "method_not_allowed")


def test_wait_outside_zero_to_ten_seconds_is_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    for wait in ("11", "-1", "soon"):
        assert error_of(
            quick_agent.get(f"/api/v1/executions/{record['id']}", {"wait": wait}), 400, "invalid"
        ).startswith("wait")


def test_answers_must_be_an_object(quick_bank: Downstream, quick_agent: Agent) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    detail = error_of(
        quick_agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": [1]}), 400, "invalid"
    )

    assert detail.startswith("answers")


def test_an_answer_for_an_argument_the_tool_lacks_is_kept_and_asked_about_not_refused(
    quick_bank: Downstream, quick_agent: Agent
) -> None:
    # Was 422 unknown_slot: now what the user states is never dropped; this tool takes no extra properties,
    # so the user is asked whether to go ahead without it, and nothing runs meanwhile.
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    response = quick_agent.post(
        f"/api/v1/executions/{record['id']}/answers", {"answers": {"arg:colour": "red"}}
    )

    assert response.status_code == 200, response.json()
    after = response.json()
    assert after["verdict"] == "ask" and after["grant"] is None
    assert [(q["slot"], q["kind"]) for q in after["questions"]] == [("arg:colour", "without")]
    assert quick_bank.calls == []


@pytest.mark.parametrize("key", ["arg:", "arg:a..b", "arg:.a"])
def test_an_answer_for_no_argument_path_is_422(quick_bank: Downstream, quick_agent: Agent, key: str) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    response = quick_agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": {key: "red"}})

    error_of(response, 422, "unknown_slot")


@pytest.mark.parametrize("key", ["cond:not_to_self", "approval:large", "user:limit", "anything"])
def test_a_slot_settled_by_code_or_approvers_cannot_be_answered(
    quick_bank: Downstream, quick_agent: Agent, key: str
) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    error_of(
        quick_agent.post(f"/api/v1/executions/{record['id']}/answers", {"answers": {key: True}}),
        422,
        "not_answerable",
    )


def test_remembering_a_slot_that_was_not_answered_is_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()
    body = {"answers": {"arg:memo": "rent"}, "remember": ["arg:from_account"]}

    assert error_of(
        quick_agent.post(f"/api/v1/executions/{record['id']}/answers", body), 400, "invalid"
    ).startswith("remember")


def test_a_run_without_a_grant_string_is_400(quick_bank: Downstream, quick_agent: Agent) -> None:
    record = quick_agent.post("/api/v1/executions", transfer_request()).json()

    assert error_of(
        quick_agent.post(f"/api/v1/executions/{record['id']}/run", {"grant": 7}), 400, "invalid"
    ).startswith("grant")


def test_a_preset_list_needs_a_principal(quick_agent: Agent) -> None:
    error_of(quick_agent.get("/api/v1/presets"), 400, "invalid")


def test_revoking_an_unknown_preset_is_404(quick_agent: Agent) -> None:
    error_of(quick_agent.delete("/api/v1/presets/999999"), 404, "unknown_preset")


def test_a_database_outage_is_a_503_not_a_crash(quick_bank: Downstream, quick_agent: Agent) -> None:
    from django.db import OperationalError, connection

    def refuse(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "console_toolcontract" in sql:
            raise OperationalError("connection refused")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse):
        response = quick_agent.post("/api/v1/executions", transfer_request())

    error_of(response, 503, "unavailable")
