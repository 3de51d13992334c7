"""Executions: submit a candidate execution, answer its questions, read it, run it with its grant."""

from __future__ import annotations

import copy
import math
import time
from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api.common import AGENT_PERMISSIONS, actor, agent_token, errors, execution_or_404
from console.api.fields import AnyJSON, Array, Flag, Integer, JSONObject, Object, Text
from console.api.record_serializers import ErrorOut, InvalidAnswerOut, RecordOut
from console.errors import BadInput
from console.selectors.lookups import infra_retry_due
from console.services.executions import execution_answer, execution_create, execution_repreflight
from console.services.gate import execution_run
from console.services.review import execution_expire
from console.storage import has_answer_rows, record_answer

MAX_WAIT_S = 10.0
_POLL_S = 0.1


def _built[S: serializers.Serializer[JSONObject]](serializer: S) -> S:
    """A serializer built once, its fields with it, for `_checking` to reuse on every request."""
    serializer.fields  # noqa: B018 (DRF builds them on first use, deep-copying every declared field)
    return serializer


def _checking[S: serializers.Serializer[JSONObject]](built: S, data: Any) -> S:
    """A serializer of this data sharing `built`'s fields, whose building is most of what validating costs.
    Safe across threads: validating keeps nothing on the fields; data, errors and validated data go on
    this copy only."""
    serializer = copy.copy(built)
    serializer.initial_data = data
    return serializer


class SpanIn(serializers.Serializer[JSONObject]):
    turn = Integer(help_text="index into conversation")
    start = Integer(help_text="code point offset into the turn's content")
    end = Integer(help_text="exclusive end offset")


_SPAN_IN = _built(SpanIn())


@extend_schema_field(
    {
        "oneOf": [
            {"$ref": "#/components/schemas/SpanIn"},
            {"type": "array", "items": {"$ref": "#/components/schemas/SpanIn"}, "minItems": 1},
        ]
    }
)
class PointerField(serializers.Field[object, object, object, JSONObject]):
    """One span, or one span per element of an array value."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, list):
            if not data:
                raise serializers.ValidationError("an array of spans must not be empty")
            problems = {}
            for i, item in enumerate(data):
                span = _checking(_SPAN_IN, item)
                if not span.is_valid():
                    problems[i] = span.errors
            if problems:
                # Keyed by index, as DRF's own list fields key their errors (older stubs allow only str keys).
                raise serializers.ValidationError(cast(Any, problems))
            return data
        span = _checking(_SPAN_IN, data)
        if not span.is_valid():
            raise serializers.ValidationError(span.errors)
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class TurnIn(serializers.Serializer[JSONObject]):
    role = Text(help_text="user, system, developer, assistant or tool")
    content = Text(allow_blank=True)
    trusted = Flag(required=False, help_text="only trusted user/system/developer turns can settle a slot")


class CandidateIn(serializers.Serializer[JSONObject]):
    value = AnyJSON()
    pointer = PointerField(required=False, allow_null=True)


class TimingIn(serializers.Serializer[JSONObject]):
    mode = serializers.ChoiceField(choices=["immediate", "at"])
    at = Text(required=False, help_text="ISO 8601 with a UTC offset, for mode 'at'")
    pointer = SpanIn(required=False, allow_null=True)


class ToolRefIn(serializers.Serializer[JSONObject]):
    server = Text()
    tool = Text()


class ExecutionIn(serializers.Serializer[JSONObject]):
    server = Text(required=False)
    tool = Text(required=False)
    tool_candidates = Array(child=ToolRefIn(), required=False, min_length=1, max_length=50)
    principal = Text(help_text='who the call is for, e.g. "user:alice"')
    conversation = Array(child=TurnIn(), required=False)
    candidates = Object(child=CandidateIn(), required=False, help_text="argument name -> value + pointer")
    action_name = SpanIn(required=False, allow_null=True, help_text="the user's words naming the action")
    timing = TimingIn(required=False, allow_null=True)
    intended_change = AnyJSON(required=False, help_text='a string, or {"effect": "<declared effect>"}')
    environment = Text(required=False, allow_blank=True)

    def validate_intended_change(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, dict) and isinstance(value.get("effect"), str):
            return value
        raise serializers.ValidationError('must be a string or {"effect": "<string>"}')

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        named = "server" in attrs or "tool" in attrs
        if named and "tool_candidates" in attrs:
            raise serializers.ValidationError(
                {"tool_candidates": "give server + tool, or tool_candidates, not both"}
            )
        if not named and "tool_candidates" not in attrs:
            raise serializers.ValidationError({"tool": "required (with server), or give tool_candidates"})
        if named and not ("server" in attrs and "tool" in attrs):
            missing = "tool" if "server" in attrs else "server"
            raise serializers.ValidationError(
                {missing: "required together with " + ({"server", "tool"} - {missing}).pop()}
            )
        return attrs


class AnswersIn(serializers.Serializer[JSONObject]):
    answers = Object(child=AnyJSON(), help_text="slot key -> the user's own words, from a trusted channel")
    remember = Array(
        child=Text(), required=False, help_text="slot keys the user consented to have remembered (presets)"
    )


class RunIn(serializers.Serializer[JSONObject]):
    grant = Text(help_text="the grant token from the record")


_EXECUTION_IN = _built(ExecutionIn())
_ANSWERS_IN = _built(AnswersIn())
_RUN_IN = _built(RunIn())


class RunOut(serializers.Serializer[JSONObject]):
    outcome = serializers.ChoiceField(choices=["executed", "failed", "outcome_unknown"])
    result = AnyJSON()
    detail = serializers.CharField(required=False)


class ExecutionCreateView(APIView):
    permission_classes = AGENT_PERMISSIONS

    @extend_schema(
        operation_id="executions_create",
        summary="Submit a candidate execution and get its first preflight record",
        request=ExecutionIn,
        responses={201: RecordOut, **errors(403, 404, 422)},
    )
    def post(self, request: Request) -> Response:
        _checking(_EXECUTION_IN, request.data).is_valid(raise_exception=True)
        data = request.data
        assert isinstance(data, dict)  # ExecutionIn has just refused anything but an object
        # ExecutionIn's fields are the ones the engine reads; anything else in the body is not stored.
        body = {k: data[k] for k in ExecutionIn._declared_fields if k in data}
        execution = execution_create(body=body, token=agent_token(request), actor=actor(request))
        if not has_answer_rows(execution):  # work after commit may have preflighted it again: read it back
            execution = execution_or_404(execution.pk, agent_token(request))
        return Response(record_answer(execution), status=201)


class ExecutionDetailView(APIView):
    permission_classes = AGENT_PERMISSIONS

    @extend_schema(
        operation_id="executions_retrieve",
        summary="The latest record of an execution",
        parameters=[
            OpenApiParameter(
                "wait",
                OpenApiTypes.NUMBER,
                description=f"while the verdict is `measure`, wait up to this long (max {MAX_WAIT_S:g})",
            )
        ],
        responses={200: RecordOut, **errors(404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        wait = _wait_seconds(request.query_params.get("wait"))
        execution = execution_or_404(execution_id, agent_token(request))
        if execution.deadline_passed and execution_expire(execution_id=execution.pk):
            execution = execution_or_404(execution.pk, agent_token(request))
        if execution.verdict == "hold" and infra_retry_due(execution_id=execution.pk):
            # A hold from a lookup our infrastructure lost, whose backoff has passed: looked up again now.
            execution_repreflight(execution_id=execution.pk, trigger="retry")
            execution = execution_or_404(execution.pk, agent_token(request))
        deadline = time.monotonic() + wait
        while execution.verdict == "measure" and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            execution.refresh_from_db(fields=["verdict", "records"])
        return Response(record_answer(execution))


def _wait_seconds(raw: str | None) -> float:
    try:
        wait = float(raw or 0)
    except ValueError:
        wait = math.nan
    if not 0 <= wait <= MAX_WAIT_S:
        raise BadInput("invalid", f"wait: a number of seconds from 0 to {MAX_WAIT_S:g}")
    return wait


class ExecutionAnswerView(APIView):
    permission_classes = AGENT_PERMISSIONS

    @extend_schema(
        operation_id="executions_answer",
        summary="Answer questions (and optionally remember answers); the execution is preflighted again",
        description=(
            "Answers are keyed by the question's `slot`. Each answer is checked against its question's"
            " `schema` first (an answer to a slot not asked now, against the schema its question would"
            " carry). One the schema refuses answers 422 `invalid_answer` with `slot` and `reason`, and"
            " nothing is settled; the attempt is still recorded in the audit chain. Answers for arguments"
            " the tool does not declare are accepted: they become slots, and the whole-payload validation"
            " decides (a tool that cannot take one asks whether to go ahead without it: answer null)."
            " `remember` is refused (422 `not_rememberable`) for a slot whose sources lack user_answer or"
            " preset. A `confirmation` or `consent` question is answered true (yes) or false (no), or"
            ' {"yes": <bool>, "digest": <shows.digest>}; the answer binds to the digest the latest'
            " record's question shows, even when the same request changes the value (the new value is"
            " then asked again)."
        ),
        request=AnswersIn,
        responses={
            200: RecordOut,
            **errors(404),
            409: OpenApiResponse(
                ErrorOut,
                description=(
                    "`already_ran`; `not_asked`: no confirmation or consent question for that slot awaits an"
                    " answer in the latest record; `stale_value`: the digest named is not the one shown"
                ),
            ),
            422: OpenApiResponse(
                InvalidAnswerOut,
                description=(
                    "`invalid_answer`: an answer its question's schema refuses (for a confirmation or"
                    " consent: not a yes or a no); `not_rememberable`; `unknown_slot`; `not_answerable`"
                ),
            ),
        },
    )
    def post(self, request: Request, execution_id: str) -> Response:
        data = _checking(_ANSWERS_IN, request.data)
        data.is_valid(raise_exception=True)
        execution = execution_or_404(execution_id, agent_token(request))
        stored = execution_answer(
            execution_id=execution.pk,
            answers=data.validated_data["answers"],
            remember=data.validated_data.get("remember", []),
            # The agent relays the user's own words; the user is the one who answered.
            answered_by=execution.principal,
            channel="agent",
            actor=actor(request),
        )
        execution = stored.execution  # what the service wrote is on it, unless work after commit may have
        if not has_answer_rows(execution):  # preflighted it again: then it is read back
            execution = execution_or_404(execution.pk, agent_token(request))
        return Response(record_answer(execution, read_back_order=True))


class ExecutionRunView(APIView):
    permission_classes = AGENT_PERMISSIONS

    @extend_schema(
        operation_id="executions_run",
        summary="Run the granted call, once. 409 for an expired, used, tampered or foreign grant",
        description=(
            "The gate re-checks what the grant rests on before the call: the tool's current contract, and the"
            " conditions the contract marks `recheck` (or, with an `effect_key`, every condition that reads a"
            " measure), measured again under a lock held per effect key until the outcome is recorded. A"
            " refusal never reaches the tool."
        ),
        request=RunIn,
        responses={
            200: RunOut,
            **errors(404),
            409: OpenApiResponse(
                ErrorOut,
                description=(
                    "`grant_expired` (also once the observations it rests on are stale), `grant_used`,"
                    " `grant_superseded`, `grant_mismatch`, `grant_malformed`, `grant_bad_signature`,"
                    " `grant_unknown_key`, `grant_unknown`; `contract_changed`: the tool's contract is no"
                    " longer the one the grant was issued under (a catalog change voids grants);"
                    " `state_changed`: a re-checked condition no longer holds; `recheck_failed`: it could"
                    " not be measured again;"
                    " `effect_busy`: another run of the same effect key held its lock too long"
                ),
            ),
        },
    )
    def post(self, request: Request, execution_id: str) -> Response:
        data = _checking(_RUN_IN, request.data)
        data.is_valid(raise_exception=True)
        execution = execution_or_404(execution_id, agent_token(request))
        outcome = execution_run(
            execution_id=execution.pk, token=data.validated_data["grant"], actor=actor(request)
        )
        body: dict[str, Any] = {"outcome": outcome.outcome, "result": outcome.result}
        if outcome.detail:
            body["detail"] = outcome.detail
        return Response(body)
