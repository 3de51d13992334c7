"""Confirmations and consent are the requesting user's yes, bound to exactly what they were shown; an
approval is an approver's. Four eyes: a value an approver edited needs another approver's approval."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from builders import NOW, Said, request, run, tool
from catalog_util import catalog_tools, catalogs_present, grounded_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import observed

from preflight import (
    Answer,
    Evidence,
    ExecutionRequest,
    approve,
    compile_plan,
    contract_from_mcp,
    preflight,
    select_tool,
)
from preflight.canonical import digest
from preflight.confirmations import bound_answer, bound_state, confirmation_answer, consent_answer
from preflight.record import Record

RECIPIENT = "DE02120300000000202051"


def confirm(value: Any = RECIPIENT, *, yes: bool = True, by: str = "user:alice") -> dict[str, Answer]:
    return {"confirm:arg:to_account": Answer(confirmation_answer(value, yes=yes), by, "c1")}


def evidence(req: ExecutionRequest, **more: Any) -> Evidence:
    return Evidence(now=NOW, observations=observed(req, 500), **more)


def consenting(**consent: Any) -> dict[str, Any]:
    """The bank tool without the recipient confirmation, asking the user's consent to the whole call."""
    definition = tool()
    definition["x-preflight"]["slots"]["to_account"] = {"sources": ["user_answer", "instruction"]}
    definition["x-preflight"]["consent"] = consent or True
    return definition


def payload_of(record: Record) -> dict[str, Any]:
    assert record.payload is not None
    return dict(record.payload)


# ---- confirmations of one value ---------------------------------------------------------------------------


def test_a_confirmed_slot_asks_the_user_a_yes_no_question_that_shows_the_value(
    grounded: ExecutionRequest,
) -> None:
    record = run(tool(), grounded, evidence(grounded))

    assert record.verdict == "ask"
    (question,) = record.questions
    assert question.slot == "confirm:arg:to_account" and question.kind == "confirmation"
    assert question.schema == {"type": "boolean"}
    assert RECIPIENT in question.text
    assert question.shows == {"slot": "arg:to_account", "value": RECIPIENT, "digest": digest(RECIPIENT)}
    assert question.to_json()["kind"] == "confirmation"


def test_the_users_yes_to_the_value_shown_lets_the_call_through(grounded: ExecutionRequest) -> None:
    record = run(tool(), grounded, evidence(grounded, answers=confirm()))

    assert record.verdict == "execute", record.reasons
    slot = record.slot("confirm:arg:to_account")
    assert slot.status == "known" and slot.value == digest(RECIPIENT) and slot.source == "user_answer"


def test_a_yes_given_for_another_value_does_not_confirm_this_one(grounded: ExecutionRequest) -> None:
    record = run(tool(), grounded, evidence(grounded, answers=confirm("DE0299999999")))

    assert record.verdict == "ask"
    slot = record.slot("confirm:arg:to_account")
    assert slot.status == "unknown" and "another value" in (slot.findings[0].detail or "")


def test_a_changed_value_voids_the_yes_given_for_the_old_one(grounded: ExecutionRequest) -> None:
    changed = {**confirm(), "arg:to_account": Answer("DE0299999999", "user:alice", "a1")}

    record = run(tool(), grounded, evidence(grounded, answers=changed))

    assert record.verdict == "ask"
    assert record.questions[0].shows == {
        "slot": "arg:to_account",
        "value": "DE0299999999",
        "digest": digest("DE0299999999"),
    }


def test_a_yes_recorded_as_someone_elses_answer_is_not_the_users_confirmation(
    grounded: ExecutionRequest,
) -> None:
    record = run(tool(), grounded, evidence(grounded, answers=confirm(by="user:carol")))

    assert record.verdict == "ask"
    assert record.slot("confirm:arg:to_account").status == "unknown"


def test_an_approvers_approval_never_stands_in_for_the_users_confirmation(grounded: ExecutionRequest) -> None:
    approvals = (
        approve("arg:to_account", RECIPIENT, approver="user:carol", at=NOW),
        approve("confirm:arg:to_account", digest(RECIPIENT), approver="user:carol", at=NOW),
    )

    record = run(tool(), grounded, evidence(grounded, approvals=approvals))

    assert record.verdict == "ask"
    assert record.slot("confirm:arg:to_account").status == "unknown"


@pytest.mark.parametrize(
    "value",
    [
        True,
        "yes",
        {"yes": "true", "digest": digest(RECIPIENT)},
        {"yes": True},
        {"yes": True, "digest": digest(RECIPIENT), "also": "this"},
        {"yes": 1, "digest": digest(RECIPIENT)},
    ],
)
def test_an_answer_in_any_other_shape_is_never_a_yes(grounded: ExecutionRequest, value: Any) -> None:
    answers = {"confirm:arg:to_account": Answer(value, "user:alice", "c1")}

    record = run(tool(), grounded, evidence(grounded, answers=answers))

    assert record.verdict == "ask"
    assert record.slot("confirm:arg:to_account").status == "unknown"


def test_the_users_no_to_a_value_blocks_the_call(grounded: ExecutionRequest) -> None:
    record = run(tool(), grounded, evidence(grounded, answers=confirm(yes=False)))

    assert record.verdict == "block"
    assert [(u.id, u.on_false) for u in record.unmet] == [("confirm:arg:to_account", "block")]
    slot = record.slot("confirm:arg:to_account")
    assert slot.status == "known" and slot.met is False
    assert any("confirm:arg:to_account" in reason for reason in record.reasons)


def test_a_new_value_after_a_no_is_asked_for_confirmation_again(grounded: ExecutionRequest) -> None:
    answers = {**confirm(yes=False), "arg:to_account": Answer("DE0299999999", "user:alice", "a1")}

    record = run(tool(), grounded, evidence(grounded, answers=answers))

    assert record.verdict == "ask" and record.unmet == ()
    assert [q.slot for q in record.questions] == ["confirm:arg:to_account"]


def test_a_confirm_label_on_an_argument_is_the_users_confirmation(alice: Said) -> None:
    definition = tool(description="Move money.\n[confirm:to_account] The account holder checks the payee.")
    definition["x-preflight"]["slots"]["to_account"] = {"sources": ["user_answer", "instruction"]}
    req = request(
        alice,
        {
            "amount": (120, "120"),
            "from_account": ("DE11", "DE11"),
            "to_account": (RECIPIENT, "DE02 1203 0000 0000 2020 51"),
        },
    )

    asked = run(definition, req, evidence(req))
    confirmed = run(definition, req, evidence(req, answers=confirm()))

    assert [q.kind for q in asked.questions] == ["confirmation"]
    assert confirmed.verdict == "execute", confirmed.reasons


def test_a_confirmation_is_asked_after_the_lookups_not_before(grounded: ExecutionRequest) -> None:
    record = run(tool(), grounded)

    assert record.verdict == "measure"


def test_a_confirmation_is_asked_before_a_deferral_while_the_user_is_there() -> None:
    said = Said("Send 120 from DE11 to DE02 1203 0000 0000 2020 51 on Friday")
    at = (NOW + timedelta(days=2)).isoformat()
    req = request(
        said,
        {
            "amount": (120, "120"),
            "from_account": ("DE11", "DE11"),
            "to_account": (RECIPIENT, "DE02 1203 0000 0000 2020 51"),
        },
        timing={"mode": "at", "at": at, "pointer": said.at("on Friday")},
    )

    assert run(tool(), req).verdict == "ask"
    assert run(tool(), req, Evidence(now=NOW, answers=confirm())).verdict == "deferred"


def test_confirm_by_approver_stays_an_approvers_approval(grounded: ExecutionRequest) -> None:
    definition = tool()
    definition["x-preflight"]["slots"]["to_account"] = {
        "sources": ["user_answer", "instruction"],
        "confirm": {"by": "approver"},
    }

    held = run(definition, grounded, evidence(grounded))
    ok = approve("arg:to_account", RECIPIENT, approver="user:carol", at=NOW)
    approved = run(definition, grounded, evidence(grounded, approvals=(ok,)))

    assert held.verdict == "hold" and held.questions == ()
    assert held.slot("arg:to_account").approval == "required"
    assert approved.verdict == "execute", approved.reasons


# ---- consent to the whole call ----------------------------------------------------------------------------


def test_a_contract_asking_for_consent_shows_the_final_payload_in_words(grounded: ExecutionRequest) -> None:
    record = run(consenting(text="Please confirm these details."), grounded, evidence(grounded))

    assert record.verdict == "ask"
    (question,) = record.questions
    assert question.slot == "consent:call" and question.kind == "consent"
    assert question.shows is not None
    assert question.shows["payload"] == payload_of(record)
    assert question.shows["digest"] == record.payload_digest
    for words in ("Please confirm these details.", '"DE11"', f'"{RECIPIENT}"', "120", "money leaves"):
        assert words in question.text
    assert "transfer_funds" not in question.text


def test_consent_to_the_payload_shown_lets_the_call_through(grounded: ExecutionRequest) -> None:
    asked = run(consenting(), grounded, evidence(grounded))
    answers = {"consent:call": Answer(consent_answer(payload_of(asked)), "user:alice", "k1")}

    record = run(consenting(), grounded, evidence(grounded, answers=answers))

    assert record.verdict == "execute", record.reasons
    assert record.slot("consent:call").value == asked.payload_digest


def test_consent_for_one_payload_does_not_cover_another(grounded: ExecutionRequest) -> None:
    asked = run(consenting(), grounded, evidence(grounded))
    other = {**payload_of(asked), "amount": 12000}
    answers = {"consent:call": Answer(consent_answer(other), "user:alice", "k1")}

    record = run(consenting(), grounded, evidence(grounded, answers=answers))

    assert record.verdict == "ask"
    assert record.slot("consent:call").status == "unknown"


def test_any_change_to_the_payload_voids_the_consent(grounded: ExecutionRequest) -> None:
    asked = run(consenting(), grounded, evidence(grounded))
    answers = {
        "consent:call": Answer(consent_answer(payload_of(asked)), "user:alice", "k1"),
        "arg:memo": Answer("rent", "user:alice", "a1"),
    }

    record = run(consenting(), grounded, evidence(grounded, answers=answers))

    assert record.verdict == "ask"
    assert record.questions[0].shows is not None and record.questions[0].shows["payload"]["memo"] == "rent"


def test_the_users_no_to_the_call_blocks_it(grounded: ExecutionRequest) -> None:
    asked = run(consenting(), grounded, evidence(grounded))
    answers = {"consent:call": Answer(consent_answer(payload_of(asked), yes=False), "user:alice", "k1")}

    record = run(consenting(), grounded, evidence(grounded, answers=answers))

    assert record.verdict == "block"
    assert [u.id for u in record.unmet] == ["consent:call"]


def test_consent_is_not_asked_before_the_payload_is_complete(alice: Said) -> None:
    req = request(alice, {"amount": (120, "120"), "to_account": (RECIPIENT, "DE02 1203 0000 0000 2020 51")})

    record = run(consenting(), req, Evidence(now=NOW))

    assert record.verdict == "ask"
    assert [q.slot for q in record.questions] == ["arg:from_account"]
    assert record.slot("consent:call").status == "unknown"


def test_a_consent_recorded_as_someone_elses_answer_does_not_count(grounded: ExecutionRequest) -> None:
    asked = run(consenting(), grounded, evidence(grounded))
    answers = {"consent:call": Answer(consent_answer(payload_of(asked)), "user:carol", "k1")}

    assert run(consenting(), grounded, evidence(grounded, answers=answers)).verdict == "ask"


def test_consent_is_asked_only_when_its_condition_says_so(grounded: ExecutionRequest) -> None:
    definition = consenting(text="Large transfer: are you sure?", when="arg.amount > 100")
    small = copy.deepcopy(definition)
    small["x-preflight"]["consent"]["when"] = "arg.amount > 1000"

    assert run(definition, grounded, evidence(grounded)).verdict == "ask"
    assert run(small, grounded, evidence(grounded)).verdict == "execute"


def test_a_confirm_label_without_a_target_asks_for_consent_not_an_approval(
    grounded: ExecutionRequest,
) -> None:
    definition = consenting()
    del definition["x-preflight"]["consent"]
    definition["description"] = "Move money.\n[confirm] The account holder confirms the transfer."

    record = run(definition, grounded, evidence(grounded))

    assert [(q.slot, q.kind) for q in record.questions] == [("consent:call", "consent")]
    assert "The account holder confirms the transfer." in record.questions[0].text
    assert not any(s.key.startswith("approval:label") for s in record.slots)


def test_a_bound_answer_names_the_digest_it_was_given_for() -> None:
    assert bound_answer(True, "sha256:x") == {"yes": True, "digest": "sha256:x"}


# ---- four eyes ---------------------------------------------------------------------------------------------


def test_a_value_an_approver_edited_needs_another_approvers_approval(grounded: ExecutionRequest) -> None:
    edited = {"arg:amount": Answer(110, "user:carol", "a1")}

    record = run(tool(), grounded, evidence(grounded, answers={**edited, **confirm()}))
    slot = record.slot("arg:amount")

    assert record.verdict == "hold"
    assert slot.value == 110 and slot.approval == "required"
    assert "user:carol" in (slot.detail or "")


def test_the_editors_own_approval_of_their_edit_does_not_count(grounded: ExecutionRequest) -> None:
    edited = {"arg:amount": Answer(110, "user:carol", "a1")}
    own = (approve("arg:amount", 110, approver="user:carol", at=NOW),)

    record = run(tool(), grounded, evidence(grounded, answers={**edited, **confirm()}, approvals=own))

    assert record.verdict == "hold"
    assert record.slot("arg:amount").approval == "required"


def test_another_approvers_approval_of_the_edited_value_lets_the_call_through(
    grounded: ExecutionRequest,
) -> None:
    edited = {"arg:amount": Answer(110, "user:carol", "a1")}
    second = (approve("arg:amount", 110, approver="user:dave", at=NOW),)

    record = run(tool(), grounded, evidence(grounded, answers={**edited, **confirm()}, approvals=second))

    assert record.verdict == "execute", record.reasons
    assert record.slot("arg:amount").approval == "approved"


def test_an_approval_of_the_value_before_the_edit_does_not_cover_the_edit(grounded: ExecutionRequest) -> None:
    edited = {"arg:amount": Answer(110, "user:carol", "a1")}
    before = (approve("arg:amount", 120, approver="user:dave", at=NOW),)

    record = run(tool(), grounded, evidence(grounded, answers={**edited, **confirm()}, approvals=before))

    assert record.verdict == "hold"
    assert record.slot("arg:amount").approval == "void"


def test_the_users_own_answer_needs_no_approvers_approval(grounded: ExecutionRequest) -> None:
    answered = {"arg:amount": Answer(110, "user:alice", "a1")}

    record = run(tool(), grounded, evidence(grounded, answers={**answered, **confirm()}))

    assert record.verdict == "execute", record.reasons
    assert record.slot("arg:amount").approval is None


def test_a_timing_an_approver_edited_needs_another_approvers_approval(grounded: ExecutionRequest) -> None:
    # The user said "now": an edit back to "immediate" is their own words again, so this edit names a time.
    edited = {"fixed:timing": Answer(NOW.isoformat(), "user:carol", "a1")}

    record = run(tool(), grounded, evidence(grounded, answers={**edited, **confirm()}))

    assert record.verdict == "hold"
    assert record.slot("fixed:timing").approval == "required"


# ---- freshness -------------------------------------------------------------------------------------------


def test_a_record_is_fresh_until_its_first_observation_goes_stale(grounded: ExecutionRequest) -> None:
    record = run(
        tool(), grounded, Evidence(now=NOW, observations=observed(grounded, 500, age_s=45), answers=confirm())
    )

    assert record.verdict == "execute"
    assert record.fresh_until == (NOW + timedelta(seconds=15)).isoformat()


def test_a_record_that_reads_no_observation_has_no_freshness_limit(alice: Said) -> None:
    definition = tool()
    definition["x-preflight"] = {"state_change": "money moves"}
    req = request(
        alice,
        {
            "amount": (120, "120"),
            "from_account": ("DE11", "DE11"),
            "to_account": (RECIPIENT, "DE02 1203 0000 0000 2020 51"),
        },
    )

    record = run(definition, req)

    assert record.verdict == "execute", record.reasons
    assert record.fresh_until is None


def test_an_approver_leaving_an_argument_out_needs_another_approvers_approval(
    grounded: ExecutionRequest,
) -> None:
    edited = {"arg:memo": Answer(None, "user:carol", "a1")}

    record = run(tool(), grounded, evidence(grounded, answers={**edited, **confirm()}))

    assert record.slot("arg:memo").status == "null"
    assert record.slot("arg:memo").approval == "required"
    assert record.verdict == "hold"


# ---- properties ----------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=200, deadline=None)
@given(shown=JSON, answered=JSON, yes=st.booleans())
def test_a_yes_or_no_holds_for_exactly_the_value_it_was_given_for(
    shown: Any, answered: Any, yes: bool
) -> None:
    state = bound_state(confirmation_answer(answered, yes=yes), digest(shown))

    if digest(shown) == digest(answered):
        assert state == ("yes" if yes else "no")
    else:
        assert state == "void"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    recipient=st.text(alphabet="DE0123456789ABCXYZ \u202e\u200b", min_size=1, max_size=12), yes=st.booleans()
)
def test_only_the_recipient_the_user_confirmed_is_ever_sent(
    grounded: ExecutionRequest, recipient: str, yes: bool
) -> None:
    answers = {**confirm(recipient, yes=yes), "arg:to_account": Answer(recipient, "user:alice", "a1")}
    changed = {**confirm(RECIPIENT, yes=yes), "arg:to_account": Answer(recipient, "user:alice", "a1")}

    confirmed = run(tool(), grounded, evidence(grounded, answers=answers))
    replayed = run(tool(), grounded, evidence(grounded, answers=changed))

    assert confirmed.verdict == ("execute" if yes else "block")
    assert confirmed.payload is not None and confirmed.payload["to_account"] == recipient
    if recipient != RECIPIENT:
        assert replayed.verdict == "ask"
        assert replayed.questions[0].shows == {
            "slot": "arg:to_account",
            "value": recipient,
            "digest": digest(recipient),
        }


def test_a_value_the_whole_payload_refuses_is_asked_again_and_never_put_to_the_user_to_confirm(
    grounded: ExecutionRequest,
) -> None:
    definition = tool()
    # Only the whole payload refuses it: the recipient is too long once the amount is 100 or more.
    definition["inputSchema"]["if"] = {"properties": {"amount": {"minimum": 100}}}
    definition["inputSchema"]["then"] = {"properties": {"to_account": {"maxLength": 5}}}

    record = run(definition, grounded, evidence(grounded, answers=confirm()))

    assert record.verdict == "ask"
    assert [(q.slot, q.kind) for q in record.questions] == [("arg:to_account", "value")]
    assert record.questions[0].reason is not None and "too long" in record.questions[0].reason
    assert not any(s.key == "confirm:arg:to_account" for s in record.slots)
    assert record.unmet == ()


def test_a_value_is_shown_to_the_user_exactly_with_unseen_characters_spelled_out(alice: Said) -> None:
    # A turn with a bidi control verifies nothing, so the value comes from the user's answer.
    said = Said("Send 120 from DE11 now")
    req = request(said, {"amount": (120, "120"), "from_account": ("DE11", "DE11")})
    answers = {"arg:to_account": Answer("DE02\u202e1203", "user:alice", "a1")}

    record = run(tool(), req, evidence(req, answers=answers))

    question = next(q for q in record.questions if q.kind == "confirmation")
    assert "DE02\\u202e1203" in question.text and "\u202e" not in question.text
    assert question.shows is not None and question.shows["value"] == "DE02\u202e1203"


def test_an_observation_from_the_future_is_an_error_not_fresh_for_ever(grounded: ExecutionRequest) -> None:
    ahead = observed(grounded, 500, age_s=-3600)

    record = run(tool(), grounded, Evidence(now=NOW, observations=ahead, answers=confirm()))

    assert record.verdict == "hold" and record.fresh_until is None
    assert record.slot("cond:balance_covers_amount").findings[-1].outcome == "error"


# ---- a real catalog: tau-bench's "explicit user confirmation (yes)" --------------------------------------


@pytest.mark.skipif(not catalogs_present(), reason="the shared catalogs are not beside the repo")
def test_tau_bench_explicit_user_confirmation_is_the_users_consent_to_the_exchange_as_shown() -> None:
    tool = dict(next(t for server, t in catalog_tools() if t["name"] == "exchange_delivered_order_items"))
    side_car = {
        "state_change": "the order's items are exchanged; a delivered order is exchanged or returned once",
        "prose_reviewed": True,
        "consent": "Please confirm the exchange details (yes/no).",
    }
    plan = compile_plan(contract_from_mcp("retail", tool, extension=side_car))
    grounded = grounded_request(tool)

    asked = preflight(plan, grounded.request, grounded.evidence)
    question = asked.questions[0]
    assert asked.verdict == "ask" and question.kind == "consent"
    assert question.shows is not None and question.shows["payload"] == grounded.expected_payload()
    yes = Answer(consent_answer(grounded.expected_payload()), "user:alice", "k1")
    done = preflight(
        plan,
        grounded.request,
        replace(grounded.evidence, answers={**grounded.evidence.answers, "consent:call": yes}),
    )

    assert done.verdict == "execute", done.reasons
    assert done.payload == grounded.expected_payload()


def test_an_action_an_approver_chose_needs_another_approvers_approval(grounded: ExecutionRequest) -> None:
    wire = tool(name="wire_funds")
    wire["x-preflight"]["state_change"] = "money leaves by wire"
    plans = [compile_plan(contract_from_mcp("bank", t)) for t in (tool(), wire)]
    chosen = {"fixed:tool": Answer(0, "user:carol", "t1"), **confirm()}
    evidence = Evidence(now=NOW, observations=observed(grounded, 500), answers=chosen)

    plan = select_tool(plans, grounded, evidence)
    assert not isinstance(plan, Record)
    record = preflight(plan, grounded, evidence, tool_source="user_answer")
    second = approve("fixed:tool", "bank/transfer_funds", approver="user:dave", at=NOW)
    approved = preflight(plan, grounded, replace(evidence, approvals=(second,)), tool_source="user_answer")

    assert record.verdict == "hold" and record.slot("fixed:tool").approval == "required"
    assert approved.verdict == "execute", approved.reasons
