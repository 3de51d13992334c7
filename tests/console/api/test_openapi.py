"""The agent API is described by a valid OpenAPI schema, with every v1 operation in it."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    generated = SchemaGenerator().get_schema(request=None, public=True)
    assert isinstance(generated, dict)
    return generated


def test_the_schema_validates_against_the_openapi_metaschema(schema: dict[str, Any]) -> None:
    validate_schema(schema)


def test_the_schema_generates_without_a_single_warning() -> None:
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out, stderr=StringIO())
    assert yaml.safe_load(out.getvalue())["openapi"].startswith("3.")


def test_every_agent_api_v1_operation_is_described(schema: dict[str, Any]) -> None:
    operations = {(path, method) for path, item in schema["paths"].items() for method in item}

    assert operations >= {
        ("/api/v1/catalog/import", "post"),
        ("/api/v1/measures", "post"),
        ("/api/v1/executions", "post"),
        ("/api/v1/executions/{execution_id}", "get"),
        ("/api/v1/executions/{execution_id}/answers", "post"),
        ("/api/v1/executions/{execution_id}/run", "post"),
        ("/api/v1/presets", "get"),
        ("/api/v1/presets/{preset_id}", "delete"),
    }


def test_every_operation_needs_the_bearer_token(schema: dict[str, Any]) -> None:
    scheme = schema["components"]["securitySchemes"]["agentToken"]
    assert {k: v for k, v in scheme.items() if k != "description"} == {"type": "http", "scheme": "bearer"}
    assert "create_agent_token NAME" in scheme["description"]
    assert "create_operator_token NAME --user USERNAME" in scheme["description"]
    for path, item in schema["paths"].items():
        if path.startswith("/api/v1/"):
            for operation in item.values():
                assert operation["security"] == [{"agentToken": []}], path


def test_the_record_schema_carries_the_v1_fields(schema: dict[str, Any]) -> None:
    record = schema["components"]["schemas"]["RecordOut"]["properties"]

    assert {
        "id",
        "verdict",
        "slots",
        "questions",
        "unmet",
        "gaps",
        "payload",
        "payload_digest",
        "record_digest",
        "grant",
        "console_url",
    } <= set(record)


def test_the_schema_describes_the_connector_the_gate_reads(schema: dict[str, Any]) -> None:
    connector = schema["components"]["schemas"]["ConnectorIn"]["properties"]

    assert set(connector) == {"kind", "command", "url", "timeout_s", "connect_timeout_s"}
    assert "PREFLIGHT_MCP_STDIO_ALLOW" in connector["command"]["description"]
    assert "PREFLIGHT_HTTP_ALLOW" in connector["url"]["description"]


def test_the_schema_documents_confirmation_and_consent_questions(schema: dict[str, Any]) -> None:
    schemas = schema["components"]["schemas"]
    question = schemas["QuestionOut"]["properties"]

    assert set(schemas["QuestionOutKindEnum"]["enum"]) == {
        "value",
        "choice",
        "without",
        "confirmation",
        "consent",
    }
    assert "shows" in question
    assert "fresh_until" in schema["components"]["schemas"]["RecordOut"]["properties"]


def test_the_schema_documents_the_gates_and_the_answers_refusals(schema: dict[str, Any]) -> None:
    run = schema["paths"]["/api/v1/executions/{execution_id}/run"]["post"]["responses"]["409"]["description"]
    answers = schema["paths"]["/api/v1/executions/{execution_id}/answers"]["post"]["responses"]

    for code in ("contract_changed", "state_changed", "recheck_failed", "effect_busy", "grant_expired"):
        assert f"`{code}`" in run
    assert "`not_asked`" in answers["409"]["description"] and "`stale_value`" in answers["409"]["description"]
    assert "`invalid_answer`" in answers["422"]["description"]


def test_the_answers_operation_documents_invalid_answer_and_the_question_shape(
    schema: dict[str, Any],
) -> None:
    operation = schema["paths"]["/api/v1/executions/{execution_id}/answers"]["post"]
    refused = operation["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[
        -1
    ]
    body = schema["components"]["schemas"][refused]["properties"]
    assert {"error", "detail", "slot", "reason"} <= set(body)
    assert "invalid_answer" in operation["description"]
    assert "invalid_answer" in body["error"]["description"]
    question = schema["components"]["schemas"]["QuestionOut"]["properties"]
    assert {"slot", "kind", "text", "schema", "reason", "proposed"} <= set(question)
    assert "refused" in schema["components"]["schemas"]["SlotOut"]["properties"]
