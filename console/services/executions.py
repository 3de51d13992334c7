"""Executions: submitting one (`execution_create`), the user's answers, preflighting again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from console import models, storage
from console.audit import audit_append, audit_batch
from console.errors import BadInput, Conflict, InvalidAnswer, Unprocessable
from console.services.common import _has_run, _refuse_principal, lock_execution
from console.services.preflights import _contract_rows, _preflight_and_record
from console.services.presets import _preset_put
from preflight import compile_plan
from preflight.answers import accepted_form, answer_problem, normalise_answer, rememberable
from preflight.approvals import value_digest
from preflight.canonical import canonical_json, digest
from preflight.confirmations import bound_answer, is_user_yes_key
from preflight.errors import RequestError
from preflight.request import parse_request

ANSWERABLE_FIXED = frozenset({"fixed:tool", "fixed:timing", "fixed:action_name"})
# The channels that carry the requesting user's own words (the agent API relays them): only these give a
# confirmation or consent. A reviewer's channel never does.
USER_CHANNELS = frozenset({"agent"})


def check_pointers(body: Mapping[str, Any]) -> None:
    """A pointer that lands outside the conversation is a broken request, not an unverified value."""
    turns = body.get("conversation") or []

    def check(pointer: Any, field: str) -> None:
        spans = pointer if isinstance(pointer, list) else [pointer]
        for i, span in enumerate(spans):
            where = f"{field}[{i}]" if isinstance(pointer, list) else field
            turn, start, end = span["turn"], span["start"], span["end"]
            if not 0 <= turn < len(turns):
                raise Unprocessable(
                    "pointer_out_of_range",
                    f"{where}: turn {turn} is not in the conversation ({len(turns)} turns)",
                )
            length = len(turns[turn]["content"])
            if not 0 <= start < end <= length:
                raise Unprocessable(
                    "pointer_out_of_range",
                    f"{where}: [{start}, {end}) is not a span of turn {turn} ({length} characters)",
                )

    for key, cand in (body.get("candidates") or {}).items():
        if cand.get("pointer") is not None:
            check(cand["pointer"], f"candidates.{key}.pointer")
    if body.get("action_name") is not None:
        check(body["action_name"], "action_name")
    timing = body.get("timing")
    if isinstance(timing, Mapping) and timing.get("pointer") is not None:
        check(timing["pointer"], "timing.pointer")


@transaction.atomic
def execution_create(
    *, body: Mapping[str, Any], token: models.AgentToken | None, actor: str
) -> models.Execution:
    """Record a candidate execution and its first preflight. `body` has passed the API's shape checks."""
    try:
        request = parse_request(body)
    except RequestError as exc:
        raise BadInput("invalid", f"{exc.field}: {exc.reason}") from None
    if token is not None and not token.may_act_for(request.principal):
        raise _refuse_principal(request.principal)
    check_pointers(body)
    # Inserted by _store_record together with its first verdict (one INSERT instead of INSERT + UPDATE).
    execution = models.Execution(principal=request.principal, token=token, request=dict(body), verdict="")
    rows = _contract_rows(body)  # an unknown tool records nothing
    _preflight_and_record(
        execution,
        trigger="create",
        fresh=True,
        rows=rows,
        request=request,
        audit={"principal": request.principal, "actor": actor, "request_digest": digest(body)},
    )
    return execution


def _check_answer_key(execution: models.Execution, key: str) -> None:
    if key in ANSWERABLE_FIXED or key.startswith("branch:") or is_user_yes_key(key):
        return
    if key.startswith("arg:"):
        if execution.contract is None:
            raise Unprocessable("unknown_slot", f"{key}: choose the action first (answer fixed:tool)")
        if not key[4:] or "" in key[4:].split("."):
            raise Unprocessable("unknown_slot", f"{key}: not an argument path")
        # An argument the tool does not declare is answerable too: what the user states is never dropped;
        # the preflight makes it a slot and the whole-payload validation decides whether the tool takes it.
        return
    # Conditions, approvals and rules are settled by code and by approvers, never by an answer.
    raise Unprocessable("not_answerable", f"{key}: this slot is not settled by an answer")


def execution_answer(
    *,
    execution_id: Any,
    answers: Mapping[str, Any],
    answered_by: str,
    channel: str,
    actor: str,
    remember: Sequence[str] = (),
) -> models.PreflightRecord:
    """Record the user's answers (remembered ones become presets, with consent) and preflight again.

    Each answer is checked against its question's schema first: one it refuses raises InvalidAnswer
    (`invalid_answer`, or `not_rememberable` for a remember the slot does not allow), and nothing is
    settled; the refused attempt is still written to the audit chain (committed before the raise)."""
    with transaction.atomic(), audit_batch():
        execution = lock_execution(execution_id)
        if _has_run(execution):
            raise Conflict("already_ran", "this execution already ran; submit a new one")
        for key in answers:
            _check_answer_key(execution, key)
        answers = {key: normalise_answer(key, value) for key, value in answers.items()}
        _check_user_yes(answers, channel=channel, remember=remember)
        for key in remember:
            if key not in answers:
                raise BadInput("invalid", f"remember: {key} is not among the answers")
        try:
            canonical_json(dict(answers))
        except TypeError as exc:
            raise BadInput("invalid", f"answers: {exc}") from None

        def audit_body(answers: Mapping[str, Any]) -> dict[str, Any]:
            return {
                "answered_by": answered_by,
                "channel": channel,
                "actor": actor,
                "answers": {k: value_digest(v) for k, v in answers.items()},
                "remember": list(remember),
            }

        # Checked as the user sent them (a yes/no is a boolean), then a yes/no is bound to what it was shown.
        refused = _refused_answer(execution, answers, remember)
        if refused is None:
            answers = _bind_user_yes(execution, answers)
            models.Answer.objects.bulk_create(
                models.Answer(
                    execution=execution,
                    slot_key=key,
                    value=value,
                    answered_by=answered_by,
                    channel=channel,
                    remember=key in remember,
                )
                for key, value in answers.items()
            )
            audit_append(kind="answer", execution_id=execution.pk, body=audit_body(answers))
            if remember:
                if execution.contract is None:
                    raise Unprocessable(
                        "unknown_slot", "remember: choose the action first (answer fixed:tool)"
                    )
                tool = f"{execution.contract.server.name}/{execution.contract.name}"
                for key in remember:
                    _preset_put(execution, tool, key, answers[key], answered_by)
            return _preflight_and_record(execution, trigger="answer")
        body = audit_body(answers) | {"error": refused.code, "slot": refused.slot, "reason": refused.reason}
        audit_append(kind="answer_refused", execution_id=execution.pk, body=body)
    raise refused  # once the refused attempt is committed


_YES_SCHEMA: Mapping[str, Any] = {"type": "boolean"}


def _refused_answer(
    execution: models.Execution, answers: Mapping[str, Any], remember: Sequence[str]
) -> InvalidAnswer | None:
    contract = execution.contract
    plan = compile_plan(storage.engine_contract(contract)) if contract is not None else None
    asked: dict[str, Mapping[str, Any]] = {}
    if execution.records:
        for question in storage.latest_record(execution).record.get("questions") or []:
            asked[question["slot"]] = question["schema"]
    for key, value in answers.items():
        if is_user_yes_key(key):
            # A yes/no is checked on the boolean the user gave (bare, or beside the digest it names), and
            # against a boolean schema even when its question is not open now (a mind changed after a yes).
            if isinstance(value, Mapping) and set(value) == {"yes", "digest"}:
                value = value["yes"]
            asked.setdefault(key, _YES_SCHEMA)
        problem = answer_problem(plan, key, value, asked)
        if problem is not None:
            return InvalidAnswer(key, problem, accepts=accepted_form(plan, key, asked))
    for key in remember:
        if not rememberable(plan, key):
            reason = "this slot does not take remembered values (its sources lack user_answer or preset)"
            return InvalidAnswer(key, reason, code="not_rememberable")
    return None


def _check_user_yes(answers: Mapping[str, Any], *, channel: str, remember: Sequence[str] = ()) -> None:
    """Only the requesting user's channel gives a yes or no (the agent relays the user's words): a reviewer's
    yes is an approval, never the user's confirmation. A yes or no is given each time, never remembered."""
    keys = [k for k in answers if is_user_yes_key(k)]
    if keys and channel not in USER_CHANNELS:
        raise Unprocessable(
            "not_answerable", f"{keys[0]}: only the requesting user confirms or consents; approve instead"
        )
    for key in remember:
        if is_user_yes_key(key):
            raise Unprocessable(
                "not_answerable", f"remember: {key}: a yes or no is given each time, never kept"
            )


def _bind_user_yes(execution: models.Execution, answers: Mapping[str, Any]) -> Mapping[str, Any]:
    """Answers to confirmation and consent questions, bound to the digest the question showed.

    A yes or no answers the question in the latest record, so it binds to what that question showed, even
    when the same batch changes the value (the new value is then asked again): a confirmation cannot be
    carried over to a value the user was not shown. An answer may instead name the digest it was given for
    ({"yes": true, "digest": ...}), which must be the one shown. Who may give them: `_check_user_yes`."""
    keys = [k for k in answers if is_user_yes_key(k)]
    if not keys:
        return answers
    latest = storage.latest_record(execution).record
    # An open question, or a yes/no already given (the user may change their mind before the call runs).
    shown = {
        s["key"]: {"digest": (s.get("pointer") or {}).get("digest")}
        for s in latest.get("slots") or []
        if is_user_yes_key(s["key"]) and s.get("status") == "known"
    }
    shown |= {
        q["slot"]: q.get("shows") or {}
        for q in latest.get("questions") or []
        if q.get("kind") in ("confirmation", "consent")
    }
    bound = dict(answers)
    for key in keys:
        if key not in shown or not isinstance(shown[key].get("digest"), str):
            raise Conflict("not_asked", f"{key}: no question awaits this yes or no; read the latest record")
        answer, current = answers[key], str(shown[key]["digest"])
        if isinstance(answer, Mapping) and set(answer) == {"yes", "digest"}:
            if answer["digest"] != current:
                raise Conflict("stale_value", f"{key}: the question now shows another value; read it again")
            answer = answer["yes"]
        if not isinstance(answer, bool):
            raise Unprocessable("invalid_answer", f"{key}: answer true (yes) or false (no)")
        bound[key] = bound_answer(answer, current)
    return bound


@transaction.atomic
def execution_repreflight(*, execution_id: Any, trigger: str) -> models.PreflightRecord:
    """Preflight again from everything recorded so far. Never reuses an earlier verdict. An execution that
    already ran is left alone: a fresh `execute` would mint a second grant for a call that happened."""
    execution = lock_execution(execution_id, contract=False)
    if _has_run(execution):
        return storage.latest_record(execution)
    return _preflight_and_record(execution, trigger=trigger)
